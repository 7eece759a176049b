/* Device memory, copies and memset; host ("pinned") memory. */
#include "client.h"
#include "xfer_client.h"
#include "settings.h"
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <fcntl.h>
#include <unistd.h>
#include <string.h>

/* ---- the process's device allocations (sorted by base) ---- */

struct range {
	uintptr_t base;
	size_t size;
	void *owner;   /* struct rc_ctx * for device memory */
	unsigned flags; /* host allocations: CU_MEMHOSTALLOC_* */
	uint64_t shared; /* bit per same-host connection that has it mapped */
	size_t vsize;    /* host allocations: the whole mapping */
};

struct rtable {
	pthread_rwlock_t lock;
	struct range *r;
	size_t n, cap;
};

/* One table per server: two servers may hand out the same address. */
static struct rtable dev_ranges[RGPU_MAX_DEVICES] = {
	[0 ... RGPU_MAX_DEVICES - 1] = { .lock = PTHREAD_RWLOCK_INITIALIZER }
};
static struct rtable host_ranges = { .lock = PTHREAD_RWLOCK_INITIALIZER };

static ssize_t rt_find(const struct rtable *t, uintptr_t p)
{
	size_t lo = 0, hi = t->n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (t->r[mid].base <= p)
			lo = mid + 1;
		else
			hi = mid;
	}
	ssize_t i = (ssize_t)lo - 1;
	if (i >= 0 && p - t->r[i].base < (t->r[i].size ? t->r[i].size : 1))
		return i;
	return -1;
}

static int rt_add(struct rtable *t, uintptr_t base, size_t size, void *owner, unsigned flags)
{
	pthread_rwlock_wrlock(&t->lock);
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 64;
		struct range *r = realloc(t->r, cap * sizeof(*r));
		if (!r) {
			pthread_rwlock_unlock(&t->lock);
			return -1;
		}
		t->r = r;
		t->cap = cap;
	}
	size_t i = 0;
	while (i < t->n && t->r[i].base < base)
		i++;
	memmove(&t->r[i + 1], &t->r[i], (t->n - i) * sizeof(*t->r));
	t->r[i] = (struct range){ base, size, owner, flags, 0, size };
	t->n++;
	pthread_rwlock_unlock(&t->lock);
	return 0;
}

static int rt_del(struct rtable *t, uintptr_t base, struct range *out)
{
	pthread_rwlock_wrlock(&t->lock);
	ssize_t i = rt_find(t, base);
	if (i < 0 || t->r[i].base != base) {
		pthread_rwlock_unlock(&t->lock);
		return -1;
	}
	if (out)
		*out = t->r[i];
	memmove(&t->r[i], &t->r[i + 1], (t->n - (size_t)i - 1) * sizeof(*t->r));
	t->n--;
	pthread_rwlock_unlock(&t->lock);
	return 0;
}

static int rt_lookup(struct rtable *t, uintptr_t p, struct range *out)
{
	pthread_rwlock_rdlock(&t->lock);
	ssize_t i = rt_find(t, p);
	if (i >= 0)
		*out = t->r[i];
	pthread_rwlock_unlock(&t->lock);
	return i >= 0 ? 0 : -1;
}

/* The allocation holding p: on the current context's server first. */
static int dev_lookup(uintptr_t p, struct range *r, int *ci_out)
{
	struct rc_ctx *cur = rc_current();
	int first = cur ? rc_conn_index(cur->dev->conn) : 0;
	for (int k = 0; k < rc_nconn; k++) {
		int ci = (first + k) % rc_nconn;
		if (rt_lookup(&dev_ranges[ci], p, r) == 0) {
			if (ci_out)
				*ci_out = ci;
			return 0;
		}
	}
	return -1;
}

int rc_alloc_lookup(CUdeviceptr p, struct rc_ctx **ctx, CUdeviceptr *base, size_t *size)
{
	struct range r;
	if (dev_lookup((uintptr_t)p, &r, NULL) < 0)
		return -1;
	if (ctx)
		*ctx = r.owner;
	if (base)
		*base = r.base;
	if (size)
		*size = r.size;
	return 0;
}

/* ---- allocation ---- */

RC_EXPORT CUresult cuMemGetInfo_v2(size_t *fr, size_t *total)
{
	struct rc_ctx *c;
	CUresult rc = rc_need_ctx(&c);
	if (rc)
		return rc;
	if (!fr || !total)
		return CUDA_ERROR_INVALID_VALUE;
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	struct rd r;
	if ((rc = rc_call(c->dev->conn, RGPU_OP_MEM_GET_INFO, w, &r)))
		return rc;
	*fr = get_u64(&r);
	*total = get_u64(&r);
	return rd_ok(&r) ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN;
}

RC_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size)
{
	struct rc_ctx *c;
	CUresult rc = rc_need_ctx(&c);
	if (!rc)
		rc = rc_mem_ctx(&c);
	if (rc)
		return rc;
	if (!dptr || size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u64(w, size);
	struct rd r;
	if ((rc = rc_call(c->dev->conn, RGPU_OP_MEM_ALLOC, w, &r)))
		return rc;
	CUdeviceptr p = get_u64(&r);
	if (!rd_ok(&r))
		return CUDA_ERROR_UNKNOWN;
	if (rt_add(&dev_ranges[rc_conn_index(c->dev->conn)], p, size, c, 0) < 0) {
		w = rc_req();
		put_u64(w, c->h);
		put_u64(w, p);
		rc_call(c->dev->conn, RGPU_OP_MEM_FREE, w, &r);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*dptr = p;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width,
				      size_t height, unsigned int elem)
{
	if (!pitch || (elem != 4 && elem != 8 && elem != 16) || !width || !height)
		return CUDA_ERROR_INVALID_VALUE;
	size_t p, bytes;
	/* texture pitch alignment; sizes that wrap around are refused, not
	 * served with a smaller allocation */
	if (width > SIZE_MAX - 511 || __builtin_mul_overflow((width + 511) & ~(size_t)511, height, &bytes))
		return CUDA_ERROR_INVALID_VALUE;
	p = (width + 511) & ~(size_t)511;
	CUresult rc = cuMemAlloc_v2(dptr, bytes);
	if (!rc)
		*pitch = p;
	return rc;
}

/* Addresses graph alloc nodes gave, with their context's connection and
 * server handle: the graphs' launches allocate that memory, and cuMemFree
 * may free it after the graph is gone (graphMemoryFootprint). */
static struct gmem {
	uint64_t p, h;
	struct rc_conn *conn;
} *gmem;
static size_t ngmem, capgmem;
static pthread_mutex_t gmem_lock = PTHREAD_MUTEX_INITIALIZER;

/* gmem's index of p, or ngmem (gmem_lock held) */
static size_t gmem_find(uint64_t p)
{
	size_t i;
	for (i = 0; i < ngmem && gmem[i].p != p; i++)
		;
	return i;
}

void rc_graph_mem_note(struct rc_ctx *c, uint64_t p)
{
	pthread_mutex_lock(&gmem_lock);
	size_t i = gmem_find(p);
	if (i == ngmem && ngmem == capgmem) {
		size_t cap = capgmem ? 2 * capgmem : 16;
		struct gmem *g = realloc(gmem, cap * sizeof(*g));
		if (g) {
			gmem = g;
			capgmem = cap;
		}
	}
	if (i < capgmem) {
		gmem[i] = (struct gmem){ p, c->h, c->dev->conn };
		if (i == ngmem)
			ngmem++;
	}
	pthread_mutex_unlock(&gmem_lock);
}

struct rc_conn *rc_graph_mem_conn(uint64_t p, uint64_t *ctx_h)
{
	pthread_mutex_lock(&gmem_lock);
	size_t i = gmem_find(p);
	struct gmem g = i < ngmem ? gmem[i] : (struct gmem){ 0, 0, NULL };
	pthread_mutex_unlock(&gmem_lock);
	if (ctx_h)
		*ctx_h = g.h;
	return g.conn;
}

/* (kept: the graph's next launch allocates at the address again) */
static CUresult graph_mem_free(uint64_t p)
{
	uint64_t h;
	struct rc_conn *conn = rc_graph_mem_conn(p, &h);
	if (!conn)
		return CUDA_ERROR_INVALID_VALUE;
	struct wbuf *w = rc_req();
	put_u64(w, h);
	put_u64(w, p);
	struct rd rr;
	return rc_call(conn, RGPU_OP_MEM_FREE, w, &rr);
}

RC_EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!p)
		return CUDA_SUCCESS;
	size_t msize;
	if (rc_managed((void *)(uintptr_t)p) && rc_region_free((void *)(uintptr_t)p, &msize) == 0) {
		rc_umhint_forget((uintptr_t)p, msize);
		munmap((void *)(uintptr_t)p, msize);
		return CUDA_SUCCESS;
	}
	struct range r;
	int ci;
	if (dev_lookup(p, &r, &ci) < 0 || rt_del(&dev_ranges[ci], p, &r) < 0) {
		/* imported from another process's pool: unmapped once the
		 * device is done (cuMemFree synchronises) */
		if (rc_pool_import_is(p)) {
			rc = cuCtxSynchronize();
			return rc ? rc : rc_ipc_unmap(p);
		}
		return graph_mem_free(p);
	}
	/* (stream-ordered memory too: rgpud frees it once the device is done) */
	(void)rc_pool_alloc_forget(p);
	struct rc_ctx *c = r.owner;
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u64(w, p);
	struct rd rr;
	return rc_call(c->dev->conn, RGPU_OP_MEM_FREE, w, &rr);
}

RC_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	CUdeviceptr b;
	size_t s;
	if (rc_alloc_lookup(p, NULL, &b, &s) < 0)
		return CUDA_ERROR_NOT_FOUND;
	if (base)
		*base = b;
	if (size)
		*size = s;
	return CUDA_SUCCESS;
}

/* ---- copies ---- */

/* The context that owns p, else the current one. */
static CUresult ctx_for(CUdeviceptr p, struct rc_ctx **c)
{
	CUresult rc = rc_need_ctx(c);
	if (rc == CUDA_ERROR_INVALID_CONTEXT && rc_alloc_lookup(p, c, NULL, NULL) == 0)
		return CUDA_SUCCESS;
	if (rc)
		return rc;
	struct rc_ctx *owner;
	if (rc_alloc_lookup(p, &owner, NULL, NULL) == 0 && owner->dev->conn != (*c)->dev->conn)
		*c = owner; /* memory of another server: go there */
	return CUDA_SUCCESS;
}

/* Where stream-ordered work on device memory p goes: the stream's context
 * and server id, or (synchronous) the context that owns p. */
static CUresult where(CUdeviceptr p, CUstream s, int async, struct rc_ctx **c, uint64_t *sh)
{
	*sh = 0;
	return async ? rc_stream_resolve(s, c, sh) : ctx_for(p, c);
}

/* Host memory this process shares with a same-host server: attached on
 * first use, then the GPU copies straight from or to it. */
/* Whether [p, p+n) is host memory the same-host server conn has mapped
 * (attached when it was allocated: cuMemHostAlloc). */
static int host_shared(struct rc_conn *conn, const void *p, size_t n)
{
	int ci = rc_conn_index(conn);
	pthread_rwlock_rdlock(&host_ranges.lock);
	ssize_t i = rt_find(&host_ranges, (uintptr_t)p);
	const struct range *r = i >= 0 ? &host_ranges.r[i] : NULL;
	int ok = r && (r->shared & (1ull << ci)) && (uintptr_t)p - r->base + n <= r->size;
	pthread_rwlock_unlock(&host_ranges.lock);
	return ok;
}

/* The data path for a copy, by where the server is and what the host
 * buffer is. */
static const struct rc_xfer_provider *provider(struct rc_conn *conn, const void *host, size_t n)
{
	if (conn->local && n && host_shared(conn, host, n))
		return &rc_xfer_direct;
	return conn->ring ? &rc_xfer_ring : &rc_xfer_socket;
}

CUresult rc_htod_any(struct rc_ctx *c, uint64_t sh, CUdeviceptr dst, const void *src, size_t n,
		     int async)
{
	return rc_xfer_copy(provider(c->dev->conn, src, n), c, sh, dst, (void *)src, n, 0, async);
}

/* device-to-host copies through staging are synchronous */
CUresult rc_dtoh_any(struct rc_ctx *c, uint64_t sh, void *dst, CUdeviceptr src, size_t n, int async)
{
	const struct rc_xfer_provider *pv = provider(c->dev->conn, dst, n);
	int nowait = pv == &rc_xfer_direct && async;
	uint64_t mark = rc_idle_mark(c->dev->conn);
	CUresult rc = rc_xfer_copy(pv, c, sh, src, dst, n, 1, nowait);
	/* the data came back: the stream had finished everything before it
	 * (stream.c answers a synchronisation that follows) */
	if (!rc && !nowait)
		rc_stream_idle(c, NULL, sh, mark);
	return rc;
}

static CUresult dtod(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, int async);

/* A copy between host memory and device memory dev, either way. */
static CUresult host_dev(CUdeviceptr dev, void *host, size_t n, CUstream s, int async, int to_host)
{
	struct rc_ctx *c;
	uint64_t sh;
	void *dp = (void *)(uintptr_t)dev;
	if (rc_managed(dp)) {
		/* managed memory: the client's copy is the one to read or write */
		rc_coh_host_use(dp, n, !to_host);
		rc_coh_host_use(host, n, to_host);
		if (to_host)
			memmove(host, dp, n);
		else
			memmove(dp, host, n);
		return CUDA_SUCCESS;
	}
	CUresult rc = where(dev, s, async, &c, &sh);
	if (rc)
		return rc;
	if (!host && n)
		return CUDA_ERROR_INVALID_VALUE;
	if (async && rc_stream_capture_id(s)) {
		/* captured: a copy between device memory and the host memory's
		 * device-side address (the server would otherwise capture its
		 * own staging buffer), which the graph's launches keep coherent */
		uint64_t hd;
		uintptr_t held;
		if ((rc = rc_graph_host(c, host, n, to_host, &hd, &held)) ||
		    (rc = rc_capture_host(s, c, hd, dev, held)))
			return rc;
		return to_host ? dtod(hd, dev, n, s, 1) : dtod(dev, hd, n, s, 1);
	}
	rc_coh_host_use(host, n, to_host);
	return to_host ? rc_dtoh_any(c, sh, host, dev, n, async)
		       : rc_htod_any(c, sh, dev, host, n, async);
}

static CUresult htod(CUdeviceptr dst, const void *src, size_t n, CUstream s, int async)
{
	return host_dev(dst, (void *)src, n, s, async, 0);
}

static CUresult dtoh(void *dst, CUdeviceptr src, size_t n, CUstream s, int async)
{
	return host_dev(src, dst, n, s, async, 1);
}

/* Device-side work on n units at dst: where it goes, its device copy
 * marked used; *c NULL when there is nothing to do. */
static CUresult device_op(CUdeviceptr dst, size_t n, CUstream s, int async, struct rc_ctx **c,
			  uint64_t *sh)
{
	CUresult rc = where(dst, s, async, c, sh);
	if (!rc && n == 0)
		*c = NULL;
	else if (!rc && async && rc_stream_capture_id(s))
		rc = rc_capture_words(s, *c, &dst, sizeof(dst));
	else if (!rc)
		rc_coh_device_use(dst);
	return rc;
}

/* Device-side work in stream order: (context, stream, address, ...). */
static struct wbuf *stream_req(struct rc_ctx *c, uint64_t sh, CUdeviceptr dst)
{
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u64(w, sh);
	put_u64(w, dst);
	return w;
}

/* ... then whether to wait: an asynchronous one is posted, with no reply */
static CUresult stream_op(struct rc_ctx *c, uint16_t op, struct wbuf *w, int async)
{
	struct rd r;
	put_u32(w, !async);
	return async ? rc_post(c->dev->conn, op, w) : rc_call(c->dev->conn, op, w, &r);
}

static CUresult dtod(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, int async)
{
	struct rc_ctx *c;
	uint64_t sh;
	CUresult rc = device_op(dst, n, s, async, &c, &sh);
	if (rc || !c)
		return rc;
	if (async && rc_stream_capture_id(s)) {
		if ((rc = rc_capture_words(s, c, &src, sizeof(src))))
			return rc;
	} else {
		rc_coh_device_use(src);
	}
	struct rc_ctx *sc, *dc;
	if (rc_alloc_lookup(src, &sc, NULL, NULL) == 0 && sc->dev->conn != c->dev->conn) {
		/* GPUs of two servers (or a stream of a third): peer_remote.c */
		if (rc_alloc_lookup(dst, &dc, NULL, NULL) < 0)
			dc = c;
		return n ? rc_peer_remote(dst, dc, src, sc, n, async ? s : NULL, async ? c : NULL)
			 : CUDA_SUCCESS;
	}
	struct wbuf *w = stream_req(c, sh, dst);
	put_u64(w, src);
	put_u64(w, n);
	return stream_op(c, RGPU_OP_MEMCPY_DTOD, w, async);
}

RC_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) { return htod(dst, src, n, NULL, 0); }
RC_EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { return dtoh(dst, src, n, NULL, 0); }
RC_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) { return dtod(dst, src, n, NULL, 0); }
RC_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) { return htod(dst, src, n, s, 1); }
RC_EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) { return dtoh(dst, src, n, s, 1); }
RC_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { return dtod(dst, src, n, s, 1); }

/* Unified addressing: the direction follows from which side each pointer
 * lives on. */
static CUresult memcpy_any(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, int async)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	/* registered memory's device address: its host pages */
	dst = rc_host_alias(dst);
	src = rc_host_alias(src);
	int dd = rc_alloc_lookup(dst, NULL, NULL, NULL) == 0;
	int sd = rc_alloc_lookup(src, NULL, NULL, NULL) == 0;
	if (dd && sd)
		return dtod(dst, src, n, s, async);
	if (dd)
		return htod(dst, (const void *)(uintptr_t)src, n, s, async);
	if (sd)
		return dtoh((void *)(uintptr_t)dst, src, n, s, async);
	rc_coh_host_use((void *)(uintptr_t)src, n, 0);
	rc_coh_host_use((void *)(uintptr_t)dst, n, 1);
	memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) { return memcpy_any(dst, src, n, NULL, 0); }
RC_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { return memcpy_any(dst, src, n, s, 1); }

/* ---- memset ---- */

static CUresult memset_n(CUdeviceptr dst, unsigned v, unsigned esz, size_t count, CUstream s, int async)
{
	struct rc_ctx *c;
	uint64_t sh;
	CUresult rc = device_op(dst, count, s, async, &c, &sh);
	if (rc || !c)
		return rc;
	struct wbuf *w = stream_req(c, sh, dst);
	put_u32(w, v);
	put_u32(w, esz);
	put_u64(w, count);
	return stream_op(c, RGPU_OP_MEMSET, w, async);
}

RC_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { return memset_n(d, v, 1, n, NULL, 0); }
RC_EXPORT CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n) { return memset_n(d, v, 2, n, NULL, 0); }
RC_EXPORT CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n) { return memset_n(d, v, 4, n, NULL, 0); }
RC_EXPORT CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) { return memset_n(d, v, 1, n, s, 1); }
RC_EXPORT CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s) { return memset_n(d, v, 2, n, s, 1); }
RC_EXPORT CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s) { return memset_n(d, v, 4, n, s, 1); }

/* 2D memsets (cuBLAS's batched routines): one request, served by the
 * driver's 2D memset on the server */
static CUresult memset_2d(CUdeviceptr dst, size_t pitch, unsigned v, unsigned esz, size_t w, size_t h,
			  CUstream s, int async)
{
	struct rc_ctx *c;
	uint64_t sh;
	CUresult rc = device_op(dst, w && h ? w * esz : 0, s, async, &c, &sh);
	if (rc || !c)
		return rc;
	struct wbuf *wb = stream_req(c, sh, dst);
	put_u64(wb, pitch);
	put_u32(wb, v);
	put_u32(wb, esz);
	put_u64(wb, w);
	put_u64(wb, h);
	return stream_op(c, RGPU_OP_MEMSET2D, wb, async);
}

RC_EXPORT CUresult cuMemsetD2D8_v2(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h) { return memset_2d(d, p, v, 1, w, h, NULL, 0); }
RC_EXPORT CUresult cuMemsetD2D16_v2(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h) { return memset_2d(d, p, v, 2, w, h, NULL, 0); }
RC_EXPORT CUresult cuMemsetD2D32_v2(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h) { return memset_2d(d, p, v, 4, w, h, NULL, 0); }
RC_EXPORT CUresult cuMemsetD2D8Async(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h, CUstream s) { return memset_2d(d, p, v, 1, w, h, s, 1); }
RC_EXPORT CUresult cuMemsetD2D16Async(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h, CUstream s) { return memset_2d(d, p, v, 2, w, h, s, 1); }
RC_EXPORT CUresult cuMemsetD2D32Async(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h, CUstream s) { return memset_2d(d, p, v, 4, w, h, s, 1); }

/* Every server of this program is on its node (then they can share host
 * memory with it, live). */
static int all_local(void)
{
	for (int i = 0; i < rc_nconn; i++)
		if (!rc_conns[i].local)
			return 0;
	return rc_nconn > 0;
}

/* ---- host memory ----
 * "Pinned" memory is ordinary page-aligned memory here: the server pins its
 * own staging buffers, and the network copies from any host memory.
 * Kernels given its address see it through coherence.c (a device copy
 * kept at launches and synchronisations), except on a same-host server
 * that mapped it at the same address for its device (live: the GPU reads
 * and writes these pages as the program runs). */

RC_EXPORT CUresult cuMemHostAlloc(void **pp, size_t size, unsigned int flags)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!pp || size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	int local = 0;
	for (int i = 0; i < rc_nconn; i++)
		local |= rc_conns[i].local;
	/* In the shared address range, so that a device copy can sit at the
	 * same address if a kernel is handed it (coherence.c); memfd-backed
	 * when a same-host server can pin it for DMA.  With only same-host
	 * servers, beside that range, where they map it for their GPUs at the
	 * same address (live: no device copy at all). */
	int fd = local ? memfd_create("rgpu-pinned", MFD_CLOEXEC) : -1;
	size_t vsize = size;
	void *p = fd >= 0 && all_local() ? rc_va_alloc_live(&vsize, fd) : NULL;
	uint32_t want_live = p != NULL;
	if (!p) {
		vsize = size;
		p = rc_va_alloc(&vsize, fd);
	}
	if (!p) {
		if (fd >= 0)
			close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	/* a full region table fails the allocation: untracked, the memory
	 * would be unmapped short at cuMemFreeHost */
	if (rc_mapped_add(p, vsize) < 0) {
		munmap(p, vsize);
		if (fd >= 0)
			close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (rt_add(&host_ranges, (uintptr_t)p, size, NULL, flags) < 0) {
		rc_region_free(p, &vsize);
		munmap(p, vsize);
		if (fd >= 0)
			close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	uint64_t shared = 0;
	if (fd >= 0) {
		/* every same-host server maps it now; then the descriptor can go
		 * (one per allocation would run a program out of them) */
		for (int ci = 0; ci < rc_nconn; ci++) {
			if (!rc_conns[ci].local)
				continue;
			int live = 0;
			CUresult arc = rc_shm_attach(&rc_conns[ci], 2, fd, p, size, want_live, &live);
			if (arc == CUDA_SUCCESS) {
				shared |= 1ull << ci;
				if (live)
					rc_mapped_live(p, &rc_conns[ci]);
			} else if (arc == CUDA_ERROR_OUT_OF_MEMORY) {
				log_warn("rgpud at %s:%u did not share %zu bytes of pinned memory "
					 "(over its per-session cap, RGPUD_MAX_PINNED): copies "
					 "from it go through staging",
					 rc_conns[ci].host, rc_conns[ci].port, size);
			}
		}
		close(fd);
	}
	pthread_rwlock_wrlock(&host_ranges.lock);
	ssize_t i = rt_find(&host_ranges, (uintptr_t)p);
	host_ranges.r[i].shared = shared;
	host_ranges.r[i].vsize = vsize;
	pthread_rwlock_unlock(&host_ranges.lock);
	*pp = p;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t size) { return cuMemHostAlloc(pp, size, 0); }

RC_EXPORT CUresult cuMemFreeHost(void *p)
{
	struct range r;
	if (!p)
		return CUDA_SUCCESS; /* free(NULL), as the driver does */
	if (rt_lookup(&host_ranges, (uintptr_t)p, &r) < 0 || r.base != (uintptr_t)p ||
	    r.owner == (void *)1 || rt_del(&host_ranges, (uintptr_t)p, &r) < 0)
		return CUDA_ERROR_INVALID_VALUE;
	size_t vsize = r.vsize, rsize;
	rc_region_free(p, &rsize);
	for (int ci = 0; ci < rc_nconn; ci++) {
		if (!(r.shared & (1ull << ci)))
			continue;
		(void)rc_shm_detach(&rc_conns[ci], r.base);
	}
	munmap(p, vsize);
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuMemHostGetFlags(unsigned int *flags, void *p)
{
	struct range r;
	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (rt_lookup(&host_ranges, (uintptr_t)p, &r) < 0)
		return CUDA_ERROR_INVALID_VALUE;
	*flags = r.flags;
	return CUDA_SUCCESS;
}

/* A device mapping of registered memory: the device copy gets a window
 * address of its own (the host address is the application's, anywhere),
 * reserved here (PROT_NONE) so nothing else takes it, and is kept coherent
 * with the application's bytes like mapped memory (coherence.c): write
 * tracking protects the whole pages around them, but only those bytes
 * move (the rest of the pages belongs to others, e.g. the heap). */
static void page_span(void *p, size_t size, uintptr_t *base, size_t *span)
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	*base = (uintptr_t)p & ~(pg - 1);
	*span = (((uintptr_t)p + size + pg - 1) & ~(pg - 1)) - *base;
}

/* The mapping of this process that holds address p, as /proc/self/maps
 * describes it; 0, or -1 when none does. */
struct maps_entry {
	unsigned long lo, hi, offset, inode;
	unsigned maj, min;
	char perms[8];
	char path[4400];
};

static int maps_find(uintptr_t p, struct maps_entry *e)
{
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f)
		return -1;
	int found = -1;
	while (found < 0 && fgets(e->path, sizeof(e->path), f)) {
		int at = 0;
		if (sscanf(e->path, "%lx-%lx %7s %lx %x:%x %lu %n", &e->lo, &e->hi, e->perms, &e->offset,
			   &e->maj, &e->min, &e->inode, &at) >= 7 && p >= e->lo && p < e->hi) {
			memmove(e->path, e->path + at, strlen(e->path + at) + 1);
			e->path[strcspn(e->path, "\n")] = '\0';
			found = 0;
		}
	}
	fclose(f);
	return found;
}

/* The shared file whose pages [base, base+span) are (one MAP_SHARED
 * mapping of a named file, as NCCL's /dev/shm buffers): opened, with the
 * file offset of base; -1 when they are not such pages. */
static int shared_file_of(uintptr_t base, size_t span, uint64_t *off)
{
	struct maps_entry e;
	if (maps_find(base, &e) < 0 || base + span > e.hi || e.perms[3] != 's' || !e.inode ||
	    e.path[0] != '/')
		return -1;
	int fd = open(e.path, O_RDWR | O_CLOEXEC);
	struct stat st;
	if (fd >= 0 && (fstat(fd, &st) < 0 || st.st_ino != e.inode || major(st.st_dev) != e.maj ||
			minor(st.st_dev) != e.min)) {
		close(fd); /* another file by now */
		fd = -1;
	}
	if (fd >= 0)
		*off = e.offset + (base - e.lo);
	return fd;
}

/* Registered memory that is a shared file's pages, in a job whose servers
 * are all on this node: each maps the same pages at the device address
 * for its GPU, so kernels there reach them while they run (NCCL's
 * shared-memory transport needs that).  0, or -1: not done (the device
 * copy of register_mapped serves instead). */
static int register_live(void *p, size_t size, uintptr_t base, size_t span)
{
	uint64_t off = 0;
	int fd = all_local() ? shared_file_of(base, span, &off) : -1;
	if (fd < 0)
		return -1;
	size_t dsize = span;
	void *d = rc_va_alloc_live(&dsize, -1);
	if (d)
		mprotect(d, dsize, PROT_NONE); /* an address for the device, here reserved */
	int ci = 0; /* connections attached */
	CUresult rc = d ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
	while (!rc && ci < rc_nconn && !(rc = rc_shm_attach_file(&rc_conns[ci], fd, off, (uintptr_t)d, span)))
		ci++;
	close(fd);
	if (!rc && rc_registered_add((void *)base, span, (uintptr_t)d, (uintptr_t)p - base, size) < 0)
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	if (rc) {
		while (d && ci-- > 0)
			(void)rc_shm_detach(&rc_conns[ci], (uintptr_t)d);
		if (d)
			munmap(d, dsize);
		return -1;
	}
	for (int i = 0; i < rc_nconn; i++)
		rc_mapped_live((void *)base, &rc_conns[i]);
	return 0;
}

/* Registered memory [p, p+size) in the pages [base, base+span), given a
 * device copy: an address of the window reserved here for it (*d), which
 * coherence.c maps on the server when a launch first names it. */
static CUresult with_device_copy(const void *p, size_t size, uintptr_t base, size_t span,
				 uintptr_t *d)
{
	size_t dsize = span;
	void *v = rc_va_alloc(&dsize, -1);
	if (!v)
		return CUDA_ERROR_OUT_OF_MEMORY;
	mprotect(v, dsize, PROT_NONE);
	if (rc_registered_add((void *)base, span, (uintptr_t)v, (uintptr_t)p - base, size) < 0) {
		munmap(v, dsize);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*d = (uintptr_t)v;
	return CUDA_SUCCESS;
}

static CUresult register_mapped(void *p, size_t size)
{
	uintptr_t base;
	size_t span;
	page_span(p, size, &base, &span);
	if (rc_region_kind((void *)base) || rc_region_kind((void *)(base + span - 1)))
		return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
	if (register_live(p, size, base, span) == 0)
		return CUDA_SUCCESS;
	/* said once: where the program expects the GPU to see this memory
	 * while kernels run, it will not */
	static int said;
	if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
		log_info("cuMemHostRegister with a device mapping (%zu bytes at %p): the GPU sees "
			 "a copy made at launches and synchronisations, not these pages while it "
			 "runs (live on same-host servers: cuMemHostAlloc memory, and registered "
			 "pages of a shared file)", size, p);
	uintptr_t d;
	return with_device_copy(p, size, base, span, &d);
}

static void unregister_mapped(void *p, size_t size)
{
	uintptr_t base;
	size_t span, rsize;
	page_span(p, size, &base, &span);
	uintptr_t d = rc_registered_dev((void *)base);
	int live = d && rc_region_live((void *)base);
	if (d && rc_region_free((void *)base, &rsize) == 0) {
		for (int ci = 0; live && ci < rc_nconn; ci++)
			(void)rc_shm_detach(&rc_conns[ci], d);
		munmap((void *)d, (span + (2u << 20) - 1) / (2u << 20) * (2u << 20));
	}
}

/* ---- host memory in graphs ----
 * A graph's copy (a memcpy node, or a copy captured from a stream) that
 * names host memory runs on the server whenever the graph does, long
 * after the call: it gets a device-side address there.  rgpu's managed
 * and mapped memory have one (their own); registered memory its device
 * copy; pageable memory is registered for it here, with a device copy,
 * as cuMemHostRegister(DEVICEMAP) would, and the graph holds that
 * registration until it (and every executable made of it) is destroyed.
 * A launch of the graph sends the host's bytes first; a synchronisation
 * after it brings back what the graph wrote (coherence.c). */
static CUresult graph_host_at(const void *p, size_t n, int dst, uint64_t *dev, uintptr_t *held);

CUresult rc_graph_host(struct rc_ctx *c, const void *p, size_t n, int dst, uint64_t *dev,
		       uintptr_t *held)
{
	/* (mapped or registered memory's device copy is made at the first
	 * launch that names it: a graph's copy names it now, over TCP) */
	CUresult rc = graph_host_at(p, n, dst, dev, held);
	int kind = rc ? 0 : rc_region_kind(p);
	if ((kind == 2 || kind == 3) && (rc = rc_region_mirror(c, p)) && *held) {
		rc_graph_host_drop(*held);
		*held = 0;
	}
	return rc;
}

static CUresult graph_host_at(const void *p, size_t n, int dst, uint64_t *dev, uintptr_t *held)
{
	*held = 0;
	if (!n)
		n = 1;
	int kind = rc_region_kind(p);
	if (kind == 1 || kind == 2) {
		*dev = (uint64_t)(uintptr_t)p;
		return CUDA_SUCCESS;
	}
	uintptr_t base;
	int u = rc_region_auto_use(p, n, dst, &base, dev);
	if (u > 0) {
		*held = base;
		return CUDA_SUCCESS;
	}
	if (u == 0 && kind == 3) {
		/* the program's registration: inside it, or not at all */
		uint64_t a = rc_registered_dev(p), b = rc_registered_dev((const char *)p + n - 1);
		if (!a || b != a + n - 1)
			return CUDA_ERROR_INVALID_VALUE;
		*dev = a;
		return CUDA_SUCCESS;
	}
	if (u < 0 || rc_region_kind((const char *)p + n - 1)) {
		rc_unsupported("a graph's copy of host memory that overlaps, but exceeds, memory "
			       "another of a graph's copies or the program registered");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	/* registered for the graph: its own device copy of the pages around
	 * (which it may share with another such registration: only its
	 * bytes move, at every launch, and never write-protected) */
	size_t span;
	uintptr_t d;
	page_span((void *)p, n, &base, &span);
	CUresult rc = with_device_copy(p, n, base, span, &d);
	if (rc)
		return rc;
	rc_region_auto_init((void *)base, dst);
	*dev = (uint64_t)d + ((uintptr_t)p - base);
	*held = base;
	return CUDA_SUCCESS;
}

void rc_graph_host_drop(uintptr_t held)
{
	uintptr_t d = 0;
	size_t size = held ? rc_region_auto_unref(held, &d) : 0, rsize;
	/* (by its base: its first page may be another region's too) */
	if (size && rc_region_free((void *)held, &rsize) == 0)
		munmap((void *)d, (size + (2u << 20) - 1) / (2u << 20) * (2u << 20));
}

int rc_is_host_memory(const void *p)
{
	if (!p || rc_region_kind(p) || rc_alloc_lookup((CUdeviceptr)(uintptr_t)p, NULL, NULL, NULL) == 0)
		return 0;
	/* rgpu's own address ranges (managed, mapped, the application's VMM
	 * memory) are the device's; elsewhere, a page this process maps
	 * readable is the program's (a device address may lie in a range
	 * reserved here without access, so that nothing else takes it) */
	struct maps_entry e;
	return !rc_va_ours((uint64_t)(uintptr_t)p) && maps_find((uintptr_t)p, &e) == 0 &&
	       e.perms[0] == 'r';
}

RC_EXPORT CUresult cuMemHostRegister_v2(void *p, size_t size, unsigned int flags)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!p || !size)
		return CUDA_ERROR_INVALID_VALUE;
	struct range r;
	if (rt_lookup(&host_ranges, (uintptr_t)p, &r) == 0)
		return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
	if ((flags & CU_MEMHOSTREGISTER_DEVICEMAP) && (rc = register_mapped(p, size)))
		return rc;
	if (rt_add(&host_ranges, (uintptr_t)p, size, (void *)1, flags)) {
		if (flags & CU_MEMHOSTREGISTER_DEVICEMAP)
			unregister_mapped(p, size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuMemHostRegister(void *p, size_t size, unsigned int flags)
{
	return cuMemHostRegister_v2(p, size, flags);
}

RC_EXPORT CUresult cuMemHostUnregister(void *p)
{
	struct range r;
	if (rt_lookup(&host_ranges, (uintptr_t)p, &r) < 0 || r.owner != (void *)1)
		return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	rt_del(&host_ranges, (uintptr_t)p, NULL);
	if (r.flags & CU_MEMHOSTREGISTER_DEVICEMAP)
		unregister_mapped((void *)r.base, r.size);
	return CUDA_SUCCESS;
}

/* With unified addressing the device address of mapped host memory is its
 * host address: a device copy appears at that address when a kernel is
 * handed it (coherence.c). */
RC_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int flags)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	struct range r;
	if (!pdptr || flags || rt_lookup(&host_ranges, (uintptr_t)p, &r) < 0)
		return CUDA_ERROR_INVALID_VALUE;
	int kind = rc_region_kind(p);
	if (kind == 3) {
		*pdptr = rc_registered_dev(p);
		return CUDA_SUCCESS;
	}
	if (kind != 2)
		return CUDA_ERROR_INVALID_VALUE; /* registered without DEVICEMAP */
	*pdptr = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned int flags)
{
	struct rc_ctx *c;
	CUresult rc = rc_need_ctx(&c);
	if (!rc)
		rc = rc_mem_ctx(&c);
	if (rc)
		return rc;
	if (!dptr || !size || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
		return CUDA_ERROR_INVALID_VALUE;
	void *p;
	if ((rc = rc_managed_alloc(c, size, &p)))
		return rc;
	*dptr = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

/* ---- pointer attributes ---- */

RC_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr p)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!data)
		return CUDA_ERROR_INVALID_VALUE;
	struct range r;
	struct rc_ctx *mctx = NULL;
	/* managed memory is the device's and the host's, at one address */
	int managed = rc_managed_span(p, &r.base, &r.size, &mctx) == 0;
	int dev = managed || dev_lookup(p, &r, NULL) == 0;
	int host = managed || (!dev && rt_lookup(&host_ranges, p, &r) == 0);
	if (!dev && !host)
		return CUDA_ERROR_INVALID_VALUE;
	struct rc_ctx *c = managed ? mctx : dev ? r.owner : rc_current();
	switch (attr) {
	case CU_POINTER_ATTRIBUTE_CONTEXT:
		*(CUcontext *)data = (CUcontext)c;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		*(unsigned *)data = dev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
		if (!dev)
			return CUDA_ERROR_INVALID_VALUE;
		*(CUdeviceptr *)data = p;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_HOST_POINTER:
		if (dev && !managed)
			return CUDA_ERROR_INVALID_VALUE;
		*(void **)data = (void *)(uintptr_t)p;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_IS_MANAGED:
		*(unsigned *)data = managed;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
		if (!c)
			return CUDA_ERROR_INVALID_CONTEXT;
		*(int *)data = c->ordinal;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
		*(CUdeviceptr *)data = r.base;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
		*(size_t *)data = r.size;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MAPPED:
		*(unsigned *)data = dev;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_BUFFER_ID:
		/* unique per allocation while it lives: its base address */
		*(unsigned long long *)data = r.base;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
		/* copies through rgpu are ordered by the one connection anyway */
		*(int *)data = 1;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
	case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE: /* the GPU is elsewhere */
	case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
		*(int *)data = 0;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
		/* memory from cuMemAlloc is exported with the VMM API's
		 * handles only where it was created for them */
		*(unsigned long long *)data = CU_MEM_HANDLE_TYPE_NONE;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
		/* the device reads and writes what this process allocated or
		 * registered with it */
		*(unsigned *)data = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
		/* not tracked per range: as for memory from no pool */
		*(CUmemoryPool *)data = NULL;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
		*(CUdeviceptr *)data = r.base;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
		*(size_t *)data = r.size;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
		*(unsigned long long *)data = r.base;
		return CUDA_SUCCESS;
	default:
		rc_unsupported("cuPointerGetAttribute for this attribute");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
}

/* Only SYNC_MEMOPS may be set: copies through rgpu are ordered on the one
 * connection whatever it says, so it is checked and taken. */
RC_EXPORT CUresult cuPointerSetAttribute(const void *value, CUpointer_attribute attr, CUdeviceptr p)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!value || attr != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS)
		return CUDA_ERROR_INVALID_VALUE;
	struct range r;
	if (dev_lookup(p, &r, NULL) < 0 && !rc_managed((const void *)(uintptr_t)p))
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attrs, void **data,
					  CUdeviceptr p)
{
	if (!attrs || !data)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < n; i++) {
		CUresult rc = cuPointerGetAttribute(data[i], attrs[i], p);
		/* per the driver: unknown pointers give zeroed answers, not errors */
		if (rc == CUDA_ERROR_INVALID_VALUE && data[i]) {
			int wide = attrs[i] == CU_POINTER_ATTRIBUTE_CONTEXT ||
				   attrs[i] == CU_POINTER_ATTRIBUTE_DEVICE_POINTER ||
				   attrs[i] == CU_POINTER_ATTRIBUTE_HOST_POINTER ||
				   attrs[i] == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR ||
				   attrs[i] == CU_POINTER_ATTRIBUTE_RANGE_SIZE ||
				   attrs[i] == CU_POINTER_ATTRIBUTE_BUFFER_ID ||
				   attrs[i] == CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES ||
				   attrs[i] == CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE ||
				   attrs[i] == CU_POINTER_ATTRIBUTE_MAPPING_SIZE ||
				   attrs[i] == CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR ||
				   attrs[i] == CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID;
			memset(data[i], 0, wide ? 8 : 4);
		}
		else if (rc && rc != CUDA_ERROR_NOT_SUPPORTED)
			return rc;
	}
	return CUDA_SUCCESS;
}

/* ---- device memory made elsewhere (vmm.c, pool.c): known for cuMemcpy's
 * direction and pointer queries ---- */

int rc_devrange_add(struct rc_conn *conn, CUdeviceptr base, size_t size, struct rc_ctx *owner)
{
	return rt_add(&dev_ranges[rc_conn_index(conn)], base, size, owner, 0);
}

void rc_devrange_del(struct rc_conn *conn, CUdeviceptr base)
{
	rt_del(&dev_ranges[rc_conn_index(conn)], base, NULL);
}

void rc_devranges_drop_owner(struct rc_conn *conn, struct rc_ctx *owner)
{
	struct rtable *t = &dev_ranges[rc_conn_index(conn)];
	pthread_rwlock_wrlock(&t->lock);
	size_t k = 0;
	for (size_t i = 0; i < t->n; i++)
		if (t->r[i].owner != owner)
			t->r[k++] = t->r[i];
	t->n = k;
	pthread_rwlock_unlock(&t->lock);
}
