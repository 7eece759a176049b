/* Explicit graphs: building them node by node on the server (GRAPH_OP),
 * their nodes' parameters, dependencies, clones, executable updates and
 * conditional nodes.  See graph.c for what the client keeps. */
#include "graph.h"
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t glock = PTHREAD_MUTEX_INITIALIZER;

struct rc_graph *rc_graph_new(struct rc_ctx *c, uint64_t h)
{
	struct rc_graph *g = calloc(1, sizeof(*g));
	if (g) {
		g->magic = RC_GRAPH;
		g->ctx = c;
		g->h = h;
	}
	return g;
}

static void node_free(struct rc_gnode *n)
{
	free(n->kargs);
	free(n->kbuf);
	free(n->bmops);
	if (n->child)
		rc_graph_free(n->child);
	for (unsigned i = 0; i < n->nbodies; i++)
		rc_graph_free(n->bodies[i]);
	free(n->bodies);
	n->magic = 0;
	free(n);
}

void rc_graph_free(struct rc_graph *g)
{
	for (size_t i = 0; i < g->nnodes; i++)
		node_free(g->nodes[i]);
	free(g->nodes);
	free(g->coh);
	for (size_t i = 0; i < g->nheld; i++)
		rc_graph_host_drop(g->held[i]);
	free(g->held);
	rc_uobj_drop(g);
	g->magic = 0;
	free(g);
}

int rc_graph_hold(struct rc_graph *g, const uintptr_t *held, size_t n, int ref)
{
	if (!n)
		return 0;
	uintptr_t *h = realloc(g->held, (g->nheld + n) * sizeof(*h));
	if (!h) {
		for (size_t i = 0; !ref && i < n; i++)
			rc_graph_host_drop(held[i]);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		if (ref)
			rc_region_auto_ref(held[i]);
		h[g->nheld++] = held[i];
	}
	g->held = h;
	return 0;
}

static int coh_add1(struct rc_graph *g, const void *p, size_t n)
{
	if (!n)
		return 0;
	/* whole words: rc_coh_launch reads 8-byte words */
	size_t k = (n + 7) & ~(size_t)7;
	uint8_t *c = realloc(g->coh, g->ncoh + k);
	if (!c)
		return -1;
	memset(c + g->ncoh, 0, k);
	memcpy(c + g->ncoh, p, n);
	g->coh = c;
	g->ncoh += k;
	return 0;
}

/* The graph that holds child graph g's node (NULL for other graphs):
 * what is added to a child graph handed out counts for it too. */
static struct rc_graph *owner_graph(const struct rc_graph *g)
{
	return g->owner ? g->owner->g : NULL;
}

static int coh_add(struct rc_graph *g, const void *p, size_t n)
{
	for (; g; g = owner_graph(g))
		if (coh_add1(g, p, n))
			return -1;
	return 0;
}

int rc_graph_coh_add(struct rc_graph *g, const void *words, size_t n) { return coh_add(g, words, n); }

int rc_graph_copy_info(struct rc_graph *dst, const struct rc_graph *src)
{
	dst->nhost = src->nhost;
	free(dst->coh);
	dst->coh = NULL;
	dst->ncoh = 0;
	if (rc_graph_hold(dst, src->held, src->nheld, 1))
		return -1;
	return coh_add(dst, src->coh, src->ncoh);
}

static struct rc_gnode *node_add(struct rc_graph *g, uint64_t h, CUgraphNodeType t)
{
	if (g->nnodes == g->capnodes) {
		size_t cap = g->capnodes ? 2 * g->capnodes : 16;
		struct rc_gnode **p = realloc(g->nodes, cap * sizeof(*p));
		if (!p)
			return NULL;
		g->nodes = p;
		g->capnodes = cap;
	}
	struct rc_gnode *n = calloc(1, sizeof(*n));
	if (!n)
		return NULL;
	n->magic = RC_GNODE;
	n->g = g;
	n->h = h;
	n->type = t;
	g->nodes[g->nnodes++] = n;
	return n;
}

static struct rc_gnode *node_by_id(struct rc_graph *g, uint64_t h)
{
	for (size_t i = 0; i < g->nnodes; i++)
		if (g->nodes[i]->h == h)
			return g->nodes[i];
	return NULL;
}

/* The node of g with server id h, made when this process has none yet
 * (nodes a capture or a clone made). */
static struct rc_gnode *node_of_id(struct rc_graph *g, uint64_t h, CUgraphNodeType t)
{
	struct rc_gnode *n = node_by_id(g, h);
	return n ? n : node_add(g, h, t);
}

static CUresult get_graph(CUgraph p, struct rc_graph **g)
{
	return rc_obj(p, RC_GRAPH, g);
}

static CUresult get_node(CUgraphNode p, struct rc_gnode **n)
{
	return rc_obj(p, RC_GNODE, n);
}

static struct wbuf *gop(struct rc_ctx *c, uint32_t sub)
{
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u32(w, sub);
	return w;
}

static CUresult put_deps(struct wbuf *w, struct rc_graph *g, const CUgraphNode *deps, size_t n)
{
	if (n && !deps)
		return CUDA_ERROR_INVALID_VALUE;
	put_u32(w, (uint32_t)n);
	for (size_t i = 0; i < n; i++) {
		struct rc_gnode *d;
		if (get_node(deps[i], &d) || d->g != g)
			return CUDA_ERROR_INVALID_VALUE;
		put_u64(w, d->h);
	}
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuGraphCreate(CUgraph *out, unsigned int flags)
{
	struct rc_ctx *c;
	CUresult rc = rc_need_ctx(&c);
	if (rc)
		return rc;
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	struct wbuf *w = gop(c, RGPU_G_CREATE);
	put_u32(w, flags);
	struct rd r;
	if ((rc = rc_call(c->dev->conn, RGPU_OP_GRAPH_OP, w, &r)))
		return rc;
	struct rc_graph *g = rc_graph_new(c, get_u64(&r));
	if (!g)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*out = (CUgraph)g;
	return CUDA_SUCCESS;
}

/* ------------------------------------------------------ node parameters */

/* Kernel parameters packed at the server's layout (as a launch packs them),
 * kept in n for reading back. */
static CUresult kernel_pack(struct rc_gnode *n, struct rc_func *f, void **params, void **extra)
{
	const struct rc_layout *l = &f->layout;
	size_t len = l->total;
	uint8_t *buf = calloc(1, len ? len : 1);
	void **args = calloc(l->n ? l->n : 1, sizeof(*args));
	if (!buf || !args) {
		free(buf);
		free(args);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (params) {
		for (uint32_t i = 0; i < l->n; i++) {
			if (!params[i])
				goto bad;
			memcpy(buf + l->off[i], params[i], l->size[i]);
		}
	} else if (extra) {
		const void *eb;
		size_t es;
		if (rc_launch_extra(extra, &eb, &es) || es < len)
			goto bad;
		memcpy(buf, eb, len);
	} else if (l->n) {
		goto bad;
	}
	for (uint32_t i = 0; i < l->n; i++)
		args[i] = buf + l->off[i];
	free(n->kbuf);
	free(n->kargs);
	n->kbuf = buf;
	n->kargs = args;
	return CUDA_SUCCESS;
bad:
	free(buf);
	free(args);
	return CUDA_ERROR_INVALID_VALUE;
}

static CUresult put_kernel(struct wbuf *w, struct rc_gnode *n, const CUDA_KERNEL_NODE_PARAMS *p)
{
	struct rc_func *f;
	CUfunction fn = p->func ? p->func : (CUfunction)p->kern;
	CUresult rc = rc_func_resolve(fn, &f);
	if (rc)
		return rc;
	if (f->ctx->dev->conn != n->g->ctx->dev->conn)
		return CUDA_ERROR_INVALID_CONTEXT;
	if ((rc = kernel_pack(n, f, p->kernelParams, p->extra)))
		return rc;
	n->kp = *p;
	n->kp.kernelParams = n->kargs;
	n->kp.extra = NULL;
	put_u32(w, CU_GRAPH_NODE_TYPE_KERNEL);
	put_u64(w, f->h);
	put_u32(w, p->gridDimX);
	put_u32(w, p->gridDimY);
	put_u32(w, p->gridDimZ);
	put_u32(w, p->blockDimX);
	put_u32(w, p->blockDimY);
	put_u32(w, p->blockDimZ);
	put_u32(w, p->sharedMemBytes);
	put_bytes(w, n->kbuf, f->layout.total);
	return coh_add(n->g, n->kbuf, f->layout.total) ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

/* The address one side of a copy names, as the server knows it: device
 * memory as it is; host memory at its device-side address (rc_graph_host:
 * pageable memory is registered for the graph, which holds it).  foot:
 * the bytes the copy spans from that address. */
static CUresult copy_side(struct rc_graph *g, CUmemorytype t, const void *host, CUdeviceptr dev,
			  size_t off, size_t foot, int dst, uint64_t *out)
{
	const char *hp = NULL;
	switch (t) {
	case CU_MEMORYTYPE_DEVICE:
		*out = dev + off;
		return CUDA_SUCCESS;
	case CU_MEMORYTYPE_UNIFIED:
		/* an address: the program's host memory, or the device's */
		hp = (const char *)(dev ? (uintptr_t)dev : (uintptr_t)host);
		if (!rc_is_host_memory(hp)) {
			*out = (uint64_t)(uintptr_t)hp + off;
			return CUDA_SUCCESS;
		}
		break;
	case CU_MEMORYTYPE_HOST:
		hp = host;
		break;
	default:
		rc_unsupported("a graph memcpy node with a CUDA array");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (!hp)
		return CUDA_ERROR_INVALID_VALUE;
	uintptr_t held = 0;
	CUresult rc = rc_graph_host(g->ctx, hp + off, foot, dst, out, &held);
	if (!rc && held && rc_graph_hold(g, &held, 1, 0))
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	for (struct rc_graph *o = owner_graph(g); !rc && held && o; o = owner_graph(o))
		if (rc_graph_hold(o, &held, 1, 1))
			rc = CUDA_ERROR_OUT_OF_MEMORY;
	return rc;
}

/* A side's offset (x, y, z) and the bytes a copy of w x h x d spans there. */
static void side_span(size_t x, size_t y, size_t z, size_t pitch, size_t height, size_t w,
		      size_t h, size_t d, size_t *off, size_t *foot)
{
	size_t rows = (d ? d - 1 : 0) * height + (h ? h - 1 : 0);
	*off = x + (y + z * height) * pitch;
	*foot = rows * pitch + w;
}

/* The addresses a copy node names on the server (its sides, src and dst),
 * resolved for graph g before any request is built: a side in host memory
 * may need calls of its own (its registration), which use the thread's
 * request buffer. */
static CUresult memcpy_sides(struct rc_graph *g, const CUDA_MEMCPY3D *p, uint64_t sides[2])
{
	size_t h = p->Height ? p->Height : 1, so, sf, dof, df;
	side_span(p->srcXInBytes, p->srcY, p->srcZ, p->srcPitch, p->srcHeight ? p->srcHeight : h,
		  p->WidthInBytes, p->Height, p->Depth, &so, &sf);
	side_span(p->dstXInBytes, p->dstY, p->dstZ, p->dstPitch, p->dstHeight ? p->dstHeight : h,
		  p->WidthInBytes, p->Height, p->Depth, &dof, &df);
	CUresult rc = copy_side(g, p->srcMemoryType, p->srcHost, p->srcDevice, so, sf, 0, &sides[0]);
	return rc ? rc : copy_side(g, p->dstMemoryType, p->dstHost, p->dstDevice, dof, df, 1, &sides[1]);
}

static CUresult put_memcpy(struct wbuf *w, struct rc_gnode *n, const CUDA_MEMCPY3D *p,
			   const uint64_t sides[2])
{
	n->mc = *p;
	put_u32(w, CU_GRAPH_NODE_TYPE_MEMCPY);
	put_u64(w, sides[0]);
	put_u64(w, sides[1]);
	put_u64(w, p->srcPitch);
	put_u64(w, p->dstPitch);
	put_u64(w, p->srcHeight);
	put_u64(w, p->dstHeight);
	put_u64(w, p->WidthInBytes);
	put_u64(w, p->Height);
	put_u64(w, p->Depth);
	return coh_add(n->g, sides, 2 * sizeof(*sides)) ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

static CUresult put_memset(struct wbuf *w, struct rc_gnode *n, const CUDA_MEMSET_NODE_PARAMS *p)
{
	n->ms = *p;
	put_u32(w, CU_GRAPH_NODE_TYPE_MEMSET);
	put_u64(w, p->dst);
	put_u64(w, p->pitch);
	put_u32(w, p->value);
	put_u32(w, p->elementSize);
	put_u64(w, p->width);
	put_u64(w, p->height);
	return CUDA_SUCCESS;
}

/* n keeps its own copy of the operations (the getter hands it out, as the
 * driver's does); their addresses count for the graph's coherence.  A node
 * of no operations is one the driver takes (H200, 2026-12-03): it does
 * nothing. */
static CUresult put_batch(struct wbuf *w, struct rc_gnode *n, const CUDA_BATCH_MEM_OP_NODE_PARAMS *p)
{
	if (p->count > RGPU_G_MEMOPS_MAX || (p->count && !p->paramArray))
		return CUDA_ERROR_INVALID_VALUE;
	size_t len = (size_t)p->count * sizeof(*p->paramArray);
	/* (never empty: a copy of no operations is still the node's own) */
	CUstreamBatchMemOpParams *ops = malloc(len ? len : sizeof(*ops));
	uint64_t *addrs = malloc(p->count ? p->count * sizeof(*addrs) : sizeof(*addrs));
	if (!ops || !addrs) {
		free(ops);
		free(addrs);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (len)
		memcpy(ops, p->paramArray, len);
	for (unsigned i = 0; i < p->count; i++)
		addrs[i] = ops[i].operation == CU_STREAM_MEM_OP_WAIT_VALUE_32 ||
				   ops[i].operation == CU_STREAM_MEM_OP_WAIT_VALUE_64
			   ? ops[i].waitValue.address
		   : ops[i].operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 ||
				   ops[i].operation == CU_STREAM_MEM_OP_WRITE_VALUE_64
			   ? ops[i].writeValue.address
			   : 0;
	int bad = coh_add(n->g, addrs, p->count * sizeof(*addrs));
	free(addrs);
	if (bad) {
		free(ops);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	free(n->bmops);
	n->bmops = ops;
	n->bm = *p;
	n->bm.paramArray = ops;
	put_u32(w, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP);
	put_u32(w, p->count);
	put_u32(w, p->flags);
	put_bytes(w, ops, len);
	return CUDA_SUCCESS;
}

static CUresult event_handle(CUevent e, struct rc_graph *g, uint64_t *h)
{
	struct rc_event *ev;
	CUresult rc = rc_obj(e, RC_EVENT, &ev);
	if (rc)
		return rc;
	if (ev->ctx != g->ctx)
		return CUDA_ERROR_INVALID_VALUE;
	*h = ev->h;
	return CUDA_SUCCESS;
}

/* Sends an ADD for n (its request w holds everything); reads the node's
 * id and what its type returns. */
static CUresult add_call(struct rc_graph *g, struct wbuf *w, struct rc_gnode *n, struct rd *r)
{
	CUresult rc = rc_call(g->ctx->dev->conn, RGPU_OP_GRAPH_OP, w, r);
	if (rc)
		return rc;
	n->h = get_u64(r);
	return rd_ok(r) ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
}

/* A new node of type t in graph hg after deps: the request so far, and the
 * node (not yet in the graph). */
static CUresult add_begin(CUgraph hg, const CUgraphNode *deps, size_t nd, CUgraphNodeType t,
			  struct rc_graph **g, struct rc_gnode **n, struct wbuf **w)
{
	CUresult rc = get_graph(hg, g);
	if (rc)
		return rc;
	*w = gop((*g)->ctx, RGPU_G_ADD);
	put_u64(*w, (*g)->h);
	if ((rc = put_deps(*w, *g, deps, nd)))
		return rc;
	if (!(*n = calloc(1, sizeof(**n))))
		return CUDA_ERROR_OUT_OF_MEMORY;
	(*n)->magic = RC_GNODE;
	(*n)->g = *g;
	(*n)->type = t;
	return CUDA_SUCCESS;
}

/* k host nodes more (add) or fewer in g and the graphs that hold it as a
 * child (glock held). */
static void hosts_add(struct rc_graph *g, uint64_t k, int add)
{
	for (; g; g = owner_graph(g)) {
		if (add)
			g->nhost += k;
		else
			g->nhost -= k <= g->nhost ? k : g->nhost;
		if (g->owner && add)
			g->owner->hosts += k;
		else if (g->owner)
			g->owner->hosts -= k <= g->owner->hosts ? k : g->owner->hosts;
	}
}

/* Puts n into its graph once the server made it. */
static CUresult add_end(struct rc_gnode *n, CUgraphNode *out, CUresult rc)
{
	struct rc_graph *g = n->g;
	if (!rc) {
		pthread_mutex_lock(&glock);
		if (g->nnodes == g->capnodes) {
			size_t cap = g->capnodes ? 2 * g->capnodes : 16;
			struct rc_gnode **p = realloc(g->nodes, cap * sizeof(*p));
			if (p) {
				g->nodes = p;
				g->capnodes = cap;
			} else {
				rc = CUDA_ERROR_OUT_OF_MEMORY;
			}
		}
		if (!rc) {
			g->nodes[g->nnodes++] = n;
			hosts_add(g, n->hosts, 1);
		}
		pthread_mutex_unlock(&glock);
	}
	if (rc) {
		node_free(n);
		return rc;
	}
	*out = (CUgraphNode)n;
	return CUDA_SUCCESS;
}

/* Packs parameters p of a node of type t (kernel, memcpy or memset) into
 * n and the request; sides: a memcpy's (memcpy_sides). */
static CUresult put_params(struct wbuf *w, struct rc_gnode *n, CUgraphNodeType t, const void *p,
			   const uint64_t sides[2])
{
	switch (t) {
	case CU_GRAPH_NODE_TYPE_KERNEL:
		return put_kernel(w, n, p);
	case CU_GRAPH_NODE_TYPE_MEMCPY:
		return put_memcpy(w, n, p, sides);
	case CU_GRAPH_NODE_TYPE_MEMSET:
		return put_memset(w, n, p);
	case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
		return put_batch(w, n, p);
	default:
		return CUDA_ERROR_NOT_SUPPORTED;
	}
}

/* Adds a kernel, memcpy, memset or batch memory operation node with
 * parameters p. */
static CUresult add_params(CUgraphNode *out, CUgraph hg, const CUgraphNode *deps, size_t nd, CUgraphNodeType t,
			   const void *p)
{
	struct rc_graph *g;
	struct rc_gnode *n;
	struct wbuf *w;
	if (!out || !p)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t sides[2] = { 0, 0 };
	CUresult rc = get_graph(hg, &g);
	if (!rc && t == CU_GRAPH_NODE_TYPE_MEMCPY)
		rc = memcpy_sides(g, p, sides);
	if (!rc)
		rc = add_begin(hg, deps, nd, t, &g, &n, &w);
	if (rc)
		return rc;
	struct rd r;
	if (!(rc = put_params(w, n, t, p, sides)))
		rc = add_call(g, w, n, &r);
	return add_end(n, out, rc);
}

RC_EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t nd,
					   const CUDA_KERNEL_NODE_PARAMS *p)
{
	return add_params(out, g, deps, nd, CU_GRAPH_NODE_TYPE_KERNEL, p);
}

static CUDA_KERNEL_NODE_PARAMS kp_v2(const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
	CUDA_KERNEL_NODE_PARAMS k;
	memset(&k, 0, sizeof(k));
	k.func = p->func;
	k.gridDimX = p->gridDimX;
	k.gridDimY = p->gridDimY;
	k.gridDimZ = p->gridDimZ;
	k.blockDimX = p->blockDimX;
	k.blockDimY = p->blockDimY;
	k.blockDimZ = p->blockDimZ;
	k.sharedMemBytes = p->sharedMemBytes;
	k.kernelParams = p->kernelParams;
	k.extra = p->extra;
	return k;
}

RC_EXPORT CUresult cuGraphAddKernelNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t nd,
					const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	CUDA_KERNEL_NODE_PARAMS k = kp_v2(p);
	return add_params(out, g, deps, nd, CU_GRAPH_NODE_TYPE_KERNEL, &k);
}

RC_EXPORT CUresult cuGraphAddMemcpyNode(CUgraphNode *out, CUgraph hg, const CUgraphNode *deps, size_t nd,
					const CUDA_MEMCPY3D *p, CUcontext ctx)
{
	(void)ctx;
	return add_params(out, hg, deps, nd, CU_GRAPH_NODE_TYPE_MEMCPY, p);
}

RC_EXPORT CUresult cuGraphAddMemsetNode(CUgraphNode *out, CUgraph hg, const CUgraphNode *deps, size_t nd,
					const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx)
{
	(void)ctx;
	return add_params(out, hg, deps, nd, CU_GRAPH_NODE_TYPE_MEMSET, p);
}

RC_EXPORT CUresult cuGraphAddHostNode(CUgraphNode *out, CUgraph hg, const CUgraphNode *deps, size_t nd,
				      const CUDA_HOST_NODE_PARAMS *p)
{
	struct rc_graph *g;
	struct rc_gnode *n;
	struct wbuf *w;
	if (!out || !p || !p->fn)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = add_begin(hg, deps, nd, CU_GRAPH_NODE_TYPE_HOST, &g, &n, &w);
	if (rc)
		return rc;
	n->host = *p;
	n->hosts = 1;
	/* its client id lives as long as the process: executables and
	 * clones of the graph run it after the graph is gone */
	uint64_t id = rc_hostfn_register(p->fn, p->userData);
	if (!id) {
		node_free(n);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	put_u32(w, CU_GRAPH_NODE_TYPE_HOST);
	put_u64(w, id);
	struct rd r;
	rc = add_call(g, w, n, &r);
	if (rc)
		rc_hostfn_forget(id);
	return add_end(n, out, rc);
}

RC_EXPORT CUresult cuGraphAddEmptyNode(CUgraphNode *out, CUgraph hg, const CUgraphNode *deps, size_t nd)
{
	struct rc_graph *g;
	struct rc_gnode *n;
	struct wbuf *w;
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = add_begin(hg, deps, nd, CU_GRAPH_NODE_TYPE_EMPTY, &g, &n, &w);
	if (rc)
		return rc;
	put_u32(w, CU_GRAPH_NODE_TYPE_EMPTY);
	struct rd r;
	return add_end(n, out, add_call(g, w, n, &r));
}

static CUresult add_event(CUgraphNode *out, CUgraph hg, const CUgraphNode *deps, size_t nd, CUevent e,
			  CUgraphNodeType t)
{
	struct rc_graph *g;
	struct rc_gnode *n;
	struct wbuf *w;
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = add_begin(hg, deps, nd, t, &g, &n, &w);
	if (rc)
		return rc;
	uint64_t eh;
	if ((rc = event_handle(e, g, &eh))) {
		node_free(n);
		return rc;
	}
	n->event = e;
	put_u32(w, (uint32_t)t);
	put_u64(w, eh);
	struct rd r;
	return add_end(n, out, add_call(g, w, n, &r));
}

RC_EXPORT CUresult cuGraphAddEventRecordNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t nd,
					     CUevent e)
{
	return add_event(out, g, deps, nd, e, CU_GRAPH_NODE_TYPE_EVENT_RECORD);
}

RC_EXPORT CUresult cuGraphAddEventWaitNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t nd,
					   CUevent e)
{
	return add_event(out, g, deps, nd, e, CU_GRAPH_NODE_TYPE_WAIT_EVENT);
}

RC_EXPORT CUresult cuGraphAddChildGraphNode(CUgraphNode *out, CUgraph hg, const CUgraphNode *deps, size_t nd,
					    CUgraph child)
{
	struct rc_graph *g, *c;
	struct rc_gnode *n;
	struct wbuf *w;
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = get_graph(child, &c);
	if (rc)
		return rc;
	if ((rc = add_begin(hg, deps, nd, CU_GRAPH_NODE_TYPE_GRAPH, &g, &n, &w)))
		return rc;
	if (c == g || c->ctx->dev->conn != g->ctx->dev->conn) {
		node_free(n);
		return CUDA_ERROR_INVALID_VALUE;
	}
	/* the child is copied into the node, as CUDA does: its host nodes
	 * and words count for this graph */
	n->hosts = c->nhost;
	if (coh_add(g, c->coh, c->ncoh) || rc_graph_hold(g, c->held, c->nheld, 1)) {
		node_free(n);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	put_u32(w, CU_GRAPH_NODE_TYPE_GRAPH);
	put_u64(w, c->h);
	struct rd r;
	return add_end(n, out, add_call(g, w, n, &r));
}

RC_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *out, CUgraph hg, const CUgraphNode *deps, size_t nd,
					  CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
	struct rc_graph *g;
	struct rc_gnode *n;
	struct wbuf *w;
	if (!out || !p || !p->bytesize)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = add_begin(hg, deps, nd, CU_GRAPH_NODE_TYPE_MEM_ALLOC, &g, &n, &w);
	if (rc)
		return rc;
	/* on the graph's device: the pool of another is not served */
	if (p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
	    p->poolProps.location.id != g->ctx->ordinal) {
		node_free(n);
		rc_unsupported("a graph memory node on a device other than the graph's context's");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	n->bytes = p->bytesize;
	put_u32(w, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
	put_u64(w, p->bytesize);
	struct rd r;
	rc = add_call(g, w, n, &r);
	if (!rc) {
		n->dptr = get_u64(&r);
		p->dptr = n->dptr;
		rc_graph_mem_note(g->ctx, n->dptr);
	}
	return add_end(n, out, rc);
}

RC_EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode *out, CUgraph hg, const CUgraphNode *deps, size_t nd,
					 CUdeviceptr dptr)
{
	struct rc_graph *g;
	struct rc_gnode *n;
	struct wbuf *w;
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = add_begin(hg, deps, nd, CU_GRAPH_NODE_TYPE_MEM_FREE, &g, &n, &w);
	if (rc)
		return rc;
	n->dptr = dptr;
	put_u32(w, CU_GRAPH_NODE_TYPE_MEM_FREE);
	put_u64(w, dptr);
	struct rd r;
	return add_end(n, out, add_call(g, w, n, &r));
}

static CUresult add_conditional(CUgraphNode *out, CUgraph hg, const CUgraphNode *deps, size_t nd,
				CUDA_CONDITIONAL_NODE_PARAMS *p)
{
	struct rc_graph *g;
	struct rc_gnode *n;
	struct wbuf *w;
	CUresult rc = add_begin(hg, deps, nd, CU_GRAPH_NODE_TYPE_CONDITIONAL, &g, &n, &w);
	if (rc)
		return rc;
	put_u32(w, CU_GRAPH_NODE_TYPE_CONDITIONAL);
	put_u64(w, p->handle);
	put_u32(w, (uint32_t)p->type);
	put_u32(w, p->size);
	struct rd r;
	rc = add_call(g, w, n, &r);
	if (!rc) {
		uint32_t nb = get_u32(&r);
		if (!rd_ok(&r) || nb != p->size || nb > 64 || !(n->bodies = calloc(nb, sizeof(*n->bodies))))
			rc = CUDA_ERROR_UNKNOWN;
		for (uint32_t i = 0; !rc && i < nb; i++) {
			if (!(n->bodies[i] = rc_graph_new(g->ctx, get_u64(&r))))
				rc = CUDA_ERROR_OUT_OF_MEMORY;
			else
				n->bodies[i]->owned = 1;
			n->nbodies = i + 1;
		}
		/* host nodes in a body run an unknown number of times: not
		 * counted (hostfn.c's gate may then let a blocking call by) */
		if (!rc)
			p->phGraph_out = (CUgraph *)n->bodies;
	}
	return add_end(n, out, rc);
}

static CUresult deps_call(CUgraph hg, const CUgraphNode *from, const CUgraphNode *to,
			  const CUgraphEdgeData *ed, size_t n, uint32_t remove);

static int edge_has_data(const CUgraphEdgeData *e)
{
	return e->type != CU_GRAPH_DEPENDENCY_TYPE_DEFAULT || e->from_port || e->to_port;
}

/* cuGraphAddNode: the generic form, per type */
static CUresult add_node(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, const CUgraphEdgeData *ed,
			 size_t nd, CUgraphNodeParams *p)
{
	if (!p || !out)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; ed && i < nd; i++)
		if (edge_has_data(&ed[i])) {
			/* the node first, then its edges with their data */
			if (nd && !deps)
				return CUDA_ERROR_INVALID_VALUE;
			CUresult rc = add_node(out, g, NULL, NULL, 0, p);
			if (rc)
				return rc;
			CUgraphNode *to = malloc(nd * sizeof(*to));
			if (!to)
				rc = CUDA_ERROR_OUT_OF_MEMORY;
			for (size_t k = 0; to && k < nd; k++)
				to[k] = *out;
			if (!rc)
				rc = deps_call(g, deps, to, ed, nd, 0);
			free(to);
			if (rc)
				(void)cuGraphDestroyNode(*out);
			return rc;
		}
	switch (p->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL:
		return add_params(out, g, deps, nd, CU_GRAPH_NODE_TYPE_KERNEL, &p->kernel);
	case CU_GRAPH_NODE_TYPE_MEMCPY:
		return cuGraphAddMemcpyNode(out, g, deps, nd, &p->memcpy.copyParams, p->memcpy.copyCtx);
	case CU_GRAPH_NODE_TYPE_MEMSET: {
		CUDA_MEMSET_NODE_PARAMS m = { p->memset.dst, p->memset.pitch, p->memset.value,
					      p->memset.elementSize, p->memset.width, p->memset.height };
		return cuGraphAddMemsetNode(out, g, deps, nd, &m, p->memset.ctx);
	}
	case CU_GRAPH_NODE_TYPE_HOST: {
		CUDA_HOST_NODE_PARAMS h = { p->host.fn, p->host.userData };
		return cuGraphAddHostNode(out, g, deps, nd, &h);
	}
	case CU_GRAPH_NODE_TYPE_GRAPH:
		return cuGraphAddChildGraphNode(out, g, deps, nd, p->graph.graph);
	case CU_GRAPH_NODE_TYPE_EMPTY:
		return cuGraphAddEmptyNode(out, g, deps, nd);
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
		return cuGraphAddEventWaitNode(out, g, deps, nd, p->eventWait.event);
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
		return cuGraphAddEventRecordNode(out, g, deps, nd, p->eventRecord.event);
	case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
		CUDA_MEM_ALLOC_NODE_PARAMS a;
		memset(&a, 0, sizeof(a));
		a.poolProps = p->alloc.poolProps;
		a.bytesize = p->alloc.bytesize;
		CUresult rc = cuGraphAddMemAllocNode(out, g, deps, nd, &a);
		if (!rc)
			p->alloc.dptr = a.dptr;
		return rc;
	}
	case CU_GRAPH_NODE_TYPE_MEM_FREE:
		return cuGraphAddMemFreeNode(out, g, deps, nd, p->free.dptr);
	case CU_GRAPH_NODE_TYPE_CONDITIONAL:
		return add_conditional(out, g, deps, nd, &p->conditional);
	case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: {
		CUDA_BATCH_MEM_OP_NODE_PARAMS b = { p->memOp.ctx, p->memOp.count, p->memOp.paramArray,
						    p->memOp.flags };
		return cuGraphAddBatchMemOpNode(out, g, deps, nd, &b);
	}
	default:
		rc_unsupported("graph nodes of this type (external semaphores)");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
}

RC_EXPORT CUresult cuGraphAddNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t nd,
				  CUgraphNodeParams *p)
{
	return add_node(out, g, deps, NULL, nd, p);
}

RC_EXPORT CUresult cuGraphAddNode_v2(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
				     const CUgraphEdgeData *ed, size_t nd, CUgraphNodeParams *p)
{
	return add_node(out, g, deps, ed, nd, p);
}

RC_EXPORT CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle *out, CUgraph hg, CUcontext ctx,
						  unsigned int def, unsigned int flags)
{
	struct rc_graph *g;
	CUresult rc = get_graph(hg, &g);
	(void)ctx;
	if (rc)
		return rc;
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	struct wbuf *w = gop(g->ctx, RGPU_G_COND_HANDLE);
	put_u64(w, g->h);
	put_u32(w, def);
	put_u32(w, flags);
	struct rd r;
	if ((rc = rc_call(g->ctx->dev->conn, RGPU_OP_GRAPH_OP, w, &r)))
		return rc;
	/* a value the device uses: the same on both sides */
	*out = (CUgraphConditionalHandle)get_u64(&r);
	return CUDA_SUCCESS;
}

/* ---------------------------------------------------------- dependencies */

static CUresult deps_call(CUgraph hg, const CUgraphNode *from, const CUgraphNode *to,
			  const CUgraphEdgeData *ed, size_t n, uint32_t remove)
{
	struct rc_graph *g;
	CUresult rc = get_graph(hg, &g);
	if (rc)
		return rc;
	if (n && (!from || !to))
		return CUDA_ERROR_INVALID_VALUE;
	/* edges with data (programmatic dependencies: XLA's command buffers)
	 * carry it (proto.h) */
	uint32_t with_data = 0;
	for (size_t i = 0; ed && i < n; i++)
		if (edge_has_data(&ed[i]))
			with_data = RGPU_G_DEPS_EDGE_DATA;
	struct wbuf *w = gop(g->ctx, RGPU_G_DEPS);
	put_u64(w, g->h);
	put_u32(w, remove | with_data);
	put_u32(w, (uint32_t)n);
	for (size_t i = 0; i < n; i++) {
		struct rc_gnode *a, *b;
		if (get_node(from[i], &a) || get_node(to[i], &b) || a->g != g || b->g != g)
			return CUDA_ERROR_INVALID_VALUE;
		put_u64(w, a->h);
		put_u64(w, b->h);
	}
	for (size_t i = 0; with_data && i < n; i++)
		put_u32(w, rgpu_edge_word(ed[i].from_port, ed[i].to_port, ed[i].type));
	struct rd r;
	return rc_call(g->ctx->dev->conn, RGPU_OP_GRAPH_OP, w, &r);
}

RC_EXPORT CUresult cuGraphAddDependencies(CUgraph g, const CUgraphNode *from, const CUgraphNode *to, size_t n)
{
	return deps_call(g, from, to, NULL, n, 0);
}

RC_EXPORT CUresult cuGraphAddDependencies_v2(CUgraph g, const CUgraphNode *from, const CUgraphNode *to,
					     const CUgraphEdgeData *ed, size_t n)
{
	return deps_call(g, from, to, ed, n, 0);
}

RC_EXPORT CUresult cuGraphRemoveDependencies(CUgraph g, const CUgraphNode *from, const CUgraphNode *to,
					     size_t n)
{
	return deps_call(g, from, to, NULL, n, 1);
}

RC_EXPORT CUresult cuGraphRemoveDependencies_v2(CUgraph g, const CUgraphNode *from, const CUgraphNode *to,
						const CUgraphEdgeData *ed, size_t n)
{
	return deps_call(g, from, to, ed, n, 1);
}

/* ------------------------------------------------------ nodes and edges */

/* The server's view of g's nodes, each given a client node. */
static CUresult refresh_nodes(struct rc_graph *g)
{
	struct wbuf *w = gop(g->ctx, RGPU_G_NODES);
	put_u64(w, g->h);
	struct rd r;
	CUresult rc = rc_call(g->ctx->dev->conn, RGPU_OP_GRAPH_OP, w, &r);
	if (rc)
		return rc;
	uint32_t n = get_u32(&r);
	pthread_mutex_lock(&glock);
	for (uint32_t i = 0; i < n && rd_ok(&r); i++) {
		uint64_t h = get_u64(&r);
		uint32_t t = get_u32(&r);
		if (rd_ok(&r) && !node_of_id(g, h, (CUgraphNodeType)t))
			rc = CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_unlock(&glock);
	return rc ? rc : rd_ok(&r) ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
}

RC_EXPORT CUresult cuGraphGetNodes(CUgraph hg, CUgraphNode *nodes, size_t *num)
{
	struct rc_graph *g;
	CUresult rc = get_graph(hg, &g);
	if (rc)
		return rc;
	if (!num)
		return CUDA_ERROR_INVALID_VALUE;
	if ((rc = refresh_nodes(g)))
		return rc;
	if (nodes)
		for (size_t i = 0; i < *num && i < g->nnodes; i++)
			nodes[i] = (CUgraphNode)g->nodes[i];
	*num = g->nnodes;
	return CUDA_SUCCESS;
}

/* Every edge of g: pairs of client nodes in *out (malloc'ed); with eds,
 * each edge's data too (*eds NULL when the server sent none: all default) */
static CUresult edges_data(struct rc_graph *g, struct rc_gnode ***out, size_t *n,
			   CUgraphEdgeData **eds);

static CUresult edges(struct rc_graph *g, struct rc_gnode ***out, size_t *n)
{
	return edges_data(g, out, n, NULL);
}

static CUresult edges_data(struct rc_graph *g, struct rc_gnode ***out, size_t *n,
			   CUgraphEdgeData **eds)
{
	CUresult rc = refresh_nodes(g);
	if (rc)
		return rc;
	struct wbuf *w = gop(g->ctx, RGPU_G_EDGES);
	put_u64(w, g->h);
	struct rd r;
	if ((rc = rc_call(g->ctx->dev->conn, RGPU_OP_GRAPH_OP, w, &r)))
		return rc;
	uint32_t k = get_u32(&r);
	if (!rd_ok(&r) || k > r.left / 16)
		return CUDA_ERROR_UNKNOWN;
	struct rc_gnode **e = malloc((2 * (size_t)k + 1) * sizeof(*e));
	if (!e)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&glock);
	for (uint32_t i = 0; i < 2 * k; i++)
		if (!(e[i] = node_of_id(g, get_u64(&r), CU_GRAPH_NODE_TYPE_EMPTY)))
			rc = CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_unlock(&glock);
	if (!rc && eds) {
		*eds = NULL;
		if (k && r.left >= 4ull * k) {
			if (!(*eds = calloc(k, sizeof(**eds))))
				rc = CUDA_ERROR_OUT_OF_MEMORY;
			for (uint32_t i = 0; !rc && i < k; i++)
				rgpu_edge_fields(get_u32(&r), &(*eds)[i].from_port, &(*eds)[i].to_port,
						 &(*eds)[i].type);
		}
	}
	if (rc) {
		free(e);
		return rc;
	}
	*out = e;
	*n = k;
	return CUDA_SUCCESS;
}

/* As the driver: edges with data asked for without room for it are a
 * lossy query (the count alone is not) */
static CUresult get_edges(CUgraph hg, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *ed,
			  size_t *num)
{
	struct rc_graph *g;
	CUresult rc = get_graph(hg, &g);
	if (rc)
		return rc;
	if (!num || (!from) != (!to))
		return CUDA_ERROR_INVALID_VALUE;
	struct rc_gnode **e;
	CUgraphEdgeData *eds = NULL;
	size_t n;
	if ((rc = edges_data(g, &e, &n, &eds)))
		return rc;
	int lossy = 0;
	for (size_t i = 0; from && i < n && i < *num; i++) {
		from[i] = (CUgraphNode)e[2 * i];
		to[i] = (CUgraphNode)e[2 * i + 1];
		CUgraphEdgeData d;
		memset(&d, 0, sizeof(d));
		if (eds)
			d = eds[i];
		if (ed)
			ed[i] = d;
		else if (edge_has_data(&d))
			lossy = 1;
	}
	*num = n;
	free(e);
	free(eds);
	return lossy ? CUDA_ERROR_LOSSY_QUERY : CUDA_SUCCESS;
}

RC_EXPORT CUresult cuGraphGetEdges(CUgraph hg, CUgraphNode *from, CUgraphNode *to, size_t *num)
{
	return get_edges(hg, from, to, NULL, num);
}

RC_EXPORT CUresult cuGraphGetEdges_v2(CUgraph g, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *ed,
				      size_t *num)
{
	return get_edges(g, from, to, ed, num);
}

/* which: 0 root nodes of g; 1 what node depends on; 2 what depends on it */
static CUresult related(struct rc_graph *g, struct rc_gnode *node, int which, CUgraphNode *out, size_t *num)
{
	struct rc_gnode **e;
	size_t n, k = 0;
	CUresult rc = edges(g, &e, &n);
	if (rc)
		return rc;
	if (which == 0) {
		for (size_t i = 0; i < g->nnodes; i++) {
			int has = 0;
			for (size_t j = 0; j < n && !has; j++)
				has = e[2 * j + 1] == g->nodes[i];
			if (!has) {
				if (out && k < *num)
					out[k] = (CUgraphNode)g->nodes[i];
				k++;
			}
		}
	} else {
		for (size_t j = 0; j < n; j++) {
			struct rc_gnode *a = e[2 * j], *b = e[2 * j + 1];
			struct rc_gnode *hit = which == 1 ? (b == node ? a : NULL) : (a == node ? b : NULL);
			if (hit) {
				if (out && k < *num)
					out[k] = (CUgraphNode)hit;
				k++;
			}
		}
	}
	free(e);
	*num = k;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuGraphGetRootNodes(CUgraph hg, CUgraphNode *roots, size_t *num)
{
	struct rc_graph *g;
	CUresult rc = get_graph(hg, &g);
	if (rc)
		return rc;
	return num ? related(g, NULL, 0, roots, num) : CUDA_ERROR_INVALID_VALUE;
}

static CUresult node_related(CUgraphNode hn, int which, CUgraphNode *out, CUgraphEdgeData *ed, size_t *num)
{
	struct rc_gnode *n;
	CUresult rc = get_node(hn, &n);
	if (rc)
		return rc;
	if (!num)
		return CUDA_ERROR_INVALID_VALUE;
	rc = related(n->g, n, which, out, num);
	if (!rc && ed && out)
		memset(ed, 0, *num * sizeof(*ed));
	return rc;
}

RC_EXPORT CUresult cuGraphNodeGetDependencies(CUgraphNode n, CUgraphNode *deps, size_t *num)
{
	return node_related(n, 1, deps, NULL, num);
}

RC_EXPORT CUresult cuGraphNodeGetDependencies_v2(CUgraphNode n, CUgraphNode *deps, CUgraphEdgeData *ed,
						 size_t *num)
{
	return node_related(n, 1, deps, ed, num);
}

RC_EXPORT CUresult cuGraphNodeGetDependentNodes(CUgraphNode n, CUgraphNode *deps, size_t *num)
{
	return node_related(n, 2, deps, NULL, num);
}

RC_EXPORT CUresult cuGraphNodeGetDependentNodes_v2(CUgraphNode n, CUgraphNode *deps, CUgraphEdgeData *ed,
						   size_t *num)
{
	return node_related(n, 2, deps, ed, num);
}

RC_EXPORT CUresult cuGraphNodeGetType(CUgraphNode hn, CUgraphNodeType *t)
{
	struct rc_gnode *n;
	CUresult rc = get_node(hn, &n);
	if (rc)
		return rc;
	if (!t)
		return CUDA_ERROR_INVALID_VALUE;
	*t = n->type;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuGraphDestroyNode(CUgraphNode hn)
{
	struct rc_gnode *n;
	CUresult rc = get_node(hn, &n);
	if (rc)
		return rc;
	struct rc_graph *g = n->g;
	struct wbuf *w = gop(g->ctx, RGPU_G_DESTROY_NODE);
	put_u64(w, n->h);
	struct rd r;
	if ((rc = rc_call(g->ctx->dev->conn, RGPU_OP_GRAPH_OP, w, &r)))
		return rc;
	pthread_mutex_lock(&glock);
	for (size_t i = 0; i < g->nnodes; i++)
		if (g->nodes[i] == n) {
			g->nodes[i] = g->nodes[--g->nnodes];
			break;
		}
	hosts_add(g, n->hosts, 0);
	pthread_mutex_unlock(&glock);
	node_free(n);
	return CUDA_SUCCESS;
}

/* ------------------------------------------------- getters and setters */

/* Node hn, of type t, whose parameters go to out (not NULL). */
static CUresult typed(CUgraphNode hn, CUgraphNodeType t, const void *out, struct rc_gnode **n)
{
	CUresult rc = get_node(hn, n);
	if (!rc && (*n)->type != t)
		rc = CUDA_ERROR_INVALID_VALUE;
	/* a node this process did not build (captured): no parameters here */
	if (!rc && t == CU_GRAPH_NODE_TYPE_KERNEL && !(*n)->kbuf)
		rc = CUDA_ERROR_NOT_SUPPORTED;
	if (!rc && !out)
		rc = CUDA_ERROR_INVALID_VALUE;
	return rc;
}

/* A getter that hands out one member of a node of one type: the node
 * types differ only in which member and its C type. */
#define NODE_GETTER(fn, t, ptype, member)                      \
	RC_EXPORT CUresult fn(CUgraphNode hn, ptype *p)        \
	{                                                      \
		struct rc_gnode *n;                            \
		CUresult rc = typed(hn, t, p, &n);             \
		if (!rc)                                       \
			*p = n->member;                        \
		return rc;                                     \
	}

/* The setters of a node type whose parameters have one form: in the
 * graph, and in an executable (whose context argument names the node's
 * own context, so it is not needed). */
#define NODE_SETTERS(set_fn, exec_set_fn, t, ptype)                                      \
	RC_EXPORT CUresult set_fn(CUgraphNode n, const ptype *p)                         \
	{                                                                                \
		return set_params(NULL, n, t, p);                                        \
	}                                                                                \
	RC_EXPORT CUresult exec_set_fn(CUgraphExec x, CUgraphNode n, const ptype *p,     \
				       CUcontext ctx)                                    \
	{                                                                                \
		(void)ctx;                                                               \
		return x ? set_params(x, n, t, p) : CUDA_ERROR_INVALID_VALUE;            \
	}

NODE_GETTER(cuGraphKernelNodeGetParams_v2, CU_GRAPH_NODE_TYPE_KERNEL, CUDA_KERNEL_NODE_PARAMS, kp)

RC_EXPORT CUresult cuGraphKernelNodeGetParams(CUgraphNode hn, CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
	CUDA_KERNEL_NODE_PARAMS k;
	CUresult rc = p ? cuGraphKernelNodeGetParams_v2(hn, &k) : CUDA_ERROR_INVALID_VALUE;
	if (!rc) {
		p->func = k.func;
		p->gridDimX = k.gridDimX;
		p->gridDimY = k.gridDimY;
		p->gridDimZ = k.gridDimZ;
		p->blockDimX = k.blockDimX;
		p->blockDimY = k.blockDimY;
		p->blockDimZ = k.blockDimZ;
		p->sharedMemBytes = k.sharedMemBytes;
		p->kernelParams = k.kernelParams;
		p->extra = NULL;
	}
	return rc;
}

/* Sets node hn's parameters in its graph (x NULL) or in executable x (the
 * exec entry points refuse a NULL x first, as the driver does). */
static CUresult set_params(CUgraphExec hx, CUgraphNode hn, CUgraphNodeType t, const void *p)
{
	struct rc_gnode *n;
	CUresult rc = get_node(hn, &n);
	if (rc)
		return rc;
	if (n->type != t || !p)
		return CUDA_ERROR_INVALID_VALUE;
	struct rc_graph *x = NULL;
	if (hx && (rc = rc_obj(hx, RC_GEXEC, &x)))
		return rc;
	uint64_t sides[2] = { 0, 0 };
	if (t == CU_GRAPH_NODE_TYPE_MEMCPY && (rc = memcpy_sides(x ? x : n->g, p, sides)))
		return rc;
	struct wbuf *w = gop(n->g->ctx, hx ? RGPU_G_EXEC_SET : RGPU_G_SET);
	if (x)
		put_u64(w, x->h);
	put_u64(w, n->h);
	/* an executable's node keeps its graph's parameters: a scratch node
	 * packs the new ones */
	struct rc_gnode scratch;
	memset(&scratch, 0, sizeof(scratch));
	scratch.g = x ? x : n->g;
	struct rc_gnode *dst = x ? &scratch : n;
	struct rd r;
	if (!(rc = put_params(w, dst, t, p, sides)))
		rc = rc_call(n->g->ctx->dev->conn, RGPU_OP_GRAPH_OP, w, &r);
	free(scratch.kbuf);
	free(scratch.kargs);
	free(scratch.bmops);
	return rc;
}

/* XLA updates the child graphs of its command buffers so (a traced piece
 * whose buffers moved): the new child must have the old one's topology,
 * the server's driver checks. */
RC_EXPORT CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec hx, CUgraphNode hn, CUgraph child)
{
	struct rc_gnode *n;
	struct rc_graph *x, *c;
	CUresult rc = hx ? rc_obj(hx, RC_GEXEC, &x) : CUDA_ERROR_INVALID_VALUE;
	if (!rc)
		rc = get_node(hn, &n);
	if (!rc)
		rc = get_graph(child, &c);
	if (rc)
		return rc;
	if (n->type != CU_GRAPH_NODE_TYPE_GRAPH || c->ctx->dev->conn != n->g->ctx->dev->conn)
		return CUDA_ERROR_INVALID_VALUE;
	/* what the new child's nodes touch counts for the executable */
	if (coh_add(x, c->coh, c->ncoh) || rc_graph_hold(x, c->held, c->nheld, 1))
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct wbuf *w = gop(n->g->ctx, RGPU_G_EXEC_SET);
	put_u64(w, x->h);
	put_u64(w, n->h);
	put_u32(w, CU_GRAPH_NODE_TYPE_GRAPH);
	put_u64(w, c->h);
	struct rd r;
	return rc_call(n->g->ctx->dev->conn, RGPU_OP_GRAPH_OP, w, &r);
}

RC_EXPORT CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS *p)
{
	return set_params(NULL, n, CU_GRAPH_NODE_TYPE_KERNEL, p);
}

/* The _v1 kernel setters: the older struct, given as the current one. */
static CUresult set_kernel_v1(CUgraphExec x, CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	CUDA_KERNEL_NODE_PARAMS k = kp_v2(p);
	return set_params(x, n, CU_GRAPH_NODE_TYPE_KERNEL, &k);
}

RC_EXPORT CUresult cuGraphKernelNodeSetParams(CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
	return set_kernel_v1(NULL, n, p);
}

RC_EXPORT CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec x, CUgraphNode n,
						     const CUDA_KERNEL_NODE_PARAMS *p)
{
	return x ? set_params(x, n, CU_GRAPH_NODE_TYPE_KERNEL, p) : CUDA_ERROR_INVALID_VALUE;
}

RC_EXPORT CUresult cuGraphExecKernelNodeSetParams(CUgraphExec x, CUgraphNode n,
						  const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
	return x ? set_kernel_v1(x, n, p) : CUDA_ERROR_INVALID_VALUE;
}

NODE_GETTER(cuGraphMemsetNodeGetParams, CU_GRAPH_NODE_TYPE_MEMSET, CUDA_MEMSET_NODE_PARAMS, ms)
NODE_SETTERS(cuGraphMemsetNodeSetParams, cuGraphExecMemsetNodeSetParams, CU_GRAPH_NODE_TYPE_MEMSET,
	     CUDA_MEMSET_NODE_PARAMS)
NODE_GETTER(cuGraphMemcpyNodeGetParams, CU_GRAPH_NODE_TYPE_MEMCPY, CUDA_MEMCPY3D, mc)
NODE_SETTERS(cuGraphMemcpyNodeSetParams, cuGraphExecMemcpyNodeSetParams, CU_GRAPH_NODE_TYPE_MEMCPY, CUDA_MEMCPY3D)
NODE_GETTER(cuGraphHostNodeGetParams, CU_GRAPH_NODE_TYPE_HOST, CUDA_HOST_NODE_PARAMS, host)
NODE_GETTER(cuGraphEventRecordNodeGetEvent, CU_GRAPH_NODE_TYPE_EVENT_RECORD, CUevent, event)
NODE_GETTER(cuGraphEventWaitNodeGetEvent, CU_GRAPH_NODE_TYPE_WAIT_EVENT, CUevent, event)
NODE_GETTER(cuGraphMemFreeNodeGetParams, CU_GRAPH_NODE_TYPE_MEM_FREE, CUdeviceptr, dptr)
RC_EXPORT CUresult cuGraphBatchMemOpNodeSetParams(CUgraphNode n, const CUDA_BATCH_MEM_OP_NODE_PARAMS *p)
{
	return set_params(NULL, n, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, p);
}

/* (the exec setter takes no context: the parameters name it) */
RC_EXPORT CUresult cuGraphExecBatchMemOpNodeSetParams(CUgraphExec x, CUgraphNode n,
						      const CUDA_BATCH_MEM_OP_NODE_PARAMS *p)
{
	return x ? set_params(x, n, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, p) : CUDA_ERROR_INVALID_VALUE;
}

/* A captured node's operations are the server's alone. */
RC_EXPORT CUresult cuGraphBatchMemOpNodeGetParams(CUgraphNode hn, CUDA_BATCH_MEM_OP_NODE_PARAMS *p)
{
	struct rc_gnode *n;
	CUresult rc = typed(hn, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, p, &n);
	if (!rc && !n->bmops) {
		rc_unsupported("cuGraphBatchMemOpNodeGetParams of a captured node");
		rc = CUDA_ERROR_NOT_SUPPORTED;
	}
	if (!rc)
		*p = n->bm;
	return rc;
}

RC_EXPORT CUresult cuGraphAddBatchMemOpNode(CUgraphNode *out, CUgraph hg, const CUgraphNode *deps, size_t nd,
					    const CUDA_BATCH_MEM_OP_NODE_PARAMS *p)
{
	return add_params(out, hg, deps, nd, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, p);
}

RC_EXPORT CUresult cuGraphMemAllocNodeGetParams(CUgraphNode hn, CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
	struct rc_gnode *n;
	CUresult rc = typed(hn, CU_GRAPH_NODE_TYPE_MEM_ALLOC, p, &n);
	if (!rc) {
		memset(p, 0, sizeof(*p));
		p->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
		p->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		p->poolProps.location.id = n->g->ctx->ordinal;
		p->bytesize = n->bytes;
		p->dptr = n->dptr;
	}
	return rc;
}

/* Node hn of type t and, with hx, the executable it is set in. */
static CUresult set_target(CUgraphExec hx, CUgraphNode hn, CUgraphNodeType t, struct rc_gnode **n,
			   struct rc_graph **x)
{
	CUresult rc = get_node(hn, n);
	if (rc)
		return rc;
	if ((*n)->type != t)
		return CUDA_ERROR_INVALID_VALUE;
	*x = NULL;
	return hx ? rc_obj(hx, RC_GEXEC, x) : CUDA_SUCCESS;
}

/* A SET (x NULL) or EXEC_SET request for node n, up to its type. */
static struct wbuf *set_req(struct rc_gnode *n, struct rc_graph *x)
{
	struct wbuf *w = gop(n->g->ctx, x ? RGPU_G_EXEC_SET : RGPU_G_SET);
	if (x)
		put_u64(w, x->h);
	put_u64(w, n->h);
	return w;
}

/* A host node's function and argument, in its graph or in executable hx.
 * The new pair gets a client id of its own: executables and clones made
 * before keep calling the old one, as the driver's do. */
static CUresult set_host(CUgraphExec hx, CUgraphNode hn, const CUDA_HOST_NODE_PARAMS *p)
{
	struct rc_gnode *n;
	struct rc_graph *x;
	CUresult rc = set_target(hx, hn, CU_GRAPH_NODE_TYPE_HOST, &n, &x);
	if (rc)
		return rc;
	if (!p || !p->fn)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t id = rc_hostfn_register(p->fn, p->userData);
	if (!id)
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct wbuf *w = set_req(n, x);
	put_u32(w, CU_GRAPH_NODE_TYPE_HOST);
	put_u64(w, id);
	struct rd r;
	if ((rc = rc_call(n->g->ctx->dev->conn, RGPU_OP_GRAPH_OP, w, &r))) {
		rc_hostfn_forget(id);
		return rc;
	}
	if (!x)
		n->host = *p; /* (an executable's setter leaves the node as it is) */
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuGraphHostNodeSetParams(CUgraphNode n, const CUDA_HOST_NODE_PARAMS *p)
{
	return set_host(NULL, n, p);
}

RC_EXPORT CUresult cuGraphExecHostNodeSetParams(CUgraphExec x, CUgraphNode n, const CUDA_HOST_NODE_PARAMS *p)
{
	return x ? set_host(x, n, p) : CUDA_ERROR_INVALID_VALUE;
}

/* The event of an event record or wait node (type t), in its graph or in
 * executable hx. */
static CUresult set_event(CUgraphExec hx, CUgraphNode hn, CUgraphNodeType t, CUevent e)
{
	struct rc_gnode *n;
	struct rc_graph *x;
	uint64_t eh;
	CUresult rc = set_target(hx, hn, t, &n, &x);
	if (!rc)
		rc = event_handle(e, n->g, &eh);
	if (rc)
		return rc;
	struct wbuf *w = set_req(n, x);
	put_u32(w, (uint32_t)t);
	put_u64(w, eh);
	struct rd r;
	if ((rc = rc_call(n->g->ctx->dev->conn, RGPU_OP_GRAPH_OP, w, &r)))
		return rc;
	if (!x)
		n->event = e;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuGraphEventRecordNodeSetEvent(CUgraphNode n, CUevent e)
{
	return set_event(NULL, n, CU_GRAPH_NODE_TYPE_EVENT_RECORD, e);
}

RC_EXPORT CUresult cuGraphEventWaitNodeSetEvent(CUgraphNode n, CUevent e)
{
	return set_event(NULL, n, CU_GRAPH_NODE_TYPE_WAIT_EVENT, e);
}

RC_EXPORT CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec x, CUgraphNode n, CUevent e)
{
	return x ? set_event(x, n, CU_GRAPH_NODE_TYPE_EVENT_RECORD, e) : CUDA_ERROR_INVALID_VALUE;
}

RC_EXPORT CUresult cuGraphExecEventWaitNodeSetEvent(CUgraphExec x, CUgraphNode n, CUevent e)
{
	return x ? set_event(x, n, CU_GRAPH_NODE_TYPE_WAIT_EVENT, e) : CUDA_ERROR_INVALID_VALUE;
}

/* ------------------------------------------------- enabled, child graph */

/* Executable hx and node hn where a node can be disabled: kernel, memcpy
 * and memset nodes only (the driver refuses the others so). */
static CUresult enable_target(CUgraphExec hx, CUgraphNode hn, struct rc_graph **x, struct rc_gnode **n)
{
	CUresult rc = rc_obj(hx, RC_GEXEC, x);
	if (!rc)
		rc = get_node(hn, n);
	if (rc)
		return rc;
	CUgraphNodeType t = (*n)->type;
	if (t != CU_GRAPH_NODE_TYPE_KERNEL && t != CU_GRAPH_NODE_TYPE_MEMCPY && t != CU_GRAPH_NODE_TYPE_MEMSET)
		return CUDA_ERROR_INVALID_VALUE;
	return (*x)->ctx->dev->conn == (*n)->g->ctx->dev->conn ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Kept on the server, with the executable: nothing cached here. */
RC_EXPORT CUresult cuGraphNodeSetEnabled(CUgraphExec hx, CUgraphNode hn, unsigned int on)
{
	struct rc_graph *x;
	struct rc_gnode *n;
	CUresult rc = enable_target(hx, hn, &x, &n);
	if (rc)
		return rc;
	struct wbuf *w = gop(x->ctx, RGPU_G_SET_ENABLED);
	put_u64(w, x->h);
	put_u64(w, n->h);
	put_u32(w, on ? 1 : 0);
	struct rd r;
	return rc_call(x->ctx->dev->conn, RGPU_OP_GRAPH_OP, w, &r);
}

RC_EXPORT CUresult cuGraphNodeGetEnabled(CUgraphExec hx, CUgraphNode hn, unsigned int *on)
{
	struct rc_graph *x;
	struct rc_gnode *n;
	CUresult rc = enable_target(hx, hn, &x, &n);
	if (rc)
		return rc;
	if (!on)
		return CUDA_ERROR_INVALID_VALUE;
	struct wbuf *w = gop(x->ctx, RGPU_G_GET_ENABLED);
	put_u64(w, x->h);
	put_u64(w, n->h);
	struct rd r;
	if ((rc = rc_call(x->ctx->dev->conn, RGPU_OP_GRAPH_OP, w, &r)))
		return rc;
	uint32_t v = get_u32(&r);
	if (!rd_ok(&r))
		return CUDA_ERROR_UNKNOWN;
	*on = v;
	return CUDA_SUCCESS;
}

/* The graph a child graph node owns (not a copy: what is added to it is
 * in the node), asked of the server once and kept with the node, which
 * frees it; owned, so cuGraphDestroy refuses it.  It starts with the
 * words and registrations of the node's whole graph (a superset of the
 * child's: the child's own are not known apart here). */
RC_EXPORT CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode hn, CUgraph *out)
{
	struct rc_gnode *n;
	CUresult rc = get_node(hn, &n);
	if (rc)
		return rc;
	if (n->type != CU_GRAPH_NODE_TYPE_GRAPH || !out)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&glock);
	struct rc_graph *have = n->child;
	pthread_mutex_unlock(&glock);
	if (have) {
		*out = (CUgraph)have;
		return CUDA_SUCCESS;
	}
	struct wbuf *w = gop(n->g->ctx, RGPU_G_CHILD_GRAPH);
	put_u64(w, n->h);
	struct rd r;
	if ((rc = rc_call(n->g->ctx->dev->conn, RGPU_OP_GRAPH_OP, w, &r)))
		return rc;
	uint64_t h = get_u64(&r);
	if (!rd_ok(&r))
		return CUDA_ERROR_UNKNOWN;
	struct rc_graph *c = rc_graph_new(n->g->ctx, h);
	if (!c || rc_graph_copy_info(c, n->g)) {
		if (c)
			rc_graph_free(c);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	c->nhost = n->hosts;
	c->owned = 1;
	pthread_mutex_lock(&glock);
	if (!n->child) {
		c->owner = n;
		n->child = c;
		c = NULL;
	}
	*out = (CUgraph)n->child;
	pthread_mutex_unlock(&glock);
	if (c) /* another thread was first */
		rc_graph_free(c);
	return CUDA_SUCCESS;
}

/* ------------------------------------------------ kernel node attributes */

_Static_assert(sizeof(CUkernelNodeAttrValue) == RGPU_G_KATTR_BYTES,
	       "a kernel node attribute's value travels as RGPU_G_KATTR_BYTES bytes");

/* Kernel node hn, whose attribute a is asked or set.  Attributes holding
 * an event (launches only, in CUDA) would need a handle translated. */
static CUresult kattr_node(CUgraphNode hn, CUkernelNodeAttrID a, const void *v, struct rc_gnode **n)
{
	CUresult rc = get_node(hn, n);
	if (rc)
		return rc;
	if ((*n)->type != CU_GRAPH_NODE_TYPE_KERNEL || !v)
		return CUDA_ERROR_INVALID_VALUE;
	if (a == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT || a == CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT) {
		rc_unsupported("kernel node attributes holding an event");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuGraphKernelNodeGetAttribute(CUgraphNode hn, CUkernelNodeAttrID a, CUkernelNodeAttrValue *v)
{
	struct rc_gnode *n;
	CUresult rc = kattr_node(hn, a, v, &n);
	if (rc)
		return rc;
	struct wbuf *w = gop(n->g->ctx, RGPU_G_KATTR_GET);
	put_u64(w, n->h);
	put_u32(w, (uint32_t)a);
	struct rd r;
	if ((rc = rc_call(n->g->ctx->dev->conn, RGPU_OP_GRAPH_OP, w, &r)))
		return rc;
	const void *raw = get_raw(&r, RGPU_G_KATTR_BYTES);
	if (!raw)
		return CUDA_ERROR_UNKNOWN;
	memcpy(v, raw, sizeof(*v));
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuGraphKernelNodeSetAttribute(CUgraphNode hn, CUkernelNodeAttrID a,
						 const CUkernelNodeAttrValue *v)
{
	struct rc_gnode *n;
	CUresult rc = kattr_node(hn, a, v, &n);
	if (rc)
		return rc;
	struct wbuf *w = gop(n->g->ctx, RGPU_G_KATTR_SET);
	put_u64(w, n->h);
	put_u32(w, (uint32_t)a);
	put_raw(w, v, sizeof(*v));
	struct rd r;
	return rc_call(n->g->ctx->dev->conn, RGPU_OP_GRAPH_OP, w, &r);
}

RC_EXPORT CUresult cuGraphKernelNodeCopyAttributes(CUgraphNode hd, CUgraphNode hs)
{
	struct rc_gnode *d, *s;
	CUresult rc = get_node(hd, &d);
	if (!rc)
		rc = get_node(hs, &s);
	if (rc)
		return rc;
	if (d->type != CU_GRAPH_NODE_TYPE_KERNEL || s->type != CU_GRAPH_NODE_TYPE_KERNEL ||
	    d->g->ctx != s->g->ctx)
		return CUDA_ERROR_INVALID_VALUE;
	struct wbuf *w = gop(d->g->ctx, RGPU_G_KATTR_COPY);
	put_u64(w, d->h);
	put_u64(w, s->h);
	struct rd r;
	return rc_call(d->g->ctx->dev->conn, RGPU_OP_GRAPH_OP, w, &r);
}

/* ------------------------------------------- generic node parameters */

/* cuGraphNodeSetParams (hx NULL) and cuGraphExecNodeSetParams: each type
 * to its own setter, as add_node does for cuGraphAddNode. */
static CUresult node_set(CUgraphExec hx, CUgraphNode hn, CUgraphNodeParams *p)
{
	struct rc_gnode *n;
	CUresult rc = get_node(hn, &n);
	if (rc)
		return rc;
	if (!p || p->type != n->type)
		return CUDA_ERROR_INVALID_VALUE;
	switch (p->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL:
		return set_params(hx, hn, CU_GRAPH_NODE_TYPE_KERNEL, &p->kernel);
	case CU_GRAPH_NODE_TYPE_MEMCPY:
		return set_params(hx, hn, CU_GRAPH_NODE_TYPE_MEMCPY, &p->memcpy.copyParams);
	case CU_GRAPH_NODE_TYPE_MEMSET: {
		CUDA_MEMSET_NODE_PARAMS m = { p->memset.dst, p->memset.pitch, p->memset.value,
					      p->memset.elementSize, p->memset.width, p->memset.height };
		return set_params(hx, hn, CU_GRAPH_NODE_TYPE_MEMSET, &m);
	}
	case CU_GRAPH_NODE_TYPE_HOST: {
		CUDA_HOST_NODE_PARAMS h = { p->host.fn, p->host.userData };
		return set_host(hx, hn, &h);
	}
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
		return set_event(hx, hn, CU_GRAPH_NODE_TYPE_EVENT_RECORD, p->eventRecord.event);
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
		return set_event(hx, hn, CU_GRAPH_NODE_TYPE_WAIT_EVENT, p->eventWait.event);
	case CU_GRAPH_NODE_TYPE_GRAPH:
		if (hx)
			return cuGraphExecChildGraphNodeSetParams(hx, hn, p->graph.graph);
		rc_unsupported("cuGraphNodeSetParams of a child graph node (in a graph)");
		return CUDA_ERROR_NOT_SUPPORTED;
	case CU_GRAPH_NODE_TYPE_EMPTY:
		return CUDA_SUCCESS; /* nothing to set */
	case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
	case CU_GRAPH_NODE_TYPE_MEM_FREE:
		return CUDA_ERROR_NOT_SUPPORTED; /* (the driver's documented answer) */
	case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: {
		CUDA_BATCH_MEM_OP_NODE_PARAMS b = { p->memOp.ctx, p->memOp.count, p->memOp.paramArray,
						    p->memOp.flags };
		return set_params(hx, hn, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, &b);
	}
	default:
		rc_unsupported("setting the parameters of conditional or semaphore nodes");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
}

RC_EXPORT CUresult cuGraphNodeSetParams(CUgraphNode n, CUgraphNodeParams *p)
{
	return node_set(NULL, n, p);
}

RC_EXPORT CUresult cuGraphExecNodeSetParams(CUgraphExec x, CUgraphNode n, CUgraphNodeParams *p)
{
	return x ? node_set(x, n, p) : CUDA_ERROR_INVALID_VALUE;
}

/* ------------------------------------------------ clones and updates */

static void node_copy_params(struct rc_gnode *dst, const struct rc_gnode *src)
{
	dst->type = src->type;
	dst->orig = (struct rc_gnode *)src;
	dst->hosts = src->hosts;
	dst->ms = src->ms;
	dst->mc = src->mc;
	dst->host = src->host;
	dst->event = src->event;
	dst->dptr = src->dptr;
	dst->bytes = src->bytes;
	if (src->bmops && (dst->bmops = malloc((src->bm.count ? src->bm.count : 1) * sizeof(*src->bmops)))) {
		memcpy(dst->bmops, src->bmops, src->bm.count * sizeof(*src->bmops));
		dst->bm = src->bm;
		dst->bm.paramArray = dst->bmops;
	}
	dst->kp = src->kp;
	dst->kp.kernelParams = NULL;
	struct rc_func *f;
	if (src->kbuf && !rc_func_resolve(src->kp.func ? src->kp.func : (CUfunction)src->kp.kern, &f)) {
		size_t len = f->layout.total;
		dst->kbuf = malloc(len ? len : 1);
		dst->kargs = calloc(f->layout.n ? f->layout.n : 1, sizeof(void *));
		if (dst->kbuf && dst->kargs) {
			memcpy(dst->kbuf, src->kbuf, len);
			for (uint32_t i = 0; i < f->layout.n; i++)
				dst->kargs[i] = dst->kbuf + f->layout.off[i];
			dst->kp.kernelParams = dst->kargs;
		} else {
			free(dst->kbuf);
			free(dst->kargs);
			dst->kbuf = NULL;
			dst->kargs = NULL;
		}
	}
}

RC_EXPORT CUresult cuGraphClone(CUgraph *out, CUgraph hg)
{
	struct rc_graph *g;
	CUresult rc = get_graph(hg, &g);
	if (rc)
		return rc;
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	/* every node of the original known here, so each gets its twin */
	if ((rc = refresh_nodes(g)))
		return rc;
	struct wbuf *w = gop(g->ctx, RGPU_G_CLONE);
	put_u64(w, g->h);
	struct rd r;
	if ((rc = rc_call(g->ctx->dev->conn, RGPU_OP_GRAPH_OP, w, &r)))
		return rc;
	struct rc_graph *c = rc_graph_new(g->ctx, get_u64(&r));
	if (!c || rc_graph_copy_info(c, g) || rc_uobj_copy(c, g)) {
		if (c)
			rc_graph_free(c);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	uint32_t n = get_u32(&r);
	pthread_mutex_lock(&glock);
	for (uint32_t i = 0; i < n && rd_ok(&r) && !rc; i++) {
		uint64_t oh = get_u64(&r), ch = get_u64(&r);
		struct rc_gnode *o = node_by_id(g, oh);
		struct rc_gnode *cn = o ? node_add(c, ch, o->type) : NULL;
		if (o && !cn)
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		else if (cn)
			node_copy_params(cn, o);
	}
	pthread_mutex_unlock(&glock);
	if (rc || !rd_ok(&r)) {
		rc_graph_free(c);
		return rc ? rc : CUDA_ERROR_UNKNOWN;
	}
	*out = (CUgraph)c;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuGraphNodeFindInClone(CUgraphNode *out, CUgraphNode orig, CUgraph clone)
{
	struct rc_graph *c;
	struct rc_gnode *o;
	CUresult rc = get_graph(clone, &c);
	if (!rc)
		rc = get_node(orig, &o);
	if (rc)
		return rc;
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < c->nnodes; i++)
		if (c->nodes[i]->orig == o) {
			*out = (CUgraphNode)c->nodes[i];
			return CUDA_SUCCESS;
		}
	return CUDA_ERROR_INVALID_VALUE;
}

static CUresult exec_update(CUgraphExec hx, CUgraph hg, CUgraphExecUpdateResultInfo *info)
{
	struct rc_graph *x, *g;
	CUresult rc = rc_obj(hx, RC_GEXEC, &x);
	if (!rc)
		rc = get_graph(hg, &g);
	if (rc)
		return rc;
	if (!info)
		return CUDA_ERROR_INVALID_VALUE;
	struct wbuf *w = gop(x->ctx, RGPU_G_EXEC_UPDATE);
	put_u64(w, x->h);
	put_u64(w, g->h);
	struct rd r;
	rc = rc_call(x->ctx->dev->conn, RGPU_OP_GRAPH_OP, w, &r);
	memset(info, 0, sizeof(*info));
	info->result = (CUgraphExecUpdateResult)get_u32(&r);
	uint64_t en = get_u64(&r);
	if (en) {
		pthread_mutex_lock(&glock);
		info->errorNode = (CUgraphNode)node_of_id(g, en, CU_GRAPH_NODE_TYPE_EMPTY);
		pthread_mutex_unlock(&glock);
	}
	if (!rc && rc_graph_copy_info(x, g))
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	if (!rc) { /* the graph's user objects replace the executable's */
		struct rc_graph old = { .urefs = x->urefs, .nurefs = x->nurefs };
		x->urefs = NULL;
		x->nurefs = 0;
		if (rc_uobj_copy(x, g))
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		rc_uobj_drop(&old);
	}
	return rc;
}

RC_EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec x, CUgraph g, CUgraphExecUpdateResultInfo *info)
{
	return exec_update(x, g, info);
}

RC_EXPORT CUresult cuGraphExecUpdate(CUgraphExec x, CUgraph g, CUgraphNode *err, CUgraphExecUpdateResult *res)
{
	CUgraphExecUpdateResultInfo info;
	CUresult rc = exec_update(x, g, &info);
	if (err)
		*err = info.errorNode;
	if (res)
		*res = info.result;
	return rc;
}

RC_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice dev)
{
	struct rc_dev *d;
	CUresult rc = rc_dev_get(dev, &d);
	if (rc)
		return rc;
	struct rc_ctx *c;
	if ((rc = rc_need_ctx(&c)))
		return rc;
	if (c->dev != d)
		return CUDA_SUCCESS; /* nothing of this process's pools there */
	struct wbuf *w = gop(c, RGPU_G_MEM_TRIM);
	struct rd r;
	return rc_call(c->dev->conn, RGPU_OP_GRAPH_OP, w, &r);
}

/* ------------------------------------------------- capture information */

/* The graph a stream is capturing into and its current ends, from the
 * server (capturing streams only). */
CUresult rc_capture_info(CUstream s, struct rc_ctx *c, uint64_t sh, CUgraph *graph,
			 const CUgraphNode **deps, size_t *ndeps)
{
	struct wbuf *w = gop(c, RGPU_G_CAPTURE_INFO);
	put_u64(w, sh);
	struct rd r;
	CUresult rc = rc_call(c->dev->conn, RGPU_OP_GRAPH_OP, w, &r);
	if (rc)
		return rc;
	(void)get_u32(&r);
	(void)get_u64(&r);
	uint64_t gh = get_u64(&r);
	uint32_t n = get_u32(&r);
	if (!rd_ok(&r) || n > r.left / 8)
		return CUDA_ERROR_UNKNOWN;
	/* one client graph per capture, kept on the stream's capture record */
	static __thread struct rc_graph *last;
	static __thread CUgraphNode *last_deps;
	struct rc_graph *g = last && last->h == gh && last->ctx == c ? last : NULL;
	if (!g) {
		/* an earlier capture's graph is left to the process: the
		 * server graph it names is the capture's, ended elsewhere */
		if (!(g = rc_graph_new(c, gh)))
			return CUDA_ERROR_OUT_OF_MEMORY;
		g->owned = 1;
		last = g;
	}
	(void)s;
	CUgraphNode *d = realloc(last_deps, (n ? n : 1) * sizeof(*d));
	if (!d)
		return CUDA_ERROR_OUT_OF_MEMORY;
	last_deps = d;
	pthread_mutex_lock(&glock);
	for (uint32_t i = 0; i < n; i++)
		if (!(d[i] = (CUgraphNode)node_of_id(g, get_u64(&r), CU_GRAPH_NODE_TYPE_EMPTY)))
			rc = CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_unlock(&glock);
	if (rc)
		return rc;
	if (graph)
		*graph = (CUgraph)g;
	if (deps)
		*deps = d;
	if (ndeps)
		*ndeps = n;
	return CUDA_SUCCESS;
}

static CUresult update_capture(CUstream s, CUgraphNode *deps, const CUgraphEdgeData *ed, size_t n,
			       unsigned int flags)
{
	struct rc_ctx *c;
	uint64_t sh;
	CUresult rc = rc_stream_resolve(s, &c, &sh);
	if (rc)
		return rc;
	if (!rc_stream_capture_id(s))
		return CUDA_ERROR_ILLEGAL_STATE;
	for (size_t i = 0; ed && i < n; i++)
		if (ed[i].type != CU_GRAPH_DEPENDENCY_TYPE_DEFAULT)
			return CUDA_ERROR_NOT_SUPPORTED;
	struct wbuf *w = gop(c, RGPU_G_CAPTURE_DEPS);
	put_u64(w, sh);
	put_u32(w, flags);
	put_u32(w, (uint32_t)n);
	for (size_t i = 0; i < n; i++) {
		struct rc_gnode *d;
		if (get_node(deps[i], &d))
			return CUDA_ERROR_INVALID_VALUE;
		/* host nodes added by hand to a capture count for its graph */
		put_u64(w, d->h);
	}
	struct rd r;
	return rc_call(c->dev->conn, RGPU_OP_GRAPH_OP, w, &r);
}

RC_EXPORT CUresult cuStreamUpdateCaptureDependencies(CUstream s, CUgraphNode *deps, size_t n, unsigned int flags)
{
	return update_capture(s, deps, NULL, n, flags);
}

RC_EXPORT CUresult cuStreamUpdateCaptureDependencies_v2(CUstream s, CUgraphNode *deps,
							const CUgraphEdgeData *ed, size_t n,
							unsigned int flags)
{
	return update_capture(s, deps, ed, n, flags);
}

RC_EXPORT CUresult cuStreamUpdateCaptureDependencies_ptsz(CUstream s, CUgraphNode *deps, size_t n,
							  unsigned int flags)
{
	return update_capture(s ? s : CU_STREAM_PER_THREAD, deps, NULL, n, flags);
}

RC_EXPORT CUresult cuStreamUpdateCaptureDependencies_v2_ptsz(CUstream s, CUgraphNode *deps,
							     const CUgraphEdgeData *ed, size_t n,
							     unsigned int flags)
{
	return update_capture(s ? s : CU_STREAM_PER_THREAD, deps, ed, n, flags);
}

/* ------------------------------------------------------------ debug dot */

/* Written here, from what this process knows of the graph. */
RC_EXPORT CUresult cuGraphDebugDotPrint(CUgraph hg, const char *path, unsigned int flags)
{
	struct rc_graph *g;
	(void)flags;
	CUresult rc = get_graph(hg, &g);
	if (rc)
		return rc;
	if (!path)
		return CUDA_ERROR_INVALID_VALUE;
	struct rc_gnode **e = NULL;
	size_t n = 0;
	if ((rc = edges(g, &e, &n)))
		return rc;
	FILE *f = fopen(path, "w");
	if (!f) {
		free(e);
		return CUDA_ERROR_OPERATING_SYSTEM;
	}
	static const char *names[] = { "kernel", "memcpy", "memset", "host", "graph", "empty",
				       "wait_event", "event_record", "ext_sem_signal", "ext_sem_wait",
				       "mem_alloc", "mem_free", "batch_mem_op", "conditional" };
	fprintf(f, "digraph rgpu_graph {\n");
	for (size_t i = 0; i < g->nnodes; i++) {
		unsigned t = (unsigned)g->nodes[i]->type;
		fprintf(f, "\tn%llx [label=\"%s\"];\n", (unsigned long long)g->nodes[i]->h,
			t < sizeof(names) / sizeof(names[0]) ? names[t] : "node");
	}
	for (size_t i = 0; i < n; i++)
		fprintf(f, "\tn%llx -> n%llx;\n", (unsigned long long)e[2 * i]->h,
			(unsigned long long)e[2 * i + 1]->h);
	fprintf(f, "}\n");
	free(e);
	return fclose(f) ? CUDA_ERROR_OPERATING_SYSTEM : CUDA_SUCCESS;
}
