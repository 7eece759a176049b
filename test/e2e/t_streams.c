/* Streams and events.  Stream A: event start, busy_wait_ns(T_BUSY_MS,
 * default 20 ms), fill_u32(41), event end.  cuStreamQuery(A) must say
 * CUDA_ERROR_NOT_READY while it spins.  Stream B waits for `end` and then
 * runs inc_i32: the data is 42 only if B really waited (without the wait it
 * would be 41: inc first, fill second).  Elapsed time start..end must be
 * at least the spin time and under 2 s. */
#include "common.h"

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	long busy_ms = env_long("T_BUSY_MS", 20);
	primary_ctx(0, NULL);
	CUmodule mod = load_test_module();
	CUfunction fbusy = get_func(mod, "busy_wait_ns");
	CUfunction ffill = get_func(mod, "fill_u32");
	CUfunction finc = get_func(mod, "inc_i32");

	const int n = 4096;
	CUdeviceptr d;
	CK(cuMemAlloc(&d, n * sizeof(int)));
	CK(cuMemsetD32(d, 0, n));
	CK(cuCtxSynchronize());

	CUstream A, B;
	CK(cuStreamCreate(&A, CU_STREAM_NON_BLOCKING));
	CK(cuStreamCreate(&B, CU_STREAM_NON_BLOCKING));
	CUevent start, end;
	CK(cuEventCreate(&start, CU_EVENT_DEFAULT));
	CK(cuEventCreate(&end, CU_EVENT_DEFAULT));

	/* both streams start idle */
	EXPECT_RC(cuStreamQuery(A), CUDA_SUCCESS);
	EXPECT_RC(cuStreamQuery(B), CUDA_SUCCESS);

	unsigned long long ns = (unsigned long long)busy_ms * 1000000ull;
	void *busy_args[] = { &ns };
	unsigned v = 41;
	unsigned long long cnt = (unsigned long long)n;
	void *fill_args[] = { &d, &v, &cnt };
	int nn = n;
	void *inc_args[] = { &d, &nn };

	double t0 = now_ms();
	CK(cuEventRecord(start, A));
	CK(cuLaunchKernel(fbusy, 1, 1, 1, 1, 1, 1, 0, A, busy_args, NULL));
	CUresult q = cuStreamQuery(A);
	double tq = now_ms() - t0;
	if (q != CUDA_ERROR_NOT_READY)
		fail("cuStreamQuery(A) during a %ld ms spin returned %s (%.1f ms after the launch), "
		     "expected CUDA_ERROR_NOT_READY", busy_ms, cu_name(q), tq);
	launch1d(ffill, (unsigned)n, A, fill_args);
	CK(cuEventRecord(end, A));
	CUresult eq = cuEventQuery(end);
	CHECK(eq == CUDA_ERROR_NOT_READY || eq == CUDA_SUCCESS, "cuEventQuery(end) returned %s",
	      cu_name(eq));
	CK(cuStreamWaitEvent(B, end, 0));
	launch1d(finc, (unsigned)n, B, inc_args);
	CK(cuStreamSynchronize(B));
	double tsync = now_ms() - t0;

	/* B waited for `end`, so A's work is done too */
	EXPECT_RC(cuEventQuery(end), CUDA_SUCCESS);
	CK(cuEventSynchronize(end));
	EXPECT_RC(cuStreamQuery(A), CUDA_SUCCESS);
	EXPECT_RC(cuStreamQuery(B), CUDA_SUCCESS);

	int *h = xmalloc(n * sizeof(int));
	CK(cuMemcpyDtoH(h, d, n * sizeof(int)));
	for (int i = 0; i < n; i++)
		if (h[i] != 42)
			fail("d[%d] = %d, want 42 (41: B did not wait for the event; 1: fill never ran)",
			     i, h[i]);

	float ms = -1.0f;
	CK(cuEventElapsedTime(&ms, start, end));
	say("spin %ld ms: elapsed %.3f ms (host saw %.1f ms to sync)", busy_ms, ms, tsync);
	CHECK(ms >= (float)busy_ms - 1.0f && ms < 2000.0f + (float)busy_ms,
	      "elapsed %.3f ms for a %ld ms spin", ms, busy_ms);
	CHECK(tsync >= (double)busy_ms - 1.0, "host waited only %.1f ms for a %ld ms spin", tsync, busy_ms);

	/* an event recorded on an idle stream completes */
	CUevent e3;
	CK(cuEventCreate(&e3, CU_EVENT_DISABLE_TIMING));
	CK(cuEventRecord(e3, B));
	CK(cuEventSynchronize(e3));
	EXPECT_RC(cuEventQuery(e3), CUDA_SUCCESS);
	/* timing from an event created without timing is an error */
	float bogus;
	CUresult rc = cuEventElapsedTime(&bogus, start, e3);
	CHECK(rc != CUDA_SUCCESS, "elapsed time with a DISABLE_TIMING event returned CUDA_SUCCESS");

	/* the NULL stream and a priority stream */
	int lo = 0, hi = 0;
	CK(cuCtxGetStreamPriorityRange(&lo, &hi));
	CUstream P;
	CK(cuStreamCreateWithPriority(&P, CU_STREAM_NON_BLOCKING, hi));
	launch1d(finc, (unsigned)n, P, inc_args);
	CK(cuStreamSynchronize(P));
	launch1d(finc, (unsigned)n, NULL, inc_args);
	CK(cuCtxSynchronize());
	CK(cuMemcpyDtoH(h, d, n * sizeof(int)));
	for (int i = 0; i < n; i++)
		CHECK(h[i] == 44, "after two more increments d[%d] = %d", i, h[i]);
	result("streams", h, n * sizeof(int));

	CK(cuEventDestroy(e3));
	CK(cuEventDestroy(start));
	CK(cuEventDestroy(end));
	CK(cuStreamDestroy(A));
	CK(cuStreamDestroy(B));
	CK(cuStreamDestroy(P));
	CK(cuMemFree(d));
	CK(cuModuleUnload(mod));
	primary_ctx_release(0);
	free(h);
	say("PASS");
	return 0;
}
