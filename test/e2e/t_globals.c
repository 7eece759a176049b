/* Module globals: cuModuleGetGlobal on g_scale and g_counter, write
 * g_scale with cuMemcpyHtoD, run scale_by_global, read g_counter back. */
#include "common.h"

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	primary_ctx(0, NULL);
	CUmodule mod = load_test_module();
	CUfunction f = get_func(mod, "scale_by_global");

	CUdeviceptr gscale = 0, gcount = 0;
	size_t ssize = 0, csize = 0;
	CK(cuModuleGetGlobal(&gscale, &ssize, mod, "g_scale"));
	CK(cuModuleGetGlobal(&gcount, &csize, mod, "g_counter"));
	CHECK(gscale != 0 && gcount != 0 && gscale != gcount, "global addresses %#llx %#llx",
	      (unsigned long long)gscale, (unsigned long long)gcount);
	CHECK(ssize == sizeof(float), "g_scale size %zu", ssize);
	CHECK(csize == sizeof(int), "g_counter size %zu", csize);
	/* either output may be NULL */
	CUdeviceptr p2 = 0;
	CK(cuModuleGetGlobal(&p2, NULL, mod, "g_scale"));
	CHECK(p2 == gscale, "second lookup gives %#llx, first %#llx", (unsigned long long)p2,
	      (unsigned long long)gscale);
	size_t s2 = 0;
	CK(cuModuleGetGlobal(NULL, &s2, mod, "g_counter"));
	CHECK(s2 == sizeof(int), "size-only lookup %zu", s2);
	CUdeviceptr nope;
	size_t nsz;
	EXPECT_RC(cuModuleGetGlobal(&nope, &nsz, mod, "no_such_global"), CUDA_ERROR_NOT_FOUND);

	const int n = 1000 + 7;
	float *x = xmalloc(n * sizeof(float)), *out = xmalloc(n * sizeof(float));
	for (int i = 0; i < n; i++)
		x[i] = (float)(i - 500) * 0.5f;
	CUdeviceptr dx;
	CK(cuMemAlloc(&dx, n * sizeof(float)));
	CK(cuMemcpyHtoD(dx, x, n * sizeof(float)));

	float scale = 2.5f;
	int zero = 0;
	CK(cuMemcpyHtoD(gscale, &scale, sizeof(scale)));
	CK(cuMemcpyHtoD(gcount, &zero, sizeof(zero)));
	float back = 0;
	CK(cuMemcpyDtoH(&back, gscale, sizeof(back)));
	CHECK(back == 2.5f, "g_scale reads back %g", back);

	int nn = n;
	void *args[] = { &dx, &nn };
	launch1d(f, (unsigned)n, NULL, args);
	CK(cuCtxSynchronize());
	int counter = -1;
	CK(cuMemcpyDtoH(&counter, gcount, sizeof(counter)));
	CHECK(counter == n, "g_counter = %d after one launch over %d elements", counter, n);
	CK(cuMemcpyDtoH(out, dx, n * sizeof(float)));
	for (int i = 0; i < n; i++)
		CHECK(out[i] == x[i] * 2.5f, "x[%d] = %g, want %g", i, out[i], x[i] * 2.5f);

	/* again with another scale: the counter accumulates */
	scale = -0.5f;
	CK(cuMemcpyHtoD(gscale, &scale, sizeof(scale)));
	launch1d(f, (unsigned)n, NULL, args);
	CK(cuCtxSynchronize());
	CK(cuMemcpyDtoH(&counter, gcount, sizeof(counter)));
	CHECK(counter == 2 * n, "g_counter = %d after two launches, want %d", counter, 2 * n);
	CK(cuMemcpyDtoH(out, dx, n * sizeof(float)));
	for (int i = 0; i < n; i++)
		CHECK(out[i] == x[i] * 2.5f * -0.5f, "x[%d] = %g after the second launch", i, out[i]);
	result("globals", out, n * sizeof(float));

	/* a fresh load of the module has its own, zero-initialised globals */
	CUmodule mod2 = load_test_module();
	CUdeviceptr gcount2;
	CK(cuModuleGetGlobal(&gcount2, NULL, mod2, "g_counter"));
	CHECK(gcount2 != gcount, "a second module instance shares g_counter");
	int c2 = -1;
	CK(cuMemcpyDtoH(&c2, gcount2, sizeof(c2)));
	CHECK(c2 == 0, "second module's g_counter = %d, want 0", c2);
	CK(cuModuleUnload(mod2));

	CK(cuMemFree(dx));
	CK(cuModuleUnload(mod));
	primary_ctx_release(0);
	free(x); free(out);
	say("PASS");
	return 0;
}
