/*
 * Request/reply exchanges with rgpud.
 *
 * Several application threads share one connection.  A request's frames go
 * out under the connection's tx_lock; its caller then waits for the reply
 * by request id.  Nobody owns the read side: whichever waiter finds no one
 * reading becomes the reader (leader/follower).  It reads frames and hands
 * each to the waiter of its id (bulk data straight into that waiter's
 * buffer) until its own reply has come, then gives the read side to another
 * waiter.  So one thread's synchronising call does not hold up another's
 * query, and the server may answer in any order.
 */
#include "client.h"
#include "cred.h"
#include "frame.h"
#include "log.h"
#include "settings.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Per-thread request buffer and last reply: no allocation per request, and
 * a reply stays readable until the thread's next call. */
struct tls_bufs {
	struct wbuf req;
	struct rc_frame *reply;
};
static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;

static void tls_free(void *p)
{
	struct tls_bufs *b = p;
	wbuf_free(&b->req);
	free(b->reply);
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

CUresult rc_map_status(int32_t st)
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
CUresult rc_conn_fail(struct rc_conn *c, enum rgpu_errcode code, const char *why)
{
	pthread_mutex_lock(&c->lock);
	int first = !c->dead;
	if (first) {
		rgpu_error_set(&c->err, code, "%s", why);
		c->dead = 1;
		pthread_cond_broadcast(&c->cv);
	}
	int quiet = c->quiet;
	pthread_mutex_unlock(&c->lock);
	if (first) {
		if (!quiet)
			log_err("lost connection to rgpud at %s:%u (%s)", c->host, c->port, why);
		/* a thread blocked reading or sending wakes and fails */
		if (c->c)
			rgpu_conn_shutdown(c->c);
	}
	return CUDA_ERROR_DEVICE_UNAVAILABLE;
}

CUresult rc_conn_failed(struct rc_conn *c, const char *what)
{
	int e = errno; /* taken first: nothing below may change the reason */
	char why[256];
	enum rgpu_errcode code = RGPU_E_SYSTEM;
	if (e == EAGAIN || e == EWOULDBLOCK) {
		code = RGPU_E_TIMEOUT;
		snprintf(why, sizeof(why), "%s: no answer in time", what);
	} else if (e) {
		snprintf(why, sizeof(why), "%s: %s", what, strerror(e));
	} else {
		code = RGPU_E_CLOSED;
		snprintf(why, sizeof(why), "%s: the server closed the connection", what);
	}
	return rc_conn_fail(c, code, why);
}

static CUresult proto_fail(struct rc_conn *c, const char *what)
{
	char why[256];
	snprintf(why, sizeof(why), "protocol error: %s", what);
	return rc_conn_fail(c, RGPU_E_PROTO, why);
}

void rc_tx_begin(struct rc_conn *c) { pthread_mutex_lock(&c->tx_lock); }
void rc_tx_end(struct rc_conn *c) { pthread_mutex_unlock(&c->tx_lock); }

void rc_waiter_init(struct rc_waiter *w, uint16_t op, void *sink, size_t cap)
{
	memset(w, 0, sizeof(*w));
	w->op = op;
	w->sink = sink;
	w->sink_cap = cap;
}

static int is_dead(struct rc_conn *c)
{
	pthread_mutex_lock(&c->lock);
	int d = c->dead;
	pthread_mutex_unlock(&c->lock);
	return d;
}

CUresult rc_send(struct rc_conn *c, uint16_t op, uint32_t flags, const void *a, size_t alen,
		 const void *b, size_t blen, struct rc_waiter *w, uint64_t *idp)
{
	if (is_dead(c))
		return CUDA_ERROR_DEVICE_UNAVAILABLE;
	uint64_t id = ++c->next_id;
	if (idp)
		*idp = id;
	if (w) {
		w->id = id;
		pthread_mutex_lock(&c->lock);
		w->next = c->waiters;
		c->waiters = w;
		pthread_mutex_unlock(&c->lock);
	}
	if (rgpu_frame_send(c->c, op, flags, id, a, alen, b, blen) < 0)
		return rc_conn_failed(c, "sending a request");
	return CUDA_SUCCESS;
}

static struct rc_waiter *waiter_find(struct rc_conn *c, uint64_t id)
{
	for (struct rc_waiter *w = c->waiters; w; w = w->next)
		if (w->id == id)
			return w;
	return NULL;
}

/* Device printf output of the request id, ahead of its reply: printed as
 * the program's own. */
static CUresult print_output(struct rc_conn *c, size_t len)
{
	char buf[4096];
	fflush(stdout);
	for (size_t left = len; left;) {
		size_t k = left < sizeof(buf) ? left : sizeof(buf);
		if (rgpu_recv(c->c, buf, k) < 0)
			return rc_conn_failed(c, "reading device output");
		for (size_t off = 0; off < k;) {
			ssize_t n = write(STDOUT_FILENO, buf + off, k - off);
			if (n <= 0)
				break; /* stdout closed: the output is dropped, not the call */
			off += (size_t)n;
		}
		left -= k;
	}
	return CUDA_SUCCESS;
}

static CUresult header_failed(struct rc_conn *c, int hs)
{
	switch (hs) {
	case RGPU_HDR_BAD_MAGIC:
		return rc_conn_fail(c, RGPU_E_FOREIGN, "the peer is not an rgpud: it answered with something "
				       "other than the rgpu protocol (another service on that port?)");
	case RGPU_HDR_TOO_LONG:
		return proto_fail(c, "a reply longer than the protocol allows");
	default:
		return rc_conn_failed(c, "reading a reply");
	}
}

/* Reads one frame and delivers it; called by the current reader only,
 * without c->lock. */
static CUresult read_one(struct rc_conn *c)
{
	struct rgpu_hdr h;
	errno = 0;
	int hs = rgpu_frame_recv_hdr(c->c, &h);
	if (hs != RGPU_HDR_OK)
		return header_failed(c, hs);
	if (!(h.flags & RGPU_F_REPLY))
		return proto_fail(c, "the server sent a request");
	if (h.op == RGPU_OP_OUTPUT)
		return print_output(c, h.len);
	if (h.len < 4)
		return proto_fail(c, "a reply without a status");
	pthread_mutex_lock(&c->lock);
	struct rc_waiter *w = waiter_find(c, h.id);
	int stale = w && w->last;
	pthread_mutex_unlock(&c->lock);
	if (!w || stale) {
		/* a caller that gave up (rc_waiter_done) or frames after the
		 * last: only ids that were sent may come back */
		if (h.id == 0 || h.id > __atomic_load_n(&c->next_id, __ATOMIC_RELAXED))
			return proto_fail(c, "a reply to a request never sent");
		if (rgpu_frame_skip(c->c, h.len) < 0)
			return rc_conn_failed(c, "reading a reply");
		return CUDA_SUCCESS;
	}
	if (h.op != w->op)
		return proto_fail(c, "a reply to another kind of request");
	if (w->sink) {
		uint8_t b[4];
		if (rgpu_recv(c->c, b, 4) < 0)
			return rc_conn_failed(c, "reading a reply");
		int32_t st = (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
				       (uint32_t)b[3] << 24);
		size_t k = h.len - 4;
		/* only this reader writes the sink; its waiter waits for last */
		if (k > w->sink_cap - w->sink_got)
			return proto_fail(c, "more data than asked for");
		if (k && rgpu_recv(c->c, w->sink + w->sink_got, k) < 0)
			return rc_conn_failed(c, "reading data");
		pthread_mutex_lock(&c->lock);
		w->sink_got += k;
		if (st && !w->sink_status)
			w->sink_status = st;
		/* an error frame is always the last */
		if (!(h.flags & RGPU_F_MORE) || st)
			w->last = 1;
		pthread_cond_broadcast(&c->cv);
		pthread_mutex_unlock(&c->lock);
		return CUDA_SUCCESS;
	}
	struct rc_frame *f = malloc(sizeof(*f) + h.len);
	if (!f)
		return rc_conn_fail(c, RGPU_E_SYSTEM, "out of memory for a reply");
	f->next = NULL;
	f->flags = h.flags;
	f->len = h.len;
	if (rgpu_recv(c->c, f->data, h.len) < 0) {
		free(f);
		return rc_conn_failed(c, "reading a reply");
	}
	pthread_mutex_lock(&c->lock);
	if (w->tail)
		w->tail->next = f;
	else
		w->head = f;
	w->tail = f;
	if (!(h.flags & RGPU_F_MORE))
		w->last = 1;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->lock);
	return CUDA_SUCCESS;
}

/* With c->lock held: returns once ready(w) holds or the connection is
 * dead, reading frames for everyone while nobody else does. */
static CUresult wait_until(struct rc_conn *c, struct rc_waiter *w, int (*ready)(const struct rc_waiter *))
{
	for (;;) {
		if (ready(w))
			return CUDA_SUCCESS;
		if (c->dead)
			return CUDA_ERROR_DEVICE_UNAVAILABLE;
		if (!c->reading) {
			c->reading = 1;
			pthread_mutex_unlock(&c->lock);
			(void)read_one(c); /* a failure marks the connection dead */
			pthread_mutex_lock(&c->lock);
			c->reading = 0;
			/* the read side is free: another waiter may need it */
			pthread_cond_broadcast(&c->cv);
			continue;
		}
		pthread_cond_wait(&c->cv, &c->lock);
	}
}

static int has_frame(const struct rc_waiter *w) { return w->head != NULL; }
static int has_all(const struct rc_waiter *w) { return w->last; }

CUresult rc_wait_frame(struct rc_conn *c, struct rc_waiter *w, struct rd *r, int32_t *st,
		       uint32_t *flags)
{
	rd_init(r, NULL, 0);
	r->bad = 1;
	*st = 0;
	*flags = 0;
	free(w->cur);
	w->cur = NULL;
	pthread_mutex_lock(&c->lock);
	CUresult rc = wait_until(c, w, has_frame);
	struct rc_frame *f = NULL;
	if (!rc) {
		f = w->head;
		w->head = f->next;
		if (!w->head)
			w->tail = NULL;
	}
	pthread_mutex_unlock(&c->lock);
	if (rc)
		return rc;
	w->cur = f;
	rd_init(r, f->data, f->len);
	*st = get_i32(r);
	*flags = f->flags;
	return CUDA_SUCCESS;
}

CUresult rc_wait_sink(struct rc_conn *c, struct rc_waiter *w)
{
	pthread_mutex_lock(&c->lock);
	CUresult rc = wait_until(c, w, has_all);
	pthread_mutex_unlock(&c->lock);
	return rc ? rc : rc_map_status(w->sink_status);
}

void rc_waiter_done(struct rc_conn *c, struct rc_waiter *w)
{
	pthread_mutex_lock(&c->lock);
	for (struct rc_waiter **p = &c->waiters; *p; p = &(*p)->next)
		if (*p == w) {
			*p = w->next;
			break;
		}
	pthread_mutex_unlock(&c->lock);
	while (w->head) {
		struct rc_frame *f = w->head;
		w->head = f->next;
		free(f);
	}
	w->tail = NULL;
	free(w->cur);
	w->cur = NULL;
}

/* One request, one reply frame; the reply is kept in the thread's buffer. */
static CUresult call(struct rc_conn *c, uint16_t op, const struct wbuf *req, struct rd *r,
		     int32_t *raw_status)
{
	rd_init(r, NULL, 0);
	r->bad = 1; /* empty until a reply arrives */
	if (raw_status)
		*raw_status = 0;
	struct tls_bufs *b = tls();
	if (!b || req->oom)
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct rc_waiter w;
	rc_waiter_init(&w, op, NULL, 0);
	rc_tx_begin(c);
	CUresult rc = rc_send(c, op, 0, req->data, req->len, NULL, 0, &w, NULL);
	rc_tx_end(c);
	int32_t st = 0;
	uint32_t flags = 0;
	if (!rc)
		rc = rc_wait_frame(c, &w, r, &st, &flags);
	if (!rc && (flags & RGPU_F_MORE))
		rc = proto_fail(c, "a multi-frame reply to a simple request");
	if (!rc) {
		/* keep the frame past rc_waiter_done: the caller reads it */
		free(b->reply);
		b->reply = w.cur;
		w.cur = NULL;
	}
	rc_waiter_done(c, &w);
	if (rc) {
		rd_init(r, NULL, 0);
		r->bad = 1;
		return rc;
	}
	if (raw_status)
		*raw_status = st;
	return rc_map_status(st);
}

CUresult rc_call(struct rc_conn *c, uint16_t op, const struct wbuf *req, struct rd *r)
{
	return call(c, op, req, r, NULL);
}

CUresult rc_post(struct rc_conn *c, uint16_t op, const struct wbuf *req)
{
	if (req->oom)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc_tx_begin(c);
	CUresult rc = rc_send(c, op, RGPU_F_NOREPLY, req->data, req->len, NULL, 0, NULL, NULL);
	rc_tx_end(c);
	return rc;
}

/* The handshake, bounded by RGPU_HANDSHAKE_TIMEOUT_MS: a peer that accepts
 * the connection and never answers (another service, a hung rgpud) fails
 * cuInit instead of hanging it. */
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
	int tmo = (int)rc_setting(RS_HANDSHAKE_TIMEOUT_MS);
	c->quiet = 1;
	(void)rgpu_conn_set_recv_timeout(c->c, tmo);
	struct rd r;
	int32_t st = 0;
	CUresult rc = call(c, RGPU_OP_HELLO, w, &r, &st);
	(void)rgpu_conn_set_recv_timeout(c->c, 0);
	c->quiet = 0;
	if (rc == CUDA_ERROR_DEVICE_UNAVAILABLE) {
		pthread_mutex_lock(&c->lock);
		if (c->err.code == RGPU_E_TIMEOUT)
			snprintf(err, errlen, "no answer to the handshake within %d ms "
					      "(RGPU_HANDSHAKE_TIMEOUT_MS): is it an rgpud, and is it "
					      "running?", tmo);
		else if (c->err.code == RGPU_E_FOREIGN)
			snprintf(err, errlen, "%s", c->err.text);
		else
			snprintf(err, errlen, "handshake failed: %s", c->err.text);
		pthread_mutex_unlock(&c->lock);
		return rc;
	}
	if (st) {
		const char *why = get_str(&r, 1024);
		snprintf(err, errlen, "%s", why ? why : "refused without a reason");
		return rc;
	}
	if (rc) {
		snprintf(err, errlen, "handshake failed (%d)", (int)rc);
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
	/* RGPU_CHUNK_KB (settings.c): pieces host-to-device copies are cut
	 * into; by default 4 MiB over a network and 2 MiB through shared
	 * memory, from bench/chunk-sweep.sh's curves on the H200
	 * (docs/benchmarks.md) */
	unsigned long long kb = rc_setting(RS_CHUNK_KB);
	return kb ? (size_t)kb * 1024 : dflt;
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
	struct rc_waiter wt;
	rc_waiter_init(&wt, RGPU_OP_MEMCPY_HTOD, NULL, 0);
	CUresult rc = CUDA_SUCCESS;
	/* all chunks go out back to back; only the last one is answered */
	rc_tx_begin(c);
	for (size_t off = 0; off < n && !rc; off += chunk) {
		size_t k = n - off < chunk ? n - off : chunk;
		int last = off + k == n && !async;
		w.len = 0;
		put_u64(&w, ctx->h);
		put_u64(&w, stream);
		put_u64(&w, dst);
		put_u64(&w, n);
		put_u64(&w, off);
		rc = rc_send(c, RGPU_OP_MEMCPY_HTOD, last ? 0 : RGPU_F_NOREPLY, f, sizeof(f),
			     (const uint8_t *)src + off, k, last ? &wt : NULL, NULL);
	}
	rc_tx_end(c);
	if (!rc && !async) {
		struct rd r;
		int32_t st;
		uint32_t flags;
		rc = rc_wait_frame(c, &wt, &r, &st, &flags);
		if (!rc)
			rc = rc_map_status(st);
	}
	rc_waiter_done(c, &wt);
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
	/* data frames land straight in the caller's buffer */
	struct rc_waiter wt;
	rc_waiter_init(&wt, RGPU_OP_MEMCPY_DTOH, dst, n);
	rc_tx_begin(c);
	CUresult rc = rc_send(c, RGPU_OP_MEMCPY_DTOH, 0, f, sizeof(f), NULL, 0, &wt, NULL);
	rc_tx_end(c);
	if (!rc)
		rc = rc_wait_sink(c, &wt);
	if (!rc && wt.sink_got != n) {
		rc_waiter_done(c, &wt);
		return rc_conn_fail(c, RGPU_E_PROTO, "protocol error: short data");
	}
	rc_waiter_done(c, &wt);
	return rc;
}
