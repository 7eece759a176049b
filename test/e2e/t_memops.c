/* Stream memory operations, batches of copies and the small queries:
 *  - cuStreamWaitValue32 holds its stream until another stream's
 *    cuStreamWriteValue32 lets it go (and only then does the work queued
 *    behind it run); 64-bit values, cuStreamBatchMemOp;
 *  - cuMemcpyBatchAsync: host to device, device to device and device to
 *    host, a host source read before the call returns; cuMemcpy3DBatchAsync
 *    between host rows, a 2D array and pitched device memory;
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

	/* the CUDA 11 names (what cuGetProcAddress gives for 11.x): the same */
	CUresult (*w32_v1)(CUstream, CUdeviceptr, cuuint32_t, unsigned) = NULL;
	CUdriverProcAddressQueryResult q;
	CK(cuGetProcAddress_v2("cuStreamWriteValue32", (void **)&w32_v1, 11070, CU_GET_PROC_ADDRESS_DEFAULT, &q));
	CHECK(w32_v1 && q == CU_GET_PROC_ADDRESS_SUCCESS, "no cuStreamWriteValue32 for CUDA 11.7");
	CK(w32_v1(b, out, 0x5151u, 0));
	CHECK(read32(out, b) == 0x5151u, "cuStreamWriteValue32 (11.7) wrote %#x", read32(out, b));

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

/* host rows into a 2D array and back out into pitched device memory, then
 * to the host: three batches of one 3D copy each */
static void batch_copies_3d(void)
{
	CUstream s;
	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	const size_t w = 64, h = 16, hostrow = 80, devrow = 96; /* in floats */
	float *src = xmalloc(hostrow * h * 4), *back = xmalloc(devrow * h * 4);
	for (size_t i = 0; i < hostrow * h; i++)
		src[i] = (float)i * 0.5f;
	memset(back, 0, devrow * h * 4);
	CUDA_ARRAY3D_DESCRIPTOR ad = { .Width = w, .Height = h, .Depth = 0, .Format = CU_AD_FORMAT_FLOAT,
				       .NumChannels = 1 };
	CUarray arr;
	CK(cuArray3DCreate(&arr, &ad));
	CUdeviceptr d;
	CK(cuMemAlloc(&d, devrow * h * 4));
	CK(cuMemsetD8(d, 0, devrow * h * 4));
	CUDA_MEMCPY3D_BATCH_OP op = { 0 };
	op.extent = (CUextent3D){ w, h, 1 };
	op.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
	op.src.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
	op.src.op.ptr.ptr = (CUdeviceptr)(uintptr_t)src;
	op.src.op.ptr.rowLength = hostrow;
	op.dst.type = CU_MEMCPY_OPERAND_TYPE_ARRAY;
	op.dst.op.array.array = arr;
	CK(cuMemcpy3DBatchAsync(1, &op, 0, s));
	CUDA_MEMCPY3D_BATCH_OP op2 = op;
	op2.src = op.dst;
	op2.dst.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
	op2.dst.op.ptr.ptr = d;
	op2.dst.op.ptr.rowLength = devrow;
	CK(cuMemcpy3DBatchAsync(1, &op2, 0, s));
	CUDA_MEMCPY3D_BATCH_OP op3 = { 0 };
	op3.extent = (CUextent3D){ devrow * 4, h, 1 }; /* bytes: pointer to pointer */
	op3.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
	op3.src.type = op3.dst.type = CU_MEMCPY_OPERAND_TYPE_POINTER;
	op3.src.op.ptr.ptr = d;
	op3.dst.op.ptr.ptr = (CUdeviceptr)(uintptr_t)back;
	CK(cuMemcpy3DBatchAsync(1, &op3, 0, s));
	CK(cuStreamSynchronize(s));
	for (size_t y = 0; y < h; y++)
		for (size_t x = 0; x < devrow; x++) {
			float want = x < w ? src[y * hostrow + x] : 0.0f;
			if (back[y * devrow + x] != want)
				fail("3D batch: (%zu, %zu) is %g, want %g", x, y, back[y * devrow + x], want);
		}
	op3.extent.depth = 0;
	EXPECT_RC(cuMemcpy3DBatchAsync(1, &op3, 0, s), CUDA_ERROR_INVALID_VALUE);
	CK(cuArrayDestroy(arr));
	CK(cuMemFree(d));
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

	/* pools by location (CUDA 13): a device's pinned pools */
	CUmemLocation dl = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev };
	CUmemoryPool p1 = NULL, p2 = NULL, mine, cur = NULL;
	CK(cuMemGetDefaultMemPool(&p1, &dl, CU_MEM_ALLOCATION_TYPE_PINNED));
	CK(cuDeviceGetDefaultMemPool(&p2, dev));
	CHECK(p1 == p2, "default pool by location %p, by device %p", (void *)p1, (void *)p2);
	CUmemPoolProps pp = { .allocType = CU_MEM_ALLOCATION_TYPE_PINNED, .location = dl };
	CK(cuMemPoolCreate(&mine, &pp));
	CK(cuMemSetMemPool(&dl, CU_MEM_ALLOCATION_TYPE_PINNED, mine));
	CK(cuMemGetMemPool(&cur, &dl, CU_MEM_ALLOCATION_TYPE_PINNED));
	CHECK(cur == mine, "current pool %p, set %p", (void *)cur, (void *)mine);
	CK(cuDeviceGetMemPool(&cur, dev));
	CHECK(cur == mine, "the device's current pool %p, set %p", (void *)cur, (void *)mine);
	CK(cuMemSetMemPool(&dl, CU_MEM_ALLOCATION_TYPE_PINNED, p1));
	CK(cuMemPoolDestroy(mine));
	CUmemLocation bad = { .type = CU_MEM_LOCATION_TYPE_INVALID };
	EXPECT_RC(cuMemGetMemPool(&cur, &bad, CU_MEM_ALLOCATION_TYPE_PINNED), CUDA_ERROR_INVALID_VALUE);

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
	batch_copies_3d();
	queries(dev, mod, fn);
	copy3d_peer(ctx);
	CK(cuModuleUnload(mod));
	say("stream memory operations, batched copies and the small queries answered as the driver does");
	return 0;
}
