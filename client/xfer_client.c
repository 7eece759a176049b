/* The client's two copy loops and the socket-staged and shm-direct
 * providers (see xfer_client.h; the ring provider is in shm.c). */
#include "xfer_client.h"
#include "log.h"
#include "replay.h"
#include "settings.h"

#include <stdlib.h>

size_t rc_chunk_bytes(size_t dflt)
{
	/* RGPU_CHUNK_KB (settings.c): pieces host-to-device copies are cut
	 * into; by default 4 MiB over a network and 2 MiB through shared
	 * memory, from bench/chunk-sweep.sh's curves on the H200
	 * (docs/benchmarks.md) */
	unsigned long long kb = rc_setting(RS_CHUNK_KB);
	return kb ? (size_t)kb * 1024 : dflt;
}

/* fields every copy request starts with */
static void put_copy(struct wbuf *w, const struct rc_xfer *x)
{
	put_u64(w, x->ctx->h);
	put_u64(w, x->stream);
	put_u64(w, x->dev);
	put_u64(w, x->n);
}

/* ---- host to device: chunks back to back, only the last one answered ---- */

static int htod_stage(void *arg, struct xfer_chunk *c)
{
	struct rc_xfer *x = arg;
	return (int)x->pv->stage(x, c);
}

static int htod_emit(void *arg, struct xfer_chunk *c, int last)
{
	struct rc_xfer *x = arg;
	uint8_t f[48];
	struct wbuf w = { .data = f, .cap = sizeof(f) };
	put_copy(&w, x);
	put_u64(&w, c->off);
	put_raw(&w, x->extra, x->extra_len);
	pthread_mutex_lock(&x->c->lock);
	/* a synchronous copy's data, sent from the caller's buffer, stays
	 * there until the copy returns: the request log borrows it (settled
	 * in htod); a staging slot's is copied, its slot being reused */
	int borrow = !x->async && x->data == x->host + c->off;
	CUresult rc = rc_send_frame(x->c, x->pv->op_htod, last && !x->async ? 0 : RGPU_F_NOREPLY,
				    &x->id, f, w.len, x->data, x->dlen, borrow);
	pthread_mutex_unlock(&x->c->lock);
	return (int)rc;
}

static void htod_abandon(void *arg, struct xfer_chunk *c)
{
	struct rc_xfer *x = arg;
	if (x->pv->abandon)
		x->pv->abandon(x, c);
}

static const struct xfer_steps htod_steps = { htod_stage, htod_emit, htod_abandon };

static CUresult htod(struct rc_xfer *x)
{
	int queued;
	rc_hostfn_gate(x->c, x->pv->op_htod);
	CUresult rc = (CUresult)xfer_run(x->n, rc_chunk_bytes(x->pv->chunk), 0, &htod_steps, x,
					 &queued);
	if (!rc && !x->async) {
		struct rc_reply f;
		rc = rc_reply_frame(x->c, x->id, x->pv->op_htod, &f, NULL, 0);
		if (!rc)
			rc = rc_status(f.st);
	}
	if (!x->async)
		rc_replay_settle(x->c);
	return rc;
}

/* ---- device to host: one request, data frames until one without MORE ---- */

static CUresult dtoh(struct rc_xfer *x)
{
	uint8_t f[32];
	struct wbuf w = { .data = f, .cap = sizeof(f) };
	put_copy(&w, x);
	rc_hostfn_gate(x->c, x->pv->op_dtoh);
	pthread_mutex_lock(&x->c->lock);
	CUresult rc = rc_send_frame(x->c, x->pv->op_dtoh, 0, &x->id, f, w.len, NULL, 0, 0);
	pthread_mutex_unlock(&x->c->lock);
	for (int more = 1; !rc && more;) {
		struct rc_reply r;
		size_t k = 0;
		if ((rc = x->pv->take(x, &r, &k)))
			break;
		x->got += k;
		more = (r.flags & RGPU_F_MORE) != 0;
		if (r.st) {
			rc = rc_status(r.st); /* an error frame is always the last */
			break;
		}
		if (!more && x->got != x->n)
			rc = rc_conn_fail(x->c, RGPU_E_PROTO, "protocol error: short data");
	}
	return rc;
}

CUresult rc_xfer_copy(const struct rc_xfer_provider *pv, struct rc_ctx *ctx, uint64_t stream,
		      CUdeviceptr dev, void *host, size_t n, int to_host, int async)
{
	if (n == 0)
		return CUDA_SUCCESS;
	struct rc_xfer x = { .ctx = ctx, .c = ctx->dev->conn, .pv = pv, .stream = stream,
			     .dev = dev, .host = host, .n = n, .async = async };
	if (pv->whole)
		return pv->whole(&x, to_host);
	/* the ring's slots serve one copy at a time; other threads' requests
	 * may go out between a copy's frames */
	if (pv->exclusive)
		pthread_mutex_lock(&x.c->ring_lock);
	CUresult rc = to_host ? dtoh(&x) : htod(&x);
	if (pv->exclusive)
		pthread_mutex_unlock(&x.c->ring_lock);
	return rc;
}

/* ---- socket-staged: the data travels in the frames ---- */

static CUresult sock_stage(struct rc_xfer *x, struct xfer_chunk *c)
{
	x->extra_len = 0;
	x->data = x->host + c->off;
	x->dlen = c->len;
	return CUDA_SUCCESS;
}

static CUresult sock_take(struct rc_xfer *x, struct rc_reply *f, size_t *n)
{
	CUresult rc = rc_reply_frame(x->c, x->id, RGPU_OP_MEMCPY_DTOH, f, x->host + x->got,
				     x->n - x->got);
	*n = rc ? 0 : f->len;
	return rc;
}

const struct rc_xfer_provider rc_xfer_socket = {
	.name = "socket-staged",
	.op_htod = RGPU_OP_MEMCPY_HTOD,
	.op_dtoh = RGPU_OP_MEMCPY_DTOH,
	.chunk = RGPU_CHUNK_SIZE,
	.stage = sock_stage,
	.take = sock_take,
};

/* ---- shm-direct: the server maps the host memory, the GPU copies it ---- */

static CUresult direct_copy(struct rc_xfer *x, int to_host)
{
	struct wbuf *w = rc_req();
	put_u64(w, x->ctx->h);
	put_u64(w, x->stream);
	put_u64(w, x->dev);
	put_u64(w, (uint64_t)(uintptr_t)x->host);
	put_u64(w, x->n);
	put_u32(w, (uint32_t)to_host);
	put_u32(w, !x->async);
	struct rd r;
	/* the memory is shared: even device-to-host data lands in the
	 * caller's buffer when the stream gets there, as with local CUDA */
	if (x->async)
		return rc_post(x->c, RGPU_OP_SHM_HOSTCOPY, w);
	return rc_call(x->c, RGPU_OP_SHM_HOSTCOPY, w, &r);
}

const struct rc_xfer_provider rc_xfer_direct = {
	.name = "shm-direct",
	.whole = direct_copy,
};
