/* The same-host shared-memory call queues (lib/transport_shmq.c) over a
 * socketpair: data through the wrap-around, the doorbell that wakes a
 * sleeping reader, end of input when the peer closes (after its last
 * bytes), shutdown, what the server refuses to map, and positions no
 * honest peer writes.  No daemon, no GPU. */
#include "tap.h"
#include "transport.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RING 4096

struct pair {
	struct rgpu_conn *cli, *srv;
	void *cmem, *smem;
};

/* a client and a server end over one socketpair and one queue memory */
static int make_pair(struct pair *p, unsigned cli_spin, unsigned srv_spin)
{
	int sv[2], fd;
	char err[256];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return -1;
	if (rgpu_shmq_make(RING, &fd, &p->cmem, err, sizeof(err)) < 0 ||
	    rgpu_shmq_map(fd, RING, &p->smem, err, sizeof(err)) < 0) {
		printf("# %s\n", err);
		return -1;
	}
	close(fd);
	p->cli = rgpu_shmq_wrap(rgpu_stream_wrap(sv[0], "cli"), p->cmem, RING, 0, cli_spin);
	p->srv = rgpu_shmq_wrap(rgpu_stream_wrap(sv[1], "srv"), p->smem, RING, 1, srv_spin);
	return p->cli && p->srv ? 0 : -1;
}

static void free_pair(struct pair *p)
{
	rgpu_conn_close(p->cli);
	rgpu_conn_close(p->srv);
}

struct job {
	struct rgpu_conn *c;
	uint8_t *buf;
	size_t n;
	int delay_ms;
	int rc;
	int err;
};

static void sleep_ms(int ms)
{
	struct timespec t = { ms / 1000, (long)(ms % 1000) * 1000000 };
	nanosleep(&t, NULL);
}

static void *sender(void *arg)
{
	struct job *j = arg;
	sleep_ms(j->delay_ms);
	/* in uneven pieces, as frames go */
	size_t off = 0, step = 1;
	j->rc = 0;
	while (off < j->n && j->rc == 0) {
		size_t k = j->n - off < step ? j->n - off : step;
		struct iovec iov = { j->buf + off, k };
		j->rc = rgpu_sendv(j->c, &iov, 1);
		off += k;
		step = step * 3 + 7;
	}
	j->err = errno;
	return NULL;
}

static void *receiver(void *arg)
{
	struct job *j = arg;
	sleep_ms(j->delay_ms);
	j->rc = rgpu_recv(j->c, j->buf, j->n);
	j->err = errno;
	return NULL;
}

/* n bytes from one end to the other, a sender and a receiver thread (the
 * sender delay_ms late): 1 if both succeeded */
static int pump(struct rgpu_conn *from, struct rgpu_conn *to, uint8_t *out, uint8_t *in, size_t n,
		int delay_ms)
{
	struct job s = { from, out, n, delay_ms, 0, 0 }, r = { to, in, n, 0, 0, 0 };
	pthread_t ts, tr;
	pthread_create(&tr, NULL, receiver, &r);
	pthread_create(&ts, NULL, sender, &s);
	pthread_join(ts, NULL);
	pthread_join(tr, NULL);
	return s.rc == 0 && r.rc == 0;
}

static void test_data(void)
{
	struct pair p;
	if (!ok(make_pair(&p, 20, 20) == 0, "a pair of queue ends over a socketpair"))
		return;
	/* 1 MiB through a 4 KiB queue: every byte, in order, around the ring */
	size_t n = 1 << 20;
	uint8_t *out = malloc(n), *in = malloc(n);
	for (size_t i = 0; i < n; i++)
		out[i] = (uint8_t)(i * 131 + (i >> 12));
	ok(pump(p.cli, p.srv, out, in, n, 0) && !memcmp(out, in, n),
	   "1 MiB client to server through a 4 KiB queue arrives whole and in order");
	/* and the other way, with a reader that sleeps at once (doorbell) */
	free_pair(&p);
	if (!ok(make_pair(&p, 0, 0) == 0, "a pair whose readers sleep at once"))
		return;
	memset(in, 0, n);
	ok(pump(p.srv, p.cli, out, in, n, 50) && !memcmp(out, in, n),
	   "server to client with a sleeping reader: the doorbell wakes it, all data arrives");
	/* recv_some takes what is there */
	uint8_t b[100];
	struct iovec iov = { out, 10 };
	rgpu_sendv(p.cli, &iov, 1);
	is_i64(rgpu_recv_some(p.srv, b, sizeof(b)), 10, "recv_some returns the 10 bytes there");
	ok(!memcmp(b, out, 10), "and they are the ones sent");
	is_i64(rgpu_conn_ready(p.srv), 0, "nothing more is ready");
	rgpu_sendv(p.cli, &iov, 1);
	is_i64(rgpu_conn_ready(p.srv), 1, "a send makes input ready");
	rgpu_recv(p.srv, b, 10);
	free_pair(&p);
	free(out);
	free(in);
}

static void test_arm(void)
{
	struct pair p;
	if (!ok(make_pair(&p, 0, 0) == 0, "a pair for arm/disarm"))
		return;
	int fd = rgpu_conn_fd(p.srv);
	ok(fd >= 0, "the queue end has the socket underneath for poll");
	is_i64(rgpu_conn_arm(p.srv), 0, "armed on an empty queue: poll the socket");
	uint8_t x[3] = { 1, 2, 3 }, y[3];
	struct iovec iov = { x, 3 };
	rgpu_sendv(p.cli, &iov, 1);
	struct pollfd pf = { .fd = fd, .events = POLLIN };
	is_i64(poll(&pf, 1, 2000), 1, "a send to an armed reader rings the doorbell");
	rgpu_conn_disarm(p.srv);
	pf.revents = 0;
	is_i64(poll(&pf, 1, 0), 0, "disarm takes the doorbell");
	is_i64(rgpu_conn_arm(p.srv), 1, "armed with input there: no poll");
	ok(rgpu_recv(p.srv, y, 3) == 0 && !memcmp(x, y, 3), "the bytes read after the doorbell");
	/* the peer's credentials through the layer */
	int pid;
	unsigned uid;
	ok(rgpu_unix_peer(p.srv, &pid, &uid) == 0 && pid == getpid() && uid == getuid(),
	   "rgpu_unix_peer sees through the queues to the socket");
	free_pair(&p);
}

/* An echo server that waits as rgpud's session does between requests
 * (arm, poll the socket, disarm), for n requests of 8 bytes. */
struct echo {
	struct rgpu_conn *c;
	int n;
};

static void *echo_main(void *arg)
{
	struct echo *e = arg;
	for (int i = 0; i < e->n; i++) {
		if (rgpu_conn_arm(e->c) == 0) {
			struct pollfd pf = { .fd = rgpu_conn_fd(e->c), .events = POLLIN };
			poll(&pf, 1, 5000);
			rgpu_conn_disarm(e->c);
		}
		uint8_t b[8];
		struct iovec iov = { b, 8 };
		if (rgpu_recv(e->c, b, 8) < 0 || rgpu_sendv(e->c, &iov, 1) < 0)
			break;
	}
	return NULL;
}

/* A pause makes a reader stop spinning; calls that follow back to back
 * must find it spinning again, not each pay a sleep and a doorbell (the
 * H100 host's same-host null call took 10.8 us instead of 0.6 that way). */
static void test_spin_comes_back(void)
{
	struct pair p;
	if (!ok(make_pair(&p, 1000, 1000) == 0, "a pair that spins up to 1 ms"))
		return;
	enum { PAUSED = 14, BURST = 400 };
	struct echo e = { p.srv, PAUSED + BURST };
	pthread_t t;
	if (!ok(pthread_create(&t, NULL, echo_main, &e) == 0, "echo thread"))
		return;
	uint8_t b[8] = { 0 };
	struct iovec iov = { b, 8 };
	int good = 1;
	for (int i = 0; i < PAUSED; i++) { /* each pause outlasts the spin: it halves */
		good &= rgpu_sendv(p.cli, &iov, 1) == 0 && rgpu_recv(p.cli, b, 8) == 0;
		sleep_ms(3);
	}
	unsigned long before = rgpu_shmq_sleeps(p.srv);
	ok(before >= PAUSED / 2, "the pauses put the server's reader to sleep (%lu times)", before);
	for (int i = 0; i < BURST; i++)
		good &= rgpu_sendv(p.cli, &iov, 1) == 0 && rgpu_recv(p.cli, b, 8) == 0;
	pthread_join(t, NULL);
	unsigned long burst = rgpu_shmq_sleeps(p.srv) - before;
	ok(good, "every round trip went through");
	/* (a loaded machine may deschedule either thread now and then: a
	 * bound far below one sleep per call) */
	ok(burst < BURST / 4, "back-to-back calls after the pauses: the server slept %lu times in %d",
	   burst, BURST);
	free_pair(&p);
}

static void test_close_and_shutdown(void)
{
	struct pair p;
	if (!ok(make_pair(&p, 0, 0) == 0, "a pair for close"))
		return;
	uint8_t x[5] = { 9, 8, 7, 6, 5 }, y[5];
	struct iovec iov = { x, 5 };
	rgpu_sendv(p.srv, &iov, 1);
	rgpu_conn_close(p.srv); /* its last bytes are in the queue */
	ok(rgpu_recv(p.cli, y, 5) == 0 && !memcmp(x, y, 5), "bytes sent before a close are read");
	errno = 123;
	ok(rgpu_recv(p.cli, y, 1) < 0 && errno == 0, "then end of input (errno 0), no hang");
	rgpu_conn_close(p.cli);

	if (!ok(make_pair(&p, 0, 0) == 0, "a pair for shutdown"))
		return;
	struct job r = { p.cli, y, 5, 0, 0, 0 };
	pthread_t tr;
	pthread_create(&tr, NULL, receiver, &r);
	sleep_ms(50);
	rgpu_conn_shutdown(p.cli);
	pthread_join(tr, NULL);
	ok(r.rc < 0, "shutdown wakes a reader blocked on an empty queue, which fails");
	free_pair(&p);

	if (!ok(make_pair(&p, 0, 0) == 0, "a pair for a receive bound"))
		return;
	is_i64(rgpu_conn_set_recv_timeout(p.cli, 100), 0, "a receive bound is taken");
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	errno = 0;
	int rc = rgpu_recv(p.cli, y, 1);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
	ok(rc < 0 && errno == EAGAIN && ms >= 90,
	   "with nothing sent, a bounded receive fails with EAGAIN after the bound (%.0f ms)", ms);
	free_pair(&p);

	/* a writer waiting for room sees the reader's end go */
	if (!ok(make_pair(&p, 0, 0) == 0, "a pair for a full queue"))
		return;
	uint8_t *big = calloc(1, 4 * RING);
	struct job s = { p.cli, big, 4 * RING, 0, 0, 0 };
	pthread_t ts;
	pthread_create(&ts, NULL, sender, &s);
	sleep_ms(50);
	rgpu_conn_close(p.srv);
	pthread_join(ts, NULL);
	ok(s.rc < 0, "a writer blocked on a full queue fails when the reader's end closes");
	rgpu_conn_close(p.cli);
	free(big);
}

static void test_hostile(void)
{
	char err[256];
	void *mem;
	/* not sealed, wrong size, not a power of two */
	int fd = memfd_create("t", MFD_CLOEXEC);
	ok(ftruncate(fd, (off_t)rgpu_shmq_size(RING)) == 0, "an unsealed memfd of the right size");
	ok(rgpu_shmq_map(fd, RING, &mem, err, sizeof(err)) < 0, "an unsealed file is refused (%s)", err);
	close(fd);
	int cfd;
	void *cmem;
	ok(rgpu_shmq_make(RING, &cfd, &cmem, err, sizeof(err)) == 0, "a sealed queue file");
	ok(rgpu_shmq_map(cfd, 2 * RING, &mem, err, sizeof(err)) < 0,
	   "a queue size other than the file's is refused (%s)", err);
	ok(rgpu_shmq_make(3000, &fd, &mem, err, sizeof(err)) < 0,
	   "a queue size that is not a power of two is refused (%s)", err);
	ok(ftruncate(cfd, 1) < 0, "the client cannot shrink the file under the server (sealed)");
	close(cfd);
	munmap(cmem, rgpu_shmq_size(RING));

	/* a client that writes impossible positions */
	struct pair p;
	if (!ok(make_pair(&p, 0, 0) == 0, "a pair for hostile positions"))
		return;
	uint64_t *ctl = p.cmem; /* magic, ring, then the client-to-server direction */
	uint64_t *c2s_tail = (uint64_t *)((uint8_t *)ctl + 64);
	__atomic_store_n(c2s_tail, (uint64_t)RING + 1, __ATOMIC_RELEASE);
	uint8_t b[8];
	errno = 0;
	ok(rgpu_recv(p.srv, b, 1) < 0 && errno == EPROTO,
	   "a tail more than a queue ahead is a protocol error, not a read out of bounds");
	free_pair(&p);
	if (!ok(make_pair(&p, 0, 0) == 0, "another pair"))
		return;
	ctl = p.cmem;
	/* the server-to-client head, as the client would write it */
	uint64_t *s2c_head = (uint64_t *)((uint8_t *)ctl + 64 + 3 * 64 + 64);
	__atomic_store_n(s2c_head, (uint64_t)5 * RING, __ATOMIC_RELEASE);
	struct iovec iov = { b, 8 };
	errno = 0;
	ok(rgpu_sendv(p.srv, &iov, 1) < 0 && errno == EPROTO,
	   "a head ahead of what was written is a protocol error for the server's writes");
	free_pair(&p);
}

int main(void)
{
	test_data();
	test_arm();
	test_spin_comes_back();
	test_close_and_shutdown();
	test_hostile();
	return tap_done();
}
