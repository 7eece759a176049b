/*
 * Plain driver calls (CALL): the table generated from
 * client/driver-api.calls names each call's argument kinds and sizes;
 * here the request is checked against it, handles become the driver's
 * objects (of the request's context), and the driver is called.  A call
 * the driver lacks is answered CUDA_ERROR_NOT_SUPPORTED.
 */
#include "ops_call.h"
#include "rgpud.h"
#include "session.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

static struct call_desc *find(const char *name)
{
	for (int i = 0; i < ncall_descs; i++)
		if (!strcmp(call_descs[i].name, name))
			return &call_descs[i];
	return NULL;
}

#define OUT_MAX (1u << 20)

int op_call(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX);
	const char *name = get_str(r, 128);
	uint32_t n = get_u32(r);
	if (!rd_ok(r) || n > RGPU_CALL_MAX_ARGS)
		return OP_DROP;
	uint32_t kind[RGPU_CALL_MAX_ARGS];
	uint64_t v[RGPU_CALL_MAX_ARGS];
	const void *in[RGPU_CALL_MAX_ARGS];
	size_t len[RGPU_CALL_MAX_ARGS];
	for (uint32_t i = 0; i < n; i++) {
		kind[i] = get_u32(r);
		in[i] = NULL;
		len[i] = 0;
		switch (kind[i]) {
		case RGPU_ARG_IN:
		case RGPU_ARG_INOUT:
			in[i] = get_bytes(r, &len[i]);
			break;
		case RGPU_ARG_VAL:
		case RGPU_ARG_DEVICE:
		case RGPU_ARG_STREAM:
		case RGPU_ARG_EVENT:
		case RGPU_ARG_FUNC:
		case RGPU_ARG_OUT:
			v[i] = get_u64(r);
			break;
		default:
			return OP_DROP;
		}
	}
	int rc = req_enter(s, r, &q, HK_FREE);
	if (rc)
		return rc;
	struct call_desc *d = find(name);
	if (!d)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (d->nargs != (int)n)
		return CUDA_ERROR_INVALID_VALUE;
	if (!d->looked) {
		d->fn = dlsym(rgpud_server.drv.dl, d->name);
		d->looked = 1;
	}
	if (!d->fn)
		return CUDA_ERROR_NOT_SUPPORTED;
	void *args[RGPU_CALL_MAX_ARGS];
	void *objs[RGPU_CALL_MAX_ARGS];
	void *bufs[RGPU_CALL_MAX_ARGS] = { 0 };
	for (uint32_t i = 0; i < n && !rc; i++) {
		if ((int)kind[i] != d->kind[i]) {
			rc = CUDA_ERROR_INVALID_VALUE;
			break;
		}
		struct hentry *e;
		switch (kind[i]) {
		case RGPU_ARG_VAL:
			args[i] = &v[i];
			break;
		case RGPU_ARG_DEVICE:
			/* only the GPU of the request's context */
			if (v[i] != q.cs->dev)
				rc = CUDA_ERROR_INVALID_DEVICE;
			args[i] = &v[i];
			break;
		case RGPU_ARG_STREAM:
			rc = req_stream(s, v[i], (CUstream *)&objs[i]);
			args[i] = &objs[i];
			break;
		case RGPU_ARG_EVENT:
		case RGPU_ARG_FUNC:
			e = req_obj(s, &q, v[i], kind[i] == RGPU_ARG_EVENT ? HK_EVENT : HK_FUNC);
			if (!e)
				rc = CUDA_ERROR_INVALID_HANDLE;
			else
				objs[i] = e->obj;
			args[i] = &objs[i];
			break;
		case RGPU_ARG_IN:
		case RGPU_ARG_INOUT:
		case RGPU_ARG_OUT: {
			size_t want = kind[i] == RGPU_ARG_OUT ? v[i] : len[i];
			int upto = (d->upto >> i) & 1;
			if ((upto ? want > d->size[i] : want != d->size[i]) || want > OUT_MAX) {
				rc = CUDA_ERROR_INVALID_VALUE;
				break;
			}
			/* aligned for whatever struct it holds (a tensor map
			 * wants 64 bytes); an array shorter than its maximum is
			 * followed by zeros */
			size_t cap = upto ? d->size[i] : want;
			cap = cap ? (cap + 127) / 128 * 128 : 128;
			if (!(bufs[i] = aligned_alloc(128, cap))) {
				rc = CUDA_ERROR_OUT_OF_MEMORY;
				break;
			}
			memset(bufs[i], 0, cap);
			if (in[i])
				memcpy(bufs[i], in[i], want);
			len[i] = want; /* what goes back (OUT, INOUT) */
			args[i] = bufs[i];
			break;
		}
		}
	}
	if (!rc)
		rc = d->invoke(d->fn, args);
	for (uint32_t i = 0; i < n; i++) {
		if (!rc && (kind[i] == RGPU_ARG_OUT || kind[i] == RGPU_ARG_INOUT))
			put_bytes(out, bufs[i], len[i]);
		free(bufs[i]);
	}
	return rc;
}
