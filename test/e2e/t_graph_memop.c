/* Graph nodes of batch memory operations (the stream write/wait value
 * operations as nodes):
 *  - memset -> batch [write32, write64] -> batch [wait32 GEQ, write32]:
 *    launched, every word as written, the wait satisfied in graph order;
 *  - the getter hands out the node's own copy of the operations;
 *  - set on the graph (an executable keeps the old ones, a new one takes
 *    the new), set on the executable, the generic cuGraphAddNode and
 *    cuGraphExecNodeSetParams, and a clone;
 *  - a write captured from a stream becomes a node of this type;
 *  - a node of no operations runs as nothing; whether too many or an
 *    unknown operation are taken is compared with the driver.
 * Exits non-zero on any mismatch. */
#include "common.h"

struct words {
	uint32_t a, b;
	uint64_t c;
};

static CUstreamBatchMemOpParams write32(CUdeviceptr at, uint32_t v)
{
	CUstreamBatchMemOpParams o;
	memset(&o, 0, sizeof(o));
	o.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
	o.writeValue.address = at;
	o.writeValue.value = v;
	return o;
}

static CUstreamBatchMemOpParams write64(CUdeviceptr at, uint64_t v)
{
	CUstreamBatchMemOpParams o;
	memset(&o, 0, sizeof(o));
	o.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
	o.writeValue.address = at;
	o.writeValue.value64 = v;
	return o;
}

static CUstreamBatchMemOpParams wait32(CUdeviceptr at, uint32_t v)
{
	CUstreamBatchMemOpParams o;
	memset(&o, 0, sizeof(o));
	o.waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
	o.waitValue.address = at;
	o.waitValue.value = v;
	o.waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
	return o;
}

static CUDA_BATCH_MEM_OP_NODE_PARAMS batch(CUcontext ctx, CUstreamBatchMemOpParams *ops, unsigned n)
{
	CUDA_BATCH_MEM_OP_NODE_PARAMS b;
	memset(&b, 0, sizeof(b));
	b.ctx = ctx;
	b.count = n;
	b.paramArray = ops;
	return b;
}

static struct words run(CUgraphExec x, CUstream s, CUdeviceptr d)
{
	struct words w;
	CK(cuGraphLaunch(x, s));
	CK(cuStreamSynchronize(s));
	CK(cuMemcpyDtoH(&w, d, sizeof(w)));
	return w;
}

int main(int argc, char **argv)
{
	(void)argc;
	e2e_init(argv[0]);
	CUcontext ctx = primary_ctx(0, NULL);
	CUdeviceptr d;
	CK(cuMemAlloc(&d, sizeof(struct words)));
	CUdeviceptr da = d, db = d + 4, dc = d + 8;
	CUstream s;
	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

	CUgraph G;
	CUresult rc = cuGraphCreate(&G, 0);
	if (rc == CUDA_ERROR_NOT_SUPPORTED)
		skip("no CUDA graphs on this device");
	CK(rc);
	CUgraphNode Z, W, V;
	CUDA_MEMSET_NODE_PARAMS ms;
	memset(&ms, 0, sizeof(ms));
	ms.dst = d;
	ms.elementSize = 4;
	ms.width = sizeof(struct words) / 4;
	ms.height = 1;
	CK(cuGraphAddMemsetNode(&Z, G, NULL, 0, &ms, ctx));
	CUstreamBatchMemOpParams w1[2] = { write32(da, 7), write64(dc, 0x1122334455667788ull) };
	CUDA_BATCH_MEM_OP_NODE_PARAMS b1 = batch(ctx, w1, 2);
	CK(cuGraphAddBatchMemOpNode(&W, G, &Z, 1, &b1));
	CUstreamBatchMemOpParams w2[2] = { wait32(da, 7), write32(db, 9) };
	CUDA_BATCH_MEM_OP_NODE_PARAMS b2 = batch(ctx, w2, 2);
	CK(cuGraphAddBatchMemOpNode(&V, G, &W, 1, &b2));
	/* the node copied the array: changing ours changes nothing */
	w1[0].writeValue.value = 1234;
	CUgraphNodeType t;
	CK(cuGraphNodeGetType(W, &t));
	CHECK(t == CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, "node type %d", (int)t);
	CUgraphExec x;
	CK(cuGraphInstantiate(&x, G, 0));
	struct words got = run(x, s, d);
	CHECK(got.a == 7 && got.b == 9 && got.c == 0x1122334455667788ull,
	      "after a launch: a %u b %u c %llx, want 7 9 1122334455667788", got.a, got.b,
	      (unsigned long long)got.c);
	say("batch memory operation nodes in graph order");

	CUDA_BATCH_MEM_OP_NODE_PARAMS back;
	memset(&back, 0, sizeof(back));
	CK(cuGraphBatchMemOpNodeGetParams(W, &back));
	CHECK(back.count == 2 && back.paramArray && back.paramArray != w1, "getter: count %u, array %p",
	      back.count, (void *)back.paramArray);
	CHECK(back.paramArray[0].writeValue.operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 &&
		      back.paramArray[0].writeValue.address == da && back.paramArray[0].writeValue.value == 7 &&
		      back.paramArray[1].writeValue.value64 == 0x1122334455667788ull,
	      "getter: op %d at %llx value %u", (int)back.paramArray[0].writeValue.operation,
	      (unsigned long long)back.paramArray[0].writeValue.address, back.paramArray[0].writeValue.value);

	/* set on the graph: the executable keeps what it was made with */
	CUstreamBatchMemOpParams w3[2] = { write32(da, 8), write64(dc, 5) };
	CUDA_BATCH_MEM_OP_NODE_PARAMS b3 = batch(ctx, w3, 2);
	CK(cuGraphBatchMemOpNodeSetParams(W, &b3));
	got = run(x, s, d);
	CHECK(got.a == 7 && got.c == 0x1122334455667788ull, "an executable took the graph's new operations (a %u)",
	      got.a);
	CUgraphExec x2;
	CK(cuGraphInstantiate(&x2, G, 0));
	got = run(x2, s, d);
	CHECK(got.a == 8 && got.b == 9 && got.c == 5, "a new executable: a %u b %u c %llu, want 8 9 5", got.a,
	      got.b, (unsigned long long)got.c);
	/* set on the executable */
	CUstreamBatchMemOpParams w4[1] = { write32(db, 21) };
	CUstreamBatchMemOpParams w4b[2] = { wait32(da, 8), w4[0] };
	CUDA_BATCH_MEM_OP_NODE_PARAMS b4 = batch(ctx, w4b, 2);
	CK(cuGraphExecBatchMemOpNodeSetParams(x2, V, &b4));
	got = run(x2, s, d);
	CHECK(got.a == 8 && got.b == 21, "cuGraphExecBatchMemOpNodeSetParams: b %u, want 21", got.b);
	CK(cuGraphBatchMemOpNodeGetParams(V, &back));
	CHECK(back.count == 2 && back.paramArray[1].writeValue.value == 9,
	      "an executable's set changed the graph's node (b %u)", back.paramArray[1].writeValue.value);
	say("batch node setters: graph, executable");

	/* the generic entry points */
	CUgraph GG;
	CK(cuGraphCreate(&GG, 0));
	CUgraphNodeParams np;
	memset(&np, 0, sizeof(np));
	CUstreamBatchMemOpParams w5[1] = { write32(da, 40) };
	np.type = CU_GRAPH_NODE_TYPE_BATCH_MEM_OP;
	np.memOp.ctx = ctx;
	np.memOp.count = 1;
	np.memOp.paramArray = w5;
	CUgraphNode N;
	CK(cuGraphAddNode(&N, GG, NULL, NULL, 0, &np));
	CUgraphExec gx;
	CK(cuGraphInstantiate(&gx, GG, 0));
	got = run(gx, s, d);
	CHECK(got.a == 40, "cuGraphAddNode batch node: a %u, want 40", got.a);
	CUstreamBatchMemOpParams w6[1] = { write32(da, 41) };
	np.memOp.paramArray = w6;
	CK(cuGraphExecNodeSetParams(gx, N, &np));
	got = run(gx, s, d);
	CHECK(got.a == 41, "cuGraphExecNodeSetParams batch node: a %u, want 41", got.a);
	/* a clone has the node with its operations */
	CUgraph C;
	CK(cuGraphClone(&C, G));
	CUgraphNode WC;
	CK(cuGraphNodeFindInClone(&WC, W, C));
	CK(cuGraphBatchMemOpNodeGetParams(WC, &back));
	CHECK(back.count == 2 && back.paramArray[0].writeValue.value == 8 && back.paramArray[1].writeValue.value64 == 5,
	      "clone's batch node: count %u value %u", back.count, back.paramArray[0].writeValue.value);
	CUgraphExec cx;
	CK(cuGraphInstantiate(&cx, C, 0));
	got = run(cx, s, d);
	CHECK(got.a == 8 && got.b == 9 && got.c == 5, "clone launched: a %u b %u c %llu", got.a, got.b,
	      (unsigned long long)got.c);
	say("generic add and set, clone");

	/* a stream write captured */
	CUgraph K;
	CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
	CK(cuStreamWriteValue32(s, db, 77, 0));
	CK(cuStreamEndCapture(s, &K));
	size_t nk = 0;
	CK(cuGraphGetNodes(K, NULL, &nk));
	CHECK(nk == 1, "captured graph has %zu nodes", nk);
	CUgraphNode KN;
	CK(cuGraphGetNodes(K, &KN, &nk));
	CK(cuGraphNodeGetType(KN, &t));
	CHECK(t == CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, "a captured write is a node of type %d", (int)t);
	CUgraphExec kx;
	CK(cuGraphInstantiate(&kx, K, 0));
	got = run(kx, s, d);
	CHECK(got.b == 77, "captured write: b %u, want 77", got.b);
	say("a captured stream write is a batch node");

	/* a node of no operations: the driver takes it (H200, 2026-12-03),
	 * and it runs as nothing */
	CUgraph E;
	CK(cuGraphCreate(&E, 0));
	CUgraphNode en;
	CUDA_BATCH_MEM_OP_NODE_PARAMS b0 = batch(ctx, NULL, 0);
	CK(cuGraphAddBatchMemOpNode(&en, E, NULL, 0, &b0));
	CUDA_BATCH_MEM_OP_NODE_PARAMS e0;
	CK(cuGraphBatchMemOpNodeGetParams(en, &e0));
	CHECK(e0.count == 0, "an empty node reads back %u operations", e0.count);
	CUgraphExec ex;
	CK(cuGraphInstantiate(&ex, E, 0));
	CK(cuGraphLaunch(ex, s));
	CK(cuStreamSynchronize(s));
	CK(cuGraphExecDestroy(ex));
	CK(cuGraphDestroy(E));
	say("a node of no operations runs as nothing");

	/* too many operations, an unknown one: whether each is taken is the
	 * driver's to say (a RESULT line, compared with it on a GPU); none
	 * may leave a node behind when refused */
	CUgraphNode bad;
	CUstreamBatchMemOpParams *many = xmalloc(300 * sizeof(*many));
	for (int i = 0; i < 300; i++)
		many[i] = write32(da, (uint32_t)i);
	CUDA_BATCH_MEM_OP_NODE_PARAMS b300 = batch(ctx, many, 300);
	int taken[2];
	taken[0] = cuGraphAddBatchMemOpNode(&bad, GG, NULL, 0, &b300) == CUDA_SUCCESS;
	free(many);
	CUstreamBatchMemOpParams junk[1] = { write32(da, 1) };
	junk[0].operation = (CUstreamBatchMemOpType)99;
	CUDA_BATCH_MEM_OP_NODE_PARAMS bj = batch(ctx, junk, 1);
	taken[1] = cuGraphAddBatchMemOpNode(&bad, GG, NULL, 0, &bj) == CUDA_SUCCESS;
	size_t ng = 0;
	CK(cuGraphGetNodes(GG, NULL, &ng));
	CHECK(ng == 1u + (unsigned)taken[0] + (unsigned)taken[1], "%zu nodes after %d of 2 were taken", ng,
	      taken[0] + taken[1]);
	say("300 operations %s, an unknown operation %s", taken[0] ? "taken" : "refused",
	    taken[1] ? "taken" : "refused");
	result("graph_memop_taken", taken, sizeof(taken));

	result("graph_memop", &got, sizeof(got));
	CK(cuGraphExecDestroy(x));
	CK(cuGraphExecDestroy(x2));
	CK(cuGraphExecDestroy(gx));
	CK(cuGraphExecDestroy(cx));
	CK(cuGraphExecDestroy(kx));
	CK(cuGraphDestroy(G));
	CK(cuGraphDestroy(GG));
	CK(cuGraphDestroy(C));
	CK(cuGraphDestroy(K));
	CK(cuStreamDestroy(s));
	CK(cuMemFree(d));
	say("PASS");
	return 0;
}
