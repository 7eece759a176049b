/* The context-independent (lazy-loading) path: cuLibraryLoadData,
 * cuLibraryGetKernel, cuKernelGetFunction, cuLaunchKernel, and
 * cuLibraryGetGlobal.  The library is loaded before any context exists, as
 * the CUDA runtime does it; T_LIBRARY_CTX_FIRST=1 makes a context current
 * first (isolates a failure of the context-free load). */
#include "common.h"

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	CK(cuInit(0));
	int ctx_first = env_long("T_LIBRARY_CTX_FIRST", 0) != 0;
	if (ctx_first)
		primary_ctx(0, NULL);
	CUlibrary lib;
	CK(cuLibraryLoadData(&lib, test_kernels_fatbin, NULL, NULL, 0, NULL, NULL, 0));
	CUkernel kadd, kscale;
	CK(cuLibraryGetKernel(&kadd, lib, "vec_add"));
	CK(cuLibraryGetKernel(&kscale, lib, "scale_by_global"));
	CUkernel knone;
	EXPECT_RC(cuLibraryGetKernel(&knone, lib, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
	/* not in the rgpu protocol: NOT_SUPPORTED is acceptable there */
	unsigned int count = 0;
	CUresult crc = cuLibraryGetKernelCount(&count, lib);
	if (!(via_rgpu() && crc == CUDA_ERROR_NOT_SUPPORTED)) {
		CK(crc);
		CHECK(count >= 9, "cuLibraryGetKernelCount = %u, the module has 9 kernels", count);
	}

	if (!ctx_first)
		primary_ctx(0, NULL);
	CUfunction fadd, fscale;
	CK(cuKernelGetFunction(&fadd, kadd));
	CK(cuKernelGetFunction(&fscale, kscale));

	const int n = 100003;
	size_t bytes = n * sizeof(float);
	float *a = xmalloc(bytes), *b = xmalloc(bytes), *c = xmalloc(bytes);
	for (int i = 0; i < n; i++) {
		a[i] = (float)i;
		b[i] = (float)(n - i) * 0.5f;
	}
	CUdeviceptr da, db, dc;
	CK(cuMemAlloc(&da, bytes));
	CK(cuMemAlloc(&db, bytes));
	CK(cuMemAlloc(&dc, bytes));
	CK(cuMemcpyHtoD(da, a, bytes));
	CK(cuMemcpyHtoD(db, b, bytes));
	int nn = n;
	void *args[] = { &da, &db, &dc, &nn };
	launch1d(fadd, (unsigned)n, NULL, args);
	CK(cuCtxSynchronize());
	CK(cuMemcpyDtoH(c, dc, bytes));
	for (int i = 0; i < n; i++)
		CHECK(c[i] == a[i] + b[i], "vec_add from a library: c[%d] = %g, want %g", i, c[i], a[i] + b[i]);
	result("library-vecadd", c, bytes);

	/* library globals in this context */
	CUdeviceptr gscale = 0, gcount = 0;
	size_t ss = 0, cs = 0;
	CK(cuLibraryGetGlobal(&gscale, &ss, lib, "g_scale"));
	CK(cuLibraryGetGlobal(&gcount, &cs, lib, "g_counter"));
	CHECK(ss == sizeof(float) && cs == sizeof(int), "global sizes %zu %zu", ss, cs);
	CUdeviceptr gn;
	size_t gsz;
	EXPECT_RC(cuLibraryGetGlobal(&gn, &gsz, lib, "no_such_global"), CUDA_ERROR_NOT_FOUND);
	float scale = 4.0f;
	int zero = 0;
	CK(cuMemcpyHtoD(gscale, &scale, sizeof(scale)));
	CK(cuMemcpyHtoD(gcount, &zero, sizeof(zero)));
	void *sargs[] = { &dc, &nn };
	launch1d(fscale, (unsigned)n, NULL, sargs);
	CK(cuCtxSynchronize());
	int counter = -1;
	CK(cuMemcpyDtoH(&counter, gcount, sizeof(counter)));
	CHECK(counter == n, "g_counter = %d, want %d (the kernel did not see the library's global?)",
	      counter, n);
	float *out = xmalloc(bytes);
	CK(cuMemcpyDtoH(out, dc, bytes));
	for (int i = 0; i < n; i++)
		CHECK(out[i] == c[i] * 4.0f, "scale_by_global: x[%d] = %g, want %g", i, out[i], c[i] * 4.0f);

	/* the library's module in this context: the same globals and
	 * kernels as the library's, one handle, the module of its kernels'
	 * functions */
	CUmodule lm, lm2, fm;
	CK(cuLibraryGetModule(&lm, lib));
	CK(cuLibraryGetModule(&lm2, lib));
	CHECK(lm == lm2, "cuLibraryGetModule gave two handles in one context");
	CUdeviceptr mscale = 0;
	size_t msz = 0;
	CK(cuModuleGetGlobal(&mscale, &msz, lm, "g_scale"));
	CHECK(mscale == gscale && msz == ss, "the module's g_scale is at 0x%llx, the library's at 0x%llx",
	      (unsigned long long)mscale, (unsigned long long)gscale);
	CK(cuFuncGetModule(&fm, fadd));
	CHECK(fm == lm, "cuFuncGetModule of a library kernel's function is not the library's module");
	CUfunction madd;
	CK(cuModuleGetFunction(&madd, lm, "vec_add"));
	CK(cuMemsetD32(dc, 0, (unsigned)n));
	void *margs[] = { &da, &db, &dc, &nn };
	launch1d(madd, (unsigned)n, NULL, margs);
	CK(cuCtxSynchronize());
	CK(cuMemcpyDtoH(out, dc, bytes));
	for (int i = 0; i < n; i++)
		CHECK(out[i] == a[i] + b[i], "vec_add from the library's module: c[%d] = %g, want %g", i, out[i],
		      a[i] + b[i]);
	if (via_rgpu())
		EXPECT_RC(cuModuleUnload(lm), CUDA_ERROR_NOT_PERMITTED); /* the library's */
	/* the kernels by enumeration: their names, the same handles */
	if (count) {
		CUkernel *ks = xmalloc(count * sizeof(*ks));
		CK(cuLibraryEnumerateKernels(ks, count, lib));
		int seen_add = 0;
		for (unsigned i = 0; i < count; i++) {
			const char *kn = NULL;
			CK(cuKernelGetName(&kn, ks[i]));
			if (kn && !strcmp(kn, "vec_add")) {
				seen_add = 1;
				CHECK(ks[i] == kadd, "vec_add enumerated as another handle than cuLibraryGetKernel's");
			}
		}
		CHECK(seen_add, "cuLibraryEnumerateKernels did not list vec_add (%u kernels)", count);
		free(ks);
	}

	CK(cuMemFree(da));
	CK(cuMemFree(db));
	CK(cuMemFree(dc));
	CK(cuLibraryUnload(lib));
	primary_ctx_release(0);
	free(a); free(b); free(c); free(out);
	say("PASS");
	return 0;
}
