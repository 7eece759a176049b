/*
 * Opens many rgpud sessions over the wire protocol, for the metrics, soak
 * and chaos tests.  Each session: HELLO, a context on GPU 0, one device
 * allocation.  Sessions of a batch move in lock step (every request sent,
 * then every reply read; HELLOs by waves of 64), so a batch of 256 really
 * is 256 sessions at once on the server.
 *
 *   rgpu_sessions cycle HOST PORT TOTAL BATCH SIZE
 *       opens and closes TOTAL sessions, BATCH at a time; exit 1 if any
 *       step of any session failed
 *   rgpu_sessions hold HOST PORT N SIZE
 *       opens N sessions, prints "held N", then keeps them until stdin
 *       closes; prints "lost K" whenever the server has closed K of them
 *   rgpu_sessions try HOST PORT SIZE
 *       one session allocates SIZE: prints "ok" (exit 0) or
 *       "refused STATUS" (exit 3)
 *   rgpu_sessions grant HOST PORT JOB UID GPU LIMIT
 *       LEASE_GRANT (needs an admin credential)
 *   rgpu_sessions list HOST PORT
 *       prints "lease JOB UID GPU LIMIT USED EXPIRES" per lease
 *
 * With RGPU_SESSIONS_CRED=1 each HELLO carries a munge credential made by
 * client/cred.c (uid of the caller, job SLURM_JOB_ID).
 */
#include "config.h"
#include "cred.h"
#include "frame.h"
#include "proto.h"
#include "transport.h"
#include "wire.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct sess {
	struct rgpu_conn *c;
	uint64_t ctx;
	int failed;
	int lost;
};

static const char *host;
static unsigned port;
static int use_cred;

static int send_req(struct sess *s, uint16_t op, struct wbuf *w)
{
	if (s->failed || !s->c)
		return -1;
	if (w->oom || rgpu_frame_send(s->c, op, 0, op, w->data, w->len, NULL, 0) < 0) {
		s->failed = 1;
		return -1;
	}
	return 0;
}

/* Reads the reply of op: its status, payload in *pl (malloc'd). */
static int recv_reply(struct sess *s, uint16_t op, int32_t *status, uint8_t **pl, size_t *len)
{
	*pl = NULL;
	if (s->failed || !s->c)
		return -1;
	struct rgpu_hdr h;
	if (rgpu_frame_recv_hdr(s->c, &h) != RGPU_HDR_OK || !(h.flags & RGPU_F_REPLY) ||
	    h.id != op || h.len < 4)
		goto fail;
	uint8_t *p = malloc(h.len);
	if (!p || rgpu_recv(s->c, p, h.len) < 0) {
		free(p);
		goto fail;
	}
	struct rd r;
	rd_init(&r, p, h.len);
	*status = get_i32(&r);
	*pl = p;
	*len = h.len;
	return 0;
fail:
	s->failed = 1;
	return -1;
}

/* One step of the session, for a whole batch: requests first, then replies. */
enum step { HELLO, CTX, ALLOC };

static void step(struct sess *b, int n, enum step st, uint64_t size, int verbose)
{
	static const uint16_t ops[] = { RGPU_OP_HELLO, RGPU_OP_CTX_CREATE, RGPU_OP_MEM_ALLOC };
	static const char *names[] = { "HELLO", "CTX_CREATE", "MEM_ALLOC" };
	struct wbuf w;
	wbuf_init(&w);
	for (int i = 0; i < n; i++) {
		wbuf_reset(&w);
		if (st == HELLO) {
			put_u32(&w, RGPU_PROTO_VERSION);
			put_str(&w, "rgpu_sessions");
			/* munge refuses a credential used twice: one per session */
			void *cred = NULL;
			size_t credlen = 0;
			char err[256];
			if (use_cred && rgpu_client_credential(&cred, &credlen, err, sizeof(err)) < 0)
				fprintf(stderr, "rgpu_sessions: no credential: %s\n", err);
			put_bytes(&w, cred, credlen);
			free(cred);
		} else if (st == CTX) {
			put_u32(&w, 0);
			put_u32(&w, 0);
		} else {
			put_u64(&w, b[i].ctx);
			put_u64(&w, size);
		}
		send_req(&b[i], ops[st], &w);
	}
	wbuf_free(&w);
	for (int i = 0; i < n; i++) {
		int32_t status;
		uint8_t *p;
		size_t len;
		if (recv_reply(&b[i], ops[st], &status, &p, &len) < 0) {
			if (verbose)
				fprintf(stderr, "rgpu_sessions: %s: connection lost\n", names[st]);
			continue;
		}
		if (status) {
			struct rd r;
			rd_init(&r, p, len);
			get_i32(&r);
			const char *why = status >= RGPU_ERR_PROTO ? get_str(&r, 4096) : NULL;
			if (verbose)
				fprintf(stderr, "rgpu_sessions: %s: status %d%s%s\n", names[st], status,
					why ? ": " : "", why ? why : "");
			b[i].failed = status;
		} else if (st == CTX) {
			struct rd r;
			rd_init(&r, p + 4, len - 4);
			b[i].ctx = get_u64(&r);
		}
		free(p);
	}
}

/* Connections that wait for their HELLO reply at a time: rgpud caps the
 * handshakes pending per client address (--max-pending-per-host), so a
 * batch is let in by waves; its sessions then all run at once. */
#define HELLO_WAVE 64

static int open_batch(struct sess *b, int n, uint64_t size, int verbose)
{
	char err[256];
	for (int w = 0; w < n; w += HELLO_WAVE) {
		int k = n - w < HELLO_WAVE ? n - w : HELLO_WAVE;
		for (int i = w; i < w + k; i++) {
			b[i] = (struct sess){ 0 };
			b[i].c = rgpu_tcp_connect(host, port, 10000, err, sizeof(err));
			if (!b[i].c) {
				if (verbose)
					fprintf(stderr, "rgpu_sessions: %s\n", err);
				b[i].failed = 1;
			}
		}
		step(b + w, k, HELLO, size, verbose);
	}
	step(b, n, CTX, size, verbose);
	if (size)
		step(b, n, ALLOC, size, verbose);
	int bad = 0;
	for (int i = 0; i < n; i++)
		bad += b[i].failed != 0;
	return bad;
}

static void close_batch(struct sess *b, int n)
{
	for (int i = 0; i < n; i++) {
		rgpu_conn_close(b[i].c);
		b[i].c = NULL;
	}
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cycle(long total, int batch, uint64_t size)
{
	struct sess *b = calloc((size_t)batch, sizeof(*b));
	if (!b)
		return 2;
	long done = 0, failed = 0;
	double t0 = now_s();
	while (done < total) {
		int n = total - done < batch ? (int)(total - done) : batch;
		failed += open_batch(b, n, size, failed < 5);
		close_batch(b, n);
		done += n;
	}
	double t = now_s() - t0;
	printf("cycle: %ld sessions (%d at once, %" PRIu64 " bytes each) in %.1f s: %.0f/s, %ld failed\n",
	       done, batch, size, t, done / (t > 0 ? t : 1), failed);
	free(b);
	return failed ? 1 : 0;
}

static int hold(int n, uint64_t size)
{
	struct sess *b = calloc((size_t)n, sizeof(*b));
	struct pollfd *pf = calloc((size_t)n + 1, sizeof(*pf));
	if (!b || !pf)
		return 2;
	int bad = open_batch(b, n, size, 1);
	if (bad) {
		printf("failed %d\n", bad);
		return 1;
	}
	printf("held %d\n", n);
	fflush(stdout);
	int lost = 0;
	for (;;) {
		pf[0] = (struct pollfd){ .fd = 0, .events = POLLIN };
		for (int i = 0; i < n; i++)
			pf[i + 1] = (struct pollfd){ .fd = b[i].lost ? -1 : rgpu_tcp_fd(b[i].c),
						     .events = POLLIN };
		if (poll(pf, (nfds_t)n + 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			return 2;
		}
		if (pf[0].revents) {
			char c;
			if (read(0, &c, 1) <= 0)
				break;
		}
		for (int i = 0; i < n; i++) {
			if (!pf[i + 1].revents)
				continue;
			/* nothing is in flight: readable means closed */
			b[i].lost = 1;
			lost++;
			printf("lost %d\n", lost);
			fflush(stdout);
		}
	}
	close_batch(b, n);
	free(b);
	free(pf);
	return 0;
}

static int try_alloc(uint64_t size)
{
	struct sess s;
	open_batch(&s, 1, size, 1);
	int rc = s.failed;
	close_batch(&s, 1);
	if (!rc) {
		printf("ok\n");
		return 0;
	}
	printf("refused %d\n", rc);
	return 3;
}

/* An admin request on a fresh session: returns the status, *pl the reply. */
static int admin(uint16_t op, struct wbuf *w, uint8_t **pl, size_t *len)
{
	struct sess s;
	char err[256];
	s = (struct sess){ 0 };
	if (!(s.c = rgpu_tcp_connect(host, port, 10000, err, sizeof(err)))) {
		fprintf(stderr, "rgpu_sessions: %s\n", err);
		return -1;
	}
	step(&s, 1, HELLO, 0, 1);
	int32_t status = -1;
	if (s.failed || send_req(&s, op, w) < 0 || recv_reply(&s, op, &status, pl, len) < 0)
		status = -1;
	close_batch(&s, 1);
	return status;
}

static int grant(char **a)
{
	struct wbuf w;
	wbuf_init(&w);
	put_u64(&w, strtoull(a[0], NULL, 10));
	put_u32(&w, (uint32_t)strtoul(a[1], NULL, 10));
	put_u32(&w, (uint32_t)strtoul(a[2], NULL, 10));
	put_u64(&w, strtoull(a[3], NULL, 10));
	put_u64(&w, 0);
	uint8_t *p = NULL;
	size_t len;
	int st = admin(RGPU_OP_LEASE_GRANT, &w, &p, &len);
	wbuf_free(&w);
	free(p);
	printf("grant: status %d\n", st);
	return st == 0 ? 0 : 1;
}

static int list(void)
{
	struct wbuf w;
	wbuf_init(&w);
	uint8_t *p = NULL;
	size_t len = 0;
	int st = admin(RGPU_OP_LEASE_LIST, &w, &p, &len);
	wbuf_free(&w);
	if (st) {
		printf("list: status %d\n", st);
		free(p);
		return 1;
	}
	struct rd r;
	rd_init(&r, p, len);
	get_i32(&r);
	uint32_t ng = get_u32(&r);
	for (uint32_t i = 0; i < ng && !r.bad; i++) {
		get_u32(&r);
		get_str(&r, 4096);
		get_u64(&r);
		get_u64(&r);
		get_u32(&r);
	}
	uint32_t nl = get_u32(&r);
	for (uint32_t i = 0; i < nl && !r.bad; i++) {
		uint64_t job = get_u64(&r);
		uint32_t uid = get_u32(&r), gpu = get_u32(&r);
		uint64_t lim = get_u64(&r), used = get_u64(&r), exp = get_u64(&r);
		if (!r.bad)
			printf("lease %" PRIu64 " %u %u %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", job, uid,
			       gpu, lim, used, exp);
	}
	free(p);
	return r.bad ? 1 : 0;
}

static int usage(void)
{
	fprintf(stderr, "usage: rgpu_sessions cycle|hold|try|grant|list HOST PORT ... (see the source)\n");
	return 2;
}

int main(int argc, char **argv)
{
	if (argc < 4)
		return usage();
	signal(SIGPIPE, SIG_IGN);
	host = argv[2];
	port = (unsigned)strtoul(argv[3], NULL, 10);
	const char *c = getenv("RGPU_SESSIONS_CRED");
	use_cred = c && !strcmp(c, "1");
	const char *cmd = argv[1];
	if (!strcmp(cmd, "cycle") && argc == 7)
		return cycle(atol(argv[4]), atoi(argv[5]), strtoull(argv[6], NULL, 0));
	if (!strcmp(cmd, "hold") && argc == 6)
		return hold(atoi(argv[4]), strtoull(argv[5], NULL, 0));
	if (!strcmp(cmd, "try") && argc == 5)
		return try_alloc(strtoull(argv[4], NULL, 0));
	if (!strcmp(cmd, "grant") && argc == 8)
		return grant(argv + 4);
	if (!strcmp(cmd, "list") && argc == 4)
		return list();
	return usage();
}
