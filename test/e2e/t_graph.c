/* CUDA graphs by stream capture: three kernel launches and a memset are
 * captured, the graph is instantiated and launched twice; the data shows
 * each node ran once per launch.  Then memory nodes: a stream-ordered
 * allocation captured with its use and free.  Skips where the driver has
 * no graphs. */
#include "common.h"

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	primary_ctx(0, NULL);
	CUmodule mod = load_test_module();
	CUfunction inc = get_func(mod, "inc_i32");
	const int n = 4096;
	CUdeviceptr d, e;
	CK(cuMemAlloc(&d, n * sizeof(int)));
	CK(cuMemAlloc(&e, n * sizeof(int)));
	CK(cuMemsetD32(d, 0, n));
	CUstream s;
	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CUresult rc = cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL);
	if (rc == CUDA_ERROR_NOT_SUPPORTED)
		skip("no CUDA graphs on this device");
	CK(rc);
	CUstreamCaptureStatus st;
	CK(cuStreamIsCapturing(s, &st));
	CHECK(st == CU_STREAM_CAPTURE_STATUS_ACTIVE, "capture status %d while capturing", (int)st);
	int nn = n;
	void *args[] = { &d, &nn };
	for (int i = 0; i < 3; i++)
		launch1d(inc, (unsigned)n, s, args);
	CK(cuMemsetD32Async(e, 7, n, s));
	CUgraph g;
	CK(cuStreamEndCapture(s, &g));
	CK(cuStreamIsCapturing(s, &st));
	CHECK(st == CU_STREAM_CAPTURE_STATUS_NONE, "capture status %d after the capture", (int)st);
	size_t nodes = 0;
	CK(cuGraphGetNodes(g, NULL, &nodes));
	CHECK(nodes == 4, "graph has %zu nodes, want 4", nodes);
	/* nothing ran while capturing */
	int *h = xmalloc(n * sizeof(int));
	CK(cuMemcpyDtoH(h, d, n * sizeof(int)));
	CHECK(h[0] == 0, "captured work ran early: %d", h[0]);
	CUgraphExec x;
	CK(cuGraphInstantiate(&x, g, 0));
	CK(cuGraphLaunch(x, s));
	CK(cuGraphLaunch(x, s));
	CK(cuStreamSynchronize(s));
	CK(cuMemcpyDtoH(h, d, n * sizeof(int)));
	for (int i = 0; i < n; i++)
		if (h[i] != 6)
			fail("d[%d] = %d after two launches of a 3-increment graph, want 6", i, h[i]);
	CK(cuMemcpyDtoH(h, e, n * sizeof(int)));
	CHECK(h[n - 1] == 7, "memset node wrote %d", h[n - 1]);
	result("graph", h, n * sizeof(int));

	/* memory nodes in a capture: an allocation made, used, copied out and
	 * freed while capturing becomes alloc and free nodes; the graph runs
	 * them at each launch */
	CUdeviceptr out;
	CK(cuMemAlloc(&out, n * sizeof(int)));
	CK(cuMemsetD32(out, 0, n));
	CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	CUdeviceptr tmp;
	rc = cuMemAllocAsync(&tmp, n * sizeof(int), s);
	if (rc == CUDA_ERROR_NOT_SUPPORTED) {
		CUgraph dead;
		(void)cuStreamEndCapture(s, &dead);
		say("memory nodes in a capture: no stream-ordered allocation here");
	} else {
		CK(rc);
		CK(cuMemsetD32Async(tmp, 77, n, s));
		CK(cuMemcpyDtoDAsync(out, tmp, n * sizeof(int), s));
		CK(cuMemFreeAsync(tmp, s));
		CUgraph mg;
		CK(cuStreamEndCapture(s, &mg));
		size_t mn = 0;
		CK(cuGraphGetNodes(mg, NULL, &mn));
		CUgraphNode *mnodes = xmalloc(mn * sizeof(*mnodes));
		CK(cuGraphGetNodes(mg, mnodes, &mn));
		int allocs = 0, frees = 0;
		for (size_t i = 0; i < mn; i++) {
			CUgraphNodeType t;
			CK(cuGraphNodeGetType(mnodes[i], &t));
			allocs += t == CU_GRAPH_NODE_TYPE_MEM_ALLOC;
			frees += t == CU_GRAPH_NODE_TYPE_MEM_FREE;
		}
		free(mnodes);
		CHECK(mn == 4 && allocs == 1 && frees == 1,
		      "captured memory graph: %zu nodes, %d alloc, %d free; want 4, 1, 1", mn, allocs, frees);
		CUgraphExec mx;
		CK(cuGraphInstantiate(&mx, mg, 0));
		for (int k = 0; k < 2; k++)
			CK(cuGraphLaunch(mx, s));
		CK(cuStreamSynchronize(s));
		CK(cuMemcpyDtoH(h, out, n * sizeof(int)));
		for (int i = 0; i < n; i++)
			if (h[i] != 77)
				fail("out[%d] = %d after the captured memory graph, want 77", i, h[i]);
		CK(cuGraphExecDestroy(mx));
		CK(cuGraphDestroy(mg));
		say("memory nodes in a capture: alloc, memset, copy, free");
	}
	CK(cuMemFree(out));
	CK(cuGraphExecDestroy(x));
	CK(cuGraphDestroy(g));
	CK(cuStreamDestroy(s));
	CK(cuMemFree(d));
	CK(cuMemFree(e));
	CK(cuModuleUnload(mod));
	free(h);
	say("PASS");
	return 0;
}
