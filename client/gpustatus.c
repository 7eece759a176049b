/*
 * GPU status for rgpu's NVML (nvml/): one request to the GPU's server.
 * Exported under a private name, found by the NVML library with dlsym.
 */
#include "client.h"

#include <stdio.h>

/* p2p[i] for each device i (a client ordinal): 1 a GPU of the same server
 * this one can reach (peer access), 0 a GPU of the same server it cannot,
 * -1 a GPU of another server. */
RC_EXPORT int rgpu_client_gpu_status(int ordinal, char *bus, size_t buslen, uint64_t *total,
				     uint64_t *used, unsigned *util_gpu, unsigned *util_mem,
				     int p2p[RGPU_MAX_DEVICES])
{
	struct rc_dev *d;
	CUresult rc = rc_dev_get(ordinal, &d);
	if (rc)
		return rc;
	struct wbuf *w = rc_req();
	put_u32(w, d->gpu);
	struct rd r;
	if ((rc = rc_call(d->conn, RGPU_OP_GPU_STATUS, w, &r)))
		return rc;
	const char *b = get_str(&r, 63);
	*total = get_u64(&r);
	*used = get_u64(&r);
	*util_gpu = get_u32(&r);
	*util_mem = get_u32(&r);
	uint32_t n = get_u32(&r);
	if (!rd_ok(&r) || n > RGPU_MAX_DEVICES)
		return CUDA_ERROR_UNKNOWN;
	for (int i = 0; i < RGPU_MAX_DEVICES; i++)
		p2p[i] = i < rc_ndev && rc_devs[i].conn == d->conn ? 0 : -1;
	for (uint32_t k = 0; k < n; k++) {
		uint32_t g = get_u32(&r), can = get_u32(&r);
		for (int i = 0; i < rc_ndev; i++)
			if (rc_devs[i].conn == d->conn && rc_devs[i].gpu == g)
				p2p[i] = can != 0;
	}
	if (!rd_ok(&r))
		return CUDA_ERROR_UNKNOWN;
	snprintf(bus, buslen, "%s", b);
	return CUDA_SUCCESS;
}
