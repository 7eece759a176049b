// A cuBLAS SGEMM through the runtime (static cudart, dynamic cuBLAS): the
// program tools/tracer/README.md traces.  Prints PASS when C = A*B checks.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <vector>

int main()
{
	const int n = 256;
	std::vector<float> a(n * n), b(n * n), c(n * n);
	for (int i = 0; i < n * n; i++) {
		a[i] = (float)((i * 7) % 13) / 13.0f;
		b[i] = (float)((i * 5) % 11) / 11.0f;
	}
	float *da, *db, *dc;
	if (cudaMalloc(&da, sizeof(float) * n * n) || cudaMalloc(&db, sizeof(float) * n * n) ||
	    cudaMalloc(&dc, sizeof(float) * n * n)) {
		printf("sgemm: cudaMalloc failed\n");
		return 1;
	}
	cudaMemcpy(da, a.data(), sizeof(float) * n * n, cudaMemcpyHostToDevice);
	cudaMemcpy(db, b.data(), sizeof(float) * n * n, cudaMemcpyHostToDevice);
	cublasHandle_t h;
	cublasStatus_t st = cublasCreate(&h);
	if (st) {
		printf("sgemm: cublasCreate %d\n", (int)st);
		return 1;
	}
	const float one = 1, zero = 0;
	st = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, da, n, db, n, &zero, dc, n);
	if (st) {
		printf("sgemm: cublasSgemm %d\n", (int)st);
		return 1;
	}
	cudaError_t e = cudaMemcpy(c.data(), dc, sizeof(float) * n * n, cudaMemcpyDeviceToHost);
	if (e) {
		printf("sgemm: %s\n", cudaGetErrorString(e));
		return 1;
	}
	double maxerr = 0;
	for (int i = 0; i < n; i += 17)
		for (int j = 0; j < n; j += 13) {
			double s = 0;
			for (int k = 0; k < n; k++)
				s += (double)a[k * n + i] * b[j * n + k];
			maxerr = fmax(maxerr, fabs(s - c[j * n + i]));
		}
	cublasDestroy(h);
	printf("sgemm: max error %g: %s\n", maxerr, maxerr < 1e-2 ? "PASS" : "FAIL");
	return maxerr < 1e-2 ? 0 : 1;
}
