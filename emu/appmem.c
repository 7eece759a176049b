/*
 * What rgpud's application-memory requests need of a device (daemon/
 * ops_appvmm.c, ops_pool.c, ops_peer.c, ops_gpustatus.c): 2D memsets,
 * peers, stream-ordered pools and the PCI bus id.  Built from the other
 * entry points of this library, so the checks (handles, bounds, streams)
 * are theirs.
 *
 * - 2D memsets are one memset per row, queued on the stream in order.
 * - Peers: any two different devices can access each other.  Peer access
 *   is remembered per (context, peer context) pair with CUDA's errors for
 *   enabling twice and disabling what was not enabled; it does not open a
 *   context's kernels to the peer's memory (copies only).  A peer copy runs
 *   after the stream's earlier work, through host memory.
 * - Pools: each allocation is VMM memory of its own (reserved, created,
 *   mapped, accessible from the pool's device), so every context of that
 *   device may use it, as with a real pool.  Sizes round up to 2 MiB.
 *   cuMemFreeAsync waits for the stream and then returns the block to the
 *   pool; blocks beyond the release threshold are freed at once (a real
 *   pool does that at the next synchronisation), cuMemPoolTrimTo frees free
 *   blocks down to what it keeps.  Reuse is exact-size first fit.
 */
#include "emu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GRAN EMU_VMM_GRANULARITY

/* ---- 2D memsets */

static CUresult memset2d(CUdeviceptr dst, size_t pitch, unsigned v, unsigned esz, size_t w, size_t h,
			 CUstream s, int sync)
{
	if (h > 1 && pitch < w * esz)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t y = 0; y < h; y++) {
		CUdeviceptr row = dst + y * pitch;
		CUresult rc;

		switch (esz) {
		case 1:
			rc = sync ? cuMemsetD8_v2(row, (unsigned char)v, w)
				  : cuMemsetD8Async(row, (unsigned char)v, w, s);
			break;
		case 2:
			rc = sync ? cuMemsetD16_v2(row, (unsigned short)v, w)
				  : cuMemsetD16Async(row, (unsigned short)v, w, s);
			break;
		default:
			rc = sync ? cuMemsetD32_v2(row, v, w) : cuMemsetD32Async(row, v, w, s);
		}
		if (rc != CUDA_SUCCESS)
			return rc;
	}
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuMemsetD2D8_v2(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h)
{
	return memset2d(d, pitch, v, 1, w, h, NULL, 1);
}

EMU_API CUresult CUDAAPI cuMemsetD2D16_v2(CUdeviceptr d, size_t pitch, unsigned short v, size_t w, size_t h)
{
	return memset2d(d, pitch, v, 2, w, h, NULL, 1);
}

EMU_API CUresult CUDAAPI cuMemsetD2D32_v2(CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h)
{
	return memset2d(d, pitch, v, 4, w, h, NULL, 1);
}

EMU_API CUresult CUDAAPI cuMemsetD2D8Async(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h,
					   CUstream s)
{
	return memset2d(d, pitch, v, 1, w, h, s, 0);
}

EMU_API CUresult CUDAAPI cuMemsetD2D16Async(CUdeviceptr d, size_t pitch, unsigned short v, size_t w, size_t h,
					    CUstream s)
{
	return memset2d(d, pitch, v, 2, w, h, s, 0);
}

EMU_API CUresult CUDAAPI cuMemsetD2D32Async(CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h,
					    CUstream s)
{
	return memset2d(d, pitch, v, 4, w, h, s, 0);
}

/* ---- devices */

static int valid_dev(CUdevice d)
{
	return emu_initialized() && d >= 0 && d < emu_ndevices;
}

EMU_API CUresult CUDAAPI cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!valid_dev(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	if (!pciBusId || len < 13)
		return CUDA_ERROR_INVALID_VALUE;
	/* the bus number the attributes report (CU_DEVICE_ATTRIBUTE_PCI_BUS_ID) */
	int bus = 0;
	cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev);
	snprintf(pciBusId, (size_t)len, "00000000:%02X:00.0", (unsigned)bus & 0xff);
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!can)
		return CUDA_ERROR_INVALID_VALUE;
	if (!valid_dev(dev) || !valid_dev(peer))
		return CUDA_ERROR_INVALID_DEVICE;
	*can = dev != peer;
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attr, CUdevice src, CUdevice dst)
{
	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	if (!valid_dev(src) || !valid_dev(dst) || src == dst)
		return CUDA_ERROR_INVALID_DEVICE;
	switch (attr) {
	case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK:
		*value = 0;
		return CUDA_SUCCESS;
	case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED:
		*value = 1;
		return CUDA_SUCCESS;
	case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED:
	case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED:
		*value = 0;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

/* No native atomics between emulated GPUs (as the P2P attribute says):
 * every operation's capabilities are none. */
EMU_API CUresult CUDAAPI cuDeviceGetP2PAtomicCapabilities(unsigned int *capabilities,
							  const CUatomicOperation *operations, unsigned int count,
							  CUdevice src, CUdevice dst)
{
	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!capabilities || !operations || !count)
		return CUDA_ERROR_INVALID_VALUE;
	if (!valid_dev(src) || !valid_dev(dst) || src == dst)
		return CUDA_ERROR_INVALID_DEVICE;
	for (unsigned i = 0; i < count; i++)
		capabilities[i] = 0;
	return CUDA_SUCCESS;
}

/* ---- peer access and peer copies */

struct peer_pair {
	CUcontext ctx, peer;
};
static pthread_mutex_t peer_lock = PTHREAD_MUTEX_INITIALIZER;
static struct peer_pair *pairs;
static size_t npairs, cappairs;

static int ctx_device(CUcontext c, int *dev)
{
	struct emu_ctx **v;
	size_t n;
	int found = 0;

	if (emu_ctx_hold_all(&v, &n) != CUDA_SUCCESS)
		return 0;
	for (size_t i = 0; i < n; i++) {
		if ((CUcontext)v[i] == c && !v[i]->dying) {
			*dev = v[i]->dev;
			found = 1;
		}
		emu_ctx_leave(v[i]);
	}
	free(v);
	return found;
}

EMU_API CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
	struct emu_ctx *ctx;
	CUresult rc = emu_ctx_enter(&ctx);
	int pdev;

	if (rc != CUDA_SUCCESS)
		return rc;
	int dev = ctx->dev;
	CUcontext me = (CUcontext)ctx;
	emu_ctx_leave(ctx);
	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ctx_device(peer, &pdev))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (pdev == dev)
		return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
	emu_lock(&peer_lock);
	for (size_t i = 0; i < npairs; i++)
		if (pairs[i].ctx == me && pairs[i].peer == peer) {
			emu_unlock(&peer_lock);
			return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
		}
	if (npairs == cappairs) {
		size_t cap = cappairs ? cappairs * 2 : 8;
		struct peer_pair *p = realloc(pairs, cap * sizeof *p);
		if (!p) {
			emu_unlock(&peer_lock);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		pairs = p;
		cappairs = cap;
	}
	pairs[npairs++] = (struct peer_pair){ me, peer };
	emu_unlock(&peer_lock);
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peer)
{
	struct emu_ctx *ctx;
	CUresult rc = emu_ctx_enter(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	CUcontext me = (CUcontext)ctx;
	emu_ctx_leave(ctx);
	emu_lock(&peer_lock);
	for (size_t i = 0; i < npairs; i++)
		if (pairs[i].ctx == me && pairs[i].peer == peer) {
			pairs[i] = pairs[--npairs];
			emu_unlock(&peer_lock);
			return CUDA_SUCCESS;
		}
	emu_unlock(&peer_lock);
	return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
}

/* Through a host buffer, each side in its own context (the bounds checks
 * of each context apply to its side). */
static CUresult peer_copy(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n,
			  CUstream s, int async)
{
	CUcontext cur = emu_ctx_current_handle();
	CUresult rc;
	void *buf;

	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (async && (rc = cuStreamSynchronize(s)) != CUDA_SUCCESS)
		return rc;
	if (n == 0)
		return CUDA_SUCCESS;
	buf = malloc(n);
	if (!buf)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = cuCtxSetCurrent(sctx);
	if (rc == CUDA_SUCCESS)
		rc = cuMemcpyDtoH_v2(buf, src, n);
	if (rc == CUDA_SUCCESS && (rc = cuCtxSetCurrent(dctx)) == CUDA_SUCCESS)
		rc = cuMemcpyHtoD_v2(dst, buf, n);
	free(buf);
	if (cuCtxSetCurrent(cur) != CUDA_SUCCESS)
		cuCtxSetCurrent(NULL);
	return rc;
}

EMU_API CUresult CUDAAPI cuMemcpyPeer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n)
{
	return peer_copy(dst, dctx, src, sctx, n, NULL, 0);
}

EMU_API CUresult CUDAAPI cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx,
					   size_t n, CUstream s)
{
	return peer_copy(dst, dctx, src, sctx, n, s, 1);
}

/* ---- stream-ordered pools */

struct pblock {
	CUdeviceptr addr;
	size_t size;                 /* rounded to GRAN */
	CUmemGenericAllocationHandle h;
	int used;
};

struct emu_pool {
	struct emu_pool *next;
	int dev;
	int is_default;
	uint64_t threshold;
	size_t reserved, reserved_high, used, used_high;
	int reuse[3];
	struct pblock *b;
	size_t nb, capb;
};

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct emu_pool *pools;
static struct emu_pool *default_pools[EMU_MAX_DEVICES];

static struct emu_pool *pool_find(CUmemoryPool p)
{
	for (struct emu_pool *x = pools; x; x = x->next)
		if ((CUmemoryPool)x == p)
			return x;
	return NULL;
}

static struct emu_pool *pool_new(int dev, int is_default)
{
	struct emu_pool *p = calloc(1, sizeof *p);

	if (!p)
		return NULL;
	p->dev = dev;
	p->is_default = is_default;
	p->reuse[0] = p->reuse[1] = p->reuse[2] = 1;
	p->next = pools;
	pools = p;
	return p;
}

EMU_API CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool *out, CUdevice dev)
{
	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	if (!valid_dev(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	emu_lock(&pool_lock);
	if (!default_pools[dev])
		default_pools[dev] = pool_new(dev, 1);
	*out = (CUmemoryPool)default_pools[dev];
	emu_unlock(&pool_lock);
	return *out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

EMU_API CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool *out, const CUmemPoolProps *props)
{
	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!out || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	if (!valid_dev(props->location.id))
		return CUDA_ERROR_INVALID_DEVICE;
	emu_lock(&pool_lock);
	struct emu_pool *p = pool_new(props->location.id, 0);
	emu_unlock(&pool_lock);
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*out = (CUmemoryPool)p;
	return CUDA_SUCCESS;
}

static void block_free(struct pblock *b)
{
	cuMemUnmap(b->addr, b->size);
	cuMemRelease(b->h);
	cuMemAddressFree(b->addr, b->size);
}

/* Frees unused blocks until at most keep bytes stay reserved (pool_lock
 * held; the blocks are unmapped after it is dropped: *out, *nout). */
static void pool_shrink(struct emu_pool *p, size_t keep, struct pblock **out, size_t *nout)
{
	size_t k = 0;

	*out = malloc((p->nb ? p->nb : 1) * sizeof **out);
	*nout = 0;
	for (size_t i = 0; i < p->nb; i++) {
		if (!p->b[i].used && p->reserved > keep && *out) {
			p->reserved -= p->b[i].size;
			(*out)[(*nout)++] = p->b[i];
		} else {
			p->b[k++] = p->b[i];
		}
	}
	p->nb = k;
}

static void blocks_free(struct pblock *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		block_free(&v[i]);
	free(v);
}

EMU_API CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool)
{
	struct pblock *v;
	size_t n;

	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	emu_lock(&pool_lock);
	struct emu_pool *p = pool_find(pool);
	if (!p || p->is_default) {
		emu_unlock(&pool_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	for (struct emu_pool **pp = &pools; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	/* live allocations die with the pool here (CUDA frees them once freed) */
	for (size_t i = 0; i < p->nb; i++)
		p->b[i].used = 0;
	pool_shrink(p, 0, &v, &n);
	emu_unlock(&pool_lock);
	blocks_free(v, n);
	free(p->b);
	free(p);
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
	struct pblock *v;
	size_t n;

	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	emu_lock(&pool_lock);
	struct emu_pool *p = pool_find(pool);
	if (!p) {
		emu_unlock(&pool_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	pool_shrink(p, keep, &v, &n);
	emu_unlock(&pool_lock);
	blocks_free(v, n);
	return CUDA_SUCCESS;
}

static int int_attr(CUmemPool_attribute a)
{
	return a == CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES ||
	       a == CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC ||
	       a == CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES;
}

EMU_API CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	emu_lock(&pool_lock);
	struct emu_pool *p = pool_find(pool);
	CUresult rc = p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (p && int_attr(attr)) {
		*(int *)value = p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
	} else if (p) {
		cuuint64_t v = 0;
		switch (attr) {
		case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: v = p->threshold; break;
		case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: v = p->reserved; break;
		case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: v = p->reserved_high; break;
		case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: v = p->used; break;
		case CU_MEMPOOL_ATTR_USED_MEM_HIGH: v = p->used_high; break;
		default: rc = CUDA_ERROR_INVALID_VALUE;
		}
		if (rc == CUDA_SUCCESS)
			*(cuuint64_t *)value = v;
	}
	emu_unlock(&pool_lock);
	return rc;
}

EMU_API CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	struct pblock *v = NULL;
	size_t n = 0;

	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	emu_lock(&pool_lock);
	struct emu_pool *p = pool_find(pool);
	CUresult rc = p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (p && int_attr(attr)) {
		p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES] = *(int *)value != 0;
	} else if (p) {
		cuuint64_t x = *(cuuint64_t *)value;
		switch (attr) {
		case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
			p->threshold = x;
			pool_shrink(p, x, &v, &n);
			break;
		case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
		case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
			/* only a reset to 0 is allowed */
			if (x != 0)
				rc = CUDA_ERROR_INVALID_VALUE;
			else if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
				p->reserved_high = p->reserved;
			else
				p->used_high = p->used;
			break;
		default:
			rc = CUDA_ERROR_INVALID_VALUE;
		}
	}
	emu_unlock(&pool_lock);
	if (n || v)
		blocks_free(v, n);
	return rc;
}

EMU_API CUresult CUDAAPI cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!map || !count)
		return CUDA_ERROR_INVALID_VALUE;
	emu_lock(&pool_lock);
	struct emu_pool *p = pool_find(pool);
	emu_unlock(&pool_lock);
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < count; i++)
		if (map[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || !valid_dev(map[i].location.id))
			return CUDA_ERROR_INVALID_DEVICE;
	return CUDA_SUCCESS;
}

/* A new block of size bytes on dev (no lock held). */
static CUresult block_new(int dev, size_t size, struct pblock *b)
{
	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				     .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev } };
	CUmemAccessDesc acc = { .location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CUresult rc = cuMemAddressReserve(&b->addr, size, 0, 0, 0);

	if (rc != CUDA_SUCCESS)
		return rc;
	rc = cuMemCreate(&b->h, size, &prop, 0);
	if (rc != CUDA_SUCCESS) {
		cuMemAddressFree(b->addr, size);
		return rc;
	}
	if ((rc = cuMemMap(b->addr, size, 0, b->h, 0)) != CUDA_SUCCESS ||
	    (rc = cuMemSetAccess(b->addr, size, &acc, 1)) != CUDA_SUCCESS) {
		cuMemUnmap(b->addr, size);
		cuMemRelease(b->h);
		cuMemAddressFree(b->addr, size);
		return rc;
	}
	b->size = size;
	b->used = 1;
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream s)
{
	struct emu_ctx *ctx;
	CUresult rc = emu_ctx_enter_locked(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	int ok = emu_stream_find(ctx, s) != NULL;
	emu_ctx_unlock_leave(ctx);
	if (!ok)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!dptr || bytes == 0 || bytes > SIZE_MAX - GRAN)
		return CUDA_ERROR_INVALID_VALUE;
	/* a capturing stream: a memory alloc node of its graph (graph.c) */
	if (emu_capture_mem(s, bytes, dptr, &rc))
		return rc;
	size_t size = (bytes + GRAN - 1) / GRAN * GRAN;
	emu_lock(&pool_lock);
	struct emu_pool *p = pool_find(pool);
	if (!p) {
		emu_unlock(&pool_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	int dev = p->dev;
	for (size_t i = 0; i < p->nb; i++)
		if (!p->b[i].used && p->b[i].size == size) {
			p->b[i].used = 1;
			p->used += size;
			if (p->used > p->used_high)
				p->used_high = p->used;
			*dptr = p->b[i].addr;
			emu_unlock(&pool_lock);
			return CUDA_SUCCESS;
		}
	emu_unlock(&pool_lock);
	struct pblock b;
	if ((rc = block_new(dev, size, &b)) != CUDA_SUCCESS)
		return rc;
	emu_lock(&pool_lock);
	p = pool_find(pool);
	if (p && p->nb == p->capb) {
		size_t cap = p->capb ? p->capb * 2 : 16;
		struct pblock *nb = realloc(p->b, cap * sizeof *nb);
		if (nb) {
			p->b = nb;
			p->capb = cap;
		}
	}
	if (!p || p->nb == p->capb) {
		emu_unlock(&pool_lock);
		block_free(&b);
		return p ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
	}
	p->b[p->nb++] = b;
	p->reserved += size;
	p->used += size;
	if (p->reserved > p->reserved_high)
		p->reserved_high = p->reserved;
	if (p->used > p->used_high)
		p->used_high = p->used;
	emu_unlock(&pool_lock);
	*dptr = b.addr;
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream s)
{
	struct emu_ctx *ctx;
	CUmemoryPool pool;
	CUresult rc = emu_ctx_enter(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	int dev = ctx->dev;
	emu_ctx_leave(ctx);
	if ((rc = cuDeviceGetDefaultMemPool(&pool, dev)) != CUDA_SUCCESS)
		return rc;
	return cuMemAllocFromPoolAsync(dptr, bytes, pool, s);
}

EMU_API CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
	CUresult rc;

	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	/* a capturing stream: a memory free node of its graph (graph.c) */
	if (emu_capture_mem(s, 0, &dptr, &rc))
		return rc;
	/* stream order: the block is free once the stream's earlier work is
	 * done (with no current context, at once: nothing can be queued) */
	if (emu_ctx_current_handle() && (rc = cuStreamSynchronize(s)) != CUDA_SUCCESS)
		return rc;
	/* a graph's allocation, freed outside the graph (memory.c keeps it) */
	struct emu_ctx *gctx;
	if (emu_ctx_enter(&gctx) == CUDA_SUCCESS) {
		int g = emu_mem_is_graph(gctx, dptr);
		emu_ctx_leave(gctx);
		if (g)
			return CUDA_SUCCESS;
	}
	return emu_pool_block_free(dptr) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

int emu_pool_block_free(CUdeviceptr dptr)
{
	struct pblock *v = NULL;
	size_t n = 0;
	emu_lock(&pool_lock);
	for (struct emu_pool *p = pools; p; p = p->next)
		for (size_t i = 0; i < p->nb; i++)
			if (p->b[i].addr == dptr && p->b[i].used) {
				p->b[i].used = 0;
				p->used -= p->b[i].size;
				pool_shrink(p, p->threshold, &v, &n);
				emu_unlock(&pool_lock);
				blocks_free(v, n);
				return 0;
			}
	emu_unlock(&pool_lock);
	return -1;
}
