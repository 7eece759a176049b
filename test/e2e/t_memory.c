/* Memory accounting and failure paths: cuMemGetInfo consistency,
 * alloc/free cycles, out-of-memory on an absurd size, a copy from an invalid
 * device pointer returns an error (not a crash), and destroying an explicit
 * context gives its memory back. */
#include "common.h"

#define MiB (1024ull * 1024)

static void meminfo(size_t *fr, size_t *tot, const char *when)
{
	CK(cuMemGetInfo(fr, tot));
	CHECK(*tot > 0 && *fr <= *tot, "%s: free %zu total %zu", when, *fr, *tot);
}

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	CUdevice dev;
	CUcontext primary = primary_ctx(0, &dev);
	size_t fr0, tot0, fr1, tot1, fr2, tot2;
	meminfo(&fr0, &tot0, "start");
	size_t devtotal = 0;
	CK(cuDeviceTotalMem(&devtotal, dev));
	CHECK(tot0 <= devtotal, "cuMemGetInfo total %zu > device total %zu", tot0, devtotal);
	say("free %zu MiB of %zu MiB (device %zu MiB)", fr0 >> 20, tot0 >> 20, devtotal >> 20);

	/* 256 MiB (or a quarter of what is free, if less) */
	size_t big = 256 * MiB;
	if (big > fr0 / 4)
		big = (fr0 / 4) & ~(size_t)(MiB - 1);
	CHECK(big >= 4 * MiB, "only %zu bytes free", fr0);
	CUdeviceptr p;
	CK(cuMemAlloc(&p, big));
	meminfo(&fr1, &tot1, "after alloc");
	CHECK(tot1 == tot0, "total changed from %zu to %zu", tot0, tot1);
	CHECK(fr1 + big * 3 / 4 <= fr0, "free went from %zu to %zu after allocating %zu", fr0, fr1, big);
	CK(cuMemsetD8(p, 0x33, big));
	CK(cuMemFree(p));
	meminfo(&fr2, &tot2, "after free");
	CHECK(fr2 >= fr1 + big * 3 / 4, "free went from %zu to only %zu after freeing %zu", fr1, fr2, big);

	/* alloc/free cycles of assorted sizes, with a check of each buffer */
	CUdeviceptr ptrs[16];
	uint32_t seed = 5;
	for (int round = 0; round < 20; round++) {
		for (int i = 0; i < 16; i++) {
			size_t sz = 1 + (lcg(&seed) % (1u << (i % 21)));
			CK(cuMemAlloc(&ptrs[i], sz));
			CHECK(ptrs[i] != 0, "cuMemAlloc(%zu) gave a NULL pointer", sz);
			for (int j = 0; j < i; j++)
				CHECK(ptrs[j] != ptrs[i], "two live allocations at %#llx", (unsigned long long)ptrs[i]);
			uint8_t b = (uint8_t)(round * 16 + i), back = 0;
			CK(cuMemsetD8(ptrs[i] + sz - 1, b, 1));
			CK(cuMemcpyDtoH(&back, ptrs[i] + sz - 1, 1));
			CHECK(back == b, "last byte of a %zu-byte allocation reads 0x%x, want 0x%x", sz, back, b);
		}
		for (int i = 15; i >= 0; i--)
			CK(cuMemFree(ptrs[i]));
	}
	size_t fr3, tot3;
	meminfo(&fr3, &tot3, "after cycles");
	CHECK(fr3 + 64 * MiB >= fr2, "free dropped from %zu to %zu over alloc/free cycles", fr2, fr3);

	/* absurd sizes */
	CUdeviceptr q = 0;
	EXPECT_RC(cuMemAlloc(&q, (size_t)1 << 50), CUDA_ERROR_OUT_OF_MEMORY);
	EXPECT_RC(cuMemAlloc(&q, tot0 + 1024 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
	EXPECT_RC(cuMemAlloc(&q, 0), CUDA_ERROR_INVALID_VALUE);
	/* still usable */
	CK(cuMemAlloc(&q, 4096));
	CK(cuMemsetD32(q, 0xcafe, 1024));
	uint32_t w = 0;
	CK(cuMemcpyDtoH(&w, q + 4092, 4));
	CHECK(w == 0xcafe, "after OOM the context gives 0x%x", w);

	/* invalid device pointers: an error, not a crash, and the context lives */
	uint8_t hb[64];
	memset(hb, 0x42, sizeof(hb));
	CUresult rc = cuMemcpyDtoH(hb, (CUdeviceptr)0x10, sizeof(hb));
	CHECK(rc != CUDA_SUCCESS, "cuMemcpyDtoH from 0x10 returned CUDA_SUCCESS");
	say("cuMemcpyDtoH from 0x10: %s", cu_name(rc));
	rc = cuMemcpyHtoD((CUdeviceptr)0x10, hb, sizeof(hb));
	CHECK(rc != CUDA_SUCCESS, "cuMemcpyHtoD to 0x10 returned CUDA_SUCCESS");
	say("cuMemcpyHtoD to 0x10: %s", cu_name(rc));
	rc = cuMemFree((CUdeviceptr)0x10);
	CHECK(rc != CUDA_SUCCESS, "cuMemFree(0x10) returned CUDA_SUCCESS");
	say("cuMemFree(0x10): %s", cu_name(rc));
	/* past the end of a live allocation */
	rc = cuMemcpyDtoH(hb, q + 4096 - 8, sizeof(hb));
	say("cuMemcpyDtoH over the end of an allocation: %s", cu_name(rc));
	CK(cuMemcpyDtoH(&w, q, 4));
	CHECK(w == 0xcafe, "after invalid copies the context gives 0x%x", w);
	CK(cuMemFree(q));
	EXPECT_RC(cuMemFree(q), CUDA_ERROR_INVALID_VALUE); /* double free */

	/* an explicit context: its memory comes back when it is destroyed */
	CUcontext ctx;
	meminfo(&fr1, &tot1, "before cuCtxCreate");
	CK(cuCtxCreate(&ctx, NULL, 0, dev));
	CUcontext cur = NULL;
	CK(cuCtxGetCurrent(&cur));
	CHECK(cur == ctx, "cuCtxCreate did not make the new context current");
	CUdeviceptr cp;
	CK(cuMemAlloc(&cp, big));
	CK(cuMemsetD8(cp, 1, big));
	CK(cuCtxSynchronize());
	meminfo(&fr2, &tot2, "with the explicit context's allocation");
	CHECK(fr2 + big * 3 / 4 <= fr1, "free %zu -> %zu after allocating %zu in a new context", fr1, fr2, big);
	CK(cuCtxDestroy(ctx)); /* without freeing cp */
	CK(cuCtxSetCurrent(primary));
	meminfo(&fr3, &tot3, "after cuCtxDestroy");
	say("explicit context: free %zu -> %zu -> %zu MiB", fr1 >> 20, fr2 >> 20, fr3 >> 20);
	CHECK(fr3 >= fr2 + big * 3 / 4, "free only went from %zu to %zu when the context holding %zu was destroyed",
	      fr2, fr3, big);
	/* its memory went with it: no context owns that address any more (the
	 * client once kept the range, naming the freed context) */
	CUcontext owner = NULL;
	CUresult prc = cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, cp);
	CHECK(prc != CUDA_SUCCESS, "cuPointerGetAttribute(CONTEXT) of memory of a destroyed context "
	      "succeeded (context %p)", (void *)owner);
	/* the primary context still works */
	CK(cuMemAlloc(&q, 64));
	/* pointer attributes frameworks ask (XLA, NCCL): the device reads and
	 * writes it; the mapping holds the allocation */
	unsigned acc = 0;
	CK(cuPointerGetAttribute(&acc, CU_POINTER_ATTRIBUTE_ACCESS_FLAGS, q + 8));
	CHECK(acc == CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE, "access flags %#x", acc);
	CUdeviceptr mbase = 0;
	size_t msize = 0;
	CK(cuPointerGetAttribute(&mbase, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, q + 8));
	CK(cuPointerGetAttribute(&msize, CU_POINTER_ATTRIBUTE_MAPPING_SIZE, q + 8));
	CHECK(mbase <= q && mbase + msize >= q + 64, "mapping [%#llx, +%zu) does not hold the "
	      "allocation at %#llx", (unsigned long long)mbase, msize, (unsigned long long)q);
	int rdma = -1;
	CK(cuPointerGetAttribute(&rdma, CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE, q));
	CHECK(rdma == 0 || rdma == 1, "GPUDirect RDMA capable %d", rdma);
	CK(cuMemFree(q));
	primary_ctx_release(0);
	say("PASS");
	return 0;
}
