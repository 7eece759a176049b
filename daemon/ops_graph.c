/* CUDA graphs by stream capture.  The stream's work is already executed
 * here, so capturing here records exactly what the client issued; graphs
 * and their executables are session objects like any other. */
#include "rgpud.h"
#include "session.h"

#define D (&rgpud_server.drv)

/* The handler prologue (req_enter) and graphs being there. */
static int ready(struct session *s, struct rd *r, struct req *q, enum hkind kind)
{
	int rc = req_enter(s, r, q, kind);
	if (!rc && !D->have_graphs)
		rc = CUDA_ERROR_NOT_SUPPORTED;
	return rc;
}

/* ... for "handle ctx, handle stream" requests */
static int ready_stream(struct session *s, struct rd *r, struct req *q, CUstream *st)
{
	int rc = ready(s, r, q, HK_FREE);
	return rc ? rc : req_stream(s, q->id, st);
}

int op_capture_begin(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	uint32_t mode = get_u32(r);
	CUstream st;
	int rc = ready_stream(s, r, &q, &st);
	return rc ? rc : (int)D->cuStreamBeginCapture_v2(st, (CUstreamCaptureMode)mode);
}

int op_capture_end(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	CUstream st;
	int rc = ready_stream(s, r, &q, &st);
	CUgraph g = NULL;
	if (!rc)
		rc = D->cuStreamEndCapture(st, &g);
	if (rc)
		return rc;
	uint64_t id = ht_add(&s->ht, HK_GRAPH, g, q.ctx, NULL);
	if (!id) {
		D->cuGraphDestroy(g);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	put_u64(out, id);
	return CUDA_SUCCESS;
}

int op_capture_status(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	CUstream st;
	int rc = ready_stream(s, r, &q, &st);
	if (rc == OP_DROP)
		return rc;
	CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
	if (!rc)
		rc = D->cuStreamIsCapturing(st, &cs);
	put_u32(out, (uint32_t)cs);
	return rc;
}

int op_graph_instantiate(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	uint64_t flags = get_u64(r);
	int rc = ready(s, r, &q, HK_GRAPH);
	if (rc)
		return rc;
	CUgraphExec ex;
	if ((rc = D->cuGraphInstantiateWithFlags(&ex, q.e->obj, flags)))
		return rc;
	uint64_t id = ht_add(&s->ht, HK_GRAPHEXEC, ex, q.ctx, NULL);
	if (!id) {
		D->cuGraphExecDestroy(ex);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	put_u64(out, id);
	return CUDA_SUCCESS;
}

int op_graph_launch(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	uint64_t sid = get_u64(r);
	int rc = ready(s, r, &q, HK_GRAPHEXEC);
	CUstream st;
	if (!rc)
		rc = req_stream(s, sid, &st);
	return rc ? rc : (int)D->cuGraphLaunch(q.e->obj, st);
}

int op_graph_destroy(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	uint32_t is_exec = get_u32(r);
	int rc = ready(s, r, &q, is_exec ? HK_GRAPHEXEC : HK_GRAPH);
	if (rc)
		return rc;
	rc = is_exec ? D->cuGraphExecDestroy(q.e->obj) : D->cuGraphDestroy(q.e->obj);
	ht_del(&s->ht, q.id);
	return rc;
}

int op_graph_nodes(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	int rc = ready(s, r, &q, HK_GRAPH);
	if (rc)
		return rc;
	size_t n = 0;
	rc = D->cuGraphGetNodes(q.e->obj, NULL, &n);
	put_u64(out, n);
	return rc;
}

int op_graph_op(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	return CUDA_ERROR_NOT_SUPPORTED;
}
