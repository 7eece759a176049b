/*
 * Plain driver calls: one generic request (CALL) for every entry point of
 * driver-api.calls.  The generated entry points (gen-plain.c) describe
 * their arguments; here handles become the server's ids, the call goes to
 * the server of the context it names (a stream's, an event's, a
 * function's, else the current one), and what comes back lands in the
 * caller's buffers.
 */
#include "plain.h"
#include "log.h"

#include <string.h>

/* The context the call runs in: the first handle's, else the current. */
static CUresult call_ctx(const struct rc_parg *a, int n, struct rc_ctx **out)
{
	for (int i = 0; i < n; i++) {
		uint64_t h;
		struct rc_event *e;
		struct rc_func *f;
		switch (a[i].kind) {
		case RGPU_ARG_STREAM:
			return rc_stream_resolve((CUstream)a[i].p, out, &h);
		case RGPU_ARG_EVENT: {
			CUresult rc = rc_obj(a[i].p, RC_EVENT, &e);
			if (!rc)
				*out = e->ctx;
			return rc;
		}
		case RGPU_ARG_FUNC: {
			CUresult rc = rc_func_resolve((CUfunction)a[i].p, &f);
			if (!rc)
				*out = f->ctx;
			return rc;
		}
		default:
			break;
		}
	}
	return rc_need_ctx(out);
}

CUresult rc_plain_call(const char *name, const struct rc_parg *a, int n)
{
	struct rc_ctx *c;
	CUresult rc = call_ctx(a, n, &c);
	if (rc)
		return rc;
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_str(w, name);
	put_u32(w, (uint32_t)n);
	for (int i = 0; i < n; i++) {
		put_u32(w, (uint32_t)a[i].kind);
		switch (a[i].kind) {
		case RGPU_ARG_VAL:
			put_u64(w, a[i].v);
			break;
		case RGPU_ARG_DEVICE: {
			/* a GPU of the context's server: its index there */
			struct rc_dev *d;
			if ((rc = rc_dev_get((CUdevice)a[i].v, &d)))
				return rc;
			if (d->conn != c->dev->conn)
				return CUDA_ERROR_INVALID_DEVICE;
			put_u64(w, d->gpu);
			break;
		}
		case RGPU_ARG_STREAM: {
			struct rc_ctx *sc;
			uint64_t h;
			if ((rc = rc_stream_resolve((CUstream)a[i].p, &sc, &h)))
				return rc;
			if (sc != c)
				return CUDA_ERROR_INVALID_HANDLE;
			put_u64(w, h);
			break;
		}
		case RGPU_ARG_EVENT: {
			struct rc_event *e;
			if ((rc = rc_obj(a[i].p, RC_EVENT, &e)))
				return rc;
			if (e->ctx != c)
				return CUDA_ERROR_INVALID_HANDLE;
			put_u64(w, e->h);
			break;
		}
		case RGPU_ARG_FUNC: {
			struct rc_func *f;
			if ((rc = rc_func_resolve((CUfunction)a[i].p, &f)))
				return rc;
			if (f->ctx != c)
				return CUDA_ERROR_INVALID_HANDLE;
			put_u64(w, f->h);
			break;
		}
		case RGPU_ARG_IN:
		case RGPU_ARG_INOUT:
			/* (an array of no elements may be NULL) */
			if (!a[i].p && a[i].size)
				return CUDA_ERROR_INVALID_VALUE;
			put_bytes(w, a[i].p ? a[i].p : (const void *)"", a[i].size);
			break;
		case RGPU_ARG_OUT:
			if (!a[i].p)
				return CUDA_ERROR_INVALID_VALUE;
			put_u64(w, a[i].size);
			break;
		}
	}
	struct rd r;
	if ((rc = rc_call(c->dev->conn, RGPU_OP_CALL, w, &r)))
		return rc;
	for (int i = 0; i < n; i++) {
		if (a[i].kind != RGPU_ARG_OUT && a[i].kind != RGPU_ARG_INOUT)
			continue;
		size_t k;
		const void *p = get_bytes(&r, &k);
		if (!rd_ok(&r) || k != a[i].size)
			return CUDA_ERROR_UNKNOWN;
		memcpy(a[i].p, p, k);
	}
	return CUDA_SUCCESS;
}
