/* Device memory: allocation under quota, and copies.  Bulk copies move in
 * RGPU_CHUNK_SIZE pieces through two pinned staging buffers so receiving
 * one chunk overlaps the GPU's copy of the previous one. */
#include "log.h"
#include "gate.h"
#include "rgpud.h"
#include "session.h"

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
	if (gate_charge_bytes(cs->dev, size) < 0) /* unsigned: 2^63 is no refund */
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUdeviceptr p = 0;
	rc = D->cuMemAlloc_v2(&p, size);
	if (!rc && session_alloc_add(s, p, size, ctx, 0, cs->dev) < 0) {
		D->cuMemFree_v2(p);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (rc) {
		gate_refund_bytes(cs->dev, size);
		return rc;
	}
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
	struct alloc a = session_alloc_del(s, p);
	if (!a.size || a.module)
		return CUDA_ERROR_INVALID_VALUE; /* not ours: never free another tenant's */
	rc = D->cuMemFree_v2(p);
	gate_charge(a.dev, -(int64_t)a.size);
	return rc;
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
	CUstream st;
	int rc = session_enter_ctx(s, ctx, NULL);
	if (!rc)
		rc = session_stream(s, sid, &st);
	if (!rc && !session_owns_range(s, dst + off, n))
		rc = CUDA_ERROR_INVALID_VALUE;
	int i = rc ? -1 : stage_get(s, ctx, &rc);
	if (i < 0) {
		/* the data must still be consumed to stay in frame */
		return session_skip(s, n) < 0 ? OP_DROP : rc;
	}
	if (session_recv(s, s->pool.b[i].p, n) < 0)
		return OP_DROP;
	rc = D->cuMemcpyHtoDAsync_v2(dst + off, s->pool.b[i].p, n, st);
	if (!rc)
		rc = stage_put(s, i, st);
	if (!rc && off + n == total && !(h->flags & RGPU_F_NOREPLY))
		rc = stage_wait(s, i); /* copies on one stream finish in order */
	return rc;
}

int op_memcpy_dtoh(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r), sid = get_u64(r), src = get_u64(r), size = get_u64(r);
	if (!rd_done(r))
		return OP_DROP;
	CUstream st;
	int rc = session_enter_ctx(s, ctx, NULL);
	if (!rc)
		rc = session_stream(s, sid, &st);
	if (!rc && !session_owns_range(s, src, size))
		rc = CUDA_ERROR_INVALID_VALUE;
	if (!rc && s->deferred) {
		rc = s->deferred;
		s->deferred = 0;
	}
	/* queue chunk k into a pool buffer, then finish and send chunk k-1:
	 * the wire and the GPU overlap */
	uint64_t nchunks = (size + RGPU_CHUNK_SIZE - 1) / RGPU_CHUNK_SIZE;
	int prev = -1;
	size_t prev_n = 0;
	for (uint64_t k = 0; !rc && k <= nchunks; k++) {
		int cur = -1;
		size_t n = 0;
		if (k < nchunks) {
			uint64_t off = k * RGPU_CHUNK_SIZE;
			n = size - off < RGPU_CHUNK_SIZE ? size - off : RGPU_CHUNK_SIZE;
			if ((cur = stage_get(s, ctx, &rc)) < 0)
				break;
			rc = D->cuMemcpyDtoHAsync_v2(s->pool.b[cur].p, src + off, n, st);
			if (!rc)
				rc = stage_put(s, cur, st);
		}
		if (prev >= 0 && !rc) {
			rc = stage_wait(s, prev);
			if (!rc && session_send_reply(s, h, k < nchunks ? RGPU_F_MORE : 0, 0,
						      s->pool.b[prev].p, prev_n) < 0)
				return OP_DROP;
		}
		prev = cur;
		prev_n = n;
	}
	if (rc || size == 0) {
		/* a failure ends the reply: final frame, error status, no data */
		if (rc)
			D->cuStreamSynchronize(st);
		if (session_send_reply(s, h, 0, rc, NULL, 0) < 0)
			return OP_DROP;
	}
	return OP_REPLIED;
}

int op_memcpy_dtod(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r), sid = get_u64(r), dst = get_u64(r), src = get_u64(r);
	uint64_t size = get_u64(r);
	uint32_t sync = get_u32(r);
	if (!rd_done(r))
		return OP_DROP;
	CUstream st;
	int rc = session_enter_ctx(s, ctx, NULL);
	if (!rc)
		rc = session_stream(s, sid, &st);
	if (!rc && (!session_owns_range(s, dst, size) || !session_owns_range(s, src, size)))
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
	CUstream st;
	int rc = session_enter_ctx(s, ctx, NULL);
	if (!rc)
		rc = session_stream(s, sid, &st);
	if (rc)
		return rc;
	if ((esz != 1 && esz != 2 && esz != 4) || count > UINT64_MAX / esz ||
	    !session_owns_range(s, dst, count * esz))
		return CUDA_ERROR_INVALID_VALUE;
	switch (esz) {
	case 1: return sync ? (int)D->cuMemsetD8_v2(dst, (unsigned char)val, count)
			    : (int)D->cuMemsetD8Async(dst, (unsigned char)val, count, st);
	case 2: return sync ? (int)D->cuMemsetD16_v2(dst, (unsigned short)val, count)
			    : (int)D->cuMemsetD16Async(dst, (unsigned short)val, count, st);
	default: return sync ? (int)D->cuMemsetD32_v2(dst, val, count)
			     : (int)D->cuMemsetD32Async(dst, val, count, st);
	}
}
