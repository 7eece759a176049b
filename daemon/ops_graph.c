/* CUDA graphs: by stream capture (the stream's work is already executed
 * here, so capturing here records exactly what the client issued) and
 * built explicitly (GRAPH_OP).  Graphs, their nodes and executables are
 * session objects like any other: nodes are children of their graph,
 * and graphs a graph owns (child graphs, conditional bodies) are children
 * of it too, so they go with it and cannot be destroyed alone. */
#include "log.h"
#include "rgpud.h"
#include "session.h"

#include "gate.h"

#include <stdlib.h>
#include <string.h>

#define D (&rgpud_server.drv)

static void graph_forget(struct session *s, uint64_t g);
static uint64_t id_of(struct session *s, enum hkind kind, void *obj, uint64_t ctx, uint64_t parent);

/* parent of a capture's graph while it is being captured (not destroyable) */
#define CAPTURING ((uint64_t)-1)

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

/* A capture began on st: the journal keeps what it builds (journal.c). */
static void capture_begun(struct session *s, CUstream st)
{
	s->captures++;
	s->req_capture = session_capture_id(st);
}

int op_capture_begin(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	uint32_t mode = get_u32(r);
	CUstream st;
	int rc = ready_stream(s, r, &q, &st);
	if (!rc && !(rc = D->cuStreamBeginCapture_v2(st, (CUstreamCaptureMode)mode)))
		capture_begun(s, st);
	return rc;
}

int op_capture_end(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	CUstream st;
	int rc = ready_stream(s, r, &q, &st);
	CUgraph g = NULL;
	if (!rc) {
		rc = D->cuStreamEndCapture(st, &g);
		/* (ended, failed or not) */
		if (s->req_capture && s->captures)
			s->captures--;
	}
	if (rc)
		return rc;
	/* known already if the client asked for the capture's graph */
	uint64_t id = id_of(s, HK_GRAPH, g, q.ctx, 0);
	if (!id) {
		D->cuGraphDestroy(g);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	/* the client's now, unless it belongs to a graph (a capture into a
	 * conditional body) */
	struct hentry *ge = ht_get(&s->ht, id, HK_GRAPH);
	if (ge->parent == CAPTURING)
		ge->parent = 0;
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
	if (!is_exec && q.e->parent)
		return CUDA_ERROR_INVALID_VALUE; /* owned by another graph */
	rc = is_exec ? D->cuGraphExecDestroy(q.e->obj) : D->cuGraphDestroy(q.e->obj);
	if (!is_exec)
		graph_forget(s, q.id);
	else
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

/* ------------------------------------------------------- explicit graphs */

/* Forgets graph g and what hangs off it: its nodes, the graphs it owns
 * (recursively) and the memory its alloc nodes registered. */
static void graph_forget(struct session *s, uint64_t g)
{
	for (uint32_t i = 0; i < s->ht.n; i++) {
		struct hentry *e = &s->ht.e[i];
		if (e->kind == HK_GRAPH && e->parent == g)
			graph_forget(s, ht_id_at(&s->ht, i));
	}
	session_alloc_drop_module(s, g);
	ht_del_children(&s->ht, g);
	ht_del(&s->ht, g);
}

/* The id of driver object obj of this kind, registering it (as a child
 * of parent) when it has none yet; 0 when out of memory. */
static uint64_t id_find(struct session *s, enum hkind kind, void *obj)
{
	for (uint32_t i = 0; obj && i < s->ht.n; i++) {
		struct hentry *e = &s->ht.e[i];
		if (e->kind == kind && e->obj == obj)
			return ht_id_at(&s->ht, i);
	}
	return 0;
}

static uint64_t id_of(struct session *s, enum hkind kind, void *obj, uint64_t ctx, uint64_t parent)
{
	if (!obj)
		return 0;
	uint64_t id = id_find(s, kind, obj);
	if (id)
		return id;
	id = ht_add(&s->ht, kind, obj, ctx, NULL);
	if (id)
		ht_get(&s->ht, id, kind)->parent = parent;
	return id;
}

/* Node parameters as read from a request (the strings in lib/proto.h). */
struct nparams {
	CUgraphNodeType type;
	CUDA_KERNEL_NODE_PARAMS k;
	void *args[64];
	uint8_t *packed;
	CUDA_MEMCPY3D mc;
	CUDA_MEMSET_NODE_PARAMS ms;
	CUDA_HOST_NODE_PARAMS host;
	CUevent ev;
	CUgraph child;
	uint64_t child_id;
	uint64_t bytes, dptr;
	uint64_t cond;
	uint32_t cond_type, cond_size;
	/* batch memory operations: device addresses, the same on both sides */
	CUDA_BATCH_MEM_OP_NODE_PARAMS bm;
	CUstreamBatchMemOpParams ops[RGPU_G_MEMOPS_MAX];
};

/* Reads the fields; resolve() turns handles into driver objects once the
 * request is complete. */
struct nraw {
	uint64_t h;             /* func, event or child graph handle */
	uint32_t g[3], b[3], shmem;
	const uint8_t *params;
	size_t plen;
	uint64_t u[9];
	uint32_t v, elem;
	uint64_t client_id;
};

static void read_params(struct rd *r, uint32_t type, struct nraw *w)
{
	memset(w, 0, sizeof(*w));
	switch (type) {
	case CU_GRAPH_NODE_TYPE_KERNEL:
		w->h = get_u64(r);
		for (int i = 0; i < 3; i++)
			w->g[i] = get_u32(r);
		for (int i = 0; i < 3; i++)
			w->b[i] = get_u32(r);
		w->shmem = get_u32(r);
		w->params = get_bytes(r, &w->plen);
		break;
	case CU_GRAPH_NODE_TYPE_MEMCPY:
		for (int i = 0; i < 9; i++)
			w->u[i] = get_u64(r);
		break;
	case CU_GRAPH_NODE_TYPE_MEMSET:
		w->u[0] = get_u64(r);
		w->u[1] = get_u64(r);
		w->v = get_u32(r);
		w->elem = get_u32(r);
		w->u[2] = get_u64(r);
		w->u[3] = get_u64(r);
		break;
	case CU_GRAPH_NODE_TYPE_HOST:
		w->client_id = get_u64(r);
		break;
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
	case CU_GRAPH_NODE_TYPE_GRAPH:
		w->h = get_u64(r);
		break;
	case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
	case CU_GRAPH_NODE_TYPE_MEM_FREE:
		w->u[0] = get_u64(r);
		break;
	case CU_GRAPH_NODE_TYPE_CONDITIONAL:
		w->u[0] = get_u64(r);
		w->v = get_u32(r);
		w->elem = get_u32(r);
		break;
	case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
		w->v = get_u32(r);
		w->elem = get_u32(r);
		w->params = get_bytes(r, &w->plen);
		break;
	case CU_GRAPH_NODE_TYPE_EMPTY:
		break;
	default:
		r->bad = 1;
	}
}

/* After req_enter: driver objects for the handles; a CUresult. */
static int resolve(struct session *s, const struct req *q, uint32_t type, const struct nraw *w,
		   struct nparams *p)
{
	memset(p, 0, sizeof(*p));
	p->type = (CUgraphNodeType)type;
	struct hentry *e;
	switch (type) {
	case CU_GRAPH_NODE_TYPE_KERNEL: {
		if (!(e = req_obj(s, q, w->h, HK_FUNC)))
			return CUDA_ERROR_INVALID_HANDLE;
		struct param_layout *l = e->extra;
		if (w->plen < l->total || l->n > 64)
			return CUDA_ERROR_INVALID_VALUE;
		const uint8_t *ap = launch_params(s, w->params, l->total);
		if (!ap)
			return CUDA_ERROR_INVALID_VALUE;
		for (uint32_t i = 0; i < l->n; i++)
			p->args[i] = (void *)(ap + l->off[i]);
		p->k.func = e->obj;
		p->k.gridDimX = w->g[0];
		p->k.gridDimY = w->g[1];
		p->k.gridDimZ = w->g[2];
		p->k.blockDimX = w->b[0];
		p->k.blockDimY = w->b[1];
		p->k.blockDimZ = w->b[2];
		p->k.sharedMemBytes = w->shmem;
		p->k.kernelParams = l->n ? p->args : NULL;
		return CUDA_SUCCESS;
	}
	case CU_GRAPH_NODE_TYPE_MEMCPY:
		p->mc.srcMemoryType = CU_MEMORYTYPE_DEVICE;
		p->mc.srcDevice = w->u[0];
		p->mc.dstMemoryType = CU_MEMORYTYPE_DEVICE;
		p->mc.dstDevice = w->u[1];
		p->mc.srcPitch = w->u[2];
		p->mc.dstPitch = w->u[3];
		p->mc.srcHeight = w->u[4];
		p->mc.dstHeight = w->u[5];
		p->mc.WidthInBytes = w->u[6];
		p->mc.Height = w->u[7];
		p->mc.Depth = w->u[8];
		return CUDA_SUCCESS;
	case CU_GRAPH_NODE_TYPE_MEMSET:
		p->ms.dst = w->u[0];
		p->ms.pitch = w->u[1];
		p->ms.value = w->v;
		p->ms.elementSize = w->elem;
		p->ms.width = w->u[2];
		p->ms.height = w->u[3];
		return CUDA_SUCCESS;
	case CU_GRAPH_NODE_TYPE_HOST:
		if (!w->client_id)
			return CUDA_ERROR_INVALID_VALUE;
		if (!D->cuLaunchHostFunc && !D->cuGraphAddHostNode)
			return CUDA_ERROR_NOT_SUPPORTED;
		p->host.fn = hostfn_trampoline();
		if (!(p->host.userData = hostfn_node_arg(s, w->client_id, 0)))
			return CUDA_ERROR_OUT_OF_MEMORY;
		return CUDA_SUCCESS;
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
		if (!(e = req_obj(s, q, w->h, HK_EVENT)))
			return CUDA_ERROR_INVALID_HANDLE;
		p->ev = e->obj;
		return CUDA_SUCCESS;
	case CU_GRAPH_NODE_TYPE_GRAPH:
		if (!(e = req_obj(s, q, w->h, HK_GRAPH)))
			return CUDA_ERROR_INVALID_HANDLE;
		p->child = e->obj;
		p->child_id = w->h;
		return CUDA_SUCCESS;
	case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
		p->bytes = w->u[0];
		return p->bytes ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	case CU_GRAPH_NODE_TYPE_MEM_FREE:
		p->dptr = w->u[0];
		return CUDA_SUCCESS;
	case CU_GRAPH_NODE_TYPE_CONDITIONAL:
		p->cond = w->u[0];
		p->cond_type = w->v;
		p->cond_size = w->elem;
		return p->cond_size && p->cond_size <= 64 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
		/* the bytes are CUstreamBatchMemOpParams as the client has them
		 * (the same ABI: both ends are this build's cuda.h) */
		/* (none at all is a node the driver takes) */
		if (w->v > RGPU_G_MEMOPS_MAX || w->plen != (size_t)w->v * sizeof(p->ops[0]))
			return CUDA_ERROR_INVALID_VALUE;
		if (w->plen)
			memcpy(p->ops, w->params, w->plen);
		p->bm.ctx = session_ctx_obj(s);
		p->bm.count = w->v;
		p->bm.paramArray = p->ops;
		p->bm.flags = w->elem;
		return CUDA_SUCCESS;
	default:
		return CUDA_SUCCESS;
	}
}

#define NEED(fn) do { if (!D->fn) return CUDA_ERROR_NOT_SUPPORTED; } while (0)

static int add_node(struct session *s, const struct req *q, struct hentry *ge, const CUgraphNode *deps,
		    size_t nd, struct nparams *p, struct wbuf *out)
{
	CUgraph g = ge->obj;
	CUgraphNode n = NULL;
	int rc;
	CUgraph bodies_local[64];
	uint32_t nbodies = 0;
	CUgraph *bodies = NULL;
	switch (p->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL:
		NEED(cuGraphAddKernelNode_v2);
		rc = D->cuGraphAddKernelNode_v2(&n, g, deps, nd, &p->k);
		break;
	case CU_GRAPH_NODE_TYPE_MEMCPY:
		NEED(cuGraphAddMemcpyNode);
		rc = D->cuGraphAddMemcpyNode(&n, g, deps, nd, &p->mc, session_ctx_obj(s));
		break;
	case CU_GRAPH_NODE_TYPE_MEMSET:
		NEED(cuGraphAddMemsetNode);
		rc = D->cuGraphAddMemsetNode(&n, g, deps, nd, &p->ms, session_ctx_obj(s));
		break;
	case CU_GRAPH_NODE_TYPE_HOST:
		NEED(cuGraphAddHostNode);
		rc = D->cuGraphAddHostNode(&n, g, deps, nd, &p->host);
		break;
	case CU_GRAPH_NODE_TYPE_EMPTY:
		NEED(cuGraphAddEmptyNode);
		rc = D->cuGraphAddEmptyNode(&n, g, deps, nd);
		break;
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
		NEED(cuGraphAddEventRecordNode);
		rc = D->cuGraphAddEventRecordNode(&n, g, deps, nd, p->ev);
		break;
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
		NEED(cuGraphAddEventWaitNode);
		rc = D->cuGraphAddEventWaitNode(&n, g, deps, nd, p->ev);
		break;
	case CU_GRAPH_NODE_TYPE_GRAPH:
		NEED(cuGraphAddChildGraphNode);
		rc = D->cuGraphAddChildGraphNode(&n, g, deps, nd, p->child);
		break;
	case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
		NEED(cuGraphAddMemAllocNode);
		CUDA_MEM_ALLOC_NODE_PARAMS a;
		memset(&a, 0, sizeof(a));
		a.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
		a.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		a.poolProps.location.id = (int)q->cs->dev;
		a.bytesize = p->bytes;
		/* charged while the graph lives: the quota sees graph memory */
		if (gate_charge_bytes(q->cs->dev, p->bytes) < 0)
			return CUDA_ERROR_OUT_OF_MEMORY;
		rc = D->cuGraphAddMemAllocNode(&n, g, deps, nd, &a);
		if (!rc && session_gmem_note(s, a.dptr) < 0)
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		int added = rc ? -1 : session_alloc_add(s, a.dptr, p->bytes, q->ctx, q->id, q->cs->dev);
		struct alloc *same = added == 0 ? session_alloc_get(s, a.dptr) : NULL;
		if (same && same->module == q->id && same->dev == q->cs->dev && same->size >= p->bytes) {
			/* a node after the free of an earlier one of this graph
			 * reuses its address (and its memory): charged once */
			gate_refund_bytes(q->cs->dev, p->bytes);
		} else if (added != 1) {
			gate_refund_bytes(q->cs->dev, p->bytes);
			if (!rc) {
				D->cuGraphDestroyNode(n);
				rc = CUDA_ERROR_OUT_OF_MEMORY;
			}
		}
		p->dptr = a.dptr;
		break;
	}
	case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
		NEED(cuGraphAddBatchMemOpNode);
		rc = D->cuGraphAddBatchMemOpNode(&n, g, deps, nd, &p->bm);
		break;
	case CU_GRAPH_NODE_TYPE_MEM_FREE:
		NEED(cuGraphAddMemFreeNode);
		rc = D->cuGraphAddMemFreeNode(&n, g, deps, nd, p->dptr);
		break;
	case CU_GRAPH_NODE_TYPE_CONDITIONAL: {
		NEED(cuGraphAddNode_v2);
		CUgraphNodeParams np;
		memset(&np, 0, sizeof(np));
		np.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
		np.conditional.handle = p->cond;
		np.conditional.type = (CUgraphConditionalNodeType)p->cond_type;
		np.conditional.size = p->cond_size;
		np.conditional.ctx = session_ctx_obj(s);
		rc = D->cuGraphAddNode_v2(&n, g, deps, NULL, nd, &np);
		if (!rc) {
			nbodies = p->cond_size;
			bodies = np.conditional.phGraph_out;
			if (!bodies)
				nbodies = 0;
			for (uint32_t i = 0; i < nbodies; i++)
				bodies_local[i] = bodies[i];
		}
		break;
	}
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (rc)
		return rc;
	uint64_t id = ht_add(&s->ht, HK_GNODE, n, q->ctx, NULL);
	if (!id) {
		D->cuGraphDestroyNode(n);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	ht_get(&s->ht, id, HK_GNODE)->parent = q->id;
	put_u64(out, id);
	if (p->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC)
		put_u64(out, p->dptr);
	if (p->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
		put_u32(out, nbodies);
		for (uint32_t i = 0; i < nbodies; i++)
			put_u64(out, id_of(s, HK_GRAPH, bodies_local[i], q->ctx, q->id));
	}
	return CUDA_SUCCESS;
}

static int set_node(CUgraphExec x, CUgraphNode n, struct nparams *p, void *ctx)
{
	switch (p->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL:
		if (x) {
			NEED(cuGraphExecKernelNodeSetParams_v2);
			return D->cuGraphExecKernelNodeSetParams_v2(x, n, &p->k);
		}
		NEED(cuGraphKernelNodeSetParams_v2);
		return D->cuGraphKernelNodeSetParams_v2(n, &p->k);
	case CU_GRAPH_NODE_TYPE_MEMCPY:
		if (x) {
			NEED(cuGraphExecMemcpyNodeSetParams);
			return D->cuGraphExecMemcpyNodeSetParams(x, n, &p->mc, ctx);
		}
		NEED(cuGraphMemcpyNodeSetParams);
		return D->cuGraphMemcpyNodeSetParams(n, &p->mc);
	case CU_GRAPH_NODE_TYPE_MEMSET:
		if (x) {
			NEED(cuGraphExecMemsetNodeSetParams);
			return D->cuGraphExecMemsetNodeSetParams(x, n, &p->ms, ctx);
		}
		NEED(cuGraphMemsetNodeSetParams);
		return D->cuGraphMemsetNodeSetParams(n, &p->ms);
	case CU_GRAPH_NODE_TYPE_HOST:
		if (x) {
			NEED(cuGraphExecHostNodeSetParams);
			return D->cuGraphExecHostNodeSetParams(x, n, &p->host);
		}
		NEED(cuGraphHostNodeSetParams);
		return D->cuGraphHostNodeSetParams(n, &p->host);
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
		if (x) {
			NEED(cuGraphExecEventRecordNodeSetEvent);
			return D->cuGraphExecEventRecordNodeSetEvent(x, n, p->ev);
		}
		NEED(cuGraphEventRecordNodeSetEvent);
		return D->cuGraphEventRecordNodeSetEvent(n, p->ev);
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
		if (x) {
			NEED(cuGraphExecEventWaitNodeSetEvent);
			return D->cuGraphExecEventWaitNodeSetEvent(x, n, p->ev);
		}
		NEED(cuGraphEventWaitNodeSetEvent);
		return D->cuGraphEventWaitNodeSetEvent(n, p->ev);
	case CU_GRAPH_NODE_TYPE_GRAPH:
		/* (a graph's own child node has no setter in CUDA) */
		if (!x)
			return CUDA_ERROR_INVALID_VALUE;
		NEED(cuGraphExecChildGraphNodeSetParams);
		return D->cuGraphExecChildGraphNodeSetParams(x, n, p->child);
	case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
		if (x) {
			NEED(cuGraphExecBatchMemOpNodeSetParams);
			return D->cuGraphExecBatchMemOpNodeSetParams(x, n, &p->bm);
		}
		NEED(cuGraphBatchMemOpNodeSetParams);
		return D->cuGraphBatchMemOpNodeSetParams(n, &p->bm);
	default:
		return CUDA_ERROR_NOT_SUPPORTED;
	}
}

/* Reads "u32 n, handle node[n]" of graph g (its nodes) into an array. */
static int read_nodes(struct session *s, const struct req *q, const uint64_t *ids, uint32_t n,
		      uint64_t graph, CUgraphNode *out)
{
	for (uint32_t i = 0; i < n; i++) {
		struct hentry *e = req_obj(s, q, ids[i], HK_GNODE);
		if (!e || (graph && e->parent != graph))
			return CUDA_ERROR_INVALID_VALUE;
		out[i] = e->obj;
	}
	return CUDA_SUCCESS;
}

#define MAX_IDS 65536

static const uint64_t *get_ids(struct rd *r, uint32_t n)
{
	if (n > MAX_IDS)
		r->bad = 1;
	return r->bad ? NULL : get_raw(r, (size_t)n * 8);
}

static uint64_t le64(const uint64_t *p, uint32_t i)
{
	const uint8_t *b = (const uint8_t *)(p + i);
	uint64_t v = 0;
	for (int k = 7; k >= 0; k--)
		v = v << 8 | b[k];
	return v;
}

static int ids_to_nodes(struct session *s, const struct req *q, const uint64_t *raw, uint32_t n,
			uint64_t graph, CUgraphNode **out)
{
	uint64_t *ids = malloc((n ? n : 1) * sizeof(*ids));
	CUgraphNode *nodes = malloc((n ? n : 1) * sizeof(*nodes));
	if (!ids || !nodes) {
		free(ids);
		free(nodes);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	for (uint32_t i = 0; i < n; i++)
		ids[i] = le64(raw, i);
	int rc = read_nodes(s, q, ids, n, graph, nodes);
	free(ids);
	if (rc) {
		free(nodes);
		return rc;
	}
	*out = nodes;
	return CUDA_SUCCESS;
}

/* Nodes of g as ids (registering nodes captured or cloned here). */
static int put_nodes(struct session *s, const struct req *q, uint64_t gid, CUgraph g, struct wbuf *out)
{
	size_t n = 0;
	int rc = D->cuGraphGetNodes(g, NULL, &n);
	if (rc)
		return rc;
	CUgraphNode *nodes = malloc((n ? n : 1) * sizeof(*nodes));
	if (!nodes)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* (none: no second query, see RGPU_G_EDGES) */
	if (n && (rc = D->cuGraphGetNodes(g, nodes, &n))) {
		free(nodes);
		return rc;
	}
	put_u32(out, (uint32_t)n);
	for (size_t i = 0; i < n; i++) {
		CUgraphNodeType t = CU_GRAPH_NODE_TYPE_EMPTY;
		if (D->cuGraphNodeGetType)
			D->cuGraphNodeGetType(nodes[i], &t);
		put_u64(out, id_of(s, HK_GNODE, nodes[i], q->ctx, gid));
		put_u32(out, (uint32_t)t);
	}
	free(nodes);
	return CUDA_SUCCESS;
}

/* The id of the child graph of node n when the client was handed it
 * (RGPU_G_CHILD_GRAPH), else 0. */
static uint64_t child_known(struct session *s, CUgraphNode n)
{
	CUgraphNodeType t = CU_GRAPH_NODE_TYPE_EMPTY;
	CUgraph c = NULL;
	if (!D->cuGraphNodeGetType || !D->cuGraphChildGraphNodeGetGraph ||
	    D->cuGraphNodeGetType(n, &t) || t != CU_GRAPH_NODE_TYPE_GRAPH ||
	    D->cuGraphChildGraphNodeGetGraph(n, &c))
		return 0;
	return id_find(s, HK_GRAPH, c);
}

/* RGPU_G_SET_ENABLED, RGPU_G_GET_ENABLED: "handle exec, handle node"
 * (then u32 enabled to set) */
static int node_enabled(struct session *s, struct req *q, uint32_t sub, struct rd *r, struct wbuf *out)
{
	q->id = get_u64(r);
	uint64_t nid = get_u64(r);
	uint32_t on = sub == RGPU_G_SET_ENABLED ? get_u32(r) : 0;
	int rc = req_enter(s, r, q, HK_GRAPHEXEC);
	if (rc)
		return rc;
	struct hentry *n = req_obj(s, q, nid, HK_GNODE);
	if (!n)
		return CUDA_ERROR_INVALID_HANDLE;
	if (sub == RGPU_G_SET_ENABLED) {
		NEED(cuGraphNodeSetEnabled);
		return D->cuGraphNodeSetEnabled(q->e->obj, n->obj, on);
	}
	NEED(cuGraphNodeGetEnabled);
	unsigned int en = 0;
	if ((rc = D->cuGraphNodeGetEnabled(q->e->obj, n->obj, &en)))
		return rc;
	put_u32(out, en);
	return CUDA_SUCCESS;
}

/* RGPU_G_EXEC_FLAGS: "handle exec" -> u64 flags */
static int exec_flags(struct session *s, struct req *q, struct rd *r, struct wbuf *out)
{
	q->id = get_u64(r);
	int rc = req_enter(s, r, q, HK_GRAPHEXEC);
	if (rc)
		return rc;
	NEED(cuGraphExecGetFlags);
	cuuint64_t fl = 0;
	if ((rc = D->cuGraphExecGetFlags(q->e->obj, &fl)))
		return rc;
	put_u64(out, fl);
	return CUDA_SUCCESS;
}

/* RGPU_G_CHILD_GRAPH: the graph a child graph node owns, registered as
 * a child of the node's graph (so it goes with it and cannot be destroyed
 * alone, as in CUDA). */
static int child_graph(struct session *s, struct req *q, struct rd *r, struct wbuf *out)
{
	q->id = get_u64(r);
	int rc = req_enter(s, r, q, HK_GNODE);
	if (rc)
		return rc;
	NEED(cuGraphChildGraphNodeGetGraph);
	CUgraph c = NULL;
	if ((rc = D->cuGraphChildGraphNodeGetGraph(q->e->obj, &c)))
		return rc;
	uint64_t id = id_of(s, HK_GRAPH, c, q->ctx, q->e->parent);
	if (!id)
		return CUDA_ERROR_OUT_OF_MEMORY;
	put_u64(out, id);
	return CUDA_SUCCESS;
}

_Static_assert(sizeof(CUlaunchAttributeValue) == RGPU_G_KATTR_BYTES,
	       "a kernel node attribute's value travels as RGPU_G_KATTR_BYTES bytes");

/* Attributes whose values hold a driver handle: not sent either way. */
static int kattr_ok(uint32_t id)
{
	return id != CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT &&
	       id != CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT;
}

/* RGPU_G_KATTR_GET, _SET, _COPY: a kernel node's attributes. */
static int kernel_attr(struct session *s, struct req *q, uint32_t sub, struct rd *r, struct wbuf *out)
{
	q->id = get_u64(r);
	uint64_t src = sub == RGPU_G_KATTR_COPY ? get_u64(r) : 0;
	uint32_t id = sub == RGPU_G_KATTR_COPY ? 0 : get_u32(r);
	const void *raw = sub == RGPU_G_KATTR_SET ? get_raw(r, RGPU_G_KATTR_BYTES) : NULL;
	int rc = req_enter(s, r, q, HK_GNODE);
	if (rc)
		return rc;
	if (sub == RGPU_G_KATTR_COPY) {
		struct hentry *e = req_obj(s, q, src, HK_GNODE);
		if (!e)
			return CUDA_ERROR_INVALID_HANDLE;
		NEED(cuGraphKernelNodeCopyAttributes);
		return D->cuGraphKernelNodeCopyAttributes(q->e->obj, e->obj);
	}
	if (!kattr_ok(id))
		return CUDA_ERROR_INVALID_VALUE;
	CUkernelNodeAttrValue v;
	memset(&v, 0, sizeof(v));
	if (sub == RGPU_G_KATTR_SET) {
		NEED(cuGraphKernelNodeSetAttribute);
		memcpy(&v, raw, sizeof(v));
		return D->cuGraphKernelNodeSetAttribute(q->e->obj, (CUkernelNodeAttrID)id, &v);
	}
	NEED(cuGraphKernelNodeGetAttribute);
	if ((rc = D->cuGraphKernelNodeGetAttribute(q->e->obj, (CUkernelNodeAttrID)id, &v)))
		return rc;
	put_raw(out, &v, sizeof(v));
	return CUDA_SUCCESS;
}

static int graph_op(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out);

static const char *const sub_names[] = {
	[RGPU_G_CREATE] = "create",
	[RGPU_G_ADD] = "add node",
	[RGPU_G_DEPS] = "dependencies",
	[RGPU_G_NODES] = "nodes",
	[RGPU_G_EDGES] = "edges",
	[RGPU_G_DESTROY_NODE] = "destroy node",
	[RGPU_G_SET] = "set node",
	[RGPU_G_EXEC_SET] = "set executable node",
	[RGPU_G_EXEC_UPDATE] = "update executable",
	[RGPU_G_CLONE] = "clone",
	[RGPU_G_COND_HANDLE] = "conditional handle",
	[RGPU_G_CAPTURE_INFO] = "capture info",
	[RGPU_G_CAPTURE_DEPS] = "capture dependencies",
	[RGPU_G_MEM_TRIM] = "graph memory trim",
	[RGPU_G_CAPTURE_TO_GRAPH] = "capture to a graph",
	[RGPU_G_SET_ENABLED] = "enable node",
	[RGPU_G_GET_ENABLED] = "node enabled",
	[RGPU_G_CHILD_GRAPH] = "child graph",
	[RGPU_G_KATTR_GET] = "kernel node attribute",
	[RGPU_G_KATTR_SET] = "set kernel node attribute",
	[RGPU_G_KATTR_COPY] = "copy kernel node attributes",
	[RGPU_G_EXEC_FLAGS] = "executable flags",
};

/* GRAPH_OP: served by graph_op; one the driver refuses is logged (debug)
 * with its kind and, for a node, the node type, which the generic line
 * does not say. */
int op_graph_op(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct rd peek = *r;
	(void)get_u64(&peek); /* ctx */
	uint32_t sub = get_u32(&peek), type = 0;
	if (sub == RGPU_G_ADD || sub == RGPU_G_SET || sub == RGPU_G_EXEC_SET) {
		(void)get_u64(&peek);
		if (sub == RGPU_G_ADD) {
			uint32_t nd = get_u32(&peek);
			(void)get_ids(&peek, nd);
		} else if (sub == RGPU_G_EXEC_SET) {
			(void)get_u64(&peek);
		}
		type = get_u32(&peek);
	}
	int rc = graph_op(s, h, r, out);
	if (rc > 0 && rc != CUDA_ERROR_NOT_READY && rd_ok(&peek)) {
		const char *n = sub < sizeof(sub_names) / sizeof(*sub_names) ? sub_names[sub] : NULL;
		if (sub == RGPU_G_ADD || sub == RGPU_G_SET || sub == RGPU_G_EXEC_SET)
			log_debug("%s: GRAPH_OP %s (%u), node type %u (CUgraphNodeType) failed: %s",
				  s->name, n, sub, type, rgpud_cu_errname(D, rc));
		else
			log_debug("%s: GRAPH_OP %s (%u) failed: %s", s->name, n ? n : "?", sub,
				  rgpud_cu_errname(D, rc));
	}
	return rc;
}

static int graph_op(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX);
	uint32_t sub = get_u32(r);
	int rc;
	switch (sub) {
	case RGPU_G_CREATE: {
		uint32_t flags = get_u32(r);
		if ((rc = req_enter(s, r, &q, HK_FREE)))
			return rc;
		NEED(cuGraphCreate);
		CUgraph g;
		if ((rc = D->cuGraphCreate(&g, flags)))
			return rc;
		uint64_t id = ht_add(&s->ht, HK_GRAPH, g, q.ctx, NULL);
		if (!id) {
			D->cuGraphDestroy(g);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		put_u64(out, id);
		return CUDA_SUCCESS;
	}
	case RGPU_G_ADD: {
		q.id = get_u64(r);
		uint32_t nd = get_u32(r);
		const uint64_t *raw = get_ids(r, nd);
		uint32_t type = get_u32(r);
		struct nraw w;
		read_params(r, type, &w);
		if ((rc = req_enter(s, r, &q, HK_GRAPH)))
			return rc;
		CUgraphNode *deps;
		if ((rc = ids_to_nodes(s, &q, raw, nd, q.id, &deps)))
			return rc;
		struct nparams p;
		if (!(rc = resolve(s, &q, type, &w, &p)))
			rc = add_node(s, &q, q.e, nd ? deps : NULL, nd, &p, out);
		free(deps);
		return rc;
	}
	case RGPU_G_DEPS: {
		q.id = get_u64(r);
		uint32_t flags = get_u32(r), n = get_u32(r);
		uint32_t remove = flags & 1, with_data = flags & RGPU_G_DEPS_EDGE_DATA;
		const uint64_t *raw = get_ids(r, n > MAX_IDS / 2 ? MAX_IDS + 1 : 2 * n);
		CUgraphEdgeData *ed = NULL;
		if (with_data && rd_ok(r) && n <= MAX_IDS / 2) {
			if (!(ed = calloc(n ? n : 1, sizeof(*ed))))
				return CUDA_ERROR_OUT_OF_MEMORY;
			for (uint32_t i = 0; i < n; i++)
				rgpu_edge_fields(get_u32(r), &ed[i].from_port, &ed[i].to_port,
						 &ed[i].type);
		}
		rc = flags & ~(1u | RGPU_G_DEPS_EDGE_DATA) ? CUDA_ERROR_INVALID_VALUE
							    : req_enter(s, r, &q, HK_GRAPH);
		if (rc) {
			free(ed);
			return rc;
		}
		if (!D->cuGraphAddDependencies || !D->cuGraphRemoveDependencies ||
		    (ed && (!D->cuGraphAddDependencies_v2 || !D->cuGraphRemoveDependencies_v2))) {
			free(ed);
			return CUDA_ERROR_NOT_SUPPORTED;
		}
		CUgraphNode *pairs;
		if ((rc = ids_to_nodes(s, &q, raw, 2 * n, q.id, &pairs))) {
			free(ed);
			return rc;
		}
		CUgraphNode *from = malloc((n ? n : 1) * sizeof(*from));
		CUgraphNode *to = malloc((n ? n : 1) * sizeof(*to));
		if (!from || !to) {
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			for (uint32_t i = 0; i < n; i++) {
				from[i] = pairs[2 * i];
				to[i] = pairs[2 * i + 1];
			}
			if (ed)
				rc = remove ? D->cuGraphRemoveDependencies_v2(q.e->obj, from, to, ed, n)
					    : D->cuGraphAddDependencies_v2(q.e->obj, from, to, ed, n);
			else
				rc = remove ? D->cuGraphRemoveDependencies(q.e->obj, from, to, n)
					    : D->cuGraphAddDependencies(q.e->obj, from, to, n);
		}
		free(from);
		free(to);
		free(pairs);
		free(ed);
		return rc;
	}
	case RGPU_G_NODES:
		q.id = get_u64(r);
		if ((rc = req_enter(s, r, &q, HK_GRAPH)))
			return rc;
		return put_nodes(s, &q, q.id, q.e->obj, out);
	case RGPU_G_EDGES: {
		q.id = get_u64(r);
		if ((rc = req_enter(s, r, &q, HK_GRAPH)))
			return rc;
		NEED(cuGraphGetEdges);
		size_t n = 0;
		if ((rc = D->cuGraphGetEdges(q.e->obj, NULL, NULL, &n)))
			return rc;
		CUgraphNode *from = malloc((n ? n : 1) * sizeof(*from));
		CUgraphNode *to = malloc((n ? n : 1) * sizeof(*to));
		/* with each edge's data where the driver has it (without, a graph
		 * with programmatic edges answers CUDA_ERROR_LOSSY_QUERY) */
		CUgraphEdgeData *ed = D->cuGraphGetEdges_v2 ? calloc(n ? n : 1, sizeof(*ed)) : NULL;
		if (!from || !to || (D->cuGraphGetEdges_v2 && !ed))
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		else if (n)
			/* (not with room for none: a graph without edges, as XLA's
			 * traced command buffers of one kernel are, then made
			 * JAX's step fail now and then with INVALID_VALUE) */
			rc = ed ? D->cuGraphGetEdges_v2(q.e->obj, from, to, ed, &n)
				: D->cuGraphGetEdges(q.e->obj, from, to, &n);
		if (!rc) {
			put_u32(out, (uint32_t)n);
			for (size_t i = 0; i < n; i++) {
				put_u64(out, id_of(s, HK_GNODE, from[i], q.ctx, q.id));
				put_u64(out, id_of(s, HK_GNODE, to[i], q.ctx, q.id));
			}
			for (size_t i = 0; ed && i < n; i++)
				put_u32(out, rgpu_edge_word(ed[i].from_port, ed[i].to_port, ed[i].type));
		}
		free(from);
		free(to);
		free(ed);
		return rc;
	}
	case RGPU_G_DESTROY_NODE: {
		q.id = get_u64(r);
		if ((rc = req_enter(s, r, &q, HK_GNODE)))
			return rc;
		NEED(cuGraphDestroyNode);
		/* a child graph the client was handed goes with its node */
		uint64_t child = child_known(s, q.e->obj);
		if (!(rc = D->cuGraphDestroyNode(q.e->obj))) {
			ht_del(&s->ht, q.id);
			if (child)
				graph_forget(s, child);
		}
		return rc;
	}
	case RGPU_G_SET:
	case RGPU_G_EXEC_SET: {
		uint64_t xid = sub == RGPU_G_EXEC_SET ? get_u64(r) : 0;
		q.id = get_u64(r);
		uint32_t type = get_u32(r);
		struct nraw w;
		read_params(r, type, &w);
		if ((rc = req_enter(s, r, &q, HK_GNODE)))
			return rc;
		struct hentry *x = xid ? req_obj(s, &q, xid, HK_GRAPHEXEC) : NULL;
		if (xid && !x)
			return CUDA_ERROR_INVALID_HANDLE;
		struct nparams p;
		if ((rc = resolve(s, &q, type, &w, &p)))
			return rc;
		return set_node(x ? x->obj : NULL, q.e->obj, &p, session_ctx_obj(s));
	}
	case RGPU_G_EXEC_UPDATE: {
		q.id = get_u64(r);
		uint64_t gid = get_u64(r);
		if ((rc = req_enter(s, r, &q, HK_GRAPHEXEC)))
			return rc;
		struct hentry *g = req_obj(s, &q, gid, HK_GRAPH);
		if (!g)
			return CUDA_ERROR_INVALID_HANDLE;
		NEED(cuGraphExecUpdate_v2);
		CUgraphExecUpdateResultInfo info;
		memset(&info, 0, sizeof(info));
		rc = D->cuGraphExecUpdate_v2(q.e->obj, g->obj, &info);
		put_u32(out, (uint32_t)info.result);
		put_u64(out, info.errorNode ? id_of(s, HK_GNODE, info.errorNode, q.ctx, gid) : 0);
		return rc;
	}
	case RGPU_G_CLONE: {
		q.id = get_u64(r);
		if ((rc = req_enter(s, r, &q, HK_GRAPH)))
			return rc;
		NEED(cuGraphClone);
		NEED(cuGraphNodeFindInClone);
		CUgraph c;
		if ((rc = D->cuGraphClone(&c, q.e->obj)))
			return rc;
		uint64_t cid = ht_add(&s->ht, HK_GRAPH, c, q.ctx, NULL);
		if (!cid) {
			D->cuGraphDestroy(c);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		put_u64(out, cid);
		/* every node of the original and its counterpart */
		uint32_t n = 0;
		for (int pass = 0; pass < 2; pass++) {
			if (pass)
				put_u32(out, n);
			for (uint32_t i = 0; i < s->ht.n; i++) {
				struct hentry *e = &s->ht.e[i];
				CUgraphNode cn;
				if (e->kind != HK_GNODE || e->parent != q.id ||
				    D->cuGraphNodeFindInClone(&cn, e->obj, c) != CUDA_SUCCESS)
					continue;
				if (!pass) {
					n++;
					continue;
				}
				put_u64(out, ht_id_at(&s->ht, i));
				put_u64(out, id_of(s, HK_GNODE, cn, q.ctx, cid));
			}
		}
		return CUDA_SUCCESS;
	}
	case RGPU_G_COND_HANDLE: {
		q.id = get_u64(r);
		uint32_t def = get_u32(r), flags = get_u32(r);
		if ((rc = req_enter(s, r, &q, HK_GRAPH)))
			return rc;
		NEED(cuGraphConditionalHandleCreate);
		CUgraphConditionalHandle c = 0;
		rc = D->cuGraphConditionalHandleCreate(&c, q.e->obj, session_ctx_obj(s), def, flags);
		put_u64(out, (uint64_t)c);
		return rc;
	}
	case RGPU_G_CAPTURE_INFO: {
		uint64_t sid = get_u64(r);
		if ((rc = req_enter(s, r, &q, HK_FREE)))
			return rc;
		CUstream st;
		if ((rc = req_stream(s, sid, &st)))
			return rc;
		NEED(cuStreamGetCaptureInfo_v3);
		CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
		cuuint64_t cid = 0;
		CUgraph g = NULL;
		const CUgraphNode *deps = NULL;
		size_t nd = 0;
		if ((rc = D->cuStreamGetCaptureInfo_v3(st, &cs, &cid, &g, &deps, NULL, &nd)))
			return rc;
		/* the graph being captured belongs to the capture: the client
		 * may add nodes to it, not destroy it */
		uint64_t gid = g ? id_of(s, HK_GRAPH, g, q.ctx, CAPTURING) : 0;
		put_u32(out, (uint32_t)cs);
		put_u64(out, cid);
		put_u64(out, gid);
		put_u32(out, (uint32_t)nd);
		for (size_t i = 0; i < nd; i++)
			put_u64(out, id_of(s, HK_GNODE, deps[i], q.ctx, gid));
		return CUDA_SUCCESS;
	}
	case RGPU_G_CAPTURE_DEPS: {
		uint64_t sid = get_u64(r);
		uint32_t flags = get_u32(r), n = get_u32(r);
		const uint64_t *raw = get_ids(r, n);
		if ((rc = req_enter(s, r, &q, HK_FREE)))
			return rc;
		CUstream st;
		if ((rc = req_stream(s, sid, &st)))
			return rc;
		NEED(cuStreamUpdateCaptureDependencies_v2);
		CUgraphNode *deps;
		if ((rc = ids_to_nodes(s, &q, raw, n, 0, &deps)))
			return rc;
		rc = D->cuStreamUpdateCaptureDependencies_v2(st, deps, NULL, n, flags);
		free(deps);
		return rc;
	}
	case RGPU_G_CAPTURE_TO_GRAPH: {
		uint64_t sid = get_u64(r);
		q.id = get_u64(r);
		uint32_t mode = get_u32(r), n = get_u32(r);
		const uint64_t *raw = get_ids(r, n);
		if ((rc = req_enter(s, r, &q, HK_GRAPH)))
			return rc;
		CUstream st;
		if ((rc = req_stream(s, sid, &st)))
			return rc;
		NEED(cuStreamBeginCaptureToGraph);
		CUgraphNode *deps;
		if ((rc = ids_to_nodes(s, &q, raw, n, q.id, &deps)))
			return rc;
		rc = D->cuStreamBeginCaptureToGraph(st, q.e->obj, n ? deps : NULL, NULL, n,
						    (CUstreamCaptureMode)mode);
		free(deps);
		if (!rc)
			capture_begun(s, st);
		return rc;
	}
	case RGPU_G_SET_ENABLED:
	case RGPU_G_GET_ENABLED:
		return node_enabled(s, &q, sub, r, out);
	case RGPU_G_CHILD_GRAPH:
		return child_graph(s, &q, r, out);
	case RGPU_G_EXEC_FLAGS:
		return exec_flags(s, &q, r, out);
	case RGPU_G_KATTR_GET:
	case RGPU_G_KATTR_SET:
	case RGPU_G_KATTR_COPY:
		return kernel_attr(s, &q, sub, r, out);
	case RGPU_G_MEM_TRIM:
		if ((rc = req_enter(s, r, &q, HK_FREE)))
			return rc;
		NEED(cuDeviceGraphMemTrim);
		return D->cuDeviceGraphMemTrim((CUdevice)q.cs->dev);
	default:
		return rd_ok(r) ? CUDA_ERROR_INVALID_VALUE : OP_DROP;
	}
}
