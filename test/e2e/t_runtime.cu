// The CUDA runtime (static cudart, nvcc's default) through the rgpu client:
// cudaMalloc, cudaMemcpy, cudaMemcpyAsync, cudaStreamCreate,
// cudaStreamSynchronize, cudaMemset, cudaEventRecord -- and no kernels, so
// it needs only the driver entry points cudart looks up with
// cuGetProcAddress and its export tables.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(call)                                                                   \
	do {                                                                       \
		cudaError_t e_ = (call);                                           \
		if (e_ != cudaSuccess) {                                           \
			fprintf(stderr, "t_runtime: FAIL: %s:%d: %s returned %s (%s)\n", \
				__FILE__, __LINE__, #call, cudaGetErrorName(e_),   \
				cudaGetErrorString(e_));                           \
			exit(1);                                                   \
		}                                                                  \
	} while (0)

static void fail(const char *what, size_t i, unsigned got, unsigned want)
{
	fprintf(stderr, "t_runtime: FAIL: %s: byte %zu = 0x%02x, want 0x%02x\n", what, i, got, want);
	exit(1);
}

int main()
{
	const size_t n = 5u * 1024 * 1024 + 13;
	std::vector<unsigned char> src(n), dst(n);
	for (size_t i = 0; i < n; i++)
		src[i] = (unsigned char)(i * 7 + (i >> 12));

	void *d1 = nullptr, *d2 = nullptr;
	CK(cudaMalloc(&d1, n));
	CK(cudaMalloc(&d2, n));
	CK(cudaMemcpy(d1, src.data(), n, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(d2, d1, n, cudaMemcpyDeviceToDevice));
	CK(cudaMemcpy(dst.data(), d2, n, cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < n; i++)
		if (dst[i] != src[i])
			fail("cudaMemcpy round trip", i, dst[i], src[i]);
	printf("t_runtime: cudaMemcpy round trip ok\n");

	cudaStream_t s;
	CK(cudaStreamCreate(&s));
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	CK(cudaEventRecord(e0, s));
	CK(cudaMemset(d1, 0xa5, n));
	CK(cudaMemset(d2, 0, n));
	CK(cudaStreamSynchronize(0));
	CK(cudaMemcpyAsync(d2, src.data(), n / 2, cudaMemcpyHostToDevice, s));
	CK(cudaMemcpyAsync(dst.data(), d1, n, cudaMemcpyDeviceToHost, s));
	CK(cudaEventRecord(e1, s));
	CK(cudaStreamSynchronize(s));
	CK(cudaEventSynchronize(e1));
	for (size_t i = 0; i < n; i++)
		if (dst[i] != 0xa5)
			fail("cudaMemset + cudaMemcpyAsync", i, dst[i], 0xa5);
	CK(cudaMemcpy(dst.data(), d2, n, cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < n; i++) {
		unsigned want = i < n / 2 ? src[i] : 0;
		if (dst[i] != want)
			fail("cudaMemcpyAsync half copy", i, dst[i], want);
	}
	float ms = -1;
	CK(cudaEventElapsedTime(&ms, e0, e1));
	if (ms < 0 || ms > 60000) {
		fprintf(stderr, "t_runtime: FAIL: elapsed %g ms\n", ms);
		return 1;
	}
	printf("t_runtime: async copies ok (%.3f ms)\n", ms);
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
	CK(cudaStreamDestroy(s));
	CK(cudaFree(d1));
	CK(cudaFree(d2));
	printf("t_runtime: PASS\n");
	return 0;
}
