/*
 * linkemu: a TCP relay that behaves like a network link of a given round
 * trip and bandwidth, for bench/netem/run.sh on machines whose kernel has
 * no tc netem (CONFIG_NET_SCH_NETEM unset).
 *
 *   linkemu --listen PORT --to HOST:PORT --rtt-us N --gbps G
 *
 * Each accepted connection gets its own connection to the target.  In
 * each direction a reader takes what arrives (up to 64 KiB at a time) and
 * stamps it; a writer sends it at
 *   max(arrival + rtt/2, end of the previous piece) + bytes * 8 / bandwidth
 * (propagation, then serialisation at the link rate, pieces in order), so
 * a small message pays rtt/2 each way and bulk data flows at the rate.
 * The writer spins for the last 200 us before a piece is due, and for a
 * while after its queue runs dry (a sleeping thread takes tens of
 * microseconds to wake on a virtual machine: more than the delays
 * emulated); it sleeps beyond that.  A core per direction while busy.
 */
#include "config.h"
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PIECE (64 * 1024)

static long rtt_ns;
static double ns_per_byte;
static const char *to_host;
static const char *to_port;

struct piece {
	struct piece *next;
	uint64_t due; /* when its last byte leaves the link */
	size_t len;
	char data[];
};

struct dir {
	int in, out;
	pthread_mutex_t lock;
	pthread_cond_t cv;
	struct piece *head, *tail;
	uint64_t link_free; /* when the link finishes the previous piece */
	int eof;
};

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void *reader(void *arg)
{
	struct dir *d = arg;
	for (;;) {
		struct piece *p = malloc(sizeof(*p) + PIECE);
		if (!p)
			break;
		ssize_t n = recv(d->in, p->data, PIECE, 0);
		if (n <= 0) {
			free(p);
			break;
		}
		uint64_t t = now_ns() + (uint64_t)(rtt_ns / 2);
		p->len = (size_t)n;
		p->next = NULL;
		pthread_mutex_lock(&d->lock);
		uint64_t start = t > d->link_free ? t : d->link_free;
		p->due = start + (uint64_t)(ns_per_byte * (double)n);
		d->link_free = p->due;
		if (d->tail)
			d->tail->next = p;
		else
			d->head = p;
		d->tail = p;
		pthread_cond_signal(&d->cv);
		pthread_mutex_unlock(&d->lock);
	}
	pthread_mutex_lock(&d->lock);
	d->eof = 1;
	pthread_cond_signal(&d->cv);
	pthread_mutex_unlock(&d->lock);
	return NULL;
}

static void cpu_relax(void) { __asm__ __volatile__("" ::: "memory"); }

static void *writer(void *arg)
{
	struct dir *d = arg;
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	uint64_t idle_since = now_ns();
	for (;;) {
		pthread_mutex_lock(&d->lock);
		/* nothing queued for 2 ms: sleep until something comes */
		while (!d->head && !d->eof && now_ns() - idle_since > 2000000u)
			pthread_cond_wait(&d->cv, &d->lock);
		struct piece *p = d->head;
		int eof = d->eof;
		if (p) {
			d->head = p->next;
			if (!d->head)
				d->tail = NULL;
		}
		pthread_mutex_unlock(&d->lock);
		if (!p) {
			if (eof)
				break;
			cpu_relax();
			continue;
		}
		for (uint64_t t = now_ns(); t < p->due; t = now_ns()) {
			if (p->due - t > 250000u) {
				uint64_t w = p->due - 200000u;
				struct timespec ts = { (time_t)(w / 1000000000u), (long)(w % 1000000000u) };
				clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
			} else {
				cpu_relax();
			}
		}
		for (size_t off = 0; off < p->len;) {
			ssize_t w = send(d->out, p->data + off, p->len - off, MSG_NOSIGNAL);
			if (w <= 0) {
				free(p);
				shutdown(d->in, SHUT_RDWR);
				return NULL;
			}
			off += (size_t)w;
		}
		free(p);
		idle_since = now_ns();
	}
	shutdown(d->out, SHUT_WR);
	return NULL;
}

static int dial(void)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai;
	if (getaddrinfo(to_host, to_port, &hints, &ai))
		return -1;
	int fd = socket(ai->ai_family, SOCK_STREAM, 0);
	if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	return fd;
}

static void tune(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static void *conn_main(void *arg)
{
	int c = (int)(intptr_t)arg;
	int s = dial();
	if (s < 0) {
		close(c);
		return NULL;
	}
	tune(c);
	tune(s);
	struct dir up = { .in = c, .out = s }, down = { .in = s, .out = c };
	pthread_t t[4];
	struct dir *ds[2] = { &up, &down };
	for (int i = 0; i < 2; i++) {
		pthread_mutex_init(&ds[i]->lock, NULL);
		pthread_cond_init(&ds[i]->cv, NULL);
		pthread_create(&t[2 * i], NULL, reader, ds[i]);
		pthread_create(&t[2 * i + 1], NULL, writer, ds[i]);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	close(c);
	close(s);
	return NULL;
}

int main(int argc, char **argv)
{
	const char *listen_port = NULL, *to = NULL;
	double gbps = 100, rtt_us = 0;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--listen"))
			listen_port = argv[i + 1];
		else if (!strcmp(argv[i], "--to"))
			to = argv[i + 1];
		else if (!strcmp(argv[i], "--rtt-us"))
			rtt_us = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--gbps"))
			gbps = atof(argv[i + 1]);
		else {
			fprintf(stderr, "linkemu: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	static char host[256], port[16];
	const char *colon = to ? strrchr(to, ':') : NULL;
	if (!listen_port || !colon || gbps <= 0 || rtt_us < 0 || (size_t)(colon - to) >= sizeof(host)) {
		fprintf(stderr, "usage: linkemu --listen PORT --to HOST:PORT --rtt-us N --gbps G\n");
		return 2;
	}
	memcpy(host, to, (size_t)(colon - to));
	snprintf(port, sizeof(port), "%s", colon + 1);
	to_host = host;
	to_port = port;
	rtt_ns = (long)(rtt_us * 1000);
	ns_per_byte = 8.0 / gbps; /* ns per byte at G Gbit/s */
	signal(SIGPIPE, SIG_IGN);
	int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(listen_port)),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 16) < 0) {
		perror("linkemu: listen");
		return 1;
	}
	for (;;) {
		int c = accept(l, NULL, NULL);
		if (c < 0) {
			if (errno == EINTR)
				continue;
			perror("linkemu: accept");
			return 1;
		}
		pthread_t t;
		if (pthread_create(&t, NULL, conn_main, (void *)(intptr_t)c) == 0)
			pthread_detach(t);
		else
			close(c);
	}
}
