/*
 * CUDA arrays, 3D copies and texture and surface objects.  An array is
 * host memory laid out densely (the driver's tiling is its own business:
 * only copies see an array's bytes); a 3D copy is rows of memcpy after
 * the stream's earlier work; texture and surface objects are numbers
 * that name a checked resource.  Emulated kernels read neither.
 */
#include "emu.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define ARRAY_MAGIC 0x61727279u /* "arry" */

struct emu_array {
	uint32_t magic;
	struct emu_array *next; /* every live array (arrays_lock) */
	struct emu_ctx *ctx;    /* made in; destroyed with it */
	CUDA_ARRAY3D_DESCRIPTOR d;
	size_t elem, rowb, rows, slices; /* bytes per element and row */
	unsigned char *bytes;
};

static size_t format_bytes(CUarray_format f)
{
	switch (f) {
	case CU_AD_FORMAT_UNSIGNED_INT8:
	case CU_AD_FORMAT_SIGNED_INT8:
		return 1;
	case CU_AD_FORMAT_UNSIGNED_INT16:
	case CU_AD_FORMAT_SIGNED_INT16:
	case CU_AD_FORMAT_HALF:
		return 2;
	case CU_AD_FORMAT_UNSIGNED_INT32:
	case CU_AD_FORMAT_SIGNED_INT32:
	case CU_AD_FORMAT_FLOAT:
		return 4;
	default:
		return 0;
	}
}

static struct emu_array *arrays;
static pthread_mutex_t arrays_lock = PTHREAD_MUTEX_INITIALIZER;

static void array_free(struct emu_array *a)
{
	a->magic = 0;
	free(a->bytes);
	free(a);
}

void emu_arrays_destroy_all(struct emu_ctx *ctx)
{
	pthread_mutex_lock(&arrays_lock);
	for (struct emu_array **pp = &arrays; *pp;) {
		struct emu_array *a = *pp;
		if (a->ctx == ctx) {
			*pp = a->next;
			array_free(a);
		} else {
			pp = &a->next;
		}
	}
	pthread_mutex_unlock(&arrays_lock);
}

static struct emu_array *array_of(CUarray a)
{
	struct emu_array *e = (struct emu_array *)a;
	return e && e->magic == ARRAY_MAGIC ? e : NULL;
}

EMU_API CUresult CUDAAPI cuArray3DCreate_v2(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
	struct emu_ctx *ctx;
	CUresult rc = emu_ctx_enter(&ctx);
	if (rc)
		return rc;
	emu_lock(&emu_glock);
	size_t total = emu_devices[ctx->dev].total;
	emu_unlock(&emu_glock);
	emu_ctx_leave(ctx);
	size_t eb = d ? format_bytes(d->Format) : 0, n;
	if (!out || !d || !eb || !d->Width ||
	    (d->NumChannels != 1 && d->NumChannels != 2 && d->NumChannels != 4) ||
	    (d->Depth && !d->Height) || d->Width > 65536 || d->Height > 65536 || d->Depth > 4096)
		return CUDA_ERROR_INVALID_VALUE;
	struct emu_array *a = calloc(1, sizeof(*a));
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	a->d = *d;
	a->elem = eb * d->NumChannels;
	a->rowb = a->elem * d->Width;
	a->rows = d->Height ? d->Height : 1;
	a->slices = d->Depth ? d->Depth : 1;
	/* no larger than the device (nor, then, a host allocation the size
	 * of an unchecked product) */
	if (__builtin_mul_overflow(a->rowb, a->rows, &n) || __builtin_mul_overflow(n, a->slices, &n) ||
	    n > total || !(a->bytes = calloc(1, n))) {
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	a->magic = ARRAY_MAGIC;
	a->ctx = ctx;
	pthread_mutex_lock(&arrays_lock);
	a->next = arrays;
	arrays = a;
	pthread_mutex_unlock(&arrays_lock);
	*out = (CUarray)a;
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuArrayCreate_v2(CUarray *out, const CUDA_ARRAY_DESCRIPTOR *d)
{
	if (!d)
		return CUDA_ERROR_INVALID_VALUE;
	CUDA_ARRAY3D_DESCRIPTOR d3 = { .Width = d->Width, .Height = d->Height,
				       .Format = d->Format, .NumChannels = d->NumChannels };
	return cuArray3DCreate_v2(out, &d3);
}

EMU_API CUresult CUDAAPI cuArrayDestroy(CUarray h)
{
	pthread_mutex_lock(&arrays_lock);
	struct emu_array **pp = &arrays;
	while (*pp && *pp != (struct emu_array *)h)
		pp = &(*pp)->next;
	struct emu_array *a = *pp;
	if (a)
		*pp = a->next;
	pthread_mutex_unlock(&arrays_lock);
	if (!a)
		return CUDA_ERROR_INVALID_HANDLE;
	array_free(a);
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *d, CUarray h)
{
	struct emu_array *a = array_of(h);
	if (!a)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!d)
		return CUDA_ERROR_INVALID_VALUE;
	*d = a->d;
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *d, CUarray h)
{
	struct emu_array *a = array_of(h);
	if (!a)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!d || a->d.Depth)
		return CUDA_ERROR_INVALID_VALUE;
	*d = (CUDA_ARRAY_DESCRIPTOR){ .Width = a->d.Width, .Height = a->d.Height,
				      .Format = a->d.Format, .NumChannels = a->d.NumChannels };
	return CUDA_SUCCESS;
}

/* ---- 3D copies ---- */

/* One side of a copy as rows: the first byte of row (y, z) of the box. */
struct rows {
	unsigned char *base;
	size_t pitch, height;
};

static CUresult side_rows(struct emu_ctx *ctx, CUmemorytype t, const void *host, CUdeviceptr dev,
			  CUarray arr, size_t x, size_t y, size_t z, size_t pitch, size_t height,
			  size_t w, size_t h, size_t d, struct rows *r)
{
	if (t == CU_MEMORYTYPE_UNIFIED)
		t = emu_mem_map(ctx, dev, 1) ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
	if (t == CU_MEMORYTYPE_ARRAY) {
		struct emu_array *a = array_of(arr);
		if (!a)
			return CUDA_ERROR_INVALID_VALUE;
		if (x > a->rowb || w > a->rowb - x || y > a->rows || h > a->rows - y ||
		    z > a->slices || d > a->slices - z || x % a->elem)
			return CUDA_ERROR_INVALID_VALUE;
		r->pitch = a->rowb;
		r->height = a->rows;
		r->base = a->bytes + (z * a->rows + y) * a->rowb + x;
		return CUDA_SUCCESS;
	}
	if (!pitch)
		pitch = w;
	if (!height)
		height = h;
	size_t first, span, k;
	if (x > pitch || w > pitch - x || (d > 1 && (y > height || h > height - y)) ||
	    __builtin_mul_overflow(z, height, &k) || __builtin_add_overflow(k, y, &k) ||
	    __builtin_mul_overflow(k, pitch, &k) || __builtin_add_overflow(k, x, &first) ||
	    __builtin_mul_overflow(d - 1, height, &k) || __builtin_add_overflow(k, h - 1, &k) ||
	    __builtin_mul_overflow(k, pitch, &k) || __builtin_add_overflow(k, w, &span))
		return CUDA_ERROR_INVALID_VALUE;
	if (t == CU_MEMORYTYPE_HOST) {
		if (!host)
			return CUDA_ERROR_INVALID_VALUE;
		r->base = (unsigned char *)(uintptr_t)host + first;
	} else if (t == CU_MEMORYTYPE_DEVICE) {
		if (!(r->base = emu_mem_map(ctx, dev + first, span)))
			return CUDA_ERROR_INVALID_VALUE;
	} else {
		return CUDA_ERROR_INVALID_VALUE;
	}
	r->pitch = pitch;
	r->height = height;
	return CUDA_SUCCESS;
}

static CUresult copy3d(const CUDA_MEMCPY3D *p, CUstream st, int async)
{
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	/* after the stream's earlier work (all of it, for a synchronous copy) */
	CUresult rc = async ? cuStreamSynchronize(st) : cuCtxSynchronize();
	if (rc)
		return rc;
	struct emu_ctx *ctx;
	if ((rc = emu_ctx_enter(&ctx)))
		return rc;
	size_t w = p->WidthInBytes, h = p->Height ? p->Height : 1, d = p->Depth ? p->Depth : 1;
	if (!w) {
		emu_ctx_leave(ctx);
		return CUDA_SUCCESS;
	}
	struct rows s, t;
	emu_mem_rdlock(ctx);
	rc = side_rows(ctx, p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes,
		       p->srcY, p->srcZ, p->srcPitch, p->srcHeight, w, h, d, &s);
	if (!rc)
		rc = side_rows(ctx, p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray,
			       p->dstXInBytes, p->dstY, p->dstZ, p->dstPitch, p->dstHeight, w, h, d,
			       &t);
	for (size_t z = 0; !rc && z < d; z++)
		for (size_t y = 0; y < h; y++)
			memmove(t.base + (z * t.height + y) * t.pitch,
				s.base + (z * s.height + y) * s.pitch, w);
	emu_mem_rdunlock(ctx);
	emu_ctx_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuMemcpy3D_v2(const CUDA_MEMCPY3D *p) { return copy3d(p, NULL, 0); }

EMU_API CUresult CUDAAPI cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *p, CUstream st)
{
	return copy3d(p, st, 1);
}

/* ---- texture and surface objects ---- */

#define MAX_OBJS 4096

static struct {
	pthread_mutex_t lock;
	CUDA_RESOURCE_DESC res[MAX_OBJS];
	unsigned char used[MAX_OBJS]; /* 1 texture, 2 surface */
} objs = { .lock = PTHREAD_MUTEX_INITIALIZER };

static CUresult resource_ok(const CUDA_RESOURCE_DESC *r)
{
	struct emu_ctx *ctx;
	CUresult rc = emu_ctx_enter(&ctx);
	if (rc)
		return rc;
	switch (r->resType) {
	case CU_RESOURCE_TYPE_ARRAY:
		rc = array_of(r->res.array.hArray) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
		break;
	case CU_RESOURCE_TYPE_LINEAR:
	case CU_RESOURCE_TYPE_PITCH2D: {
		/* the start only: the driver takes a size past the allocation */
		int lin = r->resType == CU_RESOURCE_TYPE_LINEAR;
		CUdeviceptr p = lin ? r->res.linear.devPtr : r->res.pitch2D.devPtr;
		size_t n = lin ? r->res.linear.sizeInBytes : r->res.pitch2D.height;
		emu_mem_rdlock(ctx);
		rc = n && emu_mem_map(ctx, p, 1) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
		emu_mem_rdunlock(ctx);
		break;
	}
	default:
		rc = CUDA_ERROR_INVALID_VALUE;
	}
	emu_ctx_leave(ctx);
	return rc;
}

static CUresult obj_create(unsigned long long *out, const CUDA_RESOURCE_DESC *r, unsigned char kind)
{
	if (!out || !r)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = resource_ok(r);
	if (rc)
		return rc;
	pthread_mutex_lock(&objs.lock);
	for (unsigned i = 1; i < MAX_OBJS; i++)
		if (!objs.used[i]) {
			objs.used[i] = kind;
			objs.res[i] = *r;
			*out = i;
			pthread_mutex_unlock(&objs.lock);
			return CUDA_SUCCESS;
		}
	pthread_mutex_unlock(&objs.lock);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult obj_destroy(unsigned long long v, unsigned char kind)
{
	CUresult rc = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&objs.lock);
	if (v < MAX_OBJS && objs.used[v] == kind) {
		objs.used[v] = 0;
		rc = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&objs.lock);
	return rc;
}

EMU_API CUresult CUDAAPI cuTexObjectCreate(CUtexObject *out, const CUDA_RESOURCE_DESC *r,
					   const CUDA_TEXTURE_DESC *t, const CUDA_RESOURCE_VIEW_DESC *v)
{
	(void)v;
	if (!t)
		return CUDA_ERROR_INVALID_VALUE;
	return obj_create(out, r, 1);
}

EMU_API CUresult CUDAAPI cuTexObjectDestroy(CUtexObject o) { return obj_destroy(o, 1); }

EMU_API CUresult CUDAAPI cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC *r, CUtexObject o)
{
	CUresult rc = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&objs.lock);
	if (r && o < MAX_OBJS && objs.used[o] == 1) {
		*r = objs.res[o];
		rc = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&objs.lock);
	return rc;
}

EMU_API CUresult CUDAAPI cuSurfObjectCreate(CUsurfObject *out, const CUDA_RESOURCE_DESC *r)
{
	if (r && r->resType != CU_RESOURCE_TYPE_ARRAY)
		return CUDA_ERROR_INVALID_VALUE;
	return obj_create(out, r, 2);
}

EMU_API CUresult CUDAAPI cuSurfObjectDestroy(CUsurfObject o) { return obj_destroy(o, 2); }
