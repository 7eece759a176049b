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
 *  - a programmatic edge (edge data) between two kernel nodes.
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
		rc = cuGraphExecChildGraphNodeSetParams(px, pn, K3);
		CHECK(rc != CUDA_SUCCESS, "a child graph of another topology was taken");
		say("a child graph of another topology: %s", cu_name(rc));
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
