/*
 * Stream-ordered memory pools (cuMemPoolCreate, cuMemAllocAsync, ...):
 * the requests.  Their memory is rgpu's (mem/pool.h), charged to the
 * quota by the bytes each pool reserves.  Allocations made while a stream
 * is captured are graph memory, allocated when the graph runs: those go
 * to the driver's pool behind each pool (its reserve charged after every
 * call that can move it, never below it: a pool grows only in an
 * allocation).
 */
#include "appmem.h"
#include "gate.h"
#include "log.h"
#include "rgpud.h"
#include "session.h"
#include "mem/mem.h"
#include "mem/pool.h"

#include <stdlib.h>
#include <string.h>

#define D (&rgpud_server.drv)

static int have_pools(void)
{
	return D->cuDeviceGetDefaultMemPool && D->cuMemPoolCreate && D->cuMemPoolDestroy &&
	       D->cuMemPoolGetAttribute && D->cuMemPoolSetAttribute && D->cuMemPoolTrimTo &&
	       D->cuMemAllocFromPoolAsync && D->cuMemFreeAsync;
}

int appmem_palloc_find(struct appmem *a, uint64_t p)
{
	size_t lo = 0, hi = a->npallocs;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (a->pallocs[mid].addr <= p)
			lo = mid + 1;
		else
			hi = mid;
	}
	int i = (int)lo - 1;
	if (i >= 0 && p - a->pallocs[i].addr < (a->pallocs[i].size ? a->pallocs[i].size : 1))
		return i;
	return -1;
}

/* Sets the pool's charge to its reserve now. */
static void settle(struct pool *pl)
{
	cuuint64_t reserved = 0;
	if (D->cuMemPoolGetAttribute(pl->p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved))
		return;
	if (reserved > pl->charged) {
		if (gate_charge_bytes(pl->gpu, reserved - pl->charged) == 0)
			pl->charged = reserved;
	} else if (reserved < pl->charged) {
		if (gate_refund_bytes(pl->gpu, pl->charged - reserved) == 0)
			pl->charged = reserved;
	}
}

static int capturing(CUstream st)
{
	CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
	return D->cuStreamIsCapturing && D->cuStreamIsCapturing(st, &cs) == CUDA_SUCCESS &&
	       cs != CU_STREAM_CAPTURE_STATUS_NONE;
}

static struct pool *pool_get(struct session *s, uint64_t id)
{
	struct hentry *e = ht_get(&s->ht, id, HK_POOL);
	return e ? e->obj : NULL;
}

static int pool_add(struct session *s, struct appmem *a, CUmemoryPool p, unsigned gpu,
		    int is_default, uint64_t *id)
{
	struct pool *pl = calloc(1, sizeof(*pl));
	if (!pl || !(pl->id = ht_add(&s->ht, HK_POOL, pl, 0, NULL))) {
		free(pl);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pl->p = p;
	pl->gpu = gpu;
	pl->is_default = is_default;
	pl->reuse[0] = pl->reuse[1] = pl->reuse[2] = 1;
	pl->access = 1ull << gpu;
	pl->next = a->pools;
	a->pools = pl;
	*id = pl->id;
	return CUDA_SUCCESS;
}

/* A pool op on GPU gpu: the driver has pools, the session's application
 * memory, and the session may use the GPU. */
static int pool_admit(struct session *s, uint32_t gpu, struct appmem **a)
{
	if (!have_pools())
		return CUDA_ERROR_NOT_SUPPORTED;
	*a = appmem_of(s);
	return *a ? session_admit(s, gpu) : CUDA_ERROR_OUT_OF_MEMORY;
}

int op_pool_create(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint32_t gpu = get_u32(r);
	uint64_t threshold = get_u64(r), maxsize = get_u64(r);
	if (!rd_done(r))
		return OP_DROP;
	struct appmem *a;
	int rc = pool_admit(s, gpu, &a);
	if (rc)
		return rc;
	CUmemPoolProps props = { .allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
				 .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = (int)gpu },
				 .maxSize = maxsize };
	CUmemoryPool p;
	if ((rc = D->cuMemPoolCreate(&p, &props)))
		return rc;
	cuuint64_t t = threshold;
	if (threshold && (rc = D->cuMemPoolSetAttribute(p, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &t))) {
		D->cuMemPoolDestroy(p);
		return rc;
	}
	uint64_t id;
	if ((rc = pool_add(s, a, p, gpu, 0, &id))) {
		D->cuMemPoolDestroy(p);
		return rc;
	}
	struct pool *pl = pool_get(s, id);
	pl->threshold = threshold;
	pl->maxsize = maxsize;
	put_u64(out, id);
	return CUDA_SUCCESS;
}

int op_pool_default(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint32_t gpu = get_u32(r);
	if (!rd_done(r))
		return OP_DROP;
	struct appmem *a;
	int rc = pool_admit(s, gpu, &a);
	if (rc)
		return rc;
	for (struct pool *pl = a->pools; pl; pl = pl->next)
		if (pl->is_default && pl->gpu == gpu) {
			put_u64(out, pl->id);
			return CUDA_SUCCESS;
		}
	CUdevice dev;
	CUmemoryPool p;
	if ((rc = D->cuDeviceGet(&dev, (int)gpu)) || (rc = D->cuDeviceGetDefaultMemPool(&p, dev)))
		return rc;
	uint64_t id;
	if ((rc = pool_add(s, a, p, gpu, 1, &id)))
		return rc;
	put_u64(out, id);
	return CUDA_SUCCESS;
}

/* Frees what is left of the pool's allocations (they die with it). */
static void pool_forget_allocs(struct appmem *a, struct pool *pl)
{
	size_t k = 0;
	for (size_t i = 0; i < a->npallocs; i++)
		if (a->pallocs[i].pool != pl)
			a->pallocs[k++] = a->pallocs[i];
	a->npallocs = k;
}

static void pool_free(struct session *s, struct appmem *a, struct pool *pl)
{
	for (struct pool **pp = &a->pools; *pp; pp = &(*pp)->next)
		if (*pp == pl) {
			*pp = pl->next;
			break;
		}
	ht_del(&s->ht, pl->id);
	if (pl->charged)
		gate_refund_bytes(pl->gpu, pl->charged);
	free(pl);
}

int op_pool_destroy(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t id = get_u64(r);
	if (!rd_done(r))
		return OP_DROP;
	struct pool *pl = pool_get(s, id);
	if (!pl || pl->is_default)
		return CUDA_ERROR_INVALID_VALUE;
	int rc = D->cuMemPoolDestroy(pl->p);
	if (rc)
		return rc;
	pb_pool_gone(s, pl);
	/* the driver frees its pool's memory once its allocations are freed;
	 * the session can no longer reach them */
	pool_forget_allocs(s->appmem, pl);
	pool_free(s, s->appmem, pl);
	return CUDA_SUCCESS;
}

static int attr_ok(uint32_t attr, int set)
{
	switch (attr) {
	case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
	case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
	case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
	case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
		return 1;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
	case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
		return !set;
	default:
		return 0;
	}
}

static int is_int_attr(uint32_t attr)
{
	return attr == CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES ||
	       attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC ||
	       attr == CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES;
}

int op_pool_get_attr(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t id = get_u64(r);
	uint32_t attr = get_u32(r);
	if (!rd_done(r))
		return OP_DROP;
	struct pool *pl = pool_get(s, id);
	if (!pl || !attr_ok(attr, 0))
		return CUDA_ERROR_INVALID_VALUE;
	pb_sweep(s);
	uint64_t v = 0;
	switch (attr) {
	case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES: v = (uint64_t)pl->reuse[0]; break;
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC: v = (uint64_t)pl->reuse[1]; break;
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: v = (uint64_t)pl->reuse[2]; break;
	case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: v = pl->threshold; break;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: v = pl->reserved; break;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: v = pl->reserved_high; break;
	case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: v = pl->used; break;
	case CU_MEMPOOL_ATTR_USED_MEM_HIGH: v = pl->used_high; break;
	}
	put_u64(out, v);
	return CUDA_SUCCESS;
}

int op_pool_set_attr(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t id = get_u64(r);
	uint32_t attr = get_u32(r);
	uint64_t val = get_u64(r);
	if (!rd_done(r))
		return OP_DROP;
	struct pool *pl = pool_get(s, id);
	if (!pl || !attr_ok(attr, 1))
		return CUDA_ERROR_INVALID_VALUE;
	if (is_int_attr(attr) && val > 1)
		return CUDA_ERROR_INVALID_VALUE;
	switch (attr) {
	case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES: pl->reuse[0] = (int)val; break;
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC: pl->reuse[1] = (int)val; break;
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: pl->reuse[2] = (int)val; break;
	case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: pl->threshold = val; break;
	/* the high-water marks: only reset (to the current value), as CUDA */
	case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
		if (val)
			return CUDA_ERROR_INVALID_VALUE;
		pl->reserved_high = pl->reserved;
		break;
	case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
		if (val)
			return CUDA_ERROR_INVALID_VALUE;
		pl->used_high = pl->used;
		break;
	}
	return CUDA_SUCCESS;
}

/* The session's streams whose work is done, synchronised (at once): a
 * pool gives memory back at synchronisations, and a program's own may not
 * have reached the driver (the client answers the sync of a stream it
 * knows idle).  A trim through rgpud
 * left a freed 32 MiB block reserved on the H100 and the H200 where the
 * driver alone gave it all back; this is the likely cause, not yet
 * confirmed on a GPU. */
static void streams_settle(struct session *s)
{
	for (uint32_t i = 0; i < s->ht.n; i++) {
		struct hentry *e = &s->ht.e[i];
		if (e->kind == HK_STREAM && D->cuStreamQuery(e->obj) == CUDA_SUCCESS)
			(void)D->cuStreamSynchronize(e->obj);
	}
	if (D->cuStreamQuery(CU_STREAM_LEGACY) == CUDA_SUCCESS)
		(void)D->cuStreamSynchronize(CU_STREAM_LEGACY);
}

int op_pool_trim(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t id = get_u64(r), keep = get_u64(r);
	if (!rd_done(r))
		return OP_DROP;
	struct pool *pl = pool_get(s, id);
	if (!pl)
		return CUDA_ERROR_INVALID_VALUE;
	streams_settle(s);
	pb_trim(s, pl, keep);
	/* (the driver's pool holds no more than captures left it) */
	int rc = D->cuMemPoolTrimTo(pl->p, 0);
	if (!rc)
		settle(pl);
	return rc;
}

int op_pool_access(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t id = get_u64(r);
	CUmemAccessDesc desc[RGPUD_MAX_GPUS];
	uint32_t n;
	int rc = appmem_read_access(s, r, desc, &n);
	if (rc)
		return rc;
	if (!rd_done(r))
		return OP_DROP;
	struct pool *pl = pool_get(s, id);
	if (!pl || !n)
		return CUDA_ERROR_INVALID_VALUE;
	if (!D->cuMemPoolSetAccess)
		return CUDA_ERROR_NOT_SUPPORTED;
	if ((rc = D->cuMemPoolSetAccess(pl->p, desc, n)))
		return rc;
	/* rgpu's blocks: a GPU given access reaches all of the session's
	 * memory on the pool's GPU from then on (taking access away again
	 * is only recorded: more access than asked breaks no program) */
	for (uint32_t i = 0; i < n; i++) {
		unsigned g = (unsigned)desc[i].location.id;
		if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_NONE) {
			if (g != pl->gpu)
				pl->access &= ~(1ull << g);
			continue;
		}
		if (g != pl->gpu && !(pl->access >> g & 1) &&
		    (rc = mem_peer_access(s, pl->gpu, g, 1)))
			return rc;
		pl->access |= 1ull << g;
	}
	return CUDA_SUCCESS;
}

/* An allocation from the driver's pool: during a stream capture (graph
 * memory, allocated when the graph runs), or for another GPU's stream. */
static int alloc_driver(struct session *s, struct appmem *a, struct pool *pl, CUstream st,
			  uint64_t size, uint64_t *out)
{
	if (a->npallocs == a->cappallocs) {
		size_t cap = a->cappallocs ? a->cappallocs * 2 : 64;
		struct palloc *n = realloc(a->pallocs, cap * sizeof(*n));
		if (!n)
			return CUDA_ERROR_OUT_OF_MEMORY;
		a->pallocs = n;
		a->cappallocs = cap;
	}
	/* up front, so a full quota refuses it */
	if (gate_charge_bytes(pl->gpu, size) < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pl->charged += size;
	CUdeviceptr p = 0;
	int rc = D->cuMemAllocFromPoolAsync(&p, size, pl->p, st);
	/* (asking the pool during the capture may end it: settled later) */
	if (rc)
		return rc;
	size_t i = (size_t)(appmem_palloc_find(a, p) + 1);
	while (i < a->npallocs && a->pallocs[i].addr < p)
		i++;
	memmove(&a->pallocs[i + 1], &a->pallocs[i], (a->npallocs - i) * sizeof(*a->pallocs));
	a->pallocs[i] = (struct palloc){ p, size, pl };
	a->npallocs++;
	*out = p;
	return CUDA_SUCCESS;
}

int op_mem_alloc_async(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX);
	uint64_t sid = get_u64(r), pid = get_u64(r), size = get_u64(r);
	/* a recovery's replay names the address the client holds */
	uint64_t at = r->left == 8 ? get_u64(r) : 0;
	int rc = req_enter(s, r, &q, HK_FREE);
	if (rc)
		return rc;
	struct pool *pl = pool_get(s, pid);
	struct appmem *a = s->appmem;
	if (!pl || !a || !size)
		return CUDA_ERROR_INVALID_VALUE;
	CUstream st;
	if ((rc = session_stream(s, sid, &st)))
		return rc;
	uint64_t p = 0;
	int captured = capturing(st);
	if (!captured && pl->gpu == q.cs->dev) {
		rc = pb_alloc(s, pl, q.ctx, sid, st, size, at, &p);
	} else {
		/* (a pool of another GPU than the stream's: the driver's,
		 * placed where it places them) */
		rc = alloc_driver(s, a, pl, st, size, &p);
		if (!rc && !captured)
			settle(pl);
	}
	if (rc)
		return rc;
	put_u64(out, p);
	return CUDA_SUCCESS;
}

int pool_free_now(struct session *s, uint64_t p)
{
	int rc = pb_free_now(s, p);
	if (rc >= 0)
		return rc;
	struct appmem *a = s->appmem;
	int i = a ? appmem_palloc_find(a, p) : -1;
	if (i < 0 || a->pallocs[i].addr != p)
		return -1;
	/* (the driver's cuMemFree waits for the device, then frees) */
	rc = D->cuMemFree_v2(p);
	if (rc)
		return rc;
	struct pool *pl = a->pallocs[i].pool;
	memmove(&a->pallocs[i], &a->pallocs[i + 1], (a->npallocs - (size_t)i - 1) * sizeof(*a->pallocs));
	a->npallocs--;
	settle(pl);
	return CUDA_SUCCESS;
}

int op_mem_free_async(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX);
	uint64_t sid = get_u64(r), p = get_u64(r);
	int rc = req_enter(s, r, &q, HK_FREE);
	if (rc)
		return rc;
	struct appmem *a = s->appmem;
	CUstream st;
	if ((rc = session_stream(s, sid, &st)))
		return rc;
	if ((rc = pb_free_async(s, p, q.ctx, sid, st, capturing(st))) >= 0)
		return rc;
	int i = a ? appmem_palloc_find(a, p) : -1;
	if (i < 0 || a->pallocs[i].addr != p) {
		/* a graph's allocation, freed in stream order outside the
		 * graph (graphMemoryNodes) */
		if (!session_gmem_has(s, p))
			return CUDA_ERROR_INVALID_VALUE;
		return D->cuMemFreeAsync(p, st);
	}
	if ((rc = D->cuMemFreeAsync(p, st)))
		return rc;
	struct pool *pl = a->pallocs[i].pool;
	memmove(&a->pallocs[i], &a->pallocs[i + 1], (a->npallocs - (size_t)i - 1) * sizeof(*a->pallocs));
	a->npallocs--;
	if (!capturing(st))
		settle(pl);
	return CUDA_SUCCESS;
}

int op_pool_adopt(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t id = get_u64(r), addr = get_u64(r), size = get_u64(r);
	uint32_t used = get_u32(r);
	if (!rd_done(r))
		return OP_DROP;
	struct pool *pl = NULL;
	if (id && !(pl = pool_get(s, id)))
		return CUDA_ERROR_INVALID_VALUE;
	return pb_adopt(s, pl, addr, size, used != 0);
}

void pool_cleanup(struct session *s, struct appmem *a)
{
	pb_cleanup(s);
	/* allocations still live go back to their pools, then the pools go */
	for (size_t i = 0; i < a->npallocs; i++)
		D->cuMemFreeAsync(a->pallocs[i].addr, NULL);
	a->npallocs = 0;
	while (a->pools) {
		struct pool *pl = a->pools;
		if (pl->is_default)
			D->cuMemPoolTrimTo(pl->p, 0);
		else
			D->cuMemPoolDestroy(pl->p);
		pool_free(s, a, pl);
	}
}
