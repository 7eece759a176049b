/* Pinned host memory and asynchronous copies on a stream, memsets of every
 * width (sync and async), for 1 B, 4 KiB + 3 and 9 MiB + 1 (which crosses
 * the 4 MiB chunking of bulk copies), plus copies at odd offsets. */
#include "common.h"

static uint8_t pat(size_t i, unsigned salt) { return (uint8_t)((i * 131u + salt * 7u) ^ (i >> 9)); }

static void expect_bytes(const uint8_t *got, size_t n, const char *what, size_t size,
			 uint8_t (*want)(size_t, const void *), const void *ctx)
{
	for (size_t i = 0; i < n; i++) {
		uint8_t w = want(i, ctx);
		if (got[i] != w)
			fail("size %zu, %s: byte %zu = 0x%02x, want 0x%02x", size, what, i, got[i], w);
	}
}

struct fill { unsigned width; uint32_t value; size_t count; uint8_t rest; };

/* byte i after memset of width w with value v over count elements,
 * rest of the buffer holding `rest` */
static uint8_t memset_want(size_t i, const void *ctx)
{
	const struct fill *f = ctx;
	if (i >= f->count * f->width)
		return f->rest;
	return (uint8_t)(f->value >> (8 * (i % f->width)));
}

static uint8_t pat_want(size_t i, const void *ctx) { return pat(i, *(const unsigned *)ctx); }

static void check_memset(CUdeviceptr d, uint8_t *h, size_t size, unsigned width, uint32_t v,
			 int async, CUstream s)
{
	size_t count = size / width;
	/* background 0x5a everywhere, then the memset over count elements */
	CK(cuMemsetD8(d, 0x5a, size));
	/* memsets of device memory are asynchronous to the host, and s does
	 * not synchronise with the NULL stream */
	CK(cuCtxSynchronize());
	CUresult rc;
	if (width == 1)
		rc = async ? cuMemsetD8Async(d, (unsigned char)v, count, s) : cuMemsetD8(d, (unsigned char)v, count);
	else if (width == 2)
		rc = async ? cuMemsetD16Async(d, (unsigned short)v, count, s) : cuMemsetD16(d, (unsigned short)v, count);
	else
		rc = async ? cuMemsetD32Async(d, v, count, s) : cuMemsetD32(d, v, count);
	if (rc != CUDA_SUCCESS)
		fail("size %zu: cuMemsetD%u%s(count %zu) returned %s", size, width * 8,
		     async ? "Async" : "", count, cu_name(rc));
	if (async) {
		CK(cuMemcpyDtoHAsync(h, d, size, s));
		CK(cuStreamSynchronize(s));
	} else {
		CK(cuMemcpyDtoH(h, d, size));
	}
	struct fill f = { width, v, count, 0x5a };
	char what[64];
	snprintf(what, sizeof(what), "cuMemsetD%u%s(0x%x)", width * 8, async ? "Async" : "", v);
	expect_bytes(h, size, what, size, memset_want, &f);
}

static void one_size(size_t size, CUstream s, int hostalloc)
{
	uint8_t *src, *dst;
	if (hostalloc) {
		CK(cuMemHostAlloc((void **)&src, size, CU_MEMHOSTALLOC_PORTABLE));
		CK(cuMemHostAlloc((void **)&dst, size, 0));
	} else {
		CK(cuMemAllocHost((void **)&src, size));
		CK(cuMemAllocHost((void **)&dst, size));
	}
	unsigned salt = (unsigned)size;
	for (size_t i = 0; i < size; i++)
		src[i] = pat(i, salt);
	memset(dst, 0, size);

	CUdeviceptr d1, d2;
	CK(cuMemAlloc(&d1, size));
	CK(cuMemAlloc(&d2, size));
	CK(cuMemcpyHtoDAsync(d1, src, size, s));
	CK(cuMemcpyDtoDAsync(d2, d1, size, s));
	CK(cuMemcpyDtoHAsync(dst, d2, size, s));
	CK(cuStreamSynchronize(s));
	expect_bytes(dst, size, "HtoDAsync+DtoDAsync+DtoHAsync", size, pat_want, &salt);
	result("async-roundtrip", dst, size);

	/* synchronous copies from pageable memory */
	uint8_t *pg = xmalloc(size);
	memset(pg, 0, size);
	CK(cuMemcpyDtoH(pg, d1, size));
	expect_bytes(pg, size, "DtoH to pageable memory", size, pat_want, &salt);
	free(pg);

	uint32_t vals[] = { 0xab, 0xbeef, 0xdeadbeefu };
	for (unsigned w = 1, k = 0; w <= 4; w *= 2, k++) {
		if (size / w == 0)
			continue;
		check_memset(d2, dst, size, w, vals[k], 0, s);
		check_memset(d2, dst, size, w, vals[k] ^ 0x01010101u, 1, s);
	}

	/* odd offsets: copy src[3 .. 3+L) to d1 + 5, read back d1 + 5 */
	if (size > 16) {
		size_t L = size - 8;
		CK(cuMemsetD8(d1, 0, size));
		CK(cuMemcpyHtoD(d1 + 5, src + 3, L));
		memset(dst, 0xee, size);
		CK(cuMemcpyDtoH(dst + 1, d1 + 5, L));
		CHECK(dst[0] == 0xee && (L + 1 >= size || dst[L + 1] == 0xee),
		      "size %zu: DtoH at an offset wrote outside its range", size);
		for (size_t i = 0; i < L; i++)
			if (dst[1 + i] != src[3 + i])
				fail("size %zu: offset copy byte %zu = 0x%02x, want 0x%02x", size, i,
				     dst[1 + i], src[3 + i]);
		uint8_t head[5];
		CK(cuMemcpyDtoH(head, d1, 5));
		for (int i = 0; i < 5; i++)
			CHECK(head[i] == 0, "size %zu: byte %d before the offset copy was overwritten", size, i);
		/* DtoD at offsets */
		CK(cuMemcpyDtoDAsync(d2 + 1, d1 + 5, L, s));
		CK(cuMemcpyDtoHAsync(dst, d2 + 1, L, s));
		CK(cuStreamSynchronize(s));
		for (size_t i = 0; i < L; i++)
			if (dst[i] != src[3 + i])
				fail("size %zu: offset DtoD byte %zu = 0x%02x, want 0x%02x", size, i, dst[i],
				     src[3 + i]);
	}

	CK(cuMemFree(d1));
	CK(cuMemFree(d2));
	CK(cuMemFreeHost(src));
	CK(cuMemFreeHost(dst));
	say("size %zu (%s) ok", size, hostalloc ? "cuMemHostAlloc" : "cuMemAllocHost");
}

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	primary_ctx(0, NULL);
	CUstream s;
	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	size_t sizes[] = { 1, 4096 + 3, 9u * 1024 * 1024 + 1 };
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		one_size(sizes[i], s, 0);
		one_size(sizes[i], s, 1);
	}
	/* the NULL stream works for async copies too */
	uint32_t v = 0x12345678u, back = 0;
	CUdeviceptr d;
	CK(cuMemAlloc(&d, 4));
	CK(cuMemcpyHtoDAsync(d, &v, 4, NULL));
	CK(cuMemcpyDtoHAsync(&back, d, 4, NULL));
	CK(cuStreamSynchronize(NULL));
	CHECK(back == v, "NULL-stream async round trip gave 0x%x", back);
	CK(cuMemFree(d));
	CK(cuStreamDestroy(s));
	primary_ctx_release(0);
	say("PASS");
	return 0;
}
