/* Error names and strings, frees of a null pointer (no error, as
 * free(NULL)), and a driver function rgpu does not implement
 * (cuMipmappedArrayCreate: mipmapped arrays): CUDA_ERROR_NOT_SUPPORTED through rgpu, no crash.  With a
 * real driver it simply works. */
#include "common.h"

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	const char *s = NULL;
	/* usable before cuInit */
	CK(cuGetErrorName(CUDA_SUCCESS, &s));
	CHECK(s && strcmp(s, "CUDA_SUCCESS") == 0, "name of 0 is '%s'", s ? s : "(null)");

	static const struct { CUresult rc; const char *name; const char *text; } known[] = {
		{ CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument" },
		{ CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory" },
		{ CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error" },
		{ CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready" },
		{ CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "illegal memory access was encountered" },
		{ CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported" },
		{ CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found" },
	};
	for (unsigned i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
		s = NULL;
		CK(cuGetErrorName(known[i].rc, &s));
		CHECK(s && strcmp(s, known[i].name) == 0, "cuGetErrorName(%d) = '%s', want '%s'",
		      (int)known[i].rc, s ? s : "(null)", known[i].name);
		s = NULL;
		CK(cuGetErrorString(known[i].rc, &s));
		CHECK(s && strstr(s, known[i].text) != NULL, "cuGetErrorString(%s) = '%s', want '%s'",
		      known[i].name, s ? s : "(null)", known[i].text);
	}
	s = "untouched";
	CUresult rc = cuGetErrorName((CUresult)12345, &s);
	CHECK(rc == CUDA_ERROR_INVALID_VALUE, "cuGetErrorName(12345) returned %d", (int)rc);
	CHECK(s == NULL, "cuGetErrorName(12345) left '%s'", s ? s : "");
	s = "untouched";
	rc = cuGetErrorString((CUresult)12345, &s);
	CHECK(rc == CUDA_ERROR_INVALID_VALUE, "cuGetErrorString(12345) returned %d", (int)rc);

	/* a call before cuInit */
	int n;
	rc = cuDeviceGetCount(&n);
	CHECK(rc == CUDA_ERROR_NOT_INITIALIZED, "cuDeviceGetCount before cuInit returned %s",
	      cu_name(rc));

	primary_ctx(0, NULL);
	/* a context call with no context current */
	CK(cuCtxSetCurrent(NULL));
	CUdeviceptr p;
	EXPECT_RC(cuMemAlloc(&p, 16), CUDA_ERROR_INVALID_CONTEXT);
	primary_ctx(0, NULL);

	/* an entry point rgpu does not serve: mipmapped arrays */
	CUmipmappedArray a = NULL;
	CUDA_ARRAY3D_DESCRIPTOR ad = { .Width = 16, .Height = 16, .Format = CU_AD_FORMAT_FLOAT,
				       .NumChannels = 1 };
	rc = cuMipmappedArrayCreate(&a, &ad, 2);
	say("cuMipmappedArrayCreate: %s", cu_name(rc));
	if (via_rgpu()) {
		CHECK(rc == CUDA_ERROR_NOT_SUPPORTED, "cuMipmappedArrayCreate through rgpu returned %s, "
		      "expected CUDA_ERROR_NOT_SUPPORTED", cu_name(rc));
	} else {
		CHECK(rc == CUDA_SUCCESS, "cuMipmappedArrayCreate on the real driver returned %s",
		      cu_name(rc));
		CK(cuMipmappedArrayDestroy(a));
	}
	/* freeing nothing is no error, as free(NULL) (cuSPARSE's destroy
	 * functions free what they never allocated with cuMemFreeAsync) */
	EXPECT_RC(cuMemFree(0), CUDA_SUCCESS);
	EXPECT_RC(cuMemFreeHost(NULL), CUDA_SUCCESS);
	EXPECT_RC(cuMemFreeAsync(0, NULL), CUDA_SUCCESS);
	CK(cuCtxSynchronize());
	/* the session is fine afterwards */
	CK(cuMemAlloc(&p, 16));
	CK(cuMemFree(p));
	primary_ctx_release(0);
	say("PASS");
	return 0;
}
