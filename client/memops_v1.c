/* The stream memory operations under their CUDA 11 names (no _v2): the
 * same arguments and flags as the _v2 calls, which programs built against
 * CUDA 12 headers reach; older builds and cuGetProcAddress asked for a
 * version before 12.0 get these. */
#include "client.h"

RC_EXPORT CUresult cuStreamWaitValue32(CUstream s, CUdeviceptr addr, cuuint32_t v, unsigned int flags)
{
	return cuStreamWaitValue32_v2(s, addr, v, flags);
}

RC_EXPORT CUresult cuStreamWaitValue64(CUstream s, CUdeviceptr addr, cuuint64_t v, unsigned int flags)
{
	return cuStreamWaitValue64_v2(s, addr, v, flags);
}

RC_EXPORT CUresult cuStreamWriteValue32(CUstream s, CUdeviceptr addr, cuuint32_t v, unsigned int flags)
{
	return cuStreamWriteValue32_v2(s, addr, v, flags);
}

RC_EXPORT CUresult cuStreamWriteValue64(CUstream s, CUdeviceptr addr, cuuint64_t v, unsigned int flags)
{
	return cuStreamWriteValue64_v2(s, addr, v, flags);
}

RC_EXPORT CUresult cuStreamBatchMemOp(CUstream s, unsigned int n, CUstreamBatchMemOpParams *p, unsigned int flags)
{
	return cuStreamBatchMemOp_v2(s, n, p, flags);
}

RC_EXPORT CUresult cuStreamWaitValue32_ptsz(CUstream s, CUdeviceptr addr, cuuint32_t v, unsigned int flags)
{
	return cuStreamWaitValue32_v2_ptsz(s, addr, v, flags);
}

RC_EXPORT CUresult cuStreamWaitValue64_ptsz(CUstream s, CUdeviceptr addr, cuuint64_t v, unsigned int flags)
{
	return cuStreamWaitValue64_v2_ptsz(s, addr, v, flags);
}

RC_EXPORT CUresult cuStreamWriteValue32_ptsz(CUstream s, CUdeviceptr addr, cuuint32_t v, unsigned int flags)
{
	return cuStreamWriteValue32_v2_ptsz(s, addr, v, flags);
}

RC_EXPORT CUresult cuStreamWriteValue64_ptsz(CUstream s, CUdeviceptr addr, cuuint64_t v, unsigned int flags)
{
	return cuStreamWriteValue64_v2_ptsz(s, addr, v, flags);
}

RC_EXPORT CUresult cuStreamBatchMemOp_ptsz(CUstream s, unsigned int n, CUstreamBatchMemOpParams *p,
					   unsigned int flags)
{
	return cuStreamBatchMemOp_v2_ptsz(s, n, p, flags);
}
