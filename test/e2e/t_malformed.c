/*
 * Malformed input to rgpud over raw TCP.  A well-behaved session ("good",
 * HELLO done, a context created) stays connected throughout; after every bad
 * connection the test checks that
 *   - rgpud dropped the bad connection (recv returns 0 within 10 s; an error
 *     reply frame before the close is allowed), and
 *   - the good session still gets answers.
 * Also: a HELLO with protocol version 99 gets status RGPU_ERR_VERSION and a
 * message naming both versions; requests before HELLO are refused; a peer
 * that stalls mid-header does not block other sessions.
 *
 * usage: t_malformed HOST PORT
 */
#include "frame.h"
#include "proto.h"
#include "wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TIMEOUT_MS 10000

static const char *host;
static unsigned port;
static int failures;
static uint64_t next_id = 1;

static void msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void msg(const char *fmt, ...)
{
	va_list ap;
	printf("t_malformed: ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

static void bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void bad(const char *fmt, ...)
{
	va_list ap;
	fflush(stdout);
	fprintf(stderr, "t_malformed: FAIL: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	failures++;
}

static int conn_open(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		perror("socket");
		exit(1);
	}
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
		fprintf(stderr, "t_malformed: bad IPv4 address %s\n", host);
		exit(2);
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		fprintf(stderr, "t_malformed: FAIL: cannot connect to %s:%u: %s\n", host, port,
			strerror(errno));
		exit(1);
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static int write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Reads exactly n bytes: 0, 1 on EOF, -1 on timeout or error. */
static int read_all(int fd, void *p, size_t n, int timeout_ms)
{
	char *c = p;
	while (n) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		int r = poll(&pf, 1, timeout_ms);
		if (r == 0)
			return -1;
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		ssize_t k = recv(fd, c, n, 0);
		if (k == 0)
			return 1;
		if (k < 0) {
			if (errno == EINTR)
				continue;
			if (errno == ECONNRESET)
				return 1;
			return -1;
		}
		c += k;
		n -= (size_t)k;
	}
	return 0;
}

static void send_hdr(int fd, uint32_t magic, uint16_t version, uint16_t op, uint32_t flags,
		     uint32_t len, uint64_t id)
{
	struct rgpu_hdr h = { .magic = magic, .version = version, .op = op, .flags = flags,
			      .len = len, .id = id };
	uint8_t b[RGPU_HDR_SIZE];
	rgpu_hdr_encode(&h, b);
	write_all(fd, b, sizeof(b));
}

static uint64_t send_req(int fd, uint16_t version, uint16_t op, const struct wbuf *w)
{
	uint64_t id = next_id++;
	send_hdr(fd, RGPU_PROTO_MAGIC, version, op, 0, (uint32_t)(w ? w->len : 0), id);
	if (w && w->len)
		write_all(fd, w->data, w->len);
	return id;
}

struct reply {
	struct rgpu_hdr h;
	uint8_t *data;
	int32_t status;
	struct rd r; /* positioned after the status */
};

/* 0: got a frame; 1: EOF; -1: timeout/error/garbage */
static int recv_reply(int fd, struct reply *rp, int timeout_ms)
{
	uint8_t b[RGPU_HDR_SIZE];
	free(rp->data);
	rp->data = NULL;
	int rc = read_all(fd, b, sizeof(b), timeout_ms);
	if (rc)
		return rc;
	rgpu_hdr_decode(b, &rp->h);
	if (rp->h.magic != RGPU_PROTO_MAGIC || rp->h.len > RGPU_MAX_PAYLOAD)
		return -1;
	rp->data = malloc(rp->h.len + 1);
	if (!rp->data)
		return -1;
	rc = read_all(fd, rp->data, rp->h.len, timeout_ms);
	if (rc)
		return rc;
	rd_init(&rp->r, rp->data, rp->h.len);
	rp->status = get_i32(&rp->r);
	return 0;
}

/* The reply to request id; skips nothing (replies come in order). */
static int expect_reply(int fd, uint64_t id, struct reply *rp, const char *what)
{
	int rc = recv_reply(fd, rp, TIMEOUT_MS);
	if (rc) {
		bad("%s: %s instead of a reply", what, rc > 0 ? "connection closed" : "timeout or garbage");
		return -1;
	}
	if (!(rp->h.flags & RGPU_F_REPLY) || rp->h.id != id) {
		bad("%s: frame op %u flags %#x id %llu, want a reply to id %llu", what, rp->h.op,
		    rp->h.flags, (unsigned long long)rp->h.id, (unsigned long long)id);
		return -1;
	}
	return 0;
}

static void put_hello(struct wbuf *w, uint32_t proto)
{
	put_u32(w, proto);
	put_str(w, "t_malformed");
	put_bytes(w, NULL, 0); /* no credential: loopback test daemon */
}

/* A full HELLO; returns the status (or -1 on a transport failure). */
static int hello(int fd, const char *what)
{
	struct wbuf w;
	wbuf_init(&w);
	put_hello(&w, RGPU_PROTO_VERSION);
	uint64_t id = send_req(fd, RGPU_PROTO_VERSION, RGPU_OP_HELLO, &w);
	wbuf_free(&w);
	struct reply rp = { 0 };
	if (expect_reply(fd, id, &rp, what) < 0) {
		free(rp.data);
		return -1;
	}
	int st = rp.status;
	if (st == 0) {
		const char *sid = get_str(&rp.r, 4096);
		uint32_t ndev = get_u32(&rp.r);
		if (!rd_ok(&rp.r))
			bad("%s: HELLO reply does not parse as (str server-id, u32 ndev)", what);
		else
			msg("%s: HELLO ok: server '%s', %u device(s)", what, sid, ndev);
	}
	free(rp.data);
	return st;
}

static int good = -1;
static uint64_t good_ctx;

/* The good session still works: DEVICE_INFO(0) answers status 0. */
static void good_still_works(const char *after)
{
	struct wbuf w;
	wbuf_init(&w);
	put_u32(&w, 0);
	uint64_t id = send_req(good, RGPU_PROTO_VERSION, RGPU_OP_DEVICE_INFO, &w);
	wbuf_free(&w);
	struct reply rp = { 0 };
	char what[160];
	snprintf(what, sizeof(what), "good session after %s", after);
	if (expect_reply(good, id, &rp, what) == 0) {
		const char *name = get_str(&rp.r, 4096);
		if (rp.status != 0 || !name)
			bad("%s: DEVICE_INFO status %d", what, rp.status);
	}
	free(rp.data);
	/* and a call that needs the context */
	wbuf_init(&w);
	put_u64(&w, good_ctx);
	id = send_req(good, RGPU_PROTO_VERSION, RGPU_OP_MEM_GET_INFO, &w);
	wbuf_free(&w);
	rp.data = NULL;
	if (expect_reply(good, id, &rp, what) == 0) {
		uint64_t fr = get_u64(&rp.r), tot = get_u64(&rp.r);
		if (rp.status != 0 || !rd_ok(&rp.r) || tot == 0 || fr > tot)
			bad("%s: MEM_GET_INFO status %d free %llu total %llu", what, rp.status,
			    (unsigned long long)fr, (unsigned long long)tot);
	}
	free(rp.data);
}

/* The server must close fd; reply frames before the close are shown. */
static void expect_dropped(int fd, const char *what)
{
	struct reply rp = { 0 };
	for (int frames = 0;; frames++) {
		int rc = recv_reply(fd, &rp, TIMEOUT_MS);
		if (rc == 1) {
			msg("%s: dropped%s", what, frames ? " after an error reply" : "");
			break;
		}
		if (rc < 0) {
			/* garbage or a timeout: is it still open? */
			uint8_t x;
			int r = read_all(fd, &x, 1, 100);
			if (r == 1) {
				msg("%s: dropped", what);
				break;
			}
			bad("%s: the connection was not dropped within %d s", what, TIMEOUT_MS / 1000);
			break;
		}
		msg("%s: reply before the close: op %u status %d", what, rp.h.op, rp.status);
		if (rp.status == 0)
			bad("%s: got status 0 (success) for a malformed request", what);
		if (frames > 4) {
			bad("%s: more than 5 frames in answer to one bad request", what);
			break;
		}
	}
	free(rp.data);
	close(fd);
	good_still_works(what);
}

/* A connection with HELLO done. */
static int session(const char *what)
{
	int fd = conn_open();
	int st = hello(fd, what);
	if (st != 0) {
		bad("%s: HELLO status %d", what, st);
		close(fd);
		return -1;
	}
	return fd;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s HOST PORT\n", argv[0]);
		return 2;
	}
	host = argv[1];
	port = (unsigned)strtoul(argv[2], NULL, 10);
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct wbuf w;
	struct reply rp = { 0 };
	uint64_t id;
	int fd;

	/* the good session: HELLO and a context */
	good = session("good session");
	if (good < 0)
		return 1;
	wbuf_init(&w);
	put_u32(&w, 0);
	put_u32(&w, 0);
	id = send_req(good, RGPU_PROTO_VERSION, RGPU_OP_CTX_CREATE, &w);
	wbuf_free(&w);
	if (expect_reply(good, id, &rp, "CTX_CREATE") < 0 || rp.status != 0) {
		bad("good session: CTX_CREATE status %d", rp.status);
		return 1;
	}
	good_ctx = get_u64(&rp.r);
	if (!rd_ok(&rp.r) || !good_ctx) {
		bad("good session: CTX_CREATE reply has no handle");
		return 1;
	}
	good_still_works("setup");

	/* 1. garbage */
	fd = conn_open();
	{
		char g[200];
		snprintf(g, sizeof(g), "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", host);
		size_t n = strlen(g);
		for (size_t i = n; i < sizeof(g); i++)
			g[i] = (char)(i * 37 + 11);
		write_all(fd, g, sizeof(g));
	}
	expect_dropped(fd, "garbage");

	/* 2. bad magic, otherwise a valid HELLO */
	fd = conn_open();
	wbuf_init(&w);
	put_hello(&w, RGPU_PROTO_VERSION);
	send_hdr(fd, 0x55504751u, RGPU_PROTO_VERSION, RGPU_OP_HELLO, 0, (uint32_t)w.len, next_id++);
	write_all(fd, w.data, w.len);
	wbuf_free(&w);
	expect_dropped(fd, "bad magic");

	/* 3. over-long length (no payload follows) */
	fd = conn_open();
	send_hdr(fd, RGPU_PROTO_MAGIC, RGPU_PROTO_VERSION, RGPU_OP_HELLO, 0, RGPU_MAX_PAYLOAD + 1, next_id++);
	expect_dropped(fd, "over-long length");
	fd = conn_open();
	send_hdr(fd, RGPU_PROTO_MAGIC, RGPU_PROTO_VERSION, RGPU_OP_HELLO, 0, 0xffffffffu, next_id++);
	expect_dropped(fd, "length 0xffffffff");

	/* 4. truncated HELLO: the fields stop after the version */
	fd = conn_open();
	wbuf_init(&w);
	put_u32(&w, RGPU_PROTO_VERSION);
	send_req(fd, RGPU_PROTO_VERSION, RGPU_OP_HELLO, &w);
	wbuf_free(&w);
	expect_dropped(fd, "truncated HELLO (fields)");

	/* 4b. HELLO whose name string has no NUL */
	fd = conn_open();
	wbuf_init(&w);
	put_u32(&w, RGPU_PROTO_VERSION);
	put_bytes(&w, "abc", 3);
	put_bytes(&w, NULL, 0);
	send_req(fd, RGPU_PROTO_VERSION, RGPU_OP_HELLO, &w);
	wbuf_free(&w);
	expect_dropped(fd, "HELLO with an unterminated string");

	/* 5. truncated HELLO: the payload stops short of its length */
	fd = conn_open();
	wbuf_init(&w);
	put_hello(&w, RGPU_PROTO_VERSION);
	send_hdr(fd, RGPU_PROTO_MAGIC, RGPU_PROTO_VERSION, RGPU_OP_HELLO, 0, (uint32_t)w.len + 64, next_id++);
	write_all(fd, w.data, w.len);
	wbuf_free(&w);
	shutdown(fd, SHUT_WR);
	expect_dropped(fd, "truncated HELLO (payload shorter than its length)");

	/* 6. huge count: HELLO whose name claims 0xfffffff0 bytes */
	fd = conn_open();
	wbuf_init(&w);
	put_u32(&w, RGPU_PROTO_VERSION);
	put_u32(&w, 0xfffffff0u);
	put_raw(&w, "short", 6);
	send_req(fd, RGPU_PROTO_VERSION, RGPU_OP_HELLO, &w);
	wbuf_free(&w);
	expect_dropped(fd, "HELLO with a huge string length");

	/* 7. valid HELLO, then a request with truncated fields */
	fd = session("truncated request");
	if (fd >= 0) {
		uint8_t half[4] = { 1, 0, 0, 0 };
		wbuf_init(&w);
		put_raw(&w, half, sizeof(half)); /* half a ctx handle, no size */
		send_req(fd, RGPU_PROTO_VERSION, RGPU_OP_MEM_ALLOC, &w);
		wbuf_free(&w);
		expect_dropped(fd, "MEM_ALLOC with truncated fields");
	}
	fd = session("truncated request 2");
	if (fd >= 0) {
		wbuf_init(&w);
		put_u32(&w, 0);
		put_u32(&w, 0);
		id = send_req(fd, RGPU_PROTO_VERSION, RGPU_OP_CTX_CREATE, &w);
		wbuf_free(&w);
		uint64_t ctx = 0;
		if (expect_reply(fd, id, &rp, "CTX_CREATE") == 0 && rp.status == 0)
			ctx = get_u64(&rp.r);
		wbuf_init(&w);
		put_u64(&w, ctx); /* a valid context, then no size */
		send_req(fd, RGPU_PROTO_VERSION, RGPU_OP_MEM_ALLOC, &w);
		wbuf_free(&w);
		expect_dropped(fd, "MEM_ALLOC(valid ctx) without its size");

		/* 8. huge count in a request after HELLO */
		fd = session("huge count");
		if (fd >= 0) {
			wbuf_init(&w);
			put_u32(&w, 0);
			put_u32(&w, 0);
			id = send_req(fd, RGPU_PROTO_VERSION, RGPU_OP_CTX_CREATE, &w);
			wbuf_free(&w);
			ctx = 0;
			if (expect_reply(fd, id, &rp, "CTX_CREATE") == 0 && rp.status == 0)
				ctx = get_u64(&rp.r);
			wbuf_init(&w);
			put_u64(&w, ctx);
			put_u32(&w, RGPU_IMAGE_FATBIN);
			put_u32(&w, 0xfffffff0u); /* image length */
			put_raw(&w, "0123456789abcdef", 16);
			send_req(fd, RGPU_PROTO_VERSION, RGPU_OP_MODULE_LOAD, &w);
			wbuf_free(&w);
			expect_dropped(fd, "MODULE_LOAD with image length 0xfffffff0");
		}
		fd = session("huge count 2");
		if (fd >= 0) {
			/* LAUNCH with a params blob claiming 0xffffffff bytes */
			wbuf_init(&w);
			put_u64(&w, 1);
			put_u64(&w, 1);
			for (int i = 0; i < 6; i++)
				put_u32(&w, 1);
			put_u32(&w, 0);
			put_u64(&w, 0);
			put_u32(&w, 0xffffffffu);
			send_req(fd, RGPU_PROTO_VERSION, RGPU_OP_LAUNCH, &w);
			wbuf_free(&w);
			expect_dropped(fd, "LAUNCH with params length 0xffffffff");
		}
	}

	/* 9. version mismatch: version 99 in the header (and in the field) */
	fd = conn_open();
	wbuf_init(&w);
	put_hello(&w, 99);
	id = next_id++;
	send_hdr(fd, RGPU_PROTO_MAGIC, 99, RGPU_OP_HELLO, 0, (uint32_t)w.len, id);
	write_all(fd, w.data, w.len);
	wbuf_free(&w);
	if (expect_reply(fd, id, &rp, "version 99 HELLO") == 0) {
		const char *m = get_str(&rp.r, 4096);
		msg("version 99 HELLO: status %d, message '%s'", rp.status, m ? m : "(none)");
		if (rp.status != RGPU_ERR_VERSION)
			bad("version 99 HELLO: status %d, want RGPU_ERR_VERSION (%d)", rp.status,
			    RGPU_ERR_VERSION);
		if (!m || !strstr(m, "99"))
			bad("version 99 HELLO: message '%s' does not name version 99", m ? m : "(none)");
		char mine[16];
		snprintf(mine, sizeof(mine), "%d", RGPU_PROTO_VERSION);
		/* the server's own version, as a number of its own */
		int found = 0;
		for (const char *p = m; p && (p = strstr(p, mine)); p++) {
			int before = p == m || p[-1] < '0' || p[-1] > '9';
			char after = p[strlen(mine)];
			if (before && (after < '0' || after > '9'))
				found = 1;
		}
		if (!found)
			bad("version 99 HELLO: message '%s' does not name version %s", m ? m : "(none)", mine);
	}
	close(fd);
	good_still_works("version mismatch");

	/* 10. a request before HELLO is refused */
	fd = conn_open();
	wbuf_init(&w);
	put_u32(&w, 0);
	id = send_req(fd, RGPU_PROTO_VERSION, RGPU_OP_DEVICE_INFO, &w);
	wbuf_free(&w);
	{
		int rc = recv_reply(fd, &rp, TIMEOUT_MS);
		if (rc == 0 && rp.status == 0)
			bad("DEVICE_INFO before HELLO succeeded");
		else if (rc == 0)
			msg("DEVICE_INFO before HELLO: status %d", rp.status);
		else if (rc < 0)
			bad("DEVICE_INFO before HELLO: no answer and no close");
		else
			msg("DEVICE_INFO before HELLO: dropped");
	}
	close(fd);
	good_still_works("a request before HELLO");

	/* 11. an unknown opcode after HELLO: an error (RGPU_ERR_BADOP) or a drop */
	fd = session("unknown opcode");
	if (fd >= 0) {
		id = send_req(fd, RGPU_PROTO_VERSION, 127, NULL);
		int rc = recv_reply(fd, &rp, TIMEOUT_MS);
		if (rc == 0) {
			msg("opcode 127: status %d", rp.status);
			if (rp.status != RGPU_ERR_BADOP)
				bad("opcode 127: status %d, want RGPU_ERR_BADOP (%d)", rp.status, RGPU_ERR_BADOP);
		} else if (rc < 0) {
			bad("opcode 127: no answer and no close");
		} else {
			msg("opcode 127: dropped");
		}
		close(fd);
		good_still_works("an unknown opcode");
	}

	/* 12. a peer that stalls mid-header does not hold up others */
	fd = conn_open();
	{
		uint8_t b[RGPU_HDR_SIZE];
		struct rgpu_hdr h = { .magic = RGPU_PROTO_MAGIC, .version = RGPU_PROTO_VERSION,
				      .op = RGPU_OP_HELLO, .len = 100, .id = next_id++ };
		rgpu_hdr_encode(&h, b);
		write_all(fd, b, 10);
		good_still_works("a peer stalled mid-header");
		int fd2 = session("a new session while a peer stalls");
		if (fd2 >= 0)
			close(fd2);
	}
	close(fd);

	/* 13. many connections opened and closed at once */
	{
		int fds[32];
		for (int i = 0; i < 32; i++)
			fds[i] = conn_open();
		for (int i = 0; i < 32; i++)
			close(fds[i]);
		good_still_works("32 connections opened and closed");
	}

	/* finally a fresh session works */
	fd = session("final session");
	if (fd >= 0)
		close(fd);
	free(rp.data);

	/* the good session ends cleanly */
	wbuf_init(&w);
	put_u64(&w, good_ctx);
	id = send_req(good, RGPU_PROTO_VERSION, RGPU_OP_CTX_DESTROY, &w);
	wbuf_free(&w);
	rp.data = NULL;
	if (expect_reply(good, id, &rp, "CTX_DESTROY") == 0 && rp.status != 0)
		bad("CTX_DESTROY status %d", rp.status);
	free(rp.data);
	close(good);

	if (failures) {
		fprintf(stderr, "t_malformed: %d failure(s)\n", failures);
		return 1;
	}
	msg("PASS");
	return 0;
}
