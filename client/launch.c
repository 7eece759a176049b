/* Kernel launches, function attributes and occupancy. */
#include "client.h"
#include "log.h"
#include "stats.h"

#include <stdlib.h>
#include <string.h>

/* Launch attributes travel as values; those holding a handle (events,
 * graph nodes) are not served yet. */
static CUresult put_attrs(struct wbuf *w, const CUlaunchAttribute *a, unsigned n)
{
	if (n > 16)
		return CUDA_ERROR_INVALID_VALUE;
	put_u32(w, n);
	for (unsigned i = 0; i < n; i++) {
		switch (a[i].id) {
		case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT:
		case CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT:
		case CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE:
			rc_unsupported("cuLaunchKernelEx with event or graph-node attributes");
			return CUDA_ERROR_NOT_SUPPORTED;
		default:
			break;
		}
		put_u32(w, (uint32_t)a[i].id);
		put_raw(w, &a[i].value, sizeof(a[i].value));
	}
	return CUDA_SUCCESS;
}

static CUresult launch(CUfunction fn, const unsigned g[3], const unsigned b[3], unsigned shmem,
		       CUstream s, void **params, void **extra, const CUlaunchAttribute *attrs,
		       unsigned nattrs)
{
	struct rc_func *f;
	CUresult rc = rc_func_resolve(fn, &f);
	if (rc)
		return rc;
	struct rc_ctx *c;
	uint64_t sh;
	if ((rc = rc_stream_resolve(s, &c, &sh)))
		return rc;
	if (c != f->ctx)
		return CUDA_ERROR_INVALID_HANDLE;
	/* launches get no reply: catch configuration errors here, as the
	 * driver does synchronously */
	const int *da = c->dev->attrs;
	unsigned long long threads = (unsigned long long)b[0] * b[1] * b[2];
	if (!g[0] || !g[1] || !g[2] || !threads ||
	    threads > (unsigned)da[CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK] ||
	    b[0] > (unsigned)da[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X] ||
	    b[1] > (unsigned)da[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y] ||
	    b[2] > (unsigned)da[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z] ||
	    g[0] > (unsigned)da[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X] ||
	    g[1] > (unsigned)da[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y] ||
	    g[2] > (unsigned)da[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z] ||
	    shmem > (unsigned)da[CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN])
		return CUDA_ERROR_INVALID_VALUE;
	const struct rc_layout *l = &f->layout;
	/* pack the arguments at the offsets the server's driver reported */
	uint8_t small[1024];
	const void *buf = small;
	size_t len = l->total;
	uint8_t *heap = NULL;
	if (params) {
		if (len > sizeof(small) && !(heap = malloc(len)))
			return CUDA_ERROR_OUT_OF_MEMORY;
		uint8_t *p = heap ? heap : small;
		memset(p, 0, len);
		for (uint32_t i = 0; i < l->n; i++) {
			if (!params[i]) {
				free(heap);
				return CUDA_ERROR_INVALID_VALUE;
			}
			memcpy(p + l->off[i], params[i], l->size[i]);
		}
		buf = p;
	} else if (extra) {
		const void *eb;
		size_t es;
		if (rc_launch_extra(extra, &eb, &es))
			return CUDA_ERROR_INVALID_VALUE;
		buf = eb;
		len = es;
		if (es < l->total) {
			/* a buffer shorter than the parameters, as the driver
			 * takes it (NCCL passes only the bytes its kernel reads
			 * of a 4 KiB argument): the rest reads as zeros */
			if (l->total > sizeof(small) && !(heap = malloc(l->total)))
				return CUDA_ERROR_OUT_OF_MEMORY;
			uint8_t *p = heap ? heap : small;
			memcpy(p, eb, es);
			memset(p + es, 0, l->total - es);
			buf = p;
			len = l->total;
		}
	} else if (l->n) {
		return CUDA_ERROR_INVALID_VALUE;
	}
	/* release: the kernel sees managed and mapped memory as the host
	 * left it (captured: at each of the graph's launches) */
	if ((rc = rc_stream_capture_id(s) ? rc_capture_words(s, c, buf, len)
					  : rc_coh_launch(c, sh, buf, len))) {
		free(heap);
		return rc;
	}
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u64(w, f->h);
	for (int i = 0; i < 3; i++)
		put_u32(w, g[i]);
	for (int i = 0; i < 3; i++)
		put_u32(w, b[i]);
	put_u32(w, shmem);
	put_u64(w, sh);
	put_bytes(w, buf, len);
	free(heap);
	if (nattrs && (rc = put_attrs(w, attrs, nattrs)))
		return rc;
	return rc_post(c->dev->conn, RGPU_OP_LAUNCH, w);
}

RC_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
				  unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
				  void **extra)
{
	const unsigned g[3] = { gx, gy, gz }, b[3] = { bx, by, bz };
	return launch(f, g, b, shmem, s, params, extra, NULL, 0);
}

RC_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *cfg, CUfunction f, void **params, void **extra)
{
	if (!cfg || (cfg->numAttrs && !cfg->attrs))
		return CUDA_ERROR_INVALID_VALUE;
	const unsigned g[3] = { cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ };
	const unsigned b[3] = { cfg->blockDimX, cfg->blockDimY, cfg->blockDimZ };
	return launch(f, g, b, cfg->sharedMemBytes, cfg->hStream, params, extra, cfg->attrs,
		      cfg->numAttrs);
}

/* Function attribute caches: filled from the server on first use, dropped
 * when an attribute is set.  attrs_lock guards every rc_func's attrs,
 * attrs_valid and attrs_gen; the call itself runs without it, and a reply
 * that crossed a cuFuncSetAttribute (attrs_gen moved) is used but not
 * cached. */
static pthread_mutex_t attrs_lock = PTHREAD_MUTEX_INITIALIZER;

static CUresult attrs_fetch(struct rc_func *f, int out[CU_FUNC_ATTRIBUTE_MAX])
{
	pthread_mutex_lock(&attrs_lock);
	int valid = f->attrs_valid;
	unsigned gen = f->attrs_gen;
	if (valid)
		memcpy(out, f->attrs, sizeof(f->attrs));
	pthread_mutex_unlock(&attrs_lock);
	if (valid)
		return CUDA_SUCCESS;
	struct wbuf *w = rc_req();
	put_u64(w, f->ctx->h);
	put_u64(w, f->h);
	struct rd r;
	CUresult rc = rc_call(f->ctx->dev->conn, RGPU_OP_FUNC_GET_ATTRS, w, &r);
	if (rc)
		return rc;
	memset(out, 0, sizeof(int) * CU_FUNC_ATTRIBUTE_MAX);
	uint32_t n = get_u32(&r);
	for (uint32_t a = 0; a < n && rd_ok(&r); a++) {
		int32_t v = get_i32(&r);
		if (a < CU_FUNC_ATTRIBUTE_MAX)
			out[a] = v;
	}
	if (!rd_ok(&r))
		return CUDA_ERROR_UNKNOWN;
	pthread_mutex_lock(&attrs_lock);
	if (f->attrs_gen == gen) {
		memcpy(f->attrs, out, sizeof(f->attrs));
		f->attrs_valid = 1;
	}
	pthread_mutex_unlock(&attrs_lock);
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction fn)
{
	struct rc_func *f;
	CUresult rc = rc_func_resolve(fn, &f);
	if (rc)
		return rc;
	if (!v || (int)a < 0 || a >= CU_FUNC_ATTRIBUTE_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	int attrs[CU_FUNC_ATTRIBUTE_MAX];
	if ((rc = attrs_fetch(f, attrs)))
		return rc;
	*v = attrs[a];
	return CUDA_SUCCESS;
}

_Static_assert(CU_FUNC_ATTRIBUTE_MAX <= 32, "set_known holds one bit per attribute");

/* 1 when cuFuncSetAttribute(f, a, v) needs no reply: the dynamic shared
 * memory bound is checked here as the driver checks it (with the static
 * size, against the opt-in maximum), so it goes in order with the
 * launches; attrs_lock held, f's attributes valid. */
static int set_checked_here(const struct rc_func *f, CUfunction_attribute a, int v)
{
	const int *da = f->ctx->dev->attrs;
	return a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES && v >= 0 &&
	       (long long)v + f->attrs[CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES] <=
		       (long long)da[CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN];
}

RC_EXPORT CUresult cuFuncSetAttribute(CUfunction fn, CUfunction_attribute a, int v)
{
	struct rc_func *f;
	CUresult rc = rc_func_resolve(fn, &f);
	if (rc)
		return rc;
	if ((int)a < 0 || a >= CU_FUNC_ATTRIBUTE_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	/* libraries set an attribute before every launch (PyTorch's
	 * attention and GEMM kernels: 24 round trips per training step);
	 * setting it again to the value it has changes nothing */
	pthread_mutex_lock(&attrs_lock);
	int same = (f->set_known >> a & 1) && f->set_val[a] == v;
	int valid = f->attrs_valid;
	pthread_mutex_unlock(&attrs_lock);
	if (same) {
		rc_stats_local(RGPU_OP_FUNC_SET_ATTR);
		return CUDA_SUCCESS;
	}
	int tmp[CU_FUNC_ATTRIBUTE_MAX];
	if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES && !valid)
		(void)attrs_fetch(f, tmp); /* once per function; failing, a round trip */
	pthread_mutex_lock(&attrs_lock);
	int post = f->attrs_valid && set_checked_here(f, a, v);
	pthread_mutex_unlock(&attrs_lock);
	struct wbuf *w = rc_req();
	put_u64(w, f->ctx->h);
	put_u64(w, f->h);
	put_u32(w, (uint32_t)a);
	put_i32(w, v);
	struct rd r;
	if (post)
		rc = rc_post(f->ctx->dev->conn, RGPU_OP_FUNC_SET_ATTR, w);
	else
		rc = rc_call(f->ctx->dev->conn, RGPU_OP_FUNC_SET_ATTR, w, &r);
	pthread_mutex_lock(&attrs_lock);
	f->attrs_gen++; /* occupancy answers go */
	if (!rc && a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES && f->attrs_valid)
		f->attrs[a] = v; /* reads back as set; moves nothing else */
	else
		f->attrs_valid = 0; /* some attributes move others */
	if (!rc) {
		f->set_known |= 1u << a;
		f->set_val[a] = v;
	} else {
		f->set_known &= ~(1u << a);
	}
	pthread_mutex_unlock(&attrs_lock);
	return rc;
}

RC_EXPORT CUresult cuFuncSetCacheConfig(CUfunction fn, CUfunc_cache cfg)
{
	struct rc_func *f;
	CUresult rc = rc_func_resolve(fn, &f);
	if (rc)
		return rc;
	struct wbuf *w = rc_req();
	put_u64(w, f->ctx->h);
	put_u64(w, f->h);
	put_u32(w, (uint32_t)cfg);
	struct rd r;
	rc = rc_call(f->ctx->dev->conn, RGPU_OP_FUNC_SET_CACHE, w, &r);
	/* the preference moves the shared memory split: occupancy answers go */
	pthread_mutex_lock(&attrs_lock);
	f->attrs_gen++;
	f->attrs_valid = 0;
	pthread_mutex_unlock(&attrs_lock);
	return rc;
}

/* Occupancy depends on the function (its attributes: attrs_gen), the
 * device and the arguments only: recent answers are kept per function. */
static CUresult occ_blocks(int *n, struct rc_func *f, int bs, size_t smem, unsigned flags)
{
	pthread_mutex_lock(&attrs_lock);
	unsigned gen = f->attrs_gen;
	for (unsigned i = 0; i < sizeof(f->occ) / sizeof(f->occ[0]); i++) {
		const struct rc_occ *o = &f->occ[i];
		if (o->valid && o->gen == gen && o->bs == bs && o->smem == smem && o->flags == flags) {
			*n = o->n;
			pthread_mutex_unlock(&attrs_lock);
			rc_stats_local(RGPU_OP_OCC_MAX_BLOCKS);
			return CUDA_SUCCESS;
		}
	}
	pthread_mutex_unlock(&attrs_lock);
	struct wbuf *w = rc_req();
	put_u64(w, f->ctx->h);
	put_u64(w, f->h);
	put_i32(w, bs);
	put_u64(w, smem);
	put_u32(w, flags);
	struct rd r;
	CUresult rc = rc_call(f->ctx->dev->conn, RGPU_OP_OCC_MAX_BLOCKS, w, &r);
	if (rc)
		return rc;
	int v = get_i32(&r);
	if (!rd_ok(&r))
		return CUDA_ERROR_UNKNOWN;
	*n = v;
	pthread_mutex_lock(&attrs_lock);
	if (f->attrs_gen == gen) {
		struct rc_occ *o = &f->occ[f->occ_next++ % (sizeof(f->occ) / sizeof(f->occ[0]))];
		*o = (struct rc_occ){ .bs = bs, .n = v, .flags = flags, .gen = gen, .smem = smem,
				      .valid = 1 };
	}
	pthread_mutex_unlock(&attrs_lock);
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, CUfunction fn, int bs,
									size_t smem, unsigned int flags)
{
	struct rc_func *f;
	CUresult rc = rc_func_resolve(fn, &f);
	if (rc)
		return rc;
	if (!n)
		return CUDA_ERROR_INVALID_VALUE;
	return occ_blocks(n, f, bs, smem, flags);
}

RC_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction fn, int bs, size_t smem)
{
	return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(n, fn, bs, smem, 0);
}

/* Searched here rather than on the server: the dynamic shared memory
 * callback is client code. */
RC_EXPORT CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *min_grid, int *block, CUfunction fn,
							     CUoccupancyB2DSize smem_fn, size_t smem,
							     int limit, unsigned int flags)
{
	struct rc_func *f;
	CUresult rc = rc_func_resolve(fn, &f);
	if (rc)
		return rc;
	if (!min_grid || !block)
		return CUDA_ERROR_INVALID_VALUE;
	int fa[CU_FUNC_ATTRIBUTE_MAX];
	if ((rc = attrs_fetch(f, fa)))
		return rc;
	const int *da = f->ctx->dev->attrs;
	int warp = da[CU_DEVICE_ATTRIBUTE_WARP_SIZE] ? da[CU_DEVICE_ATTRIBUTE_WARP_SIZE] : 32;
	int max = fa[CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK];
	if (limit > 0 && limit < max)
		max = limit;
	int best_bs = 0, best_occ = 0, best_blocks = 0;
	for (int bs = (max / warp) * warp; bs > 0; bs -= warp) {
		size_t sm = smem_fn ? smem_fn(bs) : smem;
		int n = 0;
		if ((rc = occ_blocks(&n, f, bs, sm, flags)))
			return rc;
		if (n * bs > best_occ) {
			best_occ = n * bs;
			best_bs = bs;
			best_blocks = n;
		}
		if (best_occ >= da[CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR])
			break;
	}
	*block = best_bs;
	*min_grid = best_blocks * da[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT];
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuOccupancyMaxPotentialBlockSize(int *min_grid, int *block, CUfunction fn,
						    CUoccupancyB2DSize smem_fn, size_t smem, int limit)
{
	return cuOccupancyMaxPotentialBlockSizeWithFlags(min_grid, block, fn, smem_fn, smem, limit, 0);
}

RC_EXPORT CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *bytes, CUfunction fn, int nblocks,
							   int blocksize)
{
	struct rc_func *f;
	CUresult rc = rc_func_resolve(fn, &f);
	if (rc)
		return rc;
	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	struct wbuf *w = rc_req();
	put_u64(w, f->ctx->h);
	put_u64(w, f->h);
	put_i32(w, nblocks);
	put_i32(w, blocksize);
	struct rd r;
	if ((rc = rc_call(f->ctx->dev->conn, RGPU_OP_OCC_DYN_SMEM, w, &r)))
		return rc;
	*bytes = get_u64(&r);
	return CUDA_SUCCESS;
}

static CUresult occ_cluster(int *n, CUfunction fn, const CUlaunchConfig *cfg, uint32_t op)
{
	struct rc_func *f;
	CUresult rc = rc_func_resolve(fn, &f);
	if (rc)
		return rc;
	if (!n || !cfg || (cfg->numAttrs && !cfg->attrs))
		return CUDA_ERROR_INVALID_VALUE;
	struct wbuf *w = rc_req();
	put_u64(w, f->ctx->h);
	put_u64(w, f->h);
	put_u32(w, cfg->gridDimX);
	put_u32(w, cfg->gridDimY);
	put_u32(w, cfg->gridDimZ);
	put_u32(w, cfg->blockDimX);
	put_u32(w, cfg->blockDimY);
	put_u32(w, cfg->blockDimZ);
	put_u32(w, cfg->sharedMemBytes);
	if ((rc = put_attrs(w, cfg->attrs, cfg->numAttrs)))
		return rc;
	struct rd r;
	if ((rc = rc_call(f->ctx->dev->conn, op, w, &r)))
		return rc;
	*n = get_i32(&r);
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuOccupancyMaxActiveClusters(int *n, CUfunction fn, const CUlaunchConfig *cfg)
{
	return occ_cluster(n, fn, cfg, RGPU_OP_OCC_MAX_CLUSTERS);
}

RC_EXPORT CUresult cuOccupancyMaxPotentialClusterSize(int *n, CUfunction fn, const CUlaunchConfig *cfg)
{
	return occ_cluster(n, fn, cfg, RGPU_OP_OCC_CLUSTER_SIZE);
}

/* Kernel (context-independent) attributes act on the kernel's function in
 * the current context, which must be on device dev. */
static CUresult kernel_func(CUkernel k, CUdevice dev, struct rc_func **f)
{
	CUresult rc = rc_func_resolve((CUfunction)k, f);
	if (!rc && (*f)->ctx->ordinal != dev)
		rc = CUDA_ERROR_INVALID_DEVICE;
	return rc;
}

RC_EXPORT CUresult cuKernelGetAttribute(int *v, CUfunction_attribute a, CUkernel k, CUdevice dev)
{
	struct rc_func *f;
	CUresult rc = kernel_func(k, dev, &f);
	return rc ? rc : cuFuncGetAttribute(v, a, (CUfunction)f);
}

RC_EXPORT CUresult cuKernelSetAttribute(CUfunction_attribute a, int v, CUkernel k, CUdevice dev)
{
	struct rc_func *f;
	CUresult rc = kernel_func(k, dev, &f);
	return rc ? rc : cuFuncSetAttribute((CUfunction)f, a, v);
}

RC_EXPORT CUresult cuKernelSetCacheConfig(CUkernel k, CUfunc_cache cfg, CUdevice dev)
{
	struct rc_func *f;
	CUresult rc = kernel_func(k, dev, &f);
	return rc ? rc : cuFuncSetCacheConfig((CUfunction)f, cfg);
}
