// A __managed__ variable in a default nvcc build (static cudart): cudart
// asks the driver for it (cuLibraryGetManaged) at its first call, and the
// host then reads and writes it in place.  Through rgpu the host side is
// mapped at the device's address and kept coherent at launches and
// synchronisations: its initial value (-DINIT_VALUE: the emulated device
// has no module data, so its build keeps 0), the host's write seen by a
// kernel, the kernel's seen by the host, a copy from the symbol seeing the
// host's latest write.  The kernel's name is one the emulated device runs;
// the -DINIT_VALUE build (real GPUs) adds one that names the variable.
// Then cudaDeviceReset and the device used again.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#ifndef INIT_VALUE
#define INIT_VALUE 0
#endif

__managed__ int g_managed = INIT_VALUE;

extern "C" __global__ void inc_i32(int *p, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		p[i] += 1;
}

#if INIT_VALUE
// (the real-GPU build) a kernel naming the variable itself
__global__ void add_direct(int v)
{
	if (threadIdx.x == 0 && blockIdx.x == 0)
		g_managed += v;
}
#endif

#define CK(call)                                                                             \
	do {                                                                                 \
		cudaError_t e_ = (call);                                                     \
		if (e_ != cudaSuccess) {                                                     \
			fprintf(stderr, "t_runtime_managed: FAIL: %s:%d: %s returned %s\n", __FILE__, \
				__LINE__, #call, cudaGetErrorName(e_));                      \
			exit(1);                                                             \
		}                                                                            \
	} while (0)

static void expect(const char *what, int got, int want)
{
	if (got != want) {
		fprintf(stderr, "t_runtime_managed: FAIL: %s: %d, want %d\n", what, got, want);
		exit(1);
	}
}

int main()
{
	CK(cudaFree(0));
	expect("the initial value, read on the host", g_managed, INIT_VALUE);
	int *p = nullptr;
	CK(cudaGetSymbolAddress((void **)&p, g_managed));
	if (p != &g_managed) {
		fprintf(stderr, "t_runtime_managed: FAIL: the symbol's address %p is not the host's %p\n",
			(void *)p, (void *)&g_managed);
		return 1;
	}
	g_managed = 41;
	inc_i32<<<1, 32>>>(p, 1);
	CK(cudaGetLastError());
	CK(cudaDeviceSynchronize());
	expect("after the host wrote 41 and a kernel added 1", g_managed, 42);
	g_managed = 7;
	int v = 0;
	CK(cudaMemcpyFromSymbol(&v, g_managed, sizeof(v)));
	expect("a copy from the symbol after the host wrote 7", v, 7);
	inc_i32<<<1, 32>>>(&g_managed, 1);
	CK(cudaStreamSynchronize(0));
	expect("after a second kernel", g_managed, 8);
#if INIT_VALUE
	g_managed = 100;
	add_direct<<<1, 32>>>(5);
	CK(cudaDeviceSynchronize());
	expect("after a kernel added 5 to the variable by name", g_managed, 105);
#endif
	// a reset (cudart keeps its primary context's handle and makes it
	// current again; the library and its variable outlive it)
	CK(cudaDeviceReset());
	int *d = nullptr;
	CK(cudaMalloc(&d, sizeof(int)));
	CK(cudaFree(d));
	g_managed = 5;
	inc_i32<<<1, 32>>>(&g_managed, 1);
	CK(cudaDeviceSynchronize());
	expect("after a reset, the host's 5 and a kernel's 1", g_managed, 6);
	printf("t_runtime_managed: PASS\n");
	return 0;
}
