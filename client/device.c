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

RC_EXPORT CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice dev)
{
	struct rc_dev *d;
	CUresult rc = rc_dev_get(dev, &d);
	if (rc)
		return rc;
	if (!v || (int)a <= 0 || (int)a >= CU_DEVICE_ATTRIBUTE_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	*v = d->attrs[a];
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
