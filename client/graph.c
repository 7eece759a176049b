/* CUDA graphs by stream capture: the server captures the stream's work as
 * it runs it, so a graph is a server object; the client keeps handles and
 * which streams are capturing.  Host<->device copies cannot be captured
 * (the server would record its own staging buffers), and the nodes of a
 * graph are not exposed (only their number). */
#include "client.h"
#include "log.h"

#include <stdlib.h>

struct rc_graph {
	uint32_t magic;
	struct rc_ctx *ctx;
	uint64_t h;
};

static uint64_t next_capture = 1;
static __thread uint64_t per_thread_capture;

uint64_t rc_stream_capture_id(CUstream s)
{
	if (s == CU_STREAM_PER_THREAD)
		return per_thread_capture;
	if (!s || s == CU_STREAM_LEGACY)
		return 0;
	struct rc_stream *st = (struct rc_stream *)s;
	return st->magic == RC_STREAM ? st->capture_id : 0;
}

static CUresult graph_call(struct rc_ctx *c, uint16_t op, uint64_t a, uint64_t b, struct rd *r)
{
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u64(w, a);
	put_u64(w, b);
	return rc_call(c->dev->conn, op, w, r);
}

static CUresult begin(CUstream s, CUstreamCaptureMode mode)
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
	put_u64(w, c->h);
	put_u64(w, h);
	put_u32(w, (uint32_t)mode);
	struct rd r;
	if ((rc = rc_call(c->dev->conn, RGPU_OP_CAPTURE_BEGIN, w, &r)))
		return rc;
	uint64_t id = __atomic_fetch_add(&next_capture, 1, __ATOMIC_RELAXED);
	if (s == CU_STREAM_PER_THREAD)
		per_thread_capture = id;
	else
		((struct rc_stream *)s)->capture_id = id;
	return CUDA_SUCCESS;
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
	if (!pg)
		return CUDA_ERROR_INVALID_VALUE;
	if (!rc_stream_capture_id(s))
		return CUDA_ERROR_ILLEGAL_STATE;
	if (s == CU_STREAM_PER_THREAD)
		per_thread_capture = 0;
	else
		((struct rc_stream *)s)->capture_id = 0;
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u64(w, h);
	struct rd r;
	if ((rc = rc_call(c->dev->conn, RGPU_OP_CAPTURE_END, w, &r)))
		return rc;
	struct rc_graph *g = calloc(1, sizeof(*g));
	if (!g)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*g = (struct rc_graph){ RC_GRAPH, c, get_u64(&r) };
	*pg = (CUgraph)g;
	return CUDA_SUCCESS;
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
	struct rc_graph *e = calloc(1, sizeof(*e));
	if (!e)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*e = (struct rc_graph){ RC_GEXEC, g->ctx, get_u64(&r) };
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
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u64(w, e->h);
	put_u64(w, h);
	return rc_post(c->dev->conn, RGPU_OP_GRAPH_LAUNCH, w);
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
	struct wbuf *w = rc_req();
	put_u64(w, g->ctx->h);
	put_u64(w, g->h);
	put_u32(w, magic == RC_GEXEC);
	struct rd r;
	rc = rc_call(g->ctx->dev->conn, RGPU_OP_GRAPH_DESTROY, w, &r);
	g->magic = 0;
	free(g);
	return rc;
}

RC_EXPORT CUresult cuGraphExecDestroy(CUgraphExec e) { return destroy(e, RC_GEXEC); }
RC_EXPORT CUresult cuGraphDestroy(CUgraph g) { return destroy(g, RC_GRAPH); }

RC_EXPORT CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode *nodes, size_t *n)
{
	struct rc_graph *g;
	CUresult rc = rc_obj(graph, RC_GRAPH, &g);
	if (rc)
		return rc;
	if (!n)
		return CUDA_ERROR_INVALID_VALUE;
	if (nodes) {
		rc_unsupported("cuGraphGetNodes returning node handles");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	struct wbuf *w = rc_req();
	put_u64(w, g->ctx->h);
	put_u64(w, g->h);
	struct rd r;
	if ((rc = rc_call(g->ctx->dev->conn, RGPU_OP_GRAPH_NODES, w, &r)))
		return rc;
	*n = get_u64(&r);
	return CUDA_SUCCESS;
}
