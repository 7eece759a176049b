/* Kernel launches, function attributes and occupancy. */
#include "log.h"
#include "rgpud.h"
#include "session.h"

#include <string.h>

#define D (&rgpud_server.drv)

static struct hentry *func_in_ctx(struct session *s, uint64_t ctx, uint64_t f, int *rc)
{
	*rc = session_enter_ctx(s, ctx, NULL);
	if (*rc)
		return NULL;
	struct hentry *e = ht_get(&s->ht, f, HK_FUNC);
	if (!e || e->ctx != ctx)
		*rc = CUDA_ERROR_INVALID_HANDLE;
	return *rc ? NULL : e;
}

int op_launch(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r), fid = get_u64(r);
	uint32_t g[3], b[3];
	for (int i = 0; i < 3; i++)
		g[i] = get_u32(r);
	for (int i = 0; i < 3; i++)
		b[i] = get_u32(r);
	uint32_t shmem = get_u32(r);
	uint64_t sid = get_u64(r);
	size_t plen;
	const uint8_t *params = get_bytes(r, &plen);
	if (!rd_done(r))
		return OP_DROP;
	int rc;
	struct hentry *e = func_in_ctx(s, ctx, fid, &rc);
	if (!e)
		return rc;
	CUstream st;
	if ((rc = session_stream(s, sid, &st)))
		return rc;
	struct param_layout *l = e->extra;
	if (plen < l->total)
		return CUDA_ERROR_INVALID_VALUE;
	void *args[l->n ? l->n : 1];
	for (uint32_t i = 0; i < l->n; i++)
		args[i] = (void *)(params + l->off[i]);
	return D->cuLaunchKernel(e->obj, g[0], g[1], g[2], b[0], b[1], b[2], shmem, st,
				 l->n ? args : NULL, NULL);
}

int op_func_get_attrs(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r), fid = get_u64(r);
	if (!rd_done(r))
		return OP_DROP;
	int rc;
	struct hentry *e = func_in_ctx(s, ctx, fid, &rc);
	if (!e)
		return rc;
	put_u32(out, CU_FUNC_ATTRIBUTE_MAX);
	for (int a = 0; a < CU_FUNC_ATTRIBUTE_MAX; a++) {
		int v = 0;
		if (D->cuFuncGetAttribute(&v, (CUfunction_attribute)a, e->obj) != CUDA_SUCCESS)
			v = 0;
		put_i32(out, v);
	}
	return CUDA_SUCCESS;
}

int op_func_set_attr(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r), fid = get_u64(r);
	uint32_t attr = get_u32(r);
	int32_t val = get_i32(r);
	if (!rd_done(r))
		return OP_DROP;
	int rc;
	struct hentry *e = func_in_ctx(s, ctx, fid, &rc);
	return e ? (int)D->cuFuncSetAttribute(e->obj, (CUfunction_attribute)attr, val) : rc;
}

int op_func_set_cache(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r), fid = get_u64(r);
	uint32_t cfg = get_u32(r);
	if (!rd_done(r))
		return OP_DROP;
	int rc;
	struct hentry *e = func_in_ctx(s, ctx, fid, &rc);
	return e ? (int)D->cuFuncSetCacheConfig(e->obj, (CUfunc_cache)cfg) : rc;
}

int op_occ_max_blocks(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r), fid = get_u64(r);
	int32_t bs = get_i32(r);
	uint64_t smem = get_u64(r);
	uint32_t flags = get_u32(r);
	if (!rd_done(r))
		return OP_DROP;
	int rc;
	struct hentry *e = func_in_ctx(s, ctx, fid, &rc);
	if (!e)
		return rc;
	int n = 0;
	rc = D->cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, e->obj, bs, smem, flags);
	put_i32(out, n);
	return rc;
}
