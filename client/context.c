/* Contexts.  The current-context stack is per thread, as in CUDA; each
 * context is a server-side context of this client's session. */
#include "client.h"
#include "log.h"
#include "stats.h"

#include <stdlib.h>
#include <string.h>

#define STACK_MAX 64
static __thread struct rc_ctx *stack[STACK_MAX];
static __thread int depth;

struct rc_ctx *rc_current(void) { return depth ? stack[depth - 1] : NULL; }

/* A primary context exists on its server only once something runs in it:
 * the CUDA runtime retains the primary context of every device it
 * enumerates, and a context costs ~0.5 GiB of a (possibly shared) GPU. */
static CUresult ctx_activate(struct rc_ctx *c)
{
	if (__atomic_load_n(&c->h, __ATOMIC_ACQUIRE))
		return CUDA_SUCCESS;
	pthread_mutex_lock(&c->dev->pctx_lock);
	CUresult rc = CUDA_SUCCESS;
	if (!c->h) {
		struct wbuf *w = rc_req();
		put_u32(w, c->dev->gpu);
		put_u32(w, c->flags);
		put_u32(w, (uint32_t)c->is_primary); /* the server's primary context too */
		/* which of this process's servers it is (1, 2, ...): each puts
		 * device memory in a range of its own, so that an address names
		 * one server's memory (unified addressing across servers) */
		put_u32(w, (uint32_t)rc_conn_index(c->dev->conn) + 1);
		struct rd r;
		rc = rc_call(c->dev->conn, RGPU_OP_CTX_CREATE, w, &r);
		uint64_t h = rc ? 0 : get_u64(&r);
		if (!rc && !rd_ok(&r))
			rc = CUDA_ERROR_UNKNOWN;
		if (!rc)
			__atomic_store_n(&c->h, h, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&c->dev->pctx_lock);
	return rc;
}

CUresult rc_ctx_activate(struct rc_ctx *c) { return ctx_activate(c); }

CUresult rc_need_ctx(struct rc_ctx **out)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	*out = rc_current();
	return *out ? ctx_activate(*out) : CUDA_ERROR_INVALID_CONTEXT;
}

static CUresult ctx_check(CUcontext c, struct rc_ctx **out)
{
	struct rc_ctx *x = (struct rc_ctx *)c;
	if (!x || x->magic != RC_CTX)
		return CUDA_ERROR_INVALID_CONTEXT;
	*out = x;
	return ctx_activate(x);
}

static CUresult ctx_new(CUdevice dev, unsigned flags, int primary, struct rc_ctx **out)
{
	struct rc_dev *d;
	CUresult rc = rc_dev_get(dev, &d);
	if (rc)
		return rc;
	struct rc_ctx *c = calloc(1, sizeof(*c));
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	c->magic = RC_CTX;
	c->dev = d;
	c->ordinal = dev;
	c->flags = flags;
	c->is_primary = primary;
	/* an explicit context is made at once, as cuCtxCreate reports
	 * failures; a primary one when first used (ctx_activate) */
	if (!primary && (rc = ctx_activate(c))) {
		free(c);
		return rc;
	}
	*out = c;
	return CUDA_SUCCESS;
}

/* The server's side of c goes, and what the client knew of it; c itself
 * stays (a primary context's handle outlives a reset, as in CUDA: cudart
 * makes it current again afterwards, and its next use re-creates it). */
static CUresult ctx_teardown(struct rc_ctx *c)
{
	CUresult rc = CUDA_SUCCESS;
	uint64_t h = __atomic_exchange_n(&c->h, 0, __ATOMIC_ACQ_REL);
	if (h) {
		struct wbuf *w = rc_req();
		put_u64(w, h);
		struct rd r;
		rc = rc_call(c->dev->conn, RGPU_OP_CTX_DESTROY, w, &r);
	}
	if (c->dev && c->dev->conn)
		rc_devranges_drop_owner(c->dev->conn, c);
	rc_libraries_ctx_gone(c);
	rc_coh_ctx_gone(c);
	__atomic_store_n(&c->lim_known, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&c->own_stream, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&c->idle_all, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&c->idle_legacy, 0, __ATOMIC_RELEASE);
	return rc;
}

CUresult rc_mem_ctx(struct rc_ctx **c)
{
	struct rc_ctx *o = (*c)->mem_owner;
	if (!o)
		return CUDA_SUCCESS;
	CUresult rc = ctx_activate(o);
	if (!rc)
		*c = o;
	return rc;
}

static CUresult ctx_free(struct rc_ctx *c)
{
	CUresult rc = ctx_teardown(c);
	/* drop it from this thread's stack; other threads' stacks would hold a
	 * dangling context in CUDA too */
	for (int i = 0; i < depth; i++)
		if (stack[i] == c) {
			memmove(&stack[i], &stack[i + 1], (size_t)(depth - i - 1) * sizeof(*stack));
			depth--;
			i--;
		}
	c->magic = 0;
	free(c);
	return rc;
}

CUresult rc_ctx_free(struct rc_ctx *c) { return ctx_free(c); }

/* ---- primary contexts ---- */

/* Device dev's primary context without a retain counted (cudart's own
 * enumeration retains it for good anyway, export_tables.c): for what must
 * run in a context before the application has one, such as a library's
 * managed variables, which cudart asks for before it retains its primary
 * context.  The application's retain later gets the same context. */
CUresult rc_primary_hidden(CUdevice dev, struct rc_ctx **out)
{
	struct rc_dev *d;
	CUresult rc = rc_dev_get(dev, &d);
	if (rc)
		return rc;
	pthread_mutex_lock(&d->pctx_lock);
	if (!d->primary)
		rc = ctx_new(dev, d->primary_flags, 1, &d->primary);
	struct rc_ctx *c = d->primary;
	pthread_mutex_unlock(&d->pctx_lock);
	if (!rc)
		rc = ctx_activate(c);
	*out = c;
	return rc;
}

RC_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	struct rc_dev *d;
	CUresult rc = rc_dev_get(dev, &d);
	if (rc)
		return rc;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&d->pctx_lock);
	if (!d->primary)
		rc = ctx_new(dev, d->primary_flags, 1, &d->primary);
	if (!rc) {
		d->primary_refs++;
		*pctx = (CUcontext)d->primary;
	}
	pthread_mutex_unlock(&d->pctx_lock);
	return rc;
}

static CUresult primary_release(CUdevice dev, int reset)
{
	struct rc_dev *d;
	CUresult rc = rc_dev_get(dev, &d);
	if (rc)
		return rc;
	pthread_mutex_lock(&d->pctx_lock);
	if (!d->primary) {
		rc = reset ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
	} else if (reset || --d->primary_refs <= 0) {
		/* its resources go; the handle stays valid (made again when
		 * next used, as the driver does) */
		rc = ctx_teardown(d->primary);
		d->primary_refs = 0;
	}
	pthread_mutex_unlock(&d->pctx_lock);
	return rc;
}

RC_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return primary_release(dev, 0); }
RC_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return primary_release(dev, 0); }
RC_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return primary_release(dev, 1); }
RC_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) { return primary_release(dev, 1); }

static CUresult primary_set_flags(CUdevice dev, unsigned flags)
{
	struct rc_dev *d;
	CUresult rc = rc_dev_get(dev, &d);
	if (rc)
		return rc;
	pthread_mutex_lock(&d->pctx_lock);
	d->primary_flags = flags;
	pthread_mutex_unlock(&d->pctx_lock);
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) { return primary_set_flags(dev, flags); }
RC_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) { return primary_set_flags(dev, flags); }

RC_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
	struct rc_dev *d;
	CUresult rc = rc_dev_get(dev, &d);
	if (rc)
		return rc;
	if (!flags || !active)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&d->pctx_lock);
	*flags = d->primary_flags;
	*active = d->primary_refs > 0 || (d->primary && __atomic_load_n(&d->primary->h, __ATOMIC_ACQUIRE));
	pthread_mutex_unlock(&d->pctx_lock);
	return CUDA_SUCCESS;
}

/* ---- explicit contexts ---- */

static CUresult ctx_create(CUcontext *pctx, unsigned flags, CUdevice dev)
{
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	struct rc_ctx *c;
	CUresult rc = ctx_new(dev, flags, 0, &c);
	if (rc)
		return rc;
	if (depth == STACK_MAX) {
		ctx_free(c);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	stack[depth++] = c;
	*pctx = (CUcontext)c;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev) { return ctx_create(pctx, flags, dev); }
RC_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) { return ctx_create(pctx, flags, dev); }

RC_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *p, int n, unsigned int flags, CUdevice dev)
{
	if (n > 0 && p) {
		rc_unsupported("cuCtxCreate_v3 with execution affinity");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	return ctx_create(pctx, flags, dev);
}

RC_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *p, unsigned int flags, CUdevice dev)
{
	if (p && (p->numExecAffinityParams > 0 || p->cigParams)) {
		rc_unsupported("cuCtxCreate_v4 with affinity or CIG parameters");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	return ctx_create(pctx, flags, dev);
}

static CUresult ctx_destroy(CUcontext ctx)
{
	struct rc_ctx *c;
	CUresult rc = ctx_check(ctx, &c);
	if (rc)
		return rc;
	/* (a green context's conversion goes with cuGreenCtxDestroy) */
	if (c->is_primary || c->green)
		return CUDA_ERROR_INVALID_CONTEXT;
	return ctx_free(c);
}

RC_EXPORT CUresult cuCtxDestroy(CUcontext ctx) { return ctx_destroy(ctx); }
RC_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) { return ctx_destroy(ctx); }

static CUresult ctx_push(CUcontext ctx)
{
	struct rc_ctx *c;
	CUresult rc = ctx_check(ctx, &c);
	if (rc)
		return rc;
	if (depth == STACK_MAX)
		return CUDA_ERROR_OUT_OF_MEMORY;
	stack[depth++] = c;
	return CUDA_SUCCESS;
}

static CUresult ctx_pop(CUcontext *pctx)
{
	if (!depth)
		return CUDA_ERROR_INVALID_CONTEXT;
	struct rc_ctx *c = stack[--depth];
	if (pctx)
		*pctx = (CUcontext)c;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuCtxPushCurrent(CUcontext ctx) { return ctx_push(ctx); }
RC_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) { return ctx_push(ctx); }
RC_EXPORT CUresult cuCtxPopCurrent(CUcontext *pctx) { return ctx_pop(pctx); }
RC_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx) { return ctx_pop(pctx); }

RC_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!ctx) {
		if (depth)
			depth--;
		return CUDA_SUCCESS;
	}
	struct rc_ctx *c;
	if ((rc = ctx_check(ctx, &c)))
		return rc;
	if (depth)
		stack[depth - 1] = c;
	else
		stack[depth++] = c;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = (CUcontext)rc_current();
	return CUDA_SUCCESS;
}

static CUresult ctx_or_current(CUcontext ctx, struct rc_ctx **c)
{
	return ctx ? ctx_check(ctx, c) : rc_need_ctx(c);
}

RC_EXPORT CUresult cuCtxGetDevice(CUdevice *dev)
{
	struct rc_ctx *c;
	CUresult rc = rc_need_ctx(&c);
	if (rc)
		return rc;
	if (!dev)
		return CUDA_ERROR_INVALID_VALUE;
	*dev = c->ordinal;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuCtxGetDevice_v2(CUdevice *dev, CUcontext ctx)
{
	struct rc_ctx *c;
	CUresult rc = ctx_or_current(ctx, &c);
	if (rc)
		return rc;
	if (!dev)
		return CUDA_ERROR_INVALID_VALUE;
	*dev = c->ordinal;
	return CUDA_SUCCESS;
}

static CUresult ctx_call(struct rc_ctx *c, uint16_t op)
{
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	struct rd r;
	return rc_call(c->dev->conn, op, w, &r);
}

/* A synchronisation is an acquire: managed memory the GPU may have written
 * comes back (coherence.c). */
static CUresult ctx_sync(struct rc_ctx *c)
{
	uint64_t e = rc_coh_epoch();
	struct rc_conn *conn = c->dev->conn;
	CUresult rc = CUDA_SUCCESS;
	/* idle since the last synchronisation, and nothing sent since
	 * (stream.c): nothing to wait for */
	if (rc_idle_now(conn, __atomic_load_n(&c->idle_all, __ATOMIC_ACQUIRE))) {
		rc_stats_local(RGPU_OP_CTX_SYNC);
	} else {
		uint64_t mark = rc_idle_mark(conn);
		rc = rc_coh_sync_release(conn);
		if (!rc)
			rc = ctx_call(c, RGPU_OP_CTX_SYNC);
		if (!rc) {
			uint64_t cur = __atomic_load_n(&c->idle_all, __ATOMIC_RELAXED);
			while (cur < mark && !__atomic_compare_exchange_n(&c->idle_all, &cur, mark, 0,
									 __ATOMIC_RELEASE,
									 __ATOMIC_RELAXED))
				;
		}
	}
	return rc ? rc : rc_coh_acquire(conn, RC_COH_ALL, e);
}

RC_EXPORT CUresult cuCtxSynchronize(void)
{
	struct rc_ctx *c;
	CUresult rc = rc_need_ctx(&c);
	return rc ? rc : ctx_sync(c);
}

RC_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
	struct rc_ctx *c;
	CUresult rc = ctx_or_current(ctx, &c);
	return rc ? rc : ctx_sync(c);
}

RC_EXPORT CUresult cuCtxGetLimit(size_t *v, CUlimit limit)
{
	struct rc_ctx *c;
	CUresult rc = rc_need_ctx(&c);
	if (rc)
		return rc;
	if (!v)
		return CUDA_ERROR_INVALID_VALUE;
	/* Limits change only when this client sets them, except the stack
	 * size, which the driver grows for a launch that needs more: the
	 * others are read once (the CUDA runtime asks before every launch of
	 * some kernels: 24 round trips per training step in PyTorch). */
	int cacheable = (int)limit > (int)CU_LIMIT_STACK_SIZE && (int)limit < CU_LIMIT_MAX;
	if (cacheable && (__atomic_load_n(&c->lim_known, __ATOMIC_ACQUIRE) >> limit & 1)) {
		*v = __atomic_load_n(&c->lim_val[limit], __ATOMIC_RELAXED);
		rc_stats_local(RGPU_OP_CTX_GET_LIMIT);
		return CUDA_SUCCESS;
	}
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u32(w, (uint32_t)limit);
	struct rd r;
	rc = rc_call(c->dev->conn, RGPU_OP_CTX_GET_LIMIT, w, &r);
	if (rc)
		return rc;
	uint64_t val = get_u64(&r);
	if (!rd_ok(&r))
		return CUDA_ERROR_UNKNOWN;
	*v = val;
	if (cacheable) {
		__atomic_store_n(&c->lim_val[limit], val, __ATOMIC_RELAXED);
		__atomic_fetch_or(&c->lim_known, 1u << limit, __ATOMIC_RELEASE);
	}
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t v)
{
	struct rc_ctx *c;
	CUresult rc = rc_need_ctx(&c);
	if (rc)
		return rc;
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u32(w, (uint32_t)limit);
	put_u64(w, v);
	struct rd r;
	rc = rc_call(c->dev->conn, RGPU_OP_CTX_SET_LIMIT, w, &r);
	/* the driver may round what was asked: read it again next time */
	if ((int)limit >= 0 && (int)limit < CU_LIMIT_MAX)
		__atomic_fetch_and(&c->lim_known, ~(1u << limit), __ATOMIC_RELEASE);
	return rc;
}

RC_EXPORT CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
	struct rc_ctx *c;
	CUresult rc = ctx_or_current(ctx, &c);
	if (rc)
		return rc;
	if (!version)
		return CUDA_ERROR_INVALID_VALUE;
	*version = 3020; /* every context since CUDA 3.2 reports this */
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuCtxGetFlags(unsigned int *flags)
{
	struct rc_ctx *c;
	CUresult rc = rc_need_ctx(&c);
	if (rc)
		return rc;
	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	*flags = c->flags;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuCtxSetFlags(unsigned int flags)
{
	struct rc_ctx *c;
	CUresult rc = rc_need_ctx(&c);
	if (rc)
		return rc;
	c->flags = flags;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuCtxGetId(CUcontext ctx, unsigned long long *id)
{
	struct rc_ctx *c;
	CUresult rc = ctx_or_current(ctx, &c);
	if (rc)
		return rc;
	if (!id)
		return CUDA_ERROR_INVALID_VALUE;
	*id = c->h;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
	struct rc_ctx *c;
	CUresult rc = rc_need_ctx(&c);
	if (rc)
		return rc;
	/* Every GPU since Volta reports 0..-5; the server's driver clamps any
	 * priority outside its own range. */
	if (least)
		*least = 0;
	if (greatest)
		*greatest = -5;
	return CUDA_SUCCESS;
}

/* Cache and shared-memory preferences are hints; remembered, not sent. */
static __thread CUfunc_cache cache_pref;

RC_EXPORT CUresult cuCtxGetCacheConfig(CUfunc_cache *cfg)
{
	struct rc_ctx *c;
	CUresult rc = rc_need_ctx(&c);
	if (rc)
		return rc;
	if (!cfg)
		return CUDA_ERROR_INVALID_VALUE;
	*cfg = cache_pref;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuCtxSetCacheConfig(CUfunc_cache cfg)
{
	struct rc_ctx *c;
	CUresult rc = rc_need_ctx(&c);
	if (rc)
		return rc;
	cache_pref = cfg;
	return CUDA_SUCCESS;
}
