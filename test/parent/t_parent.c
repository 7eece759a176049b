/*
 * A raw-protocol client for the rgpud parent's tests (run-parent.sh): each
 * mode does one thing and prints what it saw, one "key value" per line,
 * so the script checks the daemon's behaviour, not this program's.
 *
 *   t_parent hello HOST PORT [cred]       HELLO; "status N" "message ..."
 *   t_parent cuinit CLIENTLIB             dlopen the rgpu client, cuInit:
 *                                         "cuinit N" (RGPU_SERVERS says where)
 *   t_parent quota HOST PORT SIZE...      HELLO (cred), context on GPU 0,
 *                                         MEM_ALLOC of each size: "alloc SIZE N";
 *                                         then "used BYTES" from LEASE_LIST
 *   t_parent grant HOST PORT JOB UID GPU LIMIT EXPIRES   LEASE_GRANT: "status N"
 *   t_parent list HOST PORT               LEASE_LIST: "leases N" "reply_bytes N"
 *   t_parent hold HOST|local PORT SIZE    HELLO (cred), context, MEM_ALLOC, print
 *                                         "held", wait until the server closes:
 *                                         "closed"
 *   t_parent silent HOST PORT N SECONDS   N connections that send nothing;
 *                                         "open_after_connect K", then waits
 *                                         up to SECONDS: "closed_by_server K"
 *   t_parent bighello HOST PORT           header of a 1 MiB HELLO: "dropped 0|1"
 *   t_parent pipeline HOST PORT           HELLO and DEVICE_INFO in one write:
 *                                         "replies N"
 *   t_parent squat PORT SECONDS           binds @rgpud.PORT, accepts for
 *                                         SECONDS: "squat_bytes N" "squat_cred 0|1"
 *
 * A credential is sent when RGPU_MUNGE_SOCKET is set (client/cred.c,
 * SLURM_JOB_ID names the job).
 */
#include "cred.h"
#include "frame.h"
#include "proto.h"
#include "transport.h"
#include "wire.h"
#include "raw.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define TIMEOUT_MS 10000

static uint64_t next_id = 1;

static int conn_tcp(const char *host, unsigned port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	/* T_PARENT_SRC: connect from this address (another loopback one) */
	const char *src = getenv("T_PARENT_SRC");
	struct sockaddr_in me = { .sin_family = AF_INET };
	if (src && (inet_pton(AF_INET, src, &me.sin_addr) != 1 ||
		    bind(fd, (struct sockaddr *)&me, sizeof(me)) < 0)) {
		fprintf(stderr, "t_parent: cannot bind to %s: %s\n", src, strerror(errno));
		exit(1);
	}
	if (fd < 0 || inet_pton(AF_INET, host, &sa.sin_addr) != 1 ||
	    connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		fprintf(stderr, "t_parent: cannot connect to %s:%u: %s\n", host, port, strerror(errno));
		exit(1);
	}
	return fd;
}

static int conn_any(const char *host, unsigned port)
{
	if (strcmp(host, "local"))
		return conn_tcp(host, port);
	char err[256];
	struct rgpu_conn *c = rgpu_unix_connect(port, err, sizeof(err));
	if (!c) {
		fprintf(stderr, "t_parent: %s\n", err);
		exit(1);
	}
	return dup(rgpu_tcp_fd(c)); /* (the wrapper is left behind: a test) */
}

static void frame(struct wbuf *out, uint16_t op, uint32_t len)
{
	struct rgpu_hdr h = { .magic = RGPU_PROTO_MAGIC, .version = RGPU_PROTO_VERSION, .op = op,
			      .len = len, .id = next_id++ };
	uint8_t b[RGPU_HDR_SIZE];
	rgpu_hdr_encode(&h, b);
	put_raw(out, b, sizeof(b));
}

static void send_req(int fd, uint16_t op, const struct wbuf *w)
{
	struct wbuf f;
	wbuf_init(&f);
	frame(&f, op, (uint32_t)w->len);
	put_raw(&f, w->data, w->len);
	if (raw_write(fd, f.data, f.len) < 0) {
		fprintf(stderr, "t_parent: send: %s\n", strerror(errno));
		exit(1);
	}
	wbuf_free(&f);
}

struct reply {
	uint8_t *data;
	int32_t status;
	struct rd r;
};

/* 0, 1 on EOF, -1 on timeout */
static int recv_reply(int fd, struct reply *rp)
{
	uint8_t b[RGPU_HDR_SIZE];
	struct rgpu_hdr h;
	free(rp->data);
	rp->data = NULL;
	int rc = raw_read(fd, b, sizeof(b), TIMEOUT_MS);
	if (rc)
		return rc;
	rgpu_hdr_decode(b, &h);
	if (h.magic != RGPU_PROTO_MAGIC || h.len > RGPU_MAX_PAYLOAD)
		return -1;
	rp->data = malloc(h.len + 1);
	if (!rp->data || (rc = raw_read(fd, rp->data, h.len, TIMEOUT_MS)))
		return rc ? rc : -1;
	rd_init(&rp->r, rp->data, h.len);
	rp->status = get_i32(&rp->r);
	return 0;
}

static void put_hello(struct wbuf *w, int with_cred)
{
	void *cred = NULL;
	size_t clen = 0;
	char err[256];
	if (with_cred && getenv("RGPU_MUNGE_SOCKET") &&
	    rgpu_client_credential(&cred, &clen, err, sizeof(err)) < 0) {
		fprintf(stderr, "t_parent: credential: %s\n", err);
		exit(1);
	}
	put_u32(w, RGPU_PROTO_VERSION);
	put_str(w, "t_parent");
	put_bytes(w, cred, clen);
	free(cred);
}

/* HELLO; exits unless it succeeds */
static void hello_or_die(int fd)
{
	struct wbuf w;
	struct reply rp = { 0 };
	wbuf_init(&w);
	put_hello(&w, 1);
	send_req(fd, RGPU_OP_HELLO, &w);
	int rc = recv_reply(fd, &rp);
	if (rc || rp.status) {
		const char *m = rc ? NULL : get_str(&rp.r, 1024);
		printf("hello_failed %d %s\n", rc ? -1 : rp.status, m ? m : "");
		exit(1);
	}
	wbuf_free(&w);
	free(rp.data);
}

/* a request whose reply status (and first u64, if any) is returned */
static int32_t call(int fd, uint16_t op, struct wbuf *w, uint64_t *first)
{
	struct reply rp = { 0 };
	send_req(fd, op, w);
	int rc = recv_reply(fd, &rp);
	if (rc) {
		printf("%s: %s\n", rgpu_op_name(op), rc > 0 ? "connection closed" : "timeout");
		exit(1);
	}
	if (first)
		*first = rp.status == 0 ? get_u64(&rp.r) : 0;
	free(rp.data);
	wbuf_reset(w);
	return rp.status;
}

static uint64_t ctx_create(int fd)
{
	struct wbuf w;
	wbuf_init(&w);
	put_u32(&w, 0);
	put_u32(&w, 0);
	uint64_t ctx;
	int32_t st = call(fd, RGPU_OP_CTX_CREATE, &w, &ctx);
	if (st) {
		printf("ctx_create %d\n", st);
		exit(1);
	}
	wbuf_free(&w);
	return ctx;
}

/* bytes used on GPU 0 by the caller's job (LEASE_LIST), or -1 */
static long long lease_used(int fd, uint64_t job)
{
	struct wbuf w;
	struct reply rp = { 0 };
	wbuf_init(&w);
	send_req(fd, RGPU_OP_LEASE_LIST, &w);
	if (recv_reply(fd, &rp) || rp.status)
		return -1;
	uint32_t ng = get_u32(&rp.r);
	for (uint32_t i = 0; i < ng; i++) {
		get_u32(&rp.r);
		get_str(&rp.r, 1024);
		get_u64(&rp.r);
		get_u64(&rp.r);
		get_u32(&rp.r);
	}
	uint32_t nl = get_u32(&rp.r);
	long long used = -1;
	for (uint32_t i = 0; i < nl; i++) {
		uint64_t j = get_u64(&rp.r);
		get_u32(&rp.r);
		uint32_t g = get_u32(&rp.r);
		get_u64(&rp.r);
		uint64_t u = get_u64(&rp.r);
		get_u64(&rp.r);
		if (j == job && g == 0)
			used = (long long)u;
	}
	free(rp.data);
	wbuf_free(&w);
	return rd_ok(&rp.r) ? used : -1;
}

static uint64_t num(const char *s)
{
	return strtoull(s, NULL, 0);
}

static int mode_hello(const char *host, unsigned port, int cred)
{
	int fd = conn_tcp(host, port);
	struct wbuf w;
	struct reply rp = { 0 };
	wbuf_init(&w);
	put_hello(&w, cred);
	send_req(fd, RGPU_OP_HELLO, &w);
	int rc = recv_reply(fd, &rp);
	if (rc) {
		printf("status none (%s)\n", rc > 0 ? "closed" : "timeout");
		return 0;
	}
	const char *m = get_str(&rp.r, 1024);
	printf("status %d\nmessage %s\n", rp.status, m ? m : "");
	return 0;
}

static int mode_cuinit(const char *lib)
{
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "t_parent: %s\n", dlerror());
		return 1;
	}
	int (*cuInit)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
	if (!cuInit)
		return 1;
	printf("cuinit %d\n", cuInit(0));
	fflush(stdout);
	_exit(0); /* the client's destructors are not what is tested here */
}

static int mode_quota(const char *host, unsigned port, int n, char **sizes)
{
	int fd = conn_tcp(host, port);
	hello_or_die(fd);
	uint64_t ctx = ctx_create(fd);
	struct wbuf w;
	wbuf_init(&w);
	for (int i = 0; i < n; i++) {
		put_u64(&w, ctx);
		put_u64(&w, num(sizes[i]));
		int32_t st = call(fd, RGPU_OP_MEM_ALLOC, &w, NULL);
		printf("alloc %s %d\n", sizes[i], st);
	}
	const char *job = getenv("SLURM_JOB_ID");
	printf("used %lld\n", lease_used(fd, job ? num(job) : 0));
	wbuf_free(&w);
	return 0;
}

static int mode_grant(const char *host, unsigned port, char **a)
{
	int fd = conn_tcp(host, port);
	hello_or_die(fd);
	struct wbuf w;
	wbuf_init(&w);
	put_u64(&w, num(a[0]));
	put_u32(&w, (uint32_t)num(a[1]));
	put_u32(&w, (uint32_t)num(a[2]));
	put_u64(&w, num(a[3]));
	put_u64(&w, num(a[4]));
	printf("status %d\n", call(fd, RGPU_OP_LEASE_GRANT, &w, NULL));
	wbuf_free(&w);
	return 0;
}

static int mode_list(const char *host, unsigned port)
{
	int fd = conn_tcp(host, port);
	hello_or_die(fd);
	struct wbuf w;
	struct reply rp = { 0 };
	wbuf_init(&w);
	send_req(fd, RGPU_OP_LEASE_LIST, &w);
	int rc = recv_reply(fd, &rp);
	if (rc) {
		printf("list %s\n", rc > 0 ? "closed" : "timeout");
		return 0;
	}
	printf("status %d\nreply_bytes %zu\n", rp.status, rp.r.left + 4);
	uint32_t ng = get_u32(&rp.r);
	for (uint32_t i = 0; i < ng; i++) {
		get_u32(&rp.r);
		get_str(&rp.r, 1024);
		get_u64(&rp.r);
		get_u64(&rp.r);
		get_u32(&rp.r);
	}
	printf("leases %u\n", get_u32(&rp.r));
	return 0;
}

static int mode_hold(const char *host, unsigned port, uint64_t size)
{
	int fd = conn_any(host, port);
	hello_or_die(fd);
	uint64_t ctx = ctx_create(fd);
	struct wbuf w;
	wbuf_init(&w);
	put_u64(&w, ctx);
	put_u64(&w, size);
	int32_t st = call(fd, RGPU_OP_MEM_ALLOC, &w, NULL);
	printf("alloc %d\nheld\n", st);
	fflush(stdout);
	char b;
	for (;;) {
		ssize_t k = recv(fd, &b, 1, 0);
		if (k <= 0 && !(k < 0 && errno == EINTR))
			break;
	}
	printf("closed\n");
	return 0;
}

static int mode_silent(const char *host, unsigned port, int n, int seconds)
{
	int *fds = calloc((size_t)n, sizeof(int));
	char *closed = calloc((size_t)n, 1);
	for (int i = 0; i < n; i++)
		fds[i] = conn_tcp(host, port);
	/* a moment for the server to accept them all (and close the excess) */
	usleep(500000);
	int open_now = 0;
	for (int i = 0; i < n; i++) {
		char b;
		ssize_t k = recv(fds[i], &b, 1, MSG_DONTWAIT);
		if (k == 0 || (k < 0 && errno != EAGAIN)) {
			closed[i] = 1;
			continue;
		}
		open_now++;
	}
	printf("open_after_connect %d\n", open_now);
	fflush(stdout);
	time_t end = time(NULL) + seconds;
	int nclosed = 0;
	while (time(NULL) < end && nclosed < open_now) {
		nclosed = 0;
		for (int i = 0; i < n; i++) {
			if (closed[i]) {
				continue;
			}
			char b;
			ssize_t k = recv(fds[i], &b, 1, MSG_DONTWAIT);
			if (k == 0 || (k < 0 && errno != EAGAIN))
				closed[i] = 2;
		}
		for (int i = 0; i < n; i++)
			nclosed += closed[i] == 2;
		usleep(100000);
	}
	printf("closed_by_server %d\n", nclosed);
	return 0;
}

static int mode_bighello(const char *host, unsigned port)
{
	int fd = conn_tcp(host, port);
	struct wbuf w;
	wbuf_init(&w);
	frame(&w, RGPU_OP_HELLO, 1u << 20);
	raw_write(fd, w.data, w.len);
	char b;
	struct pollfd pf = { .fd = fd, .events = POLLIN };
	int dropped = poll(&pf, 1, 3000) == 1 && recv(fd, &b, 1, 0) <= 0;
	printf("dropped %d\n", dropped);
	return 0;
}

static int mode_pipeline(const char *host, unsigned port)
{
	int fd = conn_tcp(host, port);
	struct wbuf w, all;
	wbuf_init(&w);
	wbuf_init(&all);
	put_hello(&w, 1);
	frame(&all, RGPU_OP_HELLO, (uint32_t)w.len);
	put_raw(&all, w.data, w.len);
	wbuf_reset(&w);
	put_u32(&w, 0);
	frame(&all, RGPU_OP_DEVICE_INFO, (uint32_t)w.len);
	put_raw(&all, w.data, w.len);
	raw_write(fd, all.data, all.len); /* both before any reply */
	struct reply rp = { 0 };
	int n = 0;
	while (n < 2 && recv_reply(fd, &rp) == 0 && rp.status == 0)
		n++;
	printf("replies %d\n", n);
	return 0;
}

static int mode_squat(unsigned port, int seconds)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int len = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "rgpud.%u", port);
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa,
			   (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len)) < 0 ||
	    listen(fd, 16) < 0) {
		fprintf(stderr, "t_parent: squat: %s\n", strerror(errno));
		return 1;
	}
	printf("squatting\n");
	fflush(stdout);
	static char buf[1 << 16];
	size_t got = 0;
	int cred = 0;
	time_t end = time(NULL) + seconds;
	while (time(NULL) < end) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		if (poll(&pf, 1, 200) != 1)
			continue;
		int c = accept(fd, NULL, NULL);
		if (c < 0)
			continue;
		ssize_t k;
		struct pollfd pc = { .fd = c, .events = POLLIN };
		while (got < sizeof(buf) - 1 && poll(&pc, 1, 1000) == 1 &&
		       (k = recv(c, buf + got, sizeof(buf) - 1 - got, 0)) > 0)
			got += (size_t)k;
		close(c);
	}
	buf[got] = 0;
	for (size_t i = 0; i + 6 <= got; i++)
		cred |= !memcmp(buf + i, "MUNGE:", 6);
	printf("squat_bytes %zu\nsquat_cred %d\n", got, cred);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 3) {
		fprintf(stderr, "usage: see the comment at the top of t_parent.c\n");
		return 2;
	}
	const char *m = argv[1];
	if (!strcmp(m, "cuinit"))
		return mode_cuinit(argv[2]);
	if (!strcmp(m, "squat") && argc == 4)
		return mode_squat((unsigned)num(argv[2]), atoi(argv[3]));
	if (argc < 4)
		return 2;
	const char *host = argv[2];
	unsigned port = (unsigned)num(argv[3]);
	if (!strcmp(m, "hello"))
		return mode_hello(host, port, argc > 4 && !strcmp(argv[4], "cred"));
	if (!strcmp(m, "quota"))
		return mode_quota(host, port, argc - 4, argv + 4);
	if (!strcmp(m, "grant") && argc == 9)
		return mode_grant(host, port, argv + 4);
	if (!strcmp(m, "list"))
		return mode_list(host, port);
	if (!strcmp(m, "hold") && argc == 5)
		return mode_hold(host, port, num(argv[4]));
	if (!strcmp(m, "silent") && argc == 6)
		return mode_silent(host, port, atoi(argv[4]), atoi(argv[5]));
	if (!strcmp(m, "bighello"))
		return mode_bighello(host, port);
	if (!strcmp(m, "pipeline"))
		return mode_pipeline(host, port);
	fprintf(stderr, "t_parent: unknown mode or arguments\n");
	return 2;
}
