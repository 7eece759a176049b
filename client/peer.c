/*
 * Several GPUs in one process: peer queries, peer access and peer copies.
 *
 * GPUs of one server share the client's connection to it; their peer
 * access and copies are served there (daemon/ops_peer.c), GPU to GPU, and
 * never pass through the client.  GPUs of different servers cannot reach
 * each other: cuDeviceCanAccessPeer says 0, peer access is refused, and a
 * peer copy between them goes from one rgpud to the other, or through this
 * process (peer_remote.c).
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
		return rc_peer_remote(dst, d, src, sc, n, async ? s : NULL, async ? c : NULL);
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

/* A 3D copy between contexts: the copy of one context when both are the
 * same; between two contexts, linear device memory row by row as peer
 * copies (arrays of another context are not reached so) */
static CUresult copy3d_peer(const CUDA_MEMCPY3D_PEER *p, CUstream s, int async)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	CUDA_MEMCPY3D q = {
		.srcXInBytes = p->srcXInBytes, .srcY = p->srcY, .srcZ = p->srcZ, .srcLOD = p->srcLOD,
		.srcMemoryType = p->srcMemoryType, .srcHost = p->srcHost, .srcDevice = p->srcDevice,
		.srcArray = p->srcArray, .srcPitch = p->srcPitch, .srcHeight = p->srcHeight,
		.dstXInBytes = p->dstXInBytes, .dstY = p->dstY, .dstZ = p->dstZ, .dstLOD = p->dstLOD,
		.dstMemoryType = p->dstMemoryType, .dstHost = p->dstHost, .dstDevice = p->dstDevice,
		.dstArray = p->dstArray, .dstPitch = p->dstPitch, .dstHeight = p->dstHeight,
		.WidthInBytes = p->WidthInBytes, .Height = p->Height, .Depth = p->Depth,
	};
	if (p->srcContext == p->dstContext)
		return rc_memcpy3d(&q, s, async);
	int linear = (p->srcMemoryType == CU_MEMORYTYPE_DEVICE || p->srcMemoryType == CU_MEMORYTYPE_UNIFIED) &&
		     (p->dstMemoryType == CU_MEMORYTYPE_DEVICE || p->dstMemoryType == CU_MEMORYTYPE_UNIFIED) &&
		     !rc_is_host_memory((const void *)(uintptr_t)p->srcDevice) &&
		     !rc_is_host_memory((const void *)(uintptr_t)p->dstDevice);
	if (!linear) {
		rc_unsupported("cuMemcpy3DPeer of arrays or host memory between two contexts");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	size_t w = p->WidthInBytes, h = p->Height ? p->Height : 1, d = p->Depth ? p->Depth : 1;
	size_t sp = p->srcPitch ? p->srcPitch : w, dp = p->dstPitch ? p->dstPitch : w;
	size_t sh = p->srcHeight ? p->srcHeight : h, dh = p->dstHeight ? p->dstHeight : h;
	if (sp < p->srcXInBytes + w || dp < p->dstXInBytes + w)
		return CUDA_ERROR_INVALID_VALUE;
	/* rows queued on one stream, then (a synchronous copy) waited for */
	CUstream on = async ? s : NULL;
	for (size_t z = 0; !rc && z < d; z++)
		for (size_t y = 0; !rc && y < h; y++) {
			CUdeviceptr src = p->srcDevice + (p->srcZ + z) * sh * sp + (p->srcY + y) * sp + p->srcXInBytes;
			CUdeviceptr dst = p->dstDevice + (p->dstZ + z) * dh * dp + (p->dstY + y) * dp + p->dstXInBytes;
			rc = copy_peer(dst, p->dstContext, src, p->srcContext, w, on, 1);
		}
	if (!rc && !async)
		rc = cuStreamSynchronize(NULL); /* the current context's, where they went */
	return rc;
}

RC_EXPORT CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER *p) { return copy3d_peer(p, NULL, 0); }
RC_EXPORT CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER *p, CUstream s)
{
	return copy3d_peer(p, s, 1);
}
RC_EXPORT CUresult cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER *p) { return copy3d_peer(p, NULL, 0); }
RC_EXPORT CUresult cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER *p, CUstream s)
{
	return copy3d_peer(p, s ? s : CU_STREAM_PER_THREAD, 1);
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
