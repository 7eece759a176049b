/* Host functions and stream callbacks run in stream order:
 *  - on each of three streams at once, 40 host functions between kernels
 *    run in their stream's order, all of them;
 *  - later work waits: a host function that blocks until the main thread
 *    lets it go holds back an event recorded after it (NOT_READY) and the
 *    kernel before that event; let go, the stream finishes;
 *  - cuStreamAddCallback passes the stream and CUDA_SUCCESS;
 *  - a synchronous copy and a free right after a slow host function on the
 *    NULL stream wait for it and do not hang;
 *  - a host function captured in a graph runs once per graph launch.
 * `t_hostfn managed`: a host function reads managed memory that a kernel
 * before it on its (blocking) stream wrote, and must see the kernel's
 * values (CUDA allows the access: the stream's work before it is done).
 * rgpu fetches that memory before the host function runs, on a stream
 * that does not wait for the one the host function holds (through the
 * legacy stream the fetch would hang: the emulated device hangs too).
 * Then another thread synchronises while a host function is out: its
 * acquire holds the coherence lock while its copy waits for the host
 * function, so the host function's fetch must give up, not wait (a
 * blocking lock there hangs this test).
 * Exits non-zero on any mismatch; the test's timeout catches a hang. */
#include "common.h"

#include <pthread.h>
#include <unistd.h>

#define NORDER 40

static int order[3][NORDER];
static int norder[3];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

struct step {
	int stream, i;
};

static void CUDA_CB note(void *p)
{
	struct step *s = p;
	pthread_mutex_lock(&mu);
	if (norder[s->stream] < NORDER)
		order[s->stream][norder[s->stream]++] = s->i;
	pthread_mutex_unlock(&mu);
}

static volatile int gate_open, gate_entered;

static void CUDA_CB hold(void *p)
{
	(void)p;
	__atomic_store_n(&gate_entered, 1, __ATOMIC_SEQ_CST);
	while (!__atomic_load_n(&gate_open, __ATOMIC_SEQ_CST))
		usleep(1000);
}

static volatile int slow_done;

static void CUDA_CB slow(void *p)
{
	usleep(100 * 1000);
	__atomic_store_n((int *)p, 1, __ATOMIC_SEQ_CST);
}

static CUstream cb_stream;
static CUresult cb_status = (CUresult)-1;
static int cb_calls;

static void CUDA_CB callback(CUstream s, CUresult st, void *p)
{
	cb_stream = s;
	cb_status = st;
	cb_calls += *(int *)p;
}

static int graph_runs;

static void CUDA_CB count(void *p)
{
	(void)p;
	__atomic_add_fetch(&graph_runs, 1, __ATOMIC_SEQ_CST);
}

static int *managed_seen_at;
static volatile int managed_seen = -1;

static void CUDA_CB read_managed(void *p)
{
	(void)p;
	managed_seen = managed_seen_at[100];
}

/* a host function after a kernel that wrote managed memory */
static int managed_mode(CUmodule mod, CUfunction inc)
{
	const int n = 4096;
	CUdeviceptr d;
	CUresult rc = cuMemAllocManaged(&d, n * sizeof(int), CU_MEM_ATTACH_GLOBAL);
	if (rc == CUDA_ERROR_NOT_SUPPORTED)
		skip("no managed memory on this device");
	CK(rc);
	int *m = (int *)(uintptr_t)d;
	for (int i = 0; i < n; i++)
		m[i] = i;
	managed_seen_at = m;
	CUstream s;
	CK(cuStreamCreate(&s, 0));
	int nn = n;
	void *args[] = { &d, &nn };
	CK(cuLaunchKernel(inc, (n + 255) / 256, 1, 1, 256, 1, 1, 0, s, args, NULL));
	CK(cuLaunchHostFunc(s, read_managed, NULL));
	CK(cuStreamSynchronize(s));
	CHECK(m[100] == 101, "after the synchronisation m[100] = %d, want 101", m[100]);
	CHECK(managed_seen == 101, "the host function read m[100] = %d, want 101 (the kernel's)",
	      managed_seen);

	/* another thread synchronises (an acquire of every region it may
	 * fetch) while the host function is out: neither may wait for the
	 * other for good (the test's timeout catches a hang) */
	CUfunction busy = get_func(mod, "busy_wait_ns");
	CUstream other;
	CK(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
	CK(cuLaunchKernel(inc, (n + 255) / 256, 1, 1, 256, 1, 1, 0, s, args, NULL));
	unsigned long long ns = 300ull * 1000 * 1000;
	void *bargs[] = { &ns };
	CK(cuLaunchKernel(busy, 1, 1, 1, 1, 1, 1, 0, s, bargs, NULL));
	managed_seen = -1;
	CK(cuLaunchHostFunc(s, read_managed, NULL));
	CK(cuStreamSynchronize(other));
	CK(cuStreamSynchronize(s));
	CHECK(managed_seen == 101 || managed_seen == 102,
	      "the host function beside a synchronisation read m[100] = %d", managed_seen);
	CHECK(m[100] == 102, "after both synchronisations m[100] = %d, want 102", m[100]);
	CK(cuStreamDestroy(other));
	CK(cuStreamDestroy(s));
	CK(cuMemFree(d));
	CK(cuModuleUnload(mod));
	say("PASS");
	return 0;
}

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	primary_ctx(0, NULL);
	CUmodule mod = load_test_module();
	CUfunction inc = get_func(mod, "inc_i32");
	if (argc > 1 && strcmp(argv[1], "managed") == 0)
		return managed_mode(mod, inc);
	const int n = 1024;
	CUdeviceptr d[3];
	CUstream st[3];
	for (int k = 0; k < 3; k++) {
		CK(cuMemAlloc(&d[k], n * sizeof(int)));
		CK(cuMemsetD32(d[k], 0, n));
		CK(cuStreamCreate(&st[k], CU_STREAM_NON_BLOCKING));
	}

	/* order on three streams, interleaved with kernels */
	static struct step steps[3][NORDER];
	CUevent ev[3][NORDER];
	for (int i = 0; i < NORDER; i++)
		for (int k = 0; k < 3; k++) {
			int nn = n;
			void *args[] = { &d[k], &nn };
			launch1d(inc, (unsigned)n, st[k], args);
			CK(cuEventCreate(&ev[k][i], CU_EVENT_DISABLE_TIMING));
			CK(cuEventRecord(ev[k][i], st[k]));
			steps[k][i] = (struct step){ k, i };
			CK(cuLaunchHostFunc(st[k], note, &steps[k][i]));
		}
	for (int k = 0; k < 3; k++)
		CK(cuStreamSynchronize(st[k]));
	for (int k = 0; k < 3; k++) {
		CHECK(norder[k] == NORDER, "stream %d ran %d of %d host functions", k, norder[k], NORDER);
		for (int i = 0; i < NORDER; i++) {
			CHECK(order[k][i] == i, "stream %d: host function %d ran as number %d", k,
			      order[k][i], i);
			CK(cuEventQuery(ev[k][i]));
		}
	}
	int *h = xmalloc(n * sizeof(int));
	for (int k = 0; k < 3; k++) {
		CK(cuMemcpyDtoH(h, d[k], n * sizeof(int)));
		CHECK(h[0] == NORDER && h[n - 1] == NORDER, "stream %d: %d increments, want %d", k, h[0],
		      NORDER);
	}
	say("order: %d host functions on each of 3 streams, in order", NORDER);

	/* later work waits for a host function that has not returned */
	CUevent after;
	CK(cuEventCreate(&after, CU_EVENT_DISABLE_TIMING));
	CK(cuLaunchHostFunc(st[0], hold, NULL));
	{
		int nn = n;
		void *args[] = { &d[0], &nn };
		launch1d(inc, (unsigned)n, st[0], args);
	}
	CK(cuEventRecord(after, st[0]));
	for (int i = 0; i < 5000 && !__atomic_load_n(&gate_entered, __ATOMIC_SEQ_CST); i++)
		usleep(1000);
	CHECK(gate_entered, "the held host function never started");
	usleep(50 * 1000);
	CUresult q = cuEventQuery(after);
	CHECK(q == CUDA_ERROR_NOT_READY, "work after a running host function is done early (%s)",
	      cu_name(q));
	q = cuStreamQuery(st[0]);
	CHECK(q == CUDA_ERROR_NOT_READY, "stream with a running host function is idle (%s)", cu_name(q));
	/* another stream goes on meanwhile */
	{
		int nn = n;
		void *args[] = { &d[1], &nn };
		launch1d(inc, (unsigned)n, st[1], args);
		CK(cuStreamSynchronize(st[1]));
	}
	__atomic_store_n(&gate_open, 1, __ATOMIC_SEQ_CST);
	CK(cuEventSynchronize(after));
	CK(cuMemcpyDtoH(h, d[0], n * sizeof(int)));
	CHECK(h[5] == NORDER + 1, "the kernel after the held host function: %d, want %d", h[5], NORDER + 1);
	say("a held host function holds back later work on its stream only");

	/* stream callbacks */
	int one = 1;
	CK(cuStreamAddCallback(st[2], callback, &one, 0));
	CK(cuStreamSynchronize(st[2]));
	CHECK(cb_calls == 1 && cb_stream == st[2] && cb_status == CUDA_SUCCESS,
	      "callback: %d calls, stream %p (want %p), status %d", cb_calls, (void *)cb_stream,
	      (void *)st[2], (int)cb_status);

	/* a synchronous copy and a free right behind a slow host function */
	CUdeviceptr tmp;
	CK(cuMemAlloc(&tmp, 4096));
	CK(cuLaunchHostFunc(NULL, slow, (void *)&slow_done));
	CK(cuMemcpyDtoH(h, d[2], n * sizeof(int)));
	CHECK(slow_done, "a synchronous copy on the NULL stream passed a host function queued before it");
	slow_done = 0;
	CK(cuLaunchHostFunc(NULL, slow, (void *)&slow_done));
	CK(cuMemFree(tmp));
	CK(cuCtxSynchronize());
	CHECK(slow_done, "the host function before a free never ran");
	say("synchronous calls behind host functions wait for them");

	/* captured into a graph: runs once per launch */
	CUresult rc = cuStreamBeginCapture(st[1], CU_STREAM_CAPTURE_MODE_GLOBAL);
	if (rc == CUDA_ERROR_NOT_SUPPORTED) {
		say("graphs: not on this device");
	} else {
		CK(rc);
		CK(cuLaunchHostFunc(st[1], count, NULL));
		int nn = n;
		void *args[] = { &d[1], &nn };
		launch1d(inc, (unsigned)n, st[1], args);
		CK(cuLaunchHostFunc(st[1], count, NULL));
		CUgraph g;
		CK(cuStreamEndCapture(st[1], &g));
		CHECK(graph_runs == 0, "a captured host function ran while capturing");
		CUgraphExec x;
		CK(cuGraphInstantiate(&x, g, 0));
		for (int i = 0; i < 3; i++)
			CK(cuGraphLaunch(x, st[1]));
		CK(cuStreamSynchronize(st[1]));
		CHECK(graph_runs == 6, "captured host functions ran %d times, want 6", graph_runs);
		CK(cuGraphExecDestroy(x));
		CK(cuGraphDestroy(g));
		say("captured host functions run with each graph launch");
	}

	for (int k = 0; k < 3; k++) {
		for (int i = 0; i < NORDER; i++)
			CK(cuEventDestroy(ev[k][i]));
		CK(cuStreamDestroy(st[k]));
		CK(cuMemFree(d[k]));
	}
	CK(cuEventDestroy(after));
	CK(cuModuleUnload(mod));
	free(h);
	say("PASS");
	return 0;
}
