/* User objects: a destructor runs once the last reference goes, never
 * before; graphs hold references, a
 * clone and an executable hold the graph's too, and an executable's go
 * only when it is destroyed.  Runs on the real driver too (through rgpu
 * destructors run on a thread of their own). */
#include "common.h"

#include <pthread.h>
#include <time.h>

static volatile int destroyed[4];
static volatile pthread_t who[4];

static void dtor(void *p)
{
	int i = (int)(intptr_t)p;
	who[i] = pthread_self();
	__atomic_store_n(&destroyed[i], destroyed[i] + 1, __ATOMIC_RELEASE);
}

/* destructors run on a thread of their own, eventually: wait for one */
static int wait_destroyed(int i, int ms)
{
	for (int t = 0; t < ms; t++) {
		if (__atomic_load_n(&destroyed[i], __ATOMIC_ACQUIRE))
			return 1;
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
	return __atomic_load_n(&destroyed[i], __ATOMIC_ACQUIRE);
}

static void settle(void)
{
	struct timespec ts = { 0, 100 * 1000000L };
	nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	(void)argc;
	primary_ctx(0, NULL);
	CUmodule mod = load_test_module();
	CUfunction fill = get_func(mod, "fill_u32");

	/* ---- the caller's references ---- */
	CUuserObject o;
	CK(cuUserObjectCreate(&o, (void *)(intptr_t)0, dtor, 2, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
	CK(cuUserObjectRelease(o, 1));
	settle();
	CHECK(!destroyed[0], "destroyed with a reference left");
	CK(cuUserObjectRetain(o, 2));
	CK(cuUserObjectRelease(o, 3));
	CHECK(wait_destroyed(0, 2000), "not destroyed after the last reference");
	/* (the driver may run it in the caller's thread when the caller's
	 * release is the last: the H200's 580.159 does; rgpu uses its own) */
	if (via_rgpu())
		CHECK(!pthread_equal(who[0], pthread_self()), "the destructor ran in the caller's thread");
	EXPECT_RC(cuUserObjectCreate(&o, NULL, dtor, 1, 0), CUDA_ERROR_INVALID_VALUE);
	EXPECT_RC(cuUserObjectCreate(&o, NULL, NULL, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC), CUDA_ERROR_INVALID_VALUE);

	/* ---- a graph's, a clone's and an executable's ---- */
	CUgraph g, c;
	CUgraphExec x;
	CK(cuGraphCreate(&g, 0));
	CUdeviceptr d;
	const unsigned long long n = 1 << 16;
	CK(cuMemAlloc(&d, n * 4));
	unsigned v = 5;
	void *args[] = { &d, &v, (void *)&n };
	CUDA_KERNEL_NODE_PARAMS kp = kparams(fill, (unsigned)n, args);
	CUgraphNode k;
	CK(cuGraphAddKernelNode(&k, g, NULL, 0, &kp));
	CK(cuUserObjectCreate(&o, (void *)(intptr_t)1, dtor, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
	CK(cuGraphRetainUserObject(g, o, 1, CU_GRAPH_USER_OBJECT_MOVE)); /* the graph has ours */
	CK(cuGraphClone(&c, g));
	CK(cuGraphInstantiate(&x, g, 0));
	CK(cuGraphDestroy(g));
	CK(cuGraphDestroy(c));
	settle();
	CHECK(!destroyed[1], "destroyed while an executable holds it");
	CUstream s;
	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CK(cuGraphLaunch(x, s));
	CK(cuStreamSynchronize(s));
	settle();
	CHECK(!destroyed[1], "destroyed after a launch, the executable alive");
	CK(cuGraphExecDestroy(x));
	CHECK(wait_destroyed(1, 2000), "not destroyed with the executable");
	unsigned got = 0;
	CK(cuMemcpyDtoH(&got, d + 4 * (n - 1), 4));
	CHECK(got == 5, "the graph's kernel wrote %u", got);

	/* ---- released from a graph by hand; refusals ---- */
	CK(cuGraphCreate(&g, 0));
	CK(cuUserObjectCreate(&o, (void *)(intptr_t)2, dtor, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
	CK(cuGraphRetainUserObject(g, o, 3, 0));
	CK(cuUserObjectRelease(o, 1)); /* ours */
	CK(cuGraphReleaseUserObject(g, o, 2));
	settle();
	CHECK(!destroyed[2], "destroyed with the graph's last reference left");
	CK(cuGraphReleaseUserObject(g, o, 1));
	CHECK(wait_destroyed(2, 2000), "not destroyed after the graph released it");
	CK(cuUserObjectCreate(&o, (void *)(intptr_t)3, dtor, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC));
	EXPECT_RC(cuGraphRetainUserObject(g, o, 1, 2), CUDA_ERROR_INVALID_VALUE);
	CK(cuGraphRetainUserObject(g, o, 1, 0));
	CK(cuUserObjectRelease(o, 1));
	CK(cuGraphDestroy(g));
	CHECK(wait_destroyed(3, 2000), "not destroyed with its graph");
	CHECK(destroyed[0] == 1 && destroyed[1] == 1 && destroyed[2] == 1 && destroyed[3] == 1,
	      "destructors ran %d %d %d %d times", destroyed[0], destroyed[1], destroyed[2], destroyed[3]);
	CK(cuMemFree(d));
	CK(cuStreamDestroy(s));
	CK(cuModuleUnload(mod));
	say("user objects: destructors after the last reference, graphs', clones' and executables' references");
	return 0;
}
