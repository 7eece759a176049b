/* Stream memory operations, batches of copies and the small queries:
 *  - cuStreamWaitValue32 holds its stream until another stream's
 *    cuStreamWriteValue32 lets it go (and only then does the work queued
 *    behind it run); 64-bit values, cuStreamBatchMemOp;
 *  - cuMemcpyBatchAsync: host to device, device to device and device to
 *    host in one batch, a host source read before the call returns;
 *  - cuDeviceGetByPCIBusId, cuStreamGetDevice, cuFuncGetModule,
 *    cuFuncIsLoaded, cuKernelGetLibrary, cuOccupancyMaxPotentialClusterSize,
 *    cuDeviceGetHostAtomicCapabilities, cuMemcpy3DPeer in one context.
 * Runs on the real driver too. */
#include "common.h"

#include <time.h>

static uint32_t read32(CUdeviceptr p, CUstream s)
{
	uint32_t v = 0;
	CK(cuMemcpyDtoHAsync(&v, p, 4, s));
	CK(cuStreamSynchronize(s));
	return v;
}

static void nap_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

static void memops(void)
{
	CUstream a, b;
	CK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
	CK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
	CUdeviceptr w;
	CK(cuMemAlloc(&w, 64));
	CK(cuMemsetD8(w, 0, 64));
	CUdeviceptr flag = w, out = w + 4, big = w + 8, big2 = w + 16, out2 = w + 24;

	CK(cuStreamWriteValue32(b, out, 0x1234u, 0));
	CHECK(read32(out, b) == 0x1234u, "cuStreamWriteValue32 wrote %#x", read32(out, b));
	CK(cuStreamWriteValue32(b, out, 0, 0));
	CK(cuStreamSynchronize(b));

	/* a waits for the flag, then writes out */
	CK(cuStreamWaitValue32(a, flag, 1, CU_STREAM_WAIT_VALUE_GEQ));
	CK(cuStreamWriteValue32(a, out, 42, 0));
	nap_ms(100);
	EXPECT_RC(cuStreamQuery(a), CUDA_ERROR_NOT_READY);
	CHECK(read32(out, b) == 0, "the write behind the wait ran before the flag was set");
	CK(cuStreamWriteValue32(b, flag, 1, 0));
	CK(cuStreamSynchronize(a));
	CHECK(read32(out, b) == 42, "after the flag: out %u, want 42", read32(out, b));

	/* 64-bit values: a waits for an exact value */
	CK(cuStreamWaitValue64(a, big, 0x100000000ull + 7, CU_STREAM_WAIT_VALUE_EQ));
	CK(cuStreamWriteValue32(a, out, 43, 0));
	CK(cuStreamWriteValue64(b, big, 7, 0)); /* not it: the high word differs */
	CK(cuStreamSynchronize(b));
	nap_ms(50);
	EXPECT_RC(cuStreamQuery(a), CUDA_ERROR_NOT_READY);
	CK(cuStreamWriteValue64(b, big, 0x100000000ull + 7, 0));
	CK(cuStreamSynchronize(a));
	CHECK(read32(out, b) == 43, "after the 64-bit value: out %u", read32(out, b));

	/* a batch: a wait already satisfied, two writes */
	CUstreamBatchMemOpParams ops[3];
	memset(ops, 0, sizeof ops);
	ops[0].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
	ops[0].waitValue.address = flag;
	ops[0].waitValue.value = 1;
	ops[0].waitValue.flags = CU_STREAM_WAIT_VALUE_AND;
	ops[1].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
	ops[1].writeValue.address = big2;
	ops[1].writeValue.value64 = 0xfeedface00c0ffeeull;
	ops[2].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
	ops[2].writeValue.address = out2;
	ops[2].writeValue.value = 99;
	CK(cuStreamBatchMemOp(a, 3, ops, 0));
	CK(cuStreamSynchronize(a));
	uint64_t got64 = 0;
	CK(cuMemcpyDtoH(&got64, big2, 8));
	CHECK(got64 == 0xfeedface00c0ffeeull, "batch 64-bit write: %#llx", (unsigned long long)got64);
	CHECK(read32(out2, b) == 99, "batch 32-bit write: %u", read32(out2, b));

	/* refused: a misaligned word */
	EXPECT_RC(cuStreamWriteValue32(a, w + 2, 1, 0), CUDA_ERROR_INVALID_VALUE);
	CK(cuMemFree(w));
	CK(cuStreamDestroy(a));
	CK(cuStreamDestroy(b));
}

static void batch_copies(void)
{
	CUstream s;
	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	const size_t n = 3u << 20;
	unsigned char *src = xmalloc(n), *back = xmalloc(n);
	for (size_t i = 0; i < n; i++)
		src[i] = (unsigned char)(i * 7 + 3);
	CUdeviceptr d1, d2;
	CK(cuMemAlloc(&d1, n));
	CK(cuMemAlloc(&d2, n));
	CUdeviceptr dsts[] = { d1, d2, (CUdeviceptr)(uintptr_t)back };
	CUdeviceptr srcs[] = { (CUdeviceptr)(uintptr_t)src, d1, d2 };
	size_t sizes[] = { n, n, n };
	/* the host source is read during the call; the other two in stream
	 * order (they depend on the first: one batch each) */
	CUmemcpyAttributes at = { .srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL };
	size_t idx0 = 0;
	CK(cuMemcpyBatchAsync(dsts, srcs, sizes, 1, &at, &idx0, 1, s));
	memset(src, 0xee, n); /* too late to change what was copied */
	CUmemcpyAttributes at2[2] = { { .srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM },
				      { .srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM } };
	size_t idx[2] = { 0, 0 };
	CK(cuMemcpyBatchAsync(dsts + 1, srcs + 1, sizes + 1, 1, at2, idx, 1, s));
	CK(cuMemcpyBatchAsync(dsts + 2, srcs + 2, sizes + 2, 1, at2, idx, 1, s));
	CK(cuStreamSynchronize(s));
	for (size_t i = 0; i < n; i++)
		if (back[i] != (unsigned char)(i * 7 + 3))
			fail("batch copies: byte %zu is %#x, want %#x", i, back[i], (unsigned char)(i * 7 + 3));
	/* refused: the legacy stream, a first index that is not 0 */
	EXPECT_RC(cuMemcpyBatchAsync(dsts, srcs, sizes, 1, &at, &idx0, 1, CU_STREAM_LEGACY), CUDA_ERROR_INVALID_VALUE);
	size_t one = 1;
	EXPECT_RC(cuMemcpyBatchAsync(dsts, srcs, sizes, 2, at2, &one, 1, s), CUDA_ERROR_INVALID_VALUE);
	CUmemcpyAttributes bad = { .srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_INVALID };
	EXPECT_RC(cuMemcpyBatchAsync(dsts, srcs, sizes, 1, &bad, &idx0, 1, s), CUDA_ERROR_INVALID_VALUE);
	CK(cuMemFree(d1));
	CK(cuMemFree(d2));
	free(src);
	free(back);
	CK(cuStreamDestroy(s));
}

static void queries(CUdevice dev, CUmodule mod, CUfunction fn)
{
	char bus[32];
	CK(cuDeviceGetPCIBusId(bus, sizeof bus, dev));
	CUdevice again = -1;
	CK(cuDeviceGetByPCIBusId(&again, bus));
	CHECK(again == dev, "device of bus id %s: %d, want %d", bus, again, dev);
	EXPECT_RC(cuDeviceGetByPCIBusId(&again, "not a bus id"), CUDA_ERROR_INVALID_VALUE);

	CUstream s;
	CK(cuStreamCreate(&s, 0));
	CUdevice sd = -1;
	CK(cuStreamGetDevice(s, &sd));
	CHECK(sd == dev, "stream's device %d, want %d", sd, dev);
	CK(cuStreamDestroy(s));

	CUmodule fm = NULL;
	CK(cuFuncGetModule(&fm, fn));
	CHECK(fm == mod, "function's module %p, want %p", (void *)fm, (void *)mod);
	CK(cuFuncLoad(fn));
	CUfunctionLoadingState st = CU_FUNCTION_LOADING_STATE_MAX;
	CK(cuFuncIsLoaded(&st, fn));
	CHECK(st == CU_FUNCTION_LOADING_STATE_LOADED, "loading state %d", (int)st);

	CUlibrary lib;
	CK(cuLibraryLoadData(&lib, test_kernels_fatbin, NULL, NULL, 0, NULL, NULL, 0));
	CUkernel k;
	CK(cuLibraryGetKernel(&k, lib, "vec_add"));
	CUlibrary kl = NULL;
	CK(cuKernelGetLibrary(&kl, k));
	CHECK(kl == lib, "kernel's library %p, want %p", (void *)kl, (void *)lib);
	CK(cuLibraryUnload(lib));

	CUlaunchConfig cfg = { .gridDimX = 64, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 128, .blockDimY = 1,
			       .blockDimZ = 1 };
	int cs = 0;
	CK(cuOccupancyMaxPotentialClusterSize(&cs, fn, &cfg));
	CHECK(cs >= 1 && cs <= 16, "max potential cluster size %d", cs);

	CUatomicOperation aops[] = { CU_ATOMIC_OPERATION_INTEGER_ADD, CU_ATOMIC_OPERATION_CAS };
	unsigned caps[2] = { 77, 77 };
	CK(cuDeviceGetHostAtomicCapabilities(caps, aops, 2, dev));
	if (via_rgpu())
		CHECK(caps[0] == 0 && caps[1] == 0, "host atomics through rgpu: %#x %#x", caps[0], caps[1]);
	CUatomicOperation badop = CU_ATOMIC_OPERATION_MAX;
	EXPECT_RC(cuDeviceGetHostAtomicCapabilities(caps, &badop, 1, dev), CUDA_ERROR_INVALID_VALUE);
}

/* a pitched 2D region copied within one context through cuMemcpy3DPeer */
static void copy3d_peer(CUcontext ctx)
{
	const size_t w = 300, h = 40, sp = 512, dp = 384;
	CUdeviceptr a, b;
	CK(cuMemAlloc(&a, sp * h));
	CK(cuMemAlloc(&b, dp * h));
	unsigned char *host = xmalloc(sp * h), *back = xmalloc(dp * h);
	for (size_t i = 0; i < sp * h; i++)
		host[i] = (unsigned char)(i % 251);
	CK(cuMemcpyHtoD(a, host, sp * h));
	CK(cuMemsetD8(b, 0, dp * h));
	CUDA_MEMCPY3D_PEER p = { .srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = a, .srcPitch = sp,
				 .srcHeight = h, .srcContext = ctx, .dstMemoryType = CU_MEMORYTYPE_DEVICE,
				 .dstDevice = b, .dstPitch = dp, .dstHeight = h, .dstContext = ctx,
				 .WidthInBytes = w, .Height = h, .Depth = 1 };
	CK(cuMemcpy3DPeer(&p));
	CK(cuMemcpyDtoH(back, b, dp * h));
	for (size_t y = 0; y < h; y++)
		for (size_t x = 0; x < dp; x++) {
			unsigned char want = x < w ? host[y * sp + x] : 0;
			if (back[y * dp + x] != want)
				fail("cuMemcpy3DPeer: (%zu, %zu) is %u, want %u", x, y, back[y * dp + x], want);
		}
	CK(cuMemFree(a));
	CK(cuMemFree(b));
	free(host);
	free(back);
}

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	(void)argc;
	CUdevice dev;
	CUcontext ctx = primary_ctx(0, &dev);
	CUmodule mod = load_test_module();
	CUfunction fn = get_func(mod, "vec_add");
	memops();
	batch_copies();
	queries(dev, mod, fn);
	copy3d_peer(ctx);
	say("stream memory operations, batched copies and the small queries answered as the driver does");
	return 0;
}
