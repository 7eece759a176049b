/*
 * Stream-ordered memory pools (cuMemPoolCreate, cuMemAllocAsync, ...),
 * served by the driver's pools.  The quota counts what a pool holds of the
 * GPU: its reserved memory (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), not the
 * bytes allocated from it.  Each allocation is charged up front (so a full
 * quota refuses it) and the pool's charge is then set to its reserve after
 * every call that can move it (allocation, free, trim, threshold change).
 * A pool grows only in an allocation, so the charge is never below the
 * reserve; memory the pool gives back at a synchronisation is refunded at
 * the pool's next call.  Allocations made while a stream is captured are
 * graph memory, allocated when the graph runs, and not charged here.
 */
#include "appmem.h"
#include "gate.h"
#include "log.h"
#include "rgpud.h"
#include "session.h"

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
	/* the driver frees the pool's memory once its allocations are freed;
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
	cuuint64_t v = 0;
	int iv = 0;
	int rc = D->cuMemPoolGetAttribute(pl->p, (CUmemPool_attribute)attr,
					  is_int_attr(attr) ? (void *)&iv : (void *)&v);
	if (rc)
		return rc;
	put_u64(out, is_int_attr(attr) ? (uint64_t)(uint32_t)iv : v);
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
	cuuint64_t v = val;
	int iv = (int)val;
	int rc = D->cuMemPoolSetAttribute(pl->p, (CUmemPool_attribute)attr,
					  is_int_attr(attr) ? (void *)&iv : (void *)&v);
	if (!rc)
		settle(pl);
	return rc;
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
	int rc = D->cuMemPoolTrimTo(pl->p, keep);
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
	return D->cuMemPoolSetAccess(pl->p, desc, n);
}

int op_mem_alloc_async(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX);
	uint64_t sid = get_u64(r), pid = get_u64(r), size = get_u64(r);
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
	if (a->npallocs == a->cappallocs) {
		size_t cap = a->cappallocs ? a->cappallocs * 2 : 64;
		struct palloc *n = realloc(a->pallocs, cap * sizeof(*n));
		if (!n)
			return CUDA_ERROR_OUT_OF_MEMORY;
		a->pallocs = n;
		a->cappallocs = cap;
	}
	/* up front, so a full quota refuses it; settled to the reserve below */
	if (gate_charge_bytes(pl->gpu, size) < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pl->charged += size;
	CUdeviceptr p = 0;
	rc = D->cuMemAllocFromPoolAsync(&p, size, pl->p, st);
	/* captured, it is the graph's allocation node (the pool's memory does
	 * not change now), and asking the pool during the capture may end it */
	if (!capturing(st))
		settle(pl);
	if (rc)
		return rc;
	size_t i = (size_t)(appmem_palloc_find(a, p) + 1);
	while (i < a->npallocs && a->pallocs[i].addr < p)
		i++;
	memmove(&a->pallocs[i + 1], &a->pallocs[i], (a->npallocs - i) * sizeof(*a->pallocs));
	a->pallocs[i] = (struct palloc){ p, size, pl };
	a->npallocs++;
	put_u64(out, p);
	return CUDA_SUCCESS;
}

int pool_free_now(struct session *s, uint64_t p)
{
	struct appmem *a = s->appmem;
	int i = a ? appmem_palloc_find(a, p) : -1;
	if (i < 0 || a->pallocs[i].addr != p)
		return -1;
	/* (the driver's cuMemFree waits for the device, then frees) */
	int rc = D->cuMemFree_v2(p);
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
	int i = a ? appmem_palloc_find(a, p) : -1;
	CUstream st;
	if (i < 0 || a->pallocs[i].addr != p) {
		/* a graph's allocation, freed in stream order outside the
		 * graph (graphMemoryNodes) */
		if (!session_gmem_has(s, p))
			return CUDA_ERROR_INVALID_VALUE;
		if ((rc = session_stream(s, sid, &st)))
			return rc;
		return D->cuMemFreeAsync(p, st);
	}
	if ((rc = session_stream(s, sid, &st)))
		return rc;
	if ((rc = D->cuMemFreeAsync(p, st)))
		return rc;
	struct pool *pl = a->pallocs[i].pool;
	memmove(&a->pallocs[i], &a->pallocs[i + 1], (a->npallocs - (size_t)i - 1) * sizeof(*a->pallocs));
	a->npallocs--;
	if (!capturing(st))
		settle(pl);
	return CUDA_SUCCESS;
}

void pool_cleanup(struct session *s, struct appmem *a)
{
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
