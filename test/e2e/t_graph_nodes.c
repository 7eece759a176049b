/* Explicit graphs, built node by node:
 *  - memset -> kernel -> kernel -> host -> memcpy -> event record, plus an
 *    independent kernel: node count, edges, roots, dependencies and types
 *    read back; launched twice, each node ran once per launch in order;
 *  - kernel parameters: read back; set on the graph (an executable keeps
 *    the old ones), set on the executable, and taken by an exec update
 *    from a clone; an update with a changed topology fails as such;
 *  - a child graph node; memory alloc/free nodes; a conditional IF node
 *    taking its default value; a capture into an existing graph after one
 *    of its nodes; destroying a node; the dot print;
 *  - a programmatic edge (edge data) between two kernel nodes;
 *  - setters and queries: nodes disabled and enabled in an executable,
 *    its instantiation flags, host and event nodes given new functions
 *    and events (graph, executable, generic setter), kernel node
 *    attributes, a child graph node's graph, cuGraphNodeSetParams and
 *    cuGraphExecNodeSetParams on a memset node.
 * Exits non-zero on any mismatch. */
#include "common.h"

#include <unistd.h>

static int host_runs;

static void CUDA_CB on_host(void *p)
{
	(void)p;
	__atomic_add_fetch(&host_runs, 1, __ATOMIC_SEQ_CST);
}

static CUDA_MEMSET_NODE_PARAMS msparams(CUdeviceptr d, unsigned v, size_t n)
{
	CUDA_MEMSET_NODE_PARAMS m;
	memset(&m, 0, sizeof(m));
	m.dst = d;
	m.value = v;
	m.elementSize = 4;
	m.width = n;
	m.height = 1;
	return m;
}

static void expect_all(CUdeviceptr d, int n, int want, const char *what)
{
	int *h = xmalloc((size_t)n * sizeof(int));
	CK(cuMemcpyDtoH(h, d, (size_t)n * sizeof(int)));
	for (int i = 0; i < n; i++)
		if (h[i] != want)
			fail("%s: [%d] = %d, want %d", what, i, h[i], want);
	free(h);
}

static int contains(CUgraphNode *v, size_t n, CUgraphNode x)
{
	for (size_t i = 0; i < n; i++)
		if (v[i] == x)
			return 1;
	return 0;
}

/* Host functions of the setters' part: which one ran, with what. */
static int runs_a, runs_b;
static void *last_arg;

static void CUDA_CB host_a(void *p)
{
	__atomic_add_fetch(&runs_a, 1, __ATOMIC_SEQ_CST);
	__atomic_store_n(&last_arg, p, __ATOMIC_SEQ_CST);
}

static void CUDA_CB host_b(void *p)
{
	__atomic_add_fetch(&runs_b, 1, __ATOMIC_SEQ_CST);
	__atomic_store_n(&last_arg, p, __ATOMIC_SEQ_CST);
}

static void launch_sync(CUgraphExec x, CUstream s)
{
	CK(cuGraphLaunch(x, s));
	CK(cuStreamSynchronize(s));
}

/* A disabled kernel or memset node writes nothing on the next launch and
 * writes again once enabled; host nodes cannot be disabled.  The flags an
 * executable was made with read back. */
static void t_enabled(CUcontext ctx, CUfunction fill, CUdeviceptr f, CUdeviceptr g, int n, CUstream s)
{
	CUgraph EG;
	CUgraphNode k1, m1, h1;
	CUgraphExec ex;
	unsigned v21 = 21;
	unsigned long long n64 = (unsigned long long)n;
	void *a[] = { &f, &v21, &n64 };
	CUDA_KERNEL_NODE_PARAMS k = kparams(fill, (unsigned)n, a);
	CUDA_MEMSET_NODE_PARAMS ms = msparams(g, 22, (size_t)n);
	CUDA_HOST_NODE_PARAMS hp = { host_a, NULL };
	CK(cuGraphCreate(&EG, 0));
	CK(cuGraphAddKernelNode(&k1, EG, NULL, 0, &k));
	CK(cuGraphAddMemsetNode(&m1, EG, &k1, 1, &ms, ctx));
	CK(cuGraphAddHostNode(&h1, EG, &m1, 1, &hp));
	CK(cuGraphInstantiateWithFlags(&ex, EG, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH));
	cuuint64_t fl = 99;
	CK(cuGraphExecGetFlags(ex, &fl));
	CHECK(fl == CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH, "flags read back %llu",
	      (unsigned long long)fl);
	unsigned en = 7;
	CK(cuGraphNodeGetEnabled(ex, k1, &en));
	CHECK(en == 1, "a new executable's kernel node enabled: %u", en);
	EXPECT_RC(cuGraphNodeGetEnabled(ex, h1, &en), CUDA_ERROR_INVALID_VALUE);
	EXPECT_RC(cuGraphNodeSetEnabled(ex, h1, 0), CUDA_ERROR_INVALID_VALUE);
	CK(cuMemsetD32Async(f, 0, (size_t)n, s));
	CK(cuMemsetD32Async(g, 0, (size_t)n, s));
	CK(cuGraphNodeSetEnabled(ex, k1, 0));
	CK(cuGraphNodeSetEnabled(ex, m1, 0));
	CK(cuGraphNodeGetEnabled(ex, m1, &en));
	CHECK(en == 0, "a disabled memset node reads enabled: %u", en);
	int before = runs_a;
	launch_sync(ex, s);
	expect_all(f, n, 0, "a disabled kernel node");
	expect_all(g, n, 0, "a disabled memset node");
	CHECK(runs_a == before + 1, "the host node after disabled nodes ran %d times", runs_a - before);
	CK(cuGraphNodeSetEnabled(ex, k1, 1));
	launch_sync(ex, s);
	expect_all(f, n, 21, "a kernel node enabled again");
	expect_all(g, n, 0, "a memset node still disabled");
	CK(cuGraphNodeSetEnabled(ex, m1, 1));
	launch_sync(ex, s);
	expect_all(g, n, 22, "a memset node enabled again");
	/* the graph's nodes are not the executable's: another executable
	 * has them enabled */
	CUgraphExec ex2;
	CK(cuGraphNodeSetEnabled(ex, k1, 0));
	CK(cuGraphInstantiate(&ex2, EG, 0));
	CK(cuGraphNodeGetEnabled(ex2, k1, &en));
	CHECK(en == 1, "disabled in one executable, disabled in another");
	CK(cuGraphExecGetFlags(ex2, &fl));
	CHECK(fl == 0, "flags of an executable made with none: %llu", (unsigned long long)fl);
	CK(cuGraphExecDestroy(ex2));
	/* with parameters: the upload flag is not reported */
	CUDA_GRAPH_INSTANTIATE_PARAMS ip;
	memset(&ip, 0, sizeof(ip));
	ip.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
	ip.hUploadStream = s;
	CK(cuGraphInstantiateWithParams(&ex2, EG, &ip));
	CK(cuGraphExecGetFlags(ex2, &fl));
	/* (the H200's driver, 580.159, reports 0 here, not the priority flag) */
	CHECK(!(fl & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD), "flags with upload: %llu", (unsigned long long)fl);
	CHECK(!(fl & ~(unsigned long long)CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY),
	      "flags with upload: %llu, more than were given", (unsigned long long)fl);
	CK(cuStreamSynchronize(s));
	CK(cuGraphExecDestroy(ex2));
	/* the flags of instantiation, as given */
	CK(cuGraphInstantiateWithFlags(&ex2, EG, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH));
	CK(cuGraphExecGetFlags(ex2, &fl));
	CHECK(fl == CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH, "flags with auto-free: %llu",
	      (unsigned long long)fl);
	CK(cuGraphExecDestroy(ex2));
	CK(cuGraphExecDestroy(ex));
	CK(cuGraphDestroy(EG));
	say("node enabled/disabled in an executable; executable flags");
}

/* A host node's new function is what runs: set in the graph (the
 * executables made after take it, one made before keeps the old), set
 * in an executable, and through cuGraphExecNodeSetParams. */
static void t_host_set(CUstream s)
{
	CUgraph HG;
	CUgraphNode hn;
	CUgraphExec old_x, new_x;
	int ta, tb, tc;
	CUDA_HOST_NODE_PARAMS hp = { host_a, &ta }, got;
	CK(cuGraphCreate(&HG, 0));
	CK(cuGraphAddHostNode(&hn, HG, NULL, 0, &hp));
	CK(cuGraphInstantiate(&old_x, HG, 0));
	hp.fn = host_b;
	hp.userData = &tb;
	CK(cuGraphHostNodeSetParams(hn, &hp));
	CK(cuGraphHostNodeGetParams(hn, &got));
	CHECK(got.fn == host_b && got.userData == &tb, "host node parameters read back wrong");
	CK(cuGraphInstantiate(&new_x, HG, 0));
	int a0 = runs_a, b0 = runs_b;
	launch_sync(new_x, s);
	CHECK(runs_b == b0 + 1 && runs_a == a0 && last_arg == &tb,
	      "after the graph's set: a %d, b %d runs", runs_a - a0, runs_b - b0);
	launch_sync(old_x, s);
	CHECK(runs_a == a0 + 1 && last_arg == &ta, "an executable made before the set ran another function");
	hp.fn = host_b;
	hp.userData = &tc;
	CK(cuGraphExecHostNodeSetParams(old_x, hn, &hp));
	launch_sync(old_x, s);
	CHECK(runs_b == b0 + 2 && runs_a == a0 + 1 && last_arg == &tc, "after the executable's set: a %d, b %d",
	      runs_a - a0, runs_b - b0);
	CK(cuGraphHostNodeGetParams(hn, &got));
	CHECK(got.userData == &tb, "an executable's set changed the graph's node");
	CUgraphNodeParams np;
	memset(&np, 0, sizeof(np));
	np.type = CU_GRAPH_NODE_TYPE_HOST;
	np.host.fn = host_a;
	np.host.userData = &tc;
	CK(cuGraphExecNodeSetParams(new_x, hn, &np));
	launch_sync(new_x, s);
	CHECK(runs_a == a0 + 2 && last_arg == &tc, "host function by cuGraphExecNodeSetParams: a %d",
	      runs_a - a0);
	EXPECT_RC(cuGraphExecHostNodeSetParams(NULL, hn, &hp), CUDA_ERROR_INVALID_VALUE);
	CK(cuGraphExecDestroy(old_x));
	CK(cuGraphExecDestroy(new_x));
	CK(cuGraphDestroy(HG));
	say("host node parameters: graph, executable, generic setter");
}

/* Whether ev was recorded: elapsed time from start needs both recorded. */
static int recorded(CUevent start, CUevent ev)
{
	float ms;
	CUresult rc = cuEventElapsedTime(&ms, start, ev);
	if (rc != CUDA_SUCCESS && rc != CUDA_ERROR_INVALID_HANDLE)
		fail("cuEventElapsedTime: %s", cu_name(rc));
	return rc == CUDA_SUCCESS;
}

/* An event record node moved to another event records that one; a wait
 * node's event moves too. */
static void t_event_set(CUfunction fill, CUdeviceptr f, int n, CUstream s)
{
	CUevent start, e1, e2, e3, w1, w2, got;
	CK(cuEventCreate(&start, CU_EVENT_DEFAULT));
	CK(cuEventCreate(&e1, CU_EVENT_DEFAULT));
	CK(cuEventCreate(&e2, CU_EVENT_DEFAULT));
	CK(cuEventCreate(&e3, CU_EVENT_DEFAULT));
	CK(cuEventCreate(&w1, CU_EVENT_DISABLE_TIMING));
	CK(cuEventCreate(&w2, CU_EVENT_DISABLE_TIMING));
	CK(cuEventRecord(w1, s));
	CK(cuEventRecord(w2, s));
	unsigned v5 = 5;
	unsigned long long n64 = (unsigned long long)n;
	void *a[] = { &f, &v5, &n64 };
	CUDA_KERNEL_NODE_PARAMS k = kparams(fill, (unsigned)n, a);
	CUgraph RG;
	CUgraphNode wn, kn, rn;
	CUgraphExec rx, rx2;
	CK(cuGraphCreate(&RG, 0));
	CK(cuGraphAddEventWaitNode(&wn, RG, NULL, 0, w1));
	CK(cuGraphAddKernelNode(&kn, RG, &wn, 1, &k));
	CK(cuGraphAddEventRecordNode(&rn, RG, &kn, 1, e1));
	CK(cuGraphInstantiate(&rx, RG, 0));
	CK(cuGraphEventRecordNodeSetEvent(rn, e2));
	CK(cuGraphEventRecordNodeGetEvent(rn, &got));
	CHECK(got == e2, "record node's event read back wrong");
	CK(cuGraphEventWaitNodeSetEvent(wn, w2));
	CK(cuGraphEventWaitNodeGetEvent(wn, &got));
	CHECK(got == w2, "wait node's event read back wrong");
	EXPECT_RC(cuGraphEventRecordNodeSetEvent(wn, e2), CUDA_ERROR_INVALID_VALUE);
	CK(cuGraphInstantiate(&rx2, RG, 0));
	CK(cuEventRecord(start, s));
	launch_sync(rx2, s);
	CK(cuEventSynchronize(e2));
	CK(cuEventQuery(e2));
	CHECK(recorded(start, e2), "the record node's new event was not recorded");
	CHECK(!recorded(start, e1), "the record node's old event was recorded");
	/* the executable made before keeps e1 until its own node is set */
	CK(cuGraphExecEventRecordNodeSetEvent(rx, rn, e3));
	CK(cuGraphExecEventWaitNodeSetEvent(rx, wn, w2));
	launch_sync(rx, s);
	CK(cuEventSynchronize(e3));
	CHECK(recorded(start, e3), "the executable's record node did not record its new event");
	CHECK(!recorded(start, e1), "the executable's record node recorded its old event");
	/* generic setter: back to e1 */
	CUgraphNodeParams np;
	memset(&np, 0, sizeof(np));
	np.type = CU_GRAPH_NODE_TYPE_EVENT_RECORD;
	np.eventRecord.event = e1;
	CK(cuGraphExecNodeSetParams(rx, rn, &np));
	launch_sync(rx, s);
	CHECK(recorded(start, e1), "cuGraphExecNodeSetParams: the record node's event not recorded");
	expect_all(f, n, 5, "the kernel between the event nodes");
	CK(cuGraphExecDestroy(rx));
	CK(cuGraphExecDestroy(rx2));
	CK(cuGraphDestroy(RG));
	CUevent evs[] = { start, e1, e2, e3, w1, w2 };
	for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++)
		CK(cuEventDestroy(evs[i]));
	say("event record and wait nodes moved to other events");
}

/* Kernel node attributes set read back equal, and copy to another node;
 * the graph still runs. */
static void t_kattr(CUfunction fill, CUdeviceptr f, int n, CUstream s)
{
	unsigned v6 = 6;
	unsigned long long n64 = (unsigned long long)n;
	void *a[] = { &f, &v6, &n64 };
	CUDA_KERNEL_NODE_PARAMS k = kparams(fill, (unsigned)n, a);
	CUgraph AG;
	CUgraphNode k1, k2;
	CK(cuGraphCreate(&AG, 0));
	CK(cuGraphAddKernelNode(&k1, AG, NULL, 0, &k));
	CK(cuGraphAddKernelNode(&k2, AG, &k1, 1, &k));
	CUkernelNodeAttrValue v;
	memset(&v, 0, sizeof(v));
	v.cooperative = 1;
	CK(cuGraphKernelNodeSetAttribute(k1, CU_KERNEL_NODE_ATTRIBUTE_COOPERATIVE, &v));
	memset(&v, 0, sizeof(v));
	v.memSyncDomain = CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE;
	CK(cuGraphKernelNodeSetAttribute(k1, CU_KERNEL_NODE_ATTRIBUTE_MEM_SYNC_DOMAIN, &v));
	/* before the copy, k2 is not cooperative */
	memset(&v, 0xff, sizeof(v));
	CK(cuGraphKernelNodeGetAttribute(k2, CU_KERNEL_NODE_ATTRIBUTE_COOPERATIVE, &v));
	CHECK(v.cooperative == 0, "an unset cooperative attribute reads %d", v.cooperative);
	CUgraphNode nodes[2] = { k1, k2 };
	for (int i = 0; i < 2; i++) {
		if (i)
			CK(cuGraphKernelNodeCopyAttributes(k2, k1));
		memset(&v, 0, sizeof(v));
		CK(cuGraphKernelNodeGetAttribute(nodes[i], CU_KERNEL_NODE_ATTRIBUTE_COOPERATIVE, &v));
		CHECK(v.cooperative == 1, "node %d: cooperative reads %d", i, v.cooperative);
		memset(&v, 0, sizeof(v));
		CK(cuGraphKernelNodeGetAttribute(nodes[i], CU_KERNEL_NODE_ATTRIBUTE_MEM_SYNC_DOMAIN, &v));
		CHECK(v.memSyncDomain == CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE, "node %d: sync domain reads %d", i,
		      (int)v.memSyncDomain);
	}
	CUgraphExec ax;
	CK(cuMemsetD32Async(f, 0, (size_t)n, s));
	CK(cuGraphInstantiate(&ax, AG, 0));
	launch_sync(ax, s);
	expect_all(f, n, 6, "kernel nodes with attributes");
	CK(cuGraphExecDestroy(ax));
	CK(cuGraphDestroy(AG));
	say("kernel node attributes: set, read back, copied");
}

/* The graph a child graph node owns: the child's nodes, and what is added
 * to it runs in the parent's next executable. */
static void t_child_get(CUgraph P, CUgraphNode pn, CUfunction inc, CUdeviceptr g, int n, CUstream s)
{
	CUgraph inner, again;
	CK(cuGraphChildGraphNodeGetGraph(pn, &inner));
	CK(cuGraphChildGraphNodeGetGraph(pn, &again));
	CHECK(inner == again, "the child graph handle changed between calls");
	CUgraphNode in[4];
	size_t cnt = 4;
	CK(cuGraphGetNodes(inner, in, &cnt));
	CHECK(cnt == 1, "the child graph has %zu nodes, want 1", cnt);
	CUgraphNodeType t;
	CK(cuGraphNodeGetType(in[0], &t));
	CHECK(t == CU_GRAPH_NODE_TYPE_MEMSET, "the child graph's node has type %d", (int)t);
	int nn = n;
	void *args[] = { &g, &nn };
	CUDA_KERNEL_NODE_PARAMS kp = kparams(inc, (unsigned)n, args);
	CUgraphNode added;
	CK(cuGraphAddKernelNode(&added, inner, &in[0], 1, &kp));
	CUgraphExec px2;
	CK(cuGraphInstantiate(&px2, P, 0));
	launch_sync(px2, s);
	expect_all(g, n, 4, "the child's memset 3 and the increment added through its handle");
	CK(cuGraphExecDestroy(px2));
	say("child graph node's graph: its nodes, and one added to it");
}

/* cuGraphNodeSetParams and cuGraphExecNodeSetParams on a memset node: the
 * executable's value changes, the graph's only by the graph's setter. */
static void t_generic_set(CUcontext ctx, CUdeviceptr g, int n, CUstream s)
{
	CUgraph MG;
	CUgraphNode mn;
	CUgraphExec mx;
	CUDA_MEMSET_NODE_PARAMS ms = msparams(g, 30, (size_t)n);
	CK(cuGraphCreate(&MG, 0));
	CK(cuGraphAddMemsetNode(&mn, MG, NULL, 0, &ms, ctx));
	CK(cuGraphInstantiate(&mx, MG, 0));
	CUgraphNodeParams np;
	memset(&np, 0, sizeof(np));
	np.type = CU_GRAPH_NODE_TYPE_MEMSET;
	np.memset.dst = g;
	np.memset.value = 33;
	np.memset.elementSize = 4;
	np.memset.width = (size_t)n;
	np.memset.height = 1;
	np.memset.ctx = ctx;
	CK(cuGraphExecNodeSetParams(mx, mn, &np));
	launch_sync(mx, s);
	expect_all(g, n, 33, "memset value by cuGraphExecNodeSetParams");
	CUDA_MEMSET_NODE_PARAMS back;
	CK(cuGraphMemsetNodeGetParams(mn, &back));
	CHECK(back.value == 30, "an executable's set changed the graph's memset (%u)", back.value);
	np.memset.value = 35;
	CK(cuGraphNodeSetParams(mn, &np));
	CK(cuGraphMemsetNodeGetParams(mn, &back));
	CHECK(back.value == 35, "cuGraphNodeSetParams: memset value reads %u", back.value);
	launch_sync(mx, s);
	expect_all(g, n, 33, "an executable after the graph's node was set");
	CUgraphExec mx2;
	CK(cuGraphInstantiate(&mx2, MG, 0));
	launch_sync(mx2, s);
	expect_all(g, n, 35, "an executable of the graph after cuGraphNodeSetParams");
	np.type = CU_GRAPH_NODE_TYPE_KERNEL;
	EXPECT_RC(cuGraphNodeSetParams(mn, &np), CUDA_ERROR_INVALID_VALUE);
	CK(cuGraphExecDestroy(mx));
	CK(cuGraphExecDestroy(mx2));
	CK(cuGraphDestroy(MG));
	say("generic node setters on a memset node");
}

int main(int argc, char **argv)
{
	(void)argc;
	e2e_init(argv[0]);
	CUcontext ctx = primary_ctx(0, NULL);
	CUmodule mod = load_test_module();
	CUfunction inc = get_func(mod, "inc_i32");
	CUfunction fill = get_func(mod, "fill_u32");
	const int n = 2048;
	const size_t bytes = n * sizeof(int);
	CUdeviceptr d, e, f, g, out;
	CK(cuMemAlloc(&d, bytes));
	CK(cuMemAlloc(&e, bytes));
	CK(cuMemAlloc(&f, bytes));
	CK(cuMemAlloc(&g, bytes));
	CK(cuMemAlloc(&out, bytes));
	CUstream s;
	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CUevent ev;
	CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));

	CUgraph G;
	CUresult rc = cuGraphCreate(&G, 0);
	if (rc == CUDA_ERROR_NOT_SUPPORTED)
		skip("no CUDA graphs on this device");
	CK(rc);
	CUgraphNode A, B, C, H, M, F, X;
	CUDA_MEMSET_NODE_PARAMS ms = msparams(d, 5, n);
	CK(cuGraphAddMemsetNode(&A, G, NULL, 0, &ms, ctx));
	int nn = n;
	void *incargs[] = { &d, &nn };
	CUDA_KERNEL_NODE_PARAMS kp = kparams(inc, n, incargs);
	CK(cuGraphAddKernelNode(&B, G, &A, 1, &kp));
	CK(cuGraphAddKernelNode(&C, G, &B, 1, &kp));
	CUDA_HOST_NODE_PARAMS hp = { on_host, NULL };
	CK(cuGraphAddHostNode(&H, G, &C, 1, &hp));
	CUDA_MEMCPY3D cp = copy3d_1d(CU_MEMORYTYPE_DEVICE, NULL, d, CU_MEMORYTYPE_DEVICE, NULL, e, bytes);
	CK(cuGraphAddMemcpyNode(&M, G, &H, 1, &cp, ctx));
	CK(cuGraphAddEventRecordNode(&X, G, &M, 1, ev));
	unsigned v9 = 9;
	unsigned long long n64 = n;
	void *fillargs[] = { &f, &v9, &n64 };
	CUDA_KERNEL_NODE_PARAMS fp = kparams(fill, n, fillargs);
	CK(cuGraphAddKernelNode(&F, G, NULL, 0, &fp));

	size_t cnt = 0;
	CUgraphNode from[16], to[16], roots[16], deps[16];
	{
		/* an empty graph and one of a single node (XLA traces a
		 * command buffer of one kernel so): no nodes, no edges, asked
		 * with room for them */
		CUgraph E1, E0;
		CUgraphNode only;
		CK(cuGraphCreate(&E0, 0));
		CK(cuGraphCreate(&E1, 0));
		CK(cuGraphAddKernelNode(&only, E1, NULL, 0, &kp));
		cnt = 16;
		CK(cuGraphGetNodes(E0, roots, &cnt));
		CHECK(cnt == 0, "an empty graph has %zu nodes", cnt);
		cnt = 16;
		CK(cuGraphGetEdges(E0, from, to, NULL, &cnt));
		CHECK(cnt == 0, "an empty graph has %zu edges", cnt);
		cnt = 16;
		CK(cuGraphGetEdges(E1, from, to, NULL, &cnt));
		CHECK(cnt == 0, "a one-node graph has %zu edges", cnt);
		CUgraphEdgeData ed[16];
		cnt = 16;
		CK(cuGraphGetEdges(E1, from, to, ed, &cnt));
		CHECK(cnt == 0, "a one-node graph has %zu edges (with their data)", cnt);
		cnt = 16;
		CK(cuGraphGetRootNodes(E1, roots, &cnt));
		CHECK(cnt == 1 && roots[0] == only, "a one-node graph: %zu roots", cnt);
		/* what the driver says with room for none (rgpud asks so no
		 * more): reported, not checked */
		cnt = 0;
		CUresult r0 = cuGraphGetEdges(E1, from, to, ed, &cnt);
		say("edges of a one-node graph with room for none: %d", (int)r0);
		CK(cuGraphDestroy(E0));
		CK(cuGraphDestroy(E1));
	}
	cnt = 0;
	CK(cuGraphGetNodes(G, NULL, &cnt));
	CHECK(cnt == 7, "graph has %zu nodes, want 7", cnt);
	cnt = 16;
	CK(cuGraphGetEdges(G, from, to, NULL, &cnt));
	CHECK(cnt == 5, "graph has %zu edges, want 5", cnt);
	cnt = 16;
	CK(cuGraphGetRootNodes(G, roots, &cnt));
	CHECK(cnt == 2 && contains(roots, cnt, A) && contains(roots, cnt, F), "roots: %zu, want A and F", cnt);
	cnt = 16;
	CK(cuGraphNodeGetDependencies(C, deps, NULL, &cnt));
	CHECK(cnt == 1 && deps[0] == B, "C depends on %zu nodes, want B", cnt);
	cnt = 16;
	CK(cuGraphNodeGetDependentNodes(H, deps, NULL, &cnt));
	CHECK(cnt == 1 && deps[0] == M, "%zu nodes depend on H, want M", cnt);
	CUgraphNodeType t;
	CK(cuGraphNodeGetType(H, &t));
	CHECK(t == CU_GRAPH_NODE_TYPE_HOST, "H has type %d", (int)t);
	CUDA_KERNEL_NODE_PARAMS got;
	CK(cuGraphKernelNodeGetParams(C, &got));
	CHECK(got.func == inc && got.gridDimX == kp.gridDimX && got.blockDimX == 256,
	      "kernel node parameters read back wrong");
	say("structure: 7 nodes, 5 edges, roots, dependencies and types as built");

	CUgraphExec x;
	CK(cuGraphInstantiate(&x, G, 0));
	CK(cuGraphLaunch(x, s));
	CK(cuGraphLaunch(x, s));
	CK(cuStreamSynchronize(s));
	expect_all(e, n, 7, "memcpy node after memset 5 and two increments");
	expect_all(f, n, 9, "fill node");
	CHECK(host_runs == 2, "host node ran %d times in two launches", host_runs);
	CK(cuEventQuery(ev));
	say("two launches: every node ran once per launch, in order");

	/* parameters: the graph's, the executable's, and by update */
	unsigned v11 = 11, v13 = 13, v17 = 17;
	fillargs[1] = &v11;
	fp = kparams(fill, n, fillargs);
	CK(cuGraphKernelNodeSetParams(F, &fp));
	CK(cuGraphLaunch(x, s));
	CK(cuStreamSynchronize(s));
	expect_all(f, n, 9, "an executable keeps the parameters it was made with");
	fillargs[1] = &v13;
	fp = kparams(fill, n, fillargs);
	CK(cuGraphExecKernelNodeSetParams(x, F, &fp));
	CK(cuGraphLaunch(x, s));
	CK(cuStreamSynchronize(s));
	expect_all(f, n, 13, "exec kernel node parameters");
	/* no executable: refused, and the graph's parameters stay */
	fillargs[1] = &v17;
	CUDA_KERNEL_NODE_PARAMS bad = kparams(fill, n, fillargs);
	CHECK(cuGraphExecKernelNodeSetParams(NULL, F, &bad) == CUDA_ERROR_INVALID_VALUE,
	      "exec kernel node parameters without an executable were taken");
	CUDA_KERNEL_NODE_PARAMS back;
	CK(cuGraphKernelNodeGetParams(F, &back));
	CHECK(*(unsigned *)back.kernelParams[1] == 11,
	      "a refused exec set changed the graph's node (%u)", *(unsigned *)back.kernelParams[1]);
	/* the arguments in one buffer (extra, CU_LAUNCH_PARAM_BUFFER_*), at
	 * fill_u32's layout */
	struct {
		CUdeviceptr p;
		unsigned v;
		unsigned long long n;
	} packed = { f, 15, (unsigned long long)n };
	size_t packed_size = sizeof(packed);
	void *xextra[] = { CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &packed_size,
			  CU_LAUNCH_PARAM_END };
	CUDA_KERNEL_NODE_PARAMS xp = kparams(fill, n, NULL);
	xp.extra = xextra;
	CUgraph GX; /* its own graph: G's host node counts G's launches */
	CUgraphNode XN;
	CUgraphExec xx;
	CK(cuGraphCreate(&GX, 0));
	CK(cuGraphAddKernelNode(&XN, GX, NULL, 0, &xp));
	CK(cuGraphInstantiate(&xx, GX, 0));
	CK(cuGraphLaunch(xx, s));
	CK(cuStreamSynchronize(s));
	expect_all(f, n, 15, "kernel node parameters in an extra buffer");
	packed.v = 19;
	CK(cuGraphExecKernelNodeSetParams(xx, XN, &xp));
	CK(cuGraphLaunch(xx, s));
	CK(cuStreamSynchronize(s));
	expect_all(f, n, 19, "exec kernel node parameters in an extra buffer");
	CK(cuGraphExecDestroy(xx));
	CK(cuGraphDestroy(GX));
	CUgraph G2;
	CK(cuGraphClone(&G2, G));
	CUgraphNode F2;
	CK(cuGraphNodeFindInClone(&F2, F, G2));
	fillargs[1] = &v17;
	fp = kparams(fill, n, fillargs);
	CK(cuGraphKernelNodeSetParams(F2, &fp));
	CUgraphExecUpdateResultInfo info;
	CK(cuGraphExecUpdate(x, G2, &info));
	CHECK(info.result == CU_GRAPH_EXEC_UPDATE_SUCCESS, "update result %d", (int)info.result);
	CK(cuGraphLaunch(x, s));
	CK(cuStreamSynchronize(s));
	expect_all(f, n, 17, "exec updated from a clone");
	CHECK(host_runs == 5, "host node ran %d times in five launches", host_runs);
	{
		/* as many edges, one moved (B -> C becomes A -> C): another
		 * topology all the same */
		CUgraph G3;
		CUgraphNode A3, B3, C3;
		CK(cuGraphClone(&G3, G));
		CK(cuGraphNodeFindInClone(&A3, A, G3));
		CK(cuGraphNodeFindInClone(&B3, B, G3));
		CK(cuGraphNodeFindInClone(&C3, C, G3));
		CK(cuGraphRemoveDependencies(G3, &B3, &C3, NULL, 1));
		CK(cuGraphAddDependencies(G3, &A3, &C3, NULL, 1));
		rc = cuGraphExecUpdate(x, G3, &info);
		CHECK(rc == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE && info.result != CU_GRAPH_EXEC_UPDATE_SUCCESS,
		      "update with an edge moved: %s, result %d", cu_name(rc), (int)info.result);
		CK(cuGraphDestroy(G3));
	}
	CUgraphNode extra;
	CK(cuGraphAddEmptyNode(&extra, G2, NULL, 0));
	rc = cuGraphExecUpdate(x, G2, &info);
	CHECK(rc == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE &&
	      info.result == CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED,
	      "update with another topology: %s, result %d", cu_name(rc), (int)info.result);
	say("node parameters: graph, executable and exec update");

	/* a child graph */
	CUgraph K, P;
	CK(cuGraphCreate(&K, 0));
	CUgraphNode kn, pn;
	ms = msparams(g, 3, n);
	CK(cuGraphAddMemsetNode(&kn, K, NULL, 0, &ms, ctx));
	CK(cuGraphCreate(&P, 0));
	CK(cuGraphAddChildGraphNode(&pn, P, NULL, 0, K));
	CUgraphExec px;
	CK(cuGraphInstantiate(&px, P, 0));
	CK(cuGraphLaunch(px, s));
	CK(cuStreamSynchronize(s));
	expect_all(g, n, 3, "child graph's memset");
	{
		/* the executable's child replaced by one of the same topology
		 * (XLA's command buffer updates), and refused with another */
		CUgraph K2, K3;
		CUgraphNode kn2, kn3a, kn3b;
		CK(cuGraphCreate(&K2, 0));
		ms = msparams(g, 8, n);
		CK(cuGraphAddMemsetNode(&kn2, K2, NULL, 0, &ms, ctx));
		CK(cuGraphExecChildGraphNodeSetParams(px, pn, K2));
		CK(cuGraphDestroy(K2)); /* (the executable has its own copy) */
		CK(cuGraphLaunch(px, s));
		CK(cuStreamSynchronize(s));
		expect_all(g, n, 8, "the executable's child graph replaced");
		CK(cuGraphCreate(&K3, 0));
		CK(cuGraphAddMemsetNode(&kn3a, K3, NULL, 0, &ms, ctx));
		CK(cuGraphAddMemsetNode(&kn3b, K3, &kn3a, 1, &ms, ctx));
		/* (the driver's answer, seen on an H200) */
		EXPECT_RC(cuGraphExecChildGraphNodeSetParams(px, pn, K3), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
		CK(cuGraphDestroy(K3));
		CK(cuGraphLaunch(px, s));
		CK(cuStreamSynchronize(s));
		expect_all(g, n, 8, "the executable after a refused child graph");
	}

	/* memory nodes: alloc, use, copy out, free */
	CUgraph MG;
	CK(cuGraphCreate(&MG, 0));
	CUDA_MEM_ALLOC_NODE_PARAMS ap;
	memset(&ap, 0, sizeof(ap));
	ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	ap.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	ap.poolProps.location.id = 0;
	ap.bytesize = bytes;
	CUgraphNode an, sn, cn, fn;
	CK(cuGraphAddMemAllocNode(&an, MG, NULL, 0, &ap));
	CHECK(ap.dptr != 0, "alloc node gave no address");
	ms = msparams(ap.dptr, 21, n);
	CK(cuGraphAddMemsetNode(&sn, MG, &an, 1, &ms, ctx));
	cp = copy3d_1d(CU_MEMORYTYPE_DEVICE, NULL, ap.dptr, CU_MEMORYTYPE_DEVICE, NULL, out, bytes);
	CK(cuGraphAddMemcpyNode(&cn, MG, &sn, 1, &cp, ctx));
	CK(cuGraphAddMemFreeNode(&fn, MG, &cn, 1, ap.dptr));
	/* a second allocation after that free may take the same address
	 * (graphMemoryFootprint counts on it): it is added all the same */
	CUDA_MEM_ALLOC_NODE_PARAMS ap2 = ap;
	ap2.dptr = 0;
	CUgraphNode an2, fn2;
	CK(cuGraphAddMemAllocNode(&an2, MG, &fn, 1, &ap2));
	CHECK(ap2.dptr != 0, "second alloc node gave no address");
	CK(cuGraphAddMemFreeNode(&fn2, MG, &an2, 1, ap2.dptr));
	say("an allocation after a free: %s address", ap2.dptr == ap.dptr ? "the same" : "another");
	CUgraphExec mx;
	CK(cuGraphInstantiate(&mx, MG, 0));
	CK(cuGraphLaunch(mx, s));
	CK(cuStreamSynchronize(s));
	expect_all(out, n, 21, "memory nodes");
	say("child graph and memory alloc/free nodes");

	/* an allocation no node frees, freed by cuMemFree once its graph is
	 * gone (graphMemoryFootprint) */
	{
		CUgraph AG;
		CUgraphNode an3;
		CUgraphExec ax;
		CUDA_MEM_ALLOC_NODE_PARAMS a3 = ap;
		a3.dptr = 0;
		CK(cuGraphCreate(&AG, 0));
		CK(cuGraphAddMemAllocNode(&an3, AG, NULL, 0, &a3));
		CK(cuGraphInstantiate(&ax, AG, 0));
		CK(cuGraphDestroy(AG));
		CK(cuGraphLaunch(ax, s));
		CK(cuStreamSynchronize(s));
		CK(cuMemFree(a3.dptr));
		/* launched again, it allocates at the address again; freed in
		 * stream order this time (graphMemoryNodes) */
		CK(cuGraphLaunch(ax, s));
		CK(cuMemFreeAsync(a3.dptr, s));
		CK(cuStreamSynchronize(s));
		CK(cuGraphExecDestroy(ax));
		say("a graph's allocation freed with cuMemFree, then with cuMemFreeAsync");
	}

	/* a conditional IF node taking its default value at each launch */
	CUgraph CG;
	CK(cuGraphCreate(&CG, 0));
	CUgraphConditionalHandle ch;
	rc = cuGraphConditionalHandleCreate(&ch, CG, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT);
	if (rc == CUDA_ERROR_NOT_SUPPORTED) {
		say("conditional nodes: not on this device");
	} else {
		CK(rc);
		CUgraphNodeParams np;
		memset(&np, 0, sizeof(np));
		np.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
		np.conditional.handle = ch;
		np.conditional.type = CU_GRAPH_COND_TYPE_IF;
		np.conditional.size = 1;
		np.conditional.ctx = ctx;
		CUgraphNode cnode, body;
		CK(cuGraphAddNode(&cnode, CG, NULL, NULL, 0, &np));
		CUgraph bodyg = np.conditional.phGraph_out[0];
		ms = msparams(g, 42, n);
		CK(cuGraphAddMemsetNode(&body, bodyg, NULL, 0, &ms, ctx));
		/* a second IF node after it, its body captured from a stream
		 * (NVIDIA's graphConditionalNodes builds its bodies so) */
		CUgraphNode cnode2;
		CUgraphConditionalHandle ch2; /* (a handle serves one node) */
		CK(cuGraphConditionalHandleCreate(&ch2, CG, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
		np.conditional.handle = ch2;
		np.conditional.phGraph_out = NULL;
		CK(cuGraphAddNode(&cnode2, CG, &cnode, NULL, 1, &np));
		CUgraph body2 = np.conditional.phGraph_out[0];
		CK(cuStreamBeginCaptureToGraph(s, body2, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL));
		void *cargs[] = { &g, &nn };
		launch1d(inc, (unsigned)n, s, cargs);
		/* (where the graph goes left out, as the sample does: the
		 * caller has it) */
		CK(cuStreamEndCapture(s, NULL));
		CUgraphExec cx;
		CK(cuGraphInstantiate(&cx, CG, 0));
		CK(cuGraphLaunch(cx, s));
		CK(cuStreamSynchronize(s));
		expect_all(g, n, 43, "conditional IF bodies with default 1 (a memset, a captured increment)");
		CK(cuGraphExecDestroy(cx));
		say("conditional IF node");
	}
	CK(cuGraphDestroy(CG));

	/* a capture into an existing graph, after one of its nodes */
	CUgraph CT;
	CK(cuGraphCreate(&CT, 0));
	CUgraphNode first;
	ms = msparams(g, 60, n);
	CK(cuGraphAddMemsetNode(&first, CT, NULL, 0, &ms, ctx));
	CK(cuStreamBeginCaptureToGraph(s, CT, &first, NULL, 1, CU_STREAM_CAPTURE_MODE_GLOBAL));
	void *gargs[] = { &g, &nn };
	launch1d(inc, (unsigned)n, s, gargs);
	CUgraph got_g;
	CK(cuStreamEndCapture(s, &got_g));
	CHECK(got_g == CT, "capture into a graph returned another graph");
	CK(cuGraphGetNodes(CT, NULL, &cnt));
	CHECK(cnt == 2, "graph captured into has %zu nodes, want 2", cnt);
	CUgraphExec ctx_x;
	CK(cuGraphInstantiate(&ctx_x, CT, 0));
	CK(cuGraphLaunch(ctx_x, s));
	CK(cuStreamSynchronize(s));
	expect_all(g, n, 61, "memset node then the captured increment");
	CK(cuGraphExecDestroy(ctx_x));
	CK(cuGraphDestroy(CT));
	say("capture into an existing graph");

	/* destroying a node; the dot print */
	CK(cuGraphDestroyNode(F));
	CK(cuGraphGetNodes(G, NULL, &cnt));
	CHECK(cnt == 6, "after destroying a node: %zu nodes, want 6", cnt);
	char path[] = "/tmp/rgpu-t-graph-XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0, "mkstemp");
	close(fd);
	CK(cuGraphDebugDotPrint(G, path, 0));
	FILE *df = fopen(path, "r");
	char line[256] = "";
	CHECK(df && fgets(line, sizeof(line), df), "dot file unreadable");
	fclose(df);
	unlink(path);
	CHECK(strstr(line, "digraph") != NULL, "dot file starts %s", line);
	say("destroy node, dot print");

	/* a programmatic edge (XLA's command buffers): kernel -> kernel with
	 * edge data, through cuGraphAddNode_v2; the graph runs both */
	{
		CUgraph PG;
		CK(cuGraphCreate(&PG, 0));
		unsigned v3 = 3, v4 = 4;
		void *a1[] = { &f, &v3, &n64 }, *a2[] = { &g, &v4, &n64 };
		CUgraphNodeParams np1, np2;
		memset(&np1, 0, sizeof(np1));
		memset(&np2, 0, sizeof(np2));
		np1.type = np2.type = CU_GRAPH_NODE_TYPE_KERNEL;
		CUDA_KERNEL_NODE_PARAMS k1 = kparams(fill, n, a1), k2 = kparams(fill, n, a2);
		memcpy(&np1.kernel, &k1, sizeof(k1));
		memcpy(&np2.kernel, &k2, sizeof(k2));
		CUgraphNode P1, P2;
		CK(cuGraphAddNode_v2(&P1, PG, NULL, NULL, 0, &np1));
		CUgraphEdgeData edata;
		memset(&edata, 0, sizeof(edata));
		edata.type = CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
		edata.from_port = CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC;
		CK(cuGraphAddNode_v2(&P2, PG, &P1, &edata, 1, &np2));
		size_t ne = 0;
		CK(cuGraphGetEdges(PG, NULL, NULL, NULL, &ne));
		CHECK(ne == 1, "the programmatic graph has %zu edges, want 1", ne);
		CUgraphExec pe;
		CK(cuGraphInstantiate(&pe, PG, 0));
		CK(cuGraphLaunch(pe, s));
		CK(cuStreamSynchronize(s));
		unsigned *hb = malloc(bytes);
		CHECK(hb != NULL, "out of memory");
		CK(cuMemcpyDtoH(hb, f, bytes));
		CHECK(hb[0] == 3 && hb[n - 1] == 3, "programmatic graph: f = %u..%u, want 3", hb[0],
		      hb[n - 1]);
		CK(cuMemcpyDtoH(hb, g, bytes));
		CHECK(hb[0] == 4 && hb[n - 1] == 4, "programmatic graph: g = %u..%u, want 4", hb[0],
		      hb[n - 1]);
		free(hb);
		CK(cuGraphExecDestroy(pe));
		CK(cuGraphDestroy(PG));
		say("programmatic edge");
	}

	/* setters and queries: enabled nodes, flags, host and event nodes,
	 * kernel attributes, the child's graph, the generic setters */
	t_enabled(ctx, fill, f, g, n, s);
	t_host_set(s);
	t_event_set(fill, f, n, s);
	t_kattr(fill, f, n, s);
	t_child_get(P, pn, inc, g, n, s);
	t_generic_set(ctx, g, n, s);

	CK(cuGraphExecDestroy(x));
	CK(cuGraphExecDestroy(px));
	CK(cuGraphExecDestroy(mx));
	CK(cuGraphDestroy(G));
	CK(cuGraphDestroy(G2));
	CK(cuGraphDestroy(K));
	CK(cuGraphDestroy(P));
	CK(cuGraphDestroy(MG));
	CK(cuEventDestroy(ev));
	CK(cuStreamDestroy(s));
	CK(cuMemFree(d));
	CK(cuMemFree(e));
	CK(cuMemFree(f));
	CK(cuMemFree(g));
	CK(cuMemFree(out));
	CK(cuModuleUnload(mod));
	say("PASS");
	return 0;
}
