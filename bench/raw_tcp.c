/*
 * raw_tcp: the baseline for bw_lat through rgpud -- plain TCP over loopback,
 * socket set up as rgpu's transport does (TCP_NODELAY, default buffers).
 *
 * One process forks: the child is the receiver (the "server"), the parent
 * the sender and timer.  Two connections:
 *
 *   bulk  for each copy: the sender writes an 8-byte length L and then L
 *         bytes from a pre-touched buffer; the receiver reads all L bytes
 *         into its own pre-touched buffer of the same size and answers with
 *         1 byte.  Timed from the first write to the ack, like a synchronous
 *         cuMemcpyHtoD through rgpud (request + data, then the reply).
 *         Sizes 4 KiB .. 256 MiB (--max), repetitions and median exactly as
 *         bw_lat: op "oneway", mem "-".
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
	char *buf = malloc(max);
	if (!buf)
		return -1;
	memset(buf, 0, max);
	uint64_t len;
	int r;
	while ((r = read_all(fd, &len, sizeof(len))) == 1) {
		if (len > max || read_all(fd, buf, len) != 1) {
			r = -1;
			break;
		}
		char ack = 'A';
		if (write_all(fd, &ack, 1)) {
			r = -1;
			break;
		}
	}
	free(buf);
	return r;
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
	fprintf(f, "Usage: raw_tcp [--target NAME] [--json PATH] [--max SIZE] [--min-time SEC]\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "target", required_argument, NULL, 't' },
		{ "json", required_argument, NULL, 'j' },
		{ "max", required_argument, NULL, 'm' },
		{ "min-time", required_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *target = "raw_tcp", *json_path = NULL, *env = getenv("BENCH_MAX_SIZE");
	size_t max = bench_sizes[BENCH_NSIZES - 1];
	FILE *json = NULL;
	int c;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (env && *env && bench_parse_size(env, &max)) {
		fprintf(stderr, "raw_tcp: bad BENCH_MAX_SIZE '%s'\n", env);
		return 2;
	}
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 't': target = optarg; break;
		case 'j': json_path = optarg; break;
		case 'm':
			if (bench_parse_size(optarg, &max)) {
				fprintf(stderr, "raw_tcp: bad size '%s'\n", optarg);
				return 2;
			}
			break;
		case 'T': min_time = atof(optarg); break;
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
	printf("bandwidth (one way + 1-byte ack, median of repeats, GB/s = 1e9 B/s):\n");
	for (size_t i = 0; i < BENCH_NSIZES && bench_sizes[i] <= max; i++) {
		size_t n = bench_sizes[i];
		struct bench_samples s = { 0 };
		double start = 0;
		for (int warm = 1;; warm = 0) {
			uint64_t len = n;
			char ack;
			double t0 = bench_now();
			if (write_all(fd, &len, sizeof(len)) || write_all(fd, buf, n) ||
			    read_all(fd, &ack, 1) != 1)
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
		bench_json_bw(json, "raw_tcp", target, "oneway", "-", n, &s);
		char sz[32];
		double med = bench_quantile(s.v, s.n, 0.5, 1);
		bench_fmt_size(n, sz, sizeof(sz));
		printf("  %-6s %10s %10.3f GB/s %10.1f us %8zu reps\n", "oneway", sz,
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
