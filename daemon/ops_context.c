/* Contexts.  A client's primary context is a context of its own here:
 * sharing the server's primary context would share faults between tenants. */
#include "log.h"
#include "gate.h"
#include "rgpud.h"
#include "session.h"

#include <stdlib.h>

int op_ctx_create(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct rgpud_driver *d = &rgpud_server.drv;
	uint32_t dev = get_u32(r);
	uint32_t flags = get_u32(r);
	if (!rd_done(r))
		return OP_DROP;
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
	CUcontext ctx;
	/* Only scheduling flags mean anything for a remote context. */
	if ((rc = d->cuCtxCreate_v2(&ctx, flags & (CU_CTX_SCHED_MASK | CU_CTX_LMEM_RESIZE_TO_MAX), cd))) {
		free(cs);
		return rc;
	}
	uint64_t id = ht_add(&s->ht, HK_CTX, ctx, 0, cs);
	if (!id) {
		d->cuCtxDestroy_v2(ctx);
		free(cs);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	/* cuCtxCreate made it current on this thread */
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
	/* refund and forget the context's allocations */
	for (size_t i = 0; i < s->nalloc;) {
		if (s->allocs[i].ctx == ctx) {
			struct alloc a = session_alloc_del(s, s->allocs[i].dptr);
			if (!a.module)
				gate_charge(a.dev, -(int64_t)a.size);
		} else {
			i++;
		}
	}
	/* forget every object owned by the context */
	for (uint32_t i = 0; i < s->ht.n; i++) {
		struct hentry *o = &s->ht.e[i];
		if (o->kind != HK_FREE && o->kind != HK_CTX && o->ctx == ctx)
			ht_del(&s->ht, ((uint64_t)o->gen << 32) | (i + 1));
	}
	/* pinned staging is portable, so it outlives any one context; with
	 * the last one gone it must go first */
	int contexts = 0;
	for (uint32_t i = 0; i < s->ht.n; i++)
		contexts += s->ht.e[i].kind == HK_CTX;
	stage_forget_ctx(s, ctx);
	shm_forget_ctx(s, ctx);
	vmem_forget_ctx(s, ctx);
	if (contexts == 1)
		stage_free(s);
	int rc = d->cuCtxDestroy_v2(e->obj);
	ht_del(&s->ht, ctx);
	if (s->cur_ctx == ctx) {
		s->cur_ctx = 0;
		d->cuCtxSetCurrent(NULL);
	}
	return rc;
}

int op_ctx_sync(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r);
	if (!rd_done(r))
		return OP_DROP;
	int rc = session_enter_ctx(s, ctx, NULL);
	if (rc)
		return rc;
	if (session_wait_elsewhere(s, h, WAIT_CTX, ht_get(&s->ht, ctx, HK_CTX)->obj, NULL) == 0)
		return OP_REPLIED;
	rc = rgpud_server.drv.cuCtxSynchronize();
	session_forward_output(s, h);
	return rc;
}

int op_ctx_get_limit(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r);
	uint32_t lim = get_u32(r);
	if (!rd_done(r))
		return OP_DROP;
	int rc = session_enter_ctx(s, ctx, NULL);
	size_t v = 0;
	if (!rc)
		rc = rgpud_server.drv.cuCtxGetLimit(&v, (CUlimit)lim);
	put_u64(out, v);
	return rc;
}

int op_ctx_set_limit(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r);
	uint32_t lim = get_u32(r);
	uint64_t v = get_u64(r);
	if (!rd_done(r))
		return OP_DROP;
	int rc = session_enter_ctx(s, ctx, NULL);
	return rc ? rc : (int)rgpud_server.drv.cuCtxSetLimit((CUlimit)lim, (size_t)v);
}
