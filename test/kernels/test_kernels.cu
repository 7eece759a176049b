// Test kernels for the GPU suite; see test_kernels.h for the contract the
// emulated device mirrors.
#include "test_kernels.h"

#include <cstdio>

extern "C" {

__device__ float g_scale;
__device__ int g_counter;
__managed__ int g_managed = TEST_MANAGED_INIT;

__global__ void vec_add(const float *a, const float *b, float *c, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		c[i] = a[i] + b[i];
}

__global__ void matmul_tiled(const float *A, const float *B, float *C, int n)
{
	__shared__ float As[MATMUL_TILE][MATMUL_TILE];
	__shared__ float Bs[MATMUL_TILE][MATMUL_TILE];
	int row = blockIdx.y * MATMUL_TILE + threadIdx.y;
	int col = blockIdx.x * MATMUL_TILE + threadIdx.x;
	float acc = 0.0f;
	for (int t = 0; t < (n + MATMUL_TILE - 1) / MATMUL_TILE; t++) {
		int ac = t * MATMUL_TILE + threadIdx.x;
		int br = t * MATMUL_TILE + threadIdx.y;
		As[threadIdx.y][threadIdx.x] = (row < n && ac < n) ? A[row * n + ac] : 0.0f;
		Bs[threadIdx.y][threadIdx.x] = (br < n && col < n) ? B[br * n + col] : 0.0f;
		__syncthreads();
		for (int k = 0; k < MATMUL_TILE; k++)
			acc = fmaf(As[threadIdx.y][k], Bs[k][threadIdx.x], acc);
		__syncthreads();
	}
	if (row < n && col < n)
		C[row * n + col] = acc;
}

__global__ void axpy_struct(struct axpy_args args)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < args.n)
		args.y[i] += args.a * args.x[i] + (double)args.tag;
}

__global__ void scale_double(double *x, double s, int n, char bias)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		x[i] = x[i] * s + (double)bias;
}

__global__ void scale_by_global(float *x, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) {
		x[i] *= g_scale;
		atomicAdd(&g_counter, 1);
	}
}

__global__ void fill_u32(unsigned *p, unsigned v, unsigned long long n)
{
	unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		p[i] = v;
}

__global__ void inc_i32(int *p, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		p[i] += 1;
}

__global__ void busy_wait_ns(unsigned long long ns)
{
	unsigned long long start, now;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
	do {
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
	} while (now - start < ns);
}

__global__ void wait_flag(volatile int *flag, int *out, unsigned long long timeout_ns)
{
	unsigned long long start, now;
	int v;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
	while ((v = *flag) == 0) {
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
		if (now - start > timeout_ns) {
			*(volatile int *)out = -1;
			__threadfence_system();
			return;
		}
	}
	*(volatile int *)out = v + 1;
	__threadfence_system();
}

__global__ void illegal_write(int *p)
{
	*p = 1;
}

__global__ void print_lines(int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		printf("rgpu printf line %08d of %08d: abcdefghijklmnopqrstuvwxyz\n", i, n);
}

} // extern "C"
