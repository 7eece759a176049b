/* Device queries, answered from the cache filled by cuInit. */
#include "client.h"

#include <stdio.h>
#include <string.h>

RC_EXPORT CUresult cuDeviceGetCount(int *count)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	*count = rc_ndev;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
	struct rc_dev *d;
	if (!dev)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = rc_dev_get(ordinal, &d);
	if (rc)
		return rc;
	*dev = ordinal;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	struct rc_dev *d;
	CUresult rc = rc_dev_get(dev, &d);
	if (rc)
		return rc;
	if (!name || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	snprintf(name, (size_t)len, "%s", d->name);
	return CUDA_SUCCESS;
}

static CUresult get_uuid(CUuuid *uuid, CUdevice dev)
{
	struct rc_dev *d;
	CUresult rc = rc_dev_get(dev, &d);
	if (rc)
		return rc;
	if (!uuid)
		return CUDA_ERROR_INVALID_VALUE;
	*uuid = d->uuid;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) { return get_uuid(uuid, dev); }
RC_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) { return get_uuid(uuid, dev); }

RC_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	struct rc_dev *d;
	CUresult rc = rc_dev_get(dev, &d);
	if (rc)
		return rc;
	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	*bytes = d->total_mem;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
	size_t b;
	CUresult rc = cuDeviceTotalMem_v2(&b, dev);
	if (!rc)
		*bytes = b > 0xffffffffu ? 0xffffffffu : (unsigned)b;
	return rc;
}

/*
 * What the device can do but a program using it through rgpu cannot: the
 * program asks so it can take its fallback path, so these read as absent
 * whatever the GPU says.  Managed and mapped memory are coherent at
 * launches and synchronisations only (client/coherence.c): the host and
 * the device do not see each other's writes while a kernel runs (a host
 * touching managed memory then waits for the kernel), so no concurrent
 * managed access, no host-native atomics, no access to pageable host
 * memory from the device.  Nothing on the client's node can
 * DMA into the GPU (GPUDirect RDMA, dma-buf), and multicast objects and
 * host-located pools are not served.  The stream memory operations are
 * served (on device memory they are the GPU's own), but read as absent:
 * programs that check use them to wait on words the host writes, which
 * reach the device only at launches and synchronisations here.
 */
static const struct {
	CUdevice_attribute a;
	int v;
} absent[] = {
	{ CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED, 0 },
	{ CU_DEVICE_ATTRIBUTE_ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED, 0 },
	{ CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, 0 },
	{ CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES, 0 },
	{ CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 0 },
	{ CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST, 0 },
	{ CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, 0 },
	{ CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1, 0 },
	{ CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1, 0 },
	{ CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 0 },
	{ CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, 0 },
	{ CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH, 0 },
	{ CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES, 0 },
	{ CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, 0 },
	{ CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, 0 },
	{ CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS, 0 },
	{ CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING, 0 },
	{ CU_DEVICE_ATTRIBUTE_TIMELINE_SEMAPHORE_INTEROP_SUPPORTED, 0 },
	{ CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, 0 },
	{ CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, 0 },
	{ CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, 0 },
	{ CU_DEVICE_ATTRIBUTE_D3D12_CIG_SUPPORTED, 0 },
	{ CU_DEVICE_ATTRIBUTE_VULKAN_CIG_SUPPORTED, 0 },
	{ CU_DEVICE_ATTRIBUTE_NUMA_CONFIG, 0 }, /* CU_DEVICE_NUMA_CONFIG_NONE */
	{ CU_DEVICE_ATTRIBUTE_NUMA_ID, -1 },
	{ CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, -1 },
	{ CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0 },
	{ CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED, 0 },
	{ CU_DEVICE_ATTRIBUTE_HOST_NUMA_MULTINODE_IPC_SUPPORTED, 0 },
	{ CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED, 0 },
	{ CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0 },
	{ CU_DEVICE_ATTRIBUTE_HOST_ALLOC_DMA_BUF_SUPPORTED, 0 },
};

/* The attribute as a program sees it through rgpu. */
int rc_dev_attr(const struct rc_dev *d, CUdevice_attribute a)
{
	for (size_t i = 0; i < sizeof(absent) / sizeof(absent[0]); i++)
		if (absent[i].a == a)
			return absent[i].v;
	return d->attrs[a];
}

RC_EXPORT CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice dev)
{
	struct rc_dev *d;
	CUresult rc = rc_dev_get(dev, &d);
	if (rc)
		return rc;
	if (!v || (int)a <= 0 || (int)a >= CU_DEVICE_ATTRIBUTE_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	*v = rc_dev_attr(d, a);
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
	struct rc_dev *d;
	CUresult rc = rc_dev_get(dev, &d);
	if (rc)
		return rc;
	if (!major || !minor)
		return CUDA_ERROR_INVALID_VALUE;
	*major = d->attrs[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR];
	*minor = d->attrs[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR];
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuDeviceGetProperties(CUdevprop *p, CUdevice dev)
{
	struct rc_dev *d;
	CUresult rc = rc_dev_get(dev, &d);
	if (rc)
		return rc;
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	const int *a = d->attrs;
	p->maxThreadsPerBlock = a[CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK];
	p->maxThreadsDim[0] = a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X];
	p->maxThreadsDim[1] = a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y];
	p->maxThreadsDim[2] = a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z];
	p->maxGridSize[0] = a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X];
	p->maxGridSize[1] = a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y];
	p->maxGridSize[2] = a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z];
	p->sharedMemPerBlock = a[CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK];
	p->totalConstantMemory = a[CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY];
	p->SIMDWidth = a[CU_DEVICE_ATTRIBUTE_WARP_SIZE];
	p->memPitch = a[CU_DEVICE_ATTRIBUTE_MAX_PITCH];
	p->regsPerBlock = a[CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK];
	p->clockRate = a[CU_DEVICE_ATTRIBUTE_CLOCK_RATE];
	p->textureAlign = a[CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT];
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice dev)
{
	struct rc_dev *d;
	CUresult rc = rc_dev_get(dev, &d);
	if (rc)
		return rc;
	if (!id || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	snprintf(id, (size_t)len, "%04x:%02x:%02x.0", d->attrs[CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID],
		 d->attrs[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID], d->attrs[CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID]);
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuDeviceGetLuid(char *luid, unsigned int *mask, CUdevice dev)
{
	(void)luid; (void)mask; (void)dev;
	return CUDA_ERROR_NOT_SUPPORTED; /* Windows only */
}

/* "domain:bus:device.function", "domain:bus:device" or "bus:device.function",
 * hexadecimal, as cuDeviceGetPCIBusId writes them and the driver reads them */
RC_EXPORT CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *id)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!dev || !id)
		return CUDA_ERROR_INVALID_VALUE;
	unsigned dom = 0, bus, slot, fn = 0;
	int end = 0;
	if (!(sscanf(id, "%x:%x:%x.%x%n", &dom, &bus, &slot, &fn, &end) == 4 && !id[end]) &&
	    !(end = 0, sscanf(id, "%x:%x:%x%n", &dom, &bus, &slot, &end) == 3 && !id[end]) &&
	    !(end = 0, dom = 0, sscanf(id, "%x:%x.%x%n", &bus, &slot, &fn, &end) == 3 && !id[end]))
		return CUDA_ERROR_INVALID_VALUE;
	for (int i = 0; i < rc_ndev; i++) {
		const int *a = rc_devs[i].attrs;
		if ((unsigned)a[CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID] == dom &&
		    (unsigned)a[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID] == bus &&
		    (unsigned)a[CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID] == slot && fn == 0) {
			*dev = i;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_INVALID_DEVICE;
}

/* The host and a remote GPU share no memory that both update atomically
 * (CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED reads 0): no operation
 * has a native capability. */
RC_EXPORT CUresult cuDeviceGetHostAtomicCapabilities(unsigned int *caps, const CUatomicOperation *ops,
						     unsigned int count, CUdevice dev)
{
	struct rc_dev *d;
	CUresult rc = rc_dev_get(dev, &d);
	if (rc)
		return rc;
	if (!caps || !ops || !count)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < count; i++)
		if ((unsigned)ops[i] >= CU_ATOMIC_OPERATION_MAX)
			return CUDA_ERROR_INVALID_VALUE;
	memset(caps, 0, count * sizeof(*caps));
	return CUDA_SUCCESS;
}
