/*
 * A session that outlives its server (test/migrate/run-migrate.sh).
 *
 * Phase 1 builds state of every kind that moves: a module (a function and
 * its globals), device memory written by copies and by kernels, a stream
 * and an event.  With "standby" it then does more after the first
 * synchronisation (the checkpoint): memory allocated and written and a
 * kernel launched, which recovery must replay.  It prints READY and waits
 * for a line on stdin; meanwhile the test moves the session or kills its
 * server.  Phase 2 checks every byte and every handle: the data, the
 * globals, launches on the old stream, the old event, then creates and
 * destroys objects.  It prints OK on success.  With "pool" it also holds
 * stream-ordered pools (pool_make).  With "vmmshared" it holds VMM memory
 * exported for another process, and with "ipcevent" an event exported so
 * (cuIpcGetEventHandle), which are not migrated: the move must be refused
 * and the session go on where it was.  With "churn" it makes events before READY
 * and, told "churn" on stdin, destroys them one after another while the
 * test moves the session, so that objects sent ahead of a move's pause go
 * meanwhile (RGPUD_MIGRATE_AHEAD: the move must then send it all).  With
 * "memchurn" it allocates MCHURN small buffers before READY and, told
 * "churn", frees them one every millisecond, each replaced by a larger one,
 * while the test moves the session between GPUs of one server: memory made
 * ready on the target ahead of the pause then goes meanwhile, and memory
 * comes that was not there ahead; every buffer left is checked after.
 */
#include <poll.h>
#include <unistd.h>
#include "../e2e/common.h"

#define N (1 << 18)           /* floats per vector */
#define BIG (8u << 20)        /* u32 words in the big buffer (32 MiB) */
#define PATTERN 0xabcd1234u

#define CHURN 3000 /* events made before READY, destroyed after "churn" */
#define MCHURN 400 /* buffers made before READY, replaced after "churn" */
#define MOLD (64u << 10)
#define MNEW (96u << 10)

static CUdeviceptr mold[MCHURN], mnew[MCHURN];
static int mgone; /* mold[0..mgone) replaced by mnew[] */

static void mem_fill(CUdeviceptr d, unsigned bytes, unsigned v)
{
	CK(cuMemsetD32(d, v, bytes / 4));
}

static void mem_expect(CUdeviceptr d, unsigned bytes, unsigned v, const char *what, int i)
{
	static unsigned h[MNEW / 4];
	CK(cuMemcpyDtoH(h, d, bytes));
	for (unsigned k = 0; k < bytes / 4; k++)
		if (h[k] != v) {
			CHECK(0, "%s buffer %d word %u = %#x, want %#x", what, i, k, h[k], v);
			return;
		}
}

/* one old buffer freed, a larger one made in its place */
static void mem_replace(void)
{
	CK(cuMemFree(mold[mgone]));
	CK(cuMemAlloc(&mnew[mgone], MNEW));
	mem_fill(mnew[mgone], MNEW, 0x5a000000u + (unsigned)mgone);
	mgone++;
}

static void memchurn(int phase)
{
	if (phase == 0) {
		for (int i = 0; i < MCHURN; i++) {
			CK(cuMemAlloc(&mold[i], MOLD));
			mem_fill(mold[i], MOLD, 0x0d000000u + (unsigned)i);
		}
		return;
	}
	for (int i = mgone; i < MCHURN; i++)
		mem_expect(mold[i], MOLD, 0x0d000000u + (unsigned)i, "old", i);
	for (int i = 0; i < mgone; i++)
		mem_expect(mnew[i], MNEW, 0x5a000000u + (unsigned)i, "new", i);
	for (int i = 0; i < MCHURN; i++)
		CK(cuMemFree(i < mgone ? mnew[i] : mold[i]));
}

/* Application VMM memory (vmm mode): two physical pieces mapped side by
 * side, the second's handle released while mapped, as allocators that
 * grow a reserved range do (PyTorch's expandable segments, XLA). */
#define VMM_PIECES 2
struct vmm_state {
	CUdeviceptr va;
	size_t piece, size;
	CUmemGenericAllocationHandle h[VMM_PIECES];
	CUevent ev; /* made after the release: its handle may be the released one's */
};

static void vmm_make(struct vmm_state *v, CUfunction f_inc, CUstream s)
{
	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				     .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 } };
	CK(cuMemGetAllocationGranularity(&v->piece, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	v->size = VMM_PIECES * v->piece;
	CK(cuMemAddressReserve(&v->va, v->size, 0, 0, 0));
	for (int i = 0; i < VMM_PIECES; i++) {
		CK(cuMemCreate(&v->h[i], v->piece, &prop, 0));
		CK(cuMemMap(v->va + i * v->piece, v->piece, 0, v->h[i], 0));
	}
	CK(cuMemRelease(v->h[VMM_PIECES - 1]));
	CK(cuEventCreate(&v->ev, CU_EVENT_DISABLE_TIMING));
	CUmemAccessDesc acc = { .location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CK(cuMemSetAccess(v->va, v->size, &acc, 1));
	int words = (int)(v->size / 4);
	int *h = xmalloc(v->size);
	for (int i = 0; i < words; i++)
		h[i] = i * 7;
	CK(cuMemcpyHtoD(v->va, h, v->size));
	void *args[] = { &v->va, &words };
	launch1d(f_inc, words, s, args);
	CK(cuStreamSynchronize(s));
	free(h);
}

/* vmmchurn mode: the VMM memory's access set again and again while the
 * move's objects go ahead (a change to what went: the pause must then
 * send it all) */
static struct vmm_state *churned;
static void vmm_churn_once(void)
{
	CUmemAccessDesc acc = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
				.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CK(cuMemSetAccess(churned->va, churned->size, &acc, 1));
}

/* after the move: each word i * 7 + 1 (+ 1 more after another launch) */
static void vmm_check(struct vmm_state *v, CUfunction f_inc, CUstream s)
{
	int words = (int)(v->size / 4);
	int *h = xmalloc(v->size);
	CK(cuMemcpyDtoH(h, v->va, v->size));
	for (int i = 0; i < words; i++)
		CHECK(h[i] == i * 7 + 1, "vmm[%d] = %d, want %d", i, h[i], i * 7 + 1);
	void *args[] = { &v->va, &words };
	launch1d(f_inc, words, s, args);
	CK(cuStreamSynchronize(s));
	CK(cuMemcpyDtoH(h, v->va, v->size));
	for (int i = 0; i < words; i++)
		CHECK(h[i] == i * 7 + 2, "vmm[%d] = %d after a launch, want %d", i, h[i], i * 7 + 2);
	free(h);
	CK(cuEventRecord(v->ev, s));
	CK(cuEventSynchronize(v->ev));
	CK(cuEventDestroy(v->ev));
	CK(cuMemUnmap(v->va, v->size));
	for (int i = 0; i < VMM_PIECES - 1; i++)
		CK(cuMemRelease(v->h[i]));
	CK(cuMemAddressFree(v->va, v->size));
}

/* pool mode: stream-ordered pools move (rgpud's own: their blocks are
 * re-created at their addresses).  The default pool holds two live
 * allocations and a freed block it caches (a high release threshold); a
 * created pool with a non-default attribute holds one of each; a pool
 * destroyed with an allocation still live leaves that one behind.  After
 * the move the data is there, the attributes and the pools' sizes are as
 * they were, and an allocation of the cached block's size gets that very
 * block.  poolstandby: more after the last checkpoint (recovery replays
 * them at the addresses the application holds: a new block, the cached
 * one, one freed and taken again on the same stream). */
#define P_SMALL (100u << 10)
#define P_MID (3u << 20)
#define P_CACHED (5u << 20)
struct pool_state {
	CUmemoryPool def, mine;
	CUdeviceptr p1, p2, p3, m1, g1, q1, q2, q3;
	cuuint64_t reserved, used, mreserved;
};

static void pool_fill(CUdeviceptr d, size_t bytes, unsigned v, CUstream s)
{
	CK(cuMemsetD32Async(d, v, bytes / 4, s));
}

static void pool_expect(CUdeviceptr d, size_t bytes, unsigned v, const char *what)
{
	unsigned *h = xmalloc(bytes);
	CK(cuMemcpyDtoH(h, d, bytes));
	for (size_t k = 0; k < bytes / 4; k++)
		if (h[k] != v) {
			CHECK(0, "pool memory %s word %zu = %#x, want %#x", what, k, h[k], v);
			break;
		}
	free(h);
}

static cuuint64_t pool_attr(CUmemoryPool p, CUmemPool_attribute a)
{
	cuuint64_t v = 0;
	CK(cuMemPoolGetAttribute(p, a, &v));
	return v;
}

static void pool_make(struct pool_state *ps, CUstream s)
{
	CK(cuDeviceGetDefaultMemPool(&ps->def, 0));
	cuuint64_t thr = 1ull << 40;
	CK(cuMemPoolSetAttribute(ps->def, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr));
	CK(cuMemAllocAsync(&ps->p1, P_MID, s));
	CK(cuMemAllocAsync(&ps->p2, P_SMALL, s));
	CK(cuMemAllocAsync(&ps->p3, P_CACHED, s));
	pool_fill(ps->p1, P_MID, 0x11000001u, s);
	pool_fill(ps->p2, P_SMALL, 0x22000002u, s);
	CK(cuMemFreeAsync(ps->p3, s));
	CUmemPoolProps pp = { .allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
			      .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 } };
	CK(cuMemPoolCreate(&ps->mine, &pp));
	int off = 0;
	CK(cuMemPoolSetAttribute(ps->mine, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &off));
	CK(cuMemPoolSetAttribute(ps->mine, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr));
	CUdeviceptr m2;
	CK(cuMemAllocFromPoolAsync(&ps->m1, P_MID, ps->mine, s));
	CK(cuMemAllocFromPoolAsync(&m2, P_SMALL, ps->mine, s));
	pool_fill(ps->m1, P_MID, 0x33000003u, s);
	CK(cuMemFreeAsync(m2, s));
	CUmemoryPool gone;
	CK(cuMemPoolCreate(&gone, &pp));
	CK(cuMemAllocFromPoolAsync(&ps->g1, P_SMALL, gone, s));
	pool_fill(ps->g1, P_SMALL, 0x44000004u, s);
	CK(cuStreamSynchronize(s));
	CK(cuMemPoolDestroy(gone));
	ps->reserved = pool_attr(ps->def, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
	ps->used = pool_attr(ps->def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
	ps->mreserved = pool_attr(ps->mine, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
	CHECK(ps->reserved > ps->used && ps->used >= P_MID + P_SMALL,
	      "the default pool reserves %llu bytes, uses %llu", (unsigned long long)ps->reserved,
	      (unsigned long long)ps->used);
}

/* poolstandby: after the last checkpoint */
static void pool_more(struct pool_state *ps, CUstream s)
{
	CK(cuMemAllocAsync(&ps->q1, 2u << 20, s));
	CK(cuMemAllocAsync(&ps->q2, P_CACHED, s)); /* the cached block */
	CHECK(ps->q2 == ps->p3, "the cached block is not reused: %#llx, not %#llx",
	      (unsigned long long)ps->q2, (unsigned long long)ps->p3);
	pool_fill(ps->q2, P_CACHED, 0x55000005u, s);
	CK(cuMemFreeAsync(ps->q1, s));
	CK(cuMemAllocAsync(&ps->q3, 2u << 20, s)); /* freed on this stream: taken again */
	CHECK(ps->q3 == ps->q1, "a block freed on the stream is not taken again");
	pool_fill(ps->q3, 2u << 20, 0x66000006u, s);
	CK(cuStreamSynchronize(s));
	ps->reserved = pool_attr(ps->def, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
	ps->used = pool_attr(ps->def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
}

static void pool_check(struct pool_state *ps, CUstream s)
{
	pool_expect(ps->p1, P_MID, 0x11000001u, "p1");
	pool_expect(ps->p2, P_SMALL, 0x22000002u, "p2");
	pool_expect(ps->m1, P_MID, 0x33000003u, "m1");
	pool_expect(ps->g1, P_SMALL, 0x44000004u, "of a destroyed pool");
	CHECK(pool_attr(ps->def, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) == 1ull << 40,
	      "the default pool's threshold is lost");
	CHECK(pool_attr(ps->mine, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC) == 0,
	      "a created pool's attribute is lost");
	cuuint64_t r = pool_attr(ps->def, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
	cuuint64_t u = pool_attr(ps->def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
	CHECK(r == ps->reserved && u == ps->used, "the default pool reserves %llu (was %llu), uses %llu (was %llu)",
	      (unsigned long long)r, (unsigned long long)ps->reserved, (unsigned long long)u,
	      (unsigned long long)ps->used);
	CHECK(pool_attr(ps->mine, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == ps->mreserved,
	      "the created pool's reserve changed");
	if (ps->q2) {
		pool_expect(ps->q2, P_CACHED, 0x55000005u, "q2");
		pool_expect(ps->q3, 2u << 20, 0x66000006u, "q3");
		CK(cuMemFreeAsync(ps->q2, s));
		CK(cuMemFreeAsync(ps->q3, s));
	} else {
		/* the block cached before the move serves this one */
		CUdeviceptr p4;
		CK(cuMemAllocAsync(&p4, P_CACHED, s));
		CHECK(p4 == ps->p3, "the cached block did not move: %#llx, not %#llx",
		      (unsigned long long)p4, (unsigned long long)ps->p3);
		pool_fill(p4, P_CACHED, 7, s);
		CK(cuMemFreeAsync(p4, s));
	}
	CK(cuMemFreeAsync(ps->p1, s));
	CK(cuMemFreeAsync(ps->p2, s));
	CK(cuMemFreeAsync(ps->m1, s));
	CK(cuMemFreeAsync(ps->g1, s));
	CK(cuStreamSynchronize(s));
	CK(cuMemPoolTrimTo(ps->def, 0));
	r = pool_attr(ps->def, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
	CHECK(r == 0, "%llu bytes reserved after a trim", (unsigned long long)r);
	CK(cuMemPoolDestroy(ps->mine));
}

/* graph mode: CUDA graphs move (made again on the target by replaying
 * what built them).  A captured graph, instantiated, then destroyed with
 * an event its capture recorded (the executable lives on); an explicit
 * graph (kernel node, then a copy node) whose executable's kernel node
 * was given other arguments.  After the move both executables run as
 * before, a node's handle still names its node, and the graph clones. */
#define GN 4096
struct graph_state {
	CUstream cs;
	CUgraphExec x1, x2;
	CUgraph g2;
	CUgraphNode k2;
	CUdeviceptr x, y, z, z2, w;
	CUfunction inc;
};

static void graph_expect(CUdeviceptr d, int v, const char *what)
{
	mem_expect(d, GN * sizeof(int), (unsigned)v, what, 0);
}

static void graph_make(struct graph_state *g, CUfunction inc)
{
	static int n = GN;
	g->inc = inc;
	CUdeviceptr *bufs[] = { &g->x, &g->y, &g->z, &g->z2, &g->w };
	for (int i = 0; i < 5; i++) {
		CK(cuMemAlloc(bufs[i], GN * sizeof(int)));
		CK(cuMemsetD32(*bufs[i], 0, GN));
	}
	CK(cuStreamCreate(&g->cs, CU_STREAM_NON_BLOCKING));
	CUevent e;
	CK(cuEventCreate(&e, CU_EVENT_DEFAULT));
	CK(cuStreamBeginCapture(g->cs, CU_STREAM_CAPTURE_MODE_GLOBAL));
	void *xa[] = { &g->x, &n };
	launch1d(inc, GN, g->cs, xa);
	launch1d(inc, GN, g->cs, xa);
	CK(cuEventRecord(e, g->cs));
	CK(cuMemsetD32Async(g->y, 5, GN, g->cs));
	CUgraph g1;
	CK(cuStreamEndCapture(g->cs, &g1));
	CK(cuGraphInstantiate(&g->x1, g1, 0));
	CK(cuGraphDestroy(g1));
	CK(cuEventDestroy(e));
	CK(cuGraphLaunch(g->x1, g->cs));

	CK(cuGraphCreate(&g->g2, 0));
	void *za[] = { &g->z, &n }, *z2a[] = { &g->z2, &n };
	CUDA_KERNEL_NODE_PARAMS kp = kparams(inc, GN, za);
	CK(cuGraphAddKernelNode(&g->k2, g->g2, NULL, 0, &kp));
	CUDA_MEMCPY3D cp;
	memset(&cp, 0, sizeof(cp));
	cp.srcMemoryType = cp.dstMemoryType = CU_MEMORYTYPE_DEVICE;
	cp.srcDevice = g->z2;
	cp.dstDevice = g->w;
	cp.WidthInBytes = GN * sizeof(int);
	cp.Height = cp.Depth = 1;
	CUgraphNode c2;
	CUcontext cx;
	CK(cuCtxGetCurrent(&cx));
	CK(cuGraphAddMemcpyNode(&c2, g->g2, &g->k2, 1, &cp, cx));
	CK(cuGraphInstantiate(&g->x2, g->g2, 0));
	/* the executable's kernel node increments z2 (the graph's: z) */
	kp = kparams(inc, GN, z2a);
	CK(cuGraphExecKernelNodeSetParams(g->x2, g->k2, &kp));
	CK(cuGraphLaunch(g->x2, g->cs));
	CK(cuStreamSynchronize(g->cs));
	graph_expect(g->x, 2, "x");
	graph_expect(g->w, 1, "w");
}

static void graph_check(struct graph_state *g)
{
	static int n = GN;
	CK(cuGraphLaunch(g->x1, g->cs));
	CK(cuGraphLaunch(g->x2, g->cs));
	CK(cuStreamSynchronize(g->cs));
	graph_expect(g->x, 4, "x (a captured graph launched again)");
	graph_expect(g->y, 5, "y (its memset node)");
	graph_expect(g->z2, 2, "z2 (an updated kernel node)");
	graph_expect(g->z, 0, "z (the update kept)");
	graph_expect(g->w, 2, "w (a copy node)");
	/* the node's handle names the target's node */
	void *za[] = { &g->z, &n };
	CUDA_KERNEL_NODE_PARAMS kp = kparams(g->inc, GN, za);
	CK(cuGraphExecKernelNodeSetParams(g->x2, g->k2, &kp));
	CK(cuGraphLaunch(g->x2, g->cs));
	CUgraph cl;
	CUgraphExec xc;
	CK(cuGraphClone(&cl, g->g2));
	CK(cuGraphInstantiate(&xc, cl, 0));
	CK(cuGraphLaunch(xc, g->cs));
	CK(cuStreamSynchronize(g->cs));
	graph_expect(g->z, 2, "z (after the move: updated, then the clone)");
	graph_expect(g->w, 2, "w (after the move)");
	size_t nn = 0;
	CK(cuGraphGetNodes(g->g2, NULL, &nn));
	CHECK(nn == 2, "the explicit graph has %zu nodes after the move, want 2", nn);
	CK(cuGraphExecDestroy(xc));
	CK(cuGraphDestroy(cl));
	CK(cuGraphExecDestroy(g->x1));
	CK(cuGraphExecDestroy(g->x2));
	CK(cuGraphDestroy(g->g2));
	CK(cuStreamDestroy(g->cs));
	CUdeviceptr bufs[] = { g->x, g->y, g->z, g->z2, g->w };
	for (int i = 0; i < 5; i++)
		CK(cuMemFree(bufs[i]));
}

/* graphmem mode: a graph with a memory node, which is not migrated */
static CUgraph graph_with_memory(void)
{
	CUgraph g;
	CK(cuGraphCreate(&g, 0));
	CUDA_MEM_ALLOC_NODE_PARAMS a;
	memset(&a, 0, sizeof(a));
	a.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	a.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	a.bytesize = 1 << 20;
	CUgraphNode nd;
	CK(cuGraphAddMemAllocNode(&nd, g, NULL, 0, &a));
	return g;
}

/* hostfn mode: host functions before and after the move, in stream order
 * behind a kernel (each sees the words the kernel wrote so far) */
static volatile int hostfn_runs;
static void CUDA_CB hostfn_count(void *arg)
{
	(void)arg;
	hostfn_runs++;
}

static void wait_go(int churn, int mchurn, int vchurn)
{
	char line[64];
	static CUevent ev[CHURN];
	for (int i = 0; churn && i < CHURN; i++)
		CK(cuEventCreate(&ev[i], CU_EVENT_DEFAULT));
	if (mchurn)
		memchurn(0);
	printf("READY\n");
	fflush(stdout);
	int gone = 0;
	if (mchurn) {
		if (!fgets(line, sizeof(line), stdin))
			fail("no churn line on stdin");
		struct pollfd p = { .fd = 0, .events = POLLIN };
		while (mgone < MCHURN && poll(&p, 1, 1) == 0)
			mem_replace();
	}
	if (vchurn) {
		if (!fgets(line, sizeof(line), stdin))
			fail("no churn line on stdin");
		struct pollfd p = { .fd = 0, .events = POLLIN };
		while (poll(&p, 1, 1) == 0)
			vmm_churn_once();
	}
	if (churn) {
		/* "churn": the move starts now; destroy back to back (a request
		 * always waiting) until "go" or no event is left */
		if (!fgets(line, sizeof(line), stdin))
			fail("no churn line on stdin");
		struct pollfd p = { .fd = 0, .events = POLLIN };
		while (gone < CHURN && poll(&p, 1, 0) == 0)
			CK(cuEventDestroy(ev[gone++]));
	}
	if (!fgets(line, sizeof(line), stdin))
		fail("no go-ahead on stdin");
	while (churn && gone < CHURN)
		CK(cuEventDestroy(ev[gone++]));
}

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	/* vmmstandby: both */
	int standby = argc > 1 && (!strcmp(argv[1], "standby") || !strcmp(argv[1], "vmmstandby"));
	/* VMM memory exported for another process: not moved */
	int shared = argc > 1 && !strcmp(argv[1], "vmmshared");
	/* an event exported for another process: not moved */
	int ipcev = argc > 1 && !strcmp(argv[1], "ipcevent");
	int pools = argc > 1 && (!strcmp(argv[1], "pool") || !strcmp(argv[1], "poolstandby"));
	int churn = argc > 1 && !strcmp(argv[1], "churn");
	int mchurn = argc > 1 && !strcmp(argv[1], "memchurn");
	int vchurn = argc > 1 && !strcmp(argv[1], "vmmchurn");
	int vmm = argc > 1 && (!strcmp(argv[1], "vmm") || !strcmp(argv[1], "vmmstandby") || vchurn);
	int hostfn = argc > 1 && !strcmp(argv[1], "hostfn");
	int graph = argc > 1 && (!strcmp(argv[1], "graph") || !strcmp(argv[1], "graphstandby"));
	int graphmem = argc > 1 && !strcmp(argv[1], "graphmem");
	standby |= argc > 1 && (!strcmp(argv[1], "graphstandby") || !strcmp(argv[1], "poolstandby"));
	/* physical memory mapped in part only: its other bytes could not be
	 * captured, so the session may not move */
	int vmmpart = argc > 1 && !strcmp(argv[1], "vmmpart");
	(void)primary_ctx(0, NULL);
	CUmodule mod = load_test_module();
	CUfunction f_add = get_func(mod, "vec_add");
	CUfunction f_glob = get_func(mod, "scale_by_global");
	CUfunction f_fill = get_func(mod, "fill_u32");
	CUfunction f_inc = get_func(mod, "inc_i32");
	CUdeviceptr gscale, gcount;
	CK(cuModuleGetGlobal(&gscale, NULL, mod, "g_scale"));
	CK(cuModuleGetGlobal(&gcount, NULL, mod, "g_counter"));

	float *a = xmalloc(N * sizeof(float)), *b = xmalloc(N * sizeof(float));
	float *c = xmalloc(N * sizeof(float));
	for (int i = 0; i < N; i++) {
		a[i] = (float)i * 0.25f;
		b[i] = (float)(N - i);
	}
	CUdeviceptr da, db, dc, dbig;
	CK(cuMemAlloc(&da, N * sizeof(float)));
	CK(cuMemAlloc(&db, N * sizeof(float)));
	CK(cuMemAlloc(&dc, N * sizeof(float)));
	CK(cuMemAlloc(&dbig, (size_t)BIG * 4));
	CUstream s;
	CUevent ev;
	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CK(cuEventCreate(&ev, CU_EVENT_DEFAULT));

	float scale = 3.0f;
	int zero = 0, n = N;
	CK(cuMemcpyHtoD(gscale, &scale, sizeof(scale)));
	CK(cuMemcpyHtoD(gcount, &zero, sizeof(zero)));
	CK(cuMemcpyHtoD(da, a, N * sizeof(float)));
	CK(cuMemcpyHtoD(db, b, N * sizeof(float)));
	void *add_args[] = { &da, &db, &dc, &n };
	launch1d(f_add, N, s, add_args);
	void *glob_args[] = { &dc, &n };
	launch1d(f_glob, N, s, glob_args);
	unsigned pat = PATTERN;
	unsigned long long big = BIG;
	void *fill_args[] = { &dbig, &pat, &big };
	launch1d(f_fill, BIG, s, fill_args);
	CK(cuEventRecord(ev, s));
	CK(cuEventSynchronize(ev));
	CK(cuCtxSynchronize()); /* with a standby: the checkpoint */

	CUmemGenericAllocationHandle xh = 0;
	CUdeviceptr xva = 0;
	size_t xg = 0;
	int xfd = -1;
	if (shared) {
		CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
					     .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
					     .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR };
		CK(cuMemGetAllocationGranularity(&xg, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
		CK(cuMemCreate(&xh, xg, &prop, 0));
		CK(cuMemAddressReserve(&xva, xg, 0, 0, 0));
		CK(cuMemMap(xva, xg, 0, xh, 0));
		CK(cuMemExportToShareableHandle(&xfd, xh, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	}
	CUevent xev = NULL;
	if (ipcev) {
		CUipcEventHandle eh;
		CK(cuEventCreate(&xev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
		CK(cuIpcGetEventHandle(&eh, xev));
		CK(cuEventRecord(xev, s));
	}
	struct pool_state ps = { 0 };
	if (pools)
		pool_make(&ps, s);
	CUdeviceptr dd = 0;
	int *d = xmalloc(N * sizeof(int));
	/* (before a standby's checkpoint: in it) */
	struct vmm_state vs = { 0 };
	if (vmm)
		vmm_make(&vs, f_inc, s);
	churned = &vs;
	struct graph_state gs = { 0 };
	if (graph)
		graph_make(&gs, f_inc);
	CUgraph gm = graphmem ? graph_with_memory() : NULL;
	/* capturing mode: a capture under way at the move (refused: draining
	 * would end it); it ends after, and its graph runs */
	int capturing = argc > 1 && !strcmp(argv[1], "capturing");
	/* capturestandby: the same on a checkpointing server with a standby:
	 * checkpoints asked for during the capture are deferred, the one
	 * after it carries the graph, and the graph runs again after the
	 * server is killed */
	int capsb = argc > 1 && !strcmp(argv[1], "capturestandby");
	capturing |= capsb;
	CUstream cs = NULL;
	CUdeviceptr dcap = 0;
	static int ncap = 1024;
	void *cap_args[] = { &dcap, &ncap };
	if (capturing) {
		CK(cuMemAlloc(&dcap, ncap * sizeof(int)));
		CK(cuMemsetD32(dcap, 0, ncap));
		CK(cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
		CK(cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_RELAXED));
		launch1d(f_inc, ncap, cs, cap_args);
	}
	CUgraphExec capx = NULL;
	if (capsb) {
		/* synchronisations meanwhile (of work on another stream, so
		 * that the server is asked): checkpoints come due, deferred */
		CUdeviceptr scratch;
		CK(cuMemAlloc(&scratch, ncap * sizeof(int)));
		void *sargs[] = { &scratch, &ncap };
		for (int i = 0; i < 25; i++) {
			launch1d(f_inc, ncap, s, sargs);
			CK(cuStreamSynchronize(s));
			struct timespec ts = { 0, 100 * 1000 * 1000 };
			nanosleep(&ts, NULL);
		}
		CK(cuMemFree(scratch));
		launch1d(f_inc, ncap, cs, cap_args);
		CUgraph cg;
		CK(cuStreamEndCapture(cs, &cg));
		CK(cuGraphInstantiate(&capx, cg, 0));
		CK(cuGraphDestroy(cg));
		CK(cuGraphLaunch(capx, cs));
		CK(cuStreamSynchronize(cs));
		/* (the checkpoint, with the graph) */
		struct timespec ts = { 0, 300 * 1000 * 1000 };
		nanosleep(&ts, NULL);
		CK(cuCtxSynchronize());
		capturing = 0;
	}
	if (standby) {
		/* after the checkpoint: replayed on the standby */
		for (int i = 0; i < N; i++)
			d[i] = i;
		CK(cuMemAlloc(&dd, N * sizeof(int)));
		CK(cuMemcpyHtoD(dd, d, N * sizeof(int)));
		void *inc_args[] = { &dd, &n };
		launch1d(f_inc, N, s, inc_args);
		launch1d(f_inc, N, s, inc_args);
		scale = 0.5f;
		CK(cuMemcpyHtoD(gscale, &scale, sizeof(scale)));
		CK(cuStreamSynchronize(s));
		/* a server checkpointing every second takes another one here:
		 * recovery then starts from it and replays only what follows */
		struct timespec ts = { 1, 200 * 1000 * 1000 };
		nanosleep(&ts, NULL);
		CK(cuCtxSynchronize());
		launch1d(f_inc, N, s, inc_args);
		CK(cuStreamSynchronize(s));
		if (pools)
			pool_more(&ps, s);
	}
	if (hostfn) {
		CK(cuLaunchHostFunc(s, hostfn_count, NULL));
		CK(cuStreamSynchronize(s));
		CHECK(hostfn_runs == 1, "a host function ran %d times before the move", hostfn_runs);
	}
	CUmemGenericAllocationHandle ph = 0;
	CUdeviceptr pva = 0;
	size_t pg = 0;
	if (vmmpart) {
		CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
					     .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 } };
		CK(cuMemGetAllocationGranularity(&pg, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
		CK(cuMemCreate(&ph, 2 * pg, &prop, 0));
		CK(cuMemAddressReserve(&pva, pg, 0, 0, 0));
		CK(cuMemMap(pva, pg, pg, ph, 0)); /* its second half only */
	}
	wait_go(churn, mchurn, vchurn);
	if (capturing) {
		/* the capture ends after the refused move */
		launch1d(f_inc, ncap, cs, cap_args);
		CUgraph cg;
		CK(cuStreamEndCapture(cs, &cg));
		CK(cuGraphInstantiate(&capx, cg, 0));
		CK(cuGraphDestroy(cg));
	}
	if (capx) {
		/* two increments a launch: launched once before (capsb) */
		CK(cuGraphLaunch(capx, cs));
		CK(cuStreamSynchronize(cs));
		mem_expect(dcap, ncap * sizeof(int), capsb ? 4 : 2,
			   capsb ? "a graph recovered on the standby" : "a capture across the refused move", 0);
		CK(cuGraphExecDestroy(capx));
		CK(cuStreamDestroy(cs));
		CK(cuMemFree(dcap));
	}

	/* ---- after the move: everything as it was ---- */
	CK(cuMemcpyDtoH(c, dc, N * sizeof(float)));
	for (int i = 0; i < N; i++)
		CHECK(c[i] == (a[i] + b[i]) * 3.0f, "c[%d] = %g, want %g", i, c[i], (a[i] + b[i]) * 3.0f);
	int counter = -1;
	CK(cuMemcpyDtoH(&counter, gcount, sizeof(counter)));
	CHECK(counter == N, "g_counter = %d, want %d", counter, N);
	unsigned *bigh = xmalloc((size_t)BIG * 4);
	CK(cuMemcpyDtoH(bigh, dbig, (size_t)BIG * 4));
	for (unsigned i = 0; i < BIG; i++)
		CHECK(bigh[i] == PATTERN, "big[%u] = %#x", i, bigh[i]);
	if (mchurn)
		memchurn(1);
	if (vmm)
		vmm_check(&vs, f_inc, s);
	if (graph)
		graph_check(&gs);
	if (pools)
		pool_check(&ps, s);
	if (gm)
		CK(cuGraphDestroy(gm));
	if (vmmpart) {
		CK(cuMemUnmap(pva, pg));
		CK(cuMemRelease(ph));
		CK(cuMemAddressFree(pva, pg));
	}
	if (hostfn) {
		CK(cuLaunchHostFunc(s, hostfn_count, NULL));
		CK(cuLaunchHostFunc(s, hostfn_count, NULL));
		CK(cuStreamSynchronize(s));
		CHECK(hostfn_runs == 3, "host functions ran %d times in all, want 3", hostfn_runs);
	}
	if (standby) {
		CK(cuMemcpyDtoH(d, dd, N * sizeof(int)));
		for (int i = 0; i < N; i++)
			CHECK(d[i] == i + 3, "d[%d] = %d, want %d", i, d[i], i + 3);
		float back = 0;
		CK(cuMemcpyDtoH(&back, gscale, sizeof(back)));
		CHECK(back == 0.5f, "g_scale = %g, want 0.5", back);
	}
	/* the old stream, event and functions still work */
	CK(cuMemsetD32(dc, 0, N));
	launch1d(f_add, N, s, add_args);
	CK(cuEventRecord(ev, s));
	CK(cuEventSynchronize(ev));
	CK(cuEventQuery(ev));
	CK(cuStreamQuery(s));
	CK(cuMemcpyDtoH(c, dc, N * sizeof(float)));
	for (int i = 0; i < N; i++)
		CHECK(c[i] == a[i] + b[i], "after the move c[%d] = %g, want %g", i, c[i], a[i] + b[i]);
	float one = 1.0f;
	CK(cuMemcpyHtoD(gscale, &one, sizeof(one)));
	launch1d(f_glob, N, s, glob_args);
	CK(cuStreamSynchronize(s));
	CK(cuMemcpyDtoH(&counter, gcount, sizeof(counter)));
	CHECK(counter == 2 * N, "g_counter = %d after another launch, want %d", counter, 2 * N);
	/* new objects next to the old ones, then everything goes */
	CUdeviceptr dn;
	CUstream s2;
	CK(cuMemAlloc(&dn, 4096));
	CK(cuStreamCreate(&s2, 0));
	CK(cuMemsetD32Async(dn, 7, 1024, s2));
	CK(cuStreamSynchronize(s2));
	unsigned seven = 0;
	CK(cuMemcpyDtoH(&seven, dn + 4092, 4));
	CHECK(seven == 7, "a new allocation reads %u", seven);
	CK(cuStreamDestroy(s2));
	CK(cuMemFree(dn));
	CK(cuEventDestroy(ev));
	CK(cuStreamDestroy(s));
	CK(cuMemFree(da));
	CK(cuMemFree(dbig));
	if (dd)
		CK(cuMemFree(dd));
	CK(cuModuleUnload(mod));
	if (xev)
		CK(cuEventDestroy(xev));
	if (xh) {
		close(xfd);
		CK(cuMemUnmap(xva, xg));
		CK(cuMemRelease(xh));
		CK(cuMemAddressFree(xva, xg));
	}
	free(a);
	free(b);
	free(c);
	free(d);
	free(bigh);
	printf("OK\n");
	return 0;
}
