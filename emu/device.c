/*
 * Emulated device: initialisation, the device table, attributes, versions
 * and error strings.
 */
#include "emu.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

pthread_mutex_t emu_glock = PTHREAD_MUTEX_INITIALIZER;
int emu_ndevices;
struct emu_device emu_devices[EMU_MAX_DEVICES];

void emu_lock(pthread_mutex_t *m)
{
	if (pthread_mutex_lock(m) != 0)
		abort();
}

void emu_unlock(pthread_mutex_t *m)
{
	if (pthread_mutex_unlock(m) != 0)
		abort();
}

void emu_wait(pthread_cond_t *c, pthread_mutex_t *m)
{
	if (pthread_cond_wait(c, m) != 0)
		abort();
}

void emu_broadcast(pthread_cond_t *c)
{
	if (pthread_cond_broadcast(c) != 0)
		abort();
}

void emu_rdlock(pthread_rwlock_t *l)
{
	if (pthread_rwlock_rdlock(l) != 0)
		abort();
}

void emu_wrlock(pthread_rwlock_t *l)
{
	if (pthread_rwlock_wrlock(l) != 0)
		abort();
}

void emu_rwunlock(pthread_rwlock_t *l)
{
	if (pthread_rwlock_unlock(l) != 0)
		abort();
}

uint64_t emu_now_ns(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
		abort();
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

int emu_initialized(void)
{
	int n;

	emu_lock(&emu_glock);
	n = emu_ndevices;
	emu_unlock(&emu_glock);
	return n > 0;
}

/* Bytes, or an integer with K/M/G/T (binary), e.g. "4G", "512MiB". */
static int parse_size(const char *s, size_t *out)
{
	char *end;
	unsigned long long v, mul = 1;

	errno = 0;
	if (!isdigit((unsigned char)*s))
		return -1;
	v = strtoull(s, &end, 10);
	if (errno != 0)
		return -1;
	switch (toupper((unsigned char)*end)) {
	case '\0': break;
	case 'K': mul = 1ULL << 10; end++; break;
	case 'M': mul = 1ULL << 20; end++; break;
	case 'G': mul = 1ULL << 30; end++; break;
	case 'T': mul = 1ULL << 40; end++; break;
	default: return -1;
	}
	if (mul > 1 && (*end == 'i' || *end == 'I'))
		end++;
	if (*end == 'b' || *end == 'B')
		end++;
	if (*end != '\0' || v == 0 || v > (unsigned long long)SIZE_MAX / mul)
		return -1;
	*out = (size_t)(v * mul);
	return 0;
}

EMU_API CUresult CUDAAPI cuInit(unsigned int Flags)
{
	const char *env;
	int n = EMU_DEFAULT_DEVICES;
	size_t mem = EMU_DEFAULT_MEM;
	char *end;
	long v;

	if (Flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	emu_lock(&emu_glock);
	if (emu_ndevices > 0) {
		emu_unlock(&emu_glock);
		return CUDA_SUCCESS;
	}
	/* A bad setting fails cuInit: a misconfigured test should not quietly
	 * run against a different device than it asked for. */
	env = getenv("RGPU_EMU_DEVICES");
	if (env && *env) {
		errno = 0;
		v = strtol(env, &end, 10);
		if (errno != 0 || *end != '\0' || v < 1 || v > EMU_MAX_DEVICES) {
			emu_unlock(&emu_glock);
			return CUDA_ERROR_INVALID_VALUE;
		}
		n = (int)v;
	}
	env = getenv("RGPU_EMU_MEM");
	if (env && *env && (parse_size(env, &mem) != 0 || mem < 2 * EMU_CTX_OVERHEAD)) {
		emu_unlock(&emu_glock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (emu_devclock_check() < 0) { /* RGPU_EMU_KERNEL_NS, RGPU_EMU_CLOCK */
		emu_unlock(&emu_glock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	for (int i = 0; i < n; i++) {
		emu_devices[i].total = mem;
		emu_devices[i].used = 0;
	}
	/* one pool per device across the processes of one server (pool.c) */
	if (emu_pool_init(n, mem) != 0) {
		emu_unlock(&emu_glock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	emu_ndevices = n;
	emu_unlock(&emu_glock);
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuDriverGetVersion(int *driverVersion)
{
	if (!driverVersion)
		return CUDA_ERROR_INVALID_VALUE;
	*driverVersion = CUDA_VERSION;
	return CUDA_SUCCESS;
}

/* Validates dev; NOT_INITIALIZED before cuInit. */
static CUresult check_dev(CUdevice dev)
{
	int n;

	emu_lock(&emu_glock);
	n = emu_ndevices;
	emu_unlock(&emu_glock);
	if (n == 0)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (dev < 0 || dev >= n)
		return CUDA_ERROR_INVALID_DEVICE;
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuDeviceGetCount(int *count)
{
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	emu_lock(&emu_glock);
	*count = emu_ndevices;
	emu_unlock(&emu_glock);
	return *count > 0 ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

EMU_API CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
	CUresult rc;

	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	rc = check_dev(ordinal);
	if (rc == CUDA_SUCCESS)
		*device = ordinal;
	return rc;
}

EMU_API CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
	CUresult rc = check_dev(dev);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!name || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	/* RGPU_EMU_TAG (a node name) tells apart the GPUs of several servers */
	const char *tag = getenv("RGPU_EMU_TAG");
	snprintf(name, (size_t)len, "rgpu emulated device %d%s%s", dev, tag && *tag ? " on " : "",
		 tag && *tag ? tag : "");
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
	/* Stable per index: "rgpu-emu", zeros, then the index. */
	static const unsigned char prefix[8] = { 'r', 'g', 'p', 'u', '-', 'e', 'm', 'u' };
	CUresult rc = check_dev(dev);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!uuid)
		return CUDA_ERROR_INVALID_VALUE;
	memset(uuid->bytes, 0, sizeof uuid->bytes);
	memcpy(uuid->bytes, prefix, sizeof prefix);
	uuid->bytes[15] = (char)dev;
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	CUresult rc = check_dev(dev);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	emu_lock(&emu_glock);
	*bytes = emu_devices[dev].total;
	emu_unlock(&emu_glock);
	return CUDA_SUCCESS;
}

/* Values of an H100 SXM-like device (compute capability 9.0). */
static int attribute(CUdevice_attribute a, CUdevice dev)
{
	switch ((int)a) {
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return 2147483647;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return 49152;
	case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 65536;
	case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
	case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return 2147483647;
	case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
	case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1980000;
	case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return 512;
	case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: return 1;
	case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return 132;
	case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT: return 0;
	case CU_DEVICE_ATTRIBUTE_INTEGRATED: return 0;
	case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 1;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: return CU_COMPUTEMODE_DEFAULT;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH: return 131072;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH: return 131072;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT: return 65536;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH: return 16384;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT: return 16384;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH: return 16384;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS: return 2048;
	case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT: return 512;
	case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
	case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: return 1;
	case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return 0x18 + dev;
	case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: return 0;
	case CU_DEVICE_ATTRIBUTE_TCC_DRIVER: return 0;
	case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return 2619000;
	case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 5120;
	case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return 52428800;
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return 2048;
	case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 3;
	case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS: return 2048;
	case CU_DEVICE_ATTRIBUTE_CAN_TEX2D_GATHER: return 1;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_HEIGHT: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE: return 8192;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE: return 8192;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE: return 32768;
	case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: return 0;
	case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT: return 32;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS: return 2046;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_WIDTH: return 131072;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_HEIGHT: return 65536;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_WIDTH: return 16384;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_HEIGHT: return 16384;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_DEPTH: return 16384;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_LAYERS: return 2048;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_HEIGHT: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_LAYERS: return 2048;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS: return 2046;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH: return 268435456;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH: return 131072;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_HEIGHT: return 65000;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_PITCH: return 2097120;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT: return 32768;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
	case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH: return 32768;
	case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return 233472;
	case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return 65536;
	case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 0;
	case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD: return 0;
	case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID: return dev;
	case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED: return 0;
	case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO: return 2;
	/* as an H100 with HMM reports them: the device's host memory is
	 * host memory here; rgpu's client reports them absent regardless */
	case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS: return 1;
	case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: return 1;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED: return 1;
	case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM: return 1;
	case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: return 0;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return 232448;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return 32;
	case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE: return 0;
	case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: return 1024;
	case CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT: return 4;
	case CU_DEVICE_ATTRIBUTE_NUMA_ID: return -1;
	case CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID: return -1;
	case CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID: return 0x233010de;
	case CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID: return 0x16c110de;
	/* Everything else is a feature the emulator does not provide. */
	default: return 0;
	}
}

EMU_API CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
	CUresult rc = check_dev(dev);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pi || (int)attrib < 1 || (int)attrib >= CU_DEVICE_ATTRIBUTE_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	*pi = attribute(attrib, dev);
	return CUDA_SUCCESS;
}

/* ---- error strings */
struct errdesc {
	CUresult code;
	const char *name, *text;
};

#define E(c, t) { c, #c, t }
static const struct errdesc errors[] = {
	E(CUDA_SUCCESS, "no error"),
	E(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
	E(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
	E(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
	E(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
	E(CUDA_ERROR_PROFILER_DISABLED, "profiler disabled while using a system profiler"),
	E(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library"),
	E(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, "operation requires a newer driver"),
	E(CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA-capable device(s) is/are busy or unavailable"),
	E(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
	E(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
	E(CUDA_ERROR_DEVICE_NOT_LICENSED, "device doesn't have valid Grid license"),
	E(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"),
	E(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
	E(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current"),
	E(CUDA_ERROR_MAP_FAILED, "mapping of buffer object failed"),
	E(CUDA_ERROR_UNMAP_FAILED, "unmapping of buffer object failed"),
	E(CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device"),
	E(CUDA_ERROR_ECC_UNCORRECTABLE, "uncorrectable ECC error encountered"),
	E(CUDA_ERROR_UNSUPPORTED_LIMIT, "limit is not supported on this architecture"),
	E(CUDA_ERROR_CONTEXT_ALREADY_IN_USE, "exclusive-thread device already in use by a different thread"),
	E(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "peer access is not supported between these two devices"),
	E(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed"),
	E(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, "PTX JIT compiler library not found"),
	E(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "the provided PTX was compiled with an unsupported toolchain."),
	E(CUDA_ERROR_INVALID_SOURCE, "device kernel image is invalid"),
	E(CUDA_ERROR_FILE_NOT_FOUND, "file not found"),
	E(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, "shared object symbol not found"),
	E(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "shared object initialization failed"),
	E(CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS"),
	E(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
	E(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state"),
	E(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
	E(CUDA_ERROR_NOT_READY, "device not ready"),
	E(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
	E(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch"),
	E(CUDA_ERROR_LAUNCH_TIMEOUT, "the launch timed out and was terminated"),
	E(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled"),
	E(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled"),
	E(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "cannot set while device is active in this process"),
	E(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed"),
	E(CUDA_ERROR_ASSERT, "device-side assert triggered"),
	E(CUDA_ERROR_HARDWARE_STACK_ERROR, "an illegal memory access was encountered"),
	E(CUDA_ERROR_ILLEGAL_INSTRUCTION, "an illegal instruction was encountered"),
	E(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address"),
	E(CUDA_ERROR_INVALID_ADDRESS_SPACE, "operation not supported on global/shared address space"),
	E(CUDA_ERROR_INVALID_PC, "invalid program counter"),
	E(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"),
	E(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "too many blocks in cooperative launch"),
	E(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
	E(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
	E(CUDA_ERROR_SYSTEM_NOT_READY, "system not yet initialized"),
	E(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "system has unsupported display driver / cuda driver combination"),
	E(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing"),
	E(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during capture"),
	E(CUDA_ERROR_TIMEOUT, "timeout reached"),
	E(CUDA_ERROR_UNKNOWN, "unknown error"),
};
#undef E

static const struct errdesc *find_error(CUresult code)
{
	for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
		if (errors[i].code == code)
			return &errors[i];
	return NULL;
}

EMU_API CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
	const struct errdesc *e = find_error(error);

	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	*pStr = e ? e->name : NULL;
	return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EMU_API CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
	const struct errdesc *e = find_error(error);

	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	*pStr = e ? e->text : NULL;
	return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
