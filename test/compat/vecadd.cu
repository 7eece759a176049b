#include "compat.h"
__global__ void add(const float *a, const float *b, float *c, int n)
{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) c[i] = a[i] + b[i] * 2.0f; }
int main()
{
	const int n = 1 << 22; size_t sz = n * sizeof(float);
	float *a = (float *)malloc(sz), *b = (float *)malloc(sz), *c = (float *)malloc(sz);
	uint32_t s = 1;
	for (int i = 0; i < n; i++) { a[i] = frand(&s); b[i] = frand(&s); }
	float *da, *db, *dc;
	CK(cudaMalloc(&da, sz)); CK(cudaMalloc(&db, sz)); CK(cudaMalloc(&dc, sz));
	CK(cudaMemcpy(da, a, sz, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(db, b, sz, cudaMemcpyHostToDevice));
	add<<<(n + 255) / 256, 256>>>(da, db, dc, n); CKK();
	CK(cudaMemcpy(c, dc, sz, cudaMemcpyDeviceToHost));
	int bad = 0;
	for (int i = 0; i < n; i++) if (c[i] != a[i] + b[i] * 2.0f) bad++;
	if (bad) { printf("INFO %d wrong\n", bad); g_fail = 1; }
	result_hash("vecadd", c, sz);
	CK(cudaFree(da)); CK(cudaFree(db)); CK(cudaFree(dc));
	return finish();
}
