/*
 * The scheduler's worker side (sched.h): the launch gate, and the thread
 * that charges completed kernels to this worker's slots.
 */
#include "clock.h"
#include "log.h"
#include "rgpud.h"
#include "seg.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define D (&rgpud_server.drv)

struct rec {
	CUcontext ctx;
	CUevent start, end;
	unsigned gpu;
	struct rec *next;
};

static struct sched_seg *seg;
static pid_t me;
static int slot_of[RGPUD_MAX_GPUS]; /* index + 1; 0: not looked up */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static struct rec *head, *tail;
static int thread_started, stopping;
static pthread_t charger_thread;
static CUcontext charger_cur; /* current on the charger thread (under mu) */

/* Timing events are kept per context for reuse (creating and destroying
 * two per launch would cost more than the launch).  Under mu. */
#define NPOOL 16
#define POOL_MAX 256
static struct pool {
	CUcontext ctx;
	CUevent ev[POOL_MAX];
	int n;
} pools[NPOOL];

static struct pool *pool_of(CUcontext ctx, int create)
{
	struct pool *freep = NULL;
	for (int i = 0; i < NPOOL; i++) {
		if (pools[i].ctx == ctx)
			return &pools[i];
		if (!pools[i].ctx && !freep)
			freep = &pools[i];
	}
	if (create && freep) {
		freep->ctx = ctx;
		freep->n = 0;
	}
	return create ? freep : NULL;
}

/* An event of ctx (current on the calling thread), or NULL. */
static CUevent ev_get(CUcontext ctx)
{
	pthread_mutex_lock(&mu);
	struct pool *p = pool_of(ctx, 0);
	CUevent e = p && p->n ? p->ev[--p->n] : NULL;
	pthread_mutex_unlock(&mu);
	if (!e && D->cuEventCreate(&e, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
		return NULL;
	return e;
}

/* Gives an event of ctx back.  mu held; ctx current on this thread. */
static void ev_put_locked(CUcontext ctx, CUevent e)
{
	struct pool *p = pool_of(ctx, 1);
	if (p && p->n < POOL_MAX)
		p->ev[p->n++] = e;
	else
		D->cuEventDestroy_v2(e);
}

/* Whether another session holds a slot on gpu: alone, nothing is gated
 * (work-conserving) nor timed (no cost for a GPU of one tenant). */
static int shared(unsigned gpu)
{
	return atomic_load(&seg->tenants[gpu]) > 1;
}

/* At exit the charger stops first (no thread left running while the
 * process tears down; sanitizers' leak checks stop every thread). */
static void worker_fini(void)
{
	pthread_mutex_lock(&mu);
	stopping = 1;
	int started = thread_started;
	thread_started = 0;
	pthread_cond_signal(&cv);
	pthread_mutex_unlock(&mu);
	if (started)
		pthread_join(charger_thread, NULL);
	pthread_mutex_lock(&mu);
	while (head) {
		struct rec *r = head;
		head = r->next;
		free(r);
	}
	tail = NULL;
	pthread_mutex_unlock(&mu);
}

int sched_worker_init(const char *arg)
{
	char *end;
	long fd = strtol(arg, &end, 10);
	if (*arg == '\0' || *end || fd < 0)
		return -1;
	void *p = mmap(NULL, sizeof(struct sched_seg), PROT_READ | PROT_WRITE, MAP_SHARED, (int)fd, 0);
	close((int)fd);
	if (p == MAP_FAILED)
		return -1;
	seg = p;
	if (seg->magic != SCHED_SEG_MAGIC) {
		munmap(p, sizeof(struct sched_seg));
		seg = NULL;
		return -1;
	}
	me = getpid();
	atexit(worker_fini);
	return 0;
}

/* This worker's slot on gpu (the parent made it at admission), or NULL. */
static struct sched_slot *my_slot(unsigned gpu)
{
	if (!seg || gpu >= RGPUD_MAX_GPUS)
		return NULL;
	int i = slot_of[gpu];
	if (i > 0 && atomic_load(&seg->slot[i - 1].pid) == me)
		return &seg->slot[i - 1];
	for (unsigned k = 0; k < SCHED_SLOTS; k++) {
		struct sched_slot *s = &seg->slot[k];
		if (atomic_load(&s->pid) == me && atomic_load(&s->gpu) == gpu) {
			slot_of[gpu] = (int)k + 1;
			return s;
		}
	}
	return NULL;
}

void sched_worker_uses(unsigned gpu)
{
	struct sched_slot *s = my_slot(gpu);
	if (s && !atomic_load(&s->used) && !atomic_exchange(&s->used, 1)) {
		atomic_fetch_add(&seg->tenants[gpu], 1);
		sched_seg_wake(seg, gpu);
	}
}

static int enabled(void)
{
	return seg && (seg->policy != SCHED_POL_FIFO || seg->mps);
}

/* The views of the other tenants of gpu. */
static size_t others(unsigned gpu, struct sched_slot *mine, uint64_t now, struct sched_view *v,
		     uint64_t *vmin, uint32_t *busy_pct)
{
	size_t n = 0;
	*vmin = UINT64_MAX;
	if (busy_pct)
		*busy_pct = 0;
	for (unsigned k = 0; k < SCHED_SLOTS; k++) {
		struct sched_slot *s = &seg->slot[k];
		if (s == mine || !atomic_load(&s->pid) || atomic_load(&s->gpu) != gpu)
			continue;
		sched_slot_view(s, now, &v[n]);
		if (v[n].active && v[n].vtime < *vmin)
			*vmin = v[n].vtime;
		if (busy_pct && v[n].active && v[n].inflight)
			*busy_pct += atomic_load(&s->pct);
		n++;
	}
	return n;
}

static void *charger(void *arg);

int sched_wants_demand(unsigned gpu)
{
	return enabled() && seg->mps && gpu < RGPUD_MAX_GPUS && shared(gpu);
}

void sched_before_launch(unsigned gpu, void *cuctx, void *custream, uint32_t demand,
			 struct sched_token *t)
{
	t->start = NULL;
	t->gpu = -1;
	if (!enabled() || gpu >= RGPUD_MAX_GPUS)
		return;
	sched_worker_uses(gpu);
	if (!shared(gpu))
		return;
	struct sched_slot *s = my_slot(gpu);
	if (!s)
		return;
	/* a stream being captured into a graph runs nothing now: no gate, no
	 * events (they would become nodes of the graph) */
	if (D->cuStreamIsCapturing) { /* (optional: the emulated device has no graphs) */
		CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_NONE;
		if (D->cuStreamIsCapturing((CUstream)custream, &cap) != CUDA_SUCCESS ||
		    cap != CU_STREAM_CAPTURE_STATUS_NONE)
			return;
	}
	static struct sched_view v[SCHED_SLOTS];
	uint64_t now = rgpu_now_ns();
	atomic_store(&s->beat, now);
	/* within its active thread percentage, what it can take of the GPU */
	uint32_t pct = atomic_load(&s->pct);
	if (!demand || demand > 100)
		demand = 100;
	atomic_store(&s->demand, pct && pct < demand ? pct : demand);
	if (atomic_load(&s->inflight) == 0 && !atomic_load(&s->waiting)) {
		/* becoming active: bounded credit for the time it idled */
		uint64_t vmin;
		others(gpu, s, now, v, &vmin, NULL);
		uint64_t idle = now - atomic_load(&s->idle_since);
		atomic_store(&s->vtime, sched_activate_vtime(atomic_load(&s->vtime), vmin, seg->quantum,
							     idle));
		if (idle >= SCHED_EPISODE_IDLE_NS)
			atomic_store(&s->episode, 0);
	}
	for (int waited = 0;; waited = 1) {
		uint32_t gen = atomic_load(&seg->gen[gpu]);
		now = rgpu_now_ns();
		atomic_store(&s->beat, now);
		uint64_t vmin;
		size_t n = others(gpu, s, now, v, &vmin, NULL);
		struct sched_view mine;
		sched_slot_view(s, now, &mine);
		if (sched_may_submit(seg->policy, seg->quantum, seg->mps, &mine, v, n))
			break;
		if (!waited) {
			atomic_store(&s->waiting, 1);
			sched_seg_wake(seg, gpu); /* others see one more active tenant */
		}
		/* a timeout: a slot that went stale must be seen to */
		sched_seg_wait(seg, gpu, gen, 1000000);
	}
	atomic_store(&s->waiting, 0);
	CUevent ev = ev_get((CUcontext)cuctx);
	if (!ev)
		return;
	if (D->cuEventRecord(ev, (CUstream)custream) != CUDA_SUCCESS) {
		D->cuEventDestroy_v2(ev);
		return;
	}
	if (atomic_fetch_add(&s->inflight, 1) == 0)
		atomic_store(&s->progress, rgpu_now_ns());
	t->start = ev;
	t->gpu = (int)gpu;
}

void sched_after_launch(struct sched_token *t, void *cuctx, void *custream, int rc)
{
	if (!t->start)
		return;
	struct sched_slot *s = my_slot((unsigned)t->gpu);
	CUevent end = NULL;
	struct rec *r = NULL;
	if (rc != CUDA_SUCCESS || !(end = ev_get((CUcontext)cuctx)) ||
	    D->cuEventRecord(end, (CUstream)custream) != CUDA_SUCCESS || !(r = calloc(1, sizeof(*r)))) {
		if (end)
			D->cuEventDestroy_v2(end);
		D->cuEventDestroy_v2((CUevent)t->start);
		if (s && atomic_load(&s->inflight))
			atomic_fetch_sub(&s->inflight, 1);
		return;
	}
	r->ctx = (CUcontext)cuctx;
	r->start = (CUevent)t->start;
	r->end = end;
	r->gpu = (unsigned)t->gpu;
	pthread_mutex_lock(&mu);
	if (!thread_started && !stopping && pthread_create(&charger_thread, NULL, charger, NULL) == 0)
		thread_started = 1;
	if (tail)
		tail->next = r;
	else
		head = r;
	tail = r;
	pthread_cond_signal(&cv);
	pthread_mutex_unlock(&mu);
}

/* Charges one completed (or failed) record.  mu held, r->ctx current. */
static void charge(struct rec *r, int ok)
{
	struct sched_slot *s = my_slot(r->gpu);
	if (s) {
		float ms = 0;
		uint64_t dur = 0;
		if (ok && D->cuEventElapsedTime(&ms, r->start, r->end) == CUDA_SUCCESS && ms > 0)
			dur = (uint64_t)((double)ms * 1e6);
		static struct sched_view v[SCHED_SLOTS];
		uint64_t now = rgpu_now_ns(), vmin;
		uint32_t busy;
		others(r->gpu, s, now, v, &vmin, &busy);
		uint32_t pct = atomic_load(&s->pct);
		uint64_t c = sched_charge(dur, pct, busy + pct, seg->mps);
		atomic_fetch_add(&s->busy, dur);
		atomic_fetch_add(&s->attained, c);
		atomic_fetch_add(&s->vtime, sched_vtime_delta(c, atomic_load(&s->weight)));
		atomic_fetch_add(&s->episode, c);
		uint64_t m = atomic_load(&s->mean);
		atomic_store(&s->mean, m ? (m * 7 + dur) / 8 : dur);
		atomic_store(&s->beat, now);
		atomic_store(&s->progress, now);
		if (atomic_load(&s->inflight) && atomic_fetch_sub(&s->inflight, 1) == 1)
			atomic_store(&s->idle_since, now);
		sched_seg_wake(seg, r->gpu);
	}
	if (ok) {
		ev_put_locked(r->ctx, r->start);
		ev_put_locked(r->ctx, r->end);
	} else {
		D->cuEventDestroy_v2(r->start);
		D->cuEventDestroy_v2(r->end);
	}
	free(r);
}

/* Polls the records in order of submission (events complete in stream
 * order; across streams a later one may finish first: each is checked). */
static void *charger(void *arg)
{
	(void)arg;
	rgpud_capture_relaxed(D); /* (its event syncs are rgpud's, not the client's) */
	for (;;) {
		pthread_mutex_lock(&mu);
		while (!head && !stopping) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += 1;
			pthread_cond_timedwait(&cv, &mu, &ts);
		}
		if (stopping) {
			pthread_mutex_unlock(&mu);
			break;
		}
		/* take the finished ones out, under the lock (forget_ctx may
		 * remove records meanwhile) */
		struct rec *done = NULL, **pp = &head, *prev = NULL;
		while (*pp) {
			struct rec *r = *pp;
			if (r->ctx != charger_cur) {
				D->cuCtxSetCurrent(r->ctx);
				charger_cur = r->ctx;
			}
			CUresult q = D->cuEventQuery(r->end);
			if (q == CUDA_ERROR_NOT_READY) {
				prev = r;
				pp = &r->next;
				continue;
			}
			*pp = r->next;
			if (tail == r)
				tail = prev;
			r->next = done;
			done = r;
			if (q != CUDA_SUCCESS)
				r->gpu |= 0x80000000u; /* failed: charge nothing */
		}
		/* charge while holding mu: the context stays alive (forget_ctx
		 * takes mu before it is destroyed) */
		while (done) {
			struct rec *r = done;
			done = r->next;
			int ok = !(r->gpu & 0x80000000u);
			r->gpu &= 0x7fffffffu;
			if (r->ctx != charger_cur) {
				D->cuCtxSetCurrent(r->ctx);
				charger_cur = r->ctx;
			}
			charge(r, ok);
		}
		int pending = head != NULL;
		pthread_mutex_unlock(&mu);
		if (pending) {
			struct timespec ts = { 0, 50000 }; /* 50 us */
			nanosleep(&ts, NULL);
		}
	}
	return NULL;
}

void sched_forget_ctx(void *cuctx)
{
	if (!seg)
		return;
	/* no driver call here (this thread's current context must stay what
	 * the session thinks it is): the records are dropped uncharged, and
	 * their events and the pool's die with the context */
	pthread_mutex_lock(&mu);
	charger_cur = NULL; /* (its address may come back for a new one) */
	struct rec **pp = &head, *prev = NULL;
	while (*pp) {
		struct rec *r = *pp;
		if (r->ctx != (CUcontext)cuctx) {
			prev = r;
			pp = &r->next;
			continue;
		}
		*pp = r->next;
		if (tail == r)
			tail = prev;
		struct sched_slot *sl = my_slot(r->gpu);
		if (sl && atomic_load(&sl->inflight) && atomic_fetch_sub(&sl->inflight, 1) == 1)
			atomic_store(&sl->idle_since, rgpu_now_ns());
		if (sl)
			sched_seg_wake(seg, r->gpu);
		free(r);
	}
	struct pool *p = pool_of((CUcontext)cuctx, 0);
	if (p) {
		p->n = 0;
		p->ctx = NULL;
	}
	pthread_mutex_unlock(&mu);
}
