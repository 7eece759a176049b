/* CUDA arrays, 3D copies and texture and surface objects.  An array is a
 * handle of the session's table (HK_ARRAY); its memory is charged to the
 * quota when it is made.  Texture and surface objects are the driver's
 * values, which kernels take as they are: the session lists the ones it
 * made, and destroys only those. */
#include "gate.h"
#include "rgpud.h"
#include "session.h"

#include <stdlib.h>
#include <string.h>

#define D (&rgpud_server.drv)

struct array_info {
	uint64_t charged;
	unsigned dev;
};

static uint64_t format_bytes(unsigned f)
{
	switch (f) {
	case CU_AD_FORMAT_UNSIGNED_INT8:
	case CU_AD_FORMAT_SIGNED_INT8:
		return 1;
	case CU_AD_FORMAT_UNSIGNED_INT16:
	case CU_AD_FORMAT_SIGNED_INT16:
	case CU_AD_FORMAT_HALF:
		return 2;
	default:
		return 4; /* 32-bit formats; the block-compressed ones are smaller */
	}
}

/* What the array costs in the quota: its elements, in 2 MiB units (the
 * driver lays arrays out in tiles of its own).  0: overflow. */
static uint64_t array_cost(uint64_t w, uint64_t h, uint64_t d, unsigned fmt, unsigned ch)
{
	uint64_t n = format_bytes(fmt) * (ch ? ch : 1), r;
	if (__builtin_mul_overflow(n, w ? w : 1, &n) || __builtin_mul_overflow(n, h ? h : 1, &n) ||
	    __builtin_mul_overflow(n, d ? d : 1, &n) || __builtin_add_overflow(n, (2u << 20) - 1, &r))
		return 0;
	return r / (2u << 20) * (2u << 20);
}

int op_array_create(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX);
	CUDA_ARRAY3D_DESCRIPTOR d = { 0 };
	d.Width = get_u64(r);
	d.Height = get_u64(r);
	d.Depth = get_u64(r);
	d.Format = (CUarray_format)get_u32(r);
	d.NumChannels = get_u32(r);
	d.Flags = get_u32(r);
	int rc = req_enter(s, r, &q, HK_FREE);
	if (rc)
		return rc;
	if (!D->cuArray3DCreate_v2 || !D->cuArrayDestroy)
		return CUDA_ERROR_NOT_SUPPORTED;
	uint64_t cost = array_cost(d.Width, d.Height, d.Depth, d.Format, d.NumChannels);
	if (!cost)
		return CUDA_ERROR_INVALID_VALUE;
	struct array_info *ai = calloc(1, sizeof(*ai));
	if (!ai)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (gate_charge_bytes(q.cs->dev, cost) < 0) {
		free(ai);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*ai = (struct array_info){ cost, q.cs->dev };
	CUarray a;
	if ((rc = D->cuArray3DCreate_v2(&a, &d))) {
		gate_refund_bytes(ai->dev, cost);
		free(ai);
		return rc;
	}
	uint64_t id = ht_add(&s->ht, HK_ARRAY, a, q.ctx, ai);
	if (!id) {
		D->cuArrayDestroy(a);
		gate_refund_bytes(ai->dev, cost);
		free(ai);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	put_u64(out, id);
	return CUDA_SUCCESS;
}

void array_forget(struct hentry *e)
{
	struct array_info *ai = e->extra;
	if (ai)
		gate_refund_bytes(ai->dev, ai->charged);
}

int op_array_destroy(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	int rc = req_enter(s, r, &q, HK_ARRAY);
	if (rc)
		return rc == CUDA_ERROR_INVALID_HANDLE ? CUDA_ERROR_INVALID_VALUE : rc;
	if ((rc = D->cuArrayDestroy(q.e->obj)))
		return rc;
	array_forget(q.e);
	ht_del(&s->ht, q.id);
	return CUDA_SUCCESS;
}

/* ---- 3D copies ---- */

struct side {
	uint32_t type;
	uint64_t x, y, z, dev, array, pitch, height;
};

static void read_side(struct rd *r, struct side *sd)
{
	sd->type = get_u32(r);
	sd->x = get_u64(r);
	sd->y = get_u64(r);
	sd->z = get_u64(r);
	sd->dev = get_u64(r);
	sd->array = get_u64(r);
	sd->pitch = get_u64(r);
	sd->height = get_u64(r);
}

/* The offset of byte (x, y, z) of a pitched box: 0, or -1 on overflow. */
static int box_byte(uint64_t pitch, uint64_t height, uint64_t x, uint64_t y, uint64_t z,
		    uint64_t *off)
{
	uint64_t t;
	if (__builtin_mul_overflow(z, height, &t) || __builtin_add_overflow(t, y, &t) ||
	    __builtin_mul_overflow(t, pitch, &t) || __builtin_add_overflow(t, x, off))
		return -1;
	return 0;
}

/* Fills one side of the driver's descriptor: device memory must be the
 * session's over the whole box, an array a live one of the context's, a
 * host side the staging buffer (packed).  A CUresult. */
static int place_side(struct session *s, const struct req *q, const struct side *sd,
		      uint64_t w, uint64_t h, uint64_t d, void *host, CUmemorytype *type,
		      size_t *x, size_t *y, size_t *z, CUdeviceptr *dev, CUarray *arr, void **hp,
		      size_t *pitch, size_t *height)
{
	*type = (CUmemorytype)sd->type;
	switch (sd->type) {
	case CU_MEMORYTYPE_HOST:
		*hp = host;
		*pitch = w;
		*height = h;
		*x = *y = *z = 0;
		return CUDA_SUCCESS;
	case CU_MEMORYTYPE_DEVICE: {
		/* the box, from its first byte to its last, the session's */
		uint64_t eh = sd->height ? sd->height : h, first, last;
		if ((!sd->height && (d > 1 || sd->z)) || sd->pitch < w ||
		    box_byte(sd->pitch, eh, sd->x, sd->y, sd->z, &first) < 0 ||
		    box_byte(sd->pitch, eh, sd->x + w - 1, sd->y + h - 1, sd->z + d - 1, &last) < 0 ||
		    sd->x + w - 1 < sd->x || sd->y + h - 1 < sd->y || sd->z + d - 1 < sd->z ||
		    !session_owns_range(s, sd->dev + first, last - first + 1) ||
		    sd->dev + first < sd->dev)
			return CUDA_ERROR_INVALID_VALUE;
		*dev = sd->dev;
		*pitch = sd->pitch;
		*height = sd->height;
		*x = sd->x;
		*y = sd->y;
		*z = sd->z;
		return CUDA_SUCCESS;
	}
	case CU_MEMORYTYPE_ARRAY: {
		struct hentry *e = req_obj(s, q, sd->array, HK_ARRAY);
		if (!e)
			return CUDA_ERROR_INVALID_VALUE;
		*arr = e->obj;
		*x = sd->x;
		*y = sd->y;
		*z = sd->z;
		return CUDA_SUCCESS;
	}
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

int op_memcpy3d(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX);
	uint64_t sid = get_u64(r);
	uint32_t sync = get_u32(r);
	struct side src, dst;
	read_side(r, &src);
	read_side(r, &dst);
	uint64_t w = get_u64(r), hh = get_u64(r), dd = get_u64(r), n;
	if (!rd_ok(r) || !w || !hh || !dd || __builtin_mul_overflow(w, hh, &n) ||
	    __builtin_mul_overflow(n, dd, &n))
		return rd_ok(r) ? CUDA_ERROR_INVALID_VALUE : OP_DROP;
	int hin = src.type == CU_MEMORYTYPE_HOST, hout = dst.type == CU_MEMORYTYPE_HOST;
	if ((hin || hout) && n > RGPU_COPY3D_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	if (hin && hout)
		return CUDA_ERROR_INVALID_VALUE; /* the client copies those itself */
	const void *data = hin ? get_raw(r, n) : NULL;
	int rc = req_enter(s, r, &q, HK_FREE);
	if (rc)
		return rc;
	if (!D->cuMemcpy3D_v2 || !D->cuMemcpy3DAsync_v2)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUstream st = NULL;
	if ((rc = req_stream(s, sid, &st)))
		return rc;
	void *host = NULL;
	if (hin || hout) {
		if (!(host = malloc(n)))
			return CUDA_ERROR_OUT_OF_MEMORY;
		if (hin)
			memcpy(host, data, n);
	}
	CUDA_MEMCPY3D p = { .WidthInBytes = w, .Height = hh, .Depth = dd };
	void *sh = NULL, *dh = NULL;
	rc = place_side(s, &q, &src, w, hh, dd, host, &p.srcMemoryType, &p.srcXInBytes, &p.srcY,
			&p.srcZ, &p.srcDevice, &p.srcArray, &sh, &p.srcPitch, &p.srcHeight);
	if (!rc)
		rc = place_side(s, &q, &dst, w, hh, dd, host, &p.dstMemoryType, &p.dstXInBytes,
				&p.dstY, &p.dstZ, &p.dstDevice, &p.dstArray, &dh, &p.dstPitch,
				&p.dstHeight);
	p.srcHost = sh;
	p.dstHost = dh;
	if (!rc) {
		/* the staging buffer is freed here: a copy with host memory
		 * finishes before the reply, in stream order */
		rc = sync && !st ? D->cuMemcpy3D_v2(&p) : D->cuMemcpy3DAsync_v2(&p, st);
		if (!rc && (sync || host))
			rc = D->cuStreamSynchronize(st);
	}
	if (!rc && hout)
		put_raw(out, host, n);
	free(host);
	return rc;
}

/* ---- texture and surface objects ---- */

static int tex_add(struct session *s, uint64_t ctx, uint64_t v, int surf)
{
	if (s->ntex == s->textcap) {
		size_t cap = s->textcap ? 2 * s->textcap : 16;
		struct texobj *t = realloc(s->tex, cap * sizeof(*t));
		if (!t)
			return -1;
		s->tex = t;
		s->textcap = cap;
	}
	s->tex[s->ntex++] = (struct texobj){ v, ctx, surf };
	return 0;
}

/* The index of the session's object v of that kind in ctx, or -1. */
static long tex_find(struct session *s, uint64_t ctx, uint64_t v, int surf)
{
	for (size_t i = 0; i < s->ntex; i++)
		if (s->tex[i].v == v && s->tex[i].ctx == ctx && s->tex[i].surf == surf)
			return (long)i;
	return -1;
}

void tex_forget_ctx(struct session *s, uint64_t ctx)
{
	size_t k = 0;
	for (size_t i = 0; i < s->ntex; i++)
		if (s->tex[i].ctx != ctx)
			s->tex[k++] = s->tex[i];
	s->ntex = k;
}

/* The resource a texture or surface reads: an array of the context's, or
 * device memory of the session's. */
static int resource_check(struct session *s, const struct req *q, CUDA_RESOURCE_DESC *rd)
{
	struct hentry *e;
	switch (rd->resType) {
	case CU_RESOURCE_TYPE_ARRAY:
		e = req_obj(s, q, (uint64_t)(uintptr_t)rd->res.array.hArray, HK_ARRAY);
		if (!e)
			return CUDA_ERROR_INVALID_VALUE;
		rd->res.array.hArray = e->obj;
		return CUDA_SUCCESS;
	/* device memory: its start must be the session's.  Its size is not
	 * checked against the allocation, as the driver does not (NVIDIA's
	 * convolutionFFT2D declares more than it allocated and reads less);
	 * a texture reads in the session's own context, where any other
	 * address faults */
	case CU_RESOURCE_TYPE_LINEAR:
		return session_owns_range(s, rd->res.linear.devPtr, 1) ? CUDA_SUCCESS
								     : CUDA_ERROR_INVALID_VALUE;
	case CU_RESOURCE_TYPE_PITCH2D:
		return session_owns_range(s, rd->res.pitch2D.devPtr, 1) ? CUDA_SUCCESS
								      : CUDA_ERROR_INVALID_VALUE;
	case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
		return CUDA_ERROR_NOT_SUPPORTED;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

int op_texobj_create(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX);
	uint32_t surf = get_u32(r);
	size_t nres = 0, ntex = 0, nview = 0;
	const void *res = get_bytes(r, &nres), *tex = get_bytes(r, &ntex),
		   *view = get_bytes(r, &nview);
	int rc = req_enter(s, r, &q, HK_FREE);
	if (rc)
		return rc;
	if (!D->cuTexObjectCreate || !D->cuTexObjectDestroy || !D->cuSurfObjectCreate ||
	    !D->cuSurfObjectDestroy)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUDA_RESOURCE_DESC rd;
	CUDA_TEXTURE_DESC td;
	CUDA_RESOURCE_VIEW_DESC vd;
	if (surf > 1 || nres != sizeof(rd) || (!surf && ntex != sizeof(td)) || (surf && ntex) ||
	    (nview && (surf || nview != sizeof(vd))))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&rd, res, sizeof(rd));
	if ((rc = resource_check(s, &q, &rd)))
		return rc;
	uint64_t v = 0;
	if (surf) {
		if (rd.resType != CU_RESOURCE_TYPE_ARRAY)
			return CUDA_ERROR_INVALID_VALUE;
		CUsurfObject so;
		rc = D->cuSurfObjectCreate(&so, &rd);
		v = so;
	} else {
		memcpy(&td, tex, sizeof(td));
		if (nview)
			memcpy(&vd, view, sizeof(vd));
		CUtexObject to;
		rc = D->cuTexObjectCreate(&to, &rd, &td, nview ? &vd : NULL);
		v = to;
	}
	if (rc)
		return rc;
	if (tex_add(s, q.ctx, v, (int)surf) < 0) {
		surf ? D->cuSurfObjectDestroy(v) : D->cuTexObjectDestroy(v);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	put_u64(out, v);
	return CUDA_SUCCESS;
}

int op_texobj_destroy(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX);
	uint32_t surf = get_u32(r);
	uint64_t v = get_u64(r);
	int rc = req_enter(s, r, &q, HK_FREE);
	if (rc)
		return rc;
	if (!D->cuTexObjectDestroy || !D->cuSurfObjectDestroy)
		return CUDA_ERROR_NOT_SUPPORTED;
	long i = tex_find(s, q.ctx, v, surf != 0);
	if (i < 0)
		return CUDA_ERROR_INVALID_VALUE;
	rc = surf ? D->cuSurfObjectDestroy(v) : D->cuTexObjectDestroy(v);
	s->tex[i] = s->tex[--s->ntex];
	return rc;
}
