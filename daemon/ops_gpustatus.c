/*
 * GPU status for the client's NVML (nvml/): PCI bus id, memory, utilisation
 * and peer reachability of one GPU of this server.  Memory and utilisation
 * come from the node's real NVML when the worker can load it (dlopen, never
 * linked); otherwise total is the device's and used is what this job holds
 * there, and utilisation is unknown (101).  A GPU with a quota reports the
 * quota as its total and the job's charge as used, as cuMemGetInfo does.
 * Last, the node's kernel driver version (NVML's, else the kernel
 * module's; empty without either), which rgpu's NVML reports as the driver
 * version (a trailing field: an older client reads on without it).  Then
 * the GPU's active NVLinks as that NVML reports them (link, the remote
 * end's PCI bus id and device type, P2P over it): NCCL picks its P2P
 * transport between GPUs only where it sees NVLink.  Last, the GPU's PCI
 * class code as the node's sysfs has it (0x030200 a 3D controller; 0 not
 * known).  Then the GPU's sensors as that NVML reads them (temperature,
 * power draw and limit, SM and memory clocks, performance state), each
 * RGPU_SENSOR_UNKNOWN where it cannot.
 */
#include "gate.h"
#include "log.h"
#include "nvrm.h"
#include "rgpud.h"
#include "session.h"

#include <ctype.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define D (&rgpud_server.drv)

/* the few NVML entry points used, by their documented prototypes */
typedef struct { unsigned long long total, free, used; } nvml_mem;
typedef struct { unsigned int gpu, memory; } nvml_util;
typedef struct {
	char legacy[16];
	unsigned int domain, bus, device, id, subsystem;
	char bus_id[32];
} nvml_pci;
#define NVLINK_MAX 18 /* NVML_NVLINK_MAX_LINKS */
static struct {
	int tried, ok;
	int (*init)(void);
	int (*by_pci)(const char *, void **);
	int (*mem)(void *, nvml_mem *);
	int (*util)(void *, nvml_util *);
	int (*driver)(char *, unsigned);
	int (*link_state)(void *, unsigned, int *);
	int (*link_cap)(void *, unsigned, int, unsigned *);
	int (*link_pci)(void *, unsigned, nvml_pci *);
	int (*link_type)(void *, unsigned, int *);
	int (*temp)(void *, int, unsigned *);
	int (*power)(void *, unsigned *);
	int (*power_limit)(void *, unsigned *);
	int (*clock)(void *, int, unsigned *);
	int (*pstate)(void *, int *);
	char version[96];
} nv;
static pthread_once_t nv_once = PTHREAD_ONCE_INIT;

static void nv_load(void)
{
	void *dl = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!dl)
		return;
	/* rgpu's own NVML answers from rgpud: never ask ourselves */
	if (dlsym(dl, "rgpu_nvml_version")) {
		dlclose(dl);
		return;
	}
	*(void **)&nv.init = dlsym(dl, "nvmlInit_v2");
	*(void **)&nv.by_pci = dlsym(dl, "nvmlDeviceGetHandleByPciBusId_v2");
	*(void **)&nv.mem = dlsym(dl, "nvmlDeviceGetMemoryInfo");
	*(void **)&nv.util = dlsym(dl, "nvmlDeviceGetUtilizationRates");
	*(void **)&nv.driver = dlsym(dl, "nvmlSystemGetDriverVersion");
	*(void **)&nv.link_state = dlsym(dl, "nvmlDeviceGetNvLinkState");
	*(void **)&nv.link_cap = dlsym(dl, "nvmlDeviceGetNvLinkCapability");
	*(void **)&nv.link_pci = dlsym(dl, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
	*(void **)&nv.link_type = dlsym(dl, "nvmlDeviceGetNvLinkRemoteDeviceType");
	*(void **)&nv.temp = dlsym(dl, "nvmlDeviceGetTemperature");
	*(void **)&nv.power = dlsym(dl, "nvmlDeviceGetPowerUsage");
	*(void **)&nv.power_limit = dlsym(dl, "nvmlDeviceGetEnforcedPowerLimit");
	*(void **)&nv.clock = dlsym(dl, "nvmlDeviceGetClockInfo");
	*(void **)&nv.pstate = dlsym(dl, "nvmlDeviceGetPerformanceState");
	nv.ok = nv.init && nv.by_pci && nv.mem && nv.util && nv.init() == 0;
}

/* the kernel driver's version, once: NVML's, else the module's */
static void version_load(void)
{
	pthread_once(&nv_once, nv_load);
	if (!(nv.ok && nv.driver && nv.driver(nv.version, sizeof(nv.version)) == 0))
		(void)rgpu_nvrm_version(nv.version, sizeof(nv.version));
	nv.version[sizeof(nv.version) - 1] = '\0';
}
static pthread_once_t version_once = PTHREAD_ONCE_INIT;

/* A hex number from the sysfs file name of the PCI device at bus id bus
 * ("0000:3B:00.0"); -1 if it is not there. */
static long sysfs_hex(const char *bus, const char *name)
{
	char path[160], low[64], line[32];
	size_t n = strlen(bus);
	if (!n || n >= sizeof(low))
		return -1;
	for (size_t i = 0; i <= n; i++)
		low[i] = (char)tolower((unsigned char)bus[i]);
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/%s", low, name);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	char *got = fgets(line, sizeof(line), f);
	fclose(f);
	if (!got)
		return -1;
	char *end;
	unsigned long v = strtoul(line, &end, 16);
	return end != line && v <= 0xffffff ? (long)v : -1;
}

/* The GPU's 24-bit PCI class code, 0 if not known: only an NVIDIA display
 * controller's (an emulated GPU's bus id may name another device here). */
static uint32_t pci_class(const char *bus)
{
	long cls = sysfs_hex(bus, "class");
	return sysfs_hex(bus, "vendor") == 0x10de && cls >> 16 == 0x03 ? (uint32_t)cls : 0;
}

int op_gpu_status(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint32_t gpu = get_u32(r);
	if (!rd_done(r))
		return OP_DROP;
	int rc = session_admit(s, gpu);
	if (rc)
		return rc;
	CUdevice dev;
	char bus[64] = "";
	size_t total = 0;
	if ((rc = D->cuDeviceGet(&dev, (int)gpu)) || (rc = D->cuDeviceTotalMem_v2(&total, dev)))
		return rc;
	if (D->cuDeviceGetPCIBusId)
		D->cuDeviceGetPCIBusId(bus, sizeof(bus), dev);
	bus[sizeof(bus) - 1] = '\0';
	uint64_t used = 0, limit = 0, held = 0;
	uint32_t ug = 101, um = 101;
	pthread_once(&nv_once, nv_load);
	void *nh = NULL;
	nvml_mem m;
	nvml_util u;
	int have_nh = nv.ok && bus[0] && nv.by_pci(bus, &nh) == 0;
	if (have_nh) {
		/* NVML's own pair, as nvidia-smi shows it (CUDA's total leaves
		 * out what the driver keeps) */
		if (nv.mem(nh, &m) == 0 && m.total) {
			total = m.total;
			used = m.used;
		}
		if (nv.util(nh, &u) == 0) {
			ug = u.gpu;
			um = u.memory;
		}
	}
	gate_usage(gpu, &limit, &held);
	if (!nv.ok)
		used = held;
	if (limit) {
		total = limit;
		used = held;
	}
	put_str(out, bus);
	put_u64(out, total);
	put_u64(out, used);
	put_u32(out, ug);
	put_u32(out, um);
	/* peers of this GPU on this server */
	int n = 0;
	uint32_t peer[RGPUD_MAX_GPUS], p2p[RGPUD_MAX_GPUS];
	for (int g = 0; g < rgpud_server.ndev && g < RGPUD_MAX_GPUS; g++) {
		CUdevice pd;
		int can = 0;
		if ((unsigned)g == gpu || !D->cuDeviceCanAccessPeer || D->cuDeviceGet(&pd, g) ||
		    D->cuDeviceCanAccessPeer(&can, dev, pd))
			continue;
		peer[n] = (uint32_t)g;
		p2p[n++] = can != 0;
	}
	put_u32(out, (uint32_t)n);
	for (int i = 0; i < n; i++) {
		put_u32(out, peer[i]);
		put_u32(out, p2p[i]);
	}
	pthread_once(&version_once, version_load);
	put_str(out, nv.version);
	/* the active NVLinks */
	struct { unsigned l; int type; unsigned p2p; nvml_pci rp; } lk[NVLINK_MAX];
	uint32_t nl = 0;
	for (unsigned l = 0; have_nh && nv.link_state && nv.link_pci && l < NVLINK_MAX; l++) {
		int active = 0;
		memset(&lk[nl], 0, sizeof(lk[nl]));
		if (nv.link_state(nh, l, &active) || !active || nv.link_pci(nh, l, &lk[nl].rp))
			continue;
		lk[nl].rp.bus_id[sizeof(lk[nl].rp.bus_id) - 1] = '\0';
		if (!nv.link_type || nv.link_type(nh, l, &lk[nl].type))
			lk[nl].type = 0xff;
		if (!nv.link_cap || nv.link_cap(nh, l, 0 /* P2P_SUPPORTED */, &lk[nl].p2p))
			lk[nl].p2p = 0;
		lk[nl++].l = l;
	}
	put_u32(out, nl);
	for (uint32_t i = 0; i < nl; i++) {
		put_u32(out, lk[i].l);
		put_str(out, lk[i].rp.bus_id);
		put_u32(out, (uint32_t)lk[i].type);
		put_u32(out, lk[i].p2p != 0);
	}
	put_u32(out, pci_class(bus));
	/* the sensors (enum rgpu_sensor order) */
	uint32_t sv[RGPU_SENSORS];
	for (int i = 0; i < RGPU_SENSORS; i++)
		sv[i] = RGPU_SENSOR_UNKNOWN;
	if (have_nh) {
		unsigned v;
		int ps;
		if (nv.temp && nv.temp(nh, 0 /* NVML_TEMPERATURE_GPU */, &v) == 0)
			sv[RGPU_SENSOR_TEMP_C] = v;
		if (nv.power && nv.power(nh, &v) == 0)
			sv[RGPU_SENSOR_POWER_MW] = v;
		if (nv.power_limit && nv.power_limit(nh, &v) == 0)
			sv[RGPU_SENSOR_POWER_LIMIT_MW] = v;
		if (nv.clock && nv.clock(nh, 1 /* NVML_CLOCK_SM */, &v) == 0)
			sv[RGPU_SENSOR_CLOCK_SM_MHZ] = v;
		if (nv.clock && nv.clock(nh, 2 /* NVML_CLOCK_MEM */, &v) == 0)
			sv[RGPU_SENSOR_CLOCK_MEM_MHZ] = v;
		if (nv.pstate && nv.pstate(nh, &ps) == 0 && ps >= 0)
			sv[RGPU_SENSOR_PSTATE] = (uint32_t)ps;
	}
	put_u32(out, RGPU_SENSORS);
	for (int i = 0; i < RGPU_SENSORS; i++)
		put_u32(out, sv[i]);
	return CUDA_SUCCESS;
}
