/* Request/reply exchanges with rgpud, including bulk copies. */
#include "client.h"
#include "cred.h"
#include "frame.h"
#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Per-thread request and reply buffers: no allocation per call, and a
 * reply stays readable after the connection lock is dropped. */
struct tls_bufs {
	struct wbuf req;
	uint8_t *rx;
	size_t rxcap;
};
static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;

static void tls_free(void *p)
{
	struct tls_bufs *b = p;
	wbuf_free(&b->req);
	free(b->rx);
	free(b);
}

static void tls_init(void) { (void)pthread_key_create(&tls_key, tls_free); }

static struct tls_bufs *tls(void)
{
	pthread_once(&tls_once, tls_init);
	struct tls_bufs *b = pthread_getspecific(tls_key);
	if (!b) {
		b = calloc(1, sizeof(*b));
		if (!b)
			return NULL;
		wbuf_init(&b->req);
		if (pthread_setspecific(tls_key, b)) {
			free(b);
			return NULL;
		}
	}
	return b;
}

struct wbuf *rc_req(void)
{
	static __thread struct wbuf fallback;
	struct tls_bufs *b = tls();
	struct wbuf *w = b ? &b->req : &fallback;
	wbuf_reset(w);
	return w;
}

static CUresult map_status(int32_t st)
{
	switch (st) {
	case RGPU_ERR_AUTH: return CUDA_ERROR_NOT_PERMITTED;
	case RGPU_ERR_HANDLE: return CUDA_ERROR_INVALID_HANDLE;
	case RGPU_ERR_VERSION: return CUDA_ERROR_NOT_INITIALIZED;
	case RGPU_ERR_PROTO:
	case RGPU_ERR_BADOP: return CUDA_ERROR_UNKNOWN;
	default: return (CUresult)st;
	}
}

/* A broken connection is final for now; later: reconnect and replay. */
CUresult rc_conn_failed(struct rc_conn *c, const char *what)
{
	if (!c->dead)
		log_err("lost connection to rgpud at %s:%u (%s: %s)", c->host, c->port, what,
			errno ? strerror(errno) : "closed by the server");
	c->dead = 1;
	return CUDA_ERROR_DEVICE_UNAVAILABLE;
}

/* Reads one reply frame header for request id; payload follows. */
static CUresult recv_reply_hdr(struct rc_conn *c, uint64_t id, uint16_t op, struct rgpu_hdr *h)
{
	int hs;
	/* device printf output comes ahead of the reply: print it as the
	 * program's own */
	while ((hs = rgpu_frame_recv_hdr(c->c, h)) == RGPU_HDR_OK && h->op == RGPU_OP_OUTPUT &&
	       (h->flags & RGPU_F_REPLY) && h->id == id) {
		char buf[4096];
		for (size_t left = h->len; left;) {
			size_t k = left < sizeof(buf) ? left : sizeof(buf);
			if (rgpu_recv(c->c, buf, k) < 0)
				return rc_conn_failed(c, "reading output");
			fflush(stdout);
			ssize_t w = write(STDOUT_FILENO, buf, k);
			(void)w;
			left -= k;
		}
	}
	if (hs != RGPU_HDR_OK)
		return rc_conn_failed(c, "reading a reply");
	if (!(h->flags & RGPU_F_REPLY) || h->id != id || h->op != op || h->len < 4) {
		errno = EPROTO;
		return rc_conn_failed(c, "unexpected reply");
	}
	return CUDA_SUCCESS;
}

static CUresult recv_status(struct rc_conn *c, int32_t *st)
{
	uint8_t b[4];
	if (rgpu_recv(c->c, b, 4) < 0)
		return rc_conn_failed(c, "reading a reply");
	*st = (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
	return CUDA_SUCCESS;
}

static CUresult call_locked(struct rc_conn *c, uint16_t op, const struct wbuf *req,
			    struct rd *r, int32_t *raw_status)
{
	struct tls_bufs *b = tls();
	if (!b || req->oom)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (c->dead)
		return CUDA_ERROR_DEVICE_UNAVAILABLE;
	uint64_t id = ++c->next_id;
	if (rgpu_frame_send(c->c, op, 0, id, req->data, req->len, NULL, 0) < 0)
		return rc_conn_failed(c, "sending a request");
	struct rgpu_hdr h;
	CUresult rc = recv_reply_hdr(c, id, op, &h);
	if (rc)
		return rc;
	size_t n = h.len;
	if (n > b->rxcap) {
		uint8_t *p = realloc(b->rx, n);
		if (!p)
			return rc_conn_failed(c, "out of memory for a reply");
		b->rx = p;
		b->rxcap = n;
	}
	if (rgpu_recv(c->c, b->rx, n) < 0)
		return rc_conn_failed(c, "reading a reply");
	rd_init(r, b->rx, n);
	int32_t st = get_i32(r);
	if (raw_status)
		*raw_status = st;
	return map_status(st);
}

CUresult rc_call_locked(struct rc_conn *c, uint16_t op, const struct wbuf *req, struct rd *r)
{
	return call_locked(c, op, req, r, NULL);
}

CUresult rc_recv_reply(struct rc_conn *c, uint64_t id, uint16_t op, struct rd *r, int32_t *st,
		       uint32_t *flags)
{
	struct tls_bufs *b = tls();
	if (!b)
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct rgpu_hdr h;
	CUresult rc = recv_reply_hdr(c, id, op, &h);
	if (rc)
		return rc;
	if (h.len > b->rxcap) {
		uint8_t *p = realloc(b->rx, h.len);
		if (!p)
			return rc_conn_failed(c, "out of memory for a reply");
		b->rx = p;
		b->rxcap = h.len;
	}
	if (rgpu_recv(c->c, b->rx, h.len) < 0)
		return rc_conn_failed(c, "reading a reply");
	rd_init(r, b->rx, h.len);
	*st = get_i32(r);
	*flags = h.flags;
	return CUDA_SUCCESS;
}

CUresult rc_wait_status(struct rc_conn *c, uint64_t id, uint16_t op)
{
	struct rd r;
	int32_t st;
	uint32_t flags;
	CUresult rc = rc_recv_reply(c, id, op, &r, &st, &flags);
	return rc ? rc : map_status(st);
}

CUresult rc_call(struct rc_conn *c, uint16_t op, const struct wbuf *req, struct rd *r)
{
	pthread_mutex_lock(&c->lock);
	CUresult rc = call_locked(c, op, req, r, NULL);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

CUresult rc_post(struct rc_conn *c, uint16_t op, const struct wbuf *req)
{
	if (req->oom)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&c->lock);
	CUresult rc = CUDA_SUCCESS;
	if (c->dead)
		rc = CUDA_ERROR_DEVICE_UNAVAILABLE;
	else if (rgpu_frame_send(c->c, op, RGPU_F_NOREPLY, ++c->next_id, req->data, req->len, NULL, 0) < 0)
		rc = rc_conn_failed(c, "sending a request");
	pthread_mutex_unlock(&c->lock);
	return rc;
}

CUresult rc_hello(struct rc_conn *c, char *err, size_t errlen)
{
	void *cred = NULL;
	size_t clen = 0;
	char cerr[256] = "";
	if (rgpu_client_credential(&cred, &clen, cerr, sizeof(cerr)) < 0) {
		snprintf(err, errlen, "cannot make a credential: %s", cerr);
		return CUDA_ERROR_NOT_PERMITTED;
	}
	if (!clen && cerr[0])
		log_debug("no credential: %s", cerr);
	char me[200], host[128] = "?";
	gethostname(host, sizeof(host) - 1);
	snprintf(me, sizeof(me), "pid %d on %s", (int)getpid(), host);
	struct wbuf *w = rc_req();
	put_u32(w, RGPU_PROTO_VERSION);
	put_str(w, me);
	put_bytes(w, cred, clen);
	free(cred);
	struct rd r;
	int32_t st = 0;
	pthread_mutex_lock(&c->lock);
	CUresult rc = call_locked(c, RGPU_OP_HELLO, w, &r, &st);
	pthread_mutex_unlock(&c->lock);
	if (rc == CUDA_ERROR_DEVICE_UNAVAILABLE) {
		snprintf(err, errlen, "the server closed the connection during the handshake");
		return rc;
	}
	if (st) {
		const char *why = get_str(&r, 1024);
		snprintf(err, errlen, "%s", why ? why : "refused without a reason");
		return rc;
	}
	const char *sid = get_str(&r, 1024);
	uint32_t ndev = get_u32(&r);
	if (!rd_ok(&r)) {
		snprintf(err, errlen, "malformed handshake reply");
		return CUDA_ERROR_UNKNOWN;
	}
	snprintf(c->server_id, sizeof(c->server_id), "%s", sid);
	c->ndev = (int)ndev;
	return CUDA_SUCCESS;
}

size_t rc_chunk_bytes(size_t dflt)
{
	/* RGPU_CHUNK_KB: pieces host-to-device copies are cut into (64 KiB to
	 * the protocol's 4 MiB); by default 4 MiB over a network and 2 MiB
	 * through shared memory, from bench/chunk-sweep.sh's curves on the
	 * H200 (docs/benchmarks.md) */
	static size_t chunk;
	if (!chunk) {
		size_t v = SIZE_MAX;
		const char *e = getenv("RGPU_CHUNK_KB");
		if (e && atol(e) > 0) {
			v = (size_t)atol(e) * 1024;
			if (v < 65536)
				v = 65536;
			if (v > RGPU_CHUNK_SIZE)
				v = RGPU_CHUNK_SIZE;
		}
		chunk = v;
	}
	return chunk == SIZE_MAX ? dflt : chunk;
}

CUresult rc_htod(struct rc_ctx *ctx, uint64_t stream, CUdeviceptr dst, const void *src, size_t n,
		 int async)
{
	const size_t chunk = rc_chunk_bytes(RGPU_CHUNK_SIZE);
	if (n == 0)
		return CUDA_SUCCESS;
	struct rc_conn *c = ctx->dev->conn;
	uint8_t f[40];
	struct wbuf w = { .data = f, .cap = sizeof(f) };
	pthread_mutex_lock(&c->lock);
	if (c->dead) {
		pthread_mutex_unlock(&c->lock);
		return CUDA_ERROR_DEVICE_UNAVAILABLE;
	}
	uint64_t id = 0;
	CUresult rc = CUDA_SUCCESS;
	/* all chunks go out back to back; only the last one is answered */
	for (size_t off = 0; off < n; off += chunk) {
		size_t k = n - off < chunk ? n - off : chunk;
		int last = off + k == n && !async;
		w.len = 0;
		put_u64(&w, ctx->h);
		put_u64(&w, stream);
		put_u64(&w, dst);
		put_u64(&w, n);
		put_u64(&w, off);
		id = ++c->next_id;
		if (rgpu_frame_send(c->c, RGPU_OP_MEMCPY_HTOD, last ? 0 : RGPU_F_NOREPLY, id, f,
				    sizeof(f), (const uint8_t *)src + off, k) < 0) {
			rc = rc_conn_failed(c, "sending data");
			break;
		}
	}
	if (!rc && !async) {
		struct rgpu_hdr h;
		int32_t st = 0;
		rc = recv_reply_hdr(c, id, RGPU_OP_MEMCPY_HTOD, &h);
		if (!rc)
			rc = recv_status(c, &st);
		if (!rc && h.len > 4 && rgpu_frame_skip(c->c, h.len - 4) < 0)
			rc = rc_conn_failed(c, "reading a reply");
		if (!rc)
			rc = map_status(st);
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}

CUresult rc_dtoh(struct rc_ctx *ctx, uint64_t stream, void *dst, CUdeviceptr src, size_t n)
{
	if (n == 0)
		return CUDA_SUCCESS;
	struct rc_conn *c = ctx->dev->conn;
	uint8_t f[32];
	struct wbuf w = { .data = f, .cap = sizeof(f) };
	put_u64(&w, ctx->h);
	put_u64(&w, stream);
	put_u64(&w, src);
	put_u64(&w, n);
	pthread_mutex_lock(&c->lock);
	if (c->dead) {
		pthread_mutex_unlock(&c->lock);
		return CUDA_ERROR_DEVICE_UNAVAILABLE;
	}
	uint64_t id = ++c->next_id;
	CUresult rc = CUDA_SUCCESS;
	if (rgpu_frame_send(c->c, RGPU_OP_MEMCPY_DTOH, 0, id, f, sizeof(f), NULL, 0) < 0)
		rc = rc_conn_failed(c, "sending a request");
	size_t got = 0;
	/* data frames land straight in the caller's buffer */
	for (int more = 1; !rc && more;) {
		struct rgpu_hdr h;
		int32_t st = 0;
		rc = recv_reply_hdr(c, id, RGPU_OP_MEMCPY_DTOH, &h);
		if (!rc)
			rc = recv_status(c, &st);
		if (rc)
			break;
		size_t k = h.len - 4;
		more = (h.flags & RGPU_F_MORE) != 0;
		if (k > n - got) {
			errno = EPROTO;
			rc = rc_conn_failed(c, "more data than asked for");
			break;
		}
		if (k && rgpu_recv(c->c, (uint8_t *)dst + got, k) < 0) {
			rc = rc_conn_failed(c, "reading data");
			break;
		}
		got += k;
		if (st) {
			rc = map_status(st); /* an error frame is always the last */
			break;
		}
		if (!more && got != n) {
			errno = EPROTO;
			rc = rc_conn_failed(c, "short data");
		}
	}
	pthread_mutex_unlock(&c->lock);
	return rc;
}
