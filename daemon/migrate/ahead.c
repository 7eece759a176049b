/* A session's state read ahead while it is restored (ahead.h). */
#include "ahead.h"
#include "../session.h"
#include "log.h"
#include "transport.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (4u << 20)
/* how far the reader may run ahead: 2 GiB, an eighth of the node's memory
 * at most (a third of a second at 4 GB/s needs 1.3 GB) */
#define AHEAD_MAX (2ull << 30)
#define STACK (1u << 20)
#define NCHUNK (AHEAD_MAX / CHUNK)

/*
 * The reader's buffers and its stack lie in an address range every worker
 * reserves when it starts (ahead_reserve), before the driver maps anything.
 * The driver places module data by the process's address-space layout: a
 * mapping made during the restore (a buffer, a thread's stack, a malloc
 * arena) moved a module's globals away from where the source had them
 * (measured on two H200s).  So the reader maps nothing and allocates
 * nothing: its memory is made accessible inside the reservation, and given
 * back (contents dropped, access removed) when the restore ends.
 */
static uint8_t *area; /* STACK, then NCHUNK chunks; NULL: no reservation */
static int busy;      /* a restore uses the area (one at a time) */

void ahead_reserve(void)
{
	void *p = mmap(NULL, STACK + AHEAD_MAX, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	area = p == MAP_FAILED ? NULL : p;
}
/* after the restore's last record, how long the reader may take to reach
 * the end of the stream (a peer that stops sending is dropped) */
#define FINISH_WAIT_S 30

struct chunk {
	uint8_t *p;
	size_t n, off;
	struct chunk *next;
};

struct ahead {
	struct session *s;
	struct chunk *all; /* NCHUNK, made by the restoring thread */
	size_t made;       /* how many of them are in use */
	pthread_t tid;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct chunk *head, *tail, *spare; /* queued in order; buffers to reuse */
	uint64_t queued, limit;           /* bytes in buffers, read or not */
	int eof, err, stop;               /* the reader's end; main asks it to end */
	struct rgpu_hdr last;             /* the frame being read */
	size_t left;                      /* its bytes not read yet */
	int done;                         /* that frame is the last (no NOREPLY) */
};

static uint64_t ahead_limit(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	uint64_t m = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz / 8 : AHEAD_MAX;
	m = m < AHEAD_MAX ? m : AHEAD_MAX;
	return m < 2 * CHUNK ? 2 * CHUNK : m;
}

/* A buffer for the reader: a spare one, or a new one while under the
 * limit; waits for the restore to give one back otherwise.  mu held;
 * NULL when told to stop or out of memory. */
static struct chunk *chunk_get(struct ahead *a)
{
	for (;;) {
		if (a->stop)
			return NULL;
		if (a->spare) {
			struct chunk *c = a->spare;
			a->spare = c->next;
			c->n = c->off = 0;
			c->next = NULL;
			return c;
		}
		if (a->queued + CHUNK <= a->limit && a->made < NCHUNK) {
			struct chunk *c = &a->all[a->made++];
			c->p = area + STACK + (size_t)(c - a->all) * CHUNK;
			a->queued += CHUNK;
			return c;
		}
		pthread_cond_wait(&a->cv, &a->mu);
	}
}

/* The next frame's header and prefix; 0, or -1 on a malformed frame or a
 * lost connection. */
static int next_frame(struct ahead *a)
{
	uint8_t hb[RGPU_HDR_SIZE], f[8];
	struct rgpu_hdr h;
	if (session_recv(a->s, hb, sizeof(hb)) < 0)
		return -1;
	rgpu_hdr_decode(hb, &h);
	if (h.magic != RGPU_PROTO_MAGIC || h.op != RGPU_OP_SESSION_RESTORE ||
	    (h.flags & RGPU_F_REPLY) || h.len < 8 || h.len > RGPU_MAX_PAYLOAD ||
	    session_recv(a->s, f, 8) < 0)
		return -1;
	pthread_mutex_lock(&a->mu);
	a->last = h;
	a->left = h.len - 8;
	a->done = !(h.flags & RGPU_F_NOREPLY);
	pthread_mutex_unlock(&a->mu);
	return 0;
}

static void *reader(void *arg)
{
	struct ahead *a = arg;
	int err = 0;
	for (;;) {
		if (!a->left) {
			if (a->done)
				break;
			if (next_frame(a) < 0) {
				err = 1;
				break;
			}
			continue;
		}
		pthread_mutex_lock(&a->mu);
		struct chunk *c = chunk_get(a);
		pthread_mutex_unlock(&a->mu);
		if (!c) {
			err = 1;
			break;
		}
		size_t k = a->left < CHUNK ? a->left : CHUNK;
		int rc = session_recv(a->s, c->p, k);
		pthread_mutex_lock(&a->mu);
		if (rc < 0) {
			c->next = a->spare;
			a->spare = c;
			pthread_mutex_unlock(&a->mu);
			err = 1;
			break;
		}
		c->n = k;
		a->left -= k;
		if (a->tail)
			a->tail->next = c;
		else
			a->head = c;
		a->tail = c;
		pthread_cond_broadcast(&a->cv);
		pthread_mutex_unlock(&a->mu);
	}
	pthread_mutex_lock(&a->mu);
	a->eof = 1;
	a->err = err;
	pthread_cond_broadcast(&a->cv);
	pthread_mutex_unlock(&a->mu);
	return NULL;
}

struct ahead *ahead_start(struct session *s, const struct rgpu_hdr *first, size_t left)
{
	if (!area || busy)
		return NULL;
	struct ahead *a = calloc(1, sizeof(*a));
	struct chunk *all = calloc(NCHUNK, sizeof(*all));
	uint64_t limit = ahead_limit();
	pthread_attr_t at;
	if (!a || !all || mprotect(area, STACK + limit, PROT_READ | PROT_WRITE) < 0) {
		free(a);
		free(all);
		return NULL;
	}
#ifdef MADV_HUGEPAGE
	madvise(area + STACK, limit, MADV_HUGEPAGE);
#endif
	a->s = s;
	a->all = all;
	a->last = *first;
	a->left = left;
	a->done = !(first->flags & RGPU_F_NOREPLY);
	a->limit = limit;
	pthread_mutex_init(&a->mu, NULL);
	pthread_cond_init(&a->cv, NULL);
	int ok = pthread_attr_init(&at) == 0;
	if (!ok || pthread_attr_setstack(&at, area, STACK) != 0 ||
	    pthread_create(&a->tid, &at, reader, a) != 0) {
		if (ok)
			pthread_attr_destroy(&at);
		pthread_mutex_destroy(&a->mu);
		pthread_cond_destroy(&a->cv);
		mprotect(area, STACK + limit, PROT_NONE);
		free(all);
		free(a);
		return NULL;
	}
	pthread_attr_destroy(&at);
	busy = 1;
	return a;
}

int ahead_read(void *arg, void *p, size_t n)
{
	struct ahead *a = arg;
	pthread_mutex_lock(&a->mu);
	while (n) {
		struct chunk *c = a->head;
		if (!c) {
			if (a->eof) {
				pthread_mutex_unlock(&a->mu);
				return -1; /* the stream ended (or broke) before the state */
			}
			pthread_cond_wait(&a->cv, &a->mu);
			continue;
		}
		size_t k = c->n - c->off < n ? c->n - c->off : n;
		memcpy(p, c->p + c->off, k);
		c->off += k;
		p = (uint8_t *)p + k;
		n -= k;
		if (c->off == c->n) {
			a->head = c->next;
			if (!a->head)
				a->tail = NULL;
			c->next = a->spare;
			a->spare = c;
			pthread_cond_broadcast(&a->cv);
		}
	}
	pthread_mutex_unlock(&a->mu);
	return 0;
}


int ahead_finish(struct ahead *a, int restored, struct rgpu_hdr *last)
{
	pthread_mutex_lock(&a->mu);
	if (restored) {
		/* the end of the state must be the end of the stream: wait for
		 * the reader to get there (or to find more) */
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += FINISH_WAIT_S;
		while (!a->eof && !a->head &&
		       pthread_cond_timedwait(&a->cv, &a->mu, &until) != ETIMEDOUT)
			;
	}
	int exact = restored && a->eof && !a->err && !a->head;
	if (!a->eof) {
		/* the reader may wait for data that never comes, or for room */
		a->stop = 1;
		pthread_cond_broadcast(&a->cv);
		int fd = a->s->conn ? rgpu_conn_fd(a->s->conn) : -1;
		if (fd >= 0)
			shutdown(fd, SHUT_RD);
	}
	pthread_mutex_unlock(&a->mu);
	pthread_join(a->tid, NULL);
	*last = a->last;
	/* the memory goes back, the addresses stay reserved */
	madvise(area, STACK + a->limit, MADV_DONTNEED);
	mprotect(area, STACK + a->limit, PROT_NONE);
	pthread_mutex_destroy(&a->mu);
	pthread_cond_destroy(&a->cv);
	free(a->all);
	free(a);
	busy = 0;
	return exact ? 0 : -1;
}
