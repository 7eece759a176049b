/* Managed memory as the driver describes it: pointer attributes (a managed
 * pointer is the device's and the host's at one address), prefetches,
 * advice and the range attributes that report them, page range by page
 * range; and the data stays right whatever is prefetched or advised.
 * Runs on the real driver too: the answers checked are the driver's. */
#include "common.h"

#define MB (1u << 20)

static int attr_i(CUmem_range_attribute a, CUdeviceptr p, size_t n)
{
	int v = -77;
	CK(cuMemRangeGetAttribute(&v, 4, a, p, n));
	return v;
}

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	(void)argc;
	CUdevice dev;
	CUcontext ctx = primary_ctx(0, &dev);
	CUmodule mod = load_test_module();
	CUfunction fill = get_func(mod, "fill_u32");
	const size_t bytes = 8 * MB;
	CUdeviceptr m;
	CUresult rc = cuMemAllocManaged(&m, bytes, CU_MEM_ATTACH_GLOBAL);
	if (rc == CUDA_ERROR_NOT_SUPPORTED)
		skip("managed memory not supported here");
	CK(rc);

	/* ---- pointer attributes ---- */
	unsigned is_managed = 0, mtype = 0;
	CUdeviceptr dp = 0;
	void *hp = NULL;
	CUcontext pc = NULL;
	int ord = -1;
	CK(cuPointerGetAttribute(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, m + 100));
	CHECK(is_managed == 1, "IS_MANAGED %u", is_managed);
	CK(cuPointerGetAttribute(&mtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, m));
	CHECK(mtype == CU_MEMORYTYPE_DEVICE || mtype == CU_MEMORYTYPE_HOST, "memory type %u", mtype);
	CK(cuPointerGetAttribute(&dp, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, m + 64));
	CHECK(dp == m + 64, "device pointer %llx, want %llx", (unsigned long long)dp, (unsigned long long)m + 64);
	CK(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, m + 64));
	CHECK((uintptr_t)hp == (uintptr_t)(m + 64), "host pointer %p", hp);
	CK(cuPointerGetAttribute(&pc, CU_POINTER_ATTRIBUTE_CONTEXT, m));
	CHECK(pc == ctx, "context %p, want %p", (void *)pc, (void *)ctx);
	CK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, m));
	CHECK(ord == 0, "ordinal %d", ord);
	CUdeviceptr plain;
	CK(cuMemAlloc(&plain, MB));
	CK(cuPointerGetAttribute(&is_managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, plain));
	CHECK(is_managed == 0, "cuMemAlloc memory reads as managed");

	/* ---- nothing asked yet ---- */
	CHECK(attr_i(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, m, bytes) == 0, "read-mostly before any advice");
	CHECK(attr_i(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, m, bytes) == CU_DEVICE_INVALID,
	      "a preferred location before any advice");

	/* ---- advice on the second 2 MiB ---- */
	CUdeviceptr sub = m + 2 * MB;
	CK(cuMemAdvise(sub, 2 * MB, CU_MEM_ADVISE_SET_READ_MOSTLY, (CUmemLocation){ .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 }));
	CHECK(attr_i(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, sub, 2 * MB) == 1, "read-mostly on the advised range");
	CHECK(attr_i(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, sub + MB, 4096) == 1, "read-mostly inside it");
	CHECK(attr_i(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, m, bytes) == 0, "read-mostly over the whole allocation");
	CK(cuMemAdvise(sub, 2 * MB, CU_MEM_ADVISE_SET_PREFERRED_LOCATION,
		       (CUmemLocation){ .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 }));
	CHECK(attr_i(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, sub, 2 * MB) == 0, "preferred location");
	CHECK(attr_i(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE, sub, 2 * MB) == CU_MEM_LOCATION_TYPE_DEVICE,
	      "preferred location type");
	CHECK(attr_i(CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, m, 4 * MB) == CU_DEVICE_INVALID,
	      "pages that disagree read as invalid");
	CK(cuMemAdvise(sub, 2 * MB, CU_MEM_ADVISE_SET_ACCESSED_BY,
		       (CUmemLocation){ .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 }));
	int acc[3] = { 9, 9, 9 };
	CK(cuMemRangeGetAttribute(acc, sizeof acc, CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, sub, 2 * MB));
	CHECK(acc[0] == 0 && acc[1] == CU_DEVICE_INVALID && acc[2] == CU_DEVICE_INVALID,
	      "accessed-by %d %d %d", acc[0], acc[1], acc[2]);
	CK(cuMemRangeGetAttribute(acc, sizeof acc, CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, m, bytes));
	CHECK(acc[0] == CU_DEVICE_INVALID, "accessed-by over pages without it: %d", acc[0]);
	/* undone on half of it */
	CK(cuMemAdvise(sub, MB, CU_MEM_ADVISE_UNSET_READ_MOSTLY, (CUmemLocation){ .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 }));
	CHECK(attr_i(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, sub, MB) == 0, "read-mostly undone");
	CHECK(attr_i(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, sub + MB, MB) == 1, "read-mostly kept on the rest");

	/* ---- prefetches ---- */
	CUstream s;
	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	unsigned *h = (unsigned *)(uintptr_t)m;
	size_t n = bytes / 4;
	for (size_t i = 0; i < n; i++)
		h[i] = (unsigned)i;
	CK(cuMemPrefetchAsync(m, bytes, (CUmemLocation){ .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 }, 0, s));
	CHECK(attr_i(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, m, bytes) == 0, "last prefetch: the device");
	/* a kernel reads what the host wrote before the prefetch */
	unsigned long long half = n / 2;
	unsigned v = 0xabcd0123u;
	void *args[] = { &m, &v, &half };
	launch1d(fill, (unsigned)half, s, args);
	CK(cuMemPrefetchAsync(m, bytes, (CUmemLocation){ .type = CU_MEM_LOCATION_TYPE_HOST }, 0, s));
	CK(cuStreamSynchronize(s));
	CHECK(attr_i(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, m, bytes) == CU_DEVICE_CPU, "last prefetch: the host");
	CHECK(attr_i(CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE, m, bytes) == CU_MEM_LOCATION_TYPE_HOST,
	      "last prefetch type");
	for (size_t i = 0; i < n; i++)
		if (h[i] != (i < half ? v : (unsigned)i))
			fail("word %zu is %#x after the prefetches, want %#x", i, h[i], i < half ? v : (unsigned)i);
	/* several attributes at once */
	int rm = -1, pl = -1;
	void *data[] = { &rm, &pl };
	size_t sizes[] = { 4, 4 };
	CUmem_range_attribute which[] = { CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION };
	CK(cuMemRangeGetAttributes(data, sizes, which, 2, sub + MB, MB));
	CHECK(rm == 1 && pl == 0, "attributes at once: read-mostly %d, preferred %d", rm, pl);

	/* ---- what the driver refuses ---- */
	EXPECT_RC(cuMemPrefetchAsync(plain, MB, (CUmemLocation){ .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 }, 0, s),
		  CUDA_ERROR_INVALID_VALUE);
	EXPECT_RC(cuMemAdvise(plain, MB, CU_MEM_ADVISE_SET_READ_MOSTLY, (CUmemLocation){ .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 }),
		  CUDA_ERROR_INVALID_VALUE);
	EXPECT_RC(cuMemPrefetchAsync(m, bytes, (CUmemLocation){ .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 999 }, 0, s),
		  CUDA_ERROR_INVALID_DEVICE);
	EXPECT_RC(cuMemRangeGetAttribute(&rm, 8, CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, m, bytes), CUDA_ERROR_INVALID_VALUE);
	EXPECT_RC(cuMemRangeGetAttribute(acc, 6, CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY, m, bytes), CUDA_ERROR_INVALID_VALUE);

	/* ---- a new allocation at the same place starts without hints ---- */
	CK(cuMemFree(m));
	CUdeviceptr m2;
	CK(cuMemAllocManaged(&m2, bytes, CU_MEM_ATTACH_GLOBAL));
	if (m2 <= sub && sub + 2 * MB <= m2 + bytes)
		CHECK(attr_i(CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, sub + MB, MB) == 0,
		      "the freed allocation's advice outlived it");
	CK(cuMemFree(m2));
	CK(cuMemFree(plain));
	CK(cuStreamDestroy(s));
	CK(cuModuleUnload(mod));
	say("managed pointer attributes, advice, prefetches and range attributes as the driver answers them");
	return 0;
}
