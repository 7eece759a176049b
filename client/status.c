/* Reply statuses as the application sees them. */
#include <cuda.h>

#include "proto.h"

CUresult rc_status(int32_t st);

CUresult rc_status(int32_t st)
{
	switch (st) {
	case RGPU_ERR_AUTH: return CUDA_ERROR_NOT_PERMITTED;
	case RGPU_ERR_HANDLE: return CUDA_ERROR_INVALID_HANDLE;
	case RGPU_ERR_VERSION: return CUDA_ERROR_NOT_INITIALIZED;
	default:
		/* protocol codes the driver has no name for, and anything
		 * outside the driver's range, are never handed on as they are */
		return st < 0 || st >= RGPU_ERR_PROTO ? CUDA_ERROR_UNKNOWN : (CUresult)st;
	}
}
