/*
 * raw_tcp: the baseline for bw_lat through rgpud -- plain TCP over loopback,
 * socket set up as rgpu's transport does (TCP_NODELAY, default buffers).
 *
 * One process forks: the child is the receiver (the "server"), the parent
 * the sender and timer.  Two connections:
 *
 *   bulk  for each copy: the sender writes an 8-byte header (the length L,
 *         the top bit set for "stream") and then L bytes from a pre-touched
 *         buffer of the full size; the receiver reads all L bytes and
 *         answers with 1 byte.  Timed from the first write to the ack, like
 *         a synchronous cuMemcpyHtoD through rgpud (request + data, then the
 *         reply).  Two modes, both measured at every size, one after the
 *         other on the same connection:
 *           oneway  one send() of L bytes; the receiver recv()s them into
 *                   its own pre-touched buffer of the same size (cache-cold
 *                   once L is much larger than the caches).
 *           stream  L bytes in RGPU_CHUNK_SIZE (4 MiB) send()s; the receiver
 *                   reads them in RGPU_CHUNK_SIZE pieces into ONE reused,
 *                   pre-touched 4 MiB buffer -- as rgpud does with its
 *                   staging buffers, which stay cache-warm.
 *         Sizes 4 KiB .. 256 MiB (--max), repetitions and median exactly as
 *         bw_lat: op and "mode" "oneway" / "stream", mem "-".
 *   ping  4-byte ping-pong: write 4 bytes, the receiver echoes them.
 *         op "rtt_4B", the round trip in microseconds.
 *
 * Output: a table on stdout, JSON lines to --json PATH (bench_common.h).
 */
#include <arpa/inet.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_common.h"
#include "../lib/proto.h" /* RGPU_CHUNK_SIZE: rgpud's bulk piece size */

#define STREAM_FLAG (UINT64_C(1) << 63) /* in the bulk header: stream mode */
#define CHUNK ((size_t)RGPU_CHUNK_SIZE)

enum { MODE_ONEWAY, MODE_STREAM, NMODES };
static const char *const mode_name[NMODES] = { "oneway", "stream" };

static double min_time = BENCH_MIN_TIME;

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static int write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	while (n) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* 1: all n bytes; 0: EOF before any byte; -1: error or short. */
static int read_all(int fd, void *buf, size_t n)
{
	char *p = buf;
	size_t got = 0;
	while (got < n) {
		ssize_t k = recv(fd, p + got, n - got, 0);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (k == 0)
			return got ? -1 : 0;
		got += (size_t)k;
	}
	return 1;
}

static void tune(int fd)
{
	int one = 1;
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* The receiver: the first byte of a connection says which it is. */
static int serve(int fd, size_t max)
{
	char mode;
	if (read_all(fd, &mode, 1) != 1)
		return -1;
	if (mode == 'P') {
		char b[4];
		int r;
		while ((r = read_all(fd, b, 4)) == 1)
			if (write_all(fd, b, 4))
				return -1;
		return r;
	}
	/* oneway: a buffer as large as the transfer; stream: one reused
	 * RGPU_CHUNK_SIZE buffer.  Both touched before any timing. */
	size_t sn = max < CHUNK ? max : CHUNK;
	char *buf = malloc(max), *sbuf = malloc(sn);
	if (!buf || !sbuf) {
		free(buf);
		free(sbuf);
		return -1;
	}
	memset(buf, 0, max);
	memset(sbuf, 0, sn);
	uint64_t hdr;
	int r;
	while ((r = read_all(fd, &hdr, sizeof(hdr))) == 1) {
		uint64_t len = hdr & ~STREAM_FLAG;
		if (len > max) {
			r = -1;
			break;
		}
		if (!(hdr & STREAM_FLAG)) {
			if (read_all(fd, buf, len) != 1) {
				r = -1;
				break;
			}
		} else {
			for (uint64_t got = 0; got < len;) {
				size_t k = len - got < sn ? (size_t)(len - got) : sn;
				if (read_all(fd, sbuf, k) != 1) {
					r = -1;
					break;
				}
				got += k;
			}
			if (r < 0)
				break;
		}
		char ack = 'A';
		if (write_all(fd, &ack, 1)) {
			r = -1;
			break;
		}
	}
	free(buf);
	free(sbuf);
	return r;
}

/* One timed copy of n bytes in the given mode: header, data, ack. */
static int bulk_copy(int fd, const char *buf, size_t n, int mode)
{
	uint64_t hdr = (uint64_t)n | (mode == MODE_STREAM ? STREAM_FLAG : 0);
	char ack;
	if (write_all(fd, &hdr, sizeof(hdr)))
		return -1;
	if (mode == MODE_STREAM) {
		for (size_t off = 0; off < n; off += CHUNK)
			if (write_all(fd, buf + off, n - off < CHUNK ? n - off : CHUNK))
				return -1;
	} else if (write_all(fd, buf, n)) {
		return -1;
	}
	return read_all(fd, &ack, 1) == 1 ? 0 : -1;
}

/* bench_json_bw's line plus "mode", which says which raw TCP mode it is. */
static void json_bw_mode(FILE *f, const char *target, int mode, size_t bytes,
			 struct bench_samples *s)
{
	double med = bench_quantile(s->v, s->n, 0.5, 0);
	double mn = s->v[0];
	if (!f)
		return;
	fprintf(f, "{\"tool\": \"raw_tcp\", \"target\": \"%s\", \"kind\": \"bw\", "
		"\"op\": \"%s\", \"mode\": \"%s\", \"mem\": \"-\", \"bytes\": %zu, "
		"\"reps\": %zu, \"median_s\": %.9g, \"min_s\": %.9g, \"gbps\": %.6g}\n",
		target, mode_name[mode], mode_name[mode], bytes, s->n, med, mn,
		med > 0 ? (double)bytes / med / 1e9 : 0.0);
	fflush(f);
}

static int connect_to(const struct sockaddr_in *sa, char mode)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		die("socket");
	tune(fd);
	if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)))
		die("connect");
	if (write_all(fd, &mode, 1))
		die("send");
	return fd;
}

static void usage(FILE *f)
{
	fprintf(f, "Usage: raw_tcp [--target NAME] [--json PATH] [--min SIZE] [--max SIZE] [--min-time SEC]\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "target", required_argument, NULL, 't' },
		{ "json", required_argument, NULL, 'j' },
		{ "max", required_argument, NULL, 'm' },
		{ "min", required_argument, NULL, 'n' },
		{ "min-time", required_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *target = "raw_tcp", *json_path = NULL;
	size_t max = bench_sizes[BENCH_NSIZES - 1], min = 0;
	FILE *json = NULL;
	int c;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (bench_env_max("raw_tcp", &max))
		return 2;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		int common = bench_common_opt("raw_tcp", c, &target, &json_path, &min, &max, &min_time);
		if (common < 0)
			return 2;
		if (common)
			continue;
		switch (c) {
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		usage(stderr);
		return 2;
	}
	size_t top = 4;
	for (size_t i = 0; i < BENCH_NSIZES; i++)
		if (bench_sizes[i] <= max)
			top = bench_sizes[i];

	int lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (lfd < 0)
		die("socket");
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = 0 };
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t salen = sizeof(sa);
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 4) ||
	    getsockname(lfd, (struct sockaddr *)&sa, &salen))
		die("bind/listen");

	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		/* the receiver: two connections, one after the other; it goes
		 * when the sender does */
		(void)prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() == 1)
			_exit(1);
		for (int k = 0; k < 2; k++) {
			int fd = accept(lfd, NULL, NULL);
			if (fd < 0)
				_exit(1);
			tune(fd);
			if (serve(fd, top) < 0)
				_exit(1);
			close(fd);
		}
		_exit(0);
	}
	close(lfd);

	if (json_path && !(json = fopen(json_path, "a"))) {
		perror(json_path);
		kill(pid, SIGTERM);
		return 1;
	}
	printf("raw_tcp: loopback 127.0.0.1:%d, receiver pid %d\n", ntohs(sa.sin_port), (int)pid);

	/* bulk */
	char *buf = malloc(top);
	if (!buf)
		die("malloc");
	memset(buf, 0x5a, top);
	int fd = connect_to(&sa, 'B');
	printf("bandwidth (one way + 1-byte ack, median of repeats, GB/s = 1e9 B/s;\n"
	       "  oneway: into a receive buffer of the full size, stream: %zu KiB pieces\n"
	       "  into one reused buffer):\n", CHUNK >> 10);
	/* every size in both modes, one after the other */
	for (size_t k = 0; k < BENCH_NSIZES * NMODES && bench_sizes[k / NMODES] <= max; k++) {
		size_t n = bench_sizes[k / NMODES];
		int mode = (int)(k % NMODES);
		if (n < min)
			continue;
		struct bench_samples s = { 0 };
		double start = 0;
		for (int warm = 1;; warm = 0) {
			double t0 = bench_now();
			if (bulk_copy(fd, buf, n, mode))
				die("bulk transfer");
			double t1 = bench_now();
			if (warm) {
				start = t1;
				continue;
			}
			if (bench_add(&s, t1 - t0) < 0)
				die("malloc");
			if (bench_done(&s, t1 - start, min_time, BENCH_MIN_REPS))
				break;
		}
		json_bw_mode(json, target, mode, n, &s);
		char sz[32];
		double med = bench_quantile(s.v, s.n, 0.5, 1);
		bench_fmt_size(n, sz, sizeof(sz));
		printf("  %-6s %10s %10.3f GB/s %10.1f us %8zu reps\n", mode_name[mode], sz,
		       (double)n / med / 1e9, med * 1e6, s.n);
		free(s.v);
	}
	close(fd);
	free(buf);

	/* ping-pong */
	fd = connect_to(&sa, 'P');
	{
		struct bench_samples s = { 0 };
		char b[4] = { 1, 2, 3, 4 };
		double start = 0;
		for (int i = -20;; i++) {
			double t0 = bench_now();
			if (write_all(fd, b, 4) || read_all(fd, b, 4) != 1)
				die("ping");
			double t1 = bench_now();
			if (i < 0) {
				start = t1;
				continue;
			}
			if (bench_add(&s, t1 - t0) < 0)
				die("malloc");
			if (bench_done(&s, t1 - start, min_time, BENCH_MIN_LAT_REPS))
				break;
		}
		bench_json_lat(json, "raw_tcp", target, "rtt_4B", 4, &s);
		printf("latency (median round trip):\n  %-12s %10.2f us median %10.2f us p90 %8zu reps\n",
		       "rtt_4B", bench_quantile(s.v, s.n, 0.5, 1) * 1e6,
		       bench_quantile(s.v, s.n, 0.9, 1) * 1e6, s.n);
		free(s.v);
	}
	close(fd);

	int st;
	if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "raw_tcp: the receiver failed\n");
		return 1;
	}
	if (json && fclose(json)) {
		perror(json_path);
		return 1;
	}
	return 0;
}
