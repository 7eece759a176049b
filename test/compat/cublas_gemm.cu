#include "compat.h"
#include <cublas_v2.h>
#define CB(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { \
	printf("FAIL %s:%d: %s -> cublas status %d\n", __FILE__, __LINE__, #x, (int)s_); exit(1); } } while (0)
/* SGEMM and DGEMM (column-major, op(A)=A^T for one case) vs a host reference */
template <typename T> double check(const T *A, const T *B, const T *C, int m, int n, int k, T al, T be, const T *C0, bool ta)
{
	double e = 0;
	for (int i = 0; i < m; i += 3) for (int j = 0; j < n; j += 5) {
		double r = 0;
		for (int p = 0; p < k; p++) r += (double)(ta ? A[i * k + p] : A[p * m + i]) * B[j * k + p];
		r = al * r + be * (double)C0[j * m + i];
		double x = relerr(C[j * m + i], r); if (x > e) e = x;
	}
	return e;
}
template <typename T> void run(cublasHandle_t h, const char *name, int m, int n, int k, bool ta, double tol)
{
	T *A = (T *)malloc(sizeof(T) * m * k), *B = (T *)malloc(sizeof(T) * k * n), *C = (T *)malloc(sizeof(T) * m * n), *C0 = (T *)malloc(sizeof(T) * m * n);
	uint32_t s = 123; for (int i = 0; i < m * k; i++) A[i] = frand(&s);
	for (int i = 0; i < k * n; i++) B[i] = frand(&s);
	for (int i = 0; i < m * n; i++) C0[i] = frand(&s);
	T *dA, *dB, *dC; T al = (T)1.5, be = (T)0.25;
	CK(cudaMalloc(&dA, sizeof(T) * m * k)); CK(cudaMalloc(&dB, sizeof(T) * k * n)); CK(cudaMalloc(&dC, sizeof(T) * m * n));
	CB(cublasSetMatrix(ta ? k : m, ta ? m : k, sizeof(T), A, ta ? k : m, dA, ta ? k : m));
	CB(cublasSetMatrix(k, n, sizeof(T), B, k, dB, k));
	CB(cublasSetVector(m * n, sizeof(T), C0, 1, dC, 1));
	cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N; int lda = ta ? k : m;
	if (sizeof(T) == 4) CB(cublasSgemm(h, opa, CUBLAS_OP_N, m, n, k, (float *)&al, (float *)dA, lda, (float *)dB, k, (float *)&be, (float *)dC, m));
	else CB(cublasDgemm(h, opa, CUBLAS_OP_N, m, n, k, (double *)&al, (double *)dA, lda, (double *)dB, k, (double *)&be, (double *)dC, m));
	CK(cudaDeviceSynchronize());
	CB(cublasGetMatrix(m, n, sizeof(T), dC, m, C, m));
	verdict(name, check(A, B, C, m, n, k, al, be, C0, ta), tol);
	char nb[64]; snprintf(nb, sizeof nb, "%s_bits", name);
	printf("INFO %s fnv=%016llx\n", nb, (unsigned long long)fnv(C, sizeof(T) * m * n));
	cudaFree(dA); cudaFree(dB); cudaFree(dC);
}
int main()
{
	cublasHandle_t h; CB(cublasCreate(&h));
	int ver = 0; CB(cublasGetVersion(h, &ver)); printf("INFO cublas %d\n", ver);
	run<float>(h, "sgemm_NN_512x384x256", 512, 384, 256, false, 1e-4);
	run<float>(h, "sgemm_TN_1000x999x777", 1000, 999, 777, true, 1e-4);
	run<double>(h, "dgemm_NN_512x384x256", 512, 384, 256, false, 1e-12);
	run<double>(h, "dgemm_TN_333x555x444", 333, 555, 444, true, 1e-12);
	CB(cublasDestroy(h));
	return finish();
}
