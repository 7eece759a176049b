/* RGPU_STATS and the calls the client answers without a round trip.
 *
 * Reads the client's counters (rgpu_stats_counter, found with dlsym in
 * the libcuda.so.1 this program runs with) around each call and checks
 * how many synchronous requests it sent: a synchronisation of work that
 * is known finished, a query of an event recorded before a copy to the
 * host came back, a context limit read twice, a function attribute set
 * to the value it has, an occupancy question asked twice: none.  At the
 * end it prints its totals as "COUNTERS calls=N sync=S async=A sent=B
 * received=R" after its last call, for run-e2e.sh to compare with the
 * line the library prints at exit.  T_STATS_OFF=1: RGPU_STATS is off, and
 * every counter must stay 0.  Against another libcuda.so.1: skipped. */
#include "common.h"

#include <dlfcn.h>

typedef unsigned long long (*counter_fn)(const char *);
static counter_fn counter;
static int off;

static unsigned long long sync_now(void) { return counter("sync"); }

/* the synchronous requests the calls between two checkpoints sent */
#define TRIPS(expect, what, ...)                                                        \
	do {                                                                           \
		unsigned long long s0_ = sync_now();                                   \
		__VA_ARGS__;                                                           \
		unsigned long long d_ = sync_now() - s0_;                              \
		CHECK(d_ == (off ? 0u : (unsigned long long)(expect)),                  \
		      "%s: %llu synchronous request(s), expected %d", what, d_, (expect)); \
	} while (0)

int main(int argc, char **argv)
{
	(void)argc;
	e2e_init(argv[0]);
	off = env_long("T_STATS_OFF", 0) != 0;
	counter = (counter_fn)dlsym(RTLD_DEFAULT, "rgpu_stats_counter");
	if (!counter)
		skip("not the rgpu client (no rgpu_stats_counter)");
	primary_ctx(0, NULL);
	CUmodule mod = load_test_module();
	CUfunction finc = get_func(mod, "inc_i32");
	const int n = 1024;
	CUdeviceptr d;
	CK(cuMemAlloc(&d, n * sizeof(int)));
	CK(cuMemsetD32(d, 0, n));
	int nn = n;
	void *args[] = { &d, &nn };
	int host[4];

	/* a synchronisation, then nothing sent: the next ones are answered here */
	TRIPS(1, "first cuCtxSynchronize", CK(cuCtxSynchronize()));
	TRIPS(0, "cuCtxSynchronize with nothing queued since",
	      CK(cuCtxSynchronize()); CK(cuStreamSynchronize(NULL));
	      EXPECT_RC(cuStreamQuery(NULL), CUDA_SUCCESS));

	/* work queued: a round trip again */
	unsigned long long a0 = counter("async");
	launch1d(finc, (unsigned)n, NULL, args);
	CHECK(counter("async") - a0 == (off ? 0u : 1u), "a launch is one asynchronous request");
	TRIPS(1, "cuStreamSynchronize after a launch", CK(cuStreamSynchronize(NULL)));

	/* loss.item(): a copy to the host, then a synchronisation of its stream */
	launch1d(finc, (unsigned)n, NULL, args);
	TRIPS(1, "a copy to the host then cuStreamSynchronize",
	      CK(cuMemcpyDtoHAsync(host, d, sizeof(host), NULL)); CK(cuStreamSynchronize(NULL)));
	CHECK(host[0] == 2 && host[3] == 2, "data %d %d, expected 2 2", host[0], host[3]);

	/* events: never recorded is done; recorded before a copy that came
	 * back is done */
	CUevent ev;
	CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
	TRIPS(0, "querying an event never recorded", EXPECT_RC(cuEventQuery(ev), CUDA_SUCCESS));
	launch1d(finc, (unsigned)n, NULL, args);
	CK(cuEventRecord(ev, NULL));
	TRIPS(1, "a copy to the host, then the event before it queried and synchronised",
	      CK(cuMemcpyDtoH(host, d, sizeof(host))); EXPECT_RC(cuEventQuery(ev), CUDA_SUCCESS);
	      CK(cuEventSynchronize(ev)));
	CHECK(host[0] == 3, "data %d, expected 3", host[0]);
	/* recorded again after the copy: not known done */
	launch1d(finc, (unsigned)n, NULL, args);
	CK(cuEventRecord(ev, NULL));
	TRIPS(1, "synchronising an event recorded after the last proof", CK(cuEventSynchronize(ev)));
	TRIPS(0, "querying it after its synchronisation", EXPECT_RC(cuEventQuery(ev), CUDA_SUCCESS));

	/* a polled event is watched from its next record: the server says
	 * when it completes, and queries need no round trip */
	CUfunction fbusy = get_func(mod, "busy_wait_ns");
	unsigned long long ns = 30000000ull; /* 30 ms */
	void *bargs[] = { &ns };
	CK(cuLaunchKernel(fbusy, 1, 1, 1, 1, 1, 1, 0, NULL, bargs, NULL));
	CK(cuEventRecord(ev, NULL));
	TRIPS(1, "querying an event recorded after a 30 ms kernel", {
		CUresult q = cuEventQuery(ev);
		CHECK(q == CUDA_ERROR_NOT_READY || q == CUDA_SUCCESS, "cuEventQuery: %s", cu_name(q));
	});
	CK(cuLaunchKernel(fbusy, 1, 1, 1, 1, 1, 1, 0, NULL, bargs, NULL));
	CK(cuEventRecord(ev, NULL));
	int polls = 0, ready_seen = 0;
	double t0 = now_ms();
	TRIPS(0, "polling a watched event until it completes", {
		CUresult q;
		while ((q = cuEventQuery(ev)) == CUDA_ERROR_NOT_READY && now_ms() - t0 < 10000) {
			polls++;
			ready_seen = 1;
		}
		CHECK(q == CUDA_SUCCESS, "cuEventQuery: %s after %.0f ms", cu_name(q), now_ms() - t0);
	});
	CHECK(off || ready_seen, "a 30 ms kernel was done at the first poll");
	say("watched event: %d local polls, done after %.1f ms", polls, now_ms() - t0);
	CK(cuCtxSynchronize());

	/* a new stream is idle; after work on it, one trip */
	CUstream s;
	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	TRIPS(0, "querying a new stream", EXPECT_RC(cuStreamQuery(s), CUDA_SUCCESS);
	      CK(cuStreamSynchronize(s)));
	launch1d(finc, (unsigned)n, s, args);
	TRIPS(1, "synchronising a stream after a launch on it", CK(cuStreamSynchronize(s));
	      CK(cuStreamSynchronize(s)));

	/* limits other than the stack size are read once */
	size_t v1 = 0, v2 = 1;
	TRIPS(1, "cuCtxGetLimit(PRINTF_FIFO_SIZE) twice",
	      CK(cuCtxGetLimit(&v1, CU_LIMIT_PRINTF_FIFO_SIZE));
	      CK(cuCtxGetLimit(&v2, CU_LIMIT_PRINTF_FIFO_SIZE)));
	CHECK(v1 == v2, "limit %zu then %zu", v1, v2);
	TRIPS(2, "cuCtxSetLimit then cuCtxGetLimit",
	      CK(cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, v1 * 2));
	      CK(cuCtxGetLimit(&v2, CU_LIMIT_PRINTF_FIFO_SIZE)));
	CHECK(v2 >= v1 * 2, "limit %zu after setting %zu", v2, v1 * 2);
	TRIPS(2, "cuCtxGetLimit(STACK_SIZE) twice (the driver may grow it)",
	      CK(cuCtxGetLimit(&v1, CU_LIMIT_STACK_SIZE)); CK(cuCtxGetLimit(&v2, CU_LIMIT_STACK_SIZE)));

	/* an attribute set to the value it has: nothing to send; the dynamic
	 * shared memory bound, checked by the client, needs no reply (the
	 * function's attributes are read once, for the check) */
	TRIPS(1, "cuFuncSetAttribute twice with one value",
	      CK(cuFuncSetAttribute(finc, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1024));
	      CK(cuFuncSetAttribute(finc, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1024)));
	int got = 0;
	TRIPS(0, "cuFuncSetAttribute with another value, then reading it",
	      CK(cuFuncSetAttribute(finc, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 2048));
	      CK(cuFuncGetAttribute(&got, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, finc)));
	CHECK(got == 2048, "attribute %d after setting 2048", got);
	/* the server has it too: the function reads back from there */
	launch1d(finc, (unsigned)n, NULL, args);
	CK(cuCtxSynchronize());

	/* occupancy: asked once per question */
	int b1 = 0, b2 = 0;
	TRIPS(1, "the same occupancy question twice",
	      CK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&b1, finc, 128, 0));
	      CK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&b2, finc, 128, 0)));
	CHECK(b1 == b2 && b1 > 0, "occupancy %d then %d", b1, b2);

	/* requests without a reply go out together: 100 launches and the
	 * synchronisation after them in a few writes (RGPU_COALESCE_US=0:
	 * one write each; T_COALESCED=0: the shared-memory call queues, which
	 * send each at once); the data says they all ran, in order */
	int coalesce = (int)env_long("T_COALESCED", env_long("RGPU_COALESCE_US", 50) != 0);
	CK(cuMemsetD32(d, 0, n));
	unsigned long long w0 = counter("writes");
	for (int i = 0; i < 100; i++)
		launch1d(finc, (unsigned)n, s, args);
	CK(cuStreamSynchronize(s));
	unsigned long long nw = counter("writes") - w0;
	CK(cuMemcpyDtoH(host, d, sizeof(host)));
	CHECK(host[0] == 100 && host[3] == 100, "data %d %d after 100 launches", host[0], host[3]);
	if (!off)
		CHECK(coalesce ? nw <= 10 : nw >= 101, "100 launches and a synchronisation took %llu "
						       "writes (coalescing %s)", nw, coalesce ? "on" : "off");
	say("100 launches + a synchronisation: %llu writes", nw);
	/* the first launch after a synchronisation goes at once (the GPU is
	 * idle: nothing gains from waiting), not after the coalescing delay */
	w0 = counter("writes");
	launch1d(finc, (unsigned)n, s, args);
	CHECK(off || counter("writes") - w0 == 1, "the first launch after a synchronisation "
						  "waited in the queue (%llu writes)",
	      counter("writes") - w0);
	/* a program that stops calling still gets its work sent */
	launch1d(finc, (unsigned)n, s, args);
	struct timespec ts = { 0, 50 * 1000 * 1000 };
	nanosleep(&ts, NULL);
	CHECK(off || counter("writes") - w0 == 2, "a lone launch was not sent within 50 ms");

	CK(cuStreamDestroy(s));
	CK(cuEventDestroy(ev));
	CK(cuMemFree(d));
	CK(cuModuleUnload(mod));
	primary_ctx_release(0);
	unsigned long long calls = counter("calls"), sync = counter("sync"),
			   async = counter("async"), sent = counter("sent"),
			   received = counter("received");
	if (off)
		CHECK(calls + sync + async + sent + received == 0, "counters moved with RGPU_STATS off");
	else
		CHECK(calls == sync + async && sync > 0 && async > 0 && sent > 0 && received > 0,
		      "calls=%llu sync=%llu async=%llu sent=%llu received=%llu", calls, sync,
		      async, sent, received);
	printf("COUNTERS calls=%llu sync=%llu async=%llu sent=%llu received=%llu\n", calls, sync,
	       async, sent, received);
	say("ok");
	return 0;
}
