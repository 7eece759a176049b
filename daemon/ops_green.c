/* Green contexts (GREEN_OP): a partition of a GPU's multiprocessors that
 * work is launched into.  The server's driver makes the resources (their
 * bytes mean something to it alone: the client hands them back as they
 * came), splits them, makes descriptors and the green contexts.  A green
 * context is kept as its conversion (cuCtxFromGreenCtx): a context of the
 * session like any other, so streams, modules, launches and events in it
 * take the usual paths; CTX_DESTROY destroys it (session_ctx_drop). */
#include "log.h"
#include "rgpud.h"
#include "session.h"

#include <assert.h>
#include <string.h>

#define D (&rgpud_server.drv)

static_assert(sizeof(CUdevResource) == RGPU_GREEN_RES_BYTES, "CUdevResource as the wire carries it");

/* One resource from the request: the bytes, aligned. */
static int get_res(struct rd *r, CUdevResource *res)
{
	size_t n = 0;
	const uint8_t *b = get_bytes(r, &n);
	if (!rd_ok(r) || n != sizeof(*res))
		return -1;
	memcpy(res, b, sizeof(*res));
	return 0;
}

static int dev_resource(struct session *s, struct rd *r, struct wbuf *out)
{
	uint32_t dev = get_u32(r), type = get_u32(r);
	if (!rd_done(r))
		return OP_DROP;
	if (!D->cuDeviceGetDevResource)
		return CUDA_ERROR_NOT_SUPPORTED;
	int rc = session_admit(s, dev);
	if (rc)
		return rc;
	CUdevice cd;
	if ((rc = D->cuDeviceGet(&cd, (int)dev)))
		return rc;
	CUdevResource res;
	memset(&res, 0, sizeof(res));
	if ((rc = D->cuDeviceGetDevResource(cd, &res, (CUdevResourceType)type)))
		return rc;
	put_bytes(out, &res, sizeof(res));
	return CUDA_SUCCESS;
}

static int ctx_resource(struct session *s, struct req *q, struct rd *r, struct wbuf *out)
{
	uint32_t type = get_u32(r), of_green = get_u32(r);
	int rc = req_enter(s, r, q, HK_FREE);
	if (rc)
		return rc;
	CUdevResource res;
	memset(&res, 0, sizeof(res));
	if (of_green) {
		if (!q->cs->green)
			return CUDA_ERROR_INVALID_CONTEXT;
		if (!D->cuGreenCtxGetDevResource)
			return CUDA_ERROR_NOT_SUPPORTED;
		rc = D->cuGreenCtxGetDevResource(q->cs->green, &res, (CUdevResourceType)type);
	} else {
		if (!D->cuCtxGetDevResource)
			return CUDA_ERROR_NOT_SUPPORTED;
		rc = D->cuCtxGetDevResource(session_ctx_obj(s), &res, (CUdevResourceType)type);
	}
	if (!rc)
		put_bytes(out, &res, sizeof(res));
	return rc;
}

/* (the driver caps the groups at what the SMs allow; 256 is more than any
 * GPU has multiprocessors) */
#define SPLIT_MAX 256

static int split(struct session *s, struct rd *r, struct wbuf *out)
{
	(void)s;
	uint32_t groups = get_u32(r), flags = get_u32(r), min = get_u32(r), want_rem = get_u32(r);
	CUdevResource in, rem;
	if (get_res(r, &in) < 0 || !rd_done(r))
		return OP_DROP;
	if (groups > SPLIT_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	if (!D->cuDevSmResourceSplitByCount)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUdevResource *res = NULL;
	if (groups && !(res = calloc(groups, sizeof(*res))))
		return CUDA_ERROR_OUT_OF_MEMORY;
	memset(&rem, 0, sizeof(rem));
	unsigned n = groups;
	int rc = D->cuDevSmResourceSplitByCount(res, &n, &in, want_rem ? &rem : NULL, flags, min);
	if (!rc && groups && n > groups)
		rc = CUDA_ERROR_UNKNOWN; /* (the driver wrote past what it was given) */
	if (!rc) {
		put_u32(out, n);
		for (unsigned i = 0; res && i < n; i++)
			put_bytes(out, &res[i], sizeof(res[i]));
		if (want_rem)
			put_bytes(out, &rem, sizeof(rem));
	}
	free(res);
	return rc;
}

static int gen_desc(struct session *s, struct rd *r, struct wbuf *out)
{
	uint32_t n = get_u32(r);
	if (!rd_ok(r) || !n || n > RGPU_GREEN_DESC_MAX)
		return rd_ok(r) ? CUDA_ERROR_INVALID_VALUE : OP_DROP;
	CUdevResource res[RGPU_GREEN_DESC_MAX];
	for (uint32_t i = 0; i < n; i++)
		if (get_res(r, &res[i]) < 0)
			return OP_DROP;
	if (!rd_done(r))
		return OP_DROP;
	if (!D->cuDevResourceGenerateDesc)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUdevResourceDesc desc;
	int rc = D->cuDevResourceGenerateDesc(&desc, res, n);
	if (rc)
		return rc;
	uint64_t id = ht_add(&s->ht, HK_RESDESC, desc, 0, NULL);
	if (!id)
		return CUDA_ERROR_OUT_OF_MEMORY;
	put_u64(out, id);
	return CUDA_SUCCESS;
}

/* The SMs of green context g (0: unknown). */
static uint32_t green_sms(CUgreenCtx g)
{
	CUdevResource res;
	memset(&res, 0, sizeof(res));
	if (!D->cuGreenCtxGetDevResource || D->cuGreenCtxGetDevResource(g, &res, CU_DEV_RESOURCE_TYPE_SM))
		return 0;
	return res.sm.smCount;
}

static int create(struct session *s, struct rd *r, struct wbuf *out)
{
	uint64_t did = get_u64(r);
	uint32_t dev = get_u32(r), flags = get_u32(r);
	if (!rd_done(r))
		return OP_DROP;
	struct hentry *de = ht_get(&s->ht, did, HK_RESDESC);
	if (!de)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!D->cuGreenCtxCreate || !D->cuCtxFromGreenCtx || !D->cuGreenCtxDestroy)
		return CUDA_ERROR_NOT_SUPPORTED;
	int rc = session_admit(s, dev);
	if (rc)
		return rc;
	CUdevice cd;
	if ((rc = D->cuDeviceGet(&cd, (int)dev)))
		return rc;
	struct ctx_state *cs = calloc(1, sizeof(*cs));
	if (!cs)
		return CUDA_ERROR_OUT_OF_MEMORY;
	cs->dev = dev;
	/* (no charge of its own: it is a partition of the device's primary
	 * context, which the driver retains for it) */
	CUgreenCtx g;
	CUcontext ctx;
	if ((rc = D->cuGreenCtxCreate(&g, de->obj, cd, flags))) {
		free(cs);
		return rc;
	}
	if ((rc = D->cuCtxFromGreenCtx(&ctx, g)) || (rc = D->cuCtxSetCurrent(ctx))) {
		D->cuGreenCtxDestroy(g);
		free(cs);
		return rc;
	}
	cs->green = g;
	cs->resident_threads = 0;
	int per_sm = 0;
	cs->sms = green_sms(g);
	if (!D->cuDeviceGetAttribute(&per_sm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, cd) && per_sm > 0)
		cs->resident_threads = (uint64_t)cs->sms * (uint64_t)per_sm;
	uint64_t id = ht_add(&s->ht, HK_CTX, ctx, 0, cs);
	if (!id) {
		D->cuCtxSetCurrent(NULL);
		D->cuGreenCtxDestroy(g);
		free(cs);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	s->cur_ctx = id;
	unsigned long long gid = 0;
	if (D->cuGreenCtxGetId && D->cuGreenCtxGetId(g, &gid))
		gid = 0;
	put_u64(out, id);
	put_u64(out, gid);
	log_debug("%s: green context on GPU %u: %u SMs", s->name, dev, cs->sms);
	return CUDA_SUCCESS;
}

int op_green_op(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	(void)h;
	struct req q;
	req_ids(r, &q, REQ_CTX);
	uint32_t sub = get_u32(r);
	if (!rd_ok(r))
		return OP_DROP;
	switch (sub) {
	case RGPU_GR_DEV_RESOURCE:
		return dev_resource(s, r, out);
	case RGPU_GR_CTX_RESOURCE:
		return ctx_resource(s, &q, r, out);
	case RGPU_GR_SPLIT:
		return split(s, r, out);
	case RGPU_GR_DESC:
		return gen_desc(s, r, out);
	case RGPU_GR_CREATE:
		return create(s, r, out);
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}
