/* vec_add on 1M floats in the primary context; bit-identical to the host.
 * T_DEVICE picks the device (default 0). */
#include "common.h"

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	int dev = (int)env_long("T_DEVICE", 0);
	const int n = 1 << 20;
	size_t bytes = (size_t)n * sizeof(float);

	primary_ctx(dev, NULL);
	CUmodule mod = load_test_module();
	CUfunction f = get_func(mod, "vec_add");

	float *a = xmalloc(bytes), *b = xmalloc(bytes), *c = xmalloc(bytes), *ref = xmalloc(bytes);
	uint32_t seed = 1;
	for (int i = 0; i < n; i++) {
		a[i] = (float)i * 0.37f + lcg_float(&seed);
		b[i] = 1.0f / (float)(i + 1) - lcg_float(&seed) * 1e-3f;
		ref[i] = a[i] + b[i];
		c[i] = -1.0f;
	}
	CUdeviceptr da, db, dc;
	CK(cuMemAlloc(&da, bytes));
	CK(cuMemAlloc(&db, bytes));
	CK(cuMemAlloc(&dc, bytes));
	CK(cuMemcpyHtoD(da, a, bytes));
	CK(cuMemcpyHtoD(db, b, bytes));
	CK(cuMemsetD32(dc, 0x7fc00000u, (size_t)n)); /* NaN: catches unwritten elements */
	int nn = n;
	void *args[] = { &da, &db, &dc, &nn };
	launch1d(f, (unsigned)n, NULL, args);
	CK(cuCtxSynchronize());
	CK(cuMemcpyDtoH(c, dc, bytes));

	int bad = 0;
	for (int i = 0; i < n; i++) {
		if (memcmp(&c[i], &ref[i], sizeof(float)) != 0) {
			if (bad < 5)
				fprintf(stderr, "c[%d] = %.9g, want %.9g\n", i, c[i], ref[i]);
			bad++;
		}
	}
	CHECK(bad == 0, "%d of %d elements differ", bad, n);
	result("vecadd", c, bytes);

	/* a second launch with n smaller than the grid: the tail stays put */
	int half = n / 2 + 3;
	void *args2[] = { &da, &da, &dc, &half };
	launch1d(f, (unsigned)n, NULL, args2);
	CK(cuCtxSynchronize());
	CK(cuMemcpyDtoH(c, dc, bytes));
	for (int i = 0; i < n; i++) {
		float want = i < half ? a[i] + a[i] : ref[i];
		if (memcmp(&c[i], &want, sizeof(float)) != 0)
			fail("second launch: c[%d] = %.9g, want %.9g", i, c[i], want);
	}

	/* the arguments in one buffer (extra, CU_LAUNCH_PARAM_BUFFER_*), at
	 * the kernel's layout: three pointers, then n */
	struct {
		CUdeviceptr a, b, c;
		int n;
	} packed = { db, db, dc, n };
	/* the parameters' size, not the struct's (the driver refuses the
	 * padding after n: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES on the H100) */
	size_t packed_size = offsetof(__typeof__(packed), n) + sizeof(int);
	void *extra[] = { CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &packed_size,
			  CU_LAUNCH_PARAM_END };
	CK(cuLaunchKernel(f, (unsigned)(n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, NULL, extra));
	CK(cuCtxSynchronize());
	CK(cuMemcpyDtoH(c, dc, bytes));
	for (int i = 0; i < n; i++) {
		float want = b[i] + b[i];
		if (memcmp(&c[i], &want, sizeof(float)) != 0)
			fail("launch with extra: c[%d] = %.9g, want %.9g", i, c[i], want);
	}

	CK(cuMemFree(da));
	CK(cuMemFree(db));
	CK(cuMemFree(dc));
	CK(cuModuleUnload(mod));
	primary_ctx_release(dev);
	free(a); free(b); free(c); free(ref);
	say("PASS");
	return 0;
}
