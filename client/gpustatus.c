/*
 * GPU status for rgpu's NVML (nvml/): one request to the GPU's server.
 * Exported under private names, found by the NVML library with dlsym.
 */
#include "client.h"

#include <stdio.h>

#define NVLINKS_MAX 18 /* NVML_NVLINK_MAX_LINKS */

struct gpu_status {
	const char *bus;
	uint64_t total, used;
	uint32_t util_gpu, util_mem;
	uint32_t n, peer[RGPU_MAX_DEVICES], p2p[RGPU_MAX_DEVICES];
	const char *driver; /* "" from a server that does not send it */
	/* the active NVLinks (none from a server that does not send them) */
	uint32_t nlinks;
	struct { uint32_t link, type, p2p; const char *bus; } links[NVLINKS_MAX];
	uint32_t pci_class; /* 0: not known (or an older server) */
	uint32_t sensor[RGPU_SENSORS]; /* RGPU_SENSOR_UNKNOWN: not known */
};

/* GPU_STATUS for client ordinal; the strings point into the thread's reply
 * buffer (valid until its next call). */
static CUresult status(int ordinal, struct rc_dev **dp, struct gpu_status *st)
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
	st->bus = get_str(&r, 63);
	st->total = get_u64(&r);
	st->used = get_u64(&r);
	st->util_gpu = get_u32(&r);
	st->util_mem = get_u32(&r);
	st->n = get_u32(&r);
	if (!rd_ok(&r) || st->n > RGPU_MAX_DEVICES)
		return CUDA_ERROR_UNKNOWN;
	for (uint32_t k = 0; k < st->n; k++) {
		st->peer[k] = get_u32(&r);
		st->p2p[k] = get_u32(&r);
	}
	/* the driver version came later: an older server ends here */
	st->driver = rd_done(&r) ? "" : get_str(&r, 95);
	/* and the NVLinks later still */
	st->nlinks = rd_ok(&r) && !rd_done(&r) ? get_u32(&r) : 0;
	if (st->nlinks > NVLINKS_MAX)
		return CUDA_ERROR_UNKNOWN;
	for (uint32_t k = 0; k < st->nlinks; k++) {
		st->links[k].link = get_u32(&r);
		st->links[k].bus = get_str(&r, 63);
		st->links[k].type = get_u32(&r);
		st->links[k].p2p = get_u32(&r);
		if (!st->links[k].bus)
			return CUDA_ERROR_UNKNOWN;
	}
	/* the PCI class, then the sensors (a newer server's beyond ours
	 * are skipped) */
	st->pci_class = rd_ok(&r) && !rd_done(&r) ? get_u32(&r) : 0;
	uint32_t ns = rd_ok(&r) && !rd_done(&r) ? get_u32(&r) : 0;
	if (ns > 64)
		return CUDA_ERROR_UNKNOWN;
	for (uint32_t k = 0; k < RGPU_SENSORS; k++)
		st->sensor[k] = RGPU_SENSOR_UNKNOWN;
	for (uint32_t k = 0; k < ns; k++) {
		uint32_t v = get_u32(&r);
		if (k < RGPU_SENSORS)
			st->sensor[k] = v;
	}
	if (!rd_ok(&r) || !st->bus || !st->driver)
		return CUDA_ERROR_UNKNOWN;
	*dp = d;
	return CUDA_SUCCESS;
}

/* p2p[i] for each device i (a client ordinal): 1 a GPU of the same server
 * this one can reach (peer access), 0 a GPU of the same server it cannot,
 * -1 a GPU of another server. */
RC_EXPORT int rgpu_client_gpu_status(int ordinal, char *bus, size_t buslen, uint64_t *total,
				     uint64_t *used, unsigned *util_gpu, unsigned *util_mem,
				     int p2p[RGPU_MAX_DEVICES])
{
	struct rc_dev *d;
	struct gpu_status st;
	CUresult rc = status(ordinal, &d, &st);
	if (rc)
		return rc;
	*total = st.total;
	*used = st.used;
	*util_gpu = st.util_gpu;
	*util_mem = st.util_mem;
	for (int i = 0; i < RGPU_MAX_DEVICES; i++)
		p2p[i] = i < rc_ndev && rc_devs[i].conn == d->conn ? 0 : -1;
	for (uint32_t k = 0; k < st.n; k++)
		for (int i = 0; i < rc_ndev; i++)
			if (rc_devs[i].conn == d->conn && rc_devs[i].gpu == st.peer[k])
				p2p[i] = st.p2p[k] != 0;
	snprintf(bus, buslen, "%s", st.bus);
	return CUDA_SUCCESS;
}

/* The kernel driver version of the server of GPU ordinal ("580.159.04"),
 * or "" where the server does not know it.  0, or a CUresult. */
RC_EXPORT int rgpu_client_driver_version(int ordinal, char *buf, size_t len)
{
	struct rc_dev *d;
	struct gpu_status st;
	if (len)
		buf[0] = '\0';
	CUresult rc = status(ordinal, &d, &st);
	if (!rc)
		snprintf(buf, len, "%s", st.driver);
	return rc;
}

/* NVLink link of GPU ordinal as its server's NVML reports it: 1 active
 * (bus: the remote end's PCI bus id; type: NVML's remote device type, 0 a
 * GPU, 2 an NVSwitch; p2p: P2P over it), 2 not active, 0 the server
 * reports no NVLink for this GPU, or a CUresult (negative). */
RC_EXPORT int rgpu_client_gpu_nvlink(int ordinal, unsigned link, char *bus, size_t buslen, int *type,
				     int *p2p)
{
	struct rc_dev *d;
	struct gpu_status st;
	CUresult rc = status(ordinal, &d, &st);
	if (rc)
		return -(int)rc;
	for (uint32_t k = 0; k < st.nlinks; k++)
		if (st.links[k].link == link) {
			snprintf(bus, buslen, "%s", st.links[k].bus);
			*type = (int)st.links[k].type;
			*p2p = (int)st.links[k].p2p;
			return 1;
		}
	return st.nlinks ? 2 : 0;
}

/* The PCI class code of GPU ordinal (0x030200: a 3D controller), 0 where
 * its server does not know it, or a CUresult (negative). */
RC_EXPORT int rgpu_client_gpu_pci_class(int ordinal)
{
	struct rc_dev *d;
	struct gpu_status st;
	CUresult rc = status(ordinal, &d, &st);
	return rc ? -(int)rc : (int)st.pci_class;
}

/* Sensor which (enum rgpu_sensor) of GPU ordinal as its server's NVML
 * read it: 1 (*v set), 0 not known there, or a CUresult (negative). */
RC_EXPORT int rgpu_client_gpu_sensor(int ordinal, int which, unsigned *v)
{
	struct rc_dev *d;
	struct gpu_status st;
	if (which < 0 || which >= RGPU_SENSORS || !v)
		return -(int)CUDA_ERROR_INVALID_VALUE;
	CUresult rc = status(ordinal, &d, &st);
	if (rc)
		return -(int)rc;
	if (st.sensor[which] == RGPU_SENSOR_UNKNOWN)
		return 0;
	*v = st.sensor[which];
	return 1;
}
