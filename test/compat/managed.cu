#include "compat.h"
/* unified memory: cudaMallocManaged, host and kernel access, prefetch */
__global__ void k(int *x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = x[i] * 7 + 1; }
int main()
{
	const int n = 1 << 20; int *m;
	CK(cudaMallocManaged(&m, n * sizeof(int)));
	for (int i = 0; i < n; i++) m[i] = i;
	k<<<n / 256, 256>>>(m, n); CKK();
	int bad = 0; for (int i = 0; i < n; i++) if (m[i] != i * 7 + 1) bad++;
	if (bad) g_fail = 1;
	result_hash("managed", m, n * sizeof(int));
	CK(cudaFree(m));
	return finish();
}
