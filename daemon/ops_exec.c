/* Kernel launches, function attributes and occupancy. */
#include "log.h"
#include "clock.h"
#include "opstats.h"
#include "rgpud.h"
#include "session.h"
#include "sched/scheduler.h"

#include <stdlib.h>
#include <string.h>

#define D (&rgpud_server.drv)

/* Launch attributes: values only; any carrying a handle is refused by the
 * client before it gets here. */
/* A launch's grid and block dimensions, then its dynamic shared memory
 * (returned), as launches and occupancy queries send them. */
static uint32_t read_dims(struct rd *r, uint32_t g[3], uint32_t b[3])
{
	for (int i = 0; i < 3; i++)
		g[i] = get_u32(r);
	for (int i = 0; i < 3; i++)
		b[i] = get_u32(r);
	return get_u32(r);
}

static int read_attrs(struct rd *r, CUlaunchAttribute *attrs, uint32_t *n)
{
	*n = get_u32(r);
	if (!rd_ok(r) || *n > 16)
		return -1;
	for (uint32_t i = 0; i < *n; i++) {
		memset(&attrs[i], 0, sizeof(attrs[i]));
		attrs[i].id = (CUlaunchAttributeID)get_u32(r);
		const void *v = get_raw(r, sizeof(attrs[i].value));
		if (!v)
			return -1;
		memcpy(&attrs[i].value, v, sizeof(attrs[i].value));
		switch (attrs[i].id) {
		case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT:
		case CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE:
		case CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT:
			return -1;
		default:
			break;
		}
	}
	return 0;
}

/* the most argument bytes a kernel takes (CUDA 12.1 on: 32764) */
#define PARAMS_MAX 32768

const uint8_t *launch_params(struct session *s, const uint8_t *p, size_t n)
{
	/* at the alignment the kernel declares: a tensor map (TMA
	 * descriptor) argument is 64-byte aligned, and where the request's
	 * bytes lie in the frame is anyone's guess (Triton's kernels failed
	 * with CUDA_ERROR_INVALID_VALUE on the H200) */
	if (n > PARAMS_MAX || (!s->params && !(s->params = aligned_alloc(128, PARAMS_MAX))))
		return NULL;
	memcpy(s->params, p, n);
	return s->params;
}

/* The part of the GPU a launch needs (sched/policy.h): its grid against
 * the blocks of its shape the GPU holds at once, the driver's occupancy
 * asked once per function and block shape. */
static uint32_t launch_demand(const struct ctx_state *cs, CUfunction f, struct param_layout *l,
			      const uint32_t g[3], const uint32_t b[3], uint32_t shmem)
{
	uint64_t tpb = (uint64_t)b[0] * b[1] * b[2];
	if (!tpb || tpb > 4096)
		return 100; /* the launch fails anyway */
	if (l->occ_tpb != tpb || l->occ_smem != shmem) {
		int n = 0;
		if (D->cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, f, (int)tpb, shmem, 0) ||
		    n < 0)
			n = 0;
		l->occ_tpb = (uint32_t)tpb;
		l->occ_smem = shmem;
		l->occ_blocks = (uint32_t)n;
	}
	return sched_grid_demand((uint64_t)g[0] * g[1] * g[2], l->occ_blocks, cs->sms);
}

int op_launch(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	uint32_t g[3], b[3];
	uint32_t shmem = read_dims(r, g, b);
	uint64_t sid = get_u64(r);
	size_t plen;
	const uint8_t *params = get_bytes(r, &plen);
	CUlaunchAttribute attrs[16];
	uint32_t nattrs = 0;
	if (rd_ok(r) && r->left && read_attrs(r, attrs, &nattrs) < 0)
		return OP_DROP;
	int rc = req_enter(s, r, &q, HK_FUNC);
	if (rc)
		return rc;
	struct hentry *e = q.e;
	CUstream st;
	if ((rc = req_stream(s, sid, &st)))
		return rc;
	struct param_layout *l = e->extra;
	if (plen < l->total)
		return CUDA_ERROR_INVALID_VALUE;
	const uint8_t *ap = launch_params(s, params, l->total);
	if (!ap)
		return CUDA_ERROR_INVALID_VALUE;
	void *args[l->n ? l->n : 1];
	for (uint32_t i = 0; i < l->n; i++)
		args[i] = (void *)(ap + l->off[i]);
	/* the scheduler's gate (daemon/sched/): may wait for this session's
	 * turn, and times the kernel */
	struct sched_token tok;
	struct hentry *ce = ht_get(&s->ht, q.ctx, HK_CTX);
	CUcontext cu = ce ? ce->obj : NULL;
	unsigned dev = q.cs ? q.cs->dev : 0;
	uint32_t demand = q.cs && sched_wants_demand(dev) ? launch_demand(q.cs, e->obj, l, g, b, shmem)
							  : 100;
	sched_before_launch(dev, cu, st, demand, &tok);
	uint64_t t0 = s->opstats ? rgpu_now_ns() : 0;
	if (!nattrs) {
		rc = D->cuLaunchKernel(e->obj, g[0], g[1], g[2], b[0], b[1], b[2], shmem, st,
				       l->n ? args : NULL, NULL);
	} else {
		CUlaunchConfig cfg = { .gridDimX = g[0], .gridDimY = g[1], .gridDimZ = g[2],
				       .blockDimX = b[0], .blockDimY = b[1], .blockDimZ = b[2],
				       .sharedMemBytes = shmem, .hStream = st, .attrs = attrs,
				       .numAttrs = nattrs };
		rc = D->cuLaunchKernelEx(&cfg, e->obj, l->n ? args : NULL, NULL);
	}
	if (s->opstats)
		opstats_driver(s->opstats, RGPU_OP_LAUNCH, rgpu_now_ns() - t0);
	sched_after_launch(&tok, cu, st, rc);
	return rc;
}

int op_occ_dyn_smem(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	int32_t nb = get_i32(r), bs = get_i32(r);
	int rc = req_enter(s, r, &q, HK_FUNC);
	if (rc)
		return rc;
	struct hentry *e = q.e;
	size_t v = 0;
	rc = D->cuOccupancyAvailableDynamicSMemPerBlock(&v, e->obj, nb, bs);
	put_u64(out, v);
	return rc;
}

/* OCC_MAX_CLUSTERS and OCC_CLUSTER_SIZE: a launch configuration asked about */
static int occ_cluster(struct session *s, struct rd *r, struct wbuf *out, int size_of)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	uint32_t g[3], b[3];
	uint32_t shmem = read_dims(r, g, b);
	CUlaunchAttribute attrs[16];
	uint32_t nattrs = 0;
	if (read_attrs(r, attrs, &nattrs) < 0)
		return OP_DROP;
	int rc = req_enter(s, r, &q, HK_FUNC);
	if (rc)
		return rc;
	struct hentry *e = q.e;
	CUlaunchConfig cfg = { .gridDimX = g[0], .gridDimY = g[1], .gridDimZ = g[2],
			       .blockDimX = b[0], .blockDimY = b[1], .blockDimZ = b[2],
			       .sharedMemBytes = shmem, .attrs = attrs, .numAttrs = nattrs };
	int n = 0;
	rc = size_of ? D->cuOccupancyMaxPotentialClusterSize(&n, e->obj, &cfg)
		     : D->cuOccupancyMaxActiveClusters(&n, e->obj, &cfg);
	put_i32(out, n);
	return rc;
}

int op_occ_max_clusters(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	(void)h;
	return occ_cluster(s, r, out, 0);
}

int op_occ_cluster_size(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	(void)h;
	return occ_cluster(s, r, out, 1);
}

int op_func_get_attrs(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	int rc = req_enter(s, r, &q, HK_FUNC);
	if (rc)
		return rc;
	struct hentry *e = q.e;
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
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	uint32_t attr = get_u32(r);
	int32_t val = get_i32(r);
	int rc = req_enter(s, r, &q, HK_FUNC);
	return rc ? rc : (int)D->cuFuncSetAttribute(q.e->obj, (CUfunction_attribute)attr, val);
}

int op_func_set_cache(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	uint32_t cfg = get_u32(r);
	int rc = req_enter(s, r, &q, HK_FUNC);
	return rc ? rc : (int)D->cuFuncSetCacheConfig(q.e->obj, (CUfunc_cache)cfg);
}

int op_occ_max_blocks(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	int32_t bs = get_i32(r);
	uint64_t smem = get_u64(r);
	uint32_t flags = get_u32(r);
	int rc = req_enter(s, r, &q, HK_FUNC);
	if (rc)
		return rc;
	struct hentry *e = q.e;
	int n = 0;
	rc = D->cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, e->obj, bs, smem, flags);
	put_i32(out, n);
	return rc;
}
