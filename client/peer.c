/*
 * Several GPUs in one process: peer queries, peer access and peer copies.
 *
 * GPUs of one server share the client's connection to it; their peer
 * access and copies are served there (daemon/ops_peer.c), GPU to GPU, and
 * never pass through the client.  GPUs of different servers cannot reach
 * each other: cuDeviceCanAccessPeer says 0, peer access is refused, and a
 * peer copy between them goes through this process (a server-to-server
 * path is not built yet; see docs/multi-gpu.md).
 */
#include "client.h"
#include "log.h"

#include <stdlib.h>
#include <string.h>

struct peer_info {
	int known;
	int can, rank, atomics;
};
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct peer_info info[RGPU_MAX_DEVICES][RGPU_MAX_DEVICES];

static CUresult query(CUdevice dev, CUdevice peer, struct peer_info *out)
{
	struct rc_dev *a, *b;
	CUresult rc = rc_dev_get(dev, &a);
	if (!rc)
		rc = rc_dev_get(peer, &b);
	if (rc)
		return rc;
	memset(out, 0, sizeof(*out));
	if (dev == peer || a->conn != b->conn)
		return CUDA_SUCCESS;
	pthread_mutex_lock(&lock);
	struct peer_info *pi = &info[dev][peer];
	if (pi->known) {
		*out = *pi;
		pthread_mutex_unlock(&lock);
		return CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&lock);
	struct wbuf *w = rc_req();
	put_u32(w, a->gpu);
	put_u32(w, b->gpu);
	struct rd r;
	if ((rc = rc_call(a->conn, RGPU_OP_PEER_QUERY, w, &r)))
		return rc;
	struct peer_info n = { 1, (int)get_u32(&r), get_i32(&r), (int)get_u32(&r) };
	if (!rd_ok(&r))
		return CUDA_ERROR_UNKNOWN;
	pthread_mutex_lock(&lock);
	*pi = n;
	pthread_mutex_unlock(&lock);
	*out = n;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
	struct peer_info pi;
	CUresult rc = query(dev, peer, &pi);
	if (rc)
		return rc;
	if (!can)
		return CUDA_ERROR_INVALID_VALUE;
	*can = pi.can;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attr, CUdevice src, CUdevice dst)
{
	struct peer_info pi;
	CUresult rc = query(src, dst, &pi);
	if (rc)
		return rc;
	if (!value || src == dst)
		return !value ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_DEVICE;
	switch (attr) {
	case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK:
		*value = pi.rank;
		return CUDA_SUCCESS;
	case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED:
		*value = pi.can;
		return CUDA_SUCCESS;
	case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED:
		*value = pi.atomics;
		return CUDA_SUCCESS;
	case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED:
		*value = 0; /* rgpu serves no CUDA arrays */
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

static CUresult peer_access(CUcontext peer, int enable)
{
	struct rc_ctx *c, *p;
	CUresult rc = rc_need_ctx(&c);
	if (!rc)
		rc = rc_obj(peer, RC_CTX, &p);
	if (rc)
		return rc == CUDA_ERROR_INVALID_HANDLE ? CUDA_ERROR_INVALID_CONTEXT : rc;
	/* (the runtime enables access to a device's primary context that
	 * nothing has run in yet: simpleP2P) */
	if ((rc = rc_ctx_activate(p)))
		return rc;
	if (p->dev->conn != c->dev->conn) {
		log_warn("peer access between GPUs of different servers (%s:%u and %s:%u) is not "
			 "supported", c->dev->conn->host, c->dev->conn->port, p->dev->conn->host,
			 p->dev->conn->port);
		return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
	}
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u64(w, p->h);
	put_u32(w, enable);
	struct rd r;
	return rc_call(c->dev->conn, RGPU_OP_PEER_ACCESS, w, &r);
}

RC_EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	return peer_access(peer, 1);
}

RC_EXPORT CUresult cuCtxDisablePeerAccess(CUcontext peer) { return peer_access(peer, 0); }

/* a relayed copy goes in pieces of this size: its buffer stays bounded */
#define RELAY_PIECE (64u << 20)

/* A peer copy between GPUs of different servers, relayed through this
 * process in pieces: each read from the source's server, then written to
 * the destination's.  Ordered as CUDA orders it: a copy on a stream comes
 * after that stream's work (the stream of either context; the other GPU's
 * work is waited for whole), a synchronous one after both legacy
 * streams'; the bytes of an asynchronous write are taken before it
 * returns (pageable memory), so the piece buffer is free again at once. */
CUresult rc_peer_relay(CUdeviceptr dst, struct rc_ctx *d, CUdeviceptr src, struct rc_ctx *sc, size_t n,
		       CUstream s, struct rc_ctx *stream_ctx)
{
	if (s && rc_stream_capture_id(s)) {
		/* (bytes through this process are no node of a graph) */
		rc_unsupported("capturing a copy between GPUs of two servers");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	static int warned;
	if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
		log_warn("peer copies between GPUs of different servers (%s:%u and %s:%u) go through "
			 "this process: a server-to-server path is not built yet",
			 d->dev->conn->host, d->dev->conn->port, sc->dev->conn->host,
			 sc->dev->conn->port);
	CUcontext cur = NULL;
	CUresult rc = cuCtxGetCurrent(&cur);
	if (rc)
		return rc;
	int on_src = stream_ctx == sc, on_dst = stream_ctx == d;
	/* a stream of neither context: its work first, then as a
	 * synchronous copy */
	if (stream_ctx && !on_src && !on_dst && (rc = cuStreamSynchronize(s)))
		return rc;
	size_t piece = n < RELAY_PIECE ? n : RELAY_PIECE;
	uint8_t *buf = malloc(piece);
	if (!buf)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t off = 0; off < n && !rc;) {
		size_t k = n - off < piece ? n - off : piece;
		if (!(rc = cuCtxSetCurrent((CUcontext)sc))) {
			if (on_src) {
				if (!(rc = cuMemcpyDtoHAsync_v2(buf, src + off, k, s)))
					rc = cuStreamSynchronize(s);
			} else {
				/* the source GPU's work, all of it, before the
				 * first read (a stream of the destination
				 * names no work of the source's) */
				if (!off && on_dst)
					rc = cuCtxSynchronize();
				if (!rc)
					rc = cuMemcpyDtoH_v2(buf, src + off, k);
			}
		}
		if (!rc && !(rc = cuCtxSetCurrent((CUcontext)d)))
			rc = on_dst ? cuMemcpyHtoDAsync_v2(dst + off, buf, k, s)
				    : cuMemcpyHtoD_v2(dst + off, buf, k);
		off += k;
	}
	free(buf);
	CUresult back = cuCtxSetCurrent(cur);
	return rc ? rc : back;
}

static CUresult copy_peer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n,
			  CUstream s, int async)
{
	struct rc_ctx *d, *sc, *c;
	uint64_t sh = 0;
	CUresult rc = rc_obj(dctx, RC_CTX, &d);
	if (!rc)
		rc = rc_obj(sctx, RC_CTX, &sc);
	if (!rc && !(rc = rc_ctx_activate(d)))
		rc = rc_ctx_activate(sc);
	if (rc)
		return rc == CUDA_ERROR_INVALID_HANDLE ? CUDA_ERROR_INVALID_CONTEXT : rc;
	if (async) {
		if ((rc = rc_stream_resolve(s, &c, &sh)))
			return rc;
	} else {
		c = d;
	}
	if (!n)
		return CUDA_SUCCESS;
	if (d->dev->conn != sc->dev->conn || c->dev->conn != d->dev->conn)
		return rc_peer_relay(dst, d, src, sc, n, async ? s : NULL, async ? c : NULL);
	rc_coh_device_use(dst);
	rc_coh_device_use(src);
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u64(w, sh);
	put_u64(w, dst);
	put_u64(w, d->h);
	put_u64(w, src);
	put_u64(w, sc->h);
	put_u64(w, n);
	put_u32(w, !async);
	struct rd r;
	return async ? rc_post(c->dev->conn, RGPU_OP_MEMCPY_PEER, w)
		     : rc_call(c->dev->conn, RGPU_OP_MEMCPY_PEER, w, &r);
}

RC_EXPORT CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n)
{
	return copy_peer(dst, dctx, src, sctx, n, NULL, 0);
}

RC_EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx,
				     size_t n, CUstream s)
{
	return copy_peer(dst, dctx, src, sctx, n, s, 1);
}

/* per-thread default stream variants */
RC_EXPORT CUresult cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx,
				     size_t n)
{
	return cuMemcpyPeer(dst, dctx, src, sctx, n);
}

RC_EXPORT CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx,
					  size_t n, CUstream s)
{
	return cuMemcpyPeerAsync(dst, dctx, src, sctx, n, s ? s : CU_STREAM_PER_THREAD);
}

RC_EXPORT CUresult cuMemsetD2D8_v2_ptds(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h)
{
	return cuMemsetD2D8_v2(d, p, v, w, h);
}

RC_EXPORT CUresult cuMemsetD2D16_v2_ptds(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h)
{
	return cuMemsetD2D16_v2(d, p, v, w, h);
}

RC_EXPORT CUresult cuMemsetD2D32_v2_ptds(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h)
{
	return cuMemsetD2D32_v2(d, p, v, w, h);
}

RC_EXPORT CUresult cuMemsetD2D8Async_ptsz(CUdeviceptr d, size_t p, unsigned char v, size_t w, size_t h,
					  CUstream s)
{
	return cuMemsetD2D8Async(d, p, v, w, h, s ? s : CU_STREAM_PER_THREAD);
}

RC_EXPORT CUresult cuMemsetD2D16Async_ptsz(CUdeviceptr d, size_t p, unsigned short v, size_t w, size_t h,
					   CUstream s)
{
	return cuMemsetD2D16Async(d, p, v, w, h, s ? s : CU_STREAM_PER_THREAD);
}

RC_EXPORT CUresult cuMemsetD2D32Async_ptsz(CUdeviceptr d, size_t p, unsigned int v, size_t w, size_t h,
					   CUstream s)
{
	return cuMemsetD2D32Async(d, p, v, w, h, s ? s : CU_STREAM_PER_THREAD);
}
