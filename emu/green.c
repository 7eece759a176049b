/* Green contexts: SM resources, their split, descriptors, and green
 * contexts (context.c makes their contexts).  The model is an H100/H200's:
 * 132 SMs, split in groups of at least 8 SMs, multiples of 8 (2 and 2 with
 * CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING).  A resource's internal
 * bytes say which device it is of and which split made it: the results of
 * one split may make one descriptor together, and cannot be split again. */
#include "emu.h"

#include <stdlib.h>
#include <string.h>

#define RES_MAGIC 0x45526573u
#define DESC_MAGIC 0x45446573u
#define GREEN_MAGIC 0x45477263u

struct res_internal {
	uint32_t magic;
	int32_t dev;
	uint64_t split;     /* the split that made it (0: none) */
};

struct emu_desc {
	uint32_t magic;
	int dev;
	unsigned sms;
	struct emu_desc *next;
};

struct emu_green {
	uint32_t magic;
	struct emu_ctx *ctx;
	unsigned long long id;
	unsigned sms;
};

static pthread_mutex_t green_lock = PTHREAD_MUTEX_INITIALIZER;
static struct emu_desc *descs; /* every one: CUDA destroys none */
static uint64_t next_split = 1;
static unsigned long long next_green = 1;

static void res_make(CUdevResource *r, int dev, unsigned sms, unsigned min, uint64_t split)
{
	memset(r, 0, sizeof(*r));
	r->type = CU_DEV_RESOURCE_TYPE_SM;
	r->sm.smCount = sms;
	r->sm.minSmPartitionSize = min;
	r->sm.smCoscheduledAlignment = min;
	struct res_internal in = { RES_MAGIC, dev, split };
	memcpy(r->_internal_padding, &in, sizeof(in));
}

static int res_read(const CUdevResource *r, struct res_internal *in)
{
	memcpy(in, r->_internal_padding, sizeof(*in));
	return r->type == CU_DEV_RESOURCE_TYPE_SM && in->magic == RES_MAGIC ? 0 : -1;
}

static struct emu_green *green_get(CUgreenCtx h)
{
	struct emu_green *g = (struct emu_green *)h;
	return g && g->magic == GREEN_MAGIC ? g : NULL;
}

EMU_API CUresult CUDAAPI cuDeviceGetDevResource(CUdevice dev, CUdevResource *res, CUdevResourceType type)
{
	int n = 0;
	CUresult rc = cuDeviceGetAttribute(&n, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!res)
		return CUDA_ERROR_INVALID_VALUE;
	if (type != CU_DEV_RESOURCE_TYPE_SM)
		return CUDA_ERROR_INVALID_RESOURCE_TYPE;
	res_make(res, dev, (unsigned)n, 8, 0);
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuCtxGetDevResource(CUcontext h, CUdevResource *res, CUdevResourceType type)
{
	int dev;
	unsigned sms;
	CUresult rc = emu_ctx_sms(h, &dev, &sms);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!res)
		return CUDA_ERROR_INVALID_VALUE;
	if (type != CU_DEV_RESOURCE_TYPE_SM)
		return CUDA_ERROR_INVALID_RESOURCE_TYPE;
	res_make(res, dev, sms, 8, 0);
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuGreenCtxGetDevResource(CUgreenCtx h, CUdevResource *res, CUdevResourceType type)
{
	struct emu_green *g = green_get(h);
	if (!g)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!res)
		return CUDA_ERROR_INVALID_VALUE;
	if (type != CU_DEV_RESOURCE_TYPE_SM)
		return CUDA_ERROR_INVALID_RESOURCE_TYPE;
	res_make(res, g->ctx->dev, g->sms, 8, 0);
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuDevSmResourceSplitByCount(CUdevResource *result, unsigned int *nbGroups,
						     const CUdevResource *input, CUdevResource *remaining,
						     unsigned int flags, unsigned int minCount)
{
	struct res_internal in;
	if (!nbGroups || !input || (result && !*nbGroups) ||
	    (flags & ~(unsigned)(CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING |
				 CU_DEV_SM_RESOURCE_SPLIT_MAX_POTENTIAL_CLUSTER_SIZE)))
		return CUDA_ERROR_INVALID_VALUE;
	if (res_read(input, &in) < 0)
		return input->type != CU_DEV_RESOURCE_TYPE_SM ? CUDA_ERROR_INVALID_RESOURCE_TYPE
							      : CUDA_ERROR_INVALID_VALUE;
	if (in.split)
		return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION; /* (a split's: not again) */
	unsigned total = input->sm.smCount;
	if (minCount > total)
		return CUDA_ERROR_INVALID_VALUE;
	unsigned unit = flags & CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING ? 2 : 8;
	unsigned cnt = minCount > unit ? minCount : unit;
	cnt = (cnt + unit - 1) / unit * unit;
	unsigned possible = cnt <= total ? total / cnt : 0;
	if (!result) {
		*nbGroups = possible;
		return CUDA_SUCCESS;
	}
	unsigned n = *nbGroups < possible ? *nbGroups : possible;
	if (!n)
		return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
	pthread_mutex_lock(&green_lock);
	uint64_t split = next_split++;
	pthread_mutex_unlock(&green_lock);
	for (unsigned i = 0; i < n; i++)
		res_make(&result[i], in.dev, cnt, unit, split);
	if (remaining)
		res_make(remaining, in.dev, total - n * cnt, unit, split);
	*nbGroups = n;
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuDevResourceGenerateDesc(CUdevResourceDesc *out, CUdevResource *res, unsigned int n)
{
	if (!out || !res || !n)
		return CUDA_ERROR_INVALID_VALUE;
	struct res_internal first, in;
	unsigned sms = 0;
	for (unsigned i = 0; i < n; i++) {
		if (res_read(&res[i], &in) < 0)
			return res[i].type != CU_DEV_RESOURCE_TYPE_SM ? CUDA_ERROR_INVALID_RESOURCE_TYPE
								      : CUDA_ERROR_INVALID_VALUE;
		if (i == 0)
			first = in;
		/* several: of one device, from one split */
		else if (in.dev != first.dev || !in.split || in.split != first.split)
			return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
		sms += res[i].sm.smCount;
	}
	if (!sms)
		return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
	struct emu_desc *d = calloc(1, sizeof(*d));
	if (!d)
		return CUDA_ERROR_OUT_OF_MEMORY;
	d->magic = DESC_MAGIC;
	d->dev = first.dev;
	d->sms = sms;
	pthread_mutex_lock(&green_lock);
	d->next = descs;
	descs = d;
	pthread_mutex_unlock(&green_lock);
	*out = (CUdevResourceDesc)d;
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuGreenCtxCreate(CUgreenCtx *out, CUdevResourceDesc hd, CUdevice dev, unsigned int flags)
{
	struct emu_desc *d = (struct emu_desc *)hd;
	if (!out || !d || d->magic != DESC_MAGIC || flags != CU_GREEN_CTX_DEFAULT_STREAM)
		return CUDA_ERROR_INVALID_VALUE;
	if (d->dev != dev)
		return CUDA_ERROR_INVALID_DEVICE;
	struct emu_green *g = calloc(1, sizeof(*g));
	if (!g)
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult rc = emu_ctx_make_green(dev, d->sms, g, &g->ctx);
	if (rc != CUDA_SUCCESS) {
		free(g);
		return rc;
	}
	g->magic = GREEN_MAGIC;
	g->sms = d->sms;
	pthread_mutex_lock(&green_lock);
	g->id = next_green++;
	pthread_mutex_unlock(&green_lock);
	*out = (CUgreenCtx)g;
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuGreenCtxDestroy(CUgreenCtx h)
{
	struct emu_green *g = green_get(h);
	if (!g)
		return CUDA_ERROR_INVALID_CONTEXT;
	g->magic = 0;
	CUresult rc = emu_ctx_end_green(g->ctx);
	free(g);
	return rc;
}

EMU_API CUresult CUDAAPI cuCtxFromGreenCtx(CUcontext *out, CUgreenCtx h)
{
	struct emu_green *g = green_get(h);
	if (!g)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	*out = (CUcontext)g->ctx;
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuGreenCtxGetId(CUgreenCtx h, unsigned long long *id)
{
	struct emu_green *g = green_get(h);
	if (!g)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!id)
		return CUDA_ERROR_INVALID_VALUE;
	*id = g->id;
	return CUDA_SUCCESS;
}
