/* Managed memory (cuMemAllocManaged) and mapped pinned host memory
 * (cuMemHostAlloc + cuMemHostGetDevicePointer): the host writes, a kernel
 * reads and writes, the host sees the result after a synchronisation;
 * repeated, so both directions of the coherence protocol are exercised
 * more than once.  Through rgpu the device copy sits at the same address
 * as the host copy. */
#include "common.h"

static void check_vals(const float *c, const float *a, const float *b, int n, const char *what)
{
	for (int i = 0; i < n; i++) {
		float want = a[i] + b[i];
		if (memcmp(&c[i], &want, sizeof(float)) != 0)
			fail("%s: c[%d] = %.9g, want %.9g", what, i, c[i], want);
	}
}

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	const int n = (1 << 20) + 7;
	size_t bytes = (size_t)n * sizeof(float);
	primary_ctx(0, NULL);
	CUmodule mod = load_test_module();
	CUfunction add = get_func(mod, "vec_add");
	CUfunction fill = get_func(mod, "fill_u32");

	/* ---- managed ---- */
	CUdeviceptr ma, mb, mc;
	CUresult rc = cuMemAllocManaged(&ma, bytes, CU_MEM_ATTACH_GLOBAL);
	if (rc == CUDA_ERROR_NOT_SUPPORTED)
		skip("managed memory not supported here");
	CK(rc);
	CK(cuMemAllocManaged(&mb, bytes, CU_MEM_ATTACH_GLOBAL));
	CK(cuMemAllocManaged(&mc, bytes, CU_MEM_ATTACH_GLOBAL));
	float *a = (float *)(uintptr_t)ma, *b = (float *)(uintptr_t)mb, *c = (float *)(uintptr_t)mc;
	uint32_t seed = 7;
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < n; i++) {
			a[i] = lcg_float(&seed) * 100.0f;
			b[i] = (float)(i % 977) + (float)round;
			c[i] = -1.0f;
		}
		int nn = n;
		void *args[] = { &ma, &mb, &mc, &nn };
		launch1d(add, (unsigned)n, NULL, args);
		CK(cuCtxSynchronize());
		check_vals(c, a, b, n, "managed");
	}
	/* a copy into managed memory is seen by the next kernel */
	float *h = xmalloc(bytes);
	for (int i = 0; i < n; i++)
		h[i] = (float)i;
	CK(cuMemcpy(ma, (CUdeviceptr)(uintptr_t)h, bytes));
	int nn = n;
	void *args[] = { &ma, &ma, &mc, &nn };
	launch1d(add, (unsigned)n, NULL, args);
	CK(cuStreamSynchronize(NULL));
	for (int i = 0; i < n; i++)
		if (c[i] != 2.0f * (float)i)
			fail("after cuMemcpy into managed memory: c[%d] = %g, want %g", i, c[i], 2.0f * i);
	result("managed", c, bytes);
	/* attaching managed memory to a stream (UnifiedMemoryPerf does) */
	CUstream st;
	CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
	CK(cuStreamAttachMemAsync(st, mb, 0, CU_MEM_ATTACH_SINGLE));
	CK(cuStreamAttachMemAsync(st, mb, 0, CU_MEM_ATTACH_HOST));
	CK(cuStreamAttachMemAsync(NULL, mb, 0, CU_MEM_ATTACH_GLOBAL));
	CK(cuStreamSynchronize(st));
	EXPECT_RC(cuStreamAttachMemAsync(st, mb, 0, 0x7), CUDA_ERROR_INVALID_VALUE);
	EXPECT_RC(cuStreamAttachMemAsync(NULL, mb, 0, CU_MEM_ATTACH_SINGLE), CUDA_ERROR_INVALID_VALUE);
	CUdeviceptr plain;
	CK(cuMemAlloc(&plain, 4096));
	EXPECT_RC(cuStreamAttachMemAsync(st, plain, 0, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE);
	CK(cuMemFree(plain));
	/* the memory is still the kernels' and the host's after it */
	launch1d(add, (unsigned)n, st, args);
	CK(cuStreamSynchronize(st));
	for (int i = 0; i < n; i++)
		if (c[i] != 2.0f * (float)i)
			fail("after cuStreamAttachMemAsync: c[%d] = %g, want %g", i, c[i], 2.0f * i);
	CK(cuStreamDestroy(st));
	CK(cuMemFree(ma));
	CK(cuMemFree(mb));
	CK(cuMemFree(mc));

	/* ---- the host touches managed memory while kernels run ----
	 * A kernel adds one to the first half behind a 50 ms wait; the host,
	 * before any synchronisation, reads the first half and adds one to
	 * the second.  On a GPU with concurrent managed access both happen at
	 * once; through rgpu the host waits for the kernels.  Either way both
	 * halves keep their additions (the host's are not lost to the device
	 * copy). */
	/* (rgpu without write tracking, as under valgrind, cannot hold the
	 * host: then the host writes its copy unordered, as documented) */
	const char *pre = getenv("LD_PRELOAD"), *wt = getenv("RGPU_WRITE_TRACKING");
	int untracked = via_rgpu() && ((pre && strstr(pre, "vgpreload")) || (wt && !strcmp(wt, "0")));
	if (!untracked) {
		CUfunction inc = get_func(mod, "inc_i32");
		CUfunction busy = get_func(mod, "busy_wait_ns");
		const int m = 1 << 16;
		CUdeviceptr mi;
		CK(cuMemAllocManaged(&mi, (size_t)m * 4, CU_MEM_ATTACH_GLOBAL));
		int *w = (int *)(uintptr_t)mi;
		for (int i = 0; i < m; i++)
			w[i] = i;
		unsigned long long ns = 50ull * 1000 * 1000;
		void *ba[] = { &ns };
		CK(cuLaunchKernel(busy, 1, 1, 1, 1, 1, 1, 0, NULL, ba, NULL));
		int half = m / 2;
		void *ia[] = { &mi, &half };
		launch1d(inc, (unsigned)half, NULL, ia);
		for (int i = half; i < m; i++)
			w[i] += 1; /* while the kernels may still run */
		CK(cuCtxSynchronize());
		for (int i = 0; i < m; i++)
			if (w[i] != i + 1)
				fail("host and kernel on managed memory at once: w[%d] = %d, want %d", i, w[i], i + 1);
		/* and the device sees the host's additions at the next launch */
		launch1d(inc, (unsigned)m, NULL, (void *[]){ &mi, (void *)&m });
		CK(cuCtxSynchronize());
		for (int i = 0; i < m; i++)
			if (w[i] != i + 2)
				fail("after the next launch: w[%d] = %d, want %d", i, w[i], i + 2);
		CK(cuMemFree(mi));
	}

	/* ---- mapped pinned host memory ---- */
	unsigned *hp;
	CK(cuMemHostAlloc((void **)&hp, bytes, CU_MEMHOSTALLOC_DEVICEMAP));
	CUdeviceptr dp;
	CK(cuMemHostGetDevicePointer(&dp, hp, 0));
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < n; i++)
			hp[i] = 0xdeadbeefu;
		unsigned v = 0x1234u + (unsigned)round;
		unsigned long long cnt = (unsigned long long)(n - 5);
		void *fa[] = { &dp, &v, &cnt };
		launch1d(fill, (unsigned)n, NULL, fa);
		CK(cuCtxSynchronize());
		for (int i = 0; i < n; i++) {
			unsigned want = i < n - 5 ? v : 0xdeadbeefu;
			if (hp[i] != want)
				fail("mapped round %d: hp[%d] = %#x, want %#x", round, i, hp[i], want);
		}
	}
	result("mapped", hp, bytes);
	CK(cuMemFreeHost(hp));
	CK(cuModuleUnload(mod));
	free(h);
	say("PASS");
	return 0;
}
