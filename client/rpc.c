/*
 * Request/reply exchanges with rgpud.
 *
 * Several application threads share one connection.  A request's frames go
 * out under the connection's lock, and a request that wants a reply is
 * registered (a waiter) before it leaves; its caller then waits for the
 * reply by request id, without the lock.  Nobody owns the read side:
 * whichever waiter finds no one reading becomes the reader
 * (leader/follower).  It reads frames and hands each to the waiter of its
 * id (bulk data straight into the buffer that waiter offers) until a frame
 * of its own has come, then gives the read side to another waiter.  So one
 * thread's synchronising call does not hold up another's query, and the
 * server may answer in any order.
 */
#include "client.h"
#include "clock.h"
#include "cred.h"
#include "frame.h"
#include "log.h"
#include "settings.h"
#include "replay.h"
#include "stats.h"

#include <errno.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A received reply frame: header fields and the payload (status first). */
struct rc_frame {
	struct rc_frame *next;
	uint32_t flags;
	uint32_t len;
	uint8_t data[];
};

/* A request waiting for its reply frames. */
struct rc_waiter {
	struct rc_waiter *next;
	uint64_t id;
	uint16_t op;
	int heap;                   /* registered by rc_send_frame: freed at the end */
	struct rc_frame *head, *tail; /* frames read, not yet taken */
	/* a buffer its caller offers for the next frame's payload; the reader
	 * fills it in place when no frame is queued */
	uint8_t *sink;
	size_t sink_cap;
	int busy;                   /* the reader is delivering a frame to it */
	int sunk;                   /* it holds a frame: */
	int32_t sunk_st;
	uint32_t sunk_flags;
	size_t sunk_len;
};

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

/* A broken connection is final for now; later: reconnect and replay. */
CUresult rc_conn_fail(struct rc_conn *c, enum rgpu_errcode code, const char *why)
{
	pthread_mutex_lock(&c->rx_lock);
	int first = !c->dead;
	if (first) {
		rgpu_error_set(&c->err, code, "%s", why);
		c->dead = 1;
		pthread_cond_broadcast(&c->cv);
	}
	int quiet = c->quiet;
	pthread_mutex_unlock(&c->rx_lock);
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

static int is_dead(struct rc_conn *c)
{
	pthread_mutex_lock(&c->rx_lock);
	int d = c->dead;
	pthread_mutex_unlock(&c->rx_lock);
	return d;
}

static void waiter_add(struct rc_conn *c, struct rc_waiter *w)
{
	pthread_mutex_lock(&c->rx_lock);
	w->next = c->waiters;
	c->waiters = w;
	pthread_mutex_unlock(&c->rx_lock);
}

static struct rc_waiter *waiter_find(struct rc_conn *c, uint64_t id)
{
	for (struct rc_waiter *w = c->waiters; w; w = w->next)
		if (w->id == id)
			return w;
	return NULL;
}

/* With rx_lock held: w leaves the list; its unread frames are dropped. */
static void waiter_remove(struct rc_conn *c, struct rc_waiter *w)
{
	for (struct rc_waiter **p = &c->waiters; *p; p = &(*p)->next)
		if (*p == w) {
			*p = w->next;
			break;
		}
	while (w->head) {
		struct rc_frame *f = w->head;
		w->head = f->next;
		free(f);
	}
	w->tail = NULL;
}

/* ---- coalescing: requests without a reply wait for the next write ----
 *
 * rc_post queues its frame (c->txq, under c->lock); every other send
 * writes the queue ahead of its own frame in the same system call, so
 * requests keep their order.  A full queue goes at once; otherwise a
 * flusher thread sends it within RGPU_COALESCE_US, so work is never held
 * back by a program that stops calling.
 *
 * The first request of a burst (after a call that waited for a reply, or
 * after RGPU_COALESCE_US without one) goes at once, so that the server and the GPU
 * start on it, idle as they are, instead of after the coalescing delay;
 * then the queue goes at 2, 4, 8 ... frames, up to TXQ_MAX_FRAMES, so the
 * server keeps getting work while the batches grow to what saves system
 * calls. */

#define TXQ_MAX_BYTES (64 * 1024)
#define TXQ_MAX_FRAMES 64

static pthread_mutex_t fl_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fl_cv = PTHREAD_COND_INITIALIZER;
static struct rc_conn *fl_conns[RGPU_MAX_DEVICES * 2];
static unsigned fl_n;
static int fl_state; /* 0 not started, 1 running, -1 could not start */
static pid_t fl_pid;

/* With c->lock held: the queue and optionally one more frame, in one write. */
static int write_locked(struct rc_conn *c, const uint8_t *hb, const void *a, size_t alen,
			const void *b, size_t blen)
{
	struct iovec iov[4];
	int n = 0;
	if (c->txq.len)
		iov[n++] = (struct iovec){ c->txq.data, c->txq.len };
	if (hb) {
		iov[n++] = (struct iovec){ (void *)hb, RGPU_HDR_SIZE };
		if (alen)
			iov[n++] = (struct iovec){ (void *)a, alen };
		if (blen)
			iov[n++] = (struct iovec){ (void *)b, blen };
	}
	if (!n)
		return 0;
	int rc = rgpu_sendv(c->c, iov, n);
	rc_stats_write();
	wbuf_reset(&c->txq);
	c->txq_n = 0;
	return rc;
}

/* With c->lock held, after a failed write: the session recovers (its
 * requests, logged, are sent again: replay.c) or the connection fails. */
static CUresult send_failed(struct rc_conn *c)
{
	if (rc_replay_recover(c, 1, c->c) == 0)
		return CUDA_SUCCESS; /* sent again on the new connection */
	return rc_conn_failed(c, "sending a request");
}

void rc_flush(struct rc_conn *c)
{
	pthread_mutex_lock(&c->lock);
	if (c->txq.len && !is_dead(c) && write_locked(c, NULL, NULL, 0, NULL, 0) < 0)
		(void)send_failed(c);
	pthread_mutex_unlock(&c->lock);
}

static void *flusher(void *arg)
{
	(void)arg;
	long us = (long)rc_setting(RS_COALESCE_US);
	struct timespec d = { us / 1000000, (us % 1000000) * 1000 };
	pthread_mutex_lock(&fl_lock);
	for (;;) {
		while (!fl_n)
			pthread_cond_wait(&fl_cv, &fl_lock);
		pthread_mutex_unlock(&fl_lock);
		nanosleep(&d, NULL);
		pthread_mutex_lock(&fl_lock);
		struct rc_conn *cs[sizeof(fl_conns) / sizeof(fl_conns[0])];
		unsigned n = fl_n;
		memcpy(cs, fl_conns, n * sizeof(*cs));
		fl_n = 0;
		pthread_mutex_unlock(&fl_lock);
		for (unsigned i = 0; i < n; i++)
			rc_flush(cs[i]);
		pthread_mutex_lock(&fl_lock);
	}
	return NULL;
}

/* c's queue became non-empty: the flusher sends it in time.  0, or -1
 * when there is no flusher (the caller sends at once). */
static int flush_later(struct rc_conn *c)
{
	pthread_mutex_lock(&fl_lock);
	if (fl_state == 0 || (fl_state == 1 && fl_pid != getpid())) {
		/* (a forked child has no flusher thread: it starts its own) */
		fl_state = rc_thread_start(flusher, NULL) == 0 ? 1 : -1;
		fl_pid = getpid();
		fl_n = 0;
	}
	int ok = fl_state == 1;
	if (ok) {
		unsigned i;
		for (i = 0; i < fl_n && fl_conns[i] != c; i++)
			;
		if (i == fl_n && fl_n < sizeof(fl_conns) / sizeof(fl_conns[0]))
			fl_conns[fl_n++] = c;
		else if (i == fl_n)
			ok = 0;
		pthread_cond_signal(&fl_cv);
	}
	pthread_mutex_unlock(&fl_lock);
	return ok ? 0 : -1;
}

/* w: registered for the reply (NULL for RGPU_F_NOREPLY); c->lock held.
 * queue: the frame may wait in c->txq (rc_post). */
/* send_locked's how */
#define SEND_QUEUE 1  /* may wait in the coalescing queue */
#define SEND_BORROW 2 /* the log borrows b (rc_replay_log) */

static CUresult send_locked(struct rc_conn *c, uint16_t op, uint32_t flags, const void *a,
			    size_t alen, const void *b, size_t blen, struct rc_waiter *w,
			    uint64_t *idp, int how)
{
	int queue = how & SEND_QUEUE;
	if (is_dead(c))
		return CUDA_ERROR_DEVICE_UNAVAILABLE;
	if (alen + blen > RGPU_MAX_PAYLOAD || alen + blen < alen)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t id = __atomic_add_fetch(&c->next_id, 1, __ATOMIC_RELAXED);
	if (idp)
		*idp = id;
	if (w) {
		w->id = id;
		w->op = op;
		waiter_add(c, w);
	}
	struct rgpu_hdr h = { .magic = RGPU_PROTO_MAGIC, .version = RGPU_PROTO_VERSION,
			      .op = op, .flags = flags, .len = (uint32_t)(alen + blen), .id = id };
	uint8_t hb[RGPU_HDR_SIZE];
	rgpu_hdr_encode(&h, hb);
	/* kept until served: a session that moves or recovers sends it again
	 * (queued requests too: recovery drops the queue, replay.c) */
	rc_replay_log(c, id, op, flags, a, alen, b, blen, (how & SEND_BORROW) != 0);
	rc_stats_request(op, w != NULL, RGPU_HDR_SIZE + alen + blen);
	/* through shared memory a frame costs a copy, not a system call:
	 * nothing to save by waiting */
	uint64_t window = queue && !c->shmq ? rc_setting(RS_COALESCE_US) * 1000ull : 0;
	if (window && !blen) {
		uint64_t now = rgpu_now_ns();
		if (!c->txq.len && now - c->txq_last_ns > window)
			c->txq_burst = 0; /* a pause: the next burst starts */
		c->txq_last_ns = now;
	}
	if (window && !blen && (c->txq.len || c->txq_burst)) {
		size_t before = c->txq.len;
		put_raw(&c->txq, hb, sizeof(hb));
		put_raw(&c->txq, a, alen);
		if (!c->txq.oom) {
			if (++c->txq_n < c->txq_burst && c->txq.len < TXQ_MAX_BYTES &&
			    (before || flush_later(c) == 0))
				return CUDA_SUCCESS;
			/* full (or no flusher): everything goes now */
			c->txq_burst = c->txq_burst < 2 ? 2
				     : c->txq_burst < TXQ_MAX_FRAMES ? 2 * c->txq_burst
								      : TXQ_MAX_FRAMES;
			if (write_locked(c, NULL, NULL, 0, NULL, 0) < 0)
				return send_failed(c);
			return CUDA_SUCCESS;
		}
		/* no room: the queue as it was, then this frame */
		c->txq.len = before;
		c->txq.oom = 0;
	}
	/* a burst starts with a request that may wait (it goes now); one
	 * that waits for a reply ends it */
	c->txq_burst = queue && !w ? 2 : 0;
	if (write_locked(c, hb, a, alen, b, blen) < 0)
		return send_failed(c);
	return CUDA_SUCCESS;
}

CUresult rc_send_frame(struct rc_conn *c, uint16_t op, uint32_t flags, uint64_t *id,
		       const void *a, size_t alen, const void *b, size_t blen, int borrow)
{
	struct rc_waiter *w = NULL;
	if (!(flags & RGPU_F_NOREPLY)) {
		w = calloc(1, sizeof(*w));
		if (!w)
			return CUDA_ERROR_OUT_OF_MEMORY;
		w->heap = 1;
	}
	return send_locked(c, op, flags, a, alen, b, blen, w, id, borrow ? SEND_BORROW : 0);
}

/* ---- the reader's receive buffer ---- */

#define RXBUF_CAP (64 * 1024)

void rc_rx_buffered(struct rc_conn *c)
{
	if (!c->rxbuf)
		c->rxbuf = malloc(RXBUF_CAP); /* none: unbuffered reads */
}

/* While the reading thread waits for a reply that waits for the GPU
 * (rc_reply_frame): how long it spins before a receive that would sleep
 * (and, with RGPU_STATS, whether it had to). */
static _Thread_local int rx_sync;
static _Thread_local uint64_t rx_spin_ns;

static void rx_spin(struct rc_conn *c)
{
	if (!rx_sync || (!rx_spin_ns && !rc_stats_on))
		return; /* (the default: no look at the socket) */
	enum rc_sync_wait how = RC_WAIT_READY;
	if (rgpu_conn_ready(c->c) == 0)
		how = rx_spin_ns && rgpu_conn_spin(c->c, rx_spin_ns) > 0 ? RC_WAIT_SPUN : RC_WAIT_SLEPT;
	rc_stats_sync_wait(how);
}

/* n bytes of the reply stream, by the reader: from the buffer, then a
 * large remainder straight into dst, a small one through the buffer
 * (whatever else has arrived comes with it).  0, or -1 (errno set; 0 on
 * EOF), as rgpu_recv. */
static int rx(struct rc_conn *c, void *dst, size_t n)
{
	if (!c->rxbuf) {
		rx_spin(c);
		return rgpu_recv(c->c, dst, n);
	}
	uint8_t *d = dst;
	size_t have = c->rx_len - c->rx_off, k = have < n ? have : n;
	memcpy(d, c->rxbuf + c->rx_off, k);
	c->rx_off += k;
	d += k;
	n -= k;
	if (!n)
		return 0;
	if (n >= RXBUF_CAP / 2)
		return rgpu_recv(c->c, d, n);
	c->rx_off = c->rx_len = 0;
	rx_spin(c);
	while (c->rx_len < n) {
		ssize_t r = rgpu_recv_some(c->c, c->rxbuf + c->rx_len, RXBUF_CAP - c->rx_len);
		if (r <= 0) {
			if (r == 0)
				errno = 0;
			return -1;
		}
		c->rx_len += (size_t)r;
	}
	memcpy(d, c->rxbuf, n);
	c->rx_off = n;
	return 0;
}

static int rx_skip(struct rc_conn *c, size_t n)
{
	uint8_t buf[4096];
	while (n) {
		size_t k = n < sizeof(buf) ? n : sizeof(buf);
		if (rx(c, buf, k) < 0)
			return -1;
		n -= k;
	}
	return 0;
}

/* Device printf output of the request id, ahead of its reply: printed as
 * the program's own. */
static CUresult print_output(struct rc_conn *c, size_t len)
{
	char buf[4096];
	fflush(stdout);
	for (size_t left = len; left;) {
		size_t k = left < sizeof(buf) ? left : sizeof(buf);
		if (rx(c, buf, k) < 0)
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
		return rc_conn_fail(c, RGPU_E_FOREIGN, "what answered is not an rgpud: it speaks something "
				       "other than the rgpu protocol (another service on that port?)");
	case RGPU_HDR_TOO_LONG:
		return proto_fail(c, "a reply longer than the protocol allows");
	default:
		return rc_conn_failed(c, "reading a reply");
	}
}

static int32_t le32(const uint8_t *b)
{
	return (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
			 (uint32_t)b[3] << 24);
}

/* The payload of h for w: into its sink, or queued as a frame.  w is
 * marked busy meanwhile, so that it outlives the delivery even if the
 * connection dies and its caller stops waiting. */
static CUresult deliver(struct rc_conn *c, const struct rgpu_hdr *h, struct rc_waiter *w,
			uint8_t *sink, size_t cap)
{
	uint8_t b[4];
	size_t k = h->len - 4;
	struct rc_frame *f = NULL;
	CUresult rc = CUDA_SUCCESS;
	if (h->op != w->op) {
		rc = proto_fail(c, "a reply to another kind of request");
	} else if (sink) {
		if (rx(c, b, 4) < 0)
			rc = rc_conn_failed(c, "reading a reply");
		else if (k > cap)
			rc = proto_fail(c, "more data than asked for");
		else if (k && rx(c, sink, k) < 0)
			rc = rc_conn_failed(c, "reading data");
	} else if (!(f = malloc(sizeof(*f) + h->len))) {
		rc = rc_conn_fail(c, RGPU_E_SYSTEM, "out of memory for a reply");
	} else if (rx(c, f->data, h->len) < 0) {
		rc = rc_conn_failed(c, "reading a reply");
	}
	pthread_mutex_lock(&c->rx_lock);
	w->busy = 0;
	if (!rc && sink) {
		w->sunk = 1;
		w->sunk_st = le32(b);
		w->sunk_flags = h->flags;
		w->sunk_len = k;
	} else if (!rc) {
		f->next = NULL;
		f->flags = h->flags;
		f->len = h->len;
		if (w->tail)
			w->tail->next = f;
		else
			w->head = f;
		w->tail = f;
		f = NULL;
	}
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->rx_lock);
	free(f);
	return rc;
}

/* An EVENT_DONE notice: no request's reply */
static CUresult notice(struct rc_conn *c, size_t len)
{
	uint8_t b[20];
	if (len != sizeof(b))
		return proto_fail(c, "a malformed event notice");
	if (rx(c, b, sizeof(b)) < 0)
		return rc_conn_failed(c, "reading an event notice");
	uint64_t h = 0, seq = 0;
	for (int i = 7; i >= 0; i--) {
		h = h << 8 | b[4 + i];
		seq = seq << 8 | b[12 + i];
	}
	rc_event_notice(c, le32(b), h, seq);
	return CUDA_SUCCESS;
}

/* Reads one frame and delivers it; called by the current reader only,
 * without rx_lock. */
static CUresult read_one(struct rc_conn *c)
{
	struct rgpu_hdr h;
	errno = 0;
	struct rgpu_conn *cc = __atomic_load_n(&c->c, __ATOMIC_ACQUIRE);
	int hs = RGPU_HDR_OK;
	uint8_t hb[RGPU_HDR_SIZE];
	if (rx(c, hb, sizeof(hb)) < 0) {
		hs = RGPU_HDR_EOF;
	} else {
		rgpu_hdr_decode(hb, &h);
		if (h.magic != RGPU_PROTO_MAGIC)
			hs = RGPU_HDR_BAD_MAGIC;
		else if (h.len > RGPU_MAX_PAYLOAD)
			hs = RGPU_HDR_TOO_LONG;
	}
	if (hs != RGPU_HDR_OK) {
		/* at a frame boundary: a moved session or a standby carries on
		 * (on a new connection: nothing buffered from the old one) */
		if (hs == RGPU_HDR_EOF) {
			c->rx_off = c->rx_len = 0;
			if (rc_replay_recover(c, 0, cc) == 0)
				return CUDA_SUCCESS;
		}
		return header_failed(c, hs);
	}
	rc_stats_received(RGPU_HDR_SIZE + (size_t)h.len);
	if (!(h.flags & RGPU_F_REPLY))
		return proto_fail(c, "the server sent a request");
	if (h.op == RGPU_OP_OUTPUT)
		return print_output(c, h.len);
	if (h.op == RGPU_OP_MOVED) {
		uint8_t mb[4096];
		if (h.len > sizeof(mb) || rx(c, mb, h.len) < 0 || rc_replay_moved(c, mb, h.len) < 0)
			return proto_fail(c, "a malformed MOVED notice");
		/* the notice is the old server's last frame (the target holds
		 * the session already): re-attach now, not at the old
		 * connection's end, which comes once the old worker has torn
		 * its copy down (2-3 ms of the pause on two H200s) */
		c->rx_off = c->rx_len = 0;
		if (rc_replay_recover(c, 0, cc) == 0)
			return CUDA_SUCCESS;
		return rc_conn_failed(c, "re-attaching the moved session");
	}
	if (h.op == RGPU_OP_EVENT_DONE)
		return notice(c, h.len);
	if (h.len < 4)
		return proto_fail(c, "a reply without a status");
	rc_replay_served(c, h.id);
	pthread_mutex_lock(&c->rx_lock);
	struct rc_waiter *w = waiter_find(c, h.id);
	uint8_t *sink = NULL;
	size_t cap = 0;
	if (w) {
		w->busy = 1;
		if (w->sink && !w->head && !w->sunk) {
			sink = w->sink;
			cap = w->sink_cap;
		}
	}
	pthread_mutex_unlock(&c->rx_lock);
	if (w)
		return deliver(c, &h, w, sink, cap);
	/* its caller gave up; only ids that were sent may come back */
	if (h.id == 0 || h.id > __atomic_load_n(&c->next_id, __ATOMIC_RELAXED))
		return proto_fail(c, "a reply to a request never sent");
	if (rx_skip(c, h.len) < 0)
		return rc_conn_failed(c, "reading a reply");
	return CUDA_SUCCESS;
}

/* With rx_lock held: returns once w has a frame, or the connection is dead
 * (and the reader is done with w), reading frames for everyone while
 * nobody else does. */
static CUresult wait_frame(struct rc_conn *c, struct rc_waiter *w)
{
	for (;;) {
		if (w->head || w->sunk)
			return CUDA_SUCCESS;
		if (c->dead && !w->busy)
			return CUDA_ERROR_DEVICE_UNAVAILABLE;
		if (!c->reading && !c->dead) {
			c->reading = 1;
			pthread_mutex_unlock(&c->rx_lock);
			(void)read_one(c); /* a failure marks the connection dead */
			pthread_mutex_lock(&c->rx_lock);
			c->reading = 0;
			/* the read side is free: another waiter may need it */
			pthread_cond_broadcast(&c->cv);
			continue;
		}
		pthread_cond_wait(&c->cv, &c->rx_lock);
	}
}

int rc_poll(struct rc_conn *c)
{
	if (!c->c || rgpu_conn_fd(c->c) < 0)
		return -1;
	/* what is asked about may still be queued here */
	rc_flush(c);
	pthread_mutex_lock(&c->rx_lock);
	if (c->dead) {
		pthread_mutex_unlock(&c->rx_lock);
		return -1;
	}
	if (c->reading) { /* that reader delivers what comes */
		pthread_mutex_unlock(&c->rx_lock);
		return 0;
	}
	c->reading = 1;
	pthread_mutex_unlock(&c->rx_lock);
	for (;;) {
		/* bytes in the buffer: a frame at least begun there */
		if (c->rx_off == c->rx_len && rgpu_conn_ready(c->c) <= 0)
			break;
		if (read_one(c))
			break; /* the connection is marked dead */
	}
	pthread_mutex_lock(&c->rx_lock);
	c->reading = 0;
	int dead = c->dead;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->rx_lock);
	return dead ? -1 : 0;
}

/* Takes w's next frame into f (see rc_reply_frame); rx_lock not held. */
static CUresult take_frame(struct rc_conn *c, struct rc_waiter *w, struct rc_reply *f, void *sink,
			   size_t cap)
{
	memset(f, 0, sizeof(*f));
	rd_init(&f->r, NULL, 0);
	f->r.bad = 1;
	pthread_mutex_lock(&c->rx_lock);
	if (sink && !w->head) {
		w->sink = sink;
		w->sink_cap = cap;
	}
	CUresult rc = wait_frame(c, w);
	w->sink = NULL;
	struct rc_frame *fr = NULL;
	if (!rc && w->sunk) {
		w->sunk = 0;
		f->st = w->sunk_st;
		f->flags = w->sunk_flags;
		f->len = w->sunk_len;
		rd_init(&f->r, sink, 0);
	} else if (!rc) {
		fr = w->head;
		w->head = fr->next;
		if (!w->head)
			w->tail = NULL;
	}
	pthread_mutex_unlock(&c->rx_lock);
	if (!fr)
		return rc;
	f->st = le32(fr->data);
	f->flags = fr->flags;
	f->len = fr->len - 4;
	if (sink) {
		/* came before the sink was offered: copied once */
		int fits = f->len <= cap;
		if (fits)
			memcpy(sink, fr->data + 4, f->len);
		free(fr);
		rd_init(&f->r, sink, 0);
		return fits ? CUDA_SUCCESS : proto_fail(c, "more data than asked for");
	}
	struct tls_bufs *b = tls();
	if (!b) {
		free(fr);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	free(b->reply);
	b->reply = fr;
	rd_init(&f->r, fr->data + 4, f->len);
	return CUDA_SUCCESS;
}

/* A reply that comes when the GPU is done with queued work: its waiter
 * may spin first (RGPU_SYNC_SPIN_US), as CUDA's own synchronisation does
 * in a context not made with CU_CTX_SCHED_BLOCKING_SYNC, to spare the
 * wake-up a sleeping one costs.  Off by default: with rgpud on the same
 * host the spinning client slowed the worker's launches (H100,
 * 2026-11-28: the driver's launch call 29% slower, 200-launch batches at
 * 5.7 us a launch instead of 4.2; a TCP training step 16% slower). */
static int sync_spin_ns(uint16_t op, uint64_t *ns)
{
	switch (op) {
	case RGPU_OP_CTX_SYNC:
	case RGPU_OP_STREAM_SYNC:
	case RGPU_OP_EVENT_SYNC:
	case RGPU_OP_MEMCPY_DTOH:
	case RGPU_OP_SHM_DTOH:
		break;
	default:
		return 0;
	}
	*ns = rc_setting(RS_SYNC_SPIN_US) * 1000ull;
	struct rc_ctx *x = *ns ? rc_current() : NULL;
	if (x && (x->flags & CU_CTX_SCHED_MASK) == CU_CTX_SCHED_BLOCKING_SYNC)
		*ns = 0;
	return 1;
}

CUresult rc_reply_frame(struct rc_conn *c, uint64_t id, uint16_t op, struct rc_reply *f,
			void *sink, size_t sinkcap)
{
	pthread_mutex_lock(&c->rx_lock);
	struct rc_waiter *w = waiter_find(c, id);
	pthread_mutex_unlock(&c->rx_lock);
	if (!w || w->op != op) {
		memset(f, 0, sizeof(*f));
		f->r.bad = 1;
		return is_dead(c) ? CUDA_ERROR_DEVICE_UNAVAILABLE : CUDA_ERROR_INVALID_VALUE;
	}
	uint64_t t0 = rc_stats_on ? rgpu_now_ns() : 0;
	rx_sync = sync_spin_ns(op, &rx_spin_ns);
	CUresult rc = take_frame(c, w, f, sink, sinkcap);
	rx_sync = 0;
	if (!rc && (op == RGPU_OP_MEM_ALLOC || op == RGPU_OP_MEM_ALLOC_ASYNC) && !f->st && !sink &&
	    f->len >= 8) {
		struct rd t = f->r;
		rc_replay_alloc(c, id, get_u64(&t));
	}
	if (rc_stats_on)
		rc_stats_wait(op, rgpu_now_ns() - t0);
	/* the reply is over: its last frame, an error, or a dead connection */
	if (rc || !(f->flags & RGPU_F_MORE) || f->st) {
		pthread_mutex_lock(&c->rx_lock);
		waiter_remove(c, w);
		pthread_mutex_unlock(&c->rx_lock);
		if (w->heap)
			free(w);
	}
	return rc;
}

/* One request, one reply frame; the reply is kept in the thread's buffer.
 * locked: the caller holds c->lock already. */
static CUresult call(struct rc_conn *c, uint16_t op, const struct wbuf *req, struct rd *r,
		     int32_t *raw_status, int locked)
{
	rd_init(r, NULL, 0);
	r->bad = 1; /* empty until a reply arrives */
	if (raw_status)
		*raw_status = 0;
	if (req->oom)
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct rc_waiter w = { 0 };
	uint64_t id = 0; /* stays 0 if nothing was sent: no waiter has it */
	if (!locked) {
		rc_hostfn_gate(c, op);
		pthread_mutex_lock(&c->lock);
	}
	CUresult rc = send_locked(c, op, 0, req->data, req->len, NULL, 0, &w, &id, 0);
	if (!locked)
		pthread_mutex_unlock(&c->lock);
	/* also after a failed send: that takes w off the list once the
	 * reader is done with it */
	struct rc_reply f;
	CUresult rrc = rc_reply_frame(c, id, op, &f, NULL, 0);
	if (!rc)
		rc = rrc;
	if (!rc && (f.flags & RGPU_F_MORE) && !f.st) {
		rc = proto_fail(c, "a multi-frame reply to a simple request");
		/* w leaves the list when the dead connection is noticed */
		while (rc_reply_frame(c, id, op, &f, NULL, 0) == CUDA_SUCCESS &&
		       (f.flags & RGPU_F_MORE) && !f.st)
			;
	}
	if (rc)
		return rc;
	*r = f.r;
	if (raw_status)
		*raw_status = f.st;
	/* a synchronisation point: a checkpoint may be due (standby.c) */
	if (!locked && !f.st &&
	    (op == RGPU_OP_CTX_SYNC || op == RGPU_OP_STREAM_SYNC || op == RGPU_OP_EVENT_SYNC)) {
		if (rc_standby_tick(c))
			rd_init(r, NULL, 0); /* no fields; the thread's buffer was reused */
	}
	return rc_status(f.st);
}

CUresult rc_call(struct rc_conn *c, uint16_t op, const struct wbuf *req, struct rd *r)
{
	return call(c, op, req, r, NULL, 0);
}

CUresult rc_call_locked(struct rc_conn *c, uint16_t op, const struct wbuf *req, struct rd *r)
{
	return call(c, op, req, r, NULL, 1);
}

CUresult rc_post(struct rc_conn *c, uint16_t op, const struct wbuf *req)
{
	if (req->oom)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc_hostfn_gate(c, op);
	pthread_mutex_lock(&c->lock);
	CUresult rc = send_locked(c, op, RGPU_F_NOREPLY, req->data, req->len, NULL, 0, NULL, NULL, SEND_QUEUE);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

/* RGPU_SHARE=P (1..100): this session asks for a smaller compute share
 * than its lease gives (SESSION_SHARE, daemon/sched/); the server never
 * raises a share.  A bad value fails cuInit, naming the variable. */
static CUresult rc_share(struct rc_conn *c, char *err, size_t errlen)
{
	const char *v = getenv("RGPU_SHARE");
	if (!v || !*v)
		return CUDA_SUCCESS;
	char *end;
	errno = 0;
	long p = strtol(v, &end, 10);
	if (errno || *end || p < 1 || p > 100) {
		snprintf(err, errlen, "RGPU_SHARE=%s: not a percentage from 1 to 100", v);
		return CUDA_ERROR_INVALID_VALUE;
	}
	struct wbuf *w = rc_req();
	put_u32(w, (uint32_t)p);
	struct rd r;
	int32_t st = 0;
	CUresult rc = call(c, RGPU_OP_SESSION_SHARE, w, &r, &st, 0);
	if (rc == CUDA_SUCCESS && st == 0)
		return CUDA_SUCCESS;
	/* an older server: the share is a wish, the session goes on */
	log_warn("RGPU_SHARE=%ld: the server did not take it (status %d)", p, (int)st);
	return CUDA_SUCCESS;
}

/* The handshake, bounded by RGPU_HANDSHAKE_TIMEOUT_MS: a peer that accepts
 * the connection and never answers (another service, a hung rgpud) fails
 * cuInit instead of hanging it.  The bound stays on every receive until
 * the caller lifts it (cuInit does once its own calls are done). */
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
	CUresult rc = call(c, RGPU_OP_HELLO, w, &r, &st, 0);
	c->quiet = 0;
	if (rc == CUDA_ERROR_DEVICE_UNAVAILABLE) {
		pthread_mutex_lock(&c->rx_lock);
		if (c->err.code == RGPU_E_TIMEOUT)
			snprintf(err, errlen, "no answer to the handshake within %d ms "
					      "(RGPU_HANDSHAKE_TIMEOUT_MS): is it an rgpud, and is it "
					      "running?", tmo);
		else if (c->err.code == RGPU_E_FOREIGN)
			snprintf(err, errlen, "%s", c->err.text);
		else
			snprintf(err, errlen, "handshake failed: %s", c->err.text);
		pthread_mutex_unlock(&c->rx_lock);
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
	if (r.left >= 4) /* the server's checkpoint interval (standby.c) */
		c->ckpt_interval = get_u32(&r);
	if (r.left >= 8) /* which rgpud (IPC handles: ipc.c) */
		c->instance = get_u64(&r);
	return rc_share(c, err, errlen);
}
