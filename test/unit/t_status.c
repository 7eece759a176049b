/* Reply statuses reach the application as driver error codes (issue 15
 * item 9: the same-host device-to-host path handed RGPU_ERR_* protocol
 * codes on as if they were CUresults).  Every copy path now maps through
 * rc_status (client/status.c). */
#include "tap.h"

#include <cuda.h>

#include "proto.h"

CUresult rc_status(int32_t st);

int main(void)
{
	is_u64(rc_status(0), CUDA_SUCCESS, "success stays success");
	is_u64(rc_status(CUDA_ERROR_INVALID_VALUE), CUDA_ERROR_INVALID_VALUE,
	       "a driver code passes through");
	is_u64(rc_status(RGPU_ERR_HANDLE), CUDA_ERROR_INVALID_HANDLE, "an unknown handle");
	is_u64(rc_status(RGPU_ERR_AUTH), CUDA_ERROR_NOT_PERMITTED, "refused access");
	is_u64(rc_status(RGPU_ERR_VERSION), CUDA_ERROR_NOT_INITIALIZED, "a version mismatch");
	int all = 1;
	for (int32_t st = RGPU_ERR_PROTO; st < RGPU_ERR_PROTO + 1000; st++) {
		CUresult c = rc_status(st);
		all &= c != (CUresult)st && c < 1000 && c != CUDA_SUCCESS;
	}
	ok(all, "no protocol code (RGPU_ERR_* and beyond) reaches the application as it is");
	is_u64(rc_status(-5), CUDA_ERROR_UNKNOWN, "a negative status is an unknown error");
	return tap_done();
}
