/* The client's call/reply core (client/rpc.c) against a scripted server on
 * a socketpair:
 *  - out of order: thread A's call waits while thread B's call goes out
 *    and is answered first (the server waits for both requests before it
 *    answers either: a client that holds the connection for A's whole wait
 *    never sends B's, and the server says so);
 *  - a bulk device-to-host reply lands in the caller's buffer while
 *    another thread's reply and device output frames come in between;
 *  - many threads, replies shuffled: each call gets its own reply;
 *  - a foreign peer (HTTP garbage) is named as such, with no stale errno;
 *  - a silent peer: the handshake fails within RGPU_HANDSHAKE_TIMEOUT_MS;
 *  - reply fields read after a failed call read nothing;
 *  - event notices (EVENT_DONE, id 0) reach rc_event_notice, read by
 *    rc_poll without a call waiting and between a call's reply frames;
 *    a malformed one drops the connection. */
#include "tap.h"
#include "client.h"
#include "frame.h"
#include "log.h"
#include "replay_int.h"
#include "settings.h"
#include "xfer_client.h"

#include <errno.h>
#include <poll.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* the device table (client/init.c) that a moved session renumbers
 * (replay.c): no device here */
struct rc_dev rc_devs[RGPU_MAX_DEVICES];

/* rpc.c's host-function gate (client/hostfn.c): none is ever out here */
void rc_hostfn_gate(struct rc_conn *c, uint16_t op)
{
	(void)c;
	(void)op;
}

/* the calling thread's context (client/context.c), whose flags say
 * whether a wait for the GPU spins: none here (the default spin) */
struct rc_ctx *rc_current(void)
{
	return NULL;
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* A client connection on one end of a socketpair; *srv_fd gets the other. */
static void conn_open(struct rc_conn *c, int *srv_fd)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		BAIL("socketpair: %s", strerror(errno));
	memset(c, 0, sizeof(*c));
	snprintf(c->host, sizeof(c->host), "test");
	c->port = 1;
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->rx_lock, NULL);
	pthread_cond_init(&c->cv, NULL);
	pthread_mutex_init(&c->ring_lock, NULL);
	c->c = rgpu_stream_wrap(sv[0], "test");
	if (!c->c)
		BAIL("rgpu_stream_wrap");
	/* replies read through the buffer, as after cuInit (every second
	 * connection reads without it) */
	static int n;
	if (n++ % 2 == 0)
		rc_rx_buffered(c);
	*srv_fd = sv[1];
}

static void conn_close(struct rc_conn *c)
{
	rgpu_conn_close(c->c);
	free(c->rxbuf);
}

/* The server side: the next request, its fields in buf (at most cap). */
static int srv_recv(struct rgpu_conn *s, struct rgpu_hdr *h, uint8_t *buf, size_t cap,
		    int timeout_ms)
{
	struct pollfd p = { .fd = rgpu_tcp_fd(s), .events = POLLIN };
	if (poll(&p, 1, timeout_ms) != 1)
		return -1;
	if (rgpu_frame_recv_hdr(s, h) != RGPU_HDR_OK || h->len > cap)
		return -1;
	return rgpu_recv(s, buf, h->len);
}

/* A reply: status then fields. */
static int srv_reply(struct rgpu_conn *s, const struct rgpu_hdr *req, uint32_t flags, int32_t st,
		     const void *p, size_t n)
{
	uint8_t b[4] = { (uint8_t)st, (uint8_t)(st >> 8), (uint8_t)(st >> 16), (uint8_t)(st >> 24) };
	return rgpu_frame_send(s, req->op, RGPU_F_REPLY | flags, req->id, b, 4, p, n);
}

/* ------------------------------------------------------------ out of order */

struct caller {
	struct rc_conn *c;
	uint16_t op;
	uint64_t arg, got;
	CUresult rc;
	double done_ms;
};

static void *do_call(void *arg)
{
	struct caller *k = arg;
	struct wbuf *w = rc_req();
	put_u64(w, k->arg);
	struct rd r;
	k->rc = rc_call(k->c, k->op, w, &r);
	k->got = get_u64(&r);
	if (!rd_done(&r))
		k->got = ~0ull;
	k->done_ms = now_ms();
	return NULL;
}

struct srv_ooo {
	struct rgpu_conn *s;
	int both_seen;
};

/* Takes A's request, then waits for B's before answering: B first, then A. */
static void *srv_out_of_order(void *arg)
{
	struct srv_ooo *x = arg;
	struct rgpu_hdr ha, hb;
	uint8_t a[64], b[64];
	if (srv_recv(x->s, &ha, a, sizeof(a), 5000) < 0)
		return NULL;
	if (srv_recv(x->s, &hb, b, sizeof(b), 3000) < 0)
		return NULL; /* B's request never came while A waited */
	x->both_seen = 1;
	uint64_t vb = 0, va = 0;
	memcpy(&vb, b, 8);
	memcpy(&va, a, 8);
	vb += 1000;
	va += 1000;
	srv_reply(x->s, &hb, 0, 0, &vb, 8);
	usleep(100 * 1000); /* A's reply comes clearly later */
	srv_reply(x->s, &ha, 0, 0, &va, 8);
	return NULL;
}

static void test_out_of_order(void)
{
	struct rc_conn c;
	int fd;
	conn_open(&c, &fd);
	struct srv_ooo x = { .s = rgpu_stream_wrap(fd, "srv") };
	pthread_t ts, ta, tb;
	pthread_create(&ts, NULL, srv_out_of_order, &x);
	struct caller A = { .c = &c, .op = RGPU_OP_CTX_SYNC, .arg = 1 };
	struct caller B = { .c = &c, .op = RGPU_OP_MEM_GET_INFO, .arg = 2 };
	pthread_create(&ta, NULL, do_call, &A);
	usleep(50 * 1000); /* A is waiting */
	pthread_create(&tb, NULL, do_call, &B);
	pthread_join(ts, NULL);
	if (!x.both_seen)
		rc_conn_fail(&c, RGPU_E_PROTO, "test: server gave up"); /* frees the callers */
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	ok(x.both_seen, "B's request goes out while A waits for its reply");
	is_i64(A.rc, CUDA_SUCCESS, "A's call succeeds");
	is_i64(B.rc, CUDA_SUCCESS, "B's call succeeds");
	is_u64(A.got, 1001, "A gets A's reply");
	is_u64(B.got, 1002, "B gets B's reply");
	ok(B.done_ms < A.done_ms, "B returns before A (answered first)");
	rgpu_conn_close(x.s);
	conn_close(&c);
}

/* ------------------------------------------------------------- bulk sink */

#define BULK (9u * 1024 * 1024 + 123)

static uint8_t pattern(size_t i) { return (uint8_t)((i * 2654435761u) >> 11); }

struct srv_bulk {
	struct rgpu_conn *s;
	int ok;
};

/* DTOH request, then a call: data in 1 MiB frames, with the call's reply
 * and a device output frame between them. */
static void *srv_bulk(void *arg)
{
	struct srv_bulk *x = arg;
	struct rgpu_hdr hd, hq;
	uint8_t a[64], b[64];
	if (srv_recv(x->s, &hd, a, sizeof(a), 5000) < 0 || srv_recv(x->s, &hq, b, sizeof(b), 5000) < 0)
		return NULL;
	if (hq.op == RGPU_OP_MEMCPY_DTOH) { /* the query came first */
		struct rgpu_hdr t = hd;
		hd = hq;
		hq = t;
	}
	if (hd.op != RGPU_OP_MEMCPY_DTOH || hq.op != RGPU_OP_MEM_GET_INFO)
		return NULL;
	uint8_t *data = malloc(BULK);
	if (!data)
		return NULL;
	for (size_t i = 0; i < BULK; i++)
		data[i] = pattern(i);
	const size_t piece = 1u << 20;
	for (size_t off = 0; off < BULK; off += piece) {
		size_t k = BULK - off < piece ? BULK - off : piece;
		if (off == 2 * piece) {
			uint64_t v = 77;
			srv_reply(x->s, &hq, 0, 0, &v, 8);
			const char out[] = "device says hi\n";
			rgpu_frame_send(x->s, RGPU_OP_OUTPUT, RGPU_F_REPLY, hd.id, out, sizeof(out) - 1,
					NULL, 0);
		}
		srv_reply(x->s, &hd, off + k < BULK ? RGPU_F_MORE : 0, 0, data + off, k);
	}
	free(data);
	x->ok = 1;
	return NULL;
}

static void test_bulk(void)
{
	struct rc_conn c;
	int fd;
	conn_open(&c, &fd);
	struct srv_bulk x = { .s = rgpu_stream_wrap(fd, "srv") };
	struct rc_dev dev = { .conn = &c };
	struct rc_ctx ctx = { .magic = RC_CTX, .dev = &dev, .h = 1 };
	pthread_t ts, tq;
	pthread_create(&ts, NULL, srv_bulk, &x);
	uint8_t *buf = calloc(1, BULK);
	if (!buf)
		BAIL("out of memory");
	/* the copy here, a query in another thread; the server waits for
	 * both requests, then answers the query amid the copy's data */
	struct caller Q = { .c = &c, .op = RGPU_OP_MEM_GET_INFO, .arg = 5 };
	pthread_create(&tq, NULL, do_call, &Q);
	CUresult rc = rc_xfer_copy(&rc_xfer_socket, &ctx, 0, 0x1000, buf, BULK, 1, 0);
	pthread_join(tq, NULL);
	pthread_join(ts, NULL);
	ok(x.ok, "the server sent everything");
	is_i64(rc, CUDA_SUCCESS, "bulk copy succeeds");
	size_t bad = 0;
	for (size_t i = 0; i < BULK; i++)
		bad += buf[i] != pattern(i);
	is_u64(bad, 0, "bulk data intact around another reply and device output");
	is_i64(Q.rc, CUDA_SUCCESS, "the other thread's call succeeds");
	is_u64(Q.got, 77, "and gets its own reply");
	free(buf);
	rgpu_conn_close(x.s);
	conn_close(&c);
}

/* --------------------------------------------------------------- stress */

#define NTHREADS 8
#define NCALLS 300

struct srv_shuffle {
	struct rgpu_conn *s;
	int served;
};

/* Answers each request with its argument * 3, holding up to 7 at a time
 * and answering them in a scrambled order. */
static void *srv_shuffle(void *arg)
{
	struct srv_shuffle *x = arg;
	struct rgpu_hdr h[7];
	uint64_t v[7];
	int n = 0;
	unsigned seed = 12345;
	for (;;) {
		uint8_t b[64];
		int got = srv_recv(x->s, &h[n], b, sizeof(b), n ? 20 : 3000) == 0;
		if (got) {
			memcpy(&v[n], b, 8);
			v[n] *= 3;
			n++;
		}
		if (n == 7 || (!got && n)) {
			while (n) {
				seed = seed * 1103515245u + 12345u;
				int i = (int)((seed >> 16) % (unsigned)n);
				srv_reply(x->s, &h[i], 0, 0, &v[i], 8);
				h[i] = h[n - 1];
				v[i] = v[n - 1];
				n--;
				x->served++;
			}
		} else if (!got) {
			return NULL;
		}
	}
}

struct worker {
	struct rc_conn *c;
	int id, bad;
};

static void *stress_worker(void *arg)
{
	struct worker *k = arg;
	for (int i = 0; i < NCALLS; i++) {
		struct caller one = { .c = k->c, .op = RGPU_OP_MEM_GET_INFO,
				      .arg = (uint64_t)k->id * 100000 + (uint64_t)i };
		do_call(&one);
		if (one.rc != CUDA_SUCCESS || one.got != one.arg * 3)
			k->bad++;
	}
	return NULL;
}

static void test_stress(void)
{
	struct rc_conn c;
	int fd;
	conn_open(&c, &fd);
	struct srv_shuffle x = { .s = rgpu_stream_wrap(fd, "srv") };
	pthread_t ts, tw[NTHREADS];
	struct worker w[NTHREADS];
	pthread_create(&ts, NULL, srv_shuffle, &x);
	for (int i = 0; i < NTHREADS; i++) {
		w[i] = (struct worker){ .c = &c, .id = i + 1 };
		pthread_create(&tw[i], NULL, stress_worker, &w[i]);
	}
	int bad = 0;
	for (int i = 0; i < NTHREADS; i++) {
		pthread_join(tw[i], NULL);
		bad += w[i].bad;
	}
	conn_close(&c); /* the server sees EOF and ends */
	pthread_join(ts, NULL);
	is_i64(bad, 0, "%d threads x %d calls, replies shuffled: each gets its own", NTHREADS, NCALLS);
	is_i64(x.served, NTHREADS * NCALLS, "every request reached the server");
	rgpu_conn_close(x.s);
}

/* ----------------------------------------------------- foreign and silent */

struct srv_peer {
	int fd;
	int answer; /* 1: HTTP garbage; 0: silence */
};

static void *srv_peer(void *arg)
{
	struct srv_peer *x = arg;
	char buf[4096];
	ssize_t n = read(x->fd, buf, sizeof(buf));
	if (n > 0 && x->answer) {
		const char http[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
		ssize_t w = write(x->fd, http, sizeof(http) - 1);
		(void)w;
	}
	/* silent: read until the client goes away */
	while (read(x->fd, buf, sizeof(buf)) > 0)
		;
	return NULL;
}

static void test_peer(int answer)
{
	struct rc_conn c;
	struct srv_peer x = { .answer = answer };
	conn_open(&c, &x.fd);
	pthread_t ts;
	pthread_create(&ts, NULL, srv_peer, &x);
	char err[512] = "";
	double t0 = now_ms();
	errno = ENOENT; /* a stale errno must not show */
	CUresult rc = rc_hello(&c, err, sizeof(err));
	double ms = now_ms() - t0;
	ok(rc != CUDA_SUCCESS, "%s peer: the handshake fails", answer ? "foreign" : "silent");
	if (answer) {
		like(err, "not an rgpud", "a foreign peer is named as such (%s)", err);
	} else {
		like(err, "no answer to the handshake within 300 ms", "a silent peer: %s", err);
		ok(ms >= 250 && ms < 3000, "within the timeout (%.0f ms)", ms);
	}
	ok(!strstr(err, strerror(ENOENT)), "no stale errno in \"%s\"", err);
	/* reply fields after a failed call read nothing */
	struct wbuf *w = rc_req();
	put_u64(w, 1);
	struct rd r = { .p = (const uint8_t *)"garbage!", .left = 8 };
	rc = rc_call(&c, RGPU_OP_MEM_GET_INFO, w, &r);
	ok(rc != CUDA_SUCCESS, "a call on the failed connection fails");
	ok(get_str(&r, 100) == NULL && !rd_ok(&r), "and its reply reads as empty");
	conn_close(&c);
	pthread_join(ts, NULL);
	close(x.fd);
}

/* ------------------------------------------------------------ notices */

/* rpc.c hands notices to stream.c's rc_event_notice: recorded here */
static int n_notices;
static int32_t last_st;
static uint64_t last_h, last_seq;

void rc_event_notice(struct rc_conn *c, int32_t status, uint64_t h, uint64_t seq)
{
	(void)c;
	n_notices++;
	last_st = status;
	last_h = h;
	last_seq = seq;
}

static int send_notice(struct rgpu_conn *s, int32_t st, uint64_t h, uint64_t seq, size_t len)
{
	uint8_t b[24];
	for (int i = 0; i < 4; i++)
		b[i] = (uint8_t)((uint32_t)st >> (8 * i));
	for (int i = 0; i < 8; i++) {
		b[4 + i] = (uint8_t)(h >> (8 * i));
		b[12 + i] = (uint8_t)(seq >> (8 * i));
	}
	return rgpu_frame_send(s, RGPU_OP_EVENT_DONE, RGPU_F_REPLY, 0, b, len, NULL, 0);
}

static void test_notices(void)
{
	struct rc_conn c;
	int fd;
	conn_open(&c, &fd);
	struct rgpu_conn *srv = rgpu_stream_wrap(fd, "server");
	ok(rc_poll(&c) == 0 && n_notices == 0, "nothing sent: rc_poll returns at once");
	send_notice(srv, 0, 0x100000007ull, 42, 20);
	send_notice(srv, CUDA_ERROR_NOT_READY, 0x100000008ull, 43, 20);
	usleep(20000);
	ok(rc_poll(&c) == 0, "rc_poll reads what came");
	ok(n_notices == 2 && last_st == CUDA_ERROR_NOT_READY && last_h == 0x100000008ull &&
		   last_seq == 43, "both notices delivered, fields intact (%d)", n_notices);
	/* a notice between a call's request and its reply */
	struct wbuf *w = rc_req();
	put_u64(w, 1);
	uint64_t id = 0;
	pthread_mutex_lock(&c.lock);
	CUresult rc = rc_send_frame(&c, RGPU_OP_CTX_SYNC, 0, &id, w->data, w->len, NULL, 0, 0);
	pthread_mutex_unlock(&c.lock);
	struct rgpu_hdr h;
	uint8_t buf[64];
	ok(!rc && srv_recv(srv, &h, buf, sizeof(buf), 2000) == 0, "a request goes out");
	send_notice(srv, 0, 9, 1, 20);
	srv_reply(srv, &h, 0, 0, NULL, 0);
	struct rc_reply f;
	rc = rc_reply_frame(&c, id, RGPU_OP_CTX_SYNC, &f, NULL, 0);
	ok(!rc && f.st == 0 && n_notices == 3 && last_h == 9, "the reply after a notice");
	/* a notice of the wrong length is a protocol error */
	send_notice(srv, 0, 1, 1, 12);
	usleep(20000);
	ok(rc_poll(&c) < 0 && c.dead, "a malformed notice fails the connection");
	rgpu_conn_close(srv);
	conn_close(&c);
}

/* ------------------------------------------------- the request log's data */

struct srv_htod {
	struct rgpu_conn *s;
	int frames;
};

/* Takes three host-to-device chunks, answering the one that asks. */
static void *srv_htod(void *arg)
{
	struct srv_htod *x = arg;
	uint8_t *b = malloc(RGPU_CHUNK_SIZE + 64);
	struct rgpu_hdr h;
	while (b && rgpu_frame_recv_hdr(x->s, &h) == RGPU_HDR_OK && h.len <= RGPU_CHUNK_SIZE + 64 &&
	       rgpu_recv(x->s, b, h.len) == 0) {
		if (!(h.flags & RGPU_F_NOREPLY))
			srv_reply(x->s, &h, 0, 0, NULL, 0);
		if (++x->frames == 3)
			break;
	}
	free(b);
	return NULL;
}

/* What the log holds for request i: its fields, then the chunk. */
static int log_chunk_is(struct rc_replay *rp, size_t i, const uint8_t *want, size_t n)
{
	struct rc_logent *e = &rp->v[i];
	return !e->ext && e->len == 40 + n && memcmp(e->data + 40, want, n) == 0;
}

/* A synchronous copy's chunks are borrowed from the caller's buffer, not
 * copied, while it runs; whatever the log still keeps when it returns (a
 * standby keeps everything until the next checkpoint) is copied then, so
 * a later change of the buffer does not reach a replay.  An asynchronous
 * copy's chunks are copied as they go. */
static void test_replay_borrow(int keep, int async)
{
	struct rc_conn c;
	int fd;
	conn_open(&c, &fd);
	rc_replay_setup(&c);
	if (!c.replay)
		BAIL("no request log");
	struct rc_replay *rp = c.replay;
	rp->keep = keep;
	struct srv_htod x = { .s = rgpu_stream_wrap(fd, "srv") };
	struct rc_dev dev = { .conn = &c };
	struct rc_ctx ctx = { .magic = RC_CTX, .dev = &dev, .h = 1 };
	size_t n = 2 * RGPU_CHUNK_SIZE + 4096;
	uint8_t *buf = malloc(n), *orig = malloc(n);
	if (!buf || !orig)
		BAIL("out of memory");
	for (size_t i = 0; i < n; i++)
		buf[i] = orig[i] = pattern(i);
	pthread_t ts;
	pthread_create(&ts, NULL, srv_htod, &x);
	CUresult rc = rc_xfer_copy(&rc_xfer_socket, &ctx, 0, 0x1000, buf, n, 0, async);
	pthread_join(ts, NULL);
	const char *how = keep ? "kept for a standby" : "no standby";
	const char *what = async ? "asynchronous" : "synchronous";
	is_i64(rc, CUDA_SUCCESS, "%s copy (%s) succeeds", what, how);
	is_i64(x.frames, 3, "in three frames");
	is_u64(rp->borrowed, 0, "%s copy (%s): nothing borrowed once it returned", what, how);
	memset(buf, 0xee, n); /* the application reuses its buffer */
	if (keep || async) {
		is_u64(rp->n, 3, "the log keeps the three chunks (%s, %s)", what, how);
		int same = rp->n == 3 && log_chunk_is(rp, 0, orig, RGPU_CHUNK_SIZE) &&
			   log_chunk_is(rp, 1, orig + RGPU_CHUNK_SIZE, RGPU_CHUNK_SIZE) &&
			   log_chunk_is(rp, 2, orig + 2 * RGPU_CHUNK_SIZE, 4096);
		ok(same, "with the data as sent, not as the buffer is now (%s, %s)", what, how);
	} else {
		is_u64(rp->n, 0, "the served chunks left the log");
	}
	free(buf);
	free(orig);
	rgpu_conn_close(x.s);
	conn_close(&c);
}

int main(void)
{
	setenv("RGPU_HANDSHAKE_TIMEOUT_MS", "300", 1);
	/* each request at once: these connections live on the stack, and
	 * coalescing runs end to end (e2e t_stats) */
	setenv("RGPU_COALESCE_US", "0", 1);
	unsetenv("SLURM_JOB_ID");
	char err[256];
	if (rc_settings_load(err, sizeof(err)) < 0)
		BAIL("settings: %s", err);
	rgpu_log_open("t_rpc", RGPU_LOG_ERR, 0);
	test_out_of_order();
	test_bulk();
	test_stress();
	test_peer(1);
	test_peer(0);
	test_notices();
	test_replay_borrow(0, 0);
	test_replay_borrow(1, 0);
	test_replay_borrow(0, 1);
	return tap_done();
}
