/*
 * Per-thread default stream variants (_ptds, _ptsz) of the entry points
 * the client implements.  cuGetProcAddress hands them out for requests
 * with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM (programs built with
 * --default-stream per-thread; cudart asks for both kinds at start-up),
 * and they are exported under their names, as in the driver.
 *
 * _ptsz variants take a stream: NULL there means the calling thread's
 * default stream, CU_STREAM_PER_THREAD.  _ptds variants are synchronous
 * copies and memsets, which complete before returning, so the plain call
 * serves.
 */
#include "client.h"

static CUstream pt(CUstream s)
{
	return s ? s : CU_STREAM_PER_THREAD;
}

/* ---- synchronous (_ptds) ---- */

RC_EXPORT CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	return cuMemcpy(dst, src, n);
}

RC_EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t n)
{
	return cuMemcpyHtoD_v2(dst, src, n);
}

RC_EXPORT CUresult cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n)
{
	return cuMemcpyDtoH_v2(dst, src, n);
}

RC_EXPORT CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	return cuMemcpyDtoD_v2(dst, src, n);
}

RC_EXPORT CUresult cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char v, size_t n)
{
	return cuMemsetD8_v2(d, v, n);
}

RC_EXPORT CUresult cuMemsetD16_v2_ptds(CUdeviceptr d, unsigned short v, size_t n)
{
	return cuMemsetD16_v2(d, v, n);
}

RC_EXPORT CUresult cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int v, size_t n)
{
	return cuMemsetD32_v2(d, v, n);
}

/* ---- on a stream (_ptsz) ---- */

RC_EXPORT CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	return cuMemcpyAsync(dst, src, n, pt(s));
}

RC_EXPORT CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	return cuMemcpyHtoDAsync_v2(dst, src, n, pt(s));
}

RC_EXPORT CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	return cuMemcpyDtoHAsync_v2(dst, src, n, pt(s));
}

RC_EXPORT CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	return cuMemcpyDtoDAsync_v2(dst, src, n, pt(s));
}

RC_EXPORT CUresult cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream s)
{
	return cuMemsetD8Async(d, v, n, pt(s));
}

RC_EXPORT CUresult cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short v, size_t n, CUstream s)
{
	return cuMemsetD16Async(d, v, n, pt(s));
}

RC_EXPORT CUresult cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream s)
{
	return cuMemsetD32Async(d, v, n, pt(s));
}

RC_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
				       unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem,
				       CUstream s, void **params, void **extra)
{
	return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, pt(s), params, extra);
}

RC_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra)
{
	if (!cfg)
		return cuLaunchKernelEx(cfg, f, params, extra);
	CUlaunchConfig c = *cfg;
	c.hStream = pt(c.hStream);
	return cuLaunchKernelEx(&c, f, params, extra);
}

RC_EXPORT CUresult cuEventRecord_ptsz(CUevent e, CUstream s)
{
	return cuEventRecord(e, pt(s));
}

RC_EXPORT CUresult cuEventRecordWithFlags_ptsz(CUevent e, CUstream s, unsigned int flags)
{
	return cuEventRecordWithFlags(e, pt(s), flags);
}

RC_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream s)
{
	return cuStreamSynchronize(pt(s));
}

RC_EXPORT CUresult cuStreamQuery_ptsz(CUstream s)
{
	return cuStreamQuery(pt(s));
}

RC_EXPORT CUresult cuStreamAttachMemAsync_ptsz(CUstream s, CUdeviceptr dptr, size_t length,
					       unsigned int flags)
{
	return cuStreamAttachMemAsync(pt(s), dptr, length, flags);
}

RC_EXPORT CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int flags)
{
	return cuStreamWaitEvent(pt(s), e, flags);
}

/* queries: the default streams all answer alike */
RC_EXPORT CUresult cuStreamGetPriority_ptsz(CUstream s, int *prio)
{
	return cuStreamGetPriority(s, prio);
}

RC_EXPORT CUresult cuStreamGetFlags_ptsz(CUstream s, unsigned int *flags)
{
	return cuStreamGetFlags(s, flags);
}

RC_EXPORT CUresult cuStreamGetCtx_ptsz(CUstream s, CUcontext *pctx)
{
	return cuStreamGetCtx(s, pctx);
}

/* ---- capture queries (no stream is ever capturing) ---- */

RC_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus *st)
{
	return cuStreamIsCapturing(pt(s), st);
}

RC_EXPORT CUresult cuStreamGetCaptureInfo_ptsz(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id)
{
	return cuStreamGetCaptureInfo(pt(s), st, id);
}

RC_EXPORT CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id,
						  CUgraph *graph, const CUgraphNode **deps, size_t *ndeps)
{
	return cuStreamGetCaptureInfo_v2(pt(s), st, id, graph, deps, ndeps);
}

RC_EXPORT CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id,
						  CUgraph *graph, const CUgraphNode **deps,
						  const CUgraphEdgeData **edges, size_t *ndeps)
{
	return cuStreamGetCaptureInfo_v3(pt(s), st, id, graph, deps, edges, ndeps);
}

/* ---- composed calls (memcpy2d.c) ---- */

RC_EXPORT CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *p)
{
	return cuMemcpy2D_v2(p);
}

RC_EXPORT CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *p)
{
	return cuMemcpy2DUnaligned_v2(p);
}

RC_EXPORT CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *p, CUstream s)
{
	return cuMemcpy2DAsync_v2(p, pt(s));
}

RC_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream s)
{
	return cuMemAllocAsync(dptr, size, pt(s));
}

RC_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s)
{
	return cuMemFreeAsync(p, pt(s));
}

RC_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
						  unsigned bx, unsigned by, unsigned bz, unsigned shmem,
						  CUstream s, void **params)
{
	return cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shmem, pt(s), params);
}

/* ---- graphs (graph.c) ---- */

RC_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream s)
{
	return cuStreamBeginCapture(pt(s));
}

RC_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode)
{
	return cuStreamBeginCapture_v2(pt(s), mode);
}

RC_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *g)
{
	return cuStreamEndCapture(pt(s), g);
}

RC_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec e, CUstream s)
{
	return cuGraphLaunch(e, pt(s));
}

RC_EXPORT CUresult cuGraphUpload_ptsz(CUgraphExec e, CUstream s)
{
	return cuGraphUpload(e, pt(s));
}

/* ---- 3D and array copies (array.c) ---- */

RC_EXPORT CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *p)
{
	return cuMemcpy3D_v2(p);
}

RC_EXPORT CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *p, CUstream s)
{
	return cuMemcpy3DAsync_v2(p, pt(s));
}

RC_EXPORT CUresult cuMemcpyHtoA_v2_ptds(CUarray a, size_t off, const void *src, size_t n)
{
	return cuMemcpyHtoA_v2(a, off, src, n);
}

RC_EXPORT CUresult cuMemcpyAtoH_v2_ptds(void *dst, CUarray a, size_t off, size_t n)
{
	return cuMemcpyAtoH_v2(dst, a, off, n);
}

RC_EXPORT CUresult cuMemcpyDtoA_v2_ptds(CUarray a, size_t off, CUdeviceptr src, size_t n)
{
	return cuMemcpyDtoA_v2(a, off, src, n);
}

RC_EXPORT CUresult cuMemcpyAtoD_v2_ptds(CUdeviceptr dst, CUarray a, size_t off, size_t n)
{
	return cuMemcpyAtoD_v2(dst, a, off, n);
}

RC_EXPORT CUresult cuMemcpyAtoA_v2_ptds(CUarray dst, size_t doff, CUarray src, size_t soff, size_t n)
{
	return cuMemcpyAtoA_v2(dst, doff, src, soff, n);
}

RC_EXPORT CUresult cuMemcpyHtoAAsync_v2_ptsz(CUarray a, size_t off, const void *src, size_t n, CUstream s)
{
	return cuMemcpyHtoAAsync_v2(a, off, src, n, pt(s));
}

RC_EXPORT CUresult cuMemcpyAtoHAsync_v2_ptsz(void *dst, CUarray a, size_t off, size_t n, CUstream s)
{
	return cuMemcpyAtoHAsync_v2(dst, a, off, n, pt(s));
}
