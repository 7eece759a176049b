/* CUDA graphs.  A graph is a server object (the server captures a
 * stream's work as it runs it, or builds the graph node by node through
 * GRAPH_OP); the client holds handles: graphs, nodes and executables name
 * the server's ids, and nodes keep a copy of the parameters they were
 * given, which is what reading them back returns.  Per graph the client
 * also keeps how many host nodes it has (a launch counts them out: see
 * hostfn.c) and the words its kernels and copies name (so a launch
 * publishes the managed and mapped memory they use, as a kernel launch
 * does: coherence.c).  A copy between host and device memory, captured or
 * a node, names the host memory's device-side address (memory.c
 * rc_graph_host: pageable memory is registered for the graph, with a
 * device copy the graph's launches publish and the synchronisations after
 * them fetch). */
#include "client.h"
#include "graph.h"
#include "log.h"

#include <stdlib.h>


static uint64_t next_capture = 1;
static __thread uint64_t per_thread_capture, per_thread_hosts;

static CUstream capture_origin(CUstream s);

void rc_capture_host_node(CUstream s)
{
	s = capture_origin(s);
	if (s == CU_STREAM_PER_THREAD)
		per_thread_hosts++;
	else if (s && s != CU_STREAM_LEGACY && ((struct rc_stream *)s)->magic == RC_STREAM)
		((struct rc_stream *)s)->capture_hosts++;
}

/* Captures going on, with the stream each began on (a stream that joins
 * one shares that stream's record of host copies and host nodes); a
 * joined stream leaves when its capture ends. */
#define MAX_CAPTURES 64
static struct {
	uint64_t id;
	struct rc_stream *origin; /* NULL: the per-thread stream's */
} active[MAX_CAPTURES];
static pthread_mutex_t active_lock = PTHREAD_MUTEX_INITIALIZER;

static void active_add(uint64_t id, struct rc_stream *origin)
{
	pthread_mutex_lock(&active_lock);
	for (int i = 0; i < MAX_CAPTURES; i++)
		if (!active[i].id) {
			active[i].id = id;
			active[i].origin = origin;
			break;
		}
	pthread_mutex_unlock(&active_lock);
}

static void active_del(uint64_t id)
{
	pthread_mutex_lock(&active_lock);
	for (int i = 0; i < MAX_CAPTURES; i++)
		if (active[i].id == id)
			active[i].id = 0;
	pthread_mutex_unlock(&active_lock);
}

/* the stream capture id began on; 0 when that capture has ended */
static int active_origin(uint64_t id, struct rc_stream **origin)
{
	int found = 0;
	pthread_mutex_lock(&active_lock);
	for (int i = 0; i < MAX_CAPTURES && !found; i++)
		if (active[i].id == id) {
			*origin = active[i].origin;
			found = 1;
		}
	pthread_mutex_unlock(&active_lock);
	return found;
}

uint64_t rc_stream_capture_id(CUstream s)
{
	if (s == CU_STREAM_PER_THREAD)
		return per_thread_capture;
	if (!s || s == CU_STREAM_LEGACY)
		return 0;
	struct rc_stream *st = (struct rc_stream *)s, *o;
	if (st->magic != RC_STREAM)
		return 0;
	if (st->capture_joined && st->capture_id && !active_origin(st->capture_id, &o)) {
		st->capture_id = 0; /* its capture has ended */
		st->capture_joined = 0;
	}
	return st->capture_id;
}

void rc_stream_join_capture(CUstream s, uint64_t id)
{
	struct rc_stream *o;
	if (!id || !s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD ||
	    rc_stream_capture_id(s) || !active_origin(id, &o))
		return;
	struct rc_stream *st = (struct rc_stream *)s;
	st->capture_id = id;
	st->capture_joined = 1;
}

/* The stream whose capture s is part of (s itself, unless it joined). */
static CUstream capture_origin(CUstream s)
{
	struct rc_stream *o;
	if (s == CU_STREAM_PER_THREAD || !s || s == CU_STREAM_LEGACY)
		return s;
	struct rc_stream *st = (struct rc_stream *)s;
	if (st->capture_joined && st->capture_id && active_origin(st->capture_id, &o))
		return o ? (CUstream)o : CU_STREAM_PER_THREAD;
	return s;
}

static CUresult graph_call(struct rc_ctx *c, uint16_t op, uint64_t a, uint64_t b, struct rd *r)
{
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u64(w, a);
	put_u64(w, b);
	return rc_call(c->dev->conn, op, w, r);
}

static __thread struct rc_graph *per_thread_target, *per_thread_acc;

/* A capture's host copies: their words and registrations, gathered in a
 * graph object of the client's until the capture ends. */
static struct rc_graph **acc_of(CUstream s)
{
	s = capture_origin(s);
	if (s == CU_STREAM_PER_THREAD)
		return &per_thread_acc;
	return (struct rc_graph **)&((struct rc_stream *)s)->capture_acc;
}

CUresult rc_capture_host(CUstream s, struct rc_ctx *c, uint64_t dev, uint64_t other, uintptr_t held)
{
	struct rc_graph **acc = acc_of(s);
	if (!*acc && !(*acc = rc_graph_new(c, 0))) {
		rc_graph_host_drop(held);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	uint64_t words[2] = { dev, other };
	if (rc_graph_hold(*acc, &held, held ? 1 : 0, 0) || rc_graph_coh_add(*acc, words, sizeof(words)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	return CUDA_SUCCESS;
}

CUresult rc_capture_words(CUstream s, struct rc_ctx *c, const void *words, size_t n)
{
	struct rc_graph **acc = acc_of(s);
	if (!*acc && !(*acc = rc_graph_new(c, 0)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	return rc_graph_coh_add(*acc, words, n) ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

/* The capture's host copies go with graph g (NULL: the capture failed). */
static CUresult acc_end(CUstream s, struct rc_graph *g)
{
	struct rc_graph **acc = acc_of(s), *a = *acc;
	*acc = NULL;
	if (!a)
		return CUDA_SUCCESS;
	int bad = g && (rc_graph_coh_add(g, a->coh, a->ncoh) || rc_graph_hold(g, a->held, a->nheld, 1));
	rc_graph_free(a); /* (its own holds go: g took one more each) */
	return bad ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

void rc_stream_capture_gone(CUstream s)
{
	struct rc_stream *st = (struct rc_stream *)s;
	if (st->capture_id && !st->capture_joined) {
		/* (a capture never ended: the streams that joined it leave it,
		 * what it gathered goes) */
		active_del(st->capture_id);
		acc_end(s, NULL);
	}
	st->capture_id = 0;
}

/* Begins a capture of s: into a new graph, or into graph `into` after
 * nodes deps (cuStreamBeginCaptureToGraph). */
static CUresult begin_into(CUstream s, CUstreamCaptureMode mode, struct rc_graph *into,
			   const CUgraphNode *deps, size_t nd)
{
	struct rc_ctx *c;
	uint64_t h;
	CUresult rc = rc_stream_resolve(s, &c, &h);
	if (rc)
		return rc;
	if (!s || s == CU_STREAM_LEGACY)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	if (rc_stream_capture_id(s))
		return CUDA_ERROR_ILLEGAL_STATE;
	struct wbuf *w = rc_req();
	struct rd r;
	if (into) {
		if (into->ctx->dev->conn != c->dev->conn)
			return CUDA_ERROR_INVALID_VALUE;
		put_u64(w, c->h);
		put_u32(w, RGPU_G_CAPTURE_TO_GRAPH);
		put_u64(w, h);
		put_u64(w, into->h);
		put_u32(w, (uint32_t)mode);
		put_u32(w, (uint32_t)nd);
		for (size_t i = 0; i < nd; i++) {
			const struct rc_gnode *d = (const struct rc_gnode *)deps[i];
			if (!d || d->magic != RC_GNODE || d->g != into)
				return CUDA_ERROR_INVALID_VALUE;
			put_u64(w, d->h);
		}
		rc = rc_call(c->dev->conn, RGPU_OP_GRAPH_OP, w, &r);
	} else {
		put_u64(w, c->h);
		put_u64(w, h);
		put_u32(w, (uint32_t)mode);
		rc = rc_call(c->dev->conn, RGPU_OP_CAPTURE_BEGIN, w, &r);
	}
	if (rc)
		return rc;
	uint64_t id = __atomic_fetch_add(&next_capture, 1, __ATOMIC_RELAXED);
	active_add(id, s == CU_STREAM_PER_THREAD ? NULL : (struct rc_stream *)s);
	if (s == CU_STREAM_PER_THREAD) {
		per_thread_capture = id;
		per_thread_target = into;
	} else {
		((struct rc_stream *)s)->capture_id = id;
		((struct rc_stream *)s)->capture_graph = into;
	}
	return CUDA_SUCCESS;
}

static CUresult begin(CUstream s, CUstreamCaptureMode mode)
{
	return begin_into(s, mode, NULL, NULL, 0);
}

static CUresult begin_to_graph(CUstream s, CUgraph hg, const CUgraphNode *deps, const CUgraphEdgeData *ed,
			       size_t nd, CUstreamCaptureMode mode)
{
	struct rc_graph *g;
	CUresult rc = rc_obj(hg, RC_GRAPH, &g);
	if (rc)
		return rc;
	if (nd && !deps)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; ed && i < nd; i++)
		if (ed[i].type != CU_GRAPH_DEPENDENCY_TYPE_DEFAULT || ed[i].from_port || ed[i].to_port)
			return CUDA_ERROR_NOT_SUPPORTED;
	return begin_into(s, mode, g, deps, nd);
}

RC_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode *deps,
					       const CUgraphEdgeData *ed, size_t nd, CUstreamCaptureMode mode)
{
	return begin_to_graph(s, g, deps, ed, nd, mode);
}

RC_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode *deps,
						    const CUgraphEdgeData *ed, size_t nd,
						    CUstreamCaptureMode mode)
{
	return begin_to_graph(s ? s : CU_STREAM_PER_THREAD, g, deps, ed, nd, mode);
}

RC_EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) { return begin(s, mode); }
RC_EXPORT CUresult cuStreamBeginCapture(CUstream s) { return begin(s, CU_STREAM_CAPTURE_MODE_GLOBAL); }

RC_EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph *pg)
{
	struct rc_ctx *c;
	uint64_t h;
	CUresult rc = rc_stream_resolve(s, &c, &h);
	if (rc)
		return rc;
	uint64_t cid = rc_stream_capture_id(s);
	if (!cid)
		return pg ? CUDA_ERROR_ILLEGAL_STATE : CUDA_ERROR_INVALID_VALUE;
	if (capture_origin(s) != s) {
		/* it joined another's: the driver refuses, and invalidates
		 * that capture (measured on the H200, 2026-11-28) */
		struct wbuf *w = rc_req();
		put_u64(w, c->h);
		put_u64(w, h);
		struct rd r;
		rc = rc_call(c->dev->conn, RGPU_OP_CAPTURE_END, w, &r);
		return rc ? rc : CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
	}
	/* a capture into an existing graph may leave out where its graph
	 * goes (graphConditionalNodes does): the caller has it */
	if (!pg && !(s == CU_STREAM_PER_THREAD ? per_thread_target
					       : ((struct rc_stream *)s)->capture_graph))
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t hosts;
	struct rc_graph *into;
	if (s == CU_STREAM_PER_THREAD) {
		per_thread_capture = 0;
		hosts = per_thread_hosts;
		per_thread_hosts = 0;
		into = per_thread_target;
		per_thread_target = NULL;
	} else {
		struct rc_stream *st = (struct rc_stream *)s;
		st->capture_id = 0;
		hosts = st->capture_hosts;
		st->capture_hosts = 0;
		into = st->capture_graph;
		st->capture_graph = NULL;
	}
	active_del(cid); /* (the streams that joined it leave it) */
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u64(w, h);
	struct rd r;
	if ((rc = rc_call(c->dev->conn, RGPU_OP_CAPTURE_END, w, &r))) {
		acc_end(s, NULL);
		return rc;
	}
	/* captured into an existing graph: that graph, grown */
	struct rc_graph *g = into ? into : rc_graph_new(c, get_u64(&r));
	if (!g) {
		acc_end(s, NULL);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	g->nhost += hosts;
	if (pg)
		*pg = (CUgraph)g;
	return acc_end(s, g);
}

RC_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *pe, CUgraph graph, unsigned long long flags)
{
	struct rc_graph *g;
	CUresult rc = rc_obj(graph, RC_GRAPH, &g);
	if (rc)
		return rc;
	if (!pe)
		return CUDA_ERROR_INVALID_VALUE;
	struct rd r;
	if ((rc = graph_call(g->ctx, RGPU_OP_GRAPH_INSTANTIATE, g->h, flags, &r)))
		return rc;
	struct rc_graph *e = rc_graph_new(g->ctx, get_u64(&r));
	if (!e)
		return CUDA_ERROR_OUT_OF_MEMORY;
	e->magic = RC_GEXEC;
	if (rc_graph_copy_info(e, g) || rc_uobj_copy(e, g))
		return CUDA_ERROR_OUT_OF_MEMORY;
	*pe = (CUgraphExec)e;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec *pe, CUgraph graph, CUgraphNode *err_node,
					 char *log, size_t logsize)
{
	if (err_node)
		*err_node = NULL;
	if (log && logsize)
		log[0] = '\0';
	return cuGraphInstantiateWithFlags(pe, graph, 0);
}

RC_EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream s)
{
	struct rc_graph *e;
	struct rc_ctx *c;
	uint64_t h;
	CUresult rc = rc_obj(exec, RC_GEXEC, &e);
	if (!rc)
		rc = rc_stream_resolve(s, &c, &h);
	if (rc)
		return rc;
	if (c != e->ctx)
		return CUDA_ERROR_INVALID_HANDLE;
	/* release: kernels and copies see managed and mapped memory as the
	 * host left it */
	if (e->ncoh && (rc = rc_coh_launch(c, h, e->coh, e->ncoh)))
		return rc;
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u64(w, e->h);
	put_u64(w, h);
	if (!e->nhost)
		return rc_post(c->dev->conn, RGPU_OP_GRAPH_LAUNCH, w);
	/* host nodes: counted out before they can run; a launch that failed
	 * brings none */
	if ((rc = rc_hostfn_out(c->dev->conn, e->nhost)))
		return rc;
	struct rd r;
	if ((rc = rc_call(c->dev->conn, RGPU_OP_GRAPH_LAUNCH, w, &r)))
		rc_hostfn_back(c->dev->conn, e->nhost);
	return rc;
}

RC_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *pe, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	/* uploading is an optimisation: the first launch uploads anyway */
	CUresult rc = cuGraphInstantiateWithFlags(pe, graph, p->flags & ~(cuuint64_t)CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD);
	p->hErrNode_out = NULL;
	p->result_out = rc ? CUDA_GRAPH_INSTANTIATE_ERROR : CUDA_GRAPH_INSTANTIATE_SUCCESS;
	return rc;
}

RC_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *pe, CUgraph graph,
						     CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
	return cuGraphInstantiateWithParams(pe, graph, p);
}

RC_EXPORT CUresult cuGraphExecGetFlags(CUgraphExec exec, cuuint64_t *flags)
{
	struct rc_graph *e;
	CUresult rc = rc_obj(exec, RC_GEXEC, &e);
	if (rc)
		return rc;
	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	/* the server's driver says which of the instantiation's flags it
	 * reports (not the upload flag, nor always what was asked) */
	struct wbuf *w = rc_req();
	put_u64(w, e->ctx->h);
	put_u32(w, RGPU_G_EXEC_FLAGS);
	put_u64(w, e->h);
	struct rd r;
	if ((rc = rc_call(e->ctx->dev->conn, RGPU_OP_GRAPH_OP, w, &r)))
		return rc;
	uint64_t v = get_u64(&r);
	if (!rd_ok(&r))
		return CUDA_ERROR_UNKNOWN;
	*flags = v;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuGraphUpload(CUgraphExec exec, CUstream s)
{
	struct rc_graph *e;
	/* an optimisation only: the launch uploads anyway */
	(void)s;
	return rc_obj(exec, RC_GEXEC, &e);
}

static CUresult destroy(void *p, uint32_t magic)
{
	struct rc_graph *g;
	CUresult rc = rc_obj(p, magic, &g);
	if (rc)
		return rc;
	if (g->owned)
		return CUDA_ERROR_INVALID_VALUE;
	if (magic == RC_GEXEC && g->nurefs) {
		/* its user objects go once its launches are done */
		CUcontext popped;
		if (!cuCtxPushCurrent((CUcontext)g->ctx)) {
			cuCtxSynchronize();
			cuCtxPopCurrent(&popped);
		}
	}
	struct wbuf *w = rc_req();
	put_u64(w, g->ctx->h);
	put_u64(w, g->h);
	put_u32(w, magic == RC_GEXEC);
	struct rd r;
	rc = rc_call(g->ctx->dev->conn, RGPU_OP_GRAPH_DESTROY, w, &r);
	rc_graph_free(g);
	return rc;
}

RC_EXPORT CUresult cuGraphExecDestroy(CUgraphExec e) { return destroy(e, RC_GEXEC); }
RC_EXPORT CUresult cuGraphDestroy(CUgraph g) { return destroy(g, RC_GRAPH); }
