/* Device memory: allocation under quota, and copies.  Bulk copies move in
 * RGPU_CHUNK_SIZE pieces through the session's pinned pool (stage.c), so
 * receiving one chunk overlaps the GPU's copy of the previous one. */
#include "log.h"
#include "appmem.h"
#include "gate.h"
#include "rgpud.h"
#include "session.h"
#include "mem/mem.h"

#include <errno.h>
#include <string.h>

#define D (&rgpud_server.drv)

int op_mem_get_info(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct ctx_state *cs;
	uint64_t ctx = get_u64(r);
	if (!rd_done(r))
		return OP_DROP;
	int rc = session_enter_ctx(s, ctx, &cs);
	size_t fr = 0, tot = 0;
	if (!rc)
		rc = D->cuMemGetInfo_v2(&fr, &tot);
	if (rc)
		return rc;
	uint64_t limit, used;
	gate_usage(cs->dev, &limit, &used);
	if (limit) {
		uint64_t qfree = used < limit ? limit - used : 0;
		if (qfree < fr)
			fr = qfree;
		tot = limit;
	}
	put_u64(out, fr);
	put_u64(out, tot);
	return CUDA_SUCCESS;
}

int session_mem_alloc(struct session *s, uint64_t ctx, unsigned dev, uint64_t size, uint64_t *addr)
{
	if (gate_charge_bytes(dev, size) < 0) /* unsigned: 2^63 is no refund */
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* the memory manager places it (mem/mem.h): movable, at an address
	 * that survives swapping and migration */
	uint64_t p = 0;
	int rc = mem_alloc(s, ctx, dev, size, &p);
	if (!rc && session_alloc_add(s, p, size, ctx, 0, dev) < 0) {
		mem_free(s, p);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (rc) {
		gate_refund_bytes(dev, size);
		return rc;
	}
	*addr = p;
	return CUDA_SUCCESS;
}

int session_mem_free(struct session *s, uint64_t addr)
{
	const struct alloc *g = session_alloc_get(s, addr);
	if (!g || g->module)
		return CUDA_ERROR_INVALID_VALUE; /* not ours: never free another tenant's */
	struct alloc a = session_alloc_del(s, addr);
	int rc = mem_free(s, addr);
	gate_charge(a.dev, -(int64_t)a.size);
	return rc;
}

int op_mem_alloc(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct ctx_state *cs;
	uint64_t ctx = get_u64(r);
	uint64_t size = get_u64(r);
	if (!rd_done(r))
		return OP_DROP;
	int rc = session_enter_ctx(s, ctx, &cs);
	if (rc)
		return rc;
	if (size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t p = 0;
	if ((rc = session_mem_alloc(s, ctx, cs->dev, size, &p)))
		return rc;
	put_u64(out, p);
	return CUDA_SUCCESS;
}

int op_mem_free(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r);
	uint64_t p = get_u64(r);
	if (!rd_done(r))
		return OP_DROP;
	int rc = session_enter_ctx(s, ctx, NULL);
	if (rc)
		return rc;
	if (vmem_owns(s, p))
		return CUDA_ERROR_INVALID_VALUE; /* VMEM_UNMAP frees those */
	struct alloc *g = session_alloc_get(s, p);
	if ((!g || g->module) && session_gmem_has(s, p)) {
		/* a graph's allocation, freed outside the graph as CUDA allows
		 * (graphMemoryFootprint): the driver's to free */
		return D->cuMemFree_v2(p);
	}
	/* stream-ordered memory freed with cuMemFree, as CUDA allows (rgpu's
	 * pool blocks are session allocations too) */
	if ((!g || !g->module) && (rc = pool_free_now(s, p)) >= 0)
		return rc;
	return session_mem_free(s, p);
}

/* A request the memory manager could not serve (an evicted session whose
 * memory found no room on the GPU again): its payload is skipped. */
int op_mem_refused(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	(void)out;
	if (h->len > r->left && session_skip(s, h->len - r->left) < 0)
		return OP_DROP;
	return s->mem_err;
}


/*
 * One HtoD chunk: fields (ctx, stream, dst, total, offset) then raw data.
 * The chunk lands in a pool buffer and is queued on the stream, so an
 * asynchronous copy (all chunks NOREPLY) never waits for the stream.  A
 * synchronous copy's last chunk asks for a reply, sent once the copy is
 * done.
 */
int op_memcpy_htod(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r), sid = get_u64(r), dst = get_u64(r);
	uint64_t total = get_u64(r), off = get_u64(r);
	if (!rd_done(r) || h->len < 40)
		return OP_DROP;
	size_t n = h->len - 40;
	if (n > RGPU_CHUNK_SIZE || off > total || n > total - off)
		return OP_DROP;
	void *st;
	struct xfer_pool *pool = stage_pool(s);
	int rc = stage_check(s, ctx, sid, dst + off, n, &st);
	int i = rc ? -1 : xfer_pool_get(pool, ctx, &rc);
	if (i < 0) {
		/* the data must still be consumed to stay in frame */
		return session_skip(s, n) < 0 ? OP_DROP : rc;
	}
	if (session_recv(s, pool->b[i].p, n) < 0)
		return OP_DROP;
	return stage_htod(pool, i, dst + off, n, st, 0,
			  off + n == total && !(h->flags & RGPU_F_NOREPLY));
}

/* data frames: status, then the chunk's bytes straight from the buffer */
static int send_data(struct session *s, const struct rgpu_hdr *h, struct xfer_pool *pool, int i,
		     size_t n, int more)
{
	return session_send_reply(s, h, more ? RGPU_F_MORE : 0, 0, pool->b[i].p, n);
}

int op_memcpy_dtoh(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r), sid = get_u64(r), src = get_u64(r), size = get_u64(r);
	if (!rd_done(r))
		return OP_DROP;
	void *st;
	int rc = stage_check(s, ctx, sid, src, size, &st);
	return stage_dtoh(s, h, stage_pool(s), ctx, st, src, size, send_data, rc);
}

int op_memcpy_dtod(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r), sid = get_u64(r), dst = get_u64(r), src = get_u64(r);
	uint64_t size = get_u64(r);
	uint32_t sync = get_u32(r);
	if (!rd_done(r))
		return OP_DROP;
	void *st;
	int rc = stage_check(s, ctx, sid, dst, size, &st);
	if (!rc && !session_owns_range(s, src, size))
		rc = CUDA_ERROR_INVALID_VALUE;
	if (rc)
		return rc;
	return sync ? (int)D->cuMemcpyDtoD_v2(dst, src, size) : (int)D->cuMemcpyDtoDAsync_v2(dst, src, size, st);
}

int op_memset(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r), sid = get_u64(r), dst = get_u64(r);
	uint32_t val = get_u32(r), esz = get_u32(r);
	uint64_t count = get_u64(r);
	uint32_t sync = get_u32(r);
	if (!rd_done(r))
		return OP_DROP;
	if ((esz != 1 && esz != 2 && esz != 4) || count > UINT64_MAX / esz)
		return CUDA_ERROR_INVALID_VALUE;
	void *st;
	int rc = stage_check(s, ctx, sid, dst, count * esz, &st);
	if (rc)
		return rc;
	switch (esz) {
	case 1: return sync ? (int)D->cuMemsetD8_v2(dst, (unsigned char)val, count)
			    : (int)D->cuMemsetD8Async(dst, (unsigned char)val, count, st);
	case 2: return sync ? (int)D->cuMemsetD16_v2(dst, (unsigned short)val, count)
			    : (int)D->cuMemsetD16Async(dst, (unsigned short)val, count, st);
	default: return sync ? (int)D->cuMemsetD32_v2(dst, val, count)
			     : (int)D->cuMemsetD32Async(dst, val, count, st);
	}
}
