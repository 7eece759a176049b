/*
 * Several GPUs of this server in one session: peer queries, peer access and
 * peer copies, served here (NVLink or PCIe between the GPUs, never through
 * the client).  Also the 2D memsets.
 */
#include "appmem.h"
#include "gate.h"
#include "log.h"
#include "rgpud.h"
#include "session.h"
#include "mem/mem.h"

#include <string.h>

#define D (&rgpud_server.drv)

int op_memset2d(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r), sid = get_u64(r), dst = get_u64(r), pitch = get_u64(r);
	uint32_t val = get_u32(r), esz = get_u32(r);
	uint64_t width = get_u64(r), height = get_u64(r);
	uint32_t sync = get_u32(r);
	if (!rd_done(r))
		return OP_DROP;
	if ((esz != 1 && esz != 2 && esz != 4) || width > UINT64_MAX / esz)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t row = width * esz, span = 0;
	/* an empty rectangle touches nothing, whatever its pitch (0 too: the
	 * bound below divides by it; found by fuzz_dispatch_lease) */
	if (height && width) {
		if (pitch < row || (height - 1) > (UINT64_MAX - row) / pitch)
			return CUDA_ERROR_INVALID_VALUE;
		span = (height - 1) * pitch + row;
	}
	void *st;
	int rc = stage_check(s, ctx, sid, dst, span, &st);
	if (rc)
		return rc;
	if (!span)
		return CUDA_SUCCESS;
	switch (esz) {
	case 1:
		if (!D->cuMemsetD2D8_v2)
			return CUDA_ERROR_NOT_SUPPORTED;
		return sync ? (int)D->cuMemsetD2D8_v2(dst, pitch, (unsigned char)val, width, height)
			    : (int)D->cuMemsetD2D8Async(dst, pitch, (unsigned char)val, width, height, st);
	case 2:
		if (!D->cuMemsetD2D16_v2)
			return CUDA_ERROR_NOT_SUPPORTED;
		return sync ? (int)D->cuMemsetD2D16_v2(dst, pitch, (unsigned short)val, width, height)
			    : (int)D->cuMemsetD2D16Async(dst, pitch, (unsigned short)val, width, height, st);
	default:
		if (!D->cuMemsetD2D32_v2)
			return CUDA_ERROR_NOT_SUPPORTED;
		return sync ? (int)D->cuMemsetD2D32_v2(dst, pitch, val, width, height)
			    : (int)D->cuMemsetD2D32Async(dst, pitch, val, width, height, st);
	}
}

int op_peer_query(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint32_t gpu = get_u32(r), peer = get_u32(r);
	if (!rd_done(r))
		return OP_DROP;
	int rc = session_admit(s, gpu);
	if (!rc)
		rc = session_admit(s, peer);
	if (rc)
		return rc;
	int can = 0, rank = 0, atomics = 0;
	CUdevice a, b;
	if (gpu != peer && D->cuDeviceCanAccessPeer) {
		if ((rc = D->cuDeviceGet(&a, (int)gpu)) || (rc = D->cuDeviceGet(&b, (int)peer)) ||
		    (rc = D->cuDeviceCanAccessPeer(&can, a, b)))
			return rc;
		if (can && D->cuDeviceGetP2PAttribute) {
			D->cuDeviceGetP2PAttribute(&rank, CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, a, b);
			D->cuDeviceGetP2PAttribute(&atomics,
						   CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED, a, b);
		}
	}
	put_u32(out, can != 0);
	put_i32(out, rank);
	put_u32(out, atomics != 0);
	return CUDA_SUCCESS;
}

int op_peer_access(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r), peer = get_u64(r);
	uint32_t enable = get_u32(r);
	if (!rd_done(r))
		return OP_DROP;
	struct hentry *pe = ht_get(&s->ht, peer, HK_CTX);
	int rc = session_enter_ctx(s, ctx, NULL);
	if (rc)
		return rc;
	if (!pe)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!D->cuCtxEnablePeerAccess || !D->cuCtxDisablePeerAccess)
		return CUDA_ERROR_NOT_SUPPORTED;
	rc = enable ? (int)D->cuCtxEnablePeerAccess(pe->obj, 0)
		    : (int)D->cuCtxDisablePeerAccess(pe->obj);
	/* the session's memory on the peer's device is VMM-backed (mem/):
	 * its access must name this device too */
	struct ctx_state *me = NULL;
	const struct ctx_state *them = pe->extra;
	if (!rc && session_enter_ctx(s, ctx, &me) == 0 && me && them)
		rc = mem_peer_access(s, them->dev, me->dev, enable != 0);
	return rc;
}

int op_memcpy_peer(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r), sid = get_u64(r), dst = get_u64(r), dctx = get_u64(r);
	uint64_t src = get_u64(r), sctx = get_u64(r), size = get_u64(r);
	uint32_t sync = get_u32(r);
	if (!rd_done(r))
		return OP_DROP;
	struct hentry *de = ht_get(&s->ht, dctx, HK_CTX), *se = ht_get(&s->ht, sctx, HK_CTX);
	if (!de || !se)
		return CUDA_ERROR_INVALID_CONTEXT;
	void *st;
	int rc = stage_check(s, ctx, sid, dst, size, &st);
	if (rc)
		return rc;
	if (!session_owns_range(s, src, size))
		return CUDA_ERROR_INVALID_VALUE;
	if (!D->cuMemcpyPeer || !D->cuMemcpyPeerAsync)
		return CUDA_ERROR_NOT_SUPPORTED;
	return sync ? (int)D->cuMemcpyPeer(dst, de->obj, src, se->obj, size)
		    : (int)D->cuMemcpyPeerAsync(dst, de->obj, src, se->obj, size, st);
}
