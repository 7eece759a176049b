/* Stream attributes and the profiler switch, passed to the driver as they
 * are: a stream attribute's value holds no handle (an access policy
 * window names a device address, the same on both sides). */
#include "rgpud.h"
#include "session.h"

#include <string.h>

#define D (&rgpud_server.drv)

int op_stream_attr(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	uint32_t attr = get_u32(r);
	uint32_t set = get_u32(r);
	size_t n = 0;
	const void *val = get_bytes(r, &n);
	int rc = req_enter(s, r, &q, HK_FREE);
	if (rc)
		return rc;
	CUstream st;
	if ((rc = req_stream(s, q.id, &st)))
		return rc;
	CUstreamAttrValue v;
	if (n != sizeof(v))
		return OP_DROP;
	memcpy(&v, val, sizeof(v));
	if (set) {
		if (!D->cuStreamSetAttribute)
			return CUDA_ERROR_NOT_SUPPORTED;
		rc = D->cuStreamSetAttribute(st, (CUstreamAttrID)attr, &v);
	} else {
		if (!D->cuStreamGetAttribute)
			return CUDA_ERROR_NOT_SUPPORTED;
		rc = D->cuStreamGetAttribute(st, (CUstreamAttrID)attr, &v);
	}
	if (!rc)
		put_bytes(out, &v, sizeof(v));
	return rc;
}

/* The profiler collects on the server (where the GPU is): Nsight or
 * CUPTI attached to rgpud's worker see the ranges the client marks. */
int op_profiler(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX);
	uint32_t start = get_u32(r);
	int rc = req_enter(s, r, &q, HK_FREE);
	if (rc)
		return rc;
	__typeof__(D->cuProfilerStart) fn = start ? D->cuProfilerStart : D->cuProfilerStop;
	/* a driver without a profiler has nothing to start: as the real
	 * driver does when no profiler is attached, that is a success */
	return fn ? (int)fn() : CUDA_SUCCESS;
}
