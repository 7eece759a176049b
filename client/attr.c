/* Copying stream attributes, the old profiler initialisation and the
 * capture mode of a thread. */
#include "client.h"
#include "log.h"

#include <string.h>

/* get and set: generated from driver-api.calls (plain.c) */
static CUresult stream_attr(CUstream s, CUstreamAttrID attr, CUstreamAttrValue *v, int set)
{
	return set ? cuStreamSetAttribute(s, attr, v) : cuStreamGetAttribute(s, attr, v);
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

/* cuProfilerStart and cuProfilerStop are plain calls (driver-api.calls):
 * the profiler runs where the GPU is. */

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
