/* Green contexts (a partition of the GPU's SMs):
 *  - the device's SM resource has every SM; a split counted, then made
 *    (groups of at least 16 SMs, and what remains), a split's result not
 *    split again; a descriptor of one group, and of two groups together;
 *  - a green context of one group: its resource, its conversion's
 *    resource; flags without the default stream refused; the conversion
 *    cannot be cuCtxDestroy'd;
 *  - in it: a module, a stream (cuGreenCtxStreamCreate; a blocking one
 *    refused), a kernel on memory the primary context allocated and on
 *    memory allocated while the green context is current, the stream's
 *    green context and contexts (cuStreamGetGreenCtx, cuStreamGetCtx_v2),
 *    a whole-green-context event the primary context's stream waits for;
 *  - after cuGreenCtxDestroy the memory allocated in it is still the
 *    primary context's, with what the kernel wrote.
 * Exits non-zero on any mismatch. */
#include "common.h"

static unsigned sms_of(const CUdevResource *r)
{
	CHECK(r->type == CU_DEV_RESOURCE_TYPE_SM, "resource type %d, want SM", (int)r->type);
	return r->sm.smCount;
}

int main(int argc, char **argv)
{
	(void)argc;
	e2e_init(argv[0]);
	CUdevice dev;
	CUcontext pctx = primary_ctx(0, &dev);
	int sms = 0;
	CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
	CUdevResource all;
	memset(&all, 0, sizeof(all));
	CUresult rc = cuDeviceGetDevResource(dev, &all, CU_DEV_RESOURCE_TYPE_SM);
	if (rc == CUDA_ERROR_NOT_SUPPORTED)
		skip("no green contexts on this device");
	CK(rc);
	CHECK(sms_of(&all) == (unsigned)sms, "the device's SM resource has %u SMs, the device %d",
	      all.sm.smCount, sms);
	say("device resource: %u SMs, partitions of at least %u, aligned to %u", all.sm.smCount,
	    all.sm.minSmPartitionSize, all.sm.smCoscheduledAlignment);

	/* split: counted, then made */
	unsigned n = 0;
	CK(cuDevSmResourceSplitByCount(NULL, &n, &all, NULL, 0, 16));
	CHECK(n >= 2 && n <= (unsigned)sms / 16, "a split in groups of 16 SMs would make %u", n);
	CUdevResource grp[2], rem;
	unsigned ng = 2;
	CK(cuDevSmResourceSplitByCount(grp, &ng, &all, &rem, 0, 16));
	CHECK(ng == 2, "asked for 2 groups, got %u", ng);
	CHECK(sms_of(&grp[0]) >= 16 && sms_of(&grp[1]) == grp[0].sm.smCount, "groups of %u and %u SMs",
	      grp[0].sm.smCount, grp[1].sm.smCount);
	CHECK(grp[0].sm.smCount * 2 + rem.sm.smCount <= (unsigned)sms, "groups %u x 2 and %u remaining of %d",
	      grp[0].sm.smCount, rem.sm.smCount, sms);
	unsigned again = 1;
	CUdevResource sub;
	CHECK(cuDevSmResourceSplitByCount(&sub, &again, &grp[0], NULL, 0, 8) != CUDA_SUCCESS,
	      "a split's result split again");
	say("split: %u groups possible, 2 of %u SMs made, %u remaining", n, grp[0].sm.smCount, rem.sm.smCount);

	CUdevResourceDesc desc, desc2;
	CK(cuDevResourceGenerateDesc(&desc, &grp[0], 1));
	CK(cuDevResourceGenerateDesc(&desc2, grp, 2));
	CUgreenCtx g, g2;
	CHECK(cuGreenCtxCreate(&g, desc, dev, 0) != CUDA_SUCCESS, "a green context without its default stream");
	CK(cuGreenCtxCreate(&g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
	CUdevResource gr;
	CK(cuGreenCtxGetDevResource(g, &gr, CU_DEV_RESOURCE_TYPE_SM));
	CHECK(sms_of(&gr) == grp[0].sm.smCount, "the green context has %u SMs, its group %u", gr.sm.smCount,
	      grp[0].sm.smCount);
	CUcontext gctx;
	CK(cuCtxFromGreenCtx(&gctx, g));
	CHECK(gctx && gctx != pctx, "the conversion is the primary context itself");
	CK(cuCtxGetDevResource(gctx, &gr, CU_DEV_RESOURCE_TYPE_SM));
	CHECK(sms_of(&gr) == grp[0].sm.smCount, "the conversion's resource has %u SMs", gr.sm.smCount);
	CK(cuGreenCtxCreate(&g2, desc2, dev, CU_GREEN_CTX_DEFAULT_STREAM));
	CK(cuGreenCtxGetDevResource(g2, &gr, CU_DEV_RESOURCE_TYPE_SM));
	CHECK(sms_of(&gr) == 2 * grp[0].sm.smCount, "a green context of two groups has %u SMs", gr.sm.smCount);
	unsigned long long id1 = 0, id2 = 0;
	CK(cuGreenCtxGetId(g, &id1));
	CK(cuGreenCtxGetId(g2, &id2));
	CHECK(id1 != id2, "two green contexts with one id %llu", id1);
	say("green contexts of %u and %u SMs", grp[0].sm.smCount, gr.sm.smCount);

	/* work in the green context */
	const int count = 1 << 16;
	const size_t bytes = count * sizeof(int);
	CUdeviceptr a, b;
	CK(cuMemAlloc(&a, bytes)); /* the primary context's */
	CK(cuMemsetD32(a, 5, count));
	CK(cuCtxPushCurrent(gctx));
	CHECK(cuCtxDestroy(gctx) != CUDA_SUCCESS, "a green context's conversion destroyed by cuCtxDestroy");
	CUexecAffinityParam aff;
	memset(&aff, 0, sizeof(aff));
	CUresult arc = cuCtxGetExecAffinity(&aff, CU_EXEC_AFFINITY_TYPE_SM_COUNT);
	say("the green context's execution affinity: %u SMs (%s)", aff.param.smCount.val, cu_name(arc));
	CK(cuMemAlloc(&b, bytes)); /* allocated in the green context: the primary's too */
	CK(cuMemsetD32(b, 40, count));
	CUmodule mod = load_test_module();
	CUfunction inc = get_func(mod, "inc_i32");
	CUstream gs, bad;
	CHECK(cuGreenCtxStreamCreate(&bad, g, CU_STREAM_DEFAULT, 0) != CUDA_SUCCESS,
	      "a blocking stream in a green context");
	CK(cuGreenCtxStreamCreate(&gs, g, CU_STREAM_NON_BLOCKING, 0));
	CUgreenCtx sg = NULL;
	CK(cuStreamGetGreenCtx(gs, &sg));
	CHECK(sg == g, "cuStreamGetGreenCtx: %p, want %p", (void *)sg, (void *)g);
	CUcontext sc = NULL;
	sg = NULL;
	CK(cuStreamGetCtx_v2(gs, &sc, &sg));
	CHECK(sg == g && sc == pctx, "cuStreamGetCtx_v2: context %p green %p, want %p and %p", (void *)sc,
	      (void *)sg, (void *)pctx, (void *)g);
	int nn = count;
	void *aa[] = { &a, &nn }, *ba[] = { &b, &nn };
	for (int i = 0; i < 3; i++)
		launch1d(inc, count, gs, aa);
	launch1d(inc, count, gs, ba);
	CUevent ev;
	CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
	CK(cuGreenCtxRecordEvent(g, ev));
	CUcontext was;
	CK(cuCtxPopCurrent(&was));
	CHECK(was == gctx, "popped %p, want the green context %p", (void *)was, (void *)gctx);

	/* the primary context waits for the green context's work */
	CUstream ps;
	CK(cuStreamCreate(&ps, CU_STREAM_NON_BLOCKING));
	CK(cuStreamGetGreenCtx(ps, &sg));
	CHECK(sg == NULL, "a primary context's stream has green context %p", (void *)sg);
	CK(cuStreamWaitEvent(ps, ev, 0));
	int *h = xmalloc(bytes);
	CK(cuMemcpyDtoHAsync(h, a, bytes, ps));
	CK(cuStreamSynchronize(ps));
	for (int i = 0; i < count; i++)
		if (h[i] != 8)
			fail("a[%d] = %d after three increments in the green context, want 8", i, h[i]);
	say("kernels in a green context's stream; the primary context waited for its event");

	CK(cuStreamDestroy(gs));
	CK(cuCtxPushCurrent(gctx));
	CK(cuEventDestroy(ev));
	CK(cuModuleUnload(mod));
	CK(cuCtxPopCurrent(&was));
	CK(cuGreenCtxDestroy(g));
	CK(cuGreenCtxDestroy(g2));
	/* what was allocated in the green context outlives it */
	CK(cuMemcpyDtoH(h, b, bytes));
	for (int i = 0; i < count; i++)
		if (h[i] != 41)
			fail("b[%d] = %d after the green context went, want 41", i, h[i]);
	say("memory allocated in a green context outlives it");
	int res[3] = { (int)grp[0].sm.smCount, (int)rem.sm.smCount, h[0] };
	result("green", res, sizeof(res));
	free(h);
	CK(cuMemFree(b));
	CK(cuMemFree(a));
	CK(cuStreamDestroy(ps));
	say("PASS");
	return 0;
}
