/* Events of a whole context: cuCtxRecordEvent captures the work of every
 * stream of the context (non-blocking ones too), and after cuCtxWaitEvent
 * all later work of the context waits for the event, on streams made
 * before and after the call.  Each check reads a value a slow kernel
 * writes at its end: were the ordering missing, the copy would read the
 * old value (a slow host can only hide a fault, never fake one).  Runs on
 * the real driver too. */
#include "common.h"

#define SLOW_NS 200000000ull /* 200 ms */

static unsigned read_u32(CUdeviceptr p, CUstream s)
{
	unsigned v = 0xdeadbeef;
	CK(cuMemcpyDtoHAsync(&v, p, sizeof(v), s));
	CK(cuStreamSynchronize(s));
	return v;
}

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	(void)argc;
	CUcontext ctx = primary_ctx(0, NULL);
	CUmodule mod = load_test_module();
	CUfunction busy = get_func(mod, "busy_wait_ns");
	CUfunction fill = get_func(mod, "fill_u32");
	CUstream slow, reader;
	CK(cuStreamCreate(&slow, CU_STREAM_NON_BLOCKING));
	CK(cuStreamCreate(&reader, CU_STREAM_NON_BLOCKING));
	CUdeviceptr out, res;
	CK(cuMemAlloc(&out, 4));
	CK(cuMemAlloc(&res, 16));
	unsigned long long one = 1, ns = SLOW_NS;

	/* ---- record: the slow stream's work is in it ---- */
	CK(cuMemsetD32(out, 0, 1));
	CUevent ev;
	CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
	void *bargs[] = { &ns };
	launch1d(busy, 1, slow, bargs);
	unsigned five = 5;
	void *fargs[] = { &out, &five, &one };
	launch1d(fill, 1, slow, fargs);
	CK(cuCtxRecordEvent(ctx, ev));
	CK(cuEventSynchronize(ev));
	CK(cuEventQuery(ev));
	/* read on a stream that does not wait for the slow one */
	unsigned v = read_u32(out, reader);
	CHECK(v == 5, "after the context's event: %u, want 5 (the non-blocking stream's work was not in it)", v);

	/* ---- wait: streams made before and after wait ---- */
	CK(cuMemsetD32(out, 0, 1));
	CK(cuMemsetD32(res, 0, 4));
	CK(cuCtxSynchronize());
	CUevent ev2;
	CK(cuEventCreate(&ev2, CU_EVENT_DISABLE_TIMING));
	unsigned nine = 9;
	void *f9[] = { &out, &nine, &one };
	launch1d(busy, 1, slow, bargs);
	launch1d(fill, 1, slow, f9);
	CK(cuEventRecord(ev2, slow));
	CK(cuCtxWaitEvent(ctx, ev2));
	CK(cuMemcpyDtoDAsync(res, out, 4, reader)); /* made before the wait */
	CUstream later;
	CK(cuStreamCreate(&later, CU_STREAM_NON_BLOCKING));
	CK(cuMemcpyDtoDAsync(res + 4, out, 4, later)); /* made after it */
	CK(cuStreamSynchronize(later));
	unsigned r1 = read_u32(res, reader), r2 = read_u32(res + 4, reader);
	CHECK(r1 == 9, "a stream made before cuCtxWaitEvent read %u, want 9 (it did not wait)", r1);
	CHECK(r2 == 9, "a stream made after cuCtxWaitEvent read %u, want 9 (it did not wait)", r2);
	CK(cuCtxSynchronize());

	/* ---- errors ---- */
	CUcontext other;
	CK(cuCtxCreate(&other, NULL, 0, 0));
	CUevent foreign;
	CK(cuEventCreate(&foreign, CU_EVENT_DISABLE_TIMING));
	CK(cuCtxSetCurrent(ctx));
	EXPECT_RC(cuCtxRecordEvent(ctx, foreign), CUDA_ERROR_INVALID_HANDLE);
	/* another context's event may be waited for */
	CK(cuCtxWaitEvent(ctx, foreign));
	CK(cuCtxSetCurrent(other));
	CK(cuEventDestroy(foreign));
	CK(cuCtxSetCurrent(ctx));
	CK(cuCtxDestroy(other));
	CK(cuCtxSetCurrent(ctx));
	if (via_rgpu())
		EXPECT_RC(cuCtxRecordEvent(NULL, ev), CUDA_ERROR_INVALID_CONTEXT);
	/* a stream of the context capturing: refused, the capture invalidated */
	CUstream cap;
	CK(cuStreamCreate(&cap, CU_STREAM_NON_BLOCKING));
	CK(cuStreamBeginCapture(cap, CU_STREAM_CAPTURE_MODE_RELAXED));
	launch1d(fill, 1, cap, fargs);
	EXPECT_RC(cuCtxRecordEvent(ctx, ev), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	CUgraph g = NULL;
	CUresult erc = cuStreamEndCapture(cap, &g);
	CHECK(erc != CUDA_SUCCESS, "the capture went on after cuCtxRecordEvent refused it");
	if (g)
		CK(cuGraphDestroy(g));
	CK(cuStreamDestroy(cap));

	CK(cuEventDestroy(ev));
	CK(cuEventDestroy(ev2));
	CK(cuStreamDestroy(slow));
	CK(cuStreamDestroy(reader));
	CK(cuStreamDestroy(later));
	CK(cuMemFree(out));
	CK(cuMemFree(res));
	CK(cuModuleUnload(mod));
	primary_ctx_release(0);
	say("PASS");
	return 0;
}
