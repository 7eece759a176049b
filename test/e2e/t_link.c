/* The JIT linker and JIT options:
 *  - cuLinkCreate (with log buffers) + cuLinkAddData (the kernels as PTX)
 *    + cuLinkComplete give a cubin that loads, and its kernel runs right;
 *  - input that is not PTX fails (at adding or completing);
 *  - cuModuleLoadDataEx of PTX with JIT options (log buffers, a register
 *    cap) loads a module whose kernel runs right, logs NUL-terminated.
 * Exits non-zero on any mismatch. */
#include "common.h"

extern const unsigned char test_kernels_ptx[];

static void run_inc(CUmodule m)
{
	CUfunction inc = get_func(m, "inc_i32");
	const int n = 1000;
	CUdeviceptr d;
	CK(cuMemAlloc(&d, n * sizeof(int)));
	CK(cuMemsetD32(d, 41, n));
	int nn = n;
	void *args[] = { &d, &nn };
	launch1d(inc, (unsigned)n, NULL, args);
	CK(cuCtxSynchronize());
	int h[1000];
	CK(cuMemcpyDtoH(h, d, sizeof(h)));
	for (int i = 0; i < n; i++)
		if (h[i] != 42)
			fail("inc_i32 from the linked module: [%d] = %d, want 42", i, h[i]);
	CK(cuMemFree(d));
}

int main(int argc, char **argv)
{
	(void)argc;
	e2e_init(argv[0]);
	primary_ctx(0, NULL);
	char info[4096], err[4096];
	memset(info, 'x', sizeof(info));
	memset(err, 'x', sizeof(err));
	CUjit_option opts[] = { CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
				CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
				CU_JIT_LOG_VERBOSE };
	void *vals[] = { info, (void *)(uintptr_t)sizeof(info), err, (void *)(uintptr_t)sizeof(err),
			 (void *)(uintptr_t)1 };
	CUlinkState ls;
	CUresult rc = cuLinkCreate(5, opts, vals, &ls);
	if (rc == CUDA_ERROR_NOT_SUPPORTED)
		skip("no JIT linker on this device");
	CK(rc);
	size_t plen = strlen((const char *)test_kernels_ptx) + 1;
	CK(cuLinkAddData(ls, CU_JIT_INPUT_PTX, (void *)test_kernels_ptx, plen, "test_kernels.ptx", 0, NULL,
			 NULL));
	void *cubin = NULL;
	size_t size = 0;
	CK(cuLinkComplete(ls, &cubin, &size));
	CHECK(cubin && size > 0, "linked cubin: %p, %zu bytes", cubin, size);
	CHECK(memchr(info, 0, sizeof(info)) && memchr(err, 0, sizeof(err)), "logs not terminated");
	CUmodule m;
	CK(cuModuleLoadData(&m, cubin));
	CK(cuLinkDestroy(ls));
	run_inc(m);
	CK(cuModuleUnload(m));
	say("linked PTX: %zu-byte cubin, its kernel runs (info log: %.60s)", size, info);

	CK(cuLinkCreate(4, opts, vals, &ls));
	static const char junk[] = "this is not PTX";
	rc = cuLinkAddData(ls, CU_JIT_INPUT_PTX, (void *)junk, sizeof(junk), "junk", 0, NULL, NULL);
	if (rc == CUDA_SUCCESS)
		rc = cuLinkComplete(ls, &cubin, &size);
	CHECK(rc != CUDA_SUCCESS, "linking junk succeeded");
	CK(cuLinkDestroy(ls));
	say("junk input refused: %s", cu_name(rc));

	CUjit_option mopts[] = { CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
				 CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
				 CU_JIT_MAX_REGISTERS };
	void *mvals[] = { info, (void *)(uintptr_t)sizeof(info), err, (void *)(uintptr_t)sizeof(err),
			  (void *)(uintptr_t)64 };
	memset(info, 'x', sizeof(info));
	CK(cuModuleLoadDataEx(&m, test_kernels_ptx, 5, mopts, mvals));
	CHECK(memchr(info, 0, sizeof(info)) != NULL, "cuModuleLoadDataEx left the info log unterminated");
	run_inc(m);
	CK(cuModuleUnload(m));
	say("cuModuleLoadDataEx with JIT options");
	say("PASS");
	return 0;
}
