/* Stream attributes, the profiler switch and the capture mode of a
 * thread. */
#include "client.h"
#include "log.h"

#include <string.h>

static CUresult stream_attr(CUstream s, CUstreamAttrID attr, CUstreamAttrValue *v, int set)
{
	struct rc_ctx *c;
	uint64_t h;
	CUresult rc = rc_stream_resolve(s, &c, &h);
	if (rc)
		return rc;
	if (!v)
		return CUDA_ERROR_INVALID_VALUE;
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u64(w, h);
	put_u32(w, (uint32_t)attr);
	put_u32(w, (uint32_t)set);
	put_bytes(w, v, sizeof(*v));
	struct rd r;
	if ((rc = rc_call(c->dev->conn, RGPU_OP_STREAM_ATTR, w, &r)))
		return rc;
	size_t n;
	const void *p = get_bytes(&r, &n);
	if (!rd_ok(&r) || n != sizeof(*v))
		return CUDA_ERROR_UNKNOWN;
	if (!set)
		memcpy(v, p, sizeof(*v));
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuStreamGetAttribute(CUstream s, CUstreamAttrID attr, CUstreamAttrValue *v)
{
	return stream_attr(s, attr, v, 0);
}

RC_EXPORT CUresult cuStreamSetAttribute(CUstream s, CUstreamAttrID attr, const CUstreamAttrValue *v)
{
	if (!v)
		return CUDA_ERROR_INVALID_VALUE;
	CUstreamAttrValue copy = *v;
	return stream_attr(s, attr, &copy, 1);
}

RC_EXPORT CUresult cuStreamGetAttribute_ptsz(CUstream s, CUstreamAttrID attr, CUstreamAttrValue *v)
{
	return cuStreamGetAttribute(s ? s : CU_STREAM_PER_THREAD, attr, v);
}

RC_EXPORT CUresult cuStreamSetAttribute_ptsz(CUstream s, CUstreamAttrID attr, const CUstreamAttrValue *v)
{
	return cuStreamSetAttribute(s ? s : CU_STREAM_PER_THREAD, attr, v);
}

/* Every attribute a stream has, read from src and set on dst. */
RC_EXPORT CUresult cuStreamCopyAttributes(CUstream dst, CUstream src)
{
	static const CUstreamAttrID ids[] = {
		CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW,
		CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY,
		CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP,
		CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN,
	};
	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		CUstreamAttrValue v;
		memset(&v, 0, sizeof(v));
		CUresult rc = stream_attr(src, ids[i], &v, 0);
		if (!rc)
			rc = stream_attr(dst, ids[i], &v, 1);
		if (rc)
			return rc;
	}
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuStreamCopyAttributes_ptsz(CUstream dst, CUstream src)
{
	return cuStreamCopyAttributes(dst ? dst : CU_STREAM_PER_THREAD,
				      src ? src : CU_STREAM_PER_THREAD);
}

/* The profiler runs where the GPU is: the current context's server. */
static CUresult profiler(uint32_t start)
{
	struct rc_ctx *c;
	CUresult rc = rc_need_ctx(&c);
	if (rc)
		return rc;
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u32(w, start);
	struct rd r;
	return rc_call(c->dev->conn, RGPU_OP_PROFILER, w, &r);
}

RC_EXPORT CUresult cuProfilerStart(void) { return profiler(1); }
RC_EXPORT CUresult cuProfilerStop(void) { return profiler(0); }

/* Deprecated since CUDA 11 (the driver itself answers this way). */
RC_EXPORT CUresult cuProfilerInitialize(const char *config, const char *out, CUoutput_mode mode)
{
	(void)config;
	(void)out;
	(void)mode;
	return CUDA_ERROR_NOT_SUPPORTED;
}

/* The capture mode of the calling thread decides which calls other
 * threads' captures refuse as unsafe.  The session serves all of this
 * process's threads from one thread, so the mode is kept here, per
 * thread, as the driver keeps it: exchanged, never sent. */
static __thread CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

RC_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
	if (!mode)
		return CUDA_ERROR_INVALID_VALUE;
	if (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL && *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
	    *mode != CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	CUstreamCaptureMode old = capture_mode;
	capture_mode = *mode;
	*mode = old;
	return CUDA_SUCCESS;
}
