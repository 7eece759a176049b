/* Two devices (RGPU_SERVERS lists two entries, possibly on two servers):
 * each gets its own data, vec_add runs on both concurrently, results are
 * checked per device. */
#include "common.h"

#define NDEV 2

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	CK(cuInit(0));
	int count = 0;
	CK(cuDeviceGetCount(&count));
	if (count < NDEV)
		skip("needs %d devices, found %d", NDEV, count);

	const int n = (1 << 18) + 5;
	size_t bytes = n * sizeof(float);
	CUcontext ctx[NDEV];
	CUmodule mod[NDEV];
	CUfunction f[NDEV];
	CUstream st[NDEV];
	CUdeviceptr da[NDEV], db[NDEV], dc[NDEV];
	float *a[NDEV], *b[NDEV], *c[NDEV];
	int nn = n;

	for (int d = 0; d < NDEV; d++) {
		CUdevice dev;
		CK(cuDeviceGet(&dev, d));
		CK(cuDevicePrimaryCtxRetain(&ctx[d], dev));
		CK(cuCtxSetCurrent(ctx[d]));
		CUdevice got;
		CK(cuCtxGetDevice(&got));
		CHECK(got == dev, "context of device %d reports device %d", d, (int)got);
		mod[d] = load_test_module();
		f[d] = get_func(mod[d], "vec_add");
		CK(cuStreamCreate(&st[d], CU_STREAM_NON_BLOCKING));
		a[d] = xmalloc(bytes);
		b[d] = xmalloc(bytes);
		c[d] = xmalloc(bytes);
		for (int i = 0; i < n; i++) {
			a[d][i] = (float)(i % 1000) + 1000.0f * (float)(d + 1);
			b[d][i] = (float)d - 0.25f * (float)(i % 17);
		}
		CK(cuMemAlloc(&da[d], bytes));
		CK(cuMemAlloc(&db[d], bytes));
		CK(cuMemAlloc(&dc[d], bytes));
		CK(cuMemcpyHtoDAsync(da[d], a[d], bytes, st[d]));
		CK(cuMemcpyHtoDAsync(db[d], b[d], bytes, st[d]));
	}
	/* launch on both before waiting for either */
	for (int d = 0; d < NDEV; d++) {
		CK(cuCtxSetCurrent(ctx[d]));
		void *args[] = { &da[d], &db[d], &dc[d], &nn };
		launch1d(f[d], (unsigned)n, st[d], args);
		CK(cuMemcpyDtoHAsync(c[d], dc[d], bytes, st[d]));
	}
	for (int d = 0; d < NDEV; d++) {
		CK(cuCtxSetCurrent(ctx[d]));
		CK(cuStreamSynchronize(st[d]));
		for (int i = 0; i < n; i++) {
			float want = a[d][i] + b[d][i];
			if (c[d][i] != want)
				fail("device %d: c[%d] = %g, want %g", d, i, c[d][i], want);
		}
		char what[32];
		snprintf(what, sizeof(what), "multi-dev%d", d);
		result(what, c[d], bytes);
		say("device %d ok", d);
	}
	/* a pointer of one device's context used from the other's is not the
	 * same memory: device 1 reads its own data at its own address */
	CK(cuCtxSetCurrent(ctx[1]));
	float first = 0;
	CK(cuMemcpyDtoH(&first, da[1], sizeof(first)));
	CHECK(first == a[1][0], "device 1 a[0] = %g, want %g", first, a[1][0]);

	for (int d = 0; d < NDEV; d++) {
		CUdevice dev;
		CK(cuCtxSetCurrent(ctx[d]));
		CK(cuMemFree(da[d]));
		CK(cuMemFree(db[d]));
		CK(cuMemFree(dc[d]));
		CK(cuStreamDestroy(st[d]));
		CK(cuModuleUnload(mod[d]));
		CK(cuDeviceGet(&dev, d));
		CK(cuCtxSetCurrent(NULL));
		CK(cuDevicePrimaryCtxRelease(dev));
		free(a[d]); free(b[d]); free(c[d]);
	}
	say("PASS");
	return 0;
}
