/*
 * The parent's side of the memory policy (see mem.h).
 *
 * Each worker's gate thread (gate.c) owns a record here: the bytes it has
 * resident on each GPU, swapped out and with a host copy ready (reported by
 * the worker), what it has charged, when its current stay on each GPU
 * began, and a slot for the answer to the parent's last question.  A worker
 * whose allocation (or restore) found no physical memory asks for room
 * (MEMQ_ROOM); its gate thread then runs the policy:
 *   swap  evicts other sessions holding memory on that GPU that are idle
 *         and past their quantum, least recently active first, each one
 *         whole (all it has on that GPU), until as many bytes were freed
 *         as asked for; with nobody evictable it waits (up to
 *         --memory-wait) for one to become so or to free memory; with
 *         nobody else holding memory it refuses: the session's own
 *         working set does not fit;
 *   wait  queues the request in arrival order and answers "try again" when
 *         memory was freed on that GPU and it is first in line, until the
 *         bound; refuses at once when no other session holds memory there;
 *   fail  refuses.
 *
 * Why swap is shaped so (issue 9: two alternating tenants of 75% each
 * took 1.87x the time of running them one after the other on an H100: the
 * second tenant's allocations pushed the first out piece by piece, and the
 * first, restored, was pushed out again before it had run):
 *   - Quantum: a session that got memory on a GPU (its first allocation
 *     there, a restore, or room made by evicting others) keeps it for a
 *     quantum before it may be evicted: the larger of --memory-quantum
 *     (default 1 s) and COST_FACTOR times what swapping it out and back
 *     would cost (its resident bytes at the copy bandwidths measured, plus
 *     preparing the host memory it has no copy in yet), at most half of
 *     --memory-wait.  Swapping then takes at most about a ninth of the time
 *     while sessions take turns, and a session whose whole run is shorter
 *     than its quantum is simply waited for (alt2: cheaper than swapping
 *     64 GB out and back).  A holder idle for longer than swapping it
 *     costs (and on the GPU as long) may go before its quantum ends (ski
 *     rental: idle_limit_ns).
 *   - Whole sessions: an evicted session restores all of its memory at its
 *     next GPU work anyway, and a tenant that allocates usually goes on
 *     allocating; evicting piece by piece paid a round of questions, a
 *     synchronisation and fresh host memory for every allocation.
 *   - Host memory ahead: a holder whose quantum ends soon (or is over, the
 *     holder busy) while someone waits is asked to prepare its host copies
 *     in the background (MEMP_PREPARE), so its eviction copies at pinned
 *     speed (faulting in fresh host memory ran at a fifth of it), within
 *     RGPUD_SWAP_KEEP per session and HOST_PREPARE_PCT of the node's
 *     memory for all host copies; until a worker measured how fast host
 *     memory is prepared here, the first holder waited for prepares
 *     PROBE_BYTES to measure it (the default guess may be 40x off).
 *   - Cycles: two requests each waiting for memory the other holds (two
 *     restores, or a restore and a growing session): the lower ranked gives
 *     its memory back (MEM_ROOM_YIELD).  A session within its quantum
 *     outranks one past it, then the older request wins; a restore maps
 *     nothing before it has room for all of it, so a waiting restore holds
 *     nothing.
 * Questions travel to a worker on its control socket (struct
 * mem_parent_msg, under the record's send lock) and the answer comes back
 * through that worker's own gate thread (MEMQ_ANSWER), which hands it over
 * here.  A worker that is itself waiting for the parent is never asked.
 * Memory lines of the log end in [t=SECONDS] (CLOCK_MONOTONIC, as the
 * workers' lines): bench/oversubscribe/switches.py reads them.
 */
#include "mem.h"

#include "clock.h"
#include "log.h"
#include "metrics.h"
#include "session.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define STATE_TIMEOUT_MS 500
#define EVICT_TIMEOUT_MS (600 * 1000)
#define POLL_MS 20
/* A quantum is at least this many times a session's swap cost. */
#define COST_FACTOR 8
/* Bandwidths assumed before a worker measured any (bytes/s): below what an
 * H100 host does (pinned copies ~50 GB/s, fresh host memory ~10-20 GB/s),
 * so a first quantum errs long. */
#define DEF_OUT_BPS 20e9
#define DEF_PREP_BPS 8e9
#define DEF_IN_BPS 20e9
/* How often a holder is reminded to prepare its host copies. */
#define PREPARE_EVERY_NS 1000000000ull
/* Until a worker measured how fast host memory is prepared on this node
 * (it varied from 0.2 to 22 GB/s between hosts), the first holder waited
 * for prepares this much ahead to measure it. */
#define PROBE_BYTES (256ull << 20)
#define PROBE_EVERY_NS 5000000000ull
/* Host copies prepared ahead are optional: they may take the node's memory
 * only while all host copies together (sessions swapped out, copies kept
 * or prepared) stay below this part of it (percent). */
#define HOST_PREPARE_PCT 60

struct mem_worker {
	struct mem_worker *next;
	int fd;
	pthread_mutex_t send_lock;
	struct metrics_session *ms;
	uint64_t resident[RGPUD_MAX_GPUS], swapped[RGPUD_MAX_GPUS], charged[RGPUD_MAX_GPUS];
	uint64_t ready[RGPUD_MAX_GPUS];      /* resident with a host copy ready */
	uint64_t granted_ns[RGPUD_MAX_GPUS]; /* its current stay began (0: none) */
	uint64_t qkeep[RGPUD_MAX_GPUS];      /* the longest quantum of this stay */
	uint64_t prep_sent_ns[RGPUD_MAX_GPUS];
	/* memory freed for it by evictions, kept for it during its quantum
	 * (less what it has mapped since: resident above resv_base) */
	uint64_t resv_bytes[RGPUD_MAX_GPUS], resv_base[RGPUD_MAX_GPUS];
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
	char why[200];      /* what the pending request last logged */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond;
static int cond_ready;
static struct mem_worker *workers;
static uint64_t gen[RGPUD_MAX_GPUS]; /* memory given back on each GPU */
static uint64_t next_seq, next_ticket;
static enum mem_policy policy = MEM_POLICY_SWAP;
static unsigned wait_s = 60;
static unsigned quantum_ms = MEM_QUANTUM_DEFAULT_MS;
/* the latest measurements any worker reported (0: none yet) */
static double out_bps, prep_bps, in_bps;
static uint64_t probe_ns; /* when a holder was last asked to measure */
static int probes;        /* how many times (the first one is waited for) */

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

void mem_parent_config(enum mem_policy p, unsigned w, unsigned q_ms)
{
	pthread_mutex_lock(&lock);
	init_cond();
	policy = p;
	wait_s = w;
	quantum_ms = q_ms;
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

void mem_parent_charged(struct mem_worker *w, unsigned gpu, uint64_t bytes, int refund)
{
	if (!w || gpu >= RGPUD_MAX_GPUS)
		return;
	pthread_mutex_lock(&lock);
	/* (unsigned: a charge may be any 64-bit size the quota allows; a
	 * signed delta could not say a refund of 2^63, found by fuzz_dispatch) */
	if (!refund) {
		w->charged[gpu] += bytes;
	} else {
		w->charged[gpu] -= bytes;
		gen[gpu]++;
		pthread_cond_broadcast(&cond);
	}
	pthread_mutex_unlock(&lock);
}

/* ---- the quantum ---- */

static double rate(double measured, double dflt) { return measured > 0 ? measured : dflt; }

/* Seconds to swap t's memory on gpu out (preparing the host memory it has
 * no copy in yet) and back in (lock held). */
static double swap_cost_s(const struct mem_worker *t, unsigned gpu)
{
	double res = (double)t->resident[gpu];
	double ready = t->ready[gpu] < t->resident[gpu] ? (double)t->ready[gpu] : res;
	return res / rate(out_bps, DEF_OUT_BPS) + (res - ready) / rate(prep_bps, DEF_PREP_BPS) +
	       res / rate(in_bps, DEF_IN_BPS);
}

/* (--memory-quantum=0 drops only the least quantum: without the part
 * that follows the cost two sessions evicted each other 205 times in one
 * emulated alt2 run, each right after its restore) */
static uint64_t quantum_now(const struct mem_worker *t, unsigned gpu)
{
	double q = (double)quantum_ms / 1e3, c = COST_FACTOR * swap_cost_s(t, gpu);
	if (c > q)
		q = c;
	/* a request may wait --memory-wait for room: never protect a holder
	 * for most of that */
	if (q > wait_s / 2.0)
		q = wait_s / 2.0;
	return (uint64_t)(q * 1e9);
}

/* A stay's quantum only grows (with the session's memory, or a slower
 * measurement): host copies prepared ahead make its eviction cheaper, not
 * earlier (else preparing for an eviction would bring it on). */
static uint64_t quantum_ns(const struct mem_worker *t, unsigned gpu)
{
	uint64_t q = quantum_now(t, gpu);
	return q > t->qkeep[gpu] ? q : t->qkeep[gpu];
}

/* Keeps each stay's longest quantum on gpu so far (lock held; before and
 * after what the estimate rests on changes). */
static void keep_quanta(unsigned gpu)
{
	for (struct mem_worker *t = workers; t; t = t->next)
		if (t->granted_ns[gpu])
			t->qkeep[gpu] = quantum_ns(t, gpu);
}

/* A holder within its quantum that has been idle this long (and on the
 * GPU as long) may be evicted all the same: what swapping it out and back
 * costs, at least --memory-quantum.  Waiting that long before giving up on
 * an idle holder costs at most twice what evicting it at once would have
 * (ski rental), while the host phases of a tenant that alternates (shorter
 * than its swap cost) do not lose it the GPU; an interactive session that
 * sits idle does not hold a waiting one up for a whole quantum. */
static uint64_t idle_limit_ns(const struct mem_worker *t, unsigned gpu)
{
	double q = (double)quantum_ms / 1e3, c = swap_cost_s(t, gpu);
	if (c > q)
		q = c;
	if (q > wait_s / 2.0)
		q = wait_s / 2.0;
	return (uint64_t)(q * 1e9);
}

/* When t's quantum on gpu ends (0: not protected; lock held). */
static uint64_t protected_until(const struct mem_worker *t, unsigned gpu)
{
	return t->granted_ns[gpu] ? t->granted_ns[gpu] + quantum_ns(t, gpu) : 0;
}

static int is_protected(const struct mem_worker *t, unsigned gpu, uint64_t now)
{
	return now < protected_until(t, gpu);
}

/* t should prepare its host copies now: its eviction may come before the
 * preparation would finish (lock held). */
static int prepare_due(const struct mem_worker *t, unsigned gpu, uint64_t now)
{
	if (t->ready[gpu] >= t->resident[gpu] || now - t->prep_sent_ns[gpu] < PREPARE_EVERY_NS)
		return 0;
	double need = (double)(t->resident[gpu] - t->ready[gpu]) / rate(prep_bps, DEF_PREP_BPS);
	return (double)now + 2 * need * 1e9 >= (double)protected_until(t, gpu);
}

static double secs(uint64_t ns) { return (double)ns / 1e9; }

/* What is left of the memory evicted for t on gpu (lock held). */
static uint64_t reserved_left(const struct mem_worker *t, unsigned gpu, uint64_t now)
{
	if (!t->resv_bytes[gpu] || !is_protected(t, gpu, now))
		return 0;
	uint64_t grown = t->resident[gpu] > t->resv_base[gpu] ? t->resident[gpu] - t->resv_base[gpu] : 0;
	return t->resv_bytes[gpu] > grown ? t->resv_bytes[gpu] - grown : 0;
}

/* How much more host memory preparation ahead may take (lock held). */
static uint64_t host_room(void)
{
	static uint64_t budget;
	if (!budget) {
		long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
		budget = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz / 100 * HOST_PREPARE_PCT
					      : 1ull << 30;
	}
	uint64_t used = 0;
	for (const struct mem_worker *t = workers; t; t = t->next)
		for (unsigned g = 0; !t->dead && g < 8; g++)
			used += t->swapped[g] + t->ready[g];
	return used < budget ? budget - used : 0;
}

/* Logs what request w (wanting bytes on gpu) does, when it changed. */
static void note(struct mem_worker *w, unsigned gpu, uint64_t bytes, const char *why)
{
	if (!strcmp(w->why, why))
		return;
	snprintf(w->why, sizeof(w->why), "%s", why);
	log_info("memory: %llu bytes wanted on GPU %u: %s [t=%.3f]", (unsigned long long)bytes, gpu,
		 why, secs(rgpu_now_ns()));
}

/* Asks worker t (lock held, t->refs taken) and waits for its answer; 0 and
 * *a, or -1 (no answer in time, or it is gone).  timeout 0: sends only. */
static int ask(struct mem_worker *t, unsigned op, unsigned gpu, uint64_t bytes,
	       unsigned timeout_ms, struct mem_q_answer *a)
{
	struct mem_parent_msg m = { .rc = MEM_PARENT_MAGIC, .op = op, .seq = ++next_seq, .gpu = gpu,
				    .bytes = bytes };
	if (timeout_ms) {
		t->ask_seq = m.seq;
		t->answered = 0;
	}
	pthread_mutex_unlock(&lock);
	pthread_mutex_lock(&t->send_lock);
	ssize_t n = send(t->fd, &m, sizeof(m), MSG_NOSIGNAL | MSG_DONTWAIT);
	pthread_mutex_unlock(&t->send_lock);
	pthread_mutex_lock(&lock);
	if (n != (ssize_t)sizeof(m))
		return -1;
	if (!timeout_ms)
		return 0;
	uint64_t deadline = rgpu_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	while (!t->dead && !(t->answered && t->ans.seq == m.seq) && rgpu_now_ns() < deadline)
		wait_until(deadline);
	if (!t->answered || t->ans.seq != m.seq)
		return -1;
	*a = t->ans;
	return 0;
}

struct cand {
	struct mem_worker *w;
	uint64_t idle_ms;
	int prot; /* within its quantum: evicted only if idle long enough */
};

static int by_idle(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	return x->idle_ms < y->idle_ms ? 1 : x->idle_ms > y->idle_ms ? -1 : 0;
}

#define MAXC 256

/* One round of swap (lock held): evicts whole idle sessions past their
 * quantum holding memory on gpu until bytes were freed.  Returns bytes
 * freed; *others: workers that hold memory there at all. */
static uint64_t swap_round(struct mem_worker *w, unsigned gpu, uint64_t bytes, int *others)
{
	struct cand c[MAXC];
	struct mem_worker *prep[MAXC];
	uint64_t plim[MAXC];
	size_t n = 0, np = 0;
	char why[200] = "";
	size_t wl = 0;
	uint64_t now = rgpu_now_ns();
	uint64_t hroom = host_room(); /* for host copies prepared ahead */
	*others = 0;
#define WHY(...)                                                                             \
	do {                                                                                 \
		if (wl < sizeof(why))                                                        \
			wl += (size_t)snprintf(why + wl, sizeof(why) - wl, __VA_ARGS__);     \
	} while (0)
	for (struct mem_worker *t = workers; t; t = t->next) {
		if (t == w || t->dead)
			continue;
		if (!t->resident[gpu]) {
			/* a request of its own under way (a restore between its
			 * room and its report): it will hold memory */
			if (t->ticket && t->ticket_gpu == gpu) {
				(*others)++;
				WHY("%swaiting: a session is bringing memory there", wl ? "; " : "");
			}
			continue;
		}
		(*others)++;
		if (t->in_room) {
			WHY("%swaiting: a session with %llu bytes there waits for room itself",
			    wl ? "; " : "", (unsigned long long)t->resident[gpu]);
			continue;
		}
		if (is_protected(t, gpu, now)) {
			uint64_t lim = 0;
			int due = prepare_due(t, gpu, now);
			if (!due && prep_bps <= 0 && t->ready[gpu] < t->resident[gpu] &&
			    now - probe_ns >= PROBE_EVERY_NS && hroom >= PROBE_BYTES) {
				due = 1; /* its quantum rests on a guess: measure */
				lim = PROBE_BYTES;
				probe_ns = now;
				probes++;
				hroom -= PROBE_BYTES;
			}
			if (due && np < MAXC) {
				t->refs++;
				plim[np] = lim;
				prep[np++] = t;
			}
			if (now - t->granted_ns[gpu] >= idle_limit_ns(t, gpu) && n < MAXC) {
				/* long enough on the GPU to be evicted if it has
				 * been idle as long: ask */
				t->refs++;
				c[n++] = (struct cand){ t, 0, 1 };
				continue;
			}
			WHY("%swaiting: a session with %llu bytes there is within its quantum "
			    "(%.1f s)", wl ? "; " : "", (unsigned long long)t->resident[gpu],
			    secs(quantum_ns(t, gpu)));
			continue;
		}
		if (n < MAXC) {
			if (prep_bps <= 0 && t->ready[gpu] < t->resident[gpu] &&
			    now - probe_ns >= PROBE_EVERY_NS && hroom >= PROBE_BYTES && np < MAXC) {
				/* past its quantum, but the quantum rested on a
				 * guess: measure before evicting (below) */
				probe_ns = now;
				probes++;
				hroom -= PROBE_BYTES;
				t->refs++;
				plim[np] = PROBE_BYTES;
				prep[np++] = t;
			}
			t->refs++;
			c[n++] = (struct cand){ t, 0, 0 };
		}
	}
	/* who is idle, and since when */
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		struct mem_q_answer a;
		int got = ask(c[i].w, MEMP_STATE, gpu, 0, STATE_TIMEOUT_MS, &a);
		if (got == 0 && prep_bps <= 0 && c[i].w->ready[gpu] < c[i].w->resident[gpu] &&
		    probes == 1 && rgpu_now_ns() - probe_ns < PROBE_EVERY_NS) {
			/* (the first probe only: one that cannot measure, its
			 * cap reached, holds nobody up twice) */
			WHY("%swaiting: measuring how fast host memory is prepared here",
			    wl ? "; " : "");
			c[i].w->refs--;
			continue;
		}
		if (got == 0 && is_protected(c[i].w, gpu, rgpu_now_ns()) &&
		    !(a.idle && a.bytes && a.idle_ms * 1000000ull >= idle_limit_ns(c[i].w, gpu) &&
		      rgpu_now_ns() - c[i].w->granted_ns[gpu] >= idle_limit_ns(c[i].w, gpu))) {
			/* within its quantum (its answer may have come after a
			 * report of what it measured meanwhile: a longer one),
			 * and not idle for long */
			WHY("%swaiting: a session with %llu bytes there is within its quantum "
			    "(%.1f s)", wl ? "; " : "", (unsigned long long)c[i].w->resident[gpu],
			    secs(quantum_ns(c[i].w, gpu)));
			c[i].w->refs--;
			continue;
		}
		if (got == 0 && a.idle && a.bytes) {
			c[i].idle_ms = a.idle_ms;
			c[k++] = c[i];
			continue;
		}
		WHY("%swaiting: a session with %llu bytes there %s", wl ? "; " : "",
		    (unsigned long long)c[i].w->resident[gpu], got ? "did not answer" : "is busy");
		/* past its quantum: evicted as soon as it is idle */
		if (!c[i].prot && c[i].w->ready[gpu] < c[i].w->resident[gpu] &&
		    now - c[i].w->prep_sent_ns[gpu] >= PREPARE_EVERY_NS && np < MAXC) {
			plim[np] = 0;
			prep[np++] = c[i].w; /* its reference goes with it */
		} else
			c[i].w->refs--;
	}
	/* host copies for the evictions to come (no answer awaited; an
	 * eviction that comes meanwhile takes what is ready), within what the
	 * node's memory allows */
	for (size_t i = 0; i < np; i++) {
		struct mem_q_answer none;
		struct mem_worker *t = prep[i];
		uint64_t want = t->resident[gpu] > t->ready[gpu] ? t->resident[gpu] - t->ready[gpu] : 0;
		if (plim[i] && plim[i] < want)
			want = plim[i]; /* a probe: its room taken above */
		else if (want > hroom)
			want = hroom;
		if (!plim[i])
			hroom -= want;
		if (want) {
			t->prep_sent_ns[gpu] = now;
			ask(t, MEMP_PREPARE, gpu, want, 0, &none);
		}
		t->refs--;
	}
	qsort(c, k, sizeof(c[0]), by_idle);
	uint64_t freed = 0;
	for (size_t i = 0; i < k; i++) {
		struct mem_q_answer a;
		if (freed < bytes && !c[i].w->dead) {
			char e[200];
			uint64_t since = c[i].w->granted_ns[gpu];
			snprintf(e, sizeof(e), "evicting a session with %llu bytes there, %llu ready "
				 "(idle %llu ms, on the GPU %.1f s, quantum %.1f s%s)",
				 (unsigned long long)c[i].w->resident[gpu],
				 (unsigned long long)(c[i].w->ready[gpu] < c[i].w->resident[gpu]
						      ? c[i].w->ready[gpu] : c[i].w->resident[gpu]),
				 (unsigned long long)c[i].idle_ms, since ? secs(rgpu_now_ns() - since) : 0.0,
				 secs(quantum_ns(c[i].w, gpu)),
				 c[i].prot ? ": idle longer than swapping it costs" : "");
			w->why[0] = 0; /* each eviction is logged */
			note(w, gpu, bytes, e);
			if (ask(c[i].w, MEMP_EVICT, gpu, 0, EVICT_TIMEOUT_MS, &a) == 0 && a.idle)
				freed += a.bytes;
		}
		c[i].w->refs--;
	}
	pthread_cond_broadcast(&cond); /* refs dropped: a closing record may go */
	if (!freed && *others && wl)
		note(w, gpu, bytes, why);
#undef WHY
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

/* Request a goes before request b for memory on gpu: within its quantum
 * before past it, then the older. */
static int outranks(const struct mem_worker *a, const struct mem_worker *b, unsigned gpu,
		    uint64_t now)
{
	int pa = is_protected(a, gpu, now), pb = is_protected(b, gpu, now);
	if (pa != pb)
		return pa;
	return a->ticket < b->ticket;
}

/* A request that outranks w's waits for room on gpu too (lock held): while
 * each waits for the other's memory, w gives way. */
static const struct mem_worker *gives_way_to(const struct mem_worker *w, unsigned gpu)
{
	uint64_t now = rgpu_now_ns();
	for (const struct mem_worker *t = workers; t; t = t->next)
		if (t != w && !t->dead && t->in_room && t->ticket && t->ticket_gpu == gpu &&
		    outranks(t, w, gpu, now))
			return t;
	return NULL;
}

static int others_hold(const struct mem_worker *w, unsigned gpu)
{
	for (const struct mem_worker *t = workers; t; t = t->next)
		if (t != w && !t->dead && (t->charged[gpu] || t->resident[gpu]))
			return 1;
	return 0;
}

/* The first request of an allocation or a restore: its place in line and
 * its bound (lock held). */
static void take_ticket(struct mem_worker *w, unsigned gpu, uint64_t now)
{
	if (w->ticket && w->ticket_gpu == gpu)
		return;
	w->ticket = ++next_ticket;
	w->ticket_gpu = gpu;
	w->seen_gen = gen[gpu];
	w->deadline_ns = now + (uint64_t)wait_s * 1000000000ull;
	w->why[0] = 0;
}

/* 0: try again; CUDA_ERROR_OUT_OF_MEMORY: give up.  Lock held. */
static int room(struct mem_worker *w, unsigned gpu, uint64_t bytes)
{
	if (policy == MEM_POLICY_FAIL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	uint64_t now = rgpu_now_ns();
	take_ticket(w, gpu, now);
	int rc = CUDA_ERROR_OUT_OF_MEMORY, rounds = 0;
	w->in_room = 1;
	for (;;) {
		if (policy == MEM_POLICY_SWAP) {
			int others;
			uint64_t freed;
			if (gen[gpu] != w->seen_gen) {
				/* someone freed memory meanwhile: try that first */
				w->seen_gen = gen[gpu];
				rc = 0;
				break;
			}
			if ((freed = swap_round(w, gpu, bytes, &others)) != 0) {
				/* room made for it at others' expense: its quantum,
				 * and the room is kept for it meanwhile */
				w->seen_gen = gen[gpu];
				w->granted_ns[gpu] = rgpu_now_ns();
				w->qkeep[gpu] = 0;
				w->resv_bytes[gpu] = freed;
				w->resv_base[gpu] = w->resident[gpu];
				rc = 0;
				break;
			}
			if (!others) {
				note(w, gpu, bytes, "no other session holds memory there");
				break; /* nothing to evict: its own working set does not fit */
			}
			const struct mem_worker *t;
			if (rounds++ && w->resident[gpu] && (t = gives_way_to(w, gpu))) {
				char e[160];
				snprintf(e, sizeof(e), "gives way: its %llu bytes there go to a request "
					 "that %s", (unsigned long long)w->resident[gpu],
					 is_protected(t, gpu, rgpu_now_ns()) ? "is within its quantum"
									: "is older");
				note(w, gpu, bytes, e);
				rc = MEM_ROOM_YIELD;
				break;
			}
		} else {
			if (!others_hold(w, gpu))
				break; /* nobody else can give memory back */
			if (gen[gpu] != w->seen_gen && first_in_line(w, gpu)) {
				w->seen_gen = gen[gpu];
				rc = 0;
				break;
			}
		}
		now = rgpu_now_ns();
		if (now >= w->deadline_ns) {
			note(w, gpu, bytes, "no room within --memory-wait: refused");
			break;
		}
		uint64_t until = now + POLL_MS * 1000000ull;
		wait_until(until < w->deadline_ns ? until : w->deadline_ns);
	}
	w->in_room = 0;
	if (rc && rc != MEM_ROOM_YIELD)
		w->ticket = 0;
	pthread_cond_broadcast(&cond);
	return rc;
}

/* A new measurement (workers send each once): a running average, so one
 * odd eviction does not swing every quantum. */
static void take_rate(double *r, uint64_t v)
{
	if (v)
		*r = *r > 0 ? (*r + (double)v) / 2 : (double)v;
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
		uint64_t now = rgpu_now_ns();
		for (unsigned g = 0; g < 8; g++)
			keep_quanta(g);
		for (unsigned g = 0; g < 8; g++) {
			if (r.resident[g] < w->resident[g]) {
				gen[g]++;
				pthread_cond_broadcast(&cond);
			}
			/* on the GPU again (a restore, or its first memory there):
			 * its quantum starts */
			if (r.resident[g] && !w->resident[g]) {
				w->granted_ns[g] = now;
				w->qkeep[g] = 0;
			}
			if (!r.resident[g])
				w->granted_ns[g] = 0;
			w->resident[g] = r.resident[g];
			w->swapped[g] = r.swapped[g];
			w->ready[g] = r.ready[g];
		}
		take_rate(&out_bps, r.out_bps);
		take_rate(&prep_bps, r.prep_bps);
		take_rate(&in_bps, r.in_bps);
		for (unsigned g = 0; g < 8; g++)
			keep_quanta(g);
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
	case MEMQ_ADMIT: {
		/* a restore: the memory evicted for a session in its quantum is
		 * that session's, not free (else the evicted session, back at
		 * once, takes the room made for the other) */
		struct mem_q_admit q;
		if (len != sizeof(q)) {
			rc = -1;
			break;
		}
		memcpy(&q, payload, sizeof(q));
		uint64_t now = rgpu_now_ns(), resv = 0;
		for (struct mem_worker *t = workers; t; t = t->next)
			if (t != w && !t->dead)
				resv += reserved_left(t, gpu, now);
		uint64_t avail = q.free > resv ? q.free - resv : 0;
		take_ticket(w, gpu, now);
		if (avail >= q.bytes) {
			rc = 0; /* the ticket marks it as coming back until ROOM_DONE */
			break;
		}
		rc = room(w, gpu, q.bytes - avail);
		if (rc == 0)
			rc = MEM_ROOM_RETRY;
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
