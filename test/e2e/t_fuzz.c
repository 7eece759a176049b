/*
 * Random requests to rgpud over raw TCP, after a proper HELLO: every
 * opcode, random field bytes and lengths (valid-looking handles mixed in).
 * The server must answer or drop that connection, never hang; the test
 * reconnects after a drop.  The script then checks that rgpud is alive, no
 * session worker died of a signal, and a real client still works.
 *
 * usage: t_fuzz HOST PORT [ITERATIONS] [SEED]
 */
#include "frame.h"
#include "proto.h"
#include "transport.h"
#include "wire.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static uint64_t rng;

static uint64_t rnd(void)
{
	/* splitmix64: reproducible from the seed printed at start */
	uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static struct rgpu_conn *open_session(const char *host, unsigned port, uint64_t *ctx)
{
	char err[256];
	struct rgpu_conn *c = rgpu_tcp_connect(host, port, 5000, err, sizeof(err));
	if (!c) {
		fprintf(stderr, "t_fuzz: FAIL: %s\n", err);
		exit(1);
	}
	struct wbuf w;
	wbuf_init(&w);
	put_u32(&w, RGPU_PROTO_VERSION);
	put_str(&w, "t_fuzz");
	put_bytes(&w, NULL, 0);
	struct rgpu_hdr h;
	uint8_t buf[4096];
	if (rgpu_frame_send(c, RGPU_OP_HELLO, 0, 1, w.data, w.len, NULL, 0) < 0 ||
	    rgpu_frame_recv_hdr(c, &h) != RGPU_HDR_OK || h.len > sizeof(buf) ||
	    rgpu_recv(c, buf, h.len) < 0) {
		fprintf(stderr, "t_fuzz: FAIL: HELLO\n");
		exit(1);
	}
	/* a real context, so some random requests reach the driver */
	wbuf_reset(&w);
	put_u32(&w, 0);
	put_u32(&w, 0);
	*ctx = 0;
	if (rgpu_frame_send(c, RGPU_OP_CTX_CREATE, 0, 2, w.data, w.len, NULL, 0) == 0 &&
	    rgpu_frame_recv_hdr(c, &h) == RGPU_HDR_OK && h.len <= sizeof(buf) &&
	    rgpu_recv(c, buf, h.len) == 0 && h.len >= 12) {
		struct rd r;
		rd_init(&r, buf, h.len);
		if (get_i32(&r) == 0)
			*ctx = get_u64(&r);
	}
	wbuf_free(&w);
	return c;
}

/* Reads replies until the one for id (or the connection ends): 0 ok, -1
 * dropped, -2 timed out. */
static int drain(struct rgpu_conn *c, uint64_t id)
{
	for (;;) {
		struct pollfd p = { .fd = rgpu_tcp_fd(c), .events = POLLIN };
		if (poll(&p, 1, 10000) <= 0)
			return -2;
		struct rgpu_hdr h;
		if (rgpu_frame_recv_hdr(c, &h) != RGPU_HDR_OK || rgpu_frame_skip(c, h.len) < 0)
			return -1;
		if (h.id == id && !(h.flags & RGPU_F_MORE))
			return 0;
	}
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: t_fuzz HOST PORT [ITERATIONS] [SEED]\n");
		return 2;
	}
	const char *host = argv[1];
	unsigned port = (unsigned)atoi(argv[2]);
	long iters = argc > 3 ? atol(argv[3]) : 3000;
	rng = argc > 4 ? strtoull(argv[4], NULL, 0) : 0x5eed;
	printf("t_fuzz: %ld requests, seed %#llx\n", iters, (unsigned long long)rng);
	static const uint16_t ops[] = {
#define RGPU_OP_LIST(name, num, doc) num,
		RGPU_OPS(RGPU_OP_LIST)
		RGPU_OPS_APPMEM(RGPU_OP_LIST)
		RGPU_OPS_GRAPHS(RGPU_OP_LIST)
#undef RGPU_OP_LIST
	};
	const size_t nops = sizeof(ops) / sizeof(ops[0]);
	uint64_t ctx;
	struct rgpu_conn *c = open_session(host, port, &ctx);
	long answered = 0, dropped = 0;
	uint8_t payload[512];
	for (long i = 0; i < iters; i++) {
		uint16_t op = ops[rnd() % nops];
		/* HOSTFN_WAIT is a long poll, answered once a host function is
		 * due; a host function HOSTFN_LAUNCH queues holds its stream until
		 * the client has run it, which this client never does (a stalled
		 * stream of its own session: later waits on it are not answered) */
		if (op == RGPU_OP_HELLO || op == RGPU_OP_OUTPUT || op == RGPU_OP_HOSTFN_WAIT ||
		    op == RGPU_OP_HOSTFN_LAUNCH)
			continue;
		size_t len = rnd() % (rnd() % 4 ? 64 : sizeof(payload));
		for (size_t k = 0; k < len; k++)
			payload[k] = (uint8_t)rnd();
		/* half the time the first field is the real context */
		if (len >= 8 && ctx && rnd() % 2)
			memcpy(payload, &ctx, 8);
		/* no reply expected from no-reply requests: ask for one after */
		uint64_t id = 1000 + (uint64_t)i;
		int rc = rgpu_frame_send(c, op, 0, id, payload, len, NULL, 0);
		int d = rc < 0 ? -1 : drain(c, id);
		if (d == -2) {
			fprintf(stderr, "t_fuzz: FAIL: no answer and no drop for op %u (%s), %zu bytes, iteration %ld\n",
				op, rgpu_op_name(op), len, i);
			return 1;
		}
		if (d == 0) {
			answered++;
			continue;
		}
		dropped++;
		rgpu_conn_close(c);
		c = open_session(host, port, &ctx);
	}
	rgpu_conn_close(c);
	printf("t_fuzz: %ld answered, %ld dropped connections\n", answered, dropped);
	if (!answered || !dropped) {
		fprintf(stderr, "t_fuzz: FAIL: expected both answers and drops\n");
		return 1;
	}
	printf("t_fuzz: PASS\n");
	return 0;
}
