/*
 * CUDA graphs on the emulated device: explicit construction (kernel,
 * memset, memcpy, host, empty, event record/wait, child graph, memory
 * alloc/free and conditional nodes), dependencies, clone, instantiate,
 * launch, exec update, node parameters; and stream capture.
 *
 * A graph is a list of nodes with their dependencies.  Instantiating
 * clones it and orders the nodes topologically; launching queues the
 * nodes' work on the stream in that order through the ordinary entry
 * points (one valid execution of the graph: CUDA may run independent
 * nodes concurrently, the emulated device runs them one after another).
 * Captured work is kept as the queued operations themselves (emu_op
 * templates, copied at each launch), so whatever a stream can run, a
 * capture records.
 *
 * Simplifications: memory alloc nodes allocate when the node is added
 * (the address is fixed then, as in CUDA) and the memory stays until the
 * context goes; free nodes do nothing.  Conditional nodes evaluate their
 * handle's value when the graph is launched: kernels cannot set it here,
 * so IF and SWITCH take the default value and a WHILE whose value is set
 * fails the launch (it would never end).  Capture records one stream;
 * events recorded or waited for in it make no node (in CUDA they join
 * other streams into the capture, which is not emulated).
 *
 * Locking: graph_lock covers every graph, node, exec and capture (graph
 * calls are not performance-critical).  It is taken after a context's
 * lock (a capture takes queued work with ctx->lock held) and nothing is
 * locked while it is held; graphs are launched without it.
 */
#include "emu.h"

#include <stdlib.h>
#include <string.h>

#define GRAPH_MAGIC 0x45677270u
#define NODE_MAGIC 0x45676e64u
#define EXEC_MAGIC 0x45676578u

struct emu_graph;

/* kernel node attributes one node keeps (CUDA's graph-node ones) */
#define EMU_KATTR_MAX 12

struct gnode {
	uint32_t magic;
	struct emu_graph *g;
	CUgraphNodeType type;
	struct gnode **deps;
	size_t ndeps;
	/* kernel */
	CUDA_KERNEL_NODE_PARAMS kp;   /* kernelParams/extra unused: args */
	unsigned char *args;
	size_t argsize;
	/* memset, memcpy, host, event, child, memory */
	CUDA_MEMSET_NODE_PARAMS ms;
	CUDA_MEMCPY3D mc;
	CUDA_HOST_NODE_PARAMS host;
	CUevent event;
	struct emu_graph *child;
	CUdeviceptr dptr;
	size_t bytesize;
	/* conditional */
	CUgraphConditionalHandle cond;
	CUgraphConditionalNodeType cond_type;
	unsigned cond_size;
	struct emu_graph **bodies;
	/* batch memory operations (bm.paramArray: ops, the node's own) */
	CUDA_BATCH_MEM_OP_NODE_PARAMS bm;
	CUstreamBatchMemOpParams *ops;
	/* captured: the queued operation */
	struct emu_op *op;
	/* in an executable: disabled (cuGraphNodeSetEnabled), it runs as an
	 * empty node */
	int disabled;
	/* kernel: the attributes set on it (a clone copies them) */
	struct {
		CUlaunchAttributeID id;
		CUlaunchAttributeValue v;
	} kattr[EMU_KATTR_MAX];
	unsigned nkattr;
};

struct emu_graph {
	uint32_t magic;
	struct gnode **nodes;
	size_t n, cap;
	int owned;  /* a child graph or conditional body: not destroyable */
};

struct emu_exec {
	uint32_t magic;
	struct emu_graph *g;  /* a clone, nodes in launch order */
	unsigned long long flags; /* as instantiated, but for the upload flag */
};

struct condh {
	uint32_t magic;
	unsigned value, def, flags;
	int taken;           /* a node has it: as in CUDA, one node per handle */
	struct condh *next;  /* every handle: kept for the process's life */
};
static struct condh *condhs;
#define COND_MAGIC 0x45676368u

static pthread_mutex_t graph_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---------------------------------------------------------------- basics */

static struct emu_graph *graph_new(void)
{
	struct emu_graph *g = calloc(1, sizeof(*g));
	if (g)
		g->magic = GRAPH_MAGIC;
	return g;
}

static struct emu_graph *graph_get(CUgraph h)
{
	struct emu_graph *g = (struct emu_graph *)h;
	return g && g->magic == GRAPH_MAGIC ? g : NULL;
}

static struct gnode *node_get(CUgraphNode h)
{
	struct gnode *n = (struct gnode *)h;
	return n && n->magic == NODE_MAGIC ? n : NULL;
}

static void graph_free(struct emu_graph *g);

static void node_free(struct gnode *n)
{
	free(n->deps);
	free(n->args);
	free(n->ops);
	if (n->child)
		graph_free(n->child);
	for (unsigned i = 0; n->bodies && i < n->cond_size; i++)
		graph_free(n->bodies[i]);
	free(n->bodies);
	if (n->op)
		emu_op_free(n->op->launch ? n->op->launch->ctx : NULL, n->op);
	n->magic = 0;
	free(n);
}

static void graph_free(struct emu_graph *g)
{
	if (!g)
		return;
	for (size_t i = 0; i < g->n; i++)
		node_free(g->nodes[i]);
	free(g->nodes);
	g->magic = 0;
	free(g);
}

static size_t node_index(const struct emu_graph *g, const struct gnode *n)
{
	for (size_t i = 0; i < g->n; i++)
		if (g->nodes[i] == n)
			return i;
	return (size_t)-1;
}

/* Adds n to g after its dependencies (all nodes of g). */
static CUresult node_add(struct emu_graph *g, struct gnode *n, const CUgraphNode *deps, size_t ndeps)
{
	if (ndeps && !deps)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < ndeps; i++) {
		struct gnode *d = node_get(deps[i]);
		if (!d || d->g != g)
			return CUDA_ERROR_INVALID_VALUE;
		for (size_t j = 0; j < i; j++)
			if (deps[j] == deps[i])
				return CUDA_ERROR_INVALID_VALUE;
	}
	if (g->n == g->cap) {
		size_t cap = g->cap ? 2 * g->cap : 16;
		struct gnode **p = realloc(g->nodes, cap * sizeof(*p));
		if (!p)
			return CUDA_ERROR_OUT_OF_MEMORY;
		g->nodes = p;
		g->cap = cap;
	}
	if (ndeps && !(n->deps = malloc(ndeps * sizeof(*n->deps))))
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t i = 0; i < ndeps; i++)
		n->deps[i] = (struct gnode *)deps[i];
	n->ndeps = ndeps;
	n->g = g;
	n->magic = NODE_MAGIC;
	g->nodes[g->n++] = n;
	return CUDA_SUCCESS;
}

static struct emu_op *op_clone(const struct emu_op *o)
{
	struct emu_op *c = malloc(sizeof(*c));
	if (!c)
		return NULL;
	*c = *o;
	c->next = NULL;
	c->deps = NULL;
	c->ndeps = 0;
	c->launch = NULL;
	c->host = o->host;
	c->host_owned = 0;
	if (o->host_owned && o->bytes) {
		if (!(c->host = malloc(o->bytes))) {
			free(c);
			return NULL;
		}
		memcpy(c->host, o->host, o->bytes);
		c->host_owned = 1;
	}
	if (o->launch) {
		struct emu_launch *l = malloc(sizeof(*l));
		size_t as = o->launch->kernel->argsize;
		unsigned char *a = malloc(as ? as : 1);
		if (!l || !a) {
			free(l);
			free(a);
			if (c->host_owned)
				free(c->host);
			free(c);
			return NULL;
		}
		*l = *o->launch;
		memcpy(a, o->launch->args, as);
		l->args = a;
		c->launch = l;
	}
	return c;
}

static struct emu_graph *graph_clone(const struct emu_graph *g);

static struct gnode *node_clone(const struct gnode *n)
{
	struct gnode *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	*c = *n;
	c->deps = NULL;
	c->ndeps = 0;
	c->args = NULL;
	c->child = NULL;
	c->bodies = NULL;
	c->op = NULL;
	c->ops = NULL;
	if (n->ops) {
		if (!(c->ops = malloc((n->bm.count ? n->bm.count : 1) * sizeof(*c->ops))))
			goto fail;
		memcpy(c->ops, n->ops, n->bm.count * sizeof(*c->ops));
		c->bm.paramArray = c->ops;
	}
	if (n->args && !(c->args = malloc(n->argsize ? n->argsize : 1)))
		goto fail;
	if (n->args)
		memcpy(c->args, n->args, n->argsize);
	if (n->child && !(c->child = graph_clone(n->child)))
		goto fail;
	if (c->child)
		c->child->owned = 1;
	if (n->bodies) {
		if (!(c->bodies = calloc(n->cond_size, sizeof(*c->bodies))))
			goto fail;
		for (unsigned i = 0; i < n->cond_size; i++) {
			if (!(c->bodies[i] = graph_clone(n->bodies[i])))
				goto fail;
			c->bodies[i]->owned = 1;
		}
	}
	if (n->op && !(c->op = op_clone(n->op)))
		goto fail;
	return c;
fail:
	c->magic = NODE_MAGIC;
	node_free(c);
	return NULL;
}

static struct emu_graph *graph_clone(const struct emu_graph *g)
{
	struct emu_graph *c = graph_new();
	if (!c)
		return NULL;
	if (g->n && !(c->nodes = calloc(g->n, sizeof(*c->nodes)))) {
		free(c);
		return NULL;
	}
	c->cap = g->n;
	for (size_t i = 0; i < g->n; i++) {
		struct gnode *n = node_clone(g->nodes[i]);
		if (!n) {
			graph_free(c);
			return NULL;
		}
		n->g = c;
		n->magic = NODE_MAGIC;
		c->nodes[c->n++] = n;
	}
	/* dependencies by index */
	for (size_t i = 0; i < g->n; i++) {
		const struct gnode *o = g->nodes[i];
		struct gnode *n = c->nodes[i];
		if (!o->ndeps)
			continue;
		if (!(n->deps = malloc(o->ndeps * sizeof(*n->deps)))) {
			graph_free(c);
			return NULL;
		}
		for (size_t k = 0; k < o->ndeps; k++)
			n->deps[k] = c->nodes[node_index(g, o->deps[k])];
		n->ndeps = o->ndeps;
	}
	return c;
}

/* Orders g's nodes so every node comes after its dependencies;
 * CUDA_ERROR_INVALID_VALUE for a cycle. */
static CUresult topo_sort(struct emu_graph *g)
{
	size_t n = g->n, done = 0;
	struct gnode **out = malloc((n ? n : 1) * sizeof(*out));
	char *placed = calloc(n ? n : 1, 1);
	if (!out || !placed) {
		free(out);
		free(placed);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	while (done < n) {
		size_t before = done;
		for (size_t i = 0; i < n; i++) {
			if (placed[i])
				continue;
			int ready = 1;
			for (size_t k = 0; k < g->nodes[i]->ndeps && ready; k++)
				ready = placed[node_index(g, g->nodes[i]->deps[k])];
			if (ready) {
				placed[i] = 1;
				out[done++] = g->nodes[i];
			}
		}
		if (done == before) {
			free(out);
			free(placed);
			return CUDA_ERROR_INVALID_VALUE;
		}
	}
	memcpy(g->nodes, out, n * sizeof(*out));
	free(out);
	free(placed);
	for (size_t i = 0; i < n; i++) {
		struct gnode *x = g->nodes[i];
		if (x->child && topo_sort(x->child) != CUDA_SUCCESS)
			return CUDA_ERROR_INVALID_VALUE;
		for (unsigned b = 0; x->bodies && b < x->cond_size; b++)
			if (topo_sort(x->bodies[b]) != CUDA_SUCCESS)
				return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

/* ------------------------------------------------------------ parameters */

static CUresult kernel_params(struct gnode *n, const CUDA_KERNEL_NODE_PARAMS *p)
{
	CUfunction f = p->func ? p->func : (CUfunction)p->kern;
	if (!f)
		return CUDA_ERROR_INVALID_VALUE;
	size_t total = 0, off, size;
	size_t cap = 0;
	unsigned char *buf = NULL;
	if (p->extra) {
		/* CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE / _END */
		const void *bp = NULL;
		size_t bs = 0;
		for (void **e = p->extra; *e != CU_LAUNCH_PARAM_END; e += 2) {
			if (e[0] == CU_LAUNCH_PARAM_BUFFER_POINTER)
				bp = e[1];
			else if (e[0] == CU_LAUNCH_PARAM_BUFFER_SIZE)
				bs = *(size_t *)e[1];
			else
				return CUDA_ERROR_INVALID_VALUE;
		}
		if (!bp && bs)
			return CUDA_ERROR_INVALID_VALUE;
		if (!(buf = malloc(bs ? bs : 1)))
			return CUDA_ERROR_OUT_OF_MEMORY;
		if (bs)
			memcpy(buf, bp, bs);
		total = bs;
	} else {
		for (size_t i = 0; cuFuncGetParamInfo(f, i, &off, &size) == CUDA_SUCCESS; i++) {
			if (off + size > cap) {
				cap = off + size + 64;
				unsigned char *nb = realloc(buf, cap);
				if (!nb) {
					free(buf);
					return CUDA_ERROR_OUT_OF_MEMORY;
				}
				buf = nb;
			}
			if (!p->kernelParams) {
				free(buf);
				return CUDA_ERROR_INVALID_VALUE;
			}
			memcpy(buf + off, p->kernelParams[i], size);
			if (off + size > total)
				total = off + size;
		}
		if (!buf && !(buf = malloc(1)))
			return CUDA_ERROR_OUT_OF_MEMORY;
	}
	free(n->args);
	n->args = buf;
	n->argsize = total;
	n->kp = *p;
	n->kp.func = f;
	n->kp.kernelParams = NULL;
	n->kp.extra = NULL;
	return CUDA_SUCCESS;
}

static CUresult memset_params(const CUDA_MEMSET_NODE_PARAMS *p)
{
	if (!p || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4) || !p->height)
		return CUDA_ERROR_INVALID_VALUE;
	if (p->height > 1 && p->pitch < p->width * p->elementSize)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

static CUresult memcpy_params(const CUDA_MEMCPY3D *p)
{
	if (!p || p->srcArray || p->dstArray)
		return p ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

/* Checks the parameters of a node of type t before any node is touched. */
static CUresult params_check(CUgraphNodeType t, const void *p)
{
	switch (t) {
	case CU_GRAPH_NODE_TYPE_MEMSET:
		return memset_params(p);
	case CU_GRAPH_NODE_TYPE_MEMCPY:
		return memcpy_params(p);
	case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: {
		const CUDA_BATCH_MEM_OP_NODE_PARAMS *b = p;
		/* (a node of no operations the driver takes, and it does nothing) */
		if (b && !b->count)
			return b->flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
		return b ? emu_memop_batch_check(b->paramArray, b->count, b->flags) : CUDA_ERROR_INVALID_VALUE;
	}
	default:
		return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	}
}

/* Stores checked parameters p in node n (a kernel's arguments are copied). */
static CUresult params_store(struct gnode *n, const void *p)
{
	switch (n->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL:
		return kernel_params(n, p);
	case CU_GRAPH_NODE_TYPE_MEMSET:
		n->ms = *(const CUDA_MEMSET_NODE_PARAMS *)p;
		return CUDA_SUCCESS;
	case CU_GRAPH_NODE_TYPE_MEMCPY:
		n->mc = *(const CUDA_MEMCPY3D *)p;
		return CUDA_SUCCESS;
	case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: {
		const CUDA_BATCH_MEM_OP_NODE_PARAMS *b = p;
		CUstreamBatchMemOpParams *ops = malloc((b->count ? b->count : 1) * sizeof(*ops));
		if (!ops)
			return CUDA_ERROR_OUT_OF_MEMORY;
		if (b->count)
			memcpy(ops, b->paramArray, b->count * sizeof(*ops));
		free(n->ops);
		n->ops = ops;
		n->bm = *b;
		n->bm.paramArray = ops;
		return CUDA_SUCCESS;
	}
	default:
		return CUDA_ERROR_NOT_SUPPORTED;
	}
}

/* ------------------------------------------------------------ exported */

EMU_API CUresult CUDAAPI cuGraphCreate(CUgraph *out, unsigned int flags)
{
	if (!out || flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	struct emu_graph *g = graph_new();
	if (!g)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*out = (CUgraph)g;
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuGraphDestroy(CUgraph h)
{
	emu_lock(&graph_lock);
	struct emu_graph *g = graph_get(h);
	CUresult rc = !g ? CUDA_ERROR_INVALID_VALUE : g->owned ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
	if (!rc)
		graph_free(g);
	emu_unlock(&graph_lock);
	return rc;
}

/* The common part of adding a node: n (filled) goes into graph h. */
static CUresult add(CUgraphNode *out, CUgraph h, const CUgraphNode *deps, size_t ndeps, struct gnode *n)
{
	if (!out) {
		n->magic = NODE_MAGIC;
		node_free(n);
		return CUDA_ERROR_INVALID_VALUE;
	}
	emu_lock(&graph_lock);
	struct emu_graph *g = graph_get(h);
	CUresult rc = g ? node_add(g, n, deps, ndeps) : CUDA_ERROR_INVALID_VALUE;
	emu_unlock(&graph_lock);
	if (rc) {
		n->magic = NODE_MAGIC;
		n->ndeps = 0;
		node_free(n);
		return rc;
	}
	*out = (CUgraphNode)n;
	return CUDA_SUCCESS;
}

static struct gnode *node_new(CUgraphNodeType t)
{
	struct gnode *n = calloc(1, sizeof(*n));
	if (n)
		n->type = t;
	return n;
}

/* Adds a kernel, memset or memcpy node with parameters p. */
static CUresult add_params(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps, CUgraphNodeType t,
			   const void *p)
{
	CUresult rc = params_check(t, p);
	if (rc)
		return rc;
	struct gnode *n = node_new(t);
	if (!n)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if ((rc = params_store(n, p))) {
		free(n);
		return rc;
	}
	return add(out, g, deps, ndeps, n);
}

EMU_API CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
						 size_t ndeps, const CUDA_KERNEL_NODE_PARAMS *p)
{
	return add_params(out, g, deps, ndeps, CU_GRAPH_NODE_TYPE_KERNEL, p);
}

EMU_API CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
					      size_t ndeps, const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx)
{
	(void)ctx;
	return add_params(out, g, deps, ndeps, CU_GRAPH_NODE_TYPE_MEMSET, p);
}

EMU_API CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
					      size_t ndeps, const CUDA_MEMCPY3D *p, CUcontext ctx)
{
	(void)ctx;
	return add_params(out, g, deps, ndeps, CU_GRAPH_NODE_TYPE_MEMCPY, p);
}

EMU_API CUresult CUDAAPI cuGraphAddBatchMemOpNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
						  size_t ndeps, const CUDA_BATCH_MEM_OP_NODE_PARAMS *p)
{
	return add_params(out, g, deps, ndeps, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, p);
}

EMU_API CUresult CUDAAPI cuGraphAddHostNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
					    size_t ndeps, const CUDA_HOST_NODE_PARAMS *p)
{
	if (!p || !p->fn)
		return CUDA_ERROR_INVALID_VALUE;
	struct gnode *n = node_new(CU_GRAPH_NODE_TYPE_HOST);
	if (!n)
		return CUDA_ERROR_OUT_OF_MEMORY;
	n->host = *p;
	return add(out, g, deps, ndeps, n);
}

EMU_API CUresult CUDAAPI cuGraphAddEmptyNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
					     size_t ndeps)
{
	struct gnode *n = node_new(CU_GRAPH_NODE_TYPE_EMPTY);
	if (!n)
		return CUDA_ERROR_OUT_OF_MEMORY;
	return add(out, g, deps, ndeps, n);
}

static CUresult event_node(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
			   CUevent ev, CUgraphNodeType t)
{
	if (!ev)
		return CUDA_ERROR_INVALID_VALUE;
	struct gnode *n = node_new(t);
	if (!n)
		return CUDA_ERROR_OUT_OF_MEMORY;
	n->event = ev;
	return add(out, g, deps, ndeps, n);
}

EMU_API CUresult CUDAAPI cuGraphAddEventRecordNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
						   size_t ndeps, CUevent ev)
{
	return event_node(out, g, deps, ndeps, ev, CU_GRAPH_NODE_TYPE_EVENT_RECORD);
}

EMU_API CUresult CUDAAPI cuGraphAddEventWaitNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
						 size_t ndeps, CUevent ev)
{
	return event_node(out, g, deps, ndeps, ev, CU_GRAPH_NODE_TYPE_WAIT_EVENT);
}

EMU_API CUresult CUDAAPI cuGraphAddChildGraphNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
						  size_t ndeps, CUgraph child)
{
	emu_lock(&graph_lock);
	struct emu_graph *c = graph_get(child);
	struct emu_graph *copy = c && c != graph_get(g) ? graph_clone(c) : NULL;
	emu_unlock(&graph_lock);
	if (!copy)
		return c ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
	copy->owned = 1;
	struct gnode *n = node_new(CU_GRAPH_NODE_TYPE_GRAPH);
	if (!n) {
		graph_free(copy);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	n->child = copy;
	return add(out, g, deps, ndeps, n);
}

EMU_API CUresult CUDAAPI cuGraphChildGraphNodeGetGraph(CUgraphNode h, CUgraph *out)
{
	emu_lock(&graph_lock);
	struct gnode *n = node_get(h);
	CUresult rc = n && n->child && out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (!rc)
		*out = (CUgraph)n->child;
	emu_unlock(&graph_lock);
	return rc;
}

EMU_API CUresult CUDAAPI cuGraphAddMemAllocNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
						size_t ndeps, CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
	if (!p || !p->bytesize || p->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	struct emu_ctx *ctx;
	CUresult rc = emu_ctx_enter(&ctx);
	if (rc)
		return rc;
	if (p->poolProps.location.id != ctx->dev) {
		emu_ctx_leave(ctx);
		return CUDA_ERROR_INVALID_DEVICE;
	}
	/* after the free node of an earlier allocation of this graph that is
	 * large enough, its address again, as CUDA does (graph memory is the
	 * context's until it goes, so nothing is freed twice) */
	CUdeviceptr d = 0;
	struct emu_graph *eg = graph_get(g);
	for (size_t i = 0; eg && i < ndeps && !d; i++) {
		const struct gnode *f = node_get(deps[i]);
		for (size_t k = 0; f && f->type == CU_GRAPH_NODE_TYPE_MEM_FREE && k < eg->n && !d; k++)
			if (eg->nodes[k]->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC &&
			    eg->nodes[k]->dptr == f->dptr && eg->nodes[k]->bytesize >= p->bytesize)
				d = f->dptr;
	}
	if (!d && !(rc = emu_mem_alloc(ctx, p->bytesize, 1, &d)))
		emu_mem_set_graph(ctx, d);
	emu_ctx_leave(ctx);
	if (rc)
		return rc;
	struct gnode *n = node_new(CU_GRAPH_NODE_TYPE_MEM_ALLOC);
	if (!n)
		return CUDA_ERROR_OUT_OF_MEMORY;
	n->dptr = d;
	n->bytesize = p->bytesize;
	if ((rc = add(out, g, deps, ndeps, n)))
		return rc;
	p->dptr = d;
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuGraphAddMemFreeNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
					       size_t ndeps, CUdeviceptr d)
{
	if (!d)
		return CUDA_ERROR_INVALID_VALUE;
	struct gnode *n = node_new(CU_GRAPH_NODE_TYPE_MEM_FREE);
	if (!n)
		return CUDA_ERROR_OUT_OF_MEMORY;
	n->dptr = d;
	return add(out, g, deps, ndeps, n);
}

EMU_API CUresult CUDAAPI cuGraphConditionalHandleCreate(CUgraphConditionalHandle *out, CUgraph g,
							CUcontext ctx, unsigned int def, unsigned int flags)
{
	(void)ctx;
	if (!out || !graph_get(g) || (flags & ~(unsigned)CU_GRAPH_COND_ASSIGN_DEFAULT))
		return CUDA_ERROR_INVALID_VALUE;
	struct condh *c = calloc(1, sizeof(*c));
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* kept for the process: executables and clones use it after the
	 * graph it was made for is gone */
	*c = (struct condh){ COND_MAGIC, def, def, flags, 0, NULL };
	emu_lock(&graph_lock);
	c->next = condhs;
	condhs = c;
	emu_unlock(&graph_lock);
	*out = (CUgraphConditionalHandle)(uintptr_t)c;
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuGraphAddNode_v2(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
					   const CUgraphEdgeData *edges, size_t ndeps, CUgraphNodeParams *p)
{
	if (!p || edges)
		return CUDA_ERROR_INVALID_VALUE;
	switch (p->type) {
	case CU_GRAPH_NODE_TYPE_EMPTY:
		return cuGraphAddEmptyNode(out, g, deps, ndeps);
	case CU_GRAPH_NODE_TYPE_CONDITIONAL:
		break;
	case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: {
		CUDA_BATCH_MEM_OP_NODE_PARAMS b = { p->memOp.ctx, p->memOp.count, p->memOp.paramArray,
						    p->memOp.flags };
		return cuGraphAddBatchMemOpNode(out, g, deps, ndeps, &b);
	}
	default:
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	struct condh *c = (struct condh *)(uintptr_t)p->conditional.handle;
	unsigned size = p->conditional.size;
	if (!c || c->magic != COND_MAGIC || c->taken || !size ||
	    (p->conditional.type != CU_GRAPH_COND_TYPE_SWITCH && size != 1) || size > 64)
		return CUDA_ERROR_INVALID_VALUE;
	struct gnode *n = node_new(CU_GRAPH_NODE_TYPE_CONDITIONAL);
	if (!n || !(n->bodies = calloc(size, sizeof(*n->bodies)))) {
		free(n);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	n->cond = p->conditional.handle;
	n->cond_type = p->conditional.type;
	n->cond_size = size;
	for (unsigned i = 0; i < size; i++) {
		if (!(n->bodies[i] = graph_new())) {
			n->magic = NODE_MAGIC;
			node_free(n);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		n->bodies[i]->owned = 1;
	}
	CUresult rc = add(out, g, deps, ndeps, n);
	if (!rc) {
		p->conditional.phGraph_out = (CUgraph *)n->bodies;
		c->taken = 1;
	}
	return rc;
}

EMU_API CUresult CUDAAPI cuGraphAddDependencies(CUgraph h, const CUgraphNode *from, const CUgraphNode *to,
						size_t n)
{
	emu_lock(&graph_lock);
	struct emu_graph *g = graph_get(h);
	CUresult rc = g && (!n || (from && to)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; !rc && i < n; i++) {
		struct gnode *a = node_get(from[i]), *b = node_get(to[i]);
		if (!a || !b || a->g != g || b->g != g || a == b) {
			rc = CUDA_ERROR_INVALID_VALUE;
			break;
		}
		for (size_t k = 0; k < b->ndeps; k++)
			if (b->deps[k] == a)
				rc = CUDA_ERROR_INVALID_VALUE;
		if (rc)
			break;
		struct gnode **d = realloc(b->deps, (b->ndeps + 1) * sizeof(*d));
		if (!d) {
			rc = CUDA_ERROR_OUT_OF_MEMORY;
			break;
		}
		b->deps = d;
		b->deps[b->ndeps++] = a;
	}
	emu_unlock(&graph_lock);
	return rc;
}

EMU_API CUresult CUDAAPI cuGraphRemoveDependencies(CUgraph h, const CUgraphNode *from,
						   const CUgraphNode *to, size_t n)
{
	emu_lock(&graph_lock);
	struct emu_graph *g = graph_get(h);
	CUresult rc = g && (!n || (from && to)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; !rc && i < n; i++) {
		struct gnode *a = node_get(from[i]), *b = node_get(to[i]);
		size_t k;
		if (!a || !b || a->g != g || b->g != g) {
			rc = CUDA_ERROR_INVALID_VALUE;
			break;
		}
		for (k = 0; k < b->ndeps && b->deps[k] != a; k++)
			;
		if (k == b->ndeps) {
			rc = CUDA_ERROR_INVALID_VALUE;
			break;
		}
		b->deps[k] = b->deps[--b->ndeps];
	}
	emu_unlock(&graph_lock);
	return rc;
}

/* Edges with data: a programmatic edge lets the dependent kernel start
 * early; run in order, as here, it is a full dependency (conservative). */
static int edges_ok(const CUgraphEdgeData *ed, size_t n)
{
	for (size_t i = 0; ed && i < n; i++)
		if (ed[i].type != CU_GRAPH_DEPENDENCY_TYPE_DEFAULT &&
		    ed[i].type != CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC)
			return 0;
	return 1;
}

EMU_API CUresult CUDAAPI cuGraphAddDependencies_v2(CUgraph h, const CUgraphNode *from,
						   const CUgraphNode *to, const CUgraphEdgeData *ed,
						   size_t n)
{
	return edges_ok(ed, n) ? cuGraphAddDependencies(h, from, to, n) : CUDA_ERROR_INVALID_VALUE;
}

EMU_API CUresult CUDAAPI cuGraphRemoveDependencies_v2(CUgraph h, const CUgraphNode *from,
						      const CUgraphNode *to, const CUgraphEdgeData *ed,
						      size_t n)
{
	return edges_ok(ed, n) ? cuGraphRemoveDependencies(h, from, to, n) : CUDA_ERROR_INVALID_VALUE;
}

EMU_API CUresult CUDAAPI cuGraphDestroyNode(CUgraphNode h)
{
	emu_lock(&graph_lock);
	struct gnode *n = node_get(h);
	if (!n) {
		emu_unlock(&graph_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	struct emu_graph *g = n->g;
	size_t at = node_index(g, n);
	memmove(&g->nodes[at], &g->nodes[at + 1], (g->n - at - 1) * sizeof(*g->nodes));
	g->n--;
	/* edges to it go too */
	for (size_t i = 0; i < g->n; i++) {
		struct gnode *x = g->nodes[i];
		for (size_t k = 0; k < x->ndeps;)
			if (x->deps[k] == n)
				x->deps[k] = x->deps[--x->ndeps];
			else
				k++;
	}
	node_free(n);
	emu_unlock(&graph_lock);
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuGraphGetNodes(CUgraph h, CUgraphNode *nodes, size_t *num)
{
	emu_lock(&graph_lock);
	struct emu_graph *g = graph_get(h);
	CUresult rc = g && num ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (!rc) {
		if (nodes)
			for (size_t i = 0; i < *num && i < g->n; i++)
				nodes[i] = (CUgraphNode)g->nodes[i];
		*num = g->n;
	}
	emu_unlock(&graph_lock);
	return rc;
}

EMU_API CUresult CUDAAPI cuGraphGetEdges(CUgraph h, CUgraphNode *from, CUgraphNode *to, size_t *num)
{
	emu_lock(&graph_lock);
	struct emu_graph *g = graph_get(h);
	CUresult rc = g && num && (!from) == (!to) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	size_t k = 0;
	for (size_t i = 0; !rc && i < g->n; i++)
		for (size_t j = 0; j < g->nodes[i]->ndeps; j++, k++)
			if (from && k < *num) {
				from[k] = (CUgraphNode)g->nodes[i]->deps[j];
				to[k] = (CUgraphNode)g->nodes[i];
			}
	if (!rc)
		*num = k;
	emu_unlock(&graph_lock);
	return rc;
}

EMU_API CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode h, CUgraphNodeType *t)
{
	emu_lock(&graph_lock);
	struct gnode *n = node_get(h);
	CUresult rc = n && t ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (!rc)
		*t = n->type;
	emu_unlock(&graph_lock);
	return rc;
}

EMU_API CUresult CUDAAPI cuGraphClone(CUgraph *out, CUgraph h)
{
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	emu_lock(&graph_lock);
	struct emu_graph *g = graph_get(h);
	struct emu_graph *c = g ? graph_clone(g) : NULL;
	emu_unlock(&graph_lock);
	if (!c)
		return g ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
	*out = (CUgraph)c;
	return CUDA_SUCCESS;
}

/* A clone keeps its original's node order, so a node's index names it. */
EMU_API CUresult CUDAAPI cuGraphNodeFindInClone(CUgraphNode *out, CUgraphNode orig, CUgraph clone)
{
	emu_lock(&graph_lock);
	struct gnode *n = node_get(orig);
	struct emu_graph *c = graph_get(clone);
	size_t i = n ? node_index(n->g, n) : (size_t)-1;
	CUresult rc = out && c && i < c->n && c->nodes[i]->type == n->type ? CUDA_SUCCESS
									 : CUDA_ERROR_INVALID_VALUE;
	if (!rc)
		*out = (CUgraphNode)c->nodes[i];
	emu_unlock(&graph_lock);
	return rc;
}

/* ---------------------------------------------------- node parameters */

static CUresult node_of(CUgraphNode h, CUgraphNodeType t, struct gnode **out)
{
	struct gnode *n = node_get(h);
	if (!n || n->type != t)
		return CUDA_ERROR_INVALID_VALUE;
	*out = n;
	return CUDA_SUCCESS;
}

static CUresult exec_node(CUgraphExec hx, CUgraphNode h, CUgraphNodeType t, struct gnode **out);
static CUresult exec_twin(CUgraphExec hx, CUgraphNode h, struct gnode **out);

/* Sets node h's parameters, of type t, in its graph or (in_exec) in
 * executable hx. */
static CUresult set_node(int in_exec, CUgraphExec hx, CUgraphNode h, CUgraphNodeType t, const void *p)
{
	CUresult rc = params_check(t, p);
	if (rc)
		return rc;
	struct gnode *n;
	emu_lock(&graph_lock);
	rc = in_exec ? exec_node(hx, h, t, &n) : node_of(h, t, &n);
	if (!rc)
		rc = params_store(n, p);
	emu_unlock(&graph_lock);
	return rc;
}

/* A getter that hands out one member of a node of one type. */
#define NODE_GETTER(fn, t, ptype, member)                                              \
	EMU_API CUresult CUDAAPI fn(CUgraphNode h, ptype *p)                           \
	{                                                                              \
		struct gnode *n;                                                       \
		emu_lock(&graph_lock);                                                 \
		CUresult rc = p ? node_of(h, t, &n) : CUDA_ERROR_INVALID_VALUE;        \
		if (!rc)                                                               \
			*p = n->member;                                                \
		emu_unlock(&graph_lock);                                               \
		return rc;                                                             \
	}

NODE_GETTER(cuGraphKernelNodeGetParams_v2, CU_GRAPH_NODE_TYPE_KERNEL, CUDA_KERNEL_NODE_PARAMS, kp)
NODE_GETTER(cuGraphMemsetNodeGetParams, CU_GRAPH_NODE_TYPE_MEMSET, CUDA_MEMSET_NODE_PARAMS, ms)
NODE_GETTER(cuGraphMemcpyNodeGetParams, CU_GRAPH_NODE_TYPE_MEMCPY, CUDA_MEMCPY3D, mc)

EMU_API CUresult CUDAAPI cuGraphBatchMemOpNodeGetParams(CUgraphNode h, CUDA_BATCH_MEM_OP_NODE_PARAMS *p)
{
	struct gnode *n;
	emu_lock(&graph_lock);
	CUresult rc = p ? node_of(h, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, &n) : CUDA_ERROR_INVALID_VALUE;
	/* a captured one runs its queued operation: no array to hand out */
	if (!rc && !n->ops)
		rc = CUDA_ERROR_NOT_SUPPORTED;
	if (!rc)
		*p = n->bm;
	emu_unlock(&graph_lock);
	return rc;
}

EMU_API CUresult CUDAAPI cuGraphBatchMemOpNodeSetParams(CUgraphNode h, const CUDA_BATCH_MEM_OP_NODE_PARAMS *p)
{
	return set_node(0, NULL, h, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, p);
}

EMU_API CUresult CUDAAPI cuGraphExecBatchMemOpNodeSetParams(CUgraphExec x, CUgraphNode h,
							    const CUDA_BATCH_MEM_OP_NODE_PARAMS *p)
{
	return set_node(1, x, h, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, p);
}

EMU_API CUresult CUDAAPI cuGraphKernelNodeSetParams_v2(CUgraphNode h, const CUDA_KERNEL_NODE_PARAMS *p)
{
	return set_node(0, NULL, h, CU_GRAPH_NODE_TYPE_KERNEL, p);
}

EMU_API CUresult CUDAAPI cuGraphMemsetNodeSetParams(CUgraphNode h, const CUDA_MEMSET_NODE_PARAMS *p)
{
	return set_node(0, NULL, h, CU_GRAPH_NODE_TYPE_MEMSET, p);
}

EMU_API CUresult CUDAAPI cuGraphMemcpyNodeSetParams(CUgraphNode h, const CUDA_MEMCPY3D *p)
{
	return set_node(0, NULL, h, CU_GRAPH_NODE_TYPE_MEMCPY, p);
}

/* ------------------------------------------------------------ executables */

static struct emu_exec *exec_get(CUgraphExec h)
{
	struct emu_exec *x = (struct emu_exec *)h;
	return x && x->magic == EXEC_MAGIC ? x : NULL;
}

EMU_API CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph h, unsigned long long flags)
{
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	(void)flags; /* auto-free on launch, upload, device launch: no effect here */
	emu_lock(&graph_lock);
	struct emu_graph *g = graph_get(h);
	struct emu_graph *c = g ? graph_clone(g) : NULL;
	emu_unlock(&graph_lock);
	if (!c)
		return g ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
	/* the clone keeps the original's order until sorted: node i of the
	 * exec is node i of the graph, for the exec's node setters */
	struct emu_exec *x = calloc(1, sizeof(*x));
	if (!x) {
		graph_free(c);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	x->magic = EXEC_MAGIC;
	x->g = c;
	x->flags = flags & ~(unsigned long long)CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
	*out = (CUgraphExec)x;
	return CUDA_SUCCESS;
}

/* The upload flag shapes no executable and is not reported (the driver's
 * documentation). */
EMU_API CUresult CUDAAPI cuGraphExecGetFlags(CUgraphExec h, cuuint64_t *flags)
{
	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	emu_lock(&graph_lock);
	struct emu_exec *x = exec_get(h);
	if (x)
		*flags = x->flags;
	emu_unlock(&graph_lock);
	return x ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EMU_API CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec h)
{
	emu_lock(&graph_lock);
	struct emu_exec *x = exec_get(h);
	if (x) {
		graph_free(x->g);
		x->magic = 0;
		free(x);
	}
	emu_unlock(&graph_lock);
	return x ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Host and event nodes: their parameters set in a graph (in_exec 0) or an
 * executable, checked before anything changes. */
static CUresult set_host(int in_exec, CUgraphExec hx, CUgraphNode h, const CUDA_HOST_NODE_PARAMS *p)
{
	if (!p || !p->fn)
		return CUDA_ERROR_INVALID_VALUE;
	struct gnode *n;
	emu_lock(&graph_lock);
	CUresult rc = in_exec ? exec_node(hx, h, CU_GRAPH_NODE_TYPE_HOST, &n)
			      : node_of(h, CU_GRAPH_NODE_TYPE_HOST, &n);
	if (!rc)
		n->host = *p;
	emu_unlock(&graph_lock);
	return rc;
}

static CUresult set_event(int in_exec, CUgraphExec hx, CUgraphNode h, CUgraphNodeType t, CUevent ev)
{
	if (!ev)
		return CUDA_ERROR_INVALID_VALUE;
	struct gnode *n;
	emu_lock(&graph_lock);
	CUresult rc = in_exec ? exec_node(hx, h, t, &n) : node_of(h, t, &n);
	if (!rc)
		n->event = ev;
	emu_unlock(&graph_lock);
	return rc;
}

EMU_API CUresult CUDAAPI cuGraphHostNodeSetParams(CUgraphNode h, const CUDA_HOST_NODE_PARAMS *p)
{
	return set_host(0, NULL, h, p);
}

EMU_API CUresult CUDAAPI cuGraphExecHostNodeSetParams(CUgraphExec x, CUgraphNode h,
						      const CUDA_HOST_NODE_PARAMS *p)
{
	return set_host(1, x, h, p);
}

EMU_API CUresult CUDAAPI cuGraphEventRecordNodeSetEvent(CUgraphNode h, CUevent ev)
{
	return set_event(0, NULL, h, CU_GRAPH_NODE_TYPE_EVENT_RECORD, ev);
}

EMU_API CUresult CUDAAPI cuGraphEventWaitNodeSetEvent(CUgraphNode h, CUevent ev)
{
	return set_event(0, NULL, h, CU_GRAPH_NODE_TYPE_WAIT_EVENT, ev);
}

EMU_API CUresult CUDAAPI cuGraphExecEventRecordNodeSetEvent(CUgraphExec x, CUgraphNode h, CUevent ev)
{
	return set_event(1, x, h, CU_GRAPH_NODE_TYPE_EVENT_RECORD, ev);
}

EMU_API CUresult CUDAAPI cuGraphExecEventWaitNodeSetEvent(CUgraphExec x, CUgraphNode h, CUevent ev)
{
	return set_event(1, x, h, CU_GRAPH_NODE_TYPE_WAIT_EVENT, ev);
}

/* The executable's node for h where CUDA lets it be disabled: kernel,
 * memcpy and memset nodes (graph_lock held). */
static CUresult enable_twin(CUgraphExec hx, CUgraphNode h, struct gnode **n)
{
	CUresult rc = exec_twin(hx, h, n);
	if (!rc && (*n)->type != CU_GRAPH_NODE_TYPE_KERNEL && (*n)->type != CU_GRAPH_NODE_TYPE_MEMCPY &&
	    (*n)->type != CU_GRAPH_NODE_TYPE_MEMSET)
		rc = CUDA_ERROR_INVALID_VALUE;
	return rc;
}

EMU_API CUresult CUDAAPI cuGraphNodeSetEnabled(CUgraphExec hx, CUgraphNode h, unsigned int on)
{
	struct gnode *n;
	emu_lock(&graph_lock);
	CUresult rc = enable_twin(hx, h, &n);
	if (!rc)
		n->disabled = !on;
	emu_unlock(&graph_lock);
	return rc;
}

EMU_API CUresult CUDAAPI cuGraphNodeGetEnabled(CUgraphExec hx, CUgraphNode h, unsigned int *on)
{
	struct gnode *n;
	emu_lock(&graph_lock);
	CUresult rc = on ? enable_twin(hx, h, &n) : CUDA_ERROR_INVALID_VALUE;
	if (!rc)
		*on = !n->disabled;
	emu_unlock(&graph_lock);
	return rc;
}

/* Whether id is a kernel node attribute (cuda.h: "valid for graph
 * nodes"); none of them changes how the emulated device runs a kernel. */
static int kattr_known(CUkernelNodeAttrID id)
{
	switch (id) {
	case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
	case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
	case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
	case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
	case CU_LAUNCH_ATTRIBUTE_PRIORITY:
	case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
	case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
	case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
	case CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE:
	case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
		return 1;
	default:
		return 0;
	}
}

/* The slot of attribute id in n, or -1 (not set: reads as zero). */
static int kattr_slot(const struct gnode *n, CUkernelNodeAttrID id)
{
	for (unsigned i = 0; i < n->nkattr; i++)
		if (n->kattr[i].id == id)
			return (int)i;
	return -1;
}

EMU_API CUresult CUDAAPI cuGraphKernelNodeGetAttribute(CUgraphNode h, CUkernelNodeAttrID id,
						       CUkernelNodeAttrValue *v)
{
	struct gnode *n;
	if (!v || !kattr_known(id))
		return CUDA_ERROR_INVALID_VALUE;
	emu_lock(&graph_lock);
	CUresult rc = node_of(h, CU_GRAPH_NODE_TYPE_KERNEL, &n);
	if (!rc) {
		int k = kattr_slot(n, id);
		memset(v, 0, sizeof(*v));
		if (k >= 0)
			*v = n->kattr[k].v;
	}
	emu_unlock(&graph_lock);
	return rc;
}

EMU_API CUresult CUDAAPI cuGraphKernelNodeSetAttribute(CUgraphNode h, CUkernelNodeAttrID id,
						       const CUkernelNodeAttrValue *v)
{
	struct gnode *n;
	if (!v || !kattr_known(id))
		return CUDA_ERROR_INVALID_VALUE;
	emu_lock(&graph_lock);
	CUresult rc = node_of(h, CU_GRAPH_NODE_TYPE_KERNEL, &n);
	int k = rc ? -1 : kattr_slot(n, id);
	if (!rc && k < 0) {
		/* every known attribute has room: EMU_KATTR_MAX >= their count */
		k = (int)n->nkattr++;
		n->kattr[k].id = id;
	}
	if (!rc)
		n->kattr[k].v = *v;
	emu_unlock(&graph_lock);
	return rc;
}

EMU_API CUresult CUDAAPI cuGraphKernelNodeCopyAttributes(CUgraphNode dst, CUgraphNode src)
{
	struct gnode *d, *s;
	emu_lock(&graph_lock);
	CUresult rc = node_of(dst, CU_GRAPH_NODE_TYPE_KERNEL, &d);
	if (!rc)
		rc = node_of(src, CU_GRAPH_NODE_TYPE_KERNEL, &s);
	if (!rc && d != s) {
		memcpy(d->kattr, s->kattr, sizeof(d->kattr));
		d->nkattr = s->nkattr;
	}
	emu_unlock(&graph_lock);
	return rc;
}

/* Whether a node's dependencies (by index in their graphs) are the same
 * set in a (of graph ga) and b (of gb). */
static int same_deps(const struct emu_graph *ga, const struct gnode *a, const struct emu_graph *gb,
		     const struct gnode *b)
{
	if (a->ndeps != b->ndeps)
		return 0;
	for (size_t i = 0; i < a->ndeps; i++) {
		size_t ia = node_index(ga, a->deps[i]), k;
		for (k = 0; k < b->ndeps && node_index(gb, b->deps[k]) != ia; k++)
			;
		if (k == b->ndeps)
			return 0;
	}
	return 1;
}

/* How graph a differs from b in what an executable update may not change:
 * node count, each node's type and dependencies, in insertion order, and
 * recursively the same in child graphs (CUDA's rule for cuGraphExecUpdate
 * and cuGraphExecChildGraphNodeSetParams).  *bad: a's node at fault. */
static CUgraphExecUpdateResult topology_diff(const struct emu_graph *a, const struct emu_graph *b,
					     const struct gnode **bad)
{
	*bad = NULL;
	if (a->n != b->n)
		return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
	for (size_t i = 0; i < a->n; i++) {
		const struct gnode *x = a->nodes[i], *y = b->nodes[i];
		const struct gnode *inner;
		*bad = x;
		if (x->type != y->type)
			return CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
		if (!same_deps(a, x, b, y))
			return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
		if (x->child && y->child && topology_diff(x->child, y->child, &inner))
			return CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
	}
	*bad = NULL;
	return CU_GRAPH_EXEC_UPDATE_SUCCESS;
}

/* Node i of the graph as the exec has it. */
static CUresult exec_twin(CUgraphExec hx, CUgraphNode h, struct gnode **out)
{
	struct emu_exec *x = exec_get(hx);
	struct gnode *n = node_get(h);
	if (!x || !n)
		return CUDA_ERROR_INVALID_VALUE;
	size_t i = node_index(n->g, n);
	if (i >= x->g->n || x->g->nodes[i]->type != n->type)
		return CUDA_ERROR_INVALID_VALUE;
	*out = x->g->nodes[i];
	return CUDA_SUCCESS;
}

static CUresult exec_node(CUgraphExec hx, CUgraphNode h, CUgraphNodeType t, struct gnode **out)
{
	CUresult rc = exec_twin(hx, h, out);
	return rc ? rc : (*out)->type == t ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EMU_API CUresult CUDAAPI cuGraphExecKernelNodeSetParams_v2(CUgraphExec x, CUgraphNode h,
							   const CUDA_KERNEL_NODE_PARAMS *p)
{
	return set_node(1, x, h, CU_GRAPH_NODE_TYPE_KERNEL, p);
}

EMU_API CUresult CUDAAPI cuGraphExecMemsetNodeSetParams(CUgraphExec x, CUgraphNode h,
							const CUDA_MEMSET_NODE_PARAMS *p, CUcontext ctx)
{
	(void)ctx;
	return set_node(1, x, h, CU_GRAPH_NODE_TYPE_MEMSET, p);
}

/* The executable's child graph becomes a copy of child, whose nodes must
 * be as many and of the same types as the one there (CUDA's "the
 * topology must not change"). */
EMU_API CUresult CUDAAPI cuGraphExecChildGraphNodeSetParams(CUgraphExec hx, CUgraphNode h,
							    CUgraph child)
{
	emu_lock(&graph_lock);
	struct gnode *n;
	struct emu_graph *c = graph_get(child), *copy = NULL;
	const struct gnode *bad = NULL;
	CUresult rc = exec_node(hx, h, CU_GRAPH_NODE_TYPE_GRAPH, &n);
	if (!rc && (!c || !n->child))
		rc = CUDA_ERROR_INVALID_VALUE;
	/* another topology: refused as cuGraphExecUpdate refuses one */
	if (!rc && topology_diff(c, n->child, &bad) != CU_GRAPH_EXEC_UPDATE_SUCCESS)
		rc = CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
	if (!rc && !(copy = graph_clone(c)))
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	if (!rc) {
		copy->owned = 1;
		graph_free(n->child);
		n->child = copy;
	}
	emu_unlock(&graph_lock);
	return rc;
}

EMU_API CUresult CUDAAPI cuGraphExecMemcpyNodeSetParams(CUgraphExec x, CUgraphNode h,
							const CUDA_MEMCPY3D *p, CUcontext ctx)
{
	(void)ctx;
	return set_node(1, x, h, CU_GRAPH_NODE_TYPE_MEMCPY, p);
}

/* Same nodes (count, types, order) and edges: the new parameters are
 * taken; anything else is a changed topology, as CUDA reports it.  (The
 * executable's nodes stay enabled or disabled as they were: the update
 * takes parameters, not that state.) */
EMU_API CUresult CUDAAPI cuGraphExecUpdate_v2(CUgraphExec hx, CUgraph h, CUgraphExecUpdateResultInfo *info)
{
	emu_lock(&graph_lock);
	struct emu_exec *x = exec_get(hx);
	struct emu_graph *g = graph_get(h);
	if (!x || !g || !info) {
		emu_unlock(&graph_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	memset(info, 0, sizeof(*info));
	const struct gnode *bad = NULL;
	CUgraphExecUpdateResult res = topology_diff(g, x->g, &bad);
	info->errorNode = (CUgraphNode)bad;
	struct emu_graph *c = res ? NULL : graph_clone(g);
	if (!res && !c) {
		emu_unlock(&graph_lock);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	info->result = res;
	if (c) {
		/* same nodes in the same order: node i keeps its state */
		for (size_t i = 0; i < c->n; i++)
			c->nodes[i]->disabled = x->g->nodes[i]->disabled;
		graph_free(x->g);
		x->g = c;
	}
	emu_unlock(&graph_lock);
	return res ? CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE : CUDA_SUCCESS;
}

static CUresult run_memset(const CUDA_MEMSET_NODE_PARAMS *p, CUstream s)
{
	for (size_t y = 0; y < p->height; y++) {
		CUdeviceptr d = p->dst + y * p->pitch;
		CUresult rc = p->elementSize == 1 ? cuMemsetD8Async(d, (unsigned char)p->value, p->width, s)
			    : p->elementSize == 2 ? cuMemsetD16Async(d, (unsigned short)p->value, p->width, s)
						  : cuMemsetD32Async(d, p->value, p->width, s);
		if (rc)
			return rc;
	}
	return CUDA_SUCCESS;
}

static int is_host(CUmemorytype t) { return t == CU_MEMORYTYPE_HOST; }

static CUresult run_memcpy(const CUDA_MEMCPY3D *p, CUstream s)
{
	size_t sp = p->srcPitch ? p->srcPitch : p->WidthInBytes;
	size_t dp = p->dstPitch ? p->dstPitch : p->WidthInBytes;
	size_t sh = p->srcHeight ? p->srcHeight : p->Height;
	size_t dh = p->dstHeight ? p->dstHeight : p->Height;
	size_t depth = p->Depth ? p->Depth : 1, height = p->Height ? p->Height : 1;
	for (size_t z = 0; z < depth; z++)
		for (size_t y = 0; y < height; y++) {
			size_t so = p->srcXInBytes + (p->srcY + y + (p->srcZ + z) * sh) * sp;
			size_t doff = p->dstXInBytes + (p->dstY + y + (p->dstZ + z) * dh) * dp;
			CUresult rc;
			if (is_host(p->srcMemoryType) && is_host(p->dstMemoryType))
				return CUDA_ERROR_NOT_SUPPORTED;
			if (is_host(p->srcMemoryType))
				rc = cuMemcpyHtoDAsync_v2((p->dstDevice ? p->dstDevice : (CUdeviceptr)p->dstHost) + doff,
							  (const char *)p->srcHost + so, p->WidthInBytes, s);
			else if (is_host(p->dstMemoryType))
				rc = cuMemcpyDtoHAsync_v2((char *)p->dstHost + doff,
							  (p->srcDevice ? p->srcDevice : (CUdeviceptr)p->srcHost) + so,
							  p->WidthInBytes, s);
			else
				rc = cuMemcpyDtoDAsync_v2((p->dstDevice ? p->dstDevice : (CUdeviceptr)p->dstHost) + doff,
							  (p->srcDevice ? p->srcDevice : (CUdeviceptr)p->srcHost) + so,
							  p->WidthInBytes, s);
			if (rc)
				return rc;
		}
	return CUDA_SUCCESS;
}

static CUresult run_op(const struct emu_op *tmpl, CUstream h)
{
	struct emu_ctx *ctx;
	CUresult rc = emu_ctx_enter(&ctx);
	if (rc)
		return rc;
	struct emu_op *op = op_clone(tmpl);
	if (!op) {
		emu_ctx_leave(ctx);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	emu_lock(&ctx->lock);
	struct emu_stream *s = emu_stream_find(ctx, h);
	if (!s) {
		emu_op_free(ctx, op);
		rc = CUDA_ERROR_INVALID_HANDLE;
	} else {
		rc = emu_stream_enqueue(ctx, s, op);
	}
	emu_ctx_unlock_leave(ctx);
	return rc;
}

static CUresult run_graph(const struct emu_graph *g, CUstream s);

static CUresult run_node(const struct gnode *n, CUstream s)
{
	if (n->disabled)
		return CUDA_SUCCESS;
	/* captured work: the queued operation again */
	if (n->op)
		return run_op(n->op, s);
	switch (n->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL: {
		size_t size = n->argsize;
		void *extra[] = { CU_LAUNCH_PARAM_BUFFER_POINTER, n->args, CU_LAUNCH_PARAM_BUFFER_SIZE,
				  &size, CU_LAUNCH_PARAM_END };
		return cuLaunchKernel(n->kp.func, n->kp.gridDimX, n->kp.gridDimY, n->kp.gridDimZ,
				      n->kp.blockDimX, n->kp.blockDimY, n->kp.blockDimZ, n->kp.sharedMemBytes,
				      s, NULL, extra);
	}
	case CU_GRAPH_NODE_TYPE_MEMSET:
		return run_memset(&n->ms, s);
	case CU_GRAPH_NODE_TYPE_MEMCPY:
		return run_memcpy(&n->mc, s);
	case CU_GRAPH_NODE_TYPE_HOST:
		return cuLaunchHostFunc(s, n->host.fn, n->host.userData);
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
		return cuEventRecord(n->event, s);
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
		return cuStreamWaitEvent(s, n->event, 0);
	case CU_GRAPH_NODE_TYPE_GRAPH:
		return run_graph(n->child, s);
	case CU_GRAPH_NODE_TYPE_CONDITIONAL: {
		struct condh *c = (struct condh *)(uintptr_t)n->cond;
		if (c->flags & CU_GRAPH_COND_ASSIGN_DEFAULT)
			c->value = c->def;
		if (n->cond_type == CU_GRAPH_COND_TYPE_IF)
			return c->value ? run_graph(n->bodies[0], s) : CUDA_SUCCESS;
		if (n->cond_type == CU_GRAPH_COND_TYPE_SWITCH)
			return c->value < n->cond_size ? run_graph(n->bodies[c->value], s) : CUDA_SUCCESS;
		/* WHILE: nothing here can clear the value once set */
		return c->value ? CUDA_ERROR_NOT_SUPPORTED : CUDA_SUCCESS;
	}
	case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
		return n->bm.count ? emu_memop_batch(s, n->bm.count, n->ops, n->bm.flags) : CUDA_SUCCESS;
	case CU_GRAPH_NODE_TYPE_EMPTY:
	case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
	case CU_GRAPH_NODE_TYPE_MEM_FREE:
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_NOT_SUPPORTED;
	}
}

static CUresult run_graph(const struct emu_graph *g, CUstream s)
{
	for (size_t i = 0; i < g->n; i++) {
		CUresult rc = run_node(g->nodes[i], s);
		if (rc)
			return rc;
	}
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuGraphLaunch(CUgraphExec hx, CUstream s)
{
	emu_lock(&graph_lock);
	struct emu_exec *x = exec_get(hx);
	if (!x) {
		emu_unlock(&graph_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	/* a sorted copy: the exec keeps the graph's order for its setters */
	struct emu_graph *c = graph_clone(x->g);
	CUresult rc = c ? topo_sort(c) : CUDA_ERROR_OUT_OF_MEMORY;
	emu_unlock(&graph_lock);
	if (!rc)
		rc = run_graph(c, s);
	emu_lock(&graph_lock);
	graph_free(c);
	emu_unlock(&graph_lock);
	return rc;
}

EMU_API CUresult CUDAAPI cuGraphUpload(CUgraphExec hx, CUstream s)
{
	(void)s;
	return exec_get(hx) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EMU_API CUresult CUDAAPI cuDeviceGraphMemTrim(CUdevice dev)
{
	return dev >= 0 && dev < emu_ndevices ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

/* ---------------------------------------------------------------- capture */

struct capture {
	struct capture *next;
	struct emu_stream *s;
	struct emu_graph *g;
	struct gnode *last;
	uint64_t id;
	int failed;
	int fresh;  /* its graph was made for it (not cuStreamBeginCaptureToGraph's) */
	int joined; /* a stream that joined another's capture (same id and graph) */
	CUstreamCaptureMode mode;
	pthread_t thread; /* the thread that began it */
};

static struct capture *captures;
static uint64_t next_capture_id = 1;

/* The calling thread's mode (cuThreadExchangeStreamCaptureMode): which
 * captures make an unsafe call of this thread fail. */
static __thread CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

EMU_API CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
	if (!mode || *mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	CUstreamCaptureMode old = thread_mode;
	thread_mode = *mode;
	*mode = old;
	return CUDA_SUCCESS;
}

/* As CUDA does for a potentially unsafe call (an allocation) during a
 * capture: unless this thread is relaxed, its own capture (begun other
 * than relaxed) and, in global mode, any other thread's global capture
 * make the call fail and are invalidated. */
CUresult emu_capture_unsafe(void)
{
	if (thread_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_SUCCESS;
	int hit = 0;
	pthread_t me = pthread_self();
	emu_lock(&graph_lock);
	for (struct capture *c = captures; c; c = c->next) {
		if (c->mode == CU_STREAM_CAPTURE_MODE_RELAXED)
			continue;
		if (pthread_equal(c->thread, me) ||
		    (thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL && c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
			c->failed = 1;
			hit = 1;
		}
	}
	emu_unlock(&graph_lock);
	return hit ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

static struct capture *capture_of(const struct emu_stream *s)
{
	for (struct capture *c = captures; c; c = c->next)
		if (c->s == s)
			return c;
	return NULL;
}

int emu_capture_join(struct emu_stream *s, struct emu_event *ev)
{
	if (!ev->cap_id)
		return 0;
	emu_lock(&graph_lock);
	struct capture *o = NULL;
	for (struct capture *c = captures; c; c = c->next)
		if (c->id == ev->cap_id && !c->joined)
			o = c;
	struct capture *j = o && !capture_of(s) ? calloc(1, sizeof(*j)) : NULL;
	if (j) {
		*j = *o;
		j->s = s;
		j->last = ev->cap_last;
		j->joined = 1;
		j->fresh = 0;
		j->next = captures;
		captures = j;
	}
	emu_unlock(&graph_lock);
	return j != NULL;
}

int emu_capture_implicit(struct emu_ctx *ctx)
{
	int hit = 0;
	emu_lock(&graph_lock);
	for (struct capture *c = captures; c; c = c->next)
		if (c->s->ctx == ctx && !(c->s->flags & CU_STREAM_NON_BLOCKING)) {
			c->failed = 1;
			hit = 1;
		}
	emu_unlock(&graph_lock);
	return hit;
}

int emu_capture_in_ctx(struct emu_ctx *ctx)
{
	int hit = 0;
	emu_lock(&graph_lock);
	for (struct capture *c = captures; c; c = c->next)
		if (c->s->ctx == ctx) {
			c->failed = 1;
			hit = 1;
		}
	emu_unlock(&graph_lock);
	return hit;
}

/* emu_stream_enqueue's first step: while s is capturing, op becomes a node
 * of the capture's graph (taken) instead of running.  Returns 1 if taken
 * (*rc the result), 0 if s is not capturing.  Caller holds ctx->lock. */
int emu_capture_take(struct emu_stream *s, struct emu_op *op, CUresult *rc)
{
	emu_lock(&graph_lock);
	struct capture *c = captures ? capture_of(s) : NULL;
	if (!c) {
		emu_unlock(&graph_lock);
		return 0;
	}
	if (op->kind == EMU_OP_RECORD || op->kind == EMU_OP_WAIT) {
		/* as in CUDA, an event recorded or waited for in a capture is no
		 * node (a stream that waits for it joins the capture) */
		if (op->kind == EMU_OP_RECORD) {
			op->event->recorded--; /* the record did not happen */
			op->event->cap_id = c->id;
			op->event->cap_last = c->last;
		}
		emu_unlock(&graph_lock);
		emu_op_free(s->ctx, op); /* ctx->lock held: drops the event's count */
		*rc = CUDA_SUCCESS;
		return 1;
	}
	struct gnode *n = node_new(CU_GRAPH_NODE_TYPE_EMPTY);
	CUgraphNode dep = (CUgraphNode)c->last;
	*rc = n ? node_add(c->g, n, dep ? &dep : NULL, dep ? 1 : 0) : CUDA_ERROR_OUT_OF_MEMORY;
	if (*rc) {
		free(n);
		c->failed = 1;
		emu_unlock(&graph_lock);
		emu_op_free(s->ctx, op);
		return 1;
	}
	c->last = n;
	switch (op->kind) {
	case EMU_OP_LAUNCH: n->type = CU_GRAPH_NODE_TYPE_KERNEL; break;
	case EMU_OP_MEMSET: n->type = CU_GRAPH_NODE_TYPE_MEMSET; break;
	case EMU_OP_HOST: n->type = CU_GRAPH_NODE_TYPE_HOST; break;
	case EMU_OP_WRITE_VALUE:
	case EMU_OP_WAIT_VALUE: n->type = CU_GRAPH_NODE_TYPE_BATCH_MEM_OP; break;
	default: n->type = CU_GRAPH_NODE_TYPE_MEMCPY; break;
	}
	/* captured nodes run their template, whatever their type says */
	n->op = op;
	emu_unlock(&graph_lock);
	return 1;
}

int emu_capture_mem(CUstream h, size_t bytes, CUdeviceptr *dptr, CUresult *rc)
{
	struct emu_ctx *ctx;
	if (!h || emu_ctx_enter(&ctx) != CUDA_SUCCESS)
		return 0;
	emu_lock(&ctx->lock);
	emu_lock(&graph_lock);
	struct emu_stream *s = emu_stream_find(ctx, h);
	struct capture *c = s && captures ? capture_of(s) : NULL;
	emu_unlock(&graph_lock);
	emu_unlock(&ctx->lock);
	if (!c) {
		emu_ctx_leave(ctx);
		return 0;
	}
	/* the memory of an alloc node is the graph's from now on (as in
	 * CUDA, its address is fixed when the node is made) */
	CUdeviceptr d = *dptr;
	*rc = bytes ? emu_mem_alloc(ctx, bytes, 1, &d) : CUDA_SUCCESS;
	if (bytes && !*rc)
		emu_mem_set_graph(ctx, d);
	emu_ctx_leave(ctx);
	if (*rc)
		return 1;
	struct gnode *n = node_new(bytes ? CU_GRAPH_NODE_TYPE_MEM_ALLOC : CU_GRAPH_NODE_TYPE_MEM_FREE);
	emu_lock(&ctx->lock);
	emu_lock(&graph_lock);
	/* the capture may have ended meanwhile: then the node has no home */
	struct capture *c2 = captures ? capture_of(s) : NULL;
	CUgraphNode dep = c2 ? (CUgraphNode)c2->last : NULL;
	*rc = !n ? CUDA_ERROR_OUT_OF_MEMORY : c2 != c ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
		  : node_add(c->g, n, dep ? &dep : NULL, dep ? 1 : 0);
	if (!*rc) {
		n->dptr = d;
		n->bytesize = bytes;
		c->last = n;
		*dptr = d;
	}
	emu_unlock(&graph_lock);
	emu_unlock(&ctx->lock);
	if (*rc)
		free(n);
	return 1;
}

/* A capture of h into graph `into` after node `after` (both may be NULL:
 * a new graph). */
static CUresult begin(CUstream h, CUstreamCaptureMode mode, struct emu_graph *into, struct gnode *after)
{
	if (mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	if (!h || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	struct emu_ctx *ctx;
	CUresult rc = emu_ctx_enter(&ctx);
	if (rc)
		return rc;
	struct capture *c = calloc(1, sizeof(*c));
	struct emu_graph *g = into ? into : graph_new();
	emu_lock(&ctx->lock);
	emu_lock(&graph_lock);
	struct emu_stream *s = emu_stream_find(ctx, h);
	if (!s)
		rc = CUDA_ERROR_INVALID_HANDLE;
	else if (capture_of(s))
		rc = CUDA_ERROR_ILLEGAL_STATE;
	else if (!c || !g)
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	if (!rc) {
		c->s = s;
		c->g = g;
		c->last = after;
		c->fresh = !into;
		c->mode = mode;
		c->thread = pthread_self();
		c->id = next_capture_id++;
		c->next = captures;
		captures = c;
	}
	emu_unlock(&graph_lock);
	emu_unlock(&ctx->lock);
	if (rc) {
		free(c);
		if (!into)
			free(g);
	}
	emu_ctx_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode mode)
{
	return begin(h, mode, NULL, NULL);
}

/* Into an existing graph, after at most one node (one dependency is all
 * a capture here tracks). */
EMU_API CUresult CUDAAPI cuStreamBeginCaptureToGraph(CUstream h, CUgraph hg, const CUgraphNode *deps,
						     const CUgraphEdgeData *ed, size_t n, CUstreamCaptureMode mode)
{
	if (ed || n > 1 || (n && !deps))
		return n > 1 || ed ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_VALUE;
	emu_lock(&graph_lock);
	struct emu_graph *g = graph_get(hg);
	struct gnode *d = n ? node_get(deps[0]) : NULL;
	int ok = g && (!n || (d && d->g == g));
	emu_unlock(&graph_lock);
	return ok ? begin(h, mode, g, d) : CUDA_ERROR_INVALID_VALUE;
}

EMU_API CUresult CUDAAPI cuStreamEndCapture(CUstream h, CUgraph *out)
{
	struct emu_ctx *ctx;
	CUresult rc = emu_ctx_enter_locked(&ctx);
	if (rc)
		return rc;
	emu_lock(&graph_lock);
	struct emu_stream *s = emu_stream_find(ctx, h);
	struct capture *c = s ? capture_of(s) : NULL;
	if (!c) {
		rc = s ? CUDA_ERROR_ILLEGAL_STATE : CUDA_ERROR_INVALID_HANDLE;
	} else if (c->joined) {
		/* (it ends where it began): refused, and, as CUDA does, the
		 * capture is invalidated */
		for (struct capture *x = captures; x; x = x->next)
			if (x->id == c->id)
				x->failed = 1;
		rc = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
	} else if (!out && c->fresh) {
		/* (into an existing graph, the caller may leave out where it goes) */
		rc = CUDA_ERROR_INVALID_VALUE;
	} else {
		for (struct capture **pp = &captures; *pp;) {
			struct capture *x = *pp;
			if (x == c) {
				*pp = x->next;
			} else if (x->joined && x->id == c->id) {
				/* the streams that joined it leave it */
				c->failed |= x->failed;
				*pp = x->next;
				free(x);
			} else {
				pp = &x->next;
			}
		}
		if (c->failed) {
			if (c->fresh)
				graph_free(c->g);
			rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
		} else if (out) {
			*out = (CUgraph)c->g;
		}
		free(c);
	}
	emu_unlock(&graph_lock);
	emu_ctx_unlock_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus *st)
{
	if (!st)
		return CUDA_ERROR_INVALID_VALUE;
	struct emu_ctx *ctx;
	CUresult rc = emu_ctx_enter_locked(&ctx);
	if (rc)
		return rc;
	emu_lock(&graph_lock);
	struct emu_stream *s = emu_stream_find(ctx, h);
	struct capture *c = s ? capture_of(s) : NULL;
	if (!s)
		rc = CUDA_ERROR_INVALID_HANDLE;
	else
		*st = c ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
	emu_unlock(&graph_lock);
	emu_ctx_unlock_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id,
						   CUgraph *graph, const CUgraphNode **deps,
						   const CUgraphEdgeData **edges, size_t *ndeps)
{
	if (!st)
		return CUDA_ERROR_INVALID_VALUE;
	struct emu_ctx *ctx;
	CUresult rc = emu_ctx_enter_locked(&ctx);
	if (rc)
		return rc;
	emu_lock(&graph_lock);
	struct emu_stream *s = emu_stream_find(ctx, h);
	struct capture *c = s ? capture_of(s) : NULL;
	if (!s) {
		rc = CUDA_ERROR_INVALID_HANDLE;
	} else {
		*st = c ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
		if (id)
			*id = c ? c->id : 0;
		if (graph)
			*graph = c ? (CUgraph)c->g : NULL;
		/* the last captured node is what new work depends on */
		if (deps)
			*deps = c && c->last ? (const CUgraphNode *)&c->last : NULL;
		if (edges)
			*edges = NULL;
		if (ndeps)
			*ndeps = c && c->last ? 1 : 0;
	}
	emu_unlock(&graph_lock);
	emu_ctx_unlock_leave(ctx);
	return rc;
}

/* Nodes added to the capture's graph by hand become what the stream's next
 * work depends on (only the "set" form, one dependency, is emulated). */
EMU_API CUresult CUDAAPI cuStreamUpdateCaptureDependencies_v2(CUstream h, CUgraphNode *deps,
							      const CUgraphEdgeData *edges, size_t n,
							      unsigned int flags)
{
	if (edges || n > 1 || flags != CU_STREAM_SET_CAPTURE_DEPENDENCIES)
		return CUDA_ERROR_NOT_SUPPORTED;
	struct emu_ctx *ctx;
	CUresult rc = emu_ctx_enter_locked(&ctx);
	if (rc)
		return rc;
	emu_lock(&graph_lock);
	struct emu_stream *s = emu_stream_find(ctx, h);
	struct capture *c = s ? capture_of(s) : NULL;
	struct gnode *d = n ? node_get(deps[0]) : NULL;
	if (!c || (n && (!d || d->g != c->g)))
		rc = c ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_ILLEGAL_STATE;
	else
		c->last = d;
	emu_unlock(&graph_lock);
	emu_ctx_unlock_leave(ctx);
	return rc;
}

