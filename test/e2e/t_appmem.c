/*
 * Application memory through rgpu (issue 10): the VMM API (reserve, create,
 * map, set access, retain, properties, unmap) with data checked and a
 * kernel run on VMM memory, shareable handles exported to a second process
 * of the job and imported there, stream-ordered pools (async alloc and
 * free in stream order, reuse, release threshold, trim, attributes,
 * created pools), 2D memsets, registered host memory with a device
 * mapping, and peer copies between two GPUs of one server (or their
 * refusal between servers).
 *
 * Runs unchanged on a real driver.  Environment:
 *   T_APPMEM_PEER=1   device 0 and 1 are GPUs of one server: peer copies
 *   T_APPMEM_PEER=0   device 0 and 1 are on different servers: refused
 * (unset: no peer part).
 *   T_APPMEM_PATH=server|client  (with RGPU_STATS=1) copies between the
 *                     two servers went from one rgpud to the other, or
 *                     through this process, and only that way  argv[1] = "child FD": the importing process.
 */
#include "common.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB (1ull << 20)

static size_t gran;

/* Checks of rgpu's own refusals (out-of-bounds requests and the like) run
 * only through rgpu: on a real driver they are undefined behaviour. */
static int on_rgpu(void)
{
	return dlsym(RTLD_DEFAULT, "rgpu_client_version") != NULL;
}

static CUmemAllocationProp dev_prop(int dev, int shareable)
{
	CUmemAllocationProp p;
	memset(&p, 0, sizeof(p));
	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.location.id = dev;
	if (shareable)
		p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	return p;
}

static void fill_pattern(uint32_t *h, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++)
		h[i] = seed * 2654435761u + (uint32_t)i;
}

static void test_vmm(CUmodule mod)
{
	CUmemAllocationProp prop = dev_prop(0, 1);
	CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	CHECK(gran && (gran & (gran - 1)) == 0, "granularity %zu", gran);
	size_t rec;
	CK(cuMemGetAllocationGranularity(&rec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
	CHECK(rec % gran == 0, "recommended %zu", rec);
	/* host memory through the VMM API (NCCL asks, then falls back when
	 * the creation fails): a grain either way; through rgpu not made */
	CUmemAllocationProp hp = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				   .location = { .type = CU_MEM_LOCATION_TYPE_HOST_NUMA, .id = 0 } };
	size_t hgran = 0;
	CK(cuMemGetAllocationGranularity(&hgran, &hp, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	CHECK(hgran && (hgran & (hgran - 1)) == 0, "host granularity %zu", hgran);
	if (on_rgpu()) {
		CUmemGenericAllocationHandle hh;
		EXPECT_RC(cuMemCreate(&hh, hgran, &hp, 0), CUDA_ERROR_NOT_SUPPORTED);
	}

	size_t chunk = 2 * gran, total = 2 * chunk;
	size_t free0, tot0, free1, tot1;
	CK(cuMemGetInfo(&free0, &tot0));
	CUdeviceptr va;
	CK(cuMemAddressReserve(&va, total, 0, 0, 0));
	CHECK(va % gran == 0, "reservation %#llx not aligned", (unsigned long long)va);
	/* a second reservation does not overlap the first */
	CUdeviceptr va2;
	CK(cuMemAddressReserve(&va2, gran, 0, 0, 0));
	CHECK(va2 + gran <= va || va2 >= va + total, "overlapping reservations");
	CK(cuMemAddressFree(va2, gran));

	CUmemGenericAllocationHandle h[2];
	CK(cuMemCreate(&h[0], chunk, &prop, 0));
	CK(cuMemCreate(&h[1], chunk, &prop, 0));
	CK(cuMemGetInfo(&free1, &tot1));
	CHECK(free0 - free1 >= total, "free memory fell by %zu, not %zu", free0 - free1, total);
	CK(cuMemMap(va, chunk, 0, h[0], 0));
	CK(cuMemMap(va + chunk, chunk, 0, h[1], 0));
	/* mapping over a mapping fails */
	CHECK(cuMemMap(va, chunk, 0, h[1], 0) != CUDA_SUCCESS, "mapped over a mapping");
	CUmemAccessDesc acc = { .location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CK(cuMemSetAccess(va, total, &acc, 1));
	unsigned long long flags = 0;
	CK(cuMemGetAccess(&flags, &prop.location, va + chunk + 4096));
	CHECK(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "access %llu", flags);

	/* data across both mappings */
	size_t n = total / 4;
	uint32_t *hb = xmalloc(total), *back = xmalloc(total);
	fill_pattern(hb, n, 7);
	CK(cuMemcpyHtoD(va, hb, total));
	memset(back, 0, total);
	CK(cuMemcpyDtoH(back, va, total));
	CHECK(!memcmp(hb, back, total), "VMM data differs after a round trip");
	/* unified addressing knows it is device memory */
	CK(cuMemcpy((CUdeviceptr)(uintptr_t)back, va + 8, 64));
	CHECK(!memcmp(back, (char *)hb + 8, 64), "cuMemcpy from VMM memory");
	/* a kernel on it: fill_u32 over the second mapping */
	CUfunction fill = get_func(mod, "fill_u32");
	CUdeviceptr p2 = va + chunk;
	unsigned v = 0xabcd1234u;
	unsigned long long cnt = chunk / 4;
	void *args[] = { &p2, &v, &cnt };
	CK(cuLaunchKernel(fill, (unsigned)((cnt + 255) / 256), 1, 1, 256, 1, 1, 0, NULL, args, NULL));
	CK(cuCtxSynchronize());
	CK(cuMemcpyDtoH(back, va, total));
	CHECK(!memcmp(back, hb, chunk), "the first mapping changed");
	for (size_t i = chunk / 4; i < n; i++)
		CHECK(back[i] == v, "element %zu is %#x", i, back[i]);
	CK(cuMemsetD32(va, 0x5a5a5a5au, n));
	CK(cuMemcpyDtoH(back, va + total - 64, 64));
	CHECK(back[0] == 0x5a5a5a5au && back[15] == 0x5a5a5a5au, "memset on VMM memory");

	/* retain and properties */
	CUmemGenericAllocationHandle r;
	CK(cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)(va + chunk + 100)));
	if (on_rgpu())
		CHECK(r == h[1], "retained handle differs");
	CUmemAllocationProp got;
	CK(cuMemGetAllocationPropertiesFromHandle(&got, r));
	CHECK(got.location.id == 0 && got.type == CU_MEM_ALLOCATION_TYPE_PINNED &&
		      got.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
	      "properties from the handle");
	CK(cuMemRelease(r));

	/* the address range is still reserved: freeing it fails while mapped */
	if (on_rgpu())
		EXPECT_RC(cuMemAddressFree(va, total), CUDA_ERROR_INVALID_VALUE);
	CK(cuMemUnmap(va, total));
	if (on_rgpu())
		EXPECT_RC(cuMemcpyHtoD(va, hb, 64), CUDA_ERROR_INVALID_VALUE);
	/* map again after unmap (the handles still live), then release while
	 * mapped: the memory lives until unmapped */
	CK(cuMemMap(va, chunk, 0, h[0], 0));
	CK(cuMemSetAccess(va, chunk, &acc, 1));
	CK(cuMemRelease(h[0]));
	CK(cuMemcpyHtoD(va, hb, 64));
	CK(cuMemUnmap(va, chunk));
	CK(cuMemRelease(h[1]));
	if (on_rgpu())
		EXPECT_RC(cuMemRelease(h[1]), CUDA_ERROR_INVALID_VALUE);
	CK(cuMemAddressFree(va, total));
	size_t free2, tot2;
	CK(cuMemGetInfo(&free2, &tot2));
	CHECK(free2 >= free0 - gran, "memory not given back: free %zu, was %zu", free2, free0);
	free(hb);
	free(back);
	say("VMM: reserve, create, map, access, kernel, retain, unmap, release ok");
}

/* The importing process: maps the exported memory, checks the exporter's
 * data, writes its own. */
static int child(int fd)
{
	CUcontext ctx = primary_ctx(0, NULL);
	(void)ctx;
	CUmemAllocationProp prop = dev_prop(0, 1);
	CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	CUmemGenericAllocationHandle h;
	CK(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	CUmemAllocationProp got;
	CK(cuMemGetAllocationPropertiesFromHandle(&got, h));
	CHECK(got.location.id == 0, "imported on device %d", got.location.id);
	CUdeviceptr va;
	CK(cuMemAddressReserve(&va, gran, 0, 0, 0));
	CK(cuMemMap(va, gran, 0, h, 0));
	CUmemAccessDesc acc = { .location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CK(cuMemSetAccess(va, gran, &acc, 1));
	uint32_t buf[256], want[256];
	fill_pattern(want, 256, 99);
	CK(cuMemcpyDtoH(buf, va, sizeof(buf)));
	CHECK(!memcmp(buf, want, sizeof(buf)), "the importer does not see the exporter's data");
	fill_pattern(want, 256, 123);
	CK(cuMemcpyHtoD(va, want, sizeof(want)));
	CK(cuMemUnmap(va, gran));
	CK(cuMemRelease(h));
	CK(cuMemAddressFree(va, gran));
	primary_ctx_release(0);
	printf("child: imported, read and wrote shared memory\n");
	return 0;
}

static void test_share(const char *self)
{
	CUmemAllocationProp prop = dev_prop(0, 1);
	CUmemGenericAllocationHandle h;
	CK(cuMemCreate(&h, gran, &prop, 0));
	CUdeviceptr va;
	CK(cuMemAddressReserve(&va, gran, 0, 0, 0));
	CK(cuMemMap(va, gran, 0, h, 0));
	CUmemAccessDesc acc = { .location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CK(cuMemSetAccess(va, gran, &acc, 1));
	uint32_t buf[256];
	fill_pattern(buf, 256, 99);
	CK(cuMemcpyHtoD(va, buf, sizeof(buf)));

	/* not exportable without the handle type asked for at creation */
	CUmemAllocationProp plain = dev_prop(0, 0);
	CUmemGenericAllocationHandle hp;
	int fd = -1;
	CK(cuMemCreate(&hp, gran, &plain, 0));
	CHECK(cuMemExportToShareableHandle(&fd, hp, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) !=
		      CUDA_SUCCESS,
	      "exported memory not created exportable");
	CK(cuMemRelease(hp));

	CK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	CHECK(fd >= 0, "exported descriptor %d", fd);
	/* the child inherits the descriptor */
	int flags = fcntl(fd, F_GETFD);
	CHECK(flags >= 0 && fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC) == 0, "fcntl");
	char fds[16];
	snprintf(fds, sizeof(fds), "%d", fd);
	pid_t pid = fork();
	if (pid == 0) {
		execl(self, self, "child", fds, (char *)NULL);
		_exit(127);
	}
	CHECK(pid > 0, "fork");
	int st;
	CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the importing process failed (status %#x)", st);
	close(fd);
	uint32_t want[256];
	fill_pattern(want, 256, 123);
	CK(cuMemcpyDtoH(buf, va, sizeof(buf)));
	CHECK(!memcmp(buf, want, sizeof(buf)), "the exporter does not see the importer's writes");

	/* a forged descriptor is refused */
	int bad = memfd_create("not-rgpu", 0);
	CHECK(bad >= 0 && write(bad, "RGPUSHR1garbage", 15) == 15, "memfd");
	CUmemGenericAllocationHandle hb;
	CUresult rc = cuMemImportFromShareableHandle(&hb, (void *)(intptr_t)bad,
						     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	CHECK(rc != CUDA_SUCCESS, "a forged shareable handle was imported");
	close(bad);
	CK(cuMemUnmap(va, gran));
	CK(cuMemRelease(h));
	CK(cuMemAddressFree(va, gran));
	say("shareable handles: exported, imported by another process, data both ways");
}

static CUmemPoolProps pool_props(int dev)
{
	CUmemPoolProps p;
	memset(&p, 0, sizeof(p));
	p.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.location.id = dev;
	return p;
}

static void test_pools(void)
{
	CUstream s;
	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CUmemoryPool def, cur;
	CK(cuDeviceGetDefaultMemPool(&def, 0));
	CK(cuDeviceGetMemPool(&cur, 0));
	CHECK(def == cur, "the current pool is not the default one");
	cuuint64_t thr = 0;
	CK(cuMemPoolSetAttribute(def, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr));

	size_t n = 1 << 20, bytes = n * 4;
	CUdeviceptr p;
	CK(cuMemAllocAsync(&p, bytes, s));
	CK(cuMemsetD32Async(p, 0x01020304u, n, s));
	uint32_t *hb = xmalloc(bytes);
	CK(cuMemcpyDtoHAsync(hb, p, bytes, s));
	CK(cuStreamSynchronize(s));
	CHECK(hb[0] == 0x01020304u && hb[n - 1] == 0x01020304u, "pool memory contents");
	cuuint64_t used = 0, reserved = 0;
	CK(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
	CK(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
	CHECK(used >= bytes && reserved >= used, "used %llu reserved %llu", (unsigned long long)used,
	      (unsigned long long)reserved);
	CK(cuMemFreeAsync(p, s));
	CK(cuStreamSynchronize(s));
	CK(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
	CHECK(used == 0, "used %llu after the free", (unsigned long long)used);
	if (on_rgpu())
		EXPECT_RC(cuMemFreeAsync(p, s), CUDA_ERROR_INVALID_VALUE);
	/* a high threshold keeps the memory for reuse; trimming gives it back */
	thr = 1ull << 40;
	CK(cuMemPoolSetAttribute(def, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr));
	cuuint64_t thr2 = 0;
	CK(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr2));
	CHECK(thr2 == thr, "threshold %llu", (unsigned long long)thr2);
	CUdeviceptr q, q2;
	CK(cuMemAllocAsync(&q, bytes, s));
	CK(cuMemFreeAsync(q, s));
	CK(cuMemAllocAsync(&q2, bytes, s));
	CK(cuMemFreeAsync(q2, s));
	CK(cuStreamSynchronize(s));
	CK(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
	CHECK(reserved >= bytes, "the pool kept %llu bytes", (unsigned long long)reserved);
	CK(cuMemPoolTrimTo(def, 0));
	CK(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
	CHECK(reserved == 0, "%llu bytes reserved after the trim", (unsigned long long)reserved);

	/* a pool of its own */
	CUmemPoolProps pp = pool_props(0);
	CUmemoryPool mine;
	CK(cuMemPoolCreate(&mine, &pp));
	CUmemAccess_flags af;
	CK(cuMemPoolGetAccess(&af, mine, &pp.location));
	CHECK(af == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "pool access %d", (int)af);
	CUdeviceptr m;
	CK(cuMemAllocFromPoolAsync(&m, 4096, mine, s));
	CK(cuMemsetD8Async(m, 0x77, 4096, s));
	unsigned char c[4096];
	CK(cuMemcpyDtoHAsync(c, m, sizeof(c), s));
	CK(cuStreamSynchronize(s));
	CHECK(c[0] == 0x77 && c[4095] == 0x77, "created pool memory");
	CK(cuDeviceSetMemPool(0, mine));
	CK(cuDeviceGetMemPool(&cur, 0));
	CHECK(cur == mine, "cuDeviceSetMemPool");
	CUdeviceptr m2;
	CK(cuMemAllocAsync(&m2, 4096, s));
	CK(cuMemFreeAsync(m2, s));
	CK(cuMemFreeAsync(m, s));
	CK(cuStreamSynchronize(s));
	CK(cuDeviceSetMemPool(0, def));
	/* stream-ordered memory freed with cuMemFree, as CUDA allows
	 * (cuSPARSE frees so).  The real driver does not count it out of the
	 * pool's used memory (4 MiB still used after the call and a context
	 * synchronisation, H200 2026-11-28; last here, so that it counts in no
	 * check before): only that nothing more is used, and that the pool
	 * serves again */
	CK(cuMemAllocAsync(&p, bytes, s));
	CK(cuMemsetD8Async(p, 0x11, bytes, s));
	CK(cuMemFree(p));
	CK(cuCtxSynchronize());
	CK(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
	CHECK(used <= bytes, "used %llu after cuMemFree of pool memory", (unsigned long long)used);
	CK(cuMemAllocAsync(&p, bytes, s));
	CK(cuMemsetD8Async(p, 0x22, bytes, s));
	uint8_t b0 = 0;
	CK(cuMemcpyDtoHAsync(&b0, p + bytes - 1, 1, s));
	CK(cuStreamSynchronize(s));
	CHECK(b0 == 0x22, "pool memory after a cuMemFree holds %#x", b0);
	CK(cuMemFreeAsync(p, s));
	CK(cuStreamSynchronize(s));
	if (on_rgpu())
		EXPECT_RC(cuMemPoolDestroy(def), CUDA_ERROR_INVALID_VALUE);
	CK(cuMemPoolDestroy(mine));
	CK(cuStreamDestroy(s));
	free(hb);
	say("pools: async alloc/free in stream order, threshold, trim, created pool ok");
}

/* Stream-ordered reuse across streams: a block freed on stream a behind a
 * long kernel and allocated again on stream b is not written before that
 * kernel is done (the pool orders b after the free, or gives other
 * memory); with internal dependencies disallowed it is not handed to b at
 * all while the free is pending.  Then a created pool's maximum size, the
 * high-water marks, and a zero release threshold at a synchronisation. */
static void cross_stream(CUfunction busy, CUfunction fill, CUmemoryPool pool, int deps)
{
	CUstream a, b;
	CK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
	CK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
	int allow = deps;
	CK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, &allow));
	size_t bytes = 4u << 20;
	unsigned long long n = bytes / 4, ns = 50ull * 1000 * 1000;
	CUdeviceptr p, q;
	CK(cuMemAllocFromPoolAsync(&p, bytes, pool, a));
	void *bargs[] = { &ns };
	launch1d(busy, 1, a, bargs);
	unsigned v1 = 0x11111111u, v2 = 0x22222222u;
	void *f1[] = { &p, &v1, &n };
	launch1d(fill, (unsigned)n, a, f1);
	CK(cuMemFreeAsync(p, a));
	CK(cuMemAllocFromPoolAsync(&q, bytes, pool, b));
	void *f2[] = { &q, &v2, &n };
	launch1d(fill, (unsigned)n, b, f2);
	CK(cuStreamSynchronize(b));
	CK(cuStreamSynchronize(a));
	unsigned *h = xmalloc(bytes);
	CK(cuMemcpyDtoH(h, q, bytes));
	for (size_t i = 0; i < n; i++)
		if (h[i] != v2) {
			CHECK(0, "a block taken on another stream (dependencies %d): word %zu = %#x",
			      deps, i, h[i]);
			break;
		}
	if (on_rgpu())
		CHECK(deps ? q == p : q != p,
		      "the block freed on another stream %s handed out (dependencies %d)",
		      q == p ? "was" : "was not", deps);
	CK(cuMemFreeAsync(q, b));
	CK(cuStreamSynchronize(b));
	free(h);
	CK(cuStreamDestroy(a));
	CK(cuStreamDestroy(b));
}

static void test_pool_order(CUmodule mod)
{
	CUfunction busy = get_func(mod, "busy_wait_ns"), fill = get_func(mod, "fill_u32");
	CUmemPoolProps pp = pool_props(0);
	CUmemoryPool pool;
	CK(cuMemPoolCreate(&pool, &pp));
	cuuint64_t thr = 1ull << 40, v = 0;
	CK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr));
	cross_stream(busy, fill, pool, 1);
	cross_stream(busy, fill, pool, 0);
	/* the high-water marks: reset to the current value */
	CK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &v));
	CHECK(v >= 4u << 20, "used high %llu", (unsigned long long)v);
	cuuint64_t zero = 0, used = 0;
	CK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero));
	CK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &v));
	CK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
	CHECK(v == used, "used high %llu after a reset, used %llu", (unsigned long long)v,
	      (unsigned long long)used);
	/* a zero threshold: what is freed goes at the next synchronisation */
	CUstream s;
	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &zero));
	CUdeviceptr p;
	CK(cuMemAllocFromPoolAsync(&p, 8u << 20, pool, s));
	CK(cuMemFreeAsync(p, s));
	CK(cuStreamSynchronize(s));
	CK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v));
	if (on_rgpu())
		CHECK(v == 0, "%llu bytes reserved after a synchronisation with threshold 0",
		      (unsigned long long)v);
	CK(cuStreamDestroy(s));
	CK(cuMemPoolDestroy(pool));
	if (on_rgpu()) {
		/* a pool's maximum size refuses what would exceed it */
		pp.maxSize = 4u << 20;
		CK(cuMemPoolCreate(&pool, &pp));
		CUdeviceptr m1, m2;
		CK(cuMemAllocFromPoolAsync(&m1, 4u << 20, pool, NULL));
		EXPECT_RC(cuMemAllocFromPoolAsync(&m2, 1u << 20, pool, NULL), CUDA_ERROR_OUT_OF_MEMORY);
		CK(cuMemFreeAsync(m1, NULL));
		CK(cuMemAllocFromPoolAsync(&m2, 2u << 20, pool, NULL)); /* in its place */
		CK(cuMemFreeAsync(m2, NULL));
		CK(cuCtxSynchronize());
		CK(cuMemPoolDestroy(pool));
	}
	say("pools: reuse across streams in order, high-water marks, threshold 0, maximum size ok");
}

static void test_memset2d(void)
{
	size_t w = 100, hgt = 37, pitch = 512;
	CUdeviceptr d;
	CK(cuMemAlloc(&d, pitch * hgt));
	CK(cuMemsetD8(d, 0, pitch * hgt));
	CK(cuMemsetD2D32(d, pitch, 0xdeadbeefu, w, hgt));
	unsigned char *h = xmalloc(pitch * hgt);
	CK(cuMemcpyDtoH(h, d, pitch * hgt));
	for (size_t y = 0; y < hgt; y++)
		for (size_t x = 0; x < pitch / 4; x++) {
			uint32_t v;
			memcpy(&v, h + y * pitch + x * 4, 4);
			CHECK(v == (x < w ? 0xdeadbeefu : 0u), "D2D32 at row %zu col %zu: %#x", y, x, v);
		}
	CUstream s;
	CK(cuStreamCreate(&s, 0));
	CK(cuMemsetD2D8Async(d + 1, pitch, 0x11, 5, hgt, s));
	CK(cuMemsetD2D16Async(d + 8, pitch, 0x2233, 3, 2, s));
	CK(cuStreamSynchronize(s));
	CK(cuMemcpyDtoH(h, d, pitch * hgt));
	CHECK(h[0] == 0xef && h[1] == 0x11 && h[5] == 0x11 && h[6] == 0xad, "D2D8Async row 0");
	CHECK(h[(hgt - 1) * pitch + 5] == 0x11, "D2D8Async last row");
	CHECK(h[8] == 0x33 && h[9] == 0x22 && h[pitch + 13] == 0x22 && h[2 * pitch + 8] == 0xef,
	      "D2D16Async");
	/* beyond the allocation: refused */
	if (on_rgpu())
		EXPECT_RC(cuMemsetD2D8(d, pitch, 1, w, hgt + 1), CUDA_ERROR_INVALID_VALUE);
	CK(cuStreamDestroy(s));
	CK(cuMemFree(d));
	free(h);
	say("2D memsets ok");
}

/* cuMemHostRegister with a device mapping: a kernel reads and writes the
 * application's own (unaligned, malloc'ed) buffer through its device
 * pointer; host changes reach the next launch, device changes the host at
 * the next synchronisation. */
static void test_registered(CUmodule mod)
{
	int n = 3000;
	char *raw = xmalloc(n * sizeof(int) + 64);
	int *h = (int *)(raw + 20); /* not page aligned */
	for (int i = 0; i < n; i++)
		h[i] = i;
	CK(cuMemHostRegister(h, n * sizeof(int), CU_MEMHOSTREGISTER_DEVICEMAP));
	EXPECT_RC(cuMemHostRegister(h, n * sizeof(int), 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
	CUdeviceptr d;
	CK(cuMemHostGetDevicePointer(&d, h, 0));
	CUdeviceptr d2;
	CK(cuMemHostGetDevicePointer(&d2, h + 100, 0));
	CHECK(d2 == d + 400, "device pointer of an interior address");
	CUfunction inc = get_func(mod, "inc_i32");
	void *args[] = { &d, &n };
	CK(cuLaunchKernel(inc, (unsigned)(n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
	CK(cuCtxSynchronize());
	for (int i = 0; i < n; i++)
		CHECK(h[i] == i + 1, "after one launch h[%d] = %d", i, h[i]);
	/* a host write, then a launch: the kernel sees it */
	h[7] = 1000;
	CK(cuLaunchKernel(inc, (unsigned)(n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
	CK(cuCtxSynchronize());
	CHECK(h[7] == 1001 && h[0] == 2 && h[n - 1] == n + 1, "after two launches: %d %d %d", h[7], h[0],
	      h[n - 1]);
	/* copies name the device pointer like device memory */
	int got[4];
	CK(cuMemcpy((CUdeviceptr)(uintptr_t)got, d + 4 * 4, sizeof(got)));
	CHECK(got[0] == 6 && got[2] == 8 && got[3] == 1001, "cuMemcpy from the device pointer: %d %d",
	      got[0], got[3]);
	CK(cuMemHostUnregister(h));
	EXPECT_RC(cuMemHostUnregister(h), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
	/* the memory is the application's again, writable */
	h[0] = -1;
	raw[0] = 1;
	free(raw);
	say("registered host memory with a device mapping ok");
}

static void test_peer(int same_server)
{
	int n = 0;
	CK(cuDeviceGetCount(&n));
	if (n < 2)
		fail("peer test needs two devices, have %d", n);
	CUdevice d0, d1;
	CK(cuDeviceGet(&d0, 0));
	CK(cuDeviceGet(&d1, 1));
	int can = -1;
	CK(cuDeviceCanAccessPeer(&can, d0, d1));
	CHECK(can == same_server, "canAccessPeer %d", can);
	CUcontext c0, c1;
	CK(cuDevicePrimaryCtxRetain(&c0, d0));
	CK(cuDevicePrimaryCtxRetain(&c1, d1));
	if (same_server) {
		/* access to a peer's primary context nothing has run in yet,
		 * before any allocation (the runtime's
		 * cudaDeviceEnablePeerAccess in simpleP2P): it holds for the
		 * allocations after it (the plain copy below) */
		CK(cuCtxSetCurrent(c0));
		CK(cuCtxEnablePeerAccess(c1, 0));
	}
	size_t bytes = 3 * MiB + 12;
	CUdeviceptr a, b;
	CK(cuCtxSetCurrent(c0));
	CK(cuMemAlloc(&a, bytes));
	CK(cuCtxSetCurrent(c1));
	CK(cuMemAlloc(&b, bytes));
	unsigned char *h = xmalloc(bytes), *back = xmalloc(bytes);
	for (size_t i = 0; i < bytes; i++)
		h[i] = (unsigned char)(i * 31 + 7);
	CK(cuCtxSetCurrent(c0));
	CK(cuMemcpyHtoD(a, h, bytes));
	if (!same_server) {
		/* peer access is refused; copies go through the client, in
		 * pieces of 64 MiB (this one is one), ordered as CUDA orders
		 * them */
		EXPECT_RC(cuCtxEnablePeerAccess(c1, 0), CUDA_ERROR_PEER_ACCESS_UNSUPPORTED);
		CK(cuMemcpyPeer(b, c1, a, c0, bytes));
		CK(cuCtxSetCurrent(c1));
		memset(back, 0, bytes);
		CK(cuMemcpyDtoH(back, b, bytes));
		CHECK(!memcmp(back, h, bytes), "peer copy 0 -> 1 across servers differs");
		/* a plain device-to-device copy between them (unified
		 * addressing: what cudaMemcpy(..., cudaMemcpyDeviceToDevice)
		 * between two GPUs does); only where the two servers' addresses
		 * differ (their ranges are taken per worker: under ASan both
		 * fall back to the same place, and an address then names two
		 * allocations) */
		const char *distinct = getenv("T_APPMEM_DISTINCT");
		if (distinct && !strcmp(distinct, "1")) {
			/* rgpud's layout (daemon/mem/space.c): 512 GiB
			 * ranges from 0x0a0000000000, server k's (the
			 * client's k-th, from 1) at slot 3 (k - 1) + GPU */
			uint64_t first = 0x0a0000000000ull, range = 512ull << 30;
			CHECK(a >= first && (a - first) / range == 0 && b >= first &&
				      (b - first) / range == 3,
			      "two servers' allocations at %#llx and %#llx, not in ranges 0 and 3",
			      (unsigned long long)a, (unsigned long long)b);
		}
		if (a + bytes <= b || b + bytes <= a) {
			CK(cuCtxSetCurrent(c0));
			CK(cuMemsetD8(a, 0x77, 4096));
			CK(cuMemcpyDtoD(b + 8192, a, 4096));
			CK(cuCtxSetCurrent(c1));
			CK(cuMemcpyDtoH(back, b + 8192, 4096));
			CHECK(back[0] == 0x77 && back[4095] == 0x77, "a copy across servers read %#x",
			      back[0]);
			CK(cuCtxSetCurrent(c0));
			CK(cuMemcpyHtoD(a, h, 4096));
		} else {
			say("the two servers' allocations share addresses: no copy by address");
		}
		CK(cuCtxSetCurrent(c1));
		/* on a stream of the source (its memset first), and of the
		 * destination (the source's work waited for) */
		CUstream s1;
		CK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
		CK(cuMemsetD8Async(b, 0x3c, 1000, s1));
		CK(cuMemcpyPeerAsync(a + 5, c0, b, c1, 2000, s1));
		CK(cuStreamSynchronize(s1));
		CK(cuMemsetD8Async(b, 0x5a, 64, s1));
		CK(cuCtxSetCurrent(c0));
		CUstream s0;
		CK(cuStreamCreate(&s0, CU_STREAM_NON_BLOCKING));
		CK(cuMemcpyPeerAsync(a + 3000, c0, b, c1, 64, s0));
		CK(cuStreamSynchronize(s0));
		CK(cuMemcpyDtoH(back, a, 3064));
		CHECK(back[4] == h[4] && back[5] == 0x3c && back[1004] == 0x3c && back[1005] == h[1000] &&
			      back[2004] == h[1999] && back[3000] == 0x5a && back[3063] == 0x5a,
		      "async peer copies across servers differ (%#x %#x %#x)", back[5], back[1005],
		      back[3000]);
		CK(cuStreamDestroy(s0));
		CK(cuCtxSetCurrent(c1));
		CK(cuStreamDestroy(s1));
		/* several chunks of the transfer (4 MiB), both ways */
		size_t big = 9 * MiB + 77;
		CUdeviceptr ba, bb;
		CK(cuMemAlloc(&bb, big));
		CK(cuCtxSetCurrent(c0));
		CK(cuMemAlloc(&ba, big));
		unsigned char *hb = xmalloc(big), *bk = xmalloc(big);
		for (size_t i = 0; i < big; i++)
			hb[i] = (unsigned char)(i * 131 + (i >> 20));
		CK(cuMemcpyHtoD(ba, hb, big));
		CK(cuMemcpyPeer(bb, c1, ba, c0, big));
		CK(cuMemsetD8(ba, 0, big));
		CK(cuMemcpyPeer(ba + 1, c0, bb, c1, big - 1));
		CK(cuMemcpyDtoH(bk, ba, big));
		CHECK(bk[0] == 0 && !memcmp(bk + 1, hb, big - 1),
		      "a %zu-byte copy across servers and back differs", big);
		if (on_rgpu()) {
			/* out of the session's memory on either side: refused at
			 * once by both, and both sessions go on */
			EXPECT_RC(cuMemcpyPeer(bb, c1, ba + big + 64 * MiB, c0, 4096),
				  CUDA_ERROR_INVALID_VALUE);
			EXPECT_RC(cuMemcpyPeer(bb + big + 64 * MiB, c1, ba, c0, 4096),
				  CUDA_ERROR_INVALID_VALUE);
			CK(cuMemcpyPeer(bb, c1, ba, c0, 4096));
			CK(cuCtxSetCurrent(c1));
			memset(bk, 0xee, 4096);
			CK(cuMemcpyDtoH(bk, bb, 4096));
			CHECK(bk[0] == 0 && !memcmp(bk + 1, hb, 4095),
			      "a copy across servers after refused ones differs");
			CK(cuCtxSetCurrent(c0));
		}
		CK(cuMemFree(ba));
		CK(cuCtxSetCurrent(c1));
		CK(cuMemFree(bb));
		CK(cuCtxSetCurrent(c0));
		free(hb);
		free(bk);
		const char *path = getenv("T_APPMEM_PATH");
		if (path && *path && on_rgpu()) {
			unsigned long long (*counter)(const char *);
			*(void **)&counter = dlsym(RTLD_DEFAULT, "rgpu_stats_counter");
			CHECK(counter, "no rgpu_stats_counter");
			unsigned long long dir = counter("peer_direct"), rel = counter("peer_relayed");
			int server = !strcmp(path, "server");
			CHECK(server ? dir > big && rel == 0 : rel > big && dir == 0,
			      "copies between servers: %llu bytes direct, %llu relayed (wanted %s)",
			      dir, rel, path);
			say("%llu bytes between the servers, %s", server ? dir : rel,
			    server ? "from one rgpud to the other" : "through the client");
		}
		say("peers on different servers: access refused, copies between them");
	} else {
		EXPECT_RC(cuCtxEnablePeerAccess(c1, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
		int rank = -1, ok = -1;
		CK(cuDeviceGetP2PAttribute(&ok, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, d0, d1));
		CK(cuDeviceGetP2PAttribute(&rank, CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, d0, d1));
		CHECK(ok == 1 && rank >= 0, "P2P attributes %d %d", ok, rank);
		CK(cuMemcpyPeer(b, c1, a, c0, bytes));
		/* with peer access on, device 0's context reaches device 1's
		 * memory with a plain copy (what PyTorch's copies between GPUs
		 * do): rgpud's memory is VMM-backed, its access must say so */
		CK(cuMemcpyDtoD(b + 4096, a, 64));
		CK(cuCtxSetCurrent(c1));
		memset(back, 0, bytes);
		CK(cuMemcpyDtoH(back, b, bytes));
		CHECK(!memcmp(back, h, 4096) && !memcmp(back + 4096, h, 64) &&
			      !memcmp(back + 4160, h + 4160, bytes - 4160),
		      "peer copy 0 -> 1 differs");
		/* and back, asynchronously on a stream of device 1 */
		CUstream s;
		CK(cuStreamCreate(&s, 0));
		CK(cuMemsetD8Async(b, 0x3c, 1000, s));
		CK(cuMemcpyPeerAsync(a + 5, c0, b, c1, 2000, s));
		CK(cuStreamSynchronize(s));
		CK(cuCtxSetCurrent(c0));
		CK(cuMemcpyDtoH(back, a, 2005));
		CHECK(back[4] == h[4] && back[5] == 0x3c && back[1004] == 0x3c && back[1005] == h[1000] &&
			      back[2004] == h[1999],
		      "async peer copy 1 -> 0 differs");
		/* a stream of device 0 waits for an event of device 1 (how
		 * PyTorch orders its copies between GPUs) */
		CK(cuCtxSetCurrent(c1));
		CUevent e1;
		CK(cuEventCreate(&e1, CU_EVENT_DISABLE_TIMING));
		CK(cuMemsetD8Async(b, 0x5a, 64, s));
		CK(cuEventRecord(e1, s));
		CK(cuCtxSetCurrent(c0));
		CUstream s0;
		CK(cuStreamCreate(&s0, CU_STREAM_NON_BLOCKING));
		CK(cuStreamWaitEvent(s0, e1, 0));
		CK(cuMemcpyPeerAsync(a, c0, b, c1, 64, s0));
		CK(cuStreamSynchronize(s0));
		CK(cuMemcpyDtoH(back, a, 64));
		CHECK(back[0] == 0x5a && back[63] == 0x5a, "a copy after another GPU's event saw %#x",
		      back[0]);
		CK(cuStreamDestroy(s0));
		CK(cuCtxSetCurrent(c1));
		CK(cuEventDestroy(e1));
		CK(cuCtxSetCurrent(c0));
		/* a pool of device 0 opened to device 1 */
		CUmemPoolProps pp = pool_props(0);
		CUmemoryPool pool;
		CK(cuMemPoolCreate(&pool, &pp));
		CUmemAccessDesc pacc = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 1 },
					 .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
		CK(cuMemPoolSetAccess(pool, &pacc, 1));
		CUmemAccess_flags af = CU_MEM_ACCESS_FLAGS_PROT_NONE;
		CK(cuMemPoolGetAccess(&af, pool, &pacc.location));
		CHECK(af == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "pool access from device 1: %d", (int)af);
		CK(cuMemPoolDestroy(pool));
		CK(cuCtxDisablePeerAccess(c1));
		EXPECT_RC(cuCtxDisablePeerAccess(c1), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
		CK(cuCtxSetCurrent(c1));
		CK(cuStreamDestroy(s));
		say("peer copies between two GPUs of one server ok");

		/* pinned host memory named by kernels on both GPUs, peer
		 * access off (p2pBandwidthLatencyTest's flag): over TCP its
		 * device copy is on the first GPU and serves the second */
		int *hp;
		CUdeviceptr hd;
		int hn = 1024;
		CK(cuCtxSetCurrent(c0));
		CK(cuMemHostAlloc((void **)&hp, hn * sizeof(int),
				  CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
		CK(cuMemHostGetDevicePointer(&hd, hp, 0));
		for (int i = 0; i < hn; i++)
			hp[i] = i;
		void *hargs[] = { &hd, &hn };
		CUmodule m0 = load_test_module();
		launch1d(get_func(m0, "inc_i32"), (unsigned)hn, NULL, hargs);
		CK(cuCtxSynchronize());
		CK(cuCtxSetCurrent(c1));
		CUmodule m1 = load_test_module();
		launch1d(get_func(m1, "inc_i32"), (unsigned)hn, NULL, hargs);
		CK(cuCtxSynchronize());
		for (int i = 0; i < hn; i++)
			CHECK(hp[i] == i + 2, "pinned memory after kernels on both GPUs: [%d] = %d", i, hp[i]);
		CK(cuModuleUnload(m1));
		CK(cuCtxSetCurrent(c0));
		CK(cuModuleUnload(m0));
		CK(cuMemFreeHost(hp));
		say("pinned memory used by kernels on both GPUs");
	}
	CK(cuCtxSetCurrent(c1));
	CK(cuMemFree(b));
	CK(cuCtxSetCurrent(c0));
	CK(cuMemFree(a));
	CK(cuCtxSetCurrent(NULL));
	CK(cuDevicePrimaryCtxRelease(d1));
	CK(cuDevicePrimaryCtxRelease(d0));
	free(h);
	free(back);
}

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	if (argc == 3 && !strcmp(argv[1], "child"))
		return child(atoi(argv[2]));
	/* peers first: access enabled before the session's first allocation
	 * must hold for the allocations after it (simpleP2P) */
	const char *peer = getenv("T_APPMEM_PEER");
	CK(cuInit(0));
	if (peer && *peer)
		test_peer(atoi(peer));
	primary_ctx(0, NULL);
	CUmodule mod = load_test_module();
	test_vmm(mod);
	test_share(argv[0]);
	test_pools();
	test_pool_order(mod);
	test_memset2d();
	test_registered(mod);
	CK(cuModuleUnload(mod));
	primary_ctx_release(0);
	printf("t_appmem: OK\n");
	return 0;
}
