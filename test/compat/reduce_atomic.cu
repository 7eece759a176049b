#include "compat.h"
/* integer reductions: atomicAdd, atomicMax, warp shuffles, shared memory */
__global__ void red(const int *x, int n, unsigned long long *sum, int *mx, unsigned int *hist)
{
	__shared__ unsigned long long part[32];
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	int v = i < n ? x[i] : 0;
	if (i < n) { atomicMax(mx, v); atomicAdd(&hist[v & 63], 1u); }
	unsigned long long s = (unsigned long long)v;
	for (int o = 16; o; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
	if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
	__syncthreads();
	if (threadIdx.x == 0) {
		unsigned long long t = 0;
		for (int w = 0; w < (int)(blockDim.x >> 5); w++) t += part[w];
		atomicAdd(sum, t);
	}
}
int main()
{
	const int n = 10000019;
	int *x = (int *)malloc(n * sizeof(int)); uint32_t s = 3;
	unsigned long long hs = 0; int hm = 0; unsigned int hh[64] = {0};
	for (int i = 0; i < n; i++) { x[i] = lcg(&s) & 0xfffff; hs += x[i]; if (x[i] > hm) hm = x[i]; hh[x[i] & 63]++; }
	int *dx, *dm; unsigned long long *ds; unsigned int *dh;
	CK(cudaMalloc(&dx, n * sizeof(int))); CK(cudaMalloc(&ds, 8)); CK(cudaMalloc(&dm, 4)); CK(cudaMalloc(&dh, 256));
	CK(cudaMemcpy(dx, x, n * sizeof(int), cudaMemcpyHostToDevice));
	CK(cudaMemset(ds, 0, 8)); CK(cudaMemset(dm, 0, 4)); CK(cudaMemset(dh, 0, 256));
	red<<<(n + 511) / 512, 512>>>(dx, n, ds, dm, dh); CKK();
	unsigned long long gs; int gm; unsigned int gh[64];
	CK(cudaMemcpy(&gs, ds, 8, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(&gm, dm, 4, cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(gh, dh, 256, cudaMemcpyDeviceToHost));
	if (gs != hs || gm != hm || memcmp(gh, hh, 256)) { printf("INFO mismatch sum %llu/%llu max %d/%d\n", gs, hs, gm, hm); g_fail = 1; }
	printf("RESULT reduce sum=%llu max=%d\n", gs, gm);
	result_hash("reduce_hist", gh, sizeof(gh));
	return finish();
}
