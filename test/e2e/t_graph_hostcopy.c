/* Graphs that copy between host memory the program allocated with malloc
 * (pageable) and device memory, as NVIDIA's simpleCudaGraphs and
 * jacobiCudaGraphs do:
 *  - an explicit graph: memcpy node host -> device, a kernel adding one,
 *    memcpy node device -> host; launched, synchronised, the host output
 *    is the input plus one; the input changed on the host and the graph
 *    launched again: the new input plus one (each launch reads the host
 *    memory as it is then);
 *  - the same captured from a stream (cuMemcpyHtoDAsync, the kernel,
 *    cuMemcpyDtoHAsync), two launches with different inputs;
 *  - a memcpy node naming host memory with CU_MEMORYTYPE_UNIFIED (the
 *    runtime's cudaMemcpyDefault), and one naming device memory so;
 *  - destroying the graphs and executables lets the memory go: the
 *    program's buffers stay usable.
 * Exits non-zero on any mismatch. */
#include "common.h"

#include <stdlib.h>
#include <unistd.h>

#define N 5000

static void check(const int *out, int base, const char *what)
{
	for (int i = 0; i < N; i++)
		if (out[i] != base + i + 1)
			fail("%s: [%d] = %d, want %d", what, i, out[i], base + i + 1);
}

static void fill(int *in, int base)
{
	for (int i = 0; i < N; i++)
		in[i] = base + i;
}

/* Two launches of e, each with a new input from first on (first, then
 * first + step): each must read the host's input as it is then. */
static void rounds(CUgraphExec e, CUstream s, int *in, int *out, int first, int step,
		   const char *what)
{
	for (int round = 0; round < 2; round++) {
		int base = first + step * round;
		fill(in, base);
		memset(out, 0, N * sizeof(int));
		CK(cuGraphLaunch(e, s));
		CK(cuStreamSynchronize(s));
		check(out, base, what);
	}
}

int main(int argc, char **argv)
{
	(void)argc;
	e2e_init(argv[0]);
	CUcontext ctx = primary_ctx(0, NULL);
	CUmodule mod = load_test_module();
	CUfunction finc = get_func(mod, "inc_i32");
	CUstream s;
	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CUdeviceptr d;
	CK(cuMemAlloc(&d, N * sizeof(int)));
	int n = N;
	void *args[] = { &d, &n };
	CUDA_KERNEL_NODE_PARAMS k = kparams(finc, N, args);

	/* explicit: host -> device, +1, device -> host; from pageable memory
	 * as host and as unified addresses, and from pinned memory (over TCP
	 * its device copy is made for the graph, not at a launch) */
	int *in = xmalloc(N * sizeof(int)), *out = xmalloc(N * sizeof(int));
	int *pin_in, *pin_out;
	CK(cuMemHostAlloc((void **)&pin_in, N * sizeof(int), 0));
	CK(cuMemHostAlloc((void **)&pin_out, N * sizeof(int), 0));
	static const char *const what[] = { "host", "unified", "pinned" };
	for (int mode = 0; mode < 3; mode++) {
		int uni = mode == 1;
		int *hi = mode == 2 ? pin_in : in, *ho = mode == 2 ? pin_out : out;
		CUmemorytype ht = uni ? CU_MEMORYTYPE_UNIFIED : CU_MEMORYTYPE_HOST;
		CUgraph g;
		CUgraphNode up, kn, down;
		CK(cuGraphCreate(&g, 0));
		CUDA_MEMCPY3D c1 = copy3d_1d(ht, hi, uni ? (CUdeviceptr)(uintptr_t)hi : 0, CU_MEMORYTYPE_DEVICE,
					  NULL, d, N * sizeof(int));
		CK(cuGraphAddMemcpyNode(&up, g, NULL, 0, &c1, ctx));
		CK(cuGraphAddKernelNode(&kn, g, &up, 1, &k));
		CUDA_MEMCPY3D c2 = copy3d_1d(CU_MEMORYTYPE_DEVICE, NULL, d, ht, ho,
					  uni ? (CUdeviceptr)(uintptr_t)ho : 0, N * sizeof(int));
		CK(cuGraphAddMemcpyNode(&down, g, &kn, 1, &c2, ctx));
		CUgraphExec e;
		CK(cuGraphInstantiate(&e, g, 0));
		rounds(e, s, hi, ho, 1000 + 100 * mode, 1000, what[mode]);
		CK(cuGraphExecDestroy(e));
		CK(cuGraphDestroy(g));
		say("explicit graph (%s memory): two launches, each read the host's input", what[mode]);
	}
	CK(cuMemFreeHost(pin_in));
	CK(cuMemFreeHost(pin_out));

	/* unified addresses naming device memory stay device memory */
	{
		CUdeviceptr d2;
		CK(cuMemAlloc(&d2, N * sizeof(int)));
		CK(cuMemsetD32(d, 77, N));
		CK(cuMemsetD32(d2, 0, N));
		CUgraph g;
		CUgraphNode cn;
		CK(cuGraphCreate(&g, 0));
		CUDA_MEMCPY3D c = copy3d_1d(CU_MEMORYTYPE_UNIFIED, NULL, d, CU_MEMORYTYPE_UNIFIED, NULL, d2,
					 N * sizeof(int));
		CK(cuGraphAddMemcpyNode(&cn, g, NULL, 0, &c, ctx));
		CUgraphExec e;
		CK(cuGraphInstantiate(&e, g, 0));
		CK(cuGraphLaunch(e, s));
		CK(cuStreamSynchronize(s));
		CK(cuMemcpyDtoH(out, d2, N * sizeof(int)));
		for (int i = 0; i < N; i++)
			CHECK(out[i] == 77, "unified device-to-device node: [%d] = %d", i, out[i]);
		CK(cuGraphExecDestroy(e));
		CK(cuGraphDestroy(g));
		CK(cuMemFree(d2));
	}

	/* captured from a stream */
	CUgraph cg;
	CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	CK(cuMemcpyHtoDAsync(d, in, N * sizeof(int), s));
	CK(cuLaunchKernel(finc, k.gridDimX, 1, 1, 256, 1, 1, 0, s, args, NULL));
	CK(cuMemcpyDtoHAsync(out, d, N * sizeof(int), s));
	CK(cuStreamEndCapture(s, &cg));
	size_t nn = 0;
	CK(cuGraphGetNodes(cg, NULL, &nn));
	CHECK(nn == 3, "captured %zu nodes, want 3", nn);
	CUgraphExec ce;
	CK(cuGraphInstantiate(&ce, cg, 0));
	rounds(ce, s, in, out, 7000, 1000, "captured graph");
	CK(cuGraphExecDestroy(ce));
	CK(cuGraphDestroy(cg));
	say("captured graph: two launches, each read the host's input");

	/* a second stream joins the capture by waiting for an event recorded
	 * in it, and copies back to the host there (graphMemoryNodes); ending
	 * the capture on the stream that joined is refused and invalidates
	 * the capture (as the real driver does: 2026-11-28, H200), so the
	 * second capture ends where it began */
	{
		CUstream s2;
		CUevent e1, e2;
		CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
		CK(cuEventCreate(&e1, CU_EVENT_DISABLE_TIMING));
		CK(cuEventCreate(&e2, CU_EVENT_DISABLE_TIMING));
		for (int attempt = 0; attempt < 2; attempt++) {
			CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
			CK(cuMemcpyHtoDAsync(d, in, N * sizeof(int), s));
			CK(cuLaunchKernel(finc, k.gridDimX, 1, 1, 256, 1, 1, 0, s, args, NULL));
			CK(cuEventRecord(e1, s));
			CK(cuStreamWaitEvent(s2, e1, 0));
			CUstreamCaptureStatus st2 = CU_STREAM_CAPTURE_STATUS_NONE;
			CK(cuStreamIsCapturing(s2, &st2));
			CHECK(st2 == CU_STREAM_CAPTURE_STATUS_ACTIVE, "the waiting stream did not join the capture");
			CK(cuMemcpyDtoHAsync(out, d, N * sizeof(int), s2));
			CK(cuEventRecord(e2, s2));
			CK(cuStreamWaitEvent(s, e2, 0));
			if (attempt == 0) {
				EXPECT_RC(cuStreamEndCapture(s2, &cg), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED);
				EXPECT_RC(cuStreamEndCapture(s, &cg), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
			} else {
				CK(cuStreamEndCapture(s, &cg));
			}
			CK(cuStreamIsCapturing(s2, &st2));
			CHECK(st2 == CU_STREAM_CAPTURE_STATUS_NONE, "the joined stream still captures");
		}
		CK(cuGraphInstantiate(&ce, cg, 0));
		rounds(ce, s, in, out, 9000, 1000, "captured on two streams");
		CK(cuGraphExecDestroy(ce));
		CK(cuGraphDestroy(cg));
		CK(cuEventDestroy(e1));
		CK(cuEventDestroy(e2));
		CK(cuStreamDestroy(s2));
		say("captured on two streams: the second joined by an event, copied to the host");
	}

	/* a graph's registration and the program's own (cuMemHostRegister
	 * with a device mapping) on one page: the program's is protected to
	 * see host writes, and a write to the graph's bytes beside it must
	 * not fault the program */
	{
		long pg = sysconf(_SC_PAGESIZE);
		char *blk = aligned_alloc((size_t)pg, 4 * (size_t)pg);
		CHECK(blk != NULL, "aligned_alloc");
		int *gin = (int *)(blk + 64), *reg = (int *)(blk + pg / 2), *gout = xmalloc(64 * sizeof(int));
		/* (zeros, not the graph's values; and defined for valgrind,
		 * which does not see rgpud write the page when a registration
		 * made it shared memory) */
		memset(gout, 0, 64 * sizeof(int));
		int sixty4 = 64;
		void *sargs[] = { &d, &sixty4 };
		CUgraph g;
		CUgraphNode up, kn, down;
		CK(cuGraphCreate(&g, 0));
		CUDA_MEMCPY3D c1 = copy3d_1d(CU_MEMORYTYPE_HOST, gin, 0, CU_MEMORYTYPE_DEVICE, NULL, d, 64 * sizeof(int));
		CK(cuGraphAddMemcpyNode(&up, g, NULL, 0, &c1, ctx));
		CUDA_KERNEL_NODE_PARAMS k64 = k;
		k64.gridDimX = 1;
		k64.kernelParams = sargs;
		CK(cuGraphAddKernelNode(&kn, g, &up, 1, &k64));
		CUDA_MEMCPY3D c2 = copy3d_1d(CU_MEMORYTYPE_DEVICE, NULL, d, CU_MEMORYTYPE_HOST, gout, 0, 64 * sizeof(int));
		CK(cuGraphAddMemcpyNode(&down, g, &kn, 1, &c2, ctx));
		CUgraphExec e;
		CK(cuGraphInstantiate(&e, g, 0));
		for (int i = 0; i < 64; i++)
			reg[i] = 500 + i;
		CK(cuMemHostRegister(reg, 64 * sizeof(int), CU_MEMHOSTREGISTER_DEVICEMAP));
		CUdeviceptr rd;
		CK(cuMemHostGetDevicePointer(&rd, reg, 0));
		void *rargs[] = { &rd, &sixty4 };
		CK(cuLaunchKernel(finc, 1, 1, 1, 256, 1, 1, 0, s, rargs, NULL));
		CK(cuStreamSynchronize(s));
		for (int i = 0; i < 64; i++) /* (a write on the shared page) */
			gin[i] = 900 + i;
		CK(cuGraphLaunch(e, s));
		CK(cuStreamSynchronize(s));
		for (int i = 0; i < 64; i++) {
			CHECK(gout[i] == 901 + i, "shared page: graph output [%d] = %d", i, gout[i]);
			CHECK(reg[i] == 501 + i, "shared page: registered [%d] = %d", i, reg[i]);
		}
		CK(cuMemHostUnregister(reg));
		CK(cuGraphExecDestroy(e));
		CK(cuGraphDestroy(g));
		free(gout);
		free(blk);
		say("a graph's registration and the program's on one page");
	}

	/* the graphs' registrations went with them: a copy naming more of the
	 * same memory than any earlier one is registered afresh */
	{
		CUgraph g;
		CUgraphNode up;
		CK(cuGraphCreate(&g, 0));
		CUDA_MEMCPY3D c = copy3d_1d(CU_MEMORYTYPE_HOST, (const char *)in + 8, 0, CU_MEMORYTYPE_DEVICE,
					 NULL, d, N * sizeof(int));
		CK(cuGraphAddMemcpyNode(&up, g, NULL, 0, &c, ctx));
		CK(cuGraphDestroy(g));
	}

	/* the program's memory is its own again: plain copies, and a free */
	fill(in, 42);
	CK(cuMemcpyHtoD(d, in, N * sizeof(int)));
	CK(cuMemcpyDtoH(out, d, N * sizeof(int)));
	for (int i = 0; i < N; i++)
		CHECK(out[i] == 42 + i, "plain copy after the graphs: [%d] = %d", i, out[i]);
	free(in);
	free(out);
	CK(cuMemFree(d));
	CK(cuStreamDestroy(s));
	CK(cuModuleUnload(mod));
	printf("t_graph_hostcopy: OK\n");
	return 0;
}
