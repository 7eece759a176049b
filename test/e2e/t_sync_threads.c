/*
 * Issue 15, item 8: one client thread's synchronising call must not hold
 * the connection.  Thread A launches a 1.5 s kernel on its stream and
 * waits in cuStreamSynchronize; meanwhile thread B's cuMemGetInfo and
 * cuStreamQuery (NOT_READY) return at once, and A's sync returns only
 * after the kernel.
 *
 * Needs the server to answer while a sync waits (daemon/waiter.c) and the
 * client to route replies by request id (client/rpc.c).
 */
#include "common.h"

#include <pthread.h>
#include <unistd.h>

#define KERNEL_MS 1500.0

static CUcontext ctx;
static CUstream st;
static CUfunction busy;
static volatile int a_waiting;
static double a_done_ms;

static void *thread_a(void *arg)
{
	(void)arg;
	unsigned long long ns = (unsigned long long)(KERNEL_MS * 1e6);
	void *params[] = { &ns };
	CK(cuCtxSetCurrent(ctx));
	CK(cuLaunchKernel(busy, 1, 1, 1, 1, 1, 1, 0, st, params, NULL));
	double t0 = now_ms();
	__atomic_store_n(&a_waiting, 1, __ATOMIC_RELEASE);
	CK(cuStreamSynchronize(st));
	a_done_ms = now_ms() - t0;
	return NULL;
}

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	ctx = primary_ctx(0, NULL);
	CUmodule m = load_test_module();
	busy = get_func(m, "busy_wait_ns");
	CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
	pthread_t a;
	if (pthread_create(&a, NULL, thread_a, NULL))
		fail("pthread_create");
	while (!__atomic_load_n(&a_waiting, __ATOMIC_ACQUIRE))
		usleep(1000);
	usleep(200 * 1000); /* A's sync is on its way, or waiting */
	double t0 = now_ms();
	size_t fr = 0, tot = 0;
	CK(cuMemGetInfo(&fr, &tot));
	EXPECT_RC(cuStreamQuery(st), CUDA_ERROR_NOT_READY);
	double b_ms = now_ms() - t0;
	pthread_join(a, NULL);
	say("thread B's queries took %.1f ms while A waited %.1f ms", b_ms, a_done_ms);
	CHECK(b_ms < KERNEL_MS / 4, "thread B waited %.1f ms behind thread A's cuStreamSynchronize", b_ms);
	CHECK(a_done_ms >= KERNEL_MS * 0.8, "cuStreamSynchronize returned after %.1f ms, before the kernel ended",
	      a_done_ms);
	CK(cuStreamDestroy(st));
	CK(cuModuleUnload(m));
	printf("t_sync_threads: PASS\n");
	return 0;
}
