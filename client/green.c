/* Green contexts: a partition of a GPU's multiprocessors (cuGreenCtx*,
 * cuDevSmResourceSplitByCount, cuDevResourceGenerateDesc).  The server's
 * driver makes every resource and descriptor; a resource comes back as its
 * bytes, which only that driver reads, so the client remembers which
 * server each one came from by its bytes.  A green context's conversion
 * (cuCtxFromGreenCtx) is a context of this client like any other, whose
 * memory belongs to the device's primary context, as in CUDA. */
#include "client.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

static_assert(sizeof(CUdevResource) == RGPU_GREEN_RES_BYTES, "CUdevResource as the wire carries it");

struct rc_green {
	uint32_t magic;
	struct rc_ctx *ctx; /* its conversion */
	uint64_t id;        /* the server driver's */
};

struct rc_resdesc {
	uint32_t magic;
	struct rc_conn *conn;
	uint64_t h;
	struct rc_resdesc *next; /* every one made: the driver destroys none */
};

/* ---- which server a resource came from ---- */

#define SEEN 256
static struct {
	uint64_t hash;
	struct rc_conn *conn;
} seen[SEEN];
static unsigned seen_next;
static struct rc_resdesc *descs;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t res_hash(const CUdevResource *r)
{
	const unsigned char *b = (const unsigned char *)r;
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < sizeof(*r); i++)
		h = (h ^ b[i]) * 1099511628211ull;
	return h;
}

static void res_note(const CUdevResource *r, struct rc_conn *conn)
{
	uint64_t h = res_hash(r);
	pthread_mutex_lock(&lock);
	seen[seen_next % SEEN].hash = h;
	seen[seen_next % SEEN].conn = conn;
	seen_next++;
	pthread_mutex_unlock(&lock);
}

/* The server of r; one not seen (or forgotten) goes to the current
 * context's, else device 0's. */
static struct rc_conn *res_conn(const CUdevResource *r)
{
	uint64_t h = res_hash(r);
	struct rc_conn *c = NULL;
	pthread_mutex_lock(&lock);
	for (unsigned i = 0; i < SEEN && !c; i++)
		if (seen[i].conn && seen[i].hash == h)
			c = seen[i].conn;
	pthread_mutex_unlock(&lock);
	if (c)
		return c;
	struct rc_ctx *cur = rc_current();
	return cur ? cur->dev->conn : rc_devs[0].conn;
}

static struct wbuf *req(uint64_t ctxh, uint32_t sub)
{
	struct wbuf *w = rc_req();
	put_u64(w, ctxh);
	put_u32(w, sub);
	return w;
}

/* A resource from the reply into out, noted as conn's. */
static CUresult get_res(struct rd *r, CUdevResource *out, struct rc_conn *conn)
{
	size_t n = 0;
	const void *b = get_bytes(r, &n);
	if (!rd_ok(r) || n != sizeof(*out))
		return CUDA_ERROR_UNKNOWN;
	memcpy(out, b, sizeof(*out));
	res_note(out, conn);
	return CUDA_SUCCESS;
}

static CUresult green_check(CUgreenCtx g, struct rc_green **out)
{
	struct rc_green *x = (struct rc_green *)g;
	if (!x || x->magic != RC_GREEN)
		return CUDA_ERROR_INVALID_CONTEXT;
	*out = x;
	return CUDA_SUCCESS;
}

/* ---- resources ---- */

RC_EXPORT CUresult cuDeviceGetDevResource(CUdevice dev, CUdevResource *res, CUdevResourceType type)
{
	CUresult rc = rc_initialized();
	struct rc_dev *d;
	if (!rc)
		rc = rc_dev_get(dev, &d);
	if (rc)
		return rc;
	if (!res)
		return CUDA_ERROR_INVALID_VALUE;
	struct wbuf *w = req(0, RGPU_GR_DEV_RESOURCE);
	put_u32(w, d->gpu);
	put_u32(w, (uint32_t)type);
	struct rd r;
	if ((rc = rc_call(d->conn, RGPU_OP_GREEN_OP, w, &r)))
		return rc;
	return get_res(&r, res, d->conn);
}

static CUresult ctx_resource(struct rc_ctx *c, int of_green, CUdevResource *res, CUdevResourceType type)
{
	if (!res)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = rc_ctx_activate(c);
	if (rc)
		return rc;
	struct wbuf *w = req(c->h, RGPU_GR_CTX_RESOURCE);
	put_u32(w, (uint32_t)type);
	put_u32(w, (uint32_t)of_green);
	struct rd r;
	if ((rc = rc_call(c->dev->conn, RGPU_OP_GREEN_OP, w, &r)))
		return rc;
	return get_res(&r, res, c->dev->conn);
}

RC_EXPORT CUresult cuCtxGetDevResource(CUcontext hctx, CUdevResource *res, CUdevResourceType type)
{
	struct rc_ctx *c = (struct rc_ctx *)hctx;
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!c || c->magic != RC_CTX)
		return CUDA_ERROR_INVALID_CONTEXT;
	return ctx_resource(c, 0, res, type);
}

RC_EXPORT CUresult cuGreenCtxGetDevResource(CUgreenCtx hg, CUdevResource *res, CUdevResourceType type)
{
	struct rc_green *g;
	CUresult rc = green_check(hg, &g);
	return rc ? rc : ctx_resource(g->ctx, 1, res, type);
}

RC_EXPORT CUresult cuDevSmResourceSplitByCount(CUdevResource *result, unsigned int *nbGroups,
					       const CUdevResource *input, CUdevResource *remaining,
					       unsigned int useFlags, unsigned int minCount)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!nbGroups || !input || (result && !*nbGroups))
		return CUDA_ERROR_INVALID_VALUE;
	uint32_t want = result ? *nbGroups : 0;
	if (want > 256)
		want = 256; /* (more groups than any GPU has SMs: all it can make) */
	struct rc_conn *conn = res_conn(input);
	struct wbuf *w = req(0, RGPU_GR_SPLIT);
	put_u32(w, want);
	put_u32(w, useFlags);
	put_u32(w, minCount);
	put_u32(w, remaining != NULL);
	put_bytes(w, input, sizeof(*input));
	struct rd r;
	if ((rc = rc_call(conn, RGPU_OP_GREEN_OP, w, &r)))
		return rc;
	uint32_t n = get_u32(&r);
	if (!rd_ok(&r) || (result && n > want))
		return CUDA_ERROR_UNKNOWN;
	for (uint32_t i = 0; result && i < n; i++)
		if ((rc = get_res(&r, &result[i], conn)))
			return rc;
	if (remaining && (rc = get_res(&r, remaining, conn)))
		return rc;
	*nbGroups = n;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuDevResourceGenerateDesc(CUdevResourceDesc *phDesc, CUdevResource *resources,
					     unsigned int n)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!phDesc || !resources || !n || n > RGPU_GREEN_DESC_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	struct rc_conn *conn = res_conn(&resources[0]);
	for (unsigned i = 1; i < n; i++)
		if (res_conn(&resources[i]) != conn)
			return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION; /* two devices' */
	struct rc_resdesc *d = calloc(1, sizeof(*d));
	if (!d)
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct wbuf *w = req(0, RGPU_GR_DESC);
	put_u32(w, n);
	for (unsigned i = 0; i < n; i++)
		put_bytes(w, &resources[i], sizeof(resources[i]));
	struct rd r;
	if ((rc = rc_call(conn, RGPU_OP_GREEN_OP, w, &r))) {
		free(d);
		return rc;
	}
	d->h = get_u64(&r);
	if (!rd_ok(&r)) {
		free(d);
		return CUDA_ERROR_UNKNOWN;
	}
	d->magic = RC_RESDESC;
	d->conn = conn;
	pthread_mutex_lock(&lock);
	d->next = descs;
	descs = d;
	pthread_mutex_unlock(&lock);
	*phDesc = (CUdevResourceDesc)d;
	return CUDA_SUCCESS;
}

/* ---- green contexts ---- */

RC_EXPORT CUresult cuGreenCtxCreate(CUgreenCtx *out, CUdevResourceDesc hdesc, CUdevice dev, unsigned int flags)
{
	struct rc_resdesc *desc = (struct rc_resdesc *)hdesc;
	struct rc_dev *d;
	CUresult rc = rc_initialized();
	if (!rc)
		rc = rc_dev_get(dev, &d);
	if (rc)
		return rc;
	if (!out || !desc || desc->magic != RC_RESDESC || desc->conn != d->conn)
		return CUDA_ERROR_INVALID_VALUE;
	/* as in CUDA, the device's primary context is retained for it: its
	 * memory is the green context's memory */
	struct rc_ctx *primary;
	if ((rc = rc_primary_hidden(dev, &primary)))
		return rc;
	struct rc_green *g = calloc(1, sizeof(*g));
	struct rc_ctx *c = calloc(1, sizeof(*c));
	if (!g || !c) {
		free(g);
		free(c);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	struct wbuf *w = req(0, RGPU_GR_CREATE);
	put_u64(w, desc->h);
	put_u32(w, d->gpu);
	put_u32(w, flags);
	struct rd r;
	rc = rc_call(d->conn, RGPU_OP_GREEN_OP, w, &r);
	uint64_t h = rc ? 0 : get_u64(&r), id = rc ? 0 : get_u64(&r);
	if (!rc && (!rd_ok(&r) || !h))
		rc = CUDA_ERROR_UNKNOWN;
	if (rc) {
		free(g);
		free(c);
		return rc;
	}
	c->magic = RC_CTX;
	c->dev = d;
	c->ordinal = dev;
	c->h = h;
	c->green = g;
	c->mem_owner = primary;
	g->magic = RC_GREEN;
	g->ctx = c;
	g->id = id;
	*out = (CUgreenCtx)g;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuGreenCtxDestroy(CUgreenCtx hg)
{
	struct rc_green *g;
	CUresult rc = green_check(hg, &g);
	if (rc)
		return rc;
	rc = rc_ctx_free(g->ctx);
	g->magic = 0;
	free(g);
	return rc;
}

RC_EXPORT CUresult cuCtxFromGreenCtx(CUcontext *pctx, CUgreenCtx hg)
{
	struct rc_green *g;
	CUresult rc = green_check(hg, &g);
	if (rc)
		return rc;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = (CUcontext)g->ctx;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuGreenCtxGetId(CUgreenCtx hg, unsigned long long *id)
{
	struct rc_green *g = NULL;
	CUresult rc;
	if (!id)
		return CUDA_ERROR_INVALID_VALUE;
	if (!hg) {
		/* the current context's, if it is a green one */
		struct rc_ctx *c = rc_current();
		if (!c || !c->green)
			return CUDA_ERROR_INVALID_CONTEXT;
		g = c->green;
	} else if ((rc = green_check(hg, &g))) {
		return rc;
	}
	*id = g->id;
	return CUDA_SUCCESS;
}

/* A stream in the green context whatever is current (the driver wants
 * non-blocking ones only). */
RC_EXPORT CUresult cuGreenCtxStreamCreate(CUstream *ps, CUgreenCtx hg, unsigned int flags, int prio)
{
	struct rc_green *g;
	CUresult rc = green_check(hg, &g);
	if (rc)
		return rc;
	if (!ps || flags != CU_STREAM_NON_BLOCKING)
		return CUDA_ERROR_INVALID_VALUE;
	if ((rc = cuCtxPushCurrent_v2((CUcontext)g->ctx)))
		return rc;
	rc = cuStreamCreateWithPriority(ps, flags, prio);
	CUcontext was;
	(void)cuCtxPopCurrent_v2(&was);
	return rc;
}

/* The conversion's whole-context event calls are the green context's. */
RC_EXPORT CUresult cuGreenCtxRecordEvent(CUgreenCtx hg, CUevent e)
{
	struct rc_green *g;
	CUresult rc = green_check(hg, &g);
	return rc ? rc : cuCtxRecordEvent((CUcontext)g->ctx, e);
}

RC_EXPORT CUresult cuGreenCtxWaitEvent(CUgreenCtx hg, CUevent e)
{
	struct rc_green *g;
	CUresult rc = green_check(hg, &g);
	return rc ? rc : cuCtxWaitEvent((CUcontext)g->ctx, e);
}
