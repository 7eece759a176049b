/*
 * A stand-in for the node's NVML, loaded by an rgpud --emulated of the
 * end-to-end suite (as libnvidia-ml.so.1 on its library path), so that the
 * NVLink part of GPU_STATUS and of rgpu's NVML can be tested without a GPU.
 * It knows only what FAKE_NVML_LINKS says, words of
 *   BUS.LINK=REMOTE_BUS_ID/TYPE     e.g. 18.0=00000000:19:00.0/0
 * (BUS: the GPU's PCI bus number in hex; TYPE: NVML's remote device type,
 * 0 a GPU, 2 an NVSwitch).  Memory and utilisation are "not supported";
 * the sensors read fixed values (FAKE_* below), which t_nvml expects.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))
#define NOT_SUPPORTED 3
#define INVALID_ARGUMENT 2

typedef struct {
	char legacy[16];
	unsigned domain, bus, device, id, subsystem;
	char bus_id[32];
} pci_info;

EXPORT int nvmlInit_v2(void) { return 0; }
EXPORT int nvmlShutdown(void) { return 0; }

/* a handle is the GPU's bus number, plus one */
EXPORT int nvmlDeviceGetHandleByPciBusId_v2(const char *bus, void **h)
{
	unsigned dom, b, dev, fn;
	if (!bus || !h || sscanf(bus, "%x:%x:%x.%x", &dom, &b, &dev, &fn) != 4)
		return INVALID_ARGUMENT;
	*h = (void *)(unsigned long)(b + 1);
	return 0;
}

EXPORT int nvmlDeviceGetMemoryInfo(void *h, void *m) { (void)h; (void)m; return NOT_SUPPORTED; }

/* the sensors (t_nvml checks these numbers) */
#define FAKE_TEMP_C 41
#define FAKE_POWER_MW 123456
#define FAKE_LIMIT_MW 700000
#define FAKE_SM_MHZ 1980
#define FAKE_MEM_MHZ 3201
#define FAKE_PSTATE 0
EXPORT int nvmlDeviceGetTemperature(void *h, int sensor, unsigned *t)
{
	(void)h;
	if (sensor != 0 || !t)
		return INVALID_ARGUMENT;
	*t = FAKE_TEMP_C;
	return 0;
}
EXPORT int nvmlDeviceGetPowerUsage(void *h, unsigned *mw) { (void)h; return mw ? (*mw = FAKE_POWER_MW, 0) : INVALID_ARGUMENT; }
EXPORT int nvmlDeviceGetEnforcedPowerLimit(void *h, unsigned *mw) { (void)h; return mw ? (*mw = FAKE_LIMIT_MW, 0) : INVALID_ARGUMENT; }
EXPORT int nvmlDeviceGetClockInfo(void *h, int type, unsigned *mhz)
{
	(void)h;
	if (!mhz || (type != 1 && type != 2))
		return type == 0 || type == 3 ? NOT_SUPPORTED : INVALID_ARGUMENT;
	*mhz = type == 1 ? FAKE_SM_MHZ : FAKE_MEM_MHZ;
	return 0;
}
EXPORT int nvmlDeviceGetPerformanceState(void *h, int *p) { (void)h; return p ? (*p = FAKE_PSTATE, 0) : INVALID_ARGUMENT; }
EXPORT int nvmlDeviceGetUtilizationRates(void *h, void *u) { (void)h; (void)u; return NOT_SUPPORTED; }

/* the link's remote end from FAKE_NVML_LINKS: 1 found, 0 not */
static int link_of(void *h, unsigned link, char *remote, size_t n, int *type)
{
	const char *e = getenv("FAKE_NVML_LINKS");
	unsigned want = (unsigned)(unsigned long)h - 1;
	while (e && *e) {
		unsigned b, l;
		int t, used = 0;
		char rb[64];
		if (sscanf(e, " %x.%u=%63[^/]/%d%n", &b, &l, rb, &t, &used) == 4) {
			if (b == want && l == link) {
				snprintf(remote, n, "%s", rb);
				*type = t;
				return 1;
			}
			e += used;
		} else {
			break;
		}
	}
	return 0;
}

EXPORT int nvmlDeviceGetNvLinkState(void *h, unsigned link, int *active)
{
	char rb[64];
	int t;
	if (!active || link >= 18)
		return INVALID_ARGUMENT;
	*active = link_of(h, link, rb, sizeof(rb), &t);
	return 0;
}

EXPORT int nvmlDeviceGetNvLinkCapability(void *h, unsigned link, int cap, unsigned *r)
{
	char rb[64];
	int t;
	if (!r || link >= 18)
		return INVALID_ARGUMENT;
	*r = cap == 0 && link_of(h, link, rb, sizeof(rb), &t);
	return 0;
}

EXPORT int nvmlDeviceGetNvLinkRemotePciInfo_v2(void *h, unsigned link, pci_info *p)
{
	int t;
	if (!p)
		return INVALID_ARGUMENT;
	memset(p, 0, sizeof(*p));
	return link_of(h, link, p->bus_id, sizeof(p->bus_id), &t) ? 0 : INVALID_ARGUMENT;
}

EXPORT int nvmlDeviceGetNvLinkRemoteDeviceType(void *h, unsigned link, int *type)
{
	char rb[64];
	if (!type)
		return INVALID_ARGUMENT;
	return link_of(h, link, rb, sizeof(rb), type) ? 0 : INVALID_ARGUMENT;
}
