/*
 * Host functions (cuLaunchHostFunc, cuStreamAddCallback, graph host nodes)
 * run here, in the application's process, in stream order (see
 * daemon/ops_hostfn.c for the server's half).
 *
 * Each host function gets a client id (a slot in `calls`).  The server
 * tells us when a stream reaches one, as the reply to a long poll
 * (HOSTFN_WAIT) that a thread of ours keeps pending per connection while
 * host functions are out; that thread runs them, one after another as CUDA
 * does, and answers HOSTFN_DONE, which lets the stream go on.
 *
 * The session's main loop must stay free to read HOSTFN_DONE: a request
 * that may wait there for device work (a synchronous copy, a free, a
 * destroy) while a host function is out could wait for the host function
 * itself.  rc_hostfn_gate() therefore holds such a request back until no
 * host function is out on its connection; what a local GPU would do then
 * (wait for the stream) happens before the request is sent instead of
 * after.
 */
#include "client.h"
#include "log.h"

#include <stdlib.h>
#include <string.h>

struct call {
	int used;
	uint32_t gen;
	int oneshot;         /* cuLaunchHostFunc / cuStreamAddCallback */
	CUhostFn fn;         /* either fn(data) */
	CUstreamCallback cb; /* or cb(stream, status, data) */
	CUstream stream;
	void *data;
	/* a one-shot's stream (server handle) and the coherence epoch when it
	 * was queued: what to fetch before it runs (coh 0: a graph node) */
	int coh;
	uint64_t sh, epoch;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static struct call *calls;
static uint32_t ncalls, capcalls;

struct conn_state {
	uint64_t out;  /* queued host functions not yet returned */
	int poller;    /* the long-poll thread runs */
};
static struct conn_state conns[RGPU_MAX_DEVICES];
static __thread int in_hostfn; /* this thread runs host functions */

/* id: gen << 32 | slot + 1 */
static uint64_t call_add(const struct call *c)
{
	uint32_t i;
	for (i = 0; i < ncalls && calls[i].used; i++)
		;
	if (i == capcalls) {
		uint32_t cap = capcalls ? capcalls * 2 : 64;
		struct call *n = realloc(calls, cap * sizeof(*n));
		if (!n)
			return 0;
		memset(n + capcalls, 0, (cap - capcalls) * sizeof(*n));
		calls = n;
		capcalls = cap;
	}
	if (i == ncalls)
		ncalls++;
	uint32_t gen = calls[i].gen + 1;
	calls[i] = *c;
	calls[i].used = 1;
	calls[i].gen = gen;
	return (uint64_t)gen << 32 | (i + 1);
}

static struct call *call_get(uint64_t id)
{
	uint32_t i = (uint32_t)id, gen = (uint32_t)(id >> 32);
	if (i == 0 || i > ncalls || !calls[i - 1].used || calls[i - 1].gen != gen)
		return NULL;
	return &calls[i - 1];
}

uint64_t rc_hostfn_register(CUhostFn fn, void *data)
{
	struct call c = { .fn = fn, .data = data };
	pthread_mutex_lock(&lock);
	uint64_t id = call_add(&c);
	pthread_mutex_unlock(&lock);
	return id;
}

void rc_hostfn_forget(uint64_t id)
{
	pthread_mutex_lock(&lock);
	struct call *c = call_get(id);
	if (c)
		c->used = 0;
	pthread_mutex_unlock(&lock);
}

static void *poll_thread(void *arg);

/* n more host functions are out on connection c (a launch of a graph with
 * n host nodes, or one host function); starts the poller if needed. */
CUresult rc_hostfn_out(struct rc_conn *c, uint64_t n)
{
	int k = rc_conn_index(c);
	if (k < 0 || !n)
		return CUDA_SUCCESS;
	pthread_mutex_lock(&lock);
	conns[k].out += n;
	int start = !conns[k].poller;
	conns[k].poller = 1;
	pthread_mutex_unlock(&lock);
	if (start) {
		pthread_t t;
		pthread_attr_t a;
		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		int e = pthread_create(&t, &a, poll_thread, c);
		pthread_attr_destroy(&a);
		if (e) {
			pthread_mutex_lock(&lock);
			conns[k].poller = 0;
			conns[k].out -= n;
			pthread_mutex_unlock(&lock);
			log_err("cannot start the host-function thread: %s", strerror(e));
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	return CUDA_SUCCESS;
}

/* Host functions that never come (their launch failed after all) */
void rc_hostfn_back(struct rc_conn *c, uint64_t n)
{
	int k = rc_conn_index(c);
	if (k < 0)
		return;
	pthread_mutex_lock(&lock);
	conns[k].out = conns[k].out > n ? conns[k].out - n : 0;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&lock);
}

static void run_one(struct rc_conn *c, uint64_t seq, uint64_t id)
{
	pthread_mutex_lock(&lock);
	struct call *cl = call_get(id);
	struct call copy = cl ? *cl : (struct call){ 0 };
	if (cl && cl->oneshot)
		cl->used = 0;
	pthread_mutex_unlock(&lock);
	if (!cl) {
		log_warn("the server named host function %llx, which this process does not have",
			 (unsigned long long)id);
	} else {
		/* what the kernels before it on its stream wrote, as on a GPU */
		CUresult f = copy.coh ? rc_coh_hostfn(c, copy.sh, copy.epoch) : CUDA_SUCCESS;
		static int said; /* once a process: it may recur with every call */
		if (f && !__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
			log_warn("a host function runs without the managed or mapped memory its "
				 "stream wrote (%s); it is fetched at the next synchronisation "
				 "(said once)",
				 f == CUDA_ERROR_NOT_READY ? "another thread's synchronisation holds it"
							   : "fetching it failed");
		if (copy.cb)
			copy.cb(copy.stream, CUDA_SUCCESS, copy.data);
		else if (copy.fn)
			copy.fn(copy.data);
	}
	struct wbuf *w = rc_req();
	put_u64(w, seq);
	(void)rc_post(c, RGPU_OP_HOSTFN_DONE, w);
	rc_hostfn_back(c, 1);
}

/* The pollers' threads, for rc_hostfn_thread (read in a signal handler:
 * no thread-local storage, which may be allocated on first use) */
static pthread_t poller_tid[RGPU_MAX_DEVICES];
static volatile int poller_tid_set[RGPU_MAX_DEVICES];

int rc_hostfn_thread(void)
{
	pthread_t me = pthread_self();
	for (int k = 0; k < RGPU_MAX_DEVICES; k++)
		if (__atomic_load_n(&poller_tid_set[k], __ATOMIC_ACQUIRE) && pthread_equal(poller_tid[k], me))
			return 1;
	return 0;
}

static void *poll_thread(void *arg)
{
	struct rc_conn *c = arg;
	int k = rc_conn_index(c);
	in_hostfn = 1;
	if (k >= 0 && k < RGPU_MAX_DEVICES) {
		__atomic_store_n(&poller_tid_set[k], 0, __ATOMIC_RELEASE);
		poller_tid[k] = pthread_self();
		__atomic_store_n(&poller_tid_set[k], 1, __ATOMIC_RELEASE);
	}
	for (;;) {
		/* one long poll while host functions are out */
		pthread_mutex_lock(&lock);
		if (!conns[k].out) {
			conns[k].poller = 0;
			pthread_mutex_unlock(&lock);
			return NULL;
		}
		pthread_mutex_unlock(&lock);
		struct wbuf *w = rc_req();
		struct rd r;
		CUresult rc = rc_call(c, RGPU_OP_HOSTFN_WAIT, w, &r);
		if (rc) {
			/* a dead connection: nothing will come; free the gate */
			log_warn("host functions: waiting for the server failed (%d)", (int)rc);
			pthread_mutex_lock(&lock);
			conns[k].out = 0;
			conns[k].poller = 0;
			pthread_cond_broadcast(&cv);
			pthread_mutex_unlock(&lock);
			return NULL;
		}
		uint32_t n = get_u32(&r);
		if (!rd_ok(&r) || n > r.left / 16) {
			rc_conn_fail(c, RGPU_E_PROTO, "a malformed HOSTFN_WAIT reply");
			continue;
		}
		/* the reply buffer is this thread's until its next call: copy */
		uint64_t *ev = malloc(n * 16 + 1);
		if (!ev) {
			rc_conn_fail(c, RGPU_E_SYSTEM, "out of memory for host functions");
			continue;
		}
		for (uint32_t i = 0; i < 2 * n; i++)
			ev[i] = get_u64(&r);
		for (uint32_t i = 0; i < n; i++)
			run_one(c, ev[2 * i], ev[2 * i + 1]);
		free(ev);
	}
}

/* Requests the session's main loop answers without waiting for device
 * work: they may go while host functions are out. */
static int never_waits(uint16_t op)
{
	switch (op) {
	case RGPU_OP_LAUNCH:
	case RGPU_OP_EVENT_RECORD:
	case RGPU_OP_EVENT_QUERY:
	case RGPU_OP_STREAM_QUERY:
	case RGPU_OP_STREAM_WAIT_EVENT:
	case RGPU_OP_CTX_RECORD_EVENT:
	case RGPU_OP_CTX_WAIT_EVENT:
	/* synchronisations wait in a waiter thread of the session */
	case RGPU_OP_STREAM_SYNC:
	case RGPU_OP_CTX_SYNC:
	case RGPU_OP_EVENT_SYNC:
	case RGPU_OP_EVENT_CREATE:
	case RGPU_OP_STREAM_CREATE:
	case RGPU_OP_MEM_ALLOC:
	case RGPU_OP_MEM_GET_INFO:
	case RGPU_OP_DEVICE_INFO:
	case RGPU_OP_FUNC_GET_ATTRS:
	case RGPU_OP_OCC_MAX_BLOCKS:
	case RGPU_OP_OCC_DYN_SMEM:
	case RGPU_OP_OCC_MAX_CLUSTERS:
	case RGPU_OP_OCC_CLUSTER_SIZE:
	case RGPU_OP_CAPTURE_BEGIN:
	case RGPU_OP_CAPTURE_END:
	case RGPU_OP_CAPTURE_STATUS:
	case RGPU_OP_GRAPH_LAUNCH:
	case RGPU_OP_GRAPH_INSTANTIATE:
	case RGPU_OP_GRAPH_OP:
	case RGPU_OP_HOSTFN_LAUNCH:
	case RGPU_OP_HOSTFN_WAIT:
	case RGPU_OP_HOSTFN_DONE:
	case RGPU_OP_CALL:
		return 1;
	}
	return 0;
}

void rc_hostfn_gate(struct rc_conn *c, uint16_t op)
{
	int k = (int)(c - rc_conns);
	if (k < 0 || k >= RGPU_MAX_DEVICES ||
	    !__atomic_load_n(&conns[k].out, __ATOMIC_RELAXED) || in_hostfn || never_waits(op))
		return;
	pthread_mutex_lock(&lock);
	while (conns[k].out)
		pthread_cond_wait(&cv, &lock);
	pthread_mutex_unlock(&lock);
}

static CUresult launch(CUstream s, const struct call *cl)
{
	struct rc_ctx *c;
	uint64_t h;
	CUresult rc = rc_stream_resolve(s, &c, &h);
	if (rc)
		return rc;
	struct call one = *cl;
	one.oneshot = 1;
	one.coh = 1;
	one.sh = h;
	one.epoch = rc_coh_epoch();
	pthread_mutex_lock(&lock);
	uint64_t id = call_add(&one);
	pthread_mutex_unlock(&lock);
	if (!id)
		return CUDA_ERROR_OUT_OF_MEMORY;
	uint64_t capture = rc_stream_capture_id(s);
	/* counted before it can run; a capture makes it a graph node
	 * instead, counted when the graph is launched */
	if (!capture && (rc = rc_hostfn_out(c->dev->conn, 1))) {
		rc_hostfn_forget(id);
		return rc;
	}
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u64(w, h);
	put_u64(w, id);
	struct rd r;
	rc = rc_call(c->dev->conn, RGPU_OP_HOSTFN_LAUNCH, w, &r);
	if (rc) {
		if (!capture)
			rc_hostfn_back(c->dev->conn, 1);
		rc_hostfn_forget(id);
		return rc;
	}
	/* a stream that joined another's capture (through an event) captures
	 * too, unknown here: not due now after all */
	int known = capture != 0;
	if (!known && get_u32(&r)) {
		rc_hostfn_back(c->dev->conn, 1);
		capture = 1;
	}
	if (capture) {
		/* a node of the capture's graph: kept, not one-shot */
		pthread_mutex_lock(&lock);
		struct call *p = call_get(id);
		if (p)
			p->oneshot = p->coh = 0;
		pthread_mutex_unlock(&lock);
		/* counted for the capture's graph when it is this stream's own
		 * (a joined stream's host nodes go uncounted: hostfn.c's gate
		 * may then let a blocking call by while the graph runs) */
		if (known)
			rc_capture_host_node(s);
	}
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data)
{
	if (!fn)
		return CUDA_ERROR_INVALID_VALUE;
	struct call cl = { .fn = fn, .data = data };
	return launch(s, &cl);
}

RC_EXPORT CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void *data)
{
	return cuLaunchHostFunc(s ? s : CU_STREAM_PER_THREAD, fn, data);
}

RC_EXPORT CUresult cuStreamAddCallback(CUstream s, CUstreamCallback cb, void *data, unsigned int flags)
{
	if (!cb || flags)
		return CUDA_ERROR_INVALID_VALUE;
	struct call cl = { .cb = cb, .data = data, .stream = s };
	return launch(s, &cl);
}

RC_EXPORT CUresult cuStreamAddCallback_ptsz(CUstream s, CUstreamCallback cb, void *data, unsigned int flags)
{
	return cuStreamAddCallback(s ? s : CU_STREAM_PER_THREAD, cb, data, flags);
}
