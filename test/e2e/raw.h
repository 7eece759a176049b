/*
 * A raw rgpu protocol client for tests that need what the client library
 * does not do: requests pipelined on one connection, replies read in the
 * order the server sends them, hand-made malformed payloads.
 */
#ifndef RGPU_TEST_RAW_H
#define RGPU_TEST_RAW_H

#include "frame.h"
#include "proto.h"
#include "wire.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct raw {
	int fd;
	uint64_t next_id;
};

struct raw_reply {
	struct rgpu_hdr h;
	uint8_t *data; /* payload */
	int32_t status;
	struct rd r;   /* after the status */
};

static inline int raw_connect(struct raw *c, const char *host, unsigned port)
{
	c->next_id = 1;
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return -1;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1 ||
	    connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(c->fd);
		return -1;
	}
	int one = 1;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return 0;
}

static inline int raw_write(int fd, const void *p, size_t n)
{
	const char *b = p;
	while (n) {
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Exactly n bytes within timeout_ms each wait: 0, 1 when the peer closed
 * the connection first, -1 on a timeout or another error. */
static inline int raw_read(int fd, void *p, size_t n, int timeout_ms)
{
	char *b = p;
	while (n) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		int r = poll(&pf, 1, timeout_ms);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		ssize_t k = recv(fd, b, n, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k == 0 || (k < 0 && errno == ECONNRESET))
			return 1;
		if (k < 0)
			return -1;
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

/* Sends op with payload w (NULL: empty); the request id. */
static inline uint64_t raw_send(struct raw *c, uint16_t op, uint32_t flags, const struct wbuf *w)
{
	uint64_t id = c->next_id++;
	struct rgpu_hdr h = { .magic = RGPU_PROTO_MAGIC, .version = RGPU_PROTO_VERSION, .op = op,
			      .flags = flags, .len = (uint32_t)(w ? w->len : 0), .id = id };
	uint8_t b[RGPU_HDR_SIZE];
	rgpu_hdr_encode(&h, b);
	if (raw_write(c->fd, b, sizeof(b)) < 0 || (w && w->len && raw_write(c->fd, w->data, w->len) < 0))
		return 0;
	return id;
}

/* The next frame from the server, whatever it is: 0, or -1. */
static inline int raw_recv(struct raw *c, struct raw_reply *rp, int timeout_ms)
{
	uint8_t b[RGPU_HDR_SIZE];
	free(rp->data);
	rp->data = NULL;
	if (raw_read(c->fd, b, sizeof(b), timeout_ms) != 0)
		return -1;
	rgpu_hdr_decode(b, &rp->h);
	if (rp->h.magic != RGPU_PROTO_MAGIC || rp->h.len > RGPU_MAX_PAYLOAD)
		return -1;
	rp->data = malloc(rp->h.len + 1);
	if (!rp->data || raw_read(c->fd, rp->data, rp->h.len, timeout_ms) != 0)
		return -1;
	rd_init(&rp->r, rp->data, rp->h.len);
	rp->status = rp->h.op == RGPU_OP_OUTPUT ? 0 : get_i32(&rp->r);
	return 0;
}

/* Sends and waits for the reply (the only request in flight); the status,
 * or INT32_MIN when no reply came.  rp keeps the reply's fields. */
static inline int32_t raw_call(struct raw *c, uint16_t op, const struct wbuf *w, struct raw_reply *rp)
{
	uint64_t id = raw_send(c, op, 0, w);
	if (!id || raw_recv(c, rp, 20000) < 0 || rp->h.id != id || rp->h.op != op)
		return INT32_MIN;
	return rp->status;
}

/* HELLO without a credential (a test daemon runs --open), then a context
 * on device 0.  0, or -1. */
static inline int raw_session(struct raw *c, const char *host, unsigned port, uint64_t *ctx)
{
	struct raw_reply rp = { 0 };
	struct wbuf w;
	if (raw_connect(c, host, port) < 0)
		return -1;
	wbuf_init(&w);
	put_u32(&w, RGPU_PROTO_VERSION);
	put_str(&w, "raw test");
	put_bytes(&w, NULL, 0);
	int32_t st = raw_call(c, RGPU_OP_HELLO, &w, &rp);
	wbuf_reset(&w);
	if (st == 0) {
		put_u32(&w, 0);
		put_u32(&w, 0);
		st = raw_call(c, RGPU_OP_CTX_CREATE, &w, &rp);
		if (st == 0)
			*ctx = get_u64(&rp.r);
	}
	wbuf_free(&w);
	free(rp.data);
	return st == 0 ? 0 : -1;
}

#endif
