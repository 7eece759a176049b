#include "compat.h"
#include <cublas_v2.h>
#include <time.h>
/* item 4: ITER x SGEMM 4096^3 with one sync at the end; prints BENCH line */
static double now() { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv)
{
	int N = 4096, IT = argc > 1 ? atoi(argv[1]) : 200;
	float *A, *B, *C; size_t sz = (size_t)N * N * 4;
	CK(cudaMalloc(&A, sz)); CK(cudaMalloc(&B, sz)); CK(cudaMalloc(&C, sz));
	CK(cudaMemset(A, 0, sz)); CK(cudaMemset(B, 0, sz));
	cublasHandle_t h; if (cublasCreate(&h)) { printf("FAIL cublasCreate\n"); return 1; }
	float al = 1, be = 0;
	for (int i = 0; i < 5; i++) cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &al, A, N, B, N, &be, C, N);
	CK(cudaDeviceSynchronize());
	double t0 = now();
	for (int i = 0; i < IT; i++)
		if (cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &al, A, N, B, N, &be, C, N)) { printf("FAIL sgemm\n"); return 1; }
	CK(cudaDeviceSynchronize());
	double t = now() - t0;
	printf("BENCH cublas_sgemm4096 iters=%d total_s=%.4f per_ms=%.4f tflops=%.2f\n", IT, t, t / IT * 1e3, 2.0 * N * N * (double)N * IT / t / 1e12);
	return 0;
}
