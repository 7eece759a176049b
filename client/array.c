/* CUDA arrays, 3D copies (and 2D copies with an array side) and texture
 * and surface objects, served by the server's driver (daemon/ops_array.c).
 * An array is a client object naming the server's handle, with its
 * descriptor (asked for locally).  Texture and surface objects are the
 * server driver's values, which kernels take as they are; the client
 * remembers their context and descriptors. */
#include "client.h"
#include "log.h"

#include <stdlib.h>
#include <string.h>

#define RC_ARRAY 0x52636172u

struct rc_array {
	uint32_t magic;
	struct rc_ctx *ctx;
	uint64_t h;
	CUDA_ARRAY3D_DESCRIPTOR d;
};

static CUresult array_get(CUarray a, struct rc_array **out)
{
	CUresult rc = rc_obj(a, RC_ARRAY, out);
	return rc == CUDA_ERROR_INVALID_HANDLE ? CUDA_ERROR_INVALID_VALUE : rc;
}

RC_EXPORT CUresult cuArray3DCreate_v2(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
	struct rc_ctx *c;
	CUresult rc = rc_need_ctx(&c);
	if (rc)
		return rc;
	if (!out || !d)
		return CUDA_ERROR_INVALID_VALUE;
	struct rc_array *a = calloc(1, sizeof(*a));
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u64(w, d->Width);
	put_u64(w, d->Height);
	put_u64(w, d->Depth);
	put_u32(w, (uint32_t)d->Format);
	put_u32(w, d->NumChannels);
	put_u32(w, d->Flags);
	struct rd r;
	rc = rc_call(c->dev->conn, RGPU_OP_ARRAY_CREATE, w, &r);
	uint64_t h = get_u64(&r);
	if (!rc && !rd_done(&r))
		rc = CUDA_ERROR_UNKNOWN;
	if (rc) {
		free(a);
		return rc;
	}
	*a = (struct rc_array){ RC_ARRAY, c, h, *d };
	*out = (CUarray)a;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuArrayCreate_v2(CUarray *out, const CUDA_ARRAY_DESCRIPTOR *d)
{
	if (!d)
		return CUDA_ERROR_INVALID_VALUE;
	CUDA_ARRAY3D_DESCRIPTOR d3 = { .Width = d->Width, .Height = d->Height,
				       .Format = d->Format, .NumChannels = d->NumChannels };
	return cuArray3DCreate_v2(out, &d3);
}

RC_EXPORT CUresult cuArrayDestroy(CUarray h)
{
	struct rc_array *a;
	CUresult rc = rc_obj(h, RC_ARRAY, &a);
	if (rc)
		return rc;
	struct wbuf *w = rc_req();
	put_u64(w, a->ctx->h);
	put_u64(w, a->h);
	struct rd r;
	if ((rc = rc_call(a->ctx->dev->conn, RGPU_OP_ARRAY_DESTROY, w, &r)))
		return rc;
	a->magic = 0;
	free(a);
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *d, CUarray h)
{
	struct rc_array *a;
	CUresult rc = rc_obj(h, RC_ARRAY, &a);
	if (rc)
		return rc;
	if (!d)
		return CUDA_ERROR_INVALID_VALUE;
	*d = a->d;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *d, CUarray h)
{
	struct rc_array *a;
	CUresult rc = rc_obj(h, RC_ARRAY, &a);
	if (rc)
		return rc;
	if (!d || a->d.Depth)
		return CUDA_ERROR_INVALID_VALUE;
	*d = (CUDA_ARRAY_DESCRIPTOR){ .Width = a->d.Width, .Height = a->d.Height,
				      .Format = a->d.Format, .NumChannels = a->d.NumChannels };
	return CUDA_SUCCESS;
}

/* ---- 3D copies ---- */

/* One side of a copy, resolved: where it lives and its layout. */
struct side {
	CUmemorytype type;
	uint8_t *host;
	CUdeviceptr dev;
	struct rc_array *arr;
	size_t x, y, z, pitch, height;
};

static CUresult side_of(CUmemorytype t, const void *host, CUdeviceptr dev, CUarray arr, size_t x,
			size_t y, size_t z, size_t pitch, size_t height, size_t w, size_t h,
			struct side *s, struct rc_ctx **ctx)
{
	*s = (struct side){ .x = x, .y = y, .z = z, .pitch = pitch, .height = height };
	uintptr_t a = rc_copy_side(t, dev, host, &s->type);
	switch (s->type) {
	case CU_MEMORYTYPE_HOST:
		s->host = (uint8_t *)a;
		if (!s->host)
			return CUDA_ERROR_INVALID_VALUE;
		if (!s->pitch)
			s->pitch = w;
		if (!s->height)
			s->height = h;
		return s->pitch < x + w ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
	case CU_MEMORYTYPE_DEVICE:
		s->dev = a;
		if (!s->pitch && h == 1)
			s->pitch = x + w; /* one row: the driver ignores the pitch */
		if (!*ctx)
			rc_alloc_lookup(s->dev, ctx, NULL, NULL);
		rc_coh_device_use(s->dev);
		return CUDA_SUCCESS;
	case CU_MEMORYTYPE_ARRAY: {
		CUresult rc = array_get(arr, &s->arr);
		if (rc)
			return rc;
		if (!*ctx)
			*ctx = s->arr->ctx;
		return CUDA_SUCCESS;
	}
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

static void put_side(struct wbuf *w, const struct side *s, size_t y0, size_t z0)
{
	put_u32(w, (uint32_t)s->type);
	put_u64(w, s->x);
	put_u64(w, s->y + y0);
	put_u64(w, s->z + z0);
	put_u64(w, s->dev);
	put_u64(w, s->arr ? s->arr->h : 0);
	put_u64(w, s->pitch);
	put_u64(w, s->height);
}

/* The first byte of row y of slice z of a host side's box. */
static uint8_t *host_row(const struct side *s, size_t y, size_t z)
{
	return s->host + ((s->z + z) * s->height + s->y + y) * s->pitch + s->x;
}

CUresult rc_memcpy3d(const CUDA_MEMCPY3D *p, CUstream st, int async)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	size_t w = p->WidthInBytes, h = p->Height ? p->Height : 1, d = p->Depth ? p->Depth : 1;
	struct rc_ctx *c = NULL;
	uint64_t sh = 0;
	if (async && (rc = rc_stream_resolve(st, &c, &sh)))
		return rc;
	struct side s, t;
	if ((rc = side_of(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes,
			  p->srcY, p->srcZ, p->srcPitch, p->srcHeight, w, h, &s, &c)) ||
	    (rc = side_of(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes,
			  p->dstY, p->dstZ, p->dstPitch, p->dstHeight, w, h, &t, &c)))
		return rc;
	if (!w)
		return CUDA_SUCCESS;
	int hin = s.type == CU_MEMORYTYPE_HOST, hout = t.type == CU_MEMORYTYPE_HOST;
	if (hin && hout) {
		for (size_t z = 0; z < d; z++)
			for (size_t y = 0; y < h; y++)
				memmove(host_row(&t, y, z), host_row(&s, y, z), w);
		return CUDA_SUCCESS;
	}
	if (!c && (rc = rc_need_ctx(&c)))
		return rc;
	if ((s.arr && s.arr->ctx->dev->conn != c->dev->conn) ||
	    (t.arr && t.arr->ctx->dev->conn != c->dev->conn)) {
		rc_unsupported("copies between arrays or memory of two servers");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	/* pieces of whole slices, or of rows of one slice, whose host bytes
	 * fit one request */
	size_t dz = d, dy = h;
	if (hin || hout) {
		if (w > RGPU_COPY3D_MAX)
			return CUDA_ERROR_INVALID_VALUE;
		if (w * h > RGPU_COPY3D_MAX) {
			dz = 1;
			dy = RGPU_COPY3D_MAX / w;
		} else {
			dz = RGPU_COPY3D_MAX / (w * h);
		}
	}
	for (size_t z0 = 0; z0 < d && !rc; z0 += dz) {
		size_t nz = d - z0 < dz ? d - z0 : dz;
		for (size_t y0 = 0; y0 < h && !rc; y0 += dy) {
			size_t ny = h - y0 < dy ? h - y0 : dy;
			struct wbuf *wb = rc_req();
			put_u64(wb, c->h);
			put_u64(wb, sh);
			put_u32(wb, !async);
			put_side(wb, &s, y0, z0);
			put_side(wb, &t, y0, z0);
			put_u64(wb, w);
			put_u64(wb, ny);
			put_u64(wb, nz);
			for (size_t z = 0; hin && z < nz; z++)
				for (size_t y = 0; y < ny; y++)
					put_raw(wb, host_row(&s, y0 + y, z0 + z), w);
			if (wb->oom)
				return CUDA_ERROR_OUT_OF_MEMORY;
			if (async && !hout) {
				rc = rc_post(c->dev->conn, RGPU_OP_MEMCPY3D, wb);
				continue;
			}
			struct rd r;
			rc = rc_call(c->dev->conn, RGPU_OP_MEMCPY3D, wb, &r);
			for (size_t z = 0; !rc && hout && z < nz; z++)
				for (size_t y = 0; !rc && y < ny; y++) {
					const void *b = get_raw(&r, w);
					if (!b)
						rc = CUDA_ERROR_UNKNOWN;
					else
						memcpy(host_row(&t, y0 + y, z0 + z), b, w);
				}
		}
	}
	return rc;
}

RC_EXPORT CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *p) { return rc_memcpy3d(p, NULL, 0); }
RC_EXPORT CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *p, CUstream s)
{
	return rc_memcpy3d(p, s, 1);
}

/* ---- batches of 3D copies (CUDA 12.8) ---- */

/* Bytes of one element of an array: its channels times the format's size
 * (0: a format whose elements are not whole bytes per channel, such as
 * the block-compressed and video ones). */
static size_t elem_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d)
{
	size_t b;
	switch (d->Format) {
	case CU_AD_FORMAT_UNSIGNED_INT8:
	case CU_AD_FORMAT_SIGNED_INT8: b = 1; break;
	case CU_AD_FORMAT_UNSIGNED_INT16:
	case CU_AD_FORMAT_SIGNED_INT16:
	case CU_AD_FORMAT_HALF: b = 2; break;
	case CU_AD_FORMAT_UNSIGNED_INT32:
	case CU_AD_FORMAT_SIGNED_INT32:
	case CU_AD_FORMAT_FLOAT: b = 4; break;
	case CU_AD_FORMAT_UNORM_INT8X1: case CU_AD_FORMAT_SNORM_INT8X1: return 1;
	case CU_AD_FORMAT_UNORM_INT8X2: case CU_AD_FORMAT_SNORM_INT8X2:
	case CU_AD_FORMAT_UNORM_INT16X1: case CU_AD_FORMAT_SNORM_INT16X1: return 2;
	case CU_AD_FORMAT_UNORM_INT8X4: case CU_AD_FORMAT_SNORM_INT8X4:
	case CU_AD_FORMAT_UNORM_INT16X2: case CU_AD_FORMAT_SNORM_INT16X2:
	case CU_AD_FORMAT_UNORM_INT_101010_2: return 4;
	case CU_AD_FORMAT_UNORM_INT16X4: case CU_AD_FORMAT_SNORM_INT16X4: return 8;
	default: return 0;
	}
	return b * d->NumChannels;
}

/* One operand as a side of a CUDA_MEMCPY3D (pointers: unified addressing
 * says which memory they are) */
static CUresult batch_side(const CUmemcpy3DOperand *o, size_t es, const CUextent3D *e, CUmemorytype *type,
			   CUdeviceptr *ptr, CUarray *arr, size_t *x, size_t *y, size_t *z, size_t *pitch,
			   size_t *height)
{
	if (o->type == CU_MEMCPY_OPERAND_TYPE_POINTER) {
		if ((o->op.ptr.rowLength && o->op.ptr.rowLength < e->width) ||
		    (o->op.ptr.layerHeight && o->op.ptr.layerHeight < e->height))
			return CUDA_ERROR_INVALID_VALUE;
		*type = CU_MEMORYTYPE_UNIFIED;
		*ptr = o->op.ptr.ptr;
		*pitch = (o->op.ptr.rowLength ? o->op.ptr.rowLength : e->width) * es;
		*height = o->op.ptr.layerHeight ? o->op.ptr.layerHeight : e->height;
		return CUDA_SUCCESS;
	}
	if (o->type != CU_MEMCPY_OPERAND_TYPE_ARRAY)
		return CUDA_ERROR_INVALID_VALUE;
	*type = CU_MEMORYTYPE_ARRAY;
	*arr = o->op.array.array;
	*x = o->op.array.offset.x * es;
	*y = o->op.array.offset.y;
	*z = o->op.array.offset.z;
	return CUDA_SUCCESS;
}

/* The element size of a copy: 1 between pointers, else the array's (two
 * arrays must agree) */
static CUresult batch_elem(const CUDA_MEMCPY3D_BATCH_OP *op, size_t *es)
{
	size_t e[2] = { 0, 0 };
	const CUmemcpy3DOperand *o[2] = { &op->src, &op->dst };
	for (int i = 0; i < 2; i++)
		if (o[i]->type == CU_MEMCPY_OPERAND_TYPE_ARRAY) {
			struct rc_array *a;
			CUresult rc = array_get(o[i]->op.array.array, &a);
			if (rc)
				return rc;
			if (!(e[i] = elem_bytes(&a->d))) {
				rc_unsupported("cuMemcpy3DBatchAsync of block-compressed or video arrays");
				return CUDA_ERROR_NOT_SUPPORTED;
			}
		}
	if (e[0] && e[1] && e[0] != e[1])
		return CUDA_ERROR_INVALID_VALUE;
	*es = e[0] ? e[0] : e[1] ? e[1] : 1;
	return CUDA_SUCCESS;
}

/* Each copy in turn, in stream order (CUDA lets them run in any order);
 * a host source to be read during the call is: the stream is waited for. */
static CUresult batch3d(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail, unsigned long long flags,
			CUstream s)
{
	CUresult rc = rc_initialized();
	if (fail)
		*fail = SIZE_MAX;
	if (rc)
		return rc;
	if (!n || !ops || flags || s == NULL || s == CU_STREAM_LEGACY)
		return CUDA_ERROR_INVALID_VALUE;
	int wait = 0;
	for (size_t i = 0; i < n && !rc; i++) {
		const CUDA_MEMCPY3D_BATCH_OP *op = &ops[i];
		CUDA_MEMCPY3D q = { 0 };
		size_t es = 1;
		if (!op->extent.width || !op->extent.height || !op->extent.depth ||
		    (op->srcAccessOrder != CU_MEMCPY_SRC_ACCESS_ORDER_STREAM &&
		     op->srcAccessOrder != CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL &&
		     op->srcAccessOrder != CU_MEMCPY_SRC_ACCESS_ORDER_ANY) ||
		    (op->flags & ~(unsigned)CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE))
			rc = CUDA_ERROR_INVALID_VALUE;
		if (!rc)
			rc = batch_elem(op, &es);
		if (!rc)
			rc = batch_side(&op->src, es, &op->extent, &q.srcMemoryType, &q.srcDevice, &q.srcArray,
					&q.srcXInBytes, &q.srcY, &q.srcZ, &q.srcPitch, &q.srcHeight);
		if (!rc)
			rc = batch_side(&op->dst, es, &op->extent, &q.dstMemoryType, &q.dstDevice, &q.dstArray,
					&q.dstXInBytes, &q.dstY, &q.dstZ, &q.dstPitch, &q.dstHeight);
		if (!rc) {
			q.WidthInBytes = op->extent.width * es;
			q.Height = op->extent.height;
			q.Depth = op->extent.depth;
			if (op->srcAccessOrder == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL &&
			    op->src.type == CU_MEMCPY_OPERAND_TYPE_POINTER &&
			    rc_is_host_memory((const void *)(uintptr_t)op->src.op.ptr.ptr))
				wait = 1;
			rc = rc_memcpy3d(&q, s, 1);
		}
		if (rc && fail)
			*fail = i;
	}
	if (!rc && wait)
		rc = cuStreamSynchronize(s);
	return rc;
}

RC_EXPORT CUresult cuMemcpy3DBatchAsync_v2(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, unsigned long long flags,
					   CUstream s)
{
	return batch3d(n, ops, NULL, flags, s);
}

RC_EXPORT CUresult cuMemcpy3DBatchAsync_v2_ptsz(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops,
						unsigned long long flags, CUstream s)
{
	return batch3d(n, ops, NULL, flags, s ? s : CU_STREAM_PER_THREAD);
}

/* CUDA 12.8-12.9: the index of a copy that failed comes back */
RC_EXPORT CUresult cuMemcpy3DBatchAsync(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail,
					unsigned long long flags, CUstream s)
{
	return batch3d(n, ops, fail, flags, s);
}

RC_EXPORT CUresult cuMemcpy3DBatchAsync_ptsz(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail,
					     unsigned long long flags, CUstream s)
{
	return batch3d(n, ops, fail, flags, s ? s : CU_STREAM_PER_THREAD);
}

/* the 1D array copies: a row of an array */
static CUresult array_1d(CUmemorytype st, const void *sh, CUdeviceptr sd, CUarray sa, size_t so,
			 CUmemorytype dt, void *dh, CUdeviceptr dd, CUarray da, size_t doff,
			 size_t n, CUstream s, int async)
{
	CUDA_MEMCPY3D p = { .srcMemoryType = st, .srcHost = sh, .srcDevice = sd, .srcArray = sa,
			    .srcXInBytes = so, .dstMemoryType = dt, .dstHost = dh, .dstDevice = dd,
			    .dstArray = da, .dstXInBytes = doff, .WidthInBytes = n, .Height = 1,
			    .Depth = 1 };
	return rc_memcpy3d(&p, s, async);
}

#define H CU_MEMORYTYPE_HOST
#define DV CU_MEMORYTYPE_DEVICE
#define A CU_MEMORYTYPE_ARRAY
RC_EXPORT CUresult cuMemcpyHtoA_v2(CUarray a, size_t off, const void *src, size_t n)
{
	return array_1d(H, src, 0, NULL, 0, A, NULL, 0, a, off, n, NULL, 0);
}
RC_EXPORT CUresult cuMemcpyAtoH_v2(void *dst, CUarray a, size_t off, size_t n)
{
	return array_1d(A, NULL, 0, a, off, H, dst, 0, NULL, 0, n, NULL, 0);
}
RC_EXPORT CUresult cuMemcpyHtoAAsync_v2(CUarray a, size_t off, const void *src, size_t n, CUstream s)
{
	return array_1d(H, src, 0, NULL, 0, A, NULL, 0, a, off, n, s, 1);
}
RC_EXPORT CUresult cuMemcpyAtoHAsync_v2(void *dst, CUarray a, size_t off, size_t n, CUstream s)
{
	return array_1d(A, NULL, 0, a, off, H, dst, 0, NULL, 0, n, s, 1);
}
RC_EXPORT CUresult cuMemcpyDtoA_v2(CUarray a, size_t off, CUdeviceptr src, size_t n)
{
	return array_1d(DV, NULL, src, NULL, 0, A, NULL, 0, a, off, n, NULL, 0);
}
RC_EXPORT CUresult cuMemcpyAtoD_v2(CUdeviceptr dst, CUarray a, size_t off, size_t n)
{
	return array_1d(A, NULL, 0, a, off, DV, NULL, dst, NULL, 0, n, NULL, 0);
}
RC_EXPORT CUresult cuMemcpyAtoA_v2(CUarray dst, size_t doff, CUarray src, size_t soff, size_t n)
{
	return array_1d(A, NULL, 0, src, soff, A, NULL, 0, dst, doff, n, NULL, 0);
}
#undef H
#undef DV
#undef A

/* ---- texture and surface objects ---- */

struct texobj {
	struct texobj *next;
	uint64_t v;
	int surf;
	struct rc_ctx *ctx;
	CUDA_RESOURCE_DESC res; /* as the application gave them */
	CUDA_TEXTURE_DESC tex;
	CUDA_RESOURCE_VIEW_DESC view;
	int has_view;
};

static struct texobj *texobjs;
static pthread_mutex_t tex_lock = PTHREAD_MUTEX_INITIALIZER;

/* The object v of that kind, unlinked when unlink is set. */
static struct texobj *tex_find(uint64_t v, int surf, int unlink)
{
	pthread_mutex_lock(&tex_lock);
	struct texobj **pp = &texobjs, *t;
	while ((t = *pp) && !(t->v == v && t->surf == surf))
		pp = &t->next;
	if (t && unlink)
		*pp = t->next;
	pthread_mutex_unlock(&tex_lock);
	return t;
}

static CUresult obj_create(uint64_t *out, const CUDA_RESOURCE_DESC *res,
			   const CUDA_TEXTURE_DESC *tex, const CUDA_RESOURCE_VIEW_DESC *view, int surf)
{
	struct rc_ctx *c = NULL;
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!out || !res || (!surf && !tex))
		return CUDA_ERROR_INVALID_VALUE;
	CUDA_RESOURCE_DESC r = *res;
	if (r.resType == CU_RESOURCE_TYPE_ARRAY) {
		struct rc_array *a;
		if ((rc = array_get(r.res.array.hArray, &a)))
			return rc;
		r.res.array.hArray = (CUarray)(uintptr_t)a->h;
		c = a->ctx;
	} else if (r.resType == CU_RESOURCE_TYPE_LINEAR) {
		rc_alloc_lookup(r.res.linear.devPtr, &c, NULL, NULL);
	} else if (r.resType == CU_RESOURCE_TYPE_PITCH2D) {
		rc_alloc_lookup(r.res.pitch2D.devPtr, &c, NULL, NULL);
	} else if (r.resType == CU_RESOURCE_TYPE_MIPMAPPED_ARRAY) {
		rc_unsupported("texture objects on mipmapped arrays");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (!c && (rc = rc_need_ctx(&c)))
		return rc;
	struct texobj *t = calloc(1, sizeof(*t));
	if (!t)
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u32(w, (uint32_t)surf);
	put_bytes(w, &r, sizeof(r));
	put_bytes(w, tex, surf ? 0 : sizeof(*tex));
	put_bytes(w, view, view && !surf ? sizeof(*view) : 0);
	struct rd rr;
	rc = rc_call(c->dev->conn, RGPU_OP_TEXOBJ_CREATE, w, &rr);
	uint64_t v = get_u64(&rr);
	if (!rc && !rd_done(&rr))
		rc = CUDA_ERROR_UNKNOWN;
	if (rc) {
		free(t);
		return rc;
	}
	*t = (struct texobj){ .v = v, .surf = surf, .ctx = c, .res = *res };
	if (tex)
		t->tex = *tex;
	if (view && !surf) {
		t->view = *view;
		t->has_view = 1;
	}
	pthread_mutex_lock(&tex_lock);
	t->next = texobjs;
	texobjs = t;
	pthread_mutex_unlock(&tex_lock);
	*out = v;
	return CUDA_SUCCESS;
}

static CUresult obj_destroy(uint64_t v, int surf)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	struct texobj *t = tex_find(v, surf, 1);
	if (!t)
		return CUDA_ERROR_INVALID_VALUE;
	struct wbuf *w = rc_req();
	put_u64(w, t->ctx->h);
	put_u32(w, (uint32_t)surf);
	put_u64(w, v);
	struct rd r;
	rc = rc_call(t->ctx->dev->conn, RGPU_OP_TEXOBJ_DESTROY, w, &r);
	free(t);
	return rc;
}

RC_EXPORT CUresult cuTexObjectCreate(CUtexObject *o, const CUDA_RESOURCE_DESC *r,
				     const CUDA_TEXTURE_DESC *t, const CUDA_RESOURCE_VIEW_DESC *v)
{
	uint64_t x = 0;
	CUresult rc = obj_create(&x, r, t, v, 0);
	if (!rc)
		*o = x;
	return rc;
}

RC_EXPORT CUresult cuTexObjectDestroy(CUtexObject o) { return obj_destroy(o, 0); }

RC_EXPORT CUresult cuSurfObjectCreate(CUsurfObject *o, const CUDA_RESOURCE_DESC *r)
{
	uint64_t x = 0;
	CUresult rc = obj_create(&x, r, NULL, NULL, 1);
	if (!rc)
		*o = x;
	return rc;
}

RC_EXPORT CUresult cuSurfObjectDestroy(CUsurfObject o) { return obj_destroy(o, 1); }

/* descriptors as given, answered here */
static CUresult obj_desc(uint64_t v, int surf, int what, void *out)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&tex_lock);
	struct texobj *t = texobjs;
	while (t && !(t->v == v && t->surf == surf))
		t = t->next;
	rc = CUDA_ERROR_INVALID_VALUE;
	if (t && what == 0) {
		memcpy(out, &t->res, sizeof(t->res));
		rc = CUDA_SUCCESS;
	} else if (t && what == 1) {
		memcpy(out, &t->tex, sizeof(t->tex));
		rc = CUDA_SUCCESS;
	} else if (t && what == 2 && t->has_view) {
		memcpy(out, &t->view, sizeof(t->view));
		rc = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&tex_lock);
	return rc;
}

RC_EXPORT CUresult cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC *r, CUtexObject o)
{
	return obj_desc(o, 0, 0, r);
}
RC_EXPORT CUresult cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC *t, CUtexObject o)
{
	return obj_desc(o, 0, 1, t);
}
RC_EXPORT CUresult cuTexObjectGetResourceViewDesc(CUDA_RESOURCE_VIEW_DESC *v, CUtexObject o)
{
	return obj_desc(o, 0, 2, v);
}
RC_EXPORT CUresult cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC *r, CUsurfObject o)
{
	return obj_desc(o, 1, 0, r);
}
