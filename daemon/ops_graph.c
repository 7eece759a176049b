/* CUDA graphs by stream capture.  The stream's work is already executed
 * here, so capturing here records exactly what the client issued; graphs
 * and their executables are session objects like any other. */
#include "rgpud.h"
#include "session.h"

#define D (&rgpud_server.drv)

static int ready(struct session *s, uint64_t ctx)
{
	int rc = session_enter_ctx(s, ctx, NULL);
	if (!rc && !D->have_graphs)
		rc = CUDA_ERROR_NOT_SUPPORTED;
	return rc;
}

static int ready_stream(struct session *s, uint64_t ctx, uint64_t sid, CUstream *st)
{
	int rc = ready(s, ctx);
	return rc ? rc : session_stream(s, sid, st);
}

int op_capture_begin(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r), sid = get_u64(r);
	uint32_t mode = get_u32(r);
	if (!rd_done(r))
		return OP_DROP;
	CUstream st;
	int rc = ready_stream(s, ctx, sid, &st);
	return rc ? rc : (int)D->cuStreamBeginCapture_v2(st, (CUstreamCaptureMode)mode);
}

int op_capture_end(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r), sid = get_u64(r);
	if (!rd_done(r))
		return OP_DROP;
	CUstream st;
	int rc = ready_stream(s, ctx, sid, &st);
	CUgraph g = NULL;
	if (!rc)
		rc = D->cuStreamEndCapture(st, &g);
	if (rc)
		return rc;
	uint64_t id = ht_add(&s->ht, HK_GRAPH, g, ctx, NULL);
	if (!id) {
		D->cuGraphDestroy(g);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	put_u64(out, id);
	return CUDA_SUCCESS;
}

int op_capture_status(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r), sid = get_u64(r);
	if (!rd_done(r))
		return OP_DROP;
	CUstream st;
	int rc = ready_stream(s, ctx, sid, &st);
	CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
	if (!rc)
		rc = D->cuStreamIsCapturing(st, &cs);
	put_u32(out, (uint32_t)cs);
	return rc;
}

int op_graph_instantiate(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r), gid = get_u64(r), flags = get_u64(r);
	if (!rd_done(r))
		return OP_DROP;
	int rc = ready(s, ctx);
	if (rc)
		return rc;
	struct hentry *g = ht_get(&s->ht, gid, HK_GRAPH);
	if (!g)
		return CUDA_ERROR_INVALID_HANDLE;
	CUgraphExec ex;
	if ((rc = D->cuGraphInstantiateWithFlags(&ex, g->obj, flags)))
		return rc;
	uint64_t id = ht_add(&s->ht, HK_GRAPHEXEC, ex, ctx, NULL);
	if (!id) {
		D->cuGraphExecDestroy(ex);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	put_u64(out, id);
	return CUDA_SUCCESS;
}

int op_graph_launch(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r), eid = get_u64(r), sid = get_u64(r);
	if (!rd_done(r))
		return OP_DROP;
	CUstream st;
	int rc = ready_stream(s, ctx, sid, &st);
	if (rc)
		return rc;
	struct hentry *e = ht_get(&s->ht, eid, HK_GRAPHEXEC);
	return e ? (int)D->cuGraphLaunch(e->obj, st) : CUDA_ERROR_INVALID_HANDLE;
}

int op_graph_destroy(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r), id = get_u64(r);
	uint32_t is_exec = get_u32(r);
	if (!rd_done(r))
		return OP_DROP;
	int rc = ready(s, ctx);
	if (rc)
		return rc;
	struct hentry *e = ht_get(&s->ht, id, is_exec ? HK_GRAPHEXEC : HK_GRAPH);
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	rc = is_exec ? D->cuGraphExecDestroy(e->obj) : D->cuGraphDestroy(e->obj);
	ht_del(&s->ht, id);
	return rc;
}

int op_graph_nodes(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r), gid = get_u64(r);
	if (!rd_done(r))
		return OP_DROP;
	int rc = ready(s, ctx);
	if (rc)
		return rc;
	struct hentry *g = ht_get(&s->ht, gid, HK_GRAPH);
	if (!g)
		return CUDA_ERROR_INVALID_HANDLE;
	size_t n = 0;
	rc = D->cuGraphGetNodes(g->obj, NULL, &n);
	put_u64(out, n);
	return rc;
}
