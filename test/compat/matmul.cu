#include "compat.h"
#define T 16
__global__ void mm(const float *A, const float *B, float *C, int n)
{
	__shared__ float As[T][T], Bs[T][T];
	int r = blockIdx.y * T + threadIdx.y, c = blockIdx.x * T + threadIdx.x;
	float acc = 0;
	for (int k0 = 0; k0 < n; k0 += T) {
		As[threadIdx.y][threadIdx.x] = A[r * n + k0 + threadIdx.x];
		Bs[threadIdx.y][threadIdx.x] = B[(k0 + threadIdx.y) * n + c];
		__syncthreads();
		for (int k = 0; k < T; k++) acc = fmaf(As[threadIdx.y][k], Bs[k][threadIdx.x], acc);
		__syncthreads();
	}
	C[r * n + c] = acc;
}
int main()
{
	const int n = 512; size_t sz = (size_t)n * n * sizeof(float);
	float *A = (float *)malloc(sz), *B = (float *)malloc(sz), *C = (float *)malloc(sz);
	uint32_t s = 7;
	for (int i = 0; i < n * n; i++) { A[i] = frand(&s); B[i] = frand(&s); }
	float *dA, *dB, *dC;
	CK(cudaMalloc(&dA, sz)); CK(cudaMalloc(&dB, sz)); CK(cudaMalloc(&dC, sz));
	CK(cudaMemcpy(dA, A, sz, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dB, B, sz, cudaMemcpyHostToDevice));
	mm<<<dim3(n / T, n / T), dim3(T, T)>>>(dA, dB, dC, n); CKK();
	CK(cudaMemcpy(C, dC, sz, cudaMemcpyDeviceToHost));
	double e = 0;
	for (int i = 0; i < n; i += 7) for (int j = 0; j < n; j += 5) {
		double ref = 0; for (int k = 0; k < n; k++) ref += (double)A[i * n + k] * B[k * n + j];
		double r = relerr(C[i * n + j], ref); if (r > e) e = r;
	}
	verdict("matmul", e, 1e-4);
	result_hash("matmul_bits", C, sz);
	return finish();
}
