/*
 * The parent's side of the memory policy (see mem.h).
 *
 * Each worker's gate thread (gate.c) owns a record here: the bytes it has
 * resident on each GPU and swapped out (reported by the worker), what it
 * has charged, and a slot for the answer to the parent's last question.
 * A worker whose allocation found no physical memory asks for room
 * (MEMQ_ROOM); its gate thread then runs the policy:
 *   swap  asks the other workers holding memory on that GPU whether they are
 *         idle, and tells the idle ones to evict, least recently active
 *         first, until as many bytes were freed as asked for; with nobody
 *         idle it waits (up to --memory-wait) for one to become idle or to
 *         free memory; with nobody else holding memory it refuses: the
 *         session's own working set does not fit;
 *   wait  queues the request in arrival order and answers "try again" when
 *         memory was freed on that GPU and it is first in line, until the
 *         bound; refuses at once when no other session holds memory there;
 *   fail  refuses.
 * Questions travel to a worker on its control socket (struct
 * mem_parent_msg, under the record's send lock) and the answer comes back
 * through that worker's own gate thread (MEMQ_ANSWER), which hands it over
 * here.  A worker that is itself waiting for the parent is never asked.
 */
#include "mem.h"

#include "log.h"
#include "metrics.h"
#include "session.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define STATE_TIMEOUT_MS 500
#define EVICT_TIMEOUT_MS (600 * 1000)
#define POLL_MS 20

struct mem_worker {
	struct mem_worker *next;
	int fd;
	pthread_mutex_t send_lock;
	struct metrics_session *ms;
	uint64_t resident[RGPUD_MAX_GPUS], swapped[RGPUD_MAX_GPUS], charged[RGPUD_MAX_GPUS];
	int in_room;        /* its gate thread is in the arbiter */
	int dead;           /* its worker is gone */
	int refs;           /* arbiters holding the record */
	uint64_t ask_seq;   /* the question awaiting an answer (0: none) */
	int answered;
	struct mem_q_answer ans;
	/* a pending allocation under wait (ticket 0: none) */
	uint64_t ticket;
	unsigned ticket_gpu;
	uint64_t seen_gen;
	uint64_t deadline_ns;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond;
static int cond_ready;
static struct mem_worker *workers;
static uint64_t gen[RGPUD_MAX_GPUS]; /* memory given back on each GPU */
static uint64_t next_seq, next_ticket;
static enum mem_policy policy = MEM_POLICY_SWAP;
static unsigned wait_s = 60;

int mem_policy_parse(const char *s, enum mem_policy *p)
{
	static const char *const names[] = { "swap", "wait", "fail" };
	for (int i = 0; i < 3; i++)
		if (!strcmp(s, names[i])) {
			*p = (enum mem_policy)i;
			return 0;
		}
	return -1;
}

const char *mem_policy_name(enum mem_policy p)
{
	return p == MEM_POLICY_WAIT ? "wait" : p == MEM_POLICY_FAIL ? "fail" : "swap";
}

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void init_cond(void)
{
	if (cond_ready)
		return;
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(&cond, &a);
	pthread_condattr_destroy(&a);
	cond_ready = 1;
}

void mem_parent_config(enum mem_policy p, unsigned w)
{
	pthread_mutex_lock(&lock);
	init_cond();
	policy = p;
	wait_s = w;
	pthread_mutex_unlock(&lock);
}

/* Waits on cond (lock held) until deadline (monotonic ns). */
static void wait_until(uint64_t deadline)
{
	struct timespec ts = { (time_t)(deadline / 1000000000ull), (long)(deadline % 1000000000ull) };
	pthread_cond_timedwait(&cond, &lock, &ts);
}

struct mem_worker *mem_parent_open(int fd, struct metrics_session *ms)
{
	struct mem_worker *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->fd = fd;
	w->ms = ms;
	pthread_mutex_init(&w->send_lock, NULL);
	pthread_mutex_lock(&lock);
	init_cond();
	w->next = workers;
	workers = w;
	pthread_mutex_unlock(&lock);
	return w;
}

void mem_parent_close(struct mem_worker *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&lock);
	w->dead = 1;
	for (unsigned g = 0; g < RGPUD_MAX_GPUS; g++)
		if (w->resident[g] || w->charged[g])
			gen[g]++;
	pthread_cond_broadcast(&cond);
	while (w->refs)
		pthread_cond_wait(&cond, &lock);
	for (struct mem_worker **pp = &workers; *pp; pp = &(*pp)->next)
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	pthread_mutex_unlock(&lock);
	metrics_session_memory(w->ms, 0, 0);
	pthread_mutex_destroy(&w->send_lock);
	free(w);
}

pthread_mutex_t *mem_parent_send_lock(struct mem_worker *w)
{
	return w ? &w->send_lock : NULL;
}

void mem_parent_charged(struct mem_worker *w, unsigned gpu, int64_t delta)
{
	if (!w || gpu >= RGPUD_MAX_GPUS)
		return;
	pthread_mutex_lock(&lock);
	w->charged[gpu] += (uint64_t)delta;
	if (delta < 0) {
		gen[gpu]++;
		pthread_cond_broadcast(&cond);
	}
	pthread_mutex_unlock(&lock);
}

/* Asks worker t (lock held, t->refs taken) and waits for its answer; 0 and
 * *a, or -1 (no answer in time, or it is gone). */
static int ask(struct mem_worker *t, unsigned op, unsigned gpu, unsigned timeout_ms,
	       struct mem_q_answer *a)
{
	struct mem_parent_msg m = { .rc = MEM_PARENT_MAGIC, .op = op, .seq = ++next_seq, .gpu = gpu };
	t->ask_seq = m.seq;
	t->answered = 0;
	pthread_mutex_unlock(&lock);
	pthread_mutex_lock(&t->send_lock);
	ssize_t n = send(t->fd, &m, sizeof(m), MSG_NOSIGNAL | MSG_DONTWAIT);
	pthread_mutex_unlock(&t->send_lock);
	pthread_mutex_lock(&lock);
	if (n != (ssize_t)sizeof(m))
		return -1;
	uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000ull;
	while (!t->dead && !(t->answered && t->ans.seq == m.seq) && now_ns() < deadline)
		wait_until(deadline);
	if (!t->answered || t->ans.seq != m.seq)
		return -1;
	*a = t->ans;
	return 0;
}

struct cand {
	struct mem_worker *w;
	uint64_t idle_ms;
};

static int by_idle(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	return x->idle_ms < y->idle_ms ? 1 : x->idle_ms > y->idle_ms ? -1 : 0;
}

/* One round of swap (lock held): evicts idle workers holding memory on gpu
 * until bytes were freed.  Returns bytes freed; *others: workers that hold
 * memory there at all. */
static uint64_t swap_round(struct mem_worker *w, unsigned gpu, uint64_t bytes, int *others)
{
	struct cand c[256];
	size_t n = 0;
	*others = 0;
	for (struct mem_worker *t = workers; t; t = t->next) {
		if (t == w || t->dead || !t->resident[gpu])
			continue;
		(*others)++;
		if (!t->in_room && n < sizeof(c) / sizeof(c[0])) {
			t->refs++;
			c[n++] = (struct cand){ t, 0 };
		}
	}
	/* who is idle, and since when */
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		struct mem_q_answer a;
		if (ask(c[i].w, MEMP_STATE, gpu, STATE_TIMEOUT_MS, &a) == 0 && a.idle && a.bytes) {
			c[i].idle_ms = a.idle_ms;
			c[k++] = c[i];
		} else {
			c[i].w->refs--;
		}
	}
	qsort(c, k, sizeof(c[0]), by_idle);
	uint64_t freed = 0;
	for (size_t i = 0; i < k; i++) {
		struct mem_q_answer a;
		if (freed < bytes && ask(c[i].w, MEMP_EVICT, gpu, EVICT_TIMEOUT_MS, &a) == 0 && a.idle)
			freed += a.bytes;
		c[i].w->refs--;
	}
	pthread_cond_broadcast(&cond); /* refs dropped: a closing record may go */
	return freed;
}

/* Head of the wait queue of gpu (lock held). */
static int first_in_line(const struct mem_worker *w, unsigned gpu)
{
	for (const struct mem_worker *t = workers; t; t = t->next)
		if (t != w && !t->dead && t->ticket && t->ticket_gpu == gpu && t->ticket < w->ticket)
			return 0;
	return 1;
}

static int others_hold(const struct mem_worker *w, unsigned gpu)
{
	for (const struct mem_worker *t = workers; t; t = t->next)
		if (t != w && !t->dead && (t->charged[gpu] || t->resident[gpu]))
			return 1;
	return 0;
}

/* 0: try again; CUDA_ERROR_OUT_OF_MEMORY: give up.  Lock held. */
static int room(struct mem_worker *w, unsigned gpu, uint64_t bytes)
{
	if (policy == MEM_POLICY_FAIL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	uint64_t now = now_ns();
	if (!w->ticket || w->ticket_gpu != gpu) {
		/* the first request of this allocation */
		w->ticket = ++next_ticket;
		w->ticket_gpu = gpu;
		w->seen_gen = gen[gpu];
		w->deadline_ns = now + (uint64_t)wait_s * 1000000000ull;
	}
	int rc = CUDA_ERROR_OUT_OF_MEMORY;
	w->in_room = 1;
	for (;;) {
		if (policy == MEM_POLICY_SWAP) {
			int others;
			if (gen[gpu] != w->seen_gen) {
				/* someone freed memory meanwhile: try that first */
				w->seen_gen = gen[gpu];
				rc = 0;
				break;
			}
			if (swap_round(w, gpu, bytes, &others)) {
				w->seen_gen = gen[gpu];
				rc = 0;
				break;
			}
			if (!others)
				break; /* nothing to evict: its own working set does not fit */
		} else {
			if (!others_hold(w, gpu))
				break; /* nobody else can give memory back */
			if (gen[gpu] != w->seen_gen && first_in_line(w, gpu)) {
				w->seen_gen = gen[gpu];
				rc = 0;
				break;
			}
		}
		now = now_ns();
		if (now >= w->deadline_ns)
			break;
		uint64_t until = now + POLL_MS * 1000000ull;
		wait_until(until < w->deadline_ns ? until : w->deadline_ns);
	}
	w->in_room = 0;
	if (rc)
		w->ticket = 0;
	pthread_cond_broadcast(&cond);
	return rc;
}

int mem_parent_request(struct mem_worker *w, unsigned op, unsigned gpu, const void *payload,
		       size_t len)
{
	if (!w || gpu >= RGPUD_MAX_GPUS)
		return op == MEMQ_ANSWER ? MEM_NO_REPLY : -1;
	int rc = 0;
	pthread_mutex_lock(&lock);
	switch (op) {
	case MEMQ_REPORT: {
		struct mem_q_report r;
		if (len != sizeof(r)) {
			rc = -1;
			break;
		}
		memcpy(&r, payload, sizeof(r));
		for (unsigned g = 0; g < 8; g++) {
			if (r.resident[g] < w->resident[g]) {
				gen[g]++;
				pthread_cond_broadcast(&cond);
			}
			w->resident[g] = r.resident[g];
			w->swapped[g] = r.swapped[g];
		}
		metrics_session_memory(w->ms, r.resident_all, r.swapped_all);
		break;
	}
	case MEMQ_ANSWER: {
		struct mem_q_answer a;
		if (len == sizeof(a)) {
			memcpy(&a, payload, sizeof(a));
			if (a.seq == w->ask_seq) {
				w->ans = a;
				w->answered = 1;
				pthread_cond_broadcast(&cond);
			}
		}
		rc = MEM_NO_REPLY;
		break;
	}
	case MEMQ_ROOM: {
		struct mem_q_room q;
		if (len != sizeof(q)) {
			rc = -1;
			break;
		}
		memcpy(&q, payload, sizeof(q));
		rc = room(w, gpu, q.bytes);
		break;
	}
	case MEMQ_ROOM_DONE:
		w->ticket = 0;
		pthread_cond_broadcast(&cond);
		break;
	default:
		rc = -1;
	}
	pthread_mutex_unlock(&lock);
	return rc;
}
