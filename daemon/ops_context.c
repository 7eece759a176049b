/* Contexts.  A client's primary context is a context of its own here:
 * sharing the server's primary context would share faults between tenants. */
#include "log.h"
#include "gate.h"
#include "rgpud.h"
#include "session.h"
#include "sched/scheduler.h"
#include "mem/mem.h"
#include "mem/pool.h"

#include <stdlib.h>

static const CUlimit lim_id[LIM_N] = { CU_LIMIT_MALLOC_HEAP_SIZE, CU_LIMIT_STACK_SIZE,
					CU_LIMIT_PRINTF_FIFO_SIZE };

static int lim_index(CUlimit lim)
{
	for (int i = 0; i < LIM_N; i++)
		if (lim_id[i] == lim)
			return i;
	return -1;
}

/* Device bytes a limit's value holds: the heap and the printf FIFO are
 * buffers of that size; the stack is per thread, for every thread that can
 * be resident at once.  Saturates (a quota then refuses it). */
static uint64_t lim_bytes(const struct ctx_state *cs, int i, uint64_t v)
{
	if (lim_id[i] != CU_LIMIT_STACK_SIZE)
		return v;
	if (cs->resident_threads && v > UINT64_MAX / cs->resident_threads)
		return UINT64_MAX;
	return v * cs->resident_threads;
}

/* The current context's limit values at creation, and its resident
 * threads (the stack's multiplier). */
static void ctx_measure(struct rgpud_driver *d, CUdevice cd, struct ctx_state *cs)
{
	int sms = 0, per_sm = 0;
	if (d->cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, cd) ||
	    d->cuDeviceGetAttribute(&per_sm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, cd) ||
	    sms < 0 || per_sm < 0)
		sms = per_sm = 0;
	cs->resident_threads = (uint64_t)sms * (uint64_t)per_sm;
	cs->sms = (uint32_t)sms;
	for (int i = 0; i < LIM_N; i++) {
		size_t v = 0;
		if (d->cuCtxGetLimit(&v, lim_id[i]))
			v = 0;
		cs->lim_base[i] = lim_bytes(cs, i, v);
	}
}

int op_ctx_create(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct rgpud_driver *d = &rgpud_server.drv;
	uint32_t dev = get_u32(r);
	uint32_t flags = get_u32(r);
	/* (a client before 2026-11-28 does not say whether it is primary) */
	uint32_t primary = rd_ok(r) && r->left >= 4 ? get_u32(r) : 0;
	uint32_t server = rd_ok(r) && r->left >= 4 ? get_u32(r) : 0;
	if (!rd_done(r))
		return OP_DROP;
	/* (before the session's first allocation reserves its range) */
	if (server && !s->range_hint)
		s->range_hint = server;
	int rc = session_admit(s, dev);
	if (rc)
		return rc;
	CUdevice cd;
	if ((rc = d->cuDeviceGet(&cd, (int)dev)))
		return rc;
	struct ctx_state *cs = calloc(1, sizeof(*cs));
	if (!cs)
		return CUDA_ERROR_OUT_OF_MEMORY;
	cs->dev = dev;
	/* every context's own device memory is charged to the lease (a
	 * slice may hold its quota plus one context reserve: a job's first
	 * context on the GPU is covered, each further one, in this session or
	 * another, comes out of the quota) */
	cs->cost = gate_ctx_cost(dev);
	if (cs->cost && gate_charge(dev, (int64_t)cs->cost) < 0) {
		free(cs);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	CUcontext ctx;
	/* Only scheduling flags mean anything for a remote context. */
	/* a full GPU: the memory manager may make room (mem/mem.h), as much
	 * as a context is charged, or what one measured on an H200 (NOTES.md:
	 * about 524 MiB) where contexts are not charged */
	uint64_t room = cs->cost ? cs->cost : 524ull << 20;
	int asked = 0;
	/* the client's primary context is the worker's (one session per
	 * process): the kind of context a program gets locally, whose
	 * launches cost less in the driver than a created one's (6% on the
	 * H200, bench/launch-placement.sh); a second one on the device (a
	 * session moved onto a GPU it already uses) is created */
	int use_primary = primary && dev < 64 && !(s->primary_held >> dev & 1);
	unsigned cflags = flags & (CU_CTX_SCHED_MASK | CU_CTX_LMEM_RESIZE_TO_MAX);
	for (;;) {
		if (use_primary) {
			rc = d->cuDevicePrimaryCtxSetFlags_v2(cd, cflags);
			if (!rc && !(rc = d->cuDevicePrimaryCtxRetain(&ctx, cd)) &&
			    (rc = d->cuCtxSetCurrent(ctx)))
				d->cuDevicePrimaryCtxRelease_v2(cd);
		} else {
			rc = d->cuCtxCreate_v2(&ctx, cflags, cd);
		}
		if (rc != CUDA_ERROR_OUT_OF_MEMORY || !mem_ask_room(s, dev, room))
			break;
		asked = 1;
	}
	if (asked)
		mem_room_done(s, dev);
	if (rc) {
		gate_charge(dev, -(int64_t)cs->cost);
		free(cs);
		return rc;
	}
	if (use_primary) {
		cs->primary = 1;
		s->primary_held |= 1ull << dev;
	}
	ctx_measure(d, cd, cs);
	uint64_t id = ht_add(&s->ht, HK_CTX, ctx, 0, cs);
	if (!id) {
		session_ctx_drop(s, ctx, cs);
		gate_charge(dev, -(int64_t)cs->cost);
		free(cs);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	/* current on this thread (cuCtxCreate makes it so; a primary one was
	 * made current above) */
	s->cur_ctx = id;
	put_u64(out, id);
	return CUDA_SUCCESS;
}

int op_ctx_destroy(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct rgpud_driver *d = &rgpud_server.drv;
	uint64_t ctx = get_u64(r);
	if (!rd_done(r))
		return OP_DROP;
	struct hentry *e = ht_get(&s->ht, ctx, HK_CTX);
	if (!e)
		return CUDA_ERROR_INVALID_CONTEXT;
	/* refund and forget the context's allocations and globals (its pool
	 * blocks among them), and the context itself */
	pb_forget_ctx(s, ctx);
	for (size_t i = 0; i < s->nalloc;) {
		if (s->allocs[i].ctx == ctx) {
			struct alloc a = session_alloc_del(s, s->allocs[i].dptr);
			gate_charge(a.dev, -(int64_t)a.size);
		} else {
			i++;
		}
	}
	struct ctx_state *cs = e->extra;
	gate_charge(cs->dev, -(int64_t)session_ctx_charged(cs));
	sched_forget_ctx(e->obj); /* its timing events die with it */
	/* forget every object owned by the context */
	for (uint32_t i = 0; i < s->ht.n; i++) {
		struct hentry *o = &s->ht.e[i];
		if (o->kind != HK_FREE && o->kind != HK_CTX && o->ctx == ctx) {
			if (o->kind == HK_ARRAY)
				array_forget(o);
			ht_del(&s->ht, ht_id_at(&s->ht, i));
		}
	}
	tex_forget_ctx(s, ctx);
	/* pinned staging is portable, so it outlives any one context; with
	 * the last one gone it must go first */
	int contexts = 0;
	for (uint32_t i = 0; i < s->ht.n; i++)
		contexts += s->ht.e[i].kind == HK_CTX;
	stage_forget_ctx(s, ctx);
	shm_forget_ctx(s, ctx);
	vmem_forget_ctx(s, ctx);
	mem_forget_ctx(s, ctx);
	if (contexts == 1)
		stage_free(s);
	int rc = session_ctx_drop(s, e->obj, cs);
	ht_del(&s->ht, ctx);
	if (s->cur_ctx == ctx) {
		s->cur_ctx = 0;
		d->cuCtxSetCurrent(NULL);
	}
	return rc;
}

int op_ctx_sync(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX);
	int rc = req_enter(s, r, &q, HK_FREE);
	if (rc)
		return rc;
	if (session_wait_elsewhere(s, h, WAIT_CTX, session_ctx_obj(s), NULL) == 0)
		return OP_REPLIED;
	rc = rgpud_server.drv.cuCtxSynchronize();
	if (!rc)
		pb_synced(s);
	session_forward_output(s, h);
	return rc;
}

int op_ctx_get_limit(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX);
	uint32_t lim = get_u32(r);
	int rc = req_enter(s, r, &q, HK_FREE);
	if (rc == OP_DROP)
		return rc;
	size_t v = 0;
	if (!rc)
		rc = rgpud_server.drv.cuCtxGetLimit(&v, (CUlimit)lim);
	put_u64(out, v);
	return rc;
}

int op_ctx_set_limit(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct rgpud_driver *d = &rgpud_server.drv;
	struct req q;
	req_ids(r, &q, REQ_CTX);
	uint32_t lim = get_u32(r);
	uint64_t v = get_u64(r);
	int rc = req_enter(s, r, &q, HK_FREE);
	if (rc)
		return rc;
	struct ctx_state *cs = q.cs;
	int i = lim_index((CUlimit)lim);
	if (i < 0)
		return d->cuCtxSetLimit((CUlimit)lim, (size_t)v);
	/* device memory: what it costs above the context's own value is
	 * charged before the driver takes it, and set right to what the
	 * driver made of the value (it may round) */
	uint64_t want = lim_bytes(cs, i, v);
	uint64_t extra = want > cs->lim_base[i] ? want - cs->lim_base[i] : 0;
	if (extra > INT64_MAX)
		return CUDA_ERROR_OUT_OF_MEMORY;
	int64_t delta = (int64_t)extra - (int64_t)cs->lim_charged[i];
	if (delta > 0 && gate_charge(cs->dev, delta) < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = d->cuCtxSetLimit((CUlimit)lim, (size_t)v);
	size_t now = 0;
	if (rc) {
		if (delta > 0)
			gate_charge(cs->dev, -delta);
		return rc;
	}
	cs->lim_charged[i] = extra;
	if (delta < 0)
		gate_charge(cs->dev, delta);
	if (d->cuCtxGetLimit(&now, (CUlimit)lim) == CUDA_SUCCESS) {
		uint64_t got = lim_bytes(cs, i, now);
		uint64_t got_extra = got > cs->lim_base[i] ? got - cs->lim_base[i] : 0;
		/* rounded up: the rest is charged as well (it is in use) */
		if (got_extra > extra && got_extra - extra <= INT64_MAX &&
		    gate_charge(cs->dev, (int64_t)(got_extra - extra)) == 0)
			cs->lim_charged[i] = got_extra;
	}
	return CUDA_SUCCESS;
}
