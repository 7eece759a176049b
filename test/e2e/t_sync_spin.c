/* RGPU_SYNC_SPIN_US: a thread waiting for the GPU spins before it sleeps,
 * as CUDA's own waits do, except in a context made with
 * CU_CTX_SCHED_BLOCKING_SYNC.
 *
 * Each wait follows a kernel of 2 ms, so the reply is not there when the
 * caller first looks; the client's counters (RGPU_STATS, read with
 * rgpu_stats_counter) say whether the wait then caught the reply within
 * its spin or slept.  T_SPIN=1 (run with RGPU_SYNC_SPIN_US=1000000): in
 * the primary context a context sync, a stream sync and a device-to-host
 * copy each catch the reply spinning and none sleeps; in a context made
 * with CU_CTX_SCHED_BLOCKING_SYNC none spins.  T_SPIN=0 (run with
 * RGPU_SYNC_SPIN_US=0): none spins.  Against another libcuda.so.1:
 * skipped. */
#include "common.h"

#include <dlfcn.h>

typedef unsigned long long (*counter_fn)(const char *);
static counter_fn counter;

#define ROUNDS 10

/* ROUNDS x (a 2 ms kernel on s, then the wait): how many waits spun and
 * slept */
static void waits(CUfunction busy, CUstream s, CUdeviceptr d, int how,
		  unsigned long long *spun, unsigned long long *slept)
{
	unsigned long long sp0 = counter("waits_spun"), sl0 = counter("waits_slept");
	unsigned long long ns = 2000000ull;
	void *args[] = { &ns };
	int host;
	for (int i = 0; i < ROUNDS; i++) {
		CK(cuLaunchKernel(busy, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
		if (how == 0)
			CK(cuCtxSynchronize());
		else if (how == 1)
			CK(cuStreamSynchronize(s));
		else
			CK(cuMemcpyDtoH(&host, d, sizeof(host)));
	}
	*spun = counter("waits_spun") - sp0;
	*slept = counter("waits_slept") - sl0;
}

int main(int argc, char **argv)
{
	(void)argc;
	e2e_init(argv[0]);
	int spin = env_long("T_SPIN", 1) != 0;
	counter = (counter_fn)dlsym(RTLD_DEFAULT, "rgpu_stats_counter");
	if (!counter)
		skip("not the rgpu client (no rgpu_stats_counter)");
	CUdevice dev;
	primary_ctx(0, &dev);
	CUmodule mod = load_test_module();
	CUfunction busy = get_func(mod, "busy_wait_ns");
	CUstream s;
	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CUdeviceptr d;
	CK(cuMemAlloc(&d, 4096));
	static const char *what[] = { "cuCtxSynchronize", "cuStreamSynchronize",
				      "cuMemcpyDtoH" };
	for (int how = 0; how < 3; how++) {
		unsigned long long spun, slept;
		waits(busy, how == 1 ? s : NULL, d, how, &spun, &slept);
		say("%s after a 2 ms kernel, %d times: %llu spun, %llu slept", what[how], ROUNDS,
		    spun, slept);
		if (spin)
			CHECK(spun >= 1 && slept == 0,
			      "%s: %llu waits caught the reply spinning, %llu slept (spinning for "
			      "up to 1 s, none should sleep)", what[how], spun, slept);
		else
			CHECK(spun == 0 && slept >= 1,
			      "%s with RGPU_SYNC_SPIN_US=0: %llu waits spun, %llu slept", what[how],
			      spun, slept);
	}
	CK(cuMemFree(d));
	CK(cuStreamDestroy(s));
	CK(cuModuleUnload(mod));

	/* a context that asked to block: its waits sleep */
	CUcontext bctx;
	CK(cuCtxCreate(&bctx, NULL, CU_CTX_SCHED_BLOCKING_SYNC, dev));
	CUmodule bmod = load_test_module();
	CUfunction bbusy = get_func(bmod, "busy_wait_ns");
	unsigned long long spun, slept;
	waits(bbusy, NULL, 0, 0, &spun, &slept);
	say("in a CU_CTX_SCHED_BLOCKING_SYNC context: %llu spun, %llu slept", spun, slept);
	CHECK(spun == 0 && slept >= 1,
	      "a CU_CTX_SCHED_BLOCKING_SYNC context's cuCtxSynchronize: %llu waits spun, %llu "
	      "slept (none should spin)", spun, slept);
	CK(cuModuleUnload(bmod));
	CK(cuCtxDestroy(bctx));
	primary_ctx_release(0);
	say("PASS");
	return 0;
}
