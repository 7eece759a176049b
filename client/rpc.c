/* Request/reply exchanges with rgpud.  Bulk copies are the transfer
 * layer's (xfer_client.c); it talks to the connection only through
 * rc_send_frame, rc_reply_frame and rc_conn_failed. */
#include "client.h"
#include "xfer_client.h"
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

CUresult rc_send_frame(struct rc_conn *c, uint16_t op, uint32_t flags, uint64_t *id,
		       const void *a, size_t alen, const void *b, size_t blen)
{
	if (c->dead)
		return CUDA_ERROR_DEVICE_UNAVAILABLE;
	*id = ++c->next_id;
	if (rgpu_frame_send(c->c, op, flags, *id, a, alen, b, blen) < 0)
		return rc_conn_failed(c, "sending a request");
	return CUDA_SUCCESS;
}

CUresult rc_reply_frame(struct rc_conn *c, uint64_t id, uint16_t op, struct rc_reply *f,
			void *sink, size_t sinkcap)
{
	struct rgpu_hdr h;
	CUresult rc = recv_reply_hdr(c, id, op, &h);
	if (!rc)
		rc = recv_status(c, &f->st);
	if (rc)
		return rc;
	f->flags = h.flags;
	f->len = h.len - 4;
	if (sink) {
		/* bulk data: straight into the caller's buffer */
		if (f->len > sinkcap) {
			errno = EPROTO;
			return rc_conn_failed(c, "more data than asked for");
		}
		if (f->len && rgpu_recv(c->c, sink, f->len) < 0)
			return rc_conn_failed(c, "reading data");
		rd_init(&f->r, sink, 0);
		return CUDA_SUCCESS;
	}
	struct tls_bufs *b = tls();
	if (!b)
		return rc_conn_failed(c, "out of memory for a reply");
	if (f->len > b->rxcap) {
		uint8_t *p = realloc(b->rx, f->len);
		if (!p)
			return rc_conn_failed(c, "out of memory for a reply");
		b->rx = p;
		b->rxcap = f->len;
	}
	if (f->len && rgpu_recv(c->c, b->rx, f->len) < 0)
		return rc_conn_failed(c, "reading a reply");
	rd_init(&f->r, b->rx, f->len);
	return CUDA_SUCCESS;
}

static CUresult call_locked(struct rc_conn *c, uint16_t op, const struct wbuf *req,
			    struct rd *r, int32_t *raw_status)
{
	if (req->oom)
		return CUDA_ERROR_OUT_OF_MEMORY;
	uint64_t id;
	struct rc_reply f;
	CUresult rc = rc_send_frame(c, op, 0, &id, req->data, req->len, NULL, 0);
	if (!rc)
		rc = rc_reply_frame(c, id, op, &f, NULL, 0);
	if (rc)
		return rc;
	*r = f.r;
	if (raw_status)
		*raw_status = f.st;
	return rc_status(f.st);
}

CUresult rc_call_locked(struct rc_conn *c, uint16_t op, const struct wbuf *req, struct rd *r)
{
	return call_locked(c, op, req, r, NULL);
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
	uint64_t id;
	pthread_mutex_lock(&c->lock);
	CUresult rc = rc_send_frame(c, op, RGPU_F_NOREPLY, &id, req->data, req->len, NULL, 0);
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
