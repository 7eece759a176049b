#include "compat.h"
/* zero-copy: cudaHostAlloc(cudaHostAllocMapped) + cudaHostGetDevicePointer,
 * a kernel reading and writing host memory directly */
__global__ void inc(int *x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = x[i] * 2 + 1; }
int main()
{
	const int n = 1 << 16; int *h, *dp;
	CK(cudaSetDeviceFlags(cudaDeviceMapHost));
	CK(cudaHostAlloc(&h, n * sizeof(int), cudaHostAllocMapped));
	for (int i = 0; i < n; i++) h[i] = i;
	CK(cudaHostGetDevicePointer(&dp, h, 0));
	inc<<<n / 256, 256>>>(dp, n); CKK();
	int bad = 0; for (int i = 0; i < n; i++) if (h[i] != i * 2 + 1) bad++;
	if (bad) g_fail = 1;
	result_hash("mapped", h, n * sizeof(int));
	CK(cudaFreeHost(h));
	return finish();
}
