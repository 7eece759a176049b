/*
 * rgpu's NVML: a drop-in libnvidia-ml.so.1 answering for the job's GPUs,
 * the devices RGPU_SERVERS names, in the same order as the CUDA devices
 * (NVML device i is CUDA device i), so nvidia-smi, PyTorch and NCCL on a
 * node without GPUs see the GPUs the job got, and on a GPU node the job's
 * GPUs rather than the node's.
 *
 * It answers through rgpu's client library (the libcuda.so.1 beside it, or
 * the first on the library path): names, UUIDs and compute capability
 * from the device properties every client caches at cuInit, PCI bus ids,
 * memory, utilisation and peer reachability from the GPU's server
 * (RGPU_OP_GPU_STATUS; a GPU with a quota reports the quota as its
 * memory).  Topology between GPUs: of one server, NODE (PCIe/NVLink detail
 * is not known here); of different servers, SYSTEM.  NVLink, temperature,
 * power, clocks and performance state come from the server's NVML where it
 * has one; MIG, fans, ECC and the rest answer NVML_ERROR_NOT_SUPPORTED.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include "proto.h" /* enum rgpu_sensor */
#include "rgpu_nvml.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define API __attribute__((visibility("default")))
#define MAXDEV 64
#define DEV_MAGIC 0x4e564d4c

struct nvml_dev {
	uint32_t magic;
	int index;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int refs;
static int ndev;
static struct nvml_dev devs[MAXDEV];
static void *cudalib;

static struct {
	CUresult (*init)(unsigned);
	CUresult (*count)(int *);
	CUresult (*get)(CUdevice *, int);
	CUresult (*name)(char *, int, CUdevice);
	CUresult (*uuid)(CUuuid *, CUdevice);
	CUresult (*attr)(int *, CUdevice_attribute, CUdevice);
	CUresult (*version)(int *);
	int (*status)(int, char *, size_t, uint64_t *, uint64_t *, unsigned *, unsigned *, int *);
	int (*driver)(int, char *, size_t);
	int (*nvlink)(int, unsigned, char *, size_t, int *, int *);
	int (*pci_class)(int);
	int (*sensor)(int, int, unsigned *);
} cu;

API const char *rgpu_nvml_version(void) { return "rgpu-nvml 1"; }

/* rgpu's libcuda.so.1: beside this library, else the first on the path;
 * never a real driver (it knows nothing of the job's GPUs). */
static void *load_client(void)
{
	Dl_info di;
	char path[4096];
	void *h = NULL;
	if (dladdr((void *)load_client, &di) && di.dli_fname) {
		const char *slash = strrchr(di.dli_fname, '/');
		if (slash && (size_t)(slash - di.dli_fname) < sizeof(path) - 16) {
			snprintf(path, sizeof(path), "%.*s/libcuda.so.1", (int)(slash - di.dli_fname),
				 di.dli_fname);
			h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
			if (h && !dlsym(h, "rgpu_client_version")) {
				dlclose(h);
				h = NULL;
			}
		}
	}
	if (!h) {
		h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
		if (h && !dlsym(h, "rgpu_client_version")) {
			dlclose(h);
			h = NULL;
		}
	}
	return h;
}

static nvmlReturn_t init_locked(void)
{
	if (refs++)
		return NVML_SUCCESS;
	if (!cudalib && !(cudalib = load_client())) {
		fprintf(stderr, "rgpu NVML: rgpu's libcuda.so.1 was not found beside libnvidia-ml.so.1 "
				"nor on the library path\n");
		refs = 0;
		return NVML_ERROR_LIBRARY_NOT_FOUND;
	}
	*(void **)&cu.init = dlsym(cudalib, "cuInit");
	*(void **)&cu.count = dlsym(cudalib, "cuDeviceGetCount");
	*(void **)&cu.get = dlsym(cudalib, "cuDeviceGet");
	*(void **)&cu.name = dlsym(cudalib, "cuDeviceGetName");
	*(void **)&cu.uuid = dlsym(cudalib, "cuDeviceGetUuid");
	*(void **)&cu.attr = dlsym(cudalib, "cuDeviceGetAttribute");
	*(void **)&cu.version = dlsym(cudalib, "cuDriverGetVersion");
	*(void **)&cu.status = dlsym(cudalib, "rgpu_client_gpu_status");
	*(void **)&cu.driver = dlsym(cudalib, "rgpu_client_driver_version"); /* may lack */
	*(void **)&cu.nvlink = dlsym(cudalib, "rgpu_client_gpu_nvlink");      /* may lack */
	*(void **)&cu.pci_class = dlsym(cudalib, "rgpu_client_gpu_pci_class"); /* may lack */
	*(void **)&cu.sensor = dlsym(cudalib, "rgpu_client_gpu_sensor");       /* may lack */
	if (!cu.init || !cu.count || !cu.get || !cu.name || !cu.uuid || !cu.attr || !cu.version ||
	    !cu.status) {
		refs = 0;
		return NVML_ERROR_FUNCTION_NOT_FOUND;
	}
	int n = 0;
	if (cu.init(0) || cu.count(&n)) {
		/* the client logged why (no server, refused, ...) */
		refs = 0;
		return NVML_ERROR_DRIVER_NOT_LOADED;
	}
	ndev = n < MAXDEV ? n : MAXDEV;
	for (int i = 0; i < ndev; i++)
		devs[i] = (struct nvml_dev){ DEV_MAGIC, i };
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlInit_v2(void)
{
	pthread_mutex_lock(&lock);
	nvmlReturn_t rc = init_locked();
	pthread_mutex_unlock(&lock);
	return rc;
}

API nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }
API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
	(void)flags;
	return nvmlInit_v2();
}

API nvmlReturn_t nvmlShutdown(void)
{
	pthread_mutex_lock(&lock);
	nvmlReturn_t rc = refs ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
	if (refs)
		refs--;
	pthread_mutex_unlock(&lock);
	return rc;
}

API const char *nvmlErrorString(nvmlReturn_t r)
{
	switch (r) {
	case NVML_SUCCESS: return "Success";
	case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
	case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
	case NVML_ERROR_NOT_FOUND: return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
	case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
	case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
	case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
	case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
	case NVML_ERROR_MEMORY: return "Insufficient Memory";
	case NVML_ERROR_NO_DATA: return "No data";
	case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
	default: return "Unknown Error";
	}
}

static nvmlReturn_t ready(void)
{
	pthread_mutex_lock(&lock);
	int r = refs;
	pthread_mutex_unlock(&lock);
	return r ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

/* the device behind a handle, checked */
static nvmlReturn_t dev_of(nvmlDevice_t d, int *idx)
{
	nvmlReturn_t rc = ready();
	if (rc)
		return rc;
	struct nvml_dev *p = (struct nvml_dev *)d;
	if (!p || p < devs || p >= devs + ndev || p->magic != DEV_MAGIC)
		return NVML_ERROR_INVALID_ARGUMENT;
	*idx = p->index;
	return NVML_SUCCESS;
}

static nvmlReturn_t copy_str(char *dst, unsigned len, const char *s)
{
	if (!dst)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (strlen(s) + 1 > len)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(dst, s, strlen(s) + 1);
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v)
{
	nvmlReturn_t rc = ready();
	if (rc)
		return rc;
	if (!v)
		return NVML_ERROR_INVALID_ARGUMENT;
	return cu.version(v) ? NVML_ERROR_UNKNOWN : NVML_SUCCESS;
}

API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return nvmlSystemGetCudaDriverVersion(v); }

/* The kernel driver of the first GPU's server ("580.159.04"), as rgpud
 * reports it; a server that cannot tell (no NVIDIA kernel module: the
 * emulated device) leaves the CUDA version ("13.0") to stand in. */
static nvmlReturn_t driver_version(char *s, size_t n, int *cuda, int *known)
{
	/* asked of the server once: a driver does not change under us */
	static char server[96];
	static int asked;
	nvmlReturn_t rc = nvmlSystemGetCudaDriverVersion(cuda);
	if (rc)
		return rc;
	pthread_mutex_lock(&lock);
	if (!asked && cu.driver && ndev > 0)
		asked = cu.driver(0, server, sizeof(server)) == 0;
	*known = asked && server[0];
	if (*known)
		snprintf(s, n, "%s", server);
	pthread_mutex_unlock(&lock);
	if (!*known)
		snprintf(s, n, "%d.%d", *cuda / 1000, *cuda % 1000 / 10);
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlSystemGetDriverVersion(char *buf, unsigned int len)
{
	char s[96];
	int v, known;
	nvmlReturn_t rc = driver_version(s, sizeof(s), &v, &known);
	return rc ? rc : copy_str(buf, len, s);
}

/* NVIDIA's: the CUDA major version, then the driver's ("13.580.159.04"),
 * which nvidia-smi holds against its own */
API nvmlReturn_t nvmlSystemGetNVMLVersion(char *buf, unsigned int len)
{
	char s[200], d[96];
	int v, known;
	nvmlReturn_t rc = driver_version(d, sizeof(d), &v, &known);
	if (rc)
		return rc;
	if (known)
		snprintf(s, sizeof(s), "%d.%s", v / 1000, d);
	else
		snprintf(s, sizeof(s), "%s-rgpu", d); /* "13.0-rgpu" */
	return copy_str(buf, len, s);
}

API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n)
{
	nvmlReturn_t rc = ready();
	if (rc)
		return rc;
	if (!n)
		return NVML_ERROR_INVALID_ARGUMENT;
	*n = (unsigned)ndev;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCount(unsigned int *n) { return nvmlDeviceGetCount_v2(n); }

API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d)
{
	nvmlReturn_t rc = ready();
	if (rc)
		return rc;
	if (!d || i >= (unsigned)ndev)
		return NVML_ERROR_INVALID_ARGUMENT;
	*d = (nvmlDevice_t)&devs[i];
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *d)
{
	return nvmlDeviceGetHandleByIndex_v2(i, d);
}

API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int *i)
{
	int idx;
	nvmlReturn_t rc = dev_of(d, &idx);
	if (rc)
		return rc;
	if (!i)
		return NVML_ERROR_INVALID_ARGUMENT;
	*i = (unsigned)idx;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int *m)
{
	return nvmlDeviceGetIndex(d, m);
}

API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int len)
{
	int idx;
	CUdevice cd;
	char s[256];
	nvmlReturn_t rc = dev_of(d, &idx);
	if (rc)
		return rc;
	if (cu.get(&cd, idx) || cu.name(s, sizeof(s), cd))
		return NVML_ERROR_UNKNOWN;
	return copy_str(name, len, s);
}

static int uuid_str(int idx, char *s, size_t n)
{
	CUdevice cd;
	CUuuid u;
	if (cu.get(&cd, idx) || cu.uuid(&u, cd))
		return -1;
	const unsigned char *b = (const unsigned char *)u.bytes;
	snprintf(s, n,
		 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
		 b[13], b[14], b[15]);
	return 0;
}

API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int len)
{
	int idx;
	char s[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
	nvmlReturn_t rc = dev_of(d, &idx);
	if (rc)
		return rc;
	if (uuid_str(idx, s, sizeof(s)) < 0)
		return NVML_ERROR_UNKNOWN;
	return copy_str(uuid, len, s);
}

API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *d)
{
	nvmlReturn_t rc = ready();
	if (rc)
		return rc;
	if (!uuid || !d)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (int i = 0; i < ndev; i++) {
		char s[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
		if (uuid_str(i, s, sizeof(s)) == 0 && !strcasecmp(s, uuid)) {
			*d = (nvmlDevice_t)&devs[i];
			return NVML_SUCCESS;
		}
	}
	return NVML_ERROR_NOT_FOUND;
}

struct status {
	char bus[64];
	uint64_t total, used;
	unsigned ug, um;
	int p2p[MAXDEV];
};

static nvmlReturn_t status_of(int idx, struct status *st)
{
	memset(st, 0, sizeof(*st));
	int rc = cu.status(idx, st->bus, sizeof(st->bus), &st->total, &st->used, &st->ug, &st->um,
			   st->p2p);
	if (rc == CUDA_ERROR_DEVICE_UNAVAILABLE)
		return NVML_ERROR_GPU_IS_LOST;
	return rc ? NVML_ERROR_UNKNOWN : NVML_SUCCESS;
}

/* "dddddddd:bb:dd.f" (or a 4-digit domain) into its numbers */
static int parse_bus(const char *s, unsigned *dom, unsigned *bus, unsigned *dev, unsigned *fn)
{
	return sscanf(s, "%x:%x:%x.%x", dom, bus, dev, fn) == 4 ? 0 : -1;
}

/* NVML's PCI info from a bus id (the ids left 0); -1 if it is not one */
static int pci_of(const char *s, nvmlPciInfo_t *pci)
{
	unsigned dom, bus, dv, fn;
	if (parse_bus(s, &dom, &bus, &dv, &fn) < 0)
		return -1;
	memset(pci, 0, sizeof(*pci));
	pci->domain = dom;
	pci->bus = bus;
	pci->device = dv;
	snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.%X", dom, bus, dv, fn);
	snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.%X", dom & 0xffff, bus,
		 dv, fn);
	return 0;
}

API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *pci)
{
	int idx;
	struct status st;
	nvmlReturn_t rc = dev_of(d, &idx);
	if (rc)
		return rc;
	if (!pci)
		return NVML_ERROR_INVALID_ARGUMENT;
	if ((rc = status_of(idx, &st)))
		return rc;
	if (pci_of(st.bus, pci) < 0)
		return NVML_ERROR_NOT_SUPPORTED;
	CUdevice cd;
	int id = 0;
	if (!cu.get(&cd, idx) && !cu.attr(&id, CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID, cd))
		pci->pciDeviceId = (unsigned)id;
	if (!cu.get(&cd, idx) && !cu.attr(&id, CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID, cd))
		pci->pciSubSystemId = (unsigned)id;
	return NVML_SUCCESS;
}

/* What nvidia-smi asks for pci.bus_id: the address and the PCI class (0
 * where the server does not know it). */
API nvmlReturn_t nvmlDeviceGetPciInfoExt(nvmlDevice_t d, nvmlPciInfoExt_t *ext)
{
	nvmlPciInfo_t pci;
	nvmlReturn_t rc = ready();
	if (rc)
		return rc;
	if (!ext)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (ext->version != nvmlPciInfoExt_v1)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	if ((rc = nvmlDeviceGetPciInfo_v3(d, &pci)))
		return rc;
	int idx = ((struct nvml_dev *)d)->index;
	int cls = cu.pci_class ? cu.pci_class(idx) : 0;
	if (cls < 0)
		cls = 0;
	ext->domain = pci.domain;
	ext->bus = pci.bus;
	ext->device = pci.device;
	ext->pciDeviceId = pci.pciDeviceId;
	ext->pciSubSystemId = pci.pciSubSystemId;
	ext->baseClass = (unsigned)cls >> 16 & 0xff;
	ext->subClass = (unsigned)cls >> 8 & 0xff;
	memcpy(ext->busId, pci.busId, sizeof(ext->busId));
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t *pci)
{
	return nvmlDeviceGetPciInfo_v3(d, pci);
}

API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, nvmlPciInfo_t *pci)
{
	return nvmlDeviceGetPciInfo_v3(d, pci);
}

API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *busid, nvmlDevice_t *d)
{
	nvmlReturn_t rc = ready();
	if (rc)
		return rc;
	unsigned dom, bus, dv, fn;
	if (!busid || !d || parse_bus(busid, &dom, &bus, &dv, &fn) < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (int i = 0; i < ndev; i++) {
		struct status st;
		unsigned a, b, c, e;
		if (status_of(i, &st) == NVML_SUCCESS && parse_bus(st.bus, &a, &b, &c, &e) == 0 &&
		    a == dom && b == bus && c == dv && e == fn) {
			*d = (nvmlDevice_t)&devs[i];
			return NVML_SUCCESS;
		}
	}
	return NVML_ERROR_NOT_FOUND;
}

API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *busid, nvmlDevice_t *d)
{
	return nvmlDeviceGetHandleByPciBusId_v2(busid, d);
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
	int idx;
	struct status st;
	nvmlReturn_t rc = dev_of(d, &idx);
	if (rc)
		return rc;
	if (!m)
		return NVML_ERROR_INVALID_ARGUMENT;
	if ((rc = status_of(idx, &st)))
		return rc;
	m->total = st.total;
	m->used = st.used < st.total ? st.used : st.total;
	m->free = st.total - m->used;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
	nvmlMemory_t v1;
	nvmlReturn_t rc = ready();
	if (rc)
		return rc;
	if (!m)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (m->version != nvmlMemory_v2)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	rc = nvmlDeviceGetMemoryInfo(d, &v1);
	if (rc)
		return rc;
	m->total = v1.total;
	m->reserved = 0;
	m->free = v1.free;
	m->used = v1.used;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u)
{
	int idx;
	struct status st;
	nvmlReturn_t rc = dev_of(d, &idx);
	if (rc)
		return rc;
	if (!u)
		return NVML_ERROR_INVALID_ARGUMENT;
	if ((rc = status_of(idx, &st)))
		return rc;
	if (st.ug > 100 || st.um > 100)
		return NVML_ERROR_NOT_SUPPORTED; /* the server has no NVML */
	u->gpu = st.ug;
	u->memory = st.um;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor)
{
	int idx;
	CUdevice cd;
	nvmlReturn_t rc = dev_of(d, &idx);
	if (rc)
		return rc;
	if (!major || !minor)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (cu.get(&cd, idx) || cu.attr(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, cd) ||
	    cu.attr(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, cd))
		return NVML_ERROR_UNKNOWN;
	return NVML_SUCCESS;
}

/* The architecture from the compute capability (as NVML names them). */
API nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t d, nvmlDeviceArchitecture_t *arch)
{
	int major, minor;
	nvmlReturn_t rc = nvmlDeviceGetCudaComputeCapability(d, &major, &minor);
	if (rc)
		return rc;
	if (!arch)
		return NVML_ERROR_INVALID_ARGUMENT;
	static const struct { int major, minor; nvmlDeviceArchitecture_t arch; } by_cc[] = {
		{ 3, 0, NVML_DEVICE_ARCH_KEPLER }, { 5, 0, NVML_DEVICE_ARCH_MAXWELL },
		{ 6, 0, NVML_DEVICE_ARCH_PASCAL }, { 7, 0, NVML_DEVICE_ARCH_VOLTA },
		{ 7, 5, NVML_DEVICE_ARCH_TURING }, { 8, 0, NVML_DEVICE_ARCH_AMPERE },
		{ 8, 9, NVML_DEVICE_ARCH_ADA },    { 9, 0, NVML_DEVICE_ARCH_HOPPER },
		{ 10, 0, NVML_DEVICE_ARCH_BLACKWELL },
	};
	/* the last generation at or below the capability (10.x-12.x are
	 * Blackwell's); what comes after 12.x is not named here */
	*arch = NVML_DEVICE_ARCH_UNKNOWN;
	for (size_t i = 0; major <= 12 && i < sizeof(by_cc) / sizeof(by_cc[0]); i++)
		if (major > by_cc[i].major || (major == by_cc[i].major && minor >= by_cc[i].minor))
			*arch = by_cc[i].arch;
	return NVML_SUCCESS;
}

/* same server (and peer access) from the GPU status of a */
static nvmlReturn_t peers(nvmlDevice_t a, nvmlDevice_t b, int *same_server, int *p2p)
{
	int ia, ib;
	struct status st;
	nvmlReturn_t rc = dev_of(a, &ia);
	if (!rc)
		rc = dev_of(b, &ib);
	if (!rc)
		rc = status_of(ia, &st);
	if (rc)
		return rc;
	*same_server = st.p2p[ib] >= 0;
	*p2p = st.p2p[ib] > 0;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t a, nvmlDevice_t b,
						     nvmlGpuTopologyLevel_t *level)
{
	int same, p2p;
	nvmlReturn_t rc = peers(a, b, &same, &p2p);
	if (rc)
		return rc;
	if (!level)
		return NVML_ERROR_INVALID_ARGUMENT;
	*level = a == b ? NVML_TOPOLOGY_INTERNAL : same ? NVML_TOPOLOGY_NODE : NVML_TOPOLOGY_SYSTEM;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t a, nvmlDevice_t b, nvmlGpuP2PCapsIndex_t idx,
					nvmlGpuP2PStatus_t *status)
{
	int same, p2p;
	nvmlReturn_t rc = peers(a, b, &same, &p2p);
	if (rc)
		return rc;
	if (!status)
		return NVML_ERROR_INVALID_ARGUMENT;
	switch (idx) {
	case NVML_P2P_CAPS_INDEX_READ:
	case NVML_P2P_CAPS_INDEX_WRITE:
		*status = p2p ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
		return NVML_SUCCESS;
	default:
		/* NVLink and atomics: not known here */
		*status = NVML_P2P_STATUS_NOT_SUPPORTED;
		return NVML_SUCCESS;
	}
}

/* ---- NVLink, as the GPU's server's NVML reports it ----
 * An active link is kept only where its far end is an NVSwitch or a GPU of
 * this job on the same server (NCCL then picks its P2P transport between
 * them); a link to anything else reads as inactive.  From a server that
 * reports no NVLink (no NVML there, the emulated device): NOT_SUPPORTED. */
#define NVLINK_MAX 18

static int same_bus(const char *a, const char *b)
{
	unsigned x[4], y[4];
	return parse_bus(a, &x[0], &x[1], &x[2], &x[3]) == 0 &&
	       parse_bus(b, &y[0], &y[1], &y[2], &y[3]) == 0 && !memcmp(x, y, sizeof(x));
}

/* A link as the server reports it, filtered as above */
struct link {
	char bus[64]; /* the far end's PCI bus id */
	int type;     /* NVML's remote device type: 0 a GPU, 2 an NVSwitch */
	int p2p, active;
};

static nvmlReturn_t link_of(nvmlDevice_t d, unsigned n, struct link *l)
{
	int idx;
	nvmlReturn_t rc = dev_of(d, &idx);
	if (rc)
		return rc;
	if (!cu.nvlink)
		return NVML_ERROR_NOT_SUPPORTED;
	if (n >= NVLINK_MAX)
		return NVML_ERROR_INVALID_ARGUMENT;
	int r = cu.nvlink(idx, n, l->bus, sizeof(l->bus), &l->type, &l->p2p);
	if (r < 0)
		return NVML_ERROR_UNKNOWN;
	if (r == 0)
		return NVML_ERROR_NOT_SUPPORTED;
	l->active = r == 1;
	if (l->active && l->type == 0) {
		/* a GPU: one of this job's on the same server, or none at all */
		struct status st, pst;
		int found = 0;
		if ((rc = status_of(idx, &st)))
			return rc;
		for (int j = 0; j < ndev && !found; j++)
			found = j != idx && st.p2p[j] >= 0 && status_of(j, &pst) == NVML_SUCCESS &&
				same_bus(pst.bus, l->bus);
		l->active = found;
	}
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int link, int *active)
{
	struct link l;
	if (!active)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t rc = link_of(d, link, &l);
	if (!rc)
		*active = l.active;
	return rc;
}

API nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t d, unsigned int link, int cap,
					       unsigned int *r)
{
	struct link l;
	if (!r)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t rc = link_of(d, link, &l);
	/* (NVML_NVLINK_CAP_P2P_SUPPORTED: the one rgpu knows) */
	if (!rc)
		*r = cap == 0 && l.active ? (unsigned)l.p2p : 0;
	return rc;
}

API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned int link,
						     nvmlPciInfo_t *pci)
{
	struct link l;
	if (!pci)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t rc = link_of(d, link, &l);
	if (rc)
		return rc;
	return l.active && pci_of(l.bus, pci) == 0 ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

/* The unversioned name, which NCCL looks up: NVML's first layout (a
 * 16-character bus id, the ids, four reserved words: 52 bytes), as the
 * real library fills it; NCCL reads the far end's bus id where _v2 has
 * it, finds it empty there, and so does through rgpu what it does
 * locally. */
API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t d, unsigned int link, void *pci)
{
	nvmlPciInfo_t v2;
	if (!pci)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t rc = nvmlDeviceGetNvLinkRemotePciInfo_v2(d, link, &v2);
	if (rc)
		return rc;
	unsigned char v1[52] = { 0 };
	_Static_assert(offsetof(nvmlPciInfo_t, busId) == 36, "the ids end where v1's reserved words begin");
	memcpy(v1, &v2, offsetof(nvmlPciInfo_t, busId));
	memcpy(pci, v1, sizeof(v1));
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t d, unsigned int link, int *type)
{
	struct link l;
	if (!type)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t rc = link_of(d, link, &l);
	if (rc)
		return rc;
	if (!l.active)
		return NVML_ERROR_INVALID_ARGUMENT;
	*type = l.type;
	return NVML_SUCCESS;
}

/* Field values: the NVLink ones rgpu knows (a link's state, the number of
 * links); every other field answers NOT_SUPPORTED in its own nvmlReturn,
 * as NVML does for fields a GPU lacks. */
API nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t d, int n, nvmlFieldValue_t *v)
{
	int idx;
	nvmlReturn_t rc = dev_of(d, &idx);
	if (rc)
		return rc;
	if (n < 0 || (n > 0 && !v))
		return NVML_ERROR_INVALID_ARGUMENT;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	for (int i = 0; i < n; i++) {
		struct link l;
		v[i].timestamp = (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
		v[i].latencyUsec = 0;
		v[i].valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
		switch (v[i].fieldId) {
		case NVML_FI_DEV_NVLINK_GET_STATE:
			v[i].nvmlReturn = link_of(d, v[i].scopeId, &l);
			if (v[i].nvmlReturn == NVML_SUCCESS)
				v[i].value.uiVal = (unsigned)l.active;
			break;
		case NVML_FI_DEV_NVLINK_LINK_COUNT:
			v[i].value.uiVal = 0;
			v[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
			for (unsigned k = 0; k < NVLINK_MAX; k++)
				if (link_of(d, k, &l) == NVML_SUCCESS) {
					v[i].value.uiVal = k + 1;
					v[i].nvmlReturn = NVML_SUCCESS;
				}
			break;
		default:
			v[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
		}
	}
	return NVML_SUCCESS;
}

/* A sensor of the GPU as its server's NVML reads it. */
static nvmlReturn_t sensor_of(nvmlDevice_t d, int which, unsigned *v)
{
	int idx;
	nvmlReturn_t rc = dev_of(d, &idx);
	if (rc)
		return rc;
	if (!v)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!cu.sensor)
		return NVML_ERROR_NOT_SUPPORTED;
	int got = cu.sensor(idx, which, v);
	if (got == -(int)CUDA_ERROR_DEVICE_UNAVAILABLE)
		return NVML_ERROR_GPU_IS_LOST;
	return got == 1 ? NVML_SUCCESS : got == 0 ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_UNKNOWN;
}

API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *t)
{
	if (sensor != 0) { /* NVML_TEMPERATURE_GPU, the only sensor */
		int idx;
		nvmlReturn_t rc = dev_of(d, &idx);
		return rc ? rc : NVML_ERROR_INVALID_ARGUMENT;
	}
	return sensor_of(d, RGPU_SENSOR_TEMP_C, t);
}

/* (what nvidia-smi 580 asks for temperature.gpu) */
API nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t d, nvmlTemperature_t *t)
{
	nvmlReturn_t rc = ready();
	if (rc)
		return rc;
	if (!t)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (t->version != nvmlTemperature_v1)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	unsigned v;
	if ((rc = nvmlDeviceGetTemperature(d, t->sensorType, &v)))
		return rc;
	t->temperature = (int)v;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw)
{
	return sensor_of(d, RGPU_SENSOR_POWER_MW, mw);
}

API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *mw)
{
	return sensor_of(d, RGPU_SENSOR_POWER_LIMIT_MW, mw);
}

/* (the limit in force: what rgpu knows of the management limit) */
API nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t d, unsigned int *mw)
{
	return sensor_of(d, RGPU_SENSOR_POWER_LIMIT_MW, mw);
}

/* Graphics and SM clocks are one on compute GPUs; the memory clock */
API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *mhz)
{
	if (type == 0 || type == 1) /* NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM */
		return sensor_of(d, RGPU_SENSOR_CLOCK_SM_MHZ, mhz);
	if (type == 2) /* NVML_CLOCK_MEM */
		return sensor_of(d, RGPU_SENSOR_CLOCK_MEM_MHZ, mhz);
	int idx;
	nvmlReturn_t rc = dev_of(d, &idx);
	return rc ? rc : type == 3 ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
}

API nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t d, int *pstate)
{
	unsigned v;
	nvmlReturn_t rc = sensor_of(d, RGPU_SENSOR_PSTATE, pstate ? &v : NULL);
	if (!rc)
		*pstate = (int)v;
	return rc;
}

/* What rgpu does not know about a remote GPU. */
#define NOT_SUPPORTED(name, ...)                                   \
	API nvmlReturn_t name(__VA_ARGS__)                         \
	{                                                          \
		nvmlReturn_t rc = ready();                         \
		return rc ? rc : NVML_ERROR_NOT_SUPPORTED;         \
	}
/* PyTorch resolves these at start (c10/cuda/driver_api) and fails if one
 * is missing; it asks them only for NVLink-connected peers */
NOT_SUPPORTED(nvmlDeviceGetGpuFabricInfoV, nvmlDevice_t d, void *info)
NOT_SUPPORTED(nvmlDeviceGetMigMode, nvmlDevice_t d, unsigned int *cur, unsigned int *pending)
NOT_SUPPORTED(nvmlDeviceGetCpuAffinity, nvmlDevice_t d, unsigned int n, unsigned long *set)
NOT_SUPPORTED(nvmlDeviceGetNumaNodeId, nvmlDevice_t d, unsigned int *node)
NOT_SUPPORTED(nvmlDeviceGetPersistenceMode, nvmlDevice_t d, int *mode)
NOT_SUPPORTED(nvmlDeviceGetComputeMode, nvmlDevice_t d, int *mode)
/* what nvidia-smi --query-gpu and monitoring agents ask besides: answered
 * "not supported" (nvidia-smi prints [N/A]) rather than missing (it
 * prints [Function Not Found]) */
NOT_SUPPORTED(nvmlDeviceGetSerial, nvmlDevice_t d, char *s, unsigned int n)
NOT_SUPPORTED(nvmlDeviceGetVbiosVersion, nvmlDevice_t d, char *s, unsigned int n)
NOT_SUPPORTED(nvmlDeviceGetBoardPartNumber, nvmlDevice_t d, char *s, unsigned int n)
NOT_SUPPORTED(nvmlDeviceGetInforomImageVersion, nvmlDevice_t d, char *s, unsigned int n)
NOT_SUPPORTED(nvmlDeviceGetBrand, nvmlDevice_t d, int *brand)
NOT_SUPPORTED(nvmlDeviceGetPowerState, nvmlDevice_t d, int *pstate)
NOT_SUPPORTED(nvmlDeviceGetDisplayMode, nvmlDevice_t d, int *mode)
NOT_SUPPORTED(nvmlDeviceGetDisplayActive, nvmlDevice_t d, int *active)
NOT_SUPPORTED(nvmlDeviceGetEccMode, nvmlDevice_t d, int *cur, int *pending)
NOT_SUPPORTED(nvmlDeviceGetTotalEccErrors, nvmlDevice_t d, int type, int counter,
	      unsigned long long *n)
NOT_SUPPORTED(nvmlDeviceGetRetiredPages, nvmlDevice_t d, int cause, unsigned int *n,
	      unsigned long long *pages)
NOT_SUPPORTED(nvmlDeviceGetRemappedRows, nvmlDevice_t d, unsigned int *corr, unsigned int *unc,
	      unsigned int *pending, unsigned int *failed)
NOT_SUPPORTED(nvmlDeviceGetNumFans, nvmlDevice_t d, unsigned int *n)
NOT_SUPPORTED(nvmlDeviceGetFanSpeed, nvmlDevice_t d, unsigned int *pct)
NOT_SUPPORTED(nvmlDeviceGetFanSpeed_v2, nvmlDevice_t d, unsigned int fan, unsigned int *pct)
NOT_SUPPORTED(nvmlDeviceGetTemperatureThreshold, nvmlDevice_t d, int which, unsigned int *t)
NOT_SUPPORTED(nvmlDeviceGetPowerManagementDefaultLimit, nvmlDevice_t d, unsigned int *mw)
NOT_SUPPORTED(nvmlDeviceGetTotalEnergyConsumption, nvmlDevice_t d, unsigned long long *mj)
NOT_SUPPORTED(nvmlDeviceGetMaxClockInfo, nvmlDevice_t d, int type, unsigned int *mhz)
NOT_SUPPORTED(nvmlDeviceGetApplicationsClock, nvmlDevice_t d, int type, unsigned int *mhz)
NOT_SUPPORTED(nvmlDeviceGetCurrentClocksEventReasons, nvmlDevice_t d, unsigned long long *r)
NOT_SUPPORTED(nvmlDeviceGetCurrentClocksThrottleReasons, nvmlDevice_t d, unsigned long long *r)
NOT_SUPPORTED(nvmlDeviceGetBAR1MemoryInfo, nvmlDevice_t d, void *bar1)
NOT_SUPPORTED(nvmlDeviceGetCurrPcieLinkGeneration, nvmlDevice_t d, unsigned int *gen)
NOT_SUPPORTED(nvmlDeviceGetCurrPcieLinkWidth, nvmlDevice_t d, unsigned int *width)
NOT_SUPPORTED(nvmlDeviceGetMaxPcieLinkGeneration, nvmlDevice_t d, unsigned int *gen)
NOT_SUPPORTED(nvmlDeviceGetMaxPcieLinkWidth, nvmlDevice_t d, unsigned int *width)
NOT_SUPPORTED(nvmlDeviceGetPcieThroughput, nvmlDevice_t d, int counter, unsigned int *kbs)
NOT_SUPPORTED(nvmlDeviceGetEncoderUtilization, nvmlDevice_t d, unsigned int *pct, unsigned int *us)
NOT_SUPPORTED(nvmlDeviceGetDecoderUtilization, nvmlDevice_t d, unsigned int *pct, unsigned int *us)

API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned int *is_mig)
{
	int idx;
	nvmlReturn_t rc = dev_of(d, &idx);
	if (rc)
		return rc;
	if (!is_mig)
		return NVML_ERROR_INVALID_ARGUMENT;
	*is_mig = 0;
	return NVML_SUCCESS;
}

/* Processes on a remote GPU are the server's business: none listed. */
API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count, void *infos)
{
	int idx;
	(void)infos;
	nvmlReturn_t rc = dev_of(d, &idx);
	if (rc)
		return rc;
	if (!count)
		return NVML_ERROR_INVALID_ARGUMENT;
	*count = 0;
	return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned int *count, void *infos)
{
	return nvmlDeviceGetComputeRunningProcesses_v3(d, count, infos);
}

API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int *count, void *infos)
{
	return nvmlDeviceGetComputeRunningProcesses_v3(d, count, infos);
}

API nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t d, unsigned int *count, void *infos)
{
	return nvmlDeviceGetComputeRunningProcesses_v3(d, count, infos);
}
