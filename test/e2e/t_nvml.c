/*
 * rgpu's NVML (nvml/) lists exactly the GPUs of RGPU_SERVERS, in CUDA's
 * order, with CUDA's names, UUIDs and memory, PCI bus ids that find the
 * same handles, and the topology between them: T_NVML_SAME=1 when the two
 * devices are GPUs of one server (peers), 0 when of two servers.
 *
 * T_NVML_LIB names the library (dlopen()ed, as NVIDIA's libraries do).
 *
 * NVLink, as the server's NVML reports it (test/e2e/fake_nvml.c stands in
 * for it): T_NVML_NVLINK unset, the server knows none (NOT_SUPPORTED);
 * "peer", GPU 0's link 0 goes to GPU 1 of the job, a GPU (active, P2P, the
 * remote PCI bus id GPU 1's), its link 1 is down; "absent", that link's
 * far end is a GPU the job does not have (inactive).
 */
#include "common.h"
#include "../../nvml/rgpu_nvml.h"

#include <dlfcn.h>
#include <stdint.h>
#include <strings.h>

#define SYM(name) *(void **)&name = dlsym(lib, #name); if (!name) fail("%s lacks %s", path, #name)

int main(int argc, char **argv)
{
	(void)argc;
	e2e_init(argv[0]);
	const char *path = getenv("T_NVML_LIB"), *servers = getenv("RGPU_SERVERS");
	if (!path || !servers)
		fail("T_NVML_LIB and RGPU_SERVERS must be set");
	void *lib = dlopen(path, RTLD_NOW);
	if (!lib)
		fail("dlopen %s: %s", path, dlerror());
	nvmlReturn_t (*nvmlInit_v2)(void), (*nvmlShutdown)(void);
	nvmlReturn_t (*nvmlDeviceGetCount_v2)(unsigned *);
	nvmlReturn_t (*nvmlDeviceGetHandleByIndex_v2)(unsigned, nvmlDevice_t *);
	nvmlReturn_t (*nvmlDeviceGetHandleByUUID)(const char *, nvmlDevice_t *);
	nvmlReturn_t (*nvmlDeviceGetHandleByPciBusId_v2)(const char *, nvmlDevice_t *);
	nvmlReturn_t (*nvmlDeviceGetName)(nvmlDevice_t, char *, unsigned);
	nvmlReturn_t (*nvmlDeviceGetUUID)(nvmlDevice_t, char *, unsigned);
	nvmlReturn_t (*nvmlDeviceGetPciInfo_v3)(nvmlDevice_t, nvmlPciInfo_t *);
	nvmlReturn_t (*nvmlDeviceGetMemoryInfo)(nvmlDevice_t, nvmlMemory_t *);
	nvmlReturn_t (*nvmlDeviceGetUtilizationRates)(nvmlDevice_t, nvmlUtilization_t *);
	nvmlReturn_t (*nvmlDeviceGetTopologyCommonAncestor)(nvmlDevice_t, nvmlDevice_t, nvmlGpuTopologyLevel_t *);
	nvmlReturn_t (*nvmlDeviceGetP2PStatus)(nvmlDevice_t, nvmlDevice_t, nvmlGpuP2PCapsIndex_t, nvmlGpuP2PStatus_t *);
	nvmlReturn_t (*nvmlSystemGetDriverVersion)(char *, unsigned);
	nvmlReturn_t (*nvmlSystemGetNVMLVersion)(char *, unsigned);
	nvmlReturn_t (*nvmlSystemGetCudaDriverVersion)(int *);
	nvmlReturn_t (*nvmlDeviceGetCudaComputeCapability)(nvmlDevice_t, int *, int *);
	nvmlReturn_t (*nvmlDeviceGetPciInfoExt)(nvmlDevice_t, nvmlPciInfoExt_t *);
	nvmlReturn_t (*nvmlDeviceGetArchitecture)(nvmlDevice_t, nvmlDeviceArchitecture_t *);
	nvmlReturn_t (*nvmlDeviceGetFanSpeed)(nvmlDevice_t, unsigned *);
	nvmlReturn_t (*nvmlDeviceGetGraphicsRunningProcesses_v3)(nvmlDevice_t, unsigned *, void *);
	nvmlReturn_t (*nvmlDeviceGetTemperatureV)(nvmlDevice_t, nvmlTemperature_t *);
	nvmlReturn_t (*nvmlDeviceGetPowerUsage)(nvmlDevice_t, unsigned *);
	nvmlReturn_t (*nvmlDeviceGetEnforcedPowerLimit)(nvmlDevice_t, unsigned *);
	nvmlReturn_t (*nvmlDeviceGetClockInfo)(nvmlDevice_t, int, unsigned *);
	nvmlReturn_t (*nvmlDeviceGetPerformanceState)(nvmlDevice_t, int *);
	SYM(nvmlInit_v2);
	SYM(nvmlShutdown);
	SYM(nvmlDeviceGetCount_v2);
	SYM(nvmlDeviceGetHandleByIndex_v2);
	SYM(nvmlDeviceGetHandleByUUID);
	SYM(nvmlDeviceGetHandleByPciBusId_v2);
	SYM(nvmlDeviceGetName);
	SYM(nvmlDeviceGetUUID);
	SYM(nvmlDeviceGetPciInfo_v3);
	SYM(nvmlDeviceGetMemoryInfo);
	SYM(nvmlDeviceGetUtilizationRates);
	SYM(nvmlDeviceGetTopologyCommonAncestor);
	SYM(nvmlDeviceGetP2PStatus);
	SYM(nvmlSystemGetDriverVersion);
	SYM(nvmlSystemGetNVMLVersion);
	SYM(nvmlSystemGetCudaDriverVersion);
	SYM(nvmlDeviceGetCudaComputeCapability);
	SYM(nvmlDeviceGetPciInfoExt);
	SYM(nvmlDeviceGetArchitecture);
	SYM(nvmlDeviceGetFanSpeed);
	SYM(nvmlDeviceGetGraphicsRunningProcesses_v3);
	SYM(nvmlDeviceGetTemperatureV);
	SYM(nvmlDeviceGetPowerUsage);
	SYM(nvmlDeviceGetEnforcedPowerLimit);
	SYM(nvmlDeviceGetClockInfo);
	SYM(nvmlDeviceGetPerformanceState);

	/* what nvidia-smi --query-gpu looks up for its common fields (a
	 * missing one prints "[Function Not Found]") */
	static const char *const smi_needs[] = {
		"nvmlDeviceGetPciInfoExt", "nvmlDeviceGetSerial", "nvmlDeviceGetVbiosVersion",
		"nvmlDeviceGetPerformanceState", "nvmlDeviceGetClockInfo", "nvmlDeviceGetMaxClockInfo",
		"nvmlDeviceGetPowerManagementLimit", "nvmlDeviceGetEnforcedPowerLimit",
		"nvmlDeviceGetEccMode", "nvmlDeviceGetDisplayMode", "nvmlDeviceGetDisplayActive",
		"nvmlDeviceGetFanSpeed_v2", "nvmlDeviceGetCurrPcieLinkGeneration",
		"nvmlDeviceGetCurrPcieLinkWidth", "nvmlDeviceGetArchitecture",
		"nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetTemperatureV",
	};
	for (size_t i = 0; i < sizeof(smi_needs) / sizeof(smi_needs[0]); i++)
		if (!dlsym(lib, smi_needs[i]))
			fail("%s lacks %s (nvidia-smi --query-gpu asks for it)", path, smi_needs[i]);

	/* what PyTorch resolves at start (c10/cuda/driver_api) and fails
	 * without, though it calls some only for NVLink peers */
	static const char *const torch_needs[] = {
		"nvmlInit_v2", "nvmlDeviceGetHandleByPciBusId_v2", "nvmlDeviceGetNvLinkRemoteDeviceType",
		"nvmlDeviceGetNvLinkRemotePciInfo_v2", "nvmlDeviceGetComputeRunningProcesses",
		"nvmlSystemGetCudaDriverVersion_v2", "nvmlDeviceGetGpuFabricInfoV",
	};
	for (size_t i = 0; i < sizeof(torch_needs) / sizeof(*torch_needs); i++)
		if (!dlsym(lib, torch_needs[i]))
			fail("%s lacks %s (PyTorch needs it)", path, torch_needs[i]);
	/* what NCCL looks up (src/misc/nvmlwrap.cc): a link whose call is
	 * missing is skipped, so NCCL would see no NVLink */
	static const char *const nccl_needs[] = {
		"nvmlInit", "nvmlInit_v2", "nvmlShutdown", "nvmlDeviceGetCount", "nvmlDeviceGetCount_v2",
		"nvmlDeviceGetHandleByPciBusId", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetIndex",
		"nvmlErrorString", "nvmlDeviceGetNvLinkState", "nvmlDeviceGetNvLinkRemotePciInfo",
		"nvmlDeviceGetNvLinkCapability", "nvmlDeviceGetCudaComputeCapability",
		"nvmlDeviceGetP2PStatus", "nvmlDeviceGetFieldValues", "nvmlDeviceGetGpuFabricInfoV",
	};
	for (size_t i = 0; i < sizeof(nccl_needs) / sizeof(*nccl_needs); i++)
		if (!dlsym(lib, nccl_needs[i]))
			fail("%s lacks %s (NCCL needs it)", path, nccl_needs[i]);

	unsigned n = 0;
	if (nvmlDeviceGetCount_v2(&n) != NVML_ERROR_UNINITIALIZED)
		fail("a call before nvmlInit did not say UNINITIALIZED");
	if (nvmlInit_v2() != NVML_SUCCESS)
		fail("nvmlInit_v2 failed");
	if (nvmlDeviceGetCount_v2(&n) != NVML_SUCCESS)
		fail("nvmlDeviceGetCount_v2");
	unsigned want = 1;
	for (const char *c = servers; *c; c++)
		want += *c == ',';
	CHECK(n == want, "NVML lists %u GPUs, RGPU_SERVERS names %u", n, want);
	char ver[80];
	CHECK(nvmlSystemGetDriverVersion(ver, sizeof(ver)) == NVML_SUCCESS && ver[0], "driver version");
	/* NVIDIA's NVML version is the CUDA major version and the driver's
	 * (nvidia-smi holds it against its own); a server that cannot tell its
	 * kernel driver (the emulated device) leaves "CUDA version-rgpu" */
	char nver[200], nwant[200], alt[200];
	int cv = 0;
	CHECK(nvmlSystemGetNVMLVersion(nver, sizeof(nver)) == NVML_SUCCESS &&
	      nvmlSystemGetCudaDriverVersion(&cv) == NVML_SUCCESS, "NVML version");
	snprintf(nwant, sizeof(nwant), "%d.%s", cv / 1000, ver);
	snprintf(alt, sizeof(alt), "%s-rgpu", ver);
	CHECK(!strcmp(nver, nwant) || !strcmp(nver, alt), "NVML version '%s', driver '%s'", nver, ver);
	/* with the kernel module here (the GPU machine, server on this host),
	 * the driver version is the module's */
	FILE *pf = fopen("/proc/driver/nvidia/version", "r");
	if (pf) {
		char line[512] = "";
		if (!fgets(line, sizeof(line), pf))
			line[0] = '\0';
		fclose(pf);
		CHECK(strstr(line, ver) != NULL, "driver version '%s' is not the kernel module's: %s", ver,
		      line);
		say("driver version %s, NVML version %s (the kernel module's)", ver, nver);
	}
	CK(cuInit(0));
	nvmlDevice_t h[8];
	char bus[8][32];
	for (unsigned i = 0; i < n && i < 8; i++) {
		CHECK(nvmlDeviceGetHandleByIndex_v2(i, &h[i]) == NVML_SUCCESS, "handle %u", i);
		CUdevice d;
		CK(cuDeviceGet(&d, (int)i));
		char cname[256], nname[96];
		CK(cuDeviceGetName(cname, sizeof(cname), d));
		CHECK(nvmlDeviceGetName(h[i], nname, sizeof(nname)) == NVML_SUCCESS && !strcmp(cname, nname),
		      "name of GPU %u: NVML '%s', CUDA '%s'", i, nname, cname);
		CUuuid u;
		CK(cuDeviceGetUuid(&u, d));
		char want_uuid[80], uuid[80];
		const unsigned char *b = (const unsigned char *)u.bytes;
		snprintf(want_uuid, sizeof(want_uuid),
			 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
			 b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
		CHECK(nvmlDeviceGetUUID(h[i], uuid, sizeof(uuid)) == NVML_SUCCESS && !strcmp(uuid, want_uuid),
		      "UUID of GPU %u: %s, want %s", i, uuid, want_uuid);
		CHECK(nvmlDeviceGetUUID(h[i], uuid, 10) == NVML_ERROR_INSUFFICIENT_SIZE, "short buffer");
		nvmlDevice_t byu;
		CHECK(nvmlDeviceGetHandleByUUID(want_uuid, &byu) == NVML_SUCCESS && byu == h[i], "by UUID");
		nvmlPciInfo_t pci;
		CHECK(nvmlDeviceGetPciInfo_v3(h[i], &pci) == NVML_SUCCESS && pci.busId[0], "PCI info");
		int cubus = -1;
		CK(cuDeviceGetAttribute(&cubus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d));
		CHECK((int)pci.bus == cubus, "PCI bus %u, CUDA says %d", pci.bus, cubus);
		snprintf(bus[i], sizeof(bus[i]), "%s", pci.busId);
		/* the address again, with its class (which the emulated device's
		 * server does not know: 0), versioned as NVML's structs are */
		nvmlPciInfoExt_t ext;
		memset(&ext, 0xff, sizeof(ext));
		ext.version = nvmlPciInfoExt_v1;
		CHECK(nvmlDeviceGetPciInfoExt(h[i], &ext) == NVML_SUCCESS && !strcmp(ext.busId, pci.busId) &&
			      ext.domain == pci.domain && ext.bus == pci.bus && ext.device == pci.device &&
			      ext.pciDeviceId == pci.pciDeviceId,
		      "PCI info with the class: '%s' bus %u, want '%s' bus %u", ext.busId, ext.bus, pci.busId,
		      pci.bus);
		CHECK((ext.baseClass == 0 && ext.subClass == 0) || ext.baseClass == 3,
		      "class %02x%02x: a GPU is a display controller (03), or unknown", ext.baseClass,
		      ext.subClass);
		ext.version = 7;
		CHECK(nvmlDeviceGetPciInfoExt(h[i], &ext) == NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
		      "PCI info of a wrong version answered");
		int ccmaj = 0;
		CK(cuDeviceGetAttribute(&ccmaj, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d));
		nvmlDeviceArchitecture_t arch = 0;
		CHECK(nvmlDeviceGetArchitecture(h[i], &arch) == NVML_SUCCESS &&
			      (ccmaj != 9 || arch == NVML_DEVICE_ARCH_HOPPER) &&
			      (ccmaj != 8 || arch == NVML_DEVICE_ARCH_AMPERE || arch == NVML_DEVICE_ARCH_ADA),
		      "architecture %u of a compute capability %d.x GPU", arch, ccmaj);
		unsigned fan = 77, nproc = 5;
		CHECK(nvmlDeviceGetFanSpeed(h[i], &fan) == NVML_ERROR_NOT_SUPPORTED && fan == 77,
		      "fan speed of a remote GPU answered");
		CHECK(nvmlDeviceGetGraphicsRunningProcesses_v3(h[i], &nproc, NULL) == NVML_SUCCESS && nproc == 0,
		      "graphics processes: %u", nproc);
		/* the sensors: the server's NVML's (the stand-in's numbers),
		 * or not supported from a server without one */
		nvmlTemperature_t tv = { .version = nvmlTemperature_v1, .sensorType = 0, .temperature = -1 };
		unsigned pw = 0, lim = 0, sm = 0, mem = 0;
		int ps = -1;
		nvmlReturn_t sw = getenv("T_NVML_NVLINK") ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
		CHECK(nvmlDeviceGetTemperatureV(h[i], &tv) == sw && (sw || tv.temperature == 41),
		      "temperature %d", tv.temperature);
		CHECK(nvmlDeviceGetPowerUsage(h[i], &pw) == sw && (sw || pw == 123456), "power %u mW", pw);
		CHECK(nvmlDeviceGetEnforcedPowerLimit(h[i], &lim) == sw && (sw || lim == 700000),
		      "power limit %u mW", lim);
		CHECK(nvmlDeviceGetClockInfo(h[i], 1, &sm) == sw && (sw || sm == 1980), "SM clock %u", sm);
		CHECK(nvmlDeviceGetClockInfo(h[i], 2, &mem) == sw && (sw || mem == 3201), "memory clock %u", mem);
		CHECK(nvmlDeviceGetPerformanceState(h[i], &ps) == sw && (sw || ps == 0), "pstate %d", ps);
		tv.version = 3;
		CHECK(nvmlDeviceGetTemperatureV(h[i], &tv) == NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
		      "temperature of a wrong version answered");
		size_t total;
		CK(cuDeviceTotalMem(&total, d));
		nvmlMemory_t m;
		CHECK(nvmlDeviceGetMemoryInfo(h[i], &m) == NVML_SUCCESS && m.total == total &&
			      m.used <= m.total && m.free == m.total - m.used,
		      "memory of GPU %u: total %llu (CUDA %zu), used %llu, free %llu", i, m.total, total,
		      m.used, m.free);
		nvmlUtilization_t ut;
		nvmlReturn_t r = nvmlDeviceGetUtilizationRates(h[i], &ut);
		CHECK(r == NVML_SUCCESS || r == NVML_ERROR_NOT_SUPPORTED, "utilization: %d", (int)r);
		int maj = 0, min = -1, cmaj = 0;
		CK(cuDeviceGetAttribute(&cmaj, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d));
		CHECK(nvmlDeviceGetCudaComputeCapability(h[i], &maj, &min) == NVML_SUCCESS && maj == cmaj,
		      "compute capability");
		say("NVML GPU %u: %s %s %s %llu MiB", i, nname, uuid, pci.busId, m.total >> 20);
	}
	for (unsigned i = 0; i < n && i < 8; i++) {
		nvmlDevice_t byp;
		/* bus ids of GPUs of different servers may coincide; then the
		 * first of them answers */
		CHECK(nvmlDeviceGetHandleByPciBusId_v2(bus[i], &byp) == NVML_SUCCESS, "by PCI bus id %s", bus[i]);
	}
	/* nvidia-smi's private table: refused without one ("Mismatch in
	 * versions"); it finds the devices by index through its entries */
	nvmlReturn_t (*get_table)(const void **, const void *);
	*(void **)&get_table = dlsym(lib, "nvmlInternalGetExportTable");
	CHECK(get_table != NULL, "no nvmlInternalGetExportTable: nvidia-smi would refuse the library");
	static const unsigned char smi_id[16] = {0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e,
						 0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4};
	static const unsigned char other_id[16] = {1, 2, 3};
	const void *tbl = NULL;
	CHECK(get_table(&tbl, other_id) != NVML_SUCCESS && !tbl, "an unknown private table was given");
	CHECK(get_table(&tbl, smi_id) == NVML_SUCCESS && tbl, "nvidia-smi's private table");
	const uintptr_t *ent = tbl;
	CHECK(ent[0] >= 1024 && ent[0] % sizeof(void *) == 0, "private table size %lu", (unsigned long)ent[0]);
	for (unsigned i = 0; i < n && i < 8; i++) {
		nvmlReturn_t (*by_index)(uintptr_t, void *, uintptr_t, uintptr_t);
		size_t slot = 648 / sizeof(void *);
		CHECK(slot < ent[0] / sizeof(void *), "private table too small for slot %zu", slot);
		*(void **)&by_index = (void *)ent[slot];
		nvmlDevice_t viat = NULL;
		CHECK(by_index(i, &viat, 0x22, 0) == NVML_SUCCESS && viat == h[i],
		      "private lookup of GPU %u gave %p, not %p", i, (void *)viat, (void *)h[i]);
	}
	const char *same = getenv("T_NVML_SAME");
	if (same && n >= 2) {
		nvmlGpuTopologyLevel_t lv;
		nvmlGpuP2PStatus_t ps;
		CHECK(nvmlDeviceGetTopologyCommonAncestor(h[0], h[1], &lv) == NVML_SUCCESS, "topology");
		CHECK(nvmlDeviceGetP2PStatus(h[0], h[1], NVML_P2P_CAPS_INDEX_READ, &ps) == NVML_SUCCESS, "P2P");
		if (atoi(same)) {
			CHECK(lv == NVML_TOPOLOGY_NODE && ps == NVML_P2P_STATUS_OK, "one server: level %d, P2P %d",
			      (int)lv, (int)ps);
		} else {
			CHECK(lv == NVML_TOPOLOGY_SYSTEM && ps == NVML_P2P_STATUS_NOT_SUPPORTED,
			      "two servers: level %d, P2P %d", (int)lv, (int)ps);
		}
		CHECK(nvmlDeviceGetTopologyCommonAncestor(h[0], h[0], &lv) == NVML_SUCCESS &&
			      lv == NVML_TOPOLOGY_INTERNAL, "a GPU with itself");
	}
	nvmlReturn_t (*nvmlDeviceGetNvLinkState)(nvmlDevice_t, unsigned, int *);
	nvmlReturn_t (*nvmlDeviceGetNvLinkCapability)(nvmlDevice_t, unsigned, int, unsigned *);
	nvmlReturn_t (*nvmlDeviceGetNvLinkRemotePciInfo_v2)(nvmlDevice_t, unsigned, nvmlPciInfo_t *);
	nvmlReturn_t (*nvmlDeviceGetNvLinkRemoteDeviceType)(nvmlDevice_t, unsigned, int *);
	SYM(nvmlDeviceGetNvLinkState);
	SYM(nvmlDeviceGetNvLinkCapability);
	SYM(nvmlDeviceGetNvLinkRemotePciInfo_v2);
	SYM(nvmlDeviceGetNvLinkRemoteDeviceType);
	nvmlReturn_t (*nvmlDeviceGetFieldValues)(nvmlDevice_t, int, nvmlFieldValue_t *);
	SYM(nvmlDeviceGetFieldValues);
	const char *nvl = getenv("T_NVML_NVLINK");
	int active = -1, type = -1;
	unsigned cap = 9;
	nvmlPciInfo_t rp;
	nvmlReturn_t lrc = nvmlDeviceGetNvLinkState(h[0], 0, &active);
	if (!nvl) {
		CHECK(lrc == NVML_ERROR_NOT_SUPPORTED, "NVLink state from a server without NVML: %d", (int)lrc);
		nvmlFieldValue_t fv = { .fieldId = NVML_FI_DEV_NVLINK_GET_STATE };
		CHECK(nvmlDeviceGetFieldValues(h[0], 1, &fv) == NVML_SUCCESS &&
			      fv.nvmlReturn == NVML_ERROR_NOT_SUPPORTED,
		      "link state field from a server without NVML: %d", (int)fv.nvmlReturn);
	} else if (!strcmp(nvl, "peer") && n >= 2) {
		CHECK(lrc == NVML_SUCCESS && active == 1, "link 0 to GPU 1: %d, active %d", (int)lrc, active);
		CHECK(nvmlDeviceGetNvLinkCapability(h[0], 0, 0, &cap) == NVML_SUCCESS && cap == 1,
		      "link 0 P2P capability %u", cap);
		CHECK(nvmlDeviceGetNvLinkRemoteDeviceType(h[0], 0, &type) == NVML_SUCCESS && type == 0,
		      "link 0's far end type %d (0: a GPU)", type);
		CHECK(nvmlDeviceGetNvLinkRemotePciInfo_v2(h[0], 0, &rp) == NVML_SUCCESS &&
			      !strcasecmp(rp.busId, bus[1]),
		      "link 0's far end %s, GPU 1 is %s", rp.busId, bus[1]);
		active = -1;
		CHECK(nvmlDeviceGetNvLinkState(h[0], 1, &active) == NVML_SUCCESS && active == 0,
		      "link 1 (down): active %d", active);
		CHECK(nvmlDeviceGetNvLinkState(h[0], 18, &active) == NVML_ERROR_INVALID_ARGUMENT,
		      "link 18 does not exist");
		/* NCCL on sm_90+ reads link state as a field value */
		nvmlFieldValue_t fv[3] = { { .fieldId = NVML_FI_DEV_NVLINK_GET_STATE, .scopeId = 0 },
					   { .fieldId = NVML_FI_DEV_NVLINK_GET_STATE, .scopeId = 1 },
					   { .fieldId = 99999 } };
		CHECK(nvmlDeviceGetFieldValues(h[0], 3, fv) == NVML_SUCCESS, "field values");
		CHECK(fv[0].nvmlReturn == NVML_SUCCESS && fv[0].value.uiVal == 1, "link 0 state field: %d, %u",
		      (int)fv[0].nvmlReturn, fv[0].value.uiVal);
		CHECK(fv[1].nvmlReturn == NVML_SUCCESS && fv[1].value.uiVal == 0, "link 1 state field: %d, %u",
		      (int)fv[1].nvmlReturn, fv[1].value.uiVal);
		CHECK(fv[2].nvmlReturn == NVML_ERROR_NOT_SUPPORTED, "an unknown field: %d", (int)fv[2].nvmlReturn);
		/* the unversioned call (NCCL's): NVML's first layout, 52 bytes */
		nvmlReturn_t (*remote_v1)(nvmlDevice_t, unsigned, void *);
		*(void **)&remote_v1 = dlsym(lib, "nvmlDeviceGetNvLinkRemotePciInfo");
		unsigned char v1[sizeof(nvmlPciInfo_t)];
		memset(v1, 0xaa, sizeof(v1));
		CHECK(remote_v1 && remote_v1(h[0], 0, v1) == NVML_SUCCESS, "unversioned remote PCI info");
		CHECK(!memcmp(v1, rp.busIdLegacy, sizeof(rp.busIdLegacy)) && v1[36] == 0 && v1[51] == 0 &&
			      v1[52] == 0xaa && v1[sizeof(v1) - 1] == 0xaa,
		      "the unversioned remote PCI info is not NVML's first layout");
		say("NVLink: GPU 0 link 0 -> %s", rp.busId);
	} else if (!strcmp(nvl, "absent")) {
		CHECK(lrc == NVML_SUCCESS && active == 0,
		      "link 0 to a GPU outside the job: %d, active %d", (int)lrc, active);
		CHECK(nvmlDeviceGetNvLinkRemotePciInfo_v2(h[0], 0, &rp) == NVML_ERROR_INVALID_ARGUMENT,
		      "an inactive link has no far end");
	}
	nvmlDevice_t bad;
	CHECK(nvmlDeviceGetHandleByIndex_v2(n, &bad) == NVML_ERROR_INVALID_ARGUMENT, "index past the end");
	CHECK(nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000", &bad) == NVML_ERROR_NOT_FOUND,
	      "unknown UUID");
	CHECK(nvmlShutdown() == NVML_SUCCESS, "shutdown");
	printf("t_nvml: OK (%u GPUs)\n", n);
	return 0;
}
