#include "compat.h"
#include <curand.h>
#include <curand_kernel.h>
#define CR(x) do { curandStatus_t r_ = (x); if (r_ != CURAND_STATUS_SUCCESS) { \
	printf("FAIL %s:%d: %s -> curand status %d\n", __FILE__, __LINE__, #x, (int)r_); exit(1); } } while (0)
/* host API (Philox, XORWOW, MRG32k3a, Sobol) and device API (curand_init in
 * a kernel); seeded, so bit-exact */
__global__ void dev(unsigned int *out, float *f, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x; if (i >= n) return;
	curandStatePhilox4_32_10_t st; curand_init(1234, i, 0, &st);
	out[i] = curand(&st); f[i] = curand_normal(&st);
}
int main()
{
	const int n = 1 << 20; float *d, *h = (float *)malloc(n * sizeof(float));
	CK(cudaMalloc(&d, n * sizeof(float)));
	struct { curandRngType_t t; const char *name; } g[] = {
		{CURAND_RNG_PSEUDO_PHILOX4_32_10, "curand_philox"}, {CURAND_RNG_PSEUDO_XORWOW, "curand_xorwow"},
		{CURAND_RNG_PSEUDO_MRG32K3A, "curand_mrg32k3a"}, {CURAND_RNG_QUASI_SOBOL32, "curand_sobol32"}};
	for (auto &x : g) {
		curandGenerator_t gen; CR(curandCreateGenerator(&gen, x.t));
		if (x.t != CURAND_RNG_QUASI_SOBOL32) CR(curandSetPseudoRandomGeneratorSeed(gen, 42));
		CR(curandGenerateUniform(gen, d, n)); CK(cudaDeviceSynchronize());
		CK(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
		double m = 0; for (int i = 0; i < n; i++) m += h[i]; m /= n;
		if (m < 0.49 || m > 0.51) { printf("INFO %s mean %f\n", x.name, m); g_fail = 1; }
		result_hash(x.name, h, n * sizeof(float));
		CR(curandDestroyGenerator(gen));
	}
	unsigned int *du; CK(cudaMalloc(&du, n * 4));
	dev<<<n / 256, 256>>>(du, d, n); CKK();
	unsigned int *hu = (unsigned int *)malloc(n * 4);
	CK(cudaMemcpy(hu, du, n * 4, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost));
	result_hash("curand_device_u32", hu, n * 4);
	result_hash("curand_device_normal", h, n * 4);
	return finish();
}
