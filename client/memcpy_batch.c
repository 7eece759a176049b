/*
 * Batches of copies (cuMemcpyBatchAsync, CUDA 12.8): each copy of the batch
 * queued on the stream in turn, with unified addressing saying which side
 * is where (as cuMemcpyAsync).  The batch as a whole runs in stream order,
 * which is all CUDA promises; the copies inside may run in any order, so
 * in order is one of them.  A source that must be read before the call
 * returns (CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL) is, when it is host
 * memory: the stream is waited for.
 */
#include "client.h"

#include <stdint.h>

static CUresult check_attrs(const CUmemcpyAttributes *attrs, const size_t *idxs, size_t nattrs, size_t count)
{
	if (!attrs || !idxs || !nattrs || nattrs > count || idxs[0])
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t k = 0; k < nattrs; k++) {
		if (k && (idxs[k] <= idxs[k - 1] || idxs[k] >= count))
			return CUDA_ERROR_INVALID_VALUE;
		if (attrs[k].srcAccessOrder != CU_MEMCPY_SRC_ACCESS_ORDER_STREAM &&
		    attrs[k].srcAccessOrder != CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL &&
		    attrs[k].srcAccessOrder != CU_MEMCPY_SRC_ACCESS_ORDER_ANY)
			return CUDA_ERROR_INVALID_VALUE;
		if (attrs[k].flags & ~(unsigned)CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE)
			return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

static CUresult batch(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
		      CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs, size_t *fail, CUstream s)
{
	CUresult rc = rc_initialized();
	if (fail)
		*fail = SIZE_MAX; /* not one copy's fault */
	if (rc)
		return rc;
	if (!dsts || !srcs || !sizes || !count || s == NULL || s == CU_STREAM_LEGACY)
		return CUDA_ERROR_INVALID_VALUE; /* not on the legacy stream */
	if ((rc = check_attrs(attrs, idxs, nattrs, count)))
		return rc;
	int wait = 0;
	for (size_t i = 0, k = 0; i < count; i++) {
		while (k + 1 < nattrs && idxs[k + 1] <= i)
			k++;
		if (attrs[k].srcAccessOrder == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL &&
		    rc_is_host_memory((const void *)(uintptr_t)srcs[i]))
			wait = 1;
		if ((rc = cuMemcpyAsync(dsts[i], srcs[i], sizes[i], s))) {
			if (fail)
				*fail = i;
			return rc;
		}
	}
	return wait ? cuStreamSynchronize(s) : CUDA_SUCCESS;
}

RC_EXPORT CUresult cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
					 CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs, CUstream s)
{
	return batch(dsts, srcs, sizes, count, attrs, idxs, nattrs, NULL, s);
}

RC_EXPORT CUresult cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes,
					      size_t count, CUmemcpyAttributes *attrs, size_t *idxs,
					      size_t nattrs, CUstream s)
{
	return batch(dsts, srcs, sizes, count, attrs, idxs, nattrs, NULL, s ? s : CU_STREAM_PER_THREAD);
}

/* CUDA 12.8-12.9: the index of a copy that failed comes back */
RC_EXPORT CUresult cuMemcpyBatchAsync(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
				      CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs, size_t *fail,
				      CUstream s)
{
	return batch(dsts, srcs, sizes, count, attrs, idxs, nattrs, fail, s);
}

RC_EXPORT CUresult cuMemcpyBatchAsync_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
					   CUmemcpyAttributes *attrs, size_t *idxs, size_t nattrs,
					   size_t *fail, CUstream s)
{
	return batch(dsts, srcs, sizes, count, attrs, idxs, nattrs, fail, s ? s : CU_STREAM_PER_THREAD);
}
