/*
 * Same host, calls through shared memory: two byte queues in one memfd
 * that the client and its session worker both map, one each way, over the
 * same-host socket the session began on.
 *
 * A synchronous call over the Unix socket costs two system calls and two
 * wake-ups each way; here a request is a copy into the queue, and a reader
 * that is still spinning (for up to RGPU_SPIN_US / RGPUD_SPIN_US) sees it
 * without any.  Spinning pays only while the other end has a core to run
 * on: a spin that ends without input halves the next one (down to none,
 * with a full one tried every SPIN_PROBE waits), one that finds input
 * restores the full time, a sleep that input ended within the full time
 * raises the next spin to twice that sleep (a spin would have caught it:
 * without this rule a reader that stopped spinning during a pause could
 * stay asleep for every call after it, each paying a wake-up: measured on
 * the H100 host, 10.8 us per null call instead of 0.6), and the spinner
 * yields its core now and then,
 * so that on a machine with fewer cores than busy threads the queues cost
 * no more than the socket.  A reader that has spun long enough says so in the queue (sleeping)
 * and waits in poll() on the socket; the writer that finds it asleep sends
 * one byte there: the doorbell.  The socket also tells either end that the
 * other is gone (hang-up), and keeps the peer's credentials.
 *
 * Each queue has one producer and one consumer thread at a time (the
 * client's RPC layer and rgpud's session serialise them), so positions are
 * plain counters: the producer owns tail, the consumer head, each keeps its
 * own copy and only reads the other's.  What the peer wrote is checked
 * before use: a position that no honest peer could have written is a
 * protocol error on that connection, never an out-of-bounds access.
 */
#include "clock.h"
#include "transport.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SHMQ_CTL 4096

/* One direction, in shared memory; each field on its own cache line so
 * the two ends do not write the same line. */
struct shmq_dir {
	_Alignas(64) uint64_t tail;     /* bytes ever written (producer) */
	_Alignas(64) uint64_t head;     /* bytes ever read (consumer) */
	_Alignas(64) uint32_t sleeping; /* the consumer waits on the socket */
};

struct shmq_ctl {
	uint64_t magic;
	uint64_t ring; /* bytes of each queue */
	struct shmq_dir dir[2]; /* 0: client to server, 1: server to client */
};
_Static_assert(sizeof(struct shmq_ctl) <= SHMQ_CTL, "control block fits its page");

#define SHMQ_MAGIC 0x7267707571303031ULL /* "rgpuq001" */

struct shmq_conn {
	struct rgpu_conn base;
	struct rgpu_conn *sock; /* owned: doorbell, hang-up, credentials */
	int fd;
	uint8_t *mem;
	size_t size, ring;
	struct shmq_dir *tx, *rx;
	uint8_t *txq, *rxq;
	uint64_t tx_tail, rx_head; /* this end's own positions */
	unsigned spin_us;
	uint64_t spin_ns;          /* the next spin's length (the reader's own) */
	unsigned waits;
	uint64_t slept_at;         /* when this end last went to sleep (0: awake) */
	unsigned long sleeps;      /* waits that slept on the socket */
	int timeout_ms;            /* a receive's bound once asleep (0: none) */
	int shut;                  /* atomic: shutdown was called */
};

#define SPIN_PROBE 32

static const struct rgpu_transport shmq_transport;

static int is_shut(struct shmq_conn *q) { return __atomic_load_n(&q->shut, __ATOMIC_ACQUIRE); }

/* Bytes waiting in the receive queue, or -1 (errno EPROTO) if the peer's
 * tail is impossible. */
static int64_t rx_avail(struct shmq_conn *q)
{
	uint64_t tail = __atomic_load_n(&q->rx->tail, __ATOMIC_ACQUIRE);
	uint64_t n = tail - q->rx_head;
	if (n > q->ring) {
		errno = EPROTO;
		return -1;
	}
	return (int64_t)n;
}

/* Room in the send queue, or -1 (EPROTO) if the peer's head is impossible. */
static int64_t tx_room(struct shmq_conn *q)
{
	uint64_t head = __atomic_load_n(&q->tx->head, __ATOMIC_ACQUIRE);
	uint64_t used = q->tx_tail - head;
	if (used > q->ring) {
		errno = EPROTO;
		return -1;
	}
	return (int64_t)(q->ring - used);
}

/* Takes the doorbell bytes that woke us.  0, or -1 with errno 0 when the
 * peer has closed its end. */
static int drain_doorbell(struct shmq_conn *q)
{
	char b[64];
	for (;;) {
		ssize_t k = recv(q->fd, b, sizeof(b), MSG_DONTWAIT);
		if (k > 0)
			continue;
		if (k == 0) {
			errno = 0;
			return -1;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		return -1;
	}
}

/* After publishing: wakes the peer's reader if it sleeps (one byte per
 * sleep: whoever clears the flag sends it). */
static int ring_doorbell(struct shmq_conn *q)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (!__atomic_load_n(&q->tx->sleeping, __ATOMIC_RELAXED) ||
	    !__atomic_exchange_n(&q->tx->sleeping, 0, __ATOMIC_ACQ_REL))
		return 0;
	for (;;) {
		ssize_t k = send(q->fd, "", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (k == 1 || (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)))
			return 0; /* a full socket holds doorbells enough */
		if (k < 0 && errno == EINTR)
			continue;
		return -1;
	}
}

/* Announces sleep; 1 if bytes came meanwhile (then not asleep), 0 if the
 * caller may poll the socket, -1 on a protocol error. */
static int arm(struct shmq_conn *q)
{
	__atomic_store_n(&q->rx->sleeping, 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	int64_t n = rx_avail(q);
	if (n != 0)
		__atomic_store_n(&q->rx->sleeping, 0, __ATOMIC_RELAXED);
	return n < 0 ? -1 : n > 0;
}

/* Spins for input as long as the adaptive budget says: 1 input came, 0
 * none (sleep now), -1 error. */
static int spin(struct shmq_conn *q)
{
	uint64_t full = (uint64_t)q->spin_us * 1000u;
	uint64_t len = ++q->waits % SPIN_PROBE == 0 ? full : q->spin_ns;
	int64_t n = rx_avail(q);
	if (n != 0 || !len)
		return n < 0 ? -1 : n > 0;
	uint64_t until = rgpu_now_ns() + len;
	for (unsigned i = 1;; i++) {
		if ((n = rx_avail(q)) != 0) {
			if (n > 0)
				q->spin_ns = full;
			return n < 0 ? -1 : 1;
		}
		if (is_shut(q))
			return 0;
		if (i % 16 == 0) {
			if (rgpu_now_ns() >= until)
				break;
			sched_yield(); /* the writer may be waiting for this core */
		} else {
			rgpu_cpu_relax();
		}
	}
	q->spin_ns = len / 2 < 1000 ? 0 : len / 2;
	return 0;
}

/* Going to sleep on the socket / woken with input: a sleep that ended
 * within a full spin says spinning would have paid. */
static void sleep_begins(struct shmq_conn *q)
{
	q->sleeps++;
	if (q->spin_us && q->spin_ns < (uint64_t)q->spin_us * 1000u)
		q->slept_at = rgpu_now_ns();
}

static void sleep_ends(struct shmq_conn *q, int64_t avail)
{
	uint64_t full = (uint64_t)q->spin_us * 1000u;
	if (q->slept_at && avail > 0) {
		/* twice the sleep: enough to catch the next one like it, and no
		 * more where the peer may need this core to answer */
		uint64_t want = 2 * (rgpu_now_ns() - q->slept_at) + 1000;
		if (want <= 2 * full && want > q->spin_ns)
			q->spin_ns = want < full ? want : full;
	}
	q->slept_at = 0;
}

/* Waits until the receive queue has bytes: spins, then sleeps on the
 * socket.  0, or -1 (errno 0: the peer closed and nothing is left). */
static int wait_input(struct shmq_conn *q)
{
	int64_t n;
	int sp = spin(q), asleep = 0;
	if (sp)
		return sp < 0 ? -1 : 0;
	for (;;) {
		int a = arm(q);
		if (a)
			return a < 0 ? -1 : 0;
		struct pollfd p = { .fd = q->fd, .events = POLLIN | POLLRDHUP };
		if (!asleep++)
			sleep_begins(q);
		int r = poll(&p, 1, q->timeout_ms ? q->timeout_ms : -1);
		__atomic_store_n(&q->rx->sleeping, 0, __ATOMIC_RELAXED);
		if (r == 0 && rx_avail(q) == 0) {
			errno = EAGAIN; /* as SO_RCVTIMEO says it on a socket */
			return -1;
		}
		if (r < 0 && errno != EINTR)
			return -1;
		int closed = r > 0 && (p.revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) &&
			     drain_doorbell(q) < 0;
		if ((n = rx_avail(q)) != 0) {
			sleep_ends(q, n);
			return n < 0 ? -1 : 0; /* the last bytes before a close too */
		}
		if (closed || (r > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))) {
			errno = 0; /* the peer's end is closed: end of input */
			return -1;
		}
		if (is_shut(q)) {
			errno = ESHUTDOWN;
			return -1;
		}
	}
}

/* Waits for room in the send queue: the reader frees it without a
 * doorbell, so this looks every millisecond (a full 1 MiB queue is rare:
 * a reader that does not read), watching for hang-up meanwhile. */
static int wait_room(struct shmq_conn *q)
{
	for (;;) {
		int64_t n = tx_room(q);
		if (n != 0)
			return n < 0 ? -1 : 0;
		if (is_shut(q)) {
			errno = ESHUTDOWN;
			return -1;
		}
		struct pollfd p = { .fd = q->fd, .events = POLLRDHUP };
		int r = poll(&p, 1, 1);
		if (r > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) {
			errno = EPIPE;
			return -1;
		}
	}
}

static void put_bytes(struct shmq_conn *q, const uint8_t *p, size_t k)
{
	size_t at = (size_t)(q->tx_tail % q->ring), first = q->ring - at < k ? q->ring - at : k;
	memcpy(q->txq + at, p, first);
	memcpy(q->txq, p + first, k - first);
	q->tx_tail += k;
	__atomic_store_n(&q->tx->tail, q->tx_tail, __ATOMIC_RELEASE);
}

static int shmq_sendv(struct rgpu_conn *c, const struct iovec *iov, int n)
{
	struct shmq_conn *q = (struct shmq_conn *)c;
	for (int i = 0; i < n; i++) {
		const uint8_t *p = iov[i].iov_base;
		size_t left = iov[i].iov_len;
		while (left) {
			int64_t room = tx_room(q);
			if (room < 0)
				return -1;
			if (room == 0) {
				/* the reader may sleep on what is there */
				if (ring_doorbell(q) < 0 || wait_room(q) < 0)
					return -1;
				continue;
			}
			size_t k = left < (uint64_t)room ? left : (size_t)room;
			put_bytes(q, p, k);
			p += k;
			left -= k;
		}
	}
	return ring_doorbell(q);
}

static size_t take_bytes(struct shmq_conn *q, uint8_t *p, size_t n, uint64_t avail)
{
	size_t k = n < avail ? n : (size_t)avail;
	size_t at = (size_t)(q->rx_head % q->ring), first = q->ring - at < k ? q->ring - at : k;
	memcpy(p, q->rxq + at, first);
	memcpy(p + first, q->rxq, k - first);
	q->rx_head += k;
	__atomic_store_n(&q->rx->head, q->rx_head, __ATOMIC_RELEASE);
	return k;
}

static ssize_t shmq_recv_some(struct rgpu_conn *c, void *buf, size_t n)
{
	struct shmq_conn *q = (struct shmq_conn *)c;
	if (n == 0)
		return 0;
	if (wait_input(q) < 0)
		return errno ? -1 : 0;
	int64_t a = rx_avail(q);
	if (a < 0)
		return -1;
	return (ssize_t)take_bytes(q, buf, n, (uint64_t)a);
}

static int shmq_recv(struct rgpu_conn *c, void *buf, size_t n)
{
	uint8_t *p = buf;
	while (n) {
		ssize_t k = shmq_recv_some(c, p, n);
		if (k <= 0) {
			if (k == 0)
				errno = 0;
			return -1;
		}
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

static void shmq_shutdown(struct rgpu_conn *c)
{
	struct shmq_conn *q = (struct shmq_conn *)c;
	__atomic_store_n(&q->shut, 1, __ATOMIC_RELEASE);
	rgpu_conn_shutdown(q->sock); /* a thread in poll wakes */
}

static void shmq_close(struct rgpu_conn *c)
{
	struct shmq_conn *q = (struct shmq_conn *)c;
	rgpu_conn_close(q->sock);
	munmap(q->mem, q->size);
	free(q);
}

static int shmq_fd(struct rgpu_conn *c) { return ((struct shmq_conn *)c)->fd; }

static int shmq_ready(struct rgpu_conn *c)
{
	int64_t n = rx_avail((struct shmq_conn *)c);
	return n < 0 ? -1 : n > 0;
}

/* Before a poll of the socket with other descriptors: spin first, as a
 * reader does. */
static int shmq_arm(struct rgpu_conn *c)
{
	struct shmq_conn *q = (struct shmq_conn *)c;
	int sp = spin(q);
	if (!sp && !(sp = arm(q)))
		sleep_begins(q);
	return sp;
}

static void shmq_disarm(struct rgpu_conn *c)
{
	struct shmq_conn *q = (struct shmq_conn *)c;
	__atomic_store_n(&q->rx->sleeping, 0, __ATOMIC_RELAXED);
	(void)drain_doorbell(q); /* a close shows again to the next wait */
	sleep_ends(q, rx_avail(q));
}

unsigned long rgpu_shmq_sleeps(struct rgpu_conn *c)
{
	return c && c->tp == &shmq_transport ? ((struct shmq_conn *)c)->sleeps : 0;
}

static struct rgpu_conn *shmq_under(struct rgpu_conn *c) { return ((struct shmq_conn *)c)->sock; }

static int shmq_recv_timeout(struct rgpu_conn *c, int ms)
{
	((struct shmq_conn *)c)->timeout_ms = ms > 0 ? ms : 0;
	return 0;
}

static const struct rgpu_transport shmq_transport = {
	.name = "shmq",
	.sendv = shmq_sendv,
	.recv = shmq_recv,
	.recv_some = shmq_recv_some,
	.shutdown = shmq_shutdown,
	.close = shmq_close,
	.fd = shmq_fd,
	.ready = shmq_ready,
	.arm = shmq_arm,
	.disarm = shmq_disarm,
	.under = shmq_under,
	.recv_timeout = shmq_recv_timeout,
};

size_t rgpu_shmq_size(size_t ring) { return SHMQ_CTL + 2 * ring; }

static int ring_ok(size_t ring)
{
	return ring >= 4096 && ring <= RGPU_SHMQ_RING_MAX && (ring & (ring - 1)) == 0;
}

int rgpu_shmq_make(size_t ring, int *fd, void **mem, char *err, size_t errlen)
{
	size_t size = rgpu_shmq_size(ring);
	void *p = MAP_FAILED;
	if (!ring_ok(ring)) {
		snprintf(err, errlen, "queue size %zu: not a power of two from 4 KiB to %u MiB", ring,
			 RGPU_SHMQ_RING_MAX >> 20);
		return -1;
	}
	int f = memfd_create("rgpu-calls", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	/* sealed at its size: the server maps it and must not fault on it */
	if (f < 0 || ftruncate(f, (off_t)size) < 0 ||
	    fcntl(f, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0 ||
	    (p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0)) == MAP_FAILED) {
		snprintf(err, errlen, "cannot make the shared call queues: %s", strerror(errno));
		if (f >= 0)
			close(f);
		return -1;
	}
	struct shmq_ctl *ctl = p;
	ctl->ring = ring;
	__atomic_store_n(&ctl->magic, SHMQ_MAGIC, __ATOMIC_RELEASE);
	*fd = f;
	*mem = p;
	return 0;
}

int rgpu_shmq_map(int fd, size_t ring, void **mem, char *err, size_t errlen)
{
	size_t size = rgpu_shmq_size(ring);
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);
	if (!ring_ok(ring) || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size != size || seals < 0 || !(seals & F_SEAL_SHRINK)) {
		snprintf(err, errlen, "not a sealed call-queue memory file of %zu bytes", size);
		return -1;
	}
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		snprintf(err, errlen, "cannot map the call queues: %s", strerror(errno));
		return -1;
	}
	struct shmq_ctl *ctl = p;
	if (__atomic_load_n(&ctl->magic, __ATOMIC_ACQUIRE) != SHMQ_MAGIC || ctl->ring != ring) {
		snprintf(err, errlen, "the call queues are not laid out as agreed");
		munmap(p, size);
		return -1;
	}
	*mem = p;
	return 0;
}

struct rgpu_conn *rgpu_shmq_wrap(struct rgpu_conn *sock, void *mem, size_t ring, int is_server,
				 unsigned spin_us)
{
	int fd = rgpu_conn_fd(sock);
	struct shmq_conn *q = fd >= 0 ? calloc(1, sizeof(*q)) : NULL;
	if (!q)
		return NULL;
	struct shmq_ctl *ctl = mem;
	q->base.tp = &shmq_transport;
	snprintf(q->base.peer, sizeof(q->base.peer), "%s", sock->peer);
	q->sock = sock;
	q->fd = fd;
	q->mem = mem;
	q->size = rgpu_shmq_size(ring);
	q->ring = ring;
	q->tx = &ctl->dir[is_server ? 1 : 0];
	q->rx = &ctl->dir[is_server ? 0 : 1];
	q->txq = (uint8_t *)mem + SHMQ_CTL + (is_server ? ring : 0);
	q->rxq = (uint8_t *)mem + SHMQ_CTL + (is_server ? 0 : ring);
	/* the positions as they stand (zero on a new queue; the peer's
	 * values are checked on every use) */
	q->tx_tail = __atomic_load_n(&q->tx->tail, __ATOMIC_ACQUIRE);
	q->rx_head = __atomic_load_n(&q->rx->head, __ATOMIC_ACQUIRE);
	q->spin_us = spin_us;
	q->spin_ns = (uint64_t)spin_us * 1000u;
	return &q->base;
}
