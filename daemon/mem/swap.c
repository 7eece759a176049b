/*
 * Eviction and restore of a session's memory (see mem.h): all of it on a
 * device (the parent evicts whole sessions), or as much as asked for, in
 * address order.
 *
 * The host copy of a chunk ("shadow") is anonymous memory on transparent
 * huge pages, faulted in by several threads and registered (pinned) with
 * the driver, so the GPU copies at pinned bandwidth.  Fresh host
 * memory is slow to fault in (measured on the H100 host: 2 GB/s on 4 KiB
 * pages with one thread, 22 GB/s on huge pages with 8 threads, then 48
 * GB/s to pin; an eviction into fresh memory ran at 10 GB/s, one into
 * memory ready beforehand at 52 GB/s, 95% of pinned), so
 *  - a session keeps its shadows after a restore, up to RGPUD_SWAP_KEEP
 *    bytes (default a quarter of the node's memory), and the next eviction
 *    copies at the GPU's pinned copy speed;
 *  - when the parent expects to evict a session soon (someone waits for
 *    its memory and its quantum is nearly over, or over while it is
 *    busy: arbiter.c), it asks for its shadows ahead (MEMP_PREPARE): a
 *    thread prepares them in the background, within the same cap, and
 *    the eviction takes what is ready (mem_prepare_start);
 *  - what is still missing is prepared during the eviction, copies queued
 *    asynchronously block after block, so the host work of preparing the
 *    next shadow overlaps the GPU's copy of the previous one.
 * A restore asks for room for all it brings back before it maps anything
 * and maps all of it or nothing: a restore waiting for room holds no
 * memory another waiting session needs.
 */
#include "mem_int.h"

#include "clock.h"
#include "log.h"
#include "size.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define TOUCH_THREADS 8

static uint64_t keep_cap(void)
{
	static uint64_t cap = UINT64_MAX;
	if (cap == UINT64_MAX) {
		const char *e = getenv("RGPUD_SWAP_KEEP");
		char err[200];
		long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
		uint64_t v = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz / 4 : 1ull << 30;
		if (e && *e && rgpu_parse_size(e, &v, err, sizeof(err)) < 0) {
			log_warn("RGPUD_SWAP_KEEP=%s: %s; using a quarter of memory", e, err);
			v = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz / 4 : 1ull << 30;
		}
		cap = v;
	}
	return cap;
}

struct touch {
	char *p;
	size_t len;
};

static void *touch_main(void *arg)
{
	struct touch *t = arg;
	long ps = sysconf(_SC_PAGESIZE);
	for (size_t o = 0; o < t->len; o += (size_t)(ps > 0 ? ps : 4096))
		((volatile char *)t->p)[o] = 0;
	return NULL;
}

/* Faults [p, p+len) in with several threads (the kernel zeroes pages one
 * thread at a time otherwise). */
static void touch_parallel(char *p, size_t len)
{
	size_t n = len / (64u << 20);
	if (n > TOUCH_THREADS)
		n = TOUCH_THREADS;
	pthread_t tid[TOUCH_THREADS];
	struct touch t[TOUCH_THREADS];
	size_t started = 0, per = n ? (len / n + 4095) & ~(size_t)4095 : len;
	for (size_t i = 0; n > 1 && i < n; i++) {
		size_t off = i * per;
		if (off >= len)
			break;
		t[i] = (struct touch){ p + off, len - off < per ? len - off : per };
		if (pthread_create(&tid[i], NULL, touch_main, &t[i]) != 0)
			break;
		started++;
	}
	if (!started) {
		struct touch one = { p, len };
		touch_main(&one);
		return;
	}
	/* what no thread took */
	if (started * per < len) {
		struct touch rest = { p + started * per, len - started * per };
		touch_main(&rest);
	}
	for (size_t i = 0; i < started; i++)
		pthread_join(tid[i], NULL);
}

/* Fresh host memory of len bytes, faulted in and pinned (where the driver
 * lets it): *p, *pinned.  -1: no memory. */
static int host_prepare(size_t len, void **p, int *pinned)
{
	void *q = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (q == MAP_FAILED)
		return -1;
#ifdef MADV_HUGEPAGE
	madvise(q, len, MADV_HUGEPAGE);
#endif
	touch_parallel(q, len);
	/* one registration per chunk: a copy must lie within one to go at
	 * pinned speed; unpinned, copies still work (slower) */
	*pinned = D->cuMemHostRegister_v2(q, len, CU_MEMHOSTREGISTER_PORTABLE) == CUDA_SUCCESS;
	*p = q;
	return 0;
}

static void host_release(void *p, size_t len, int pinned)
{
	if (pinned)
		D->cuMemHostUnregister(p);
	munmap(p, len);
}

/* ---- host copies given back in the background ---- */

struct release {
	CUcontext ctx; /* current in the thread (unregistering needs one) */
	size_t n, cap;
	struct { void *p; size_t len; int pinned; } *v;
};

/* Moves b's shadow to r (made on first use); where that fails, it is
 * given back here and now. */
static struct release *release_add(struct release *r, struct mem_state *m, struct mem_block *b,
				   struct session *s)
{
	if (!r && (r = calloc(1, sizeof(*r)))) {
		struct hentry *e = ht_get(&s->ht, b->ctx, HK_CTX);
		r->ctx = e ? e->obj : NULL;
	}
	if (r && r->n == r->cap) {
		size_t cap = r->cap ? 2 * r->cap : 16;
		void *v = realloc(r->v, cap * sizeof(*r->v));
		if (v) {
			r->v = v;
			r->cap = cap;
		}
	}
	if (!r || r->n == r->cap) {
		mem_shadow_drop(m, b);
		return r;
	}
	r->v[r->n].p = b->shadow;
	r->v[r->n].len = b->len;
	r->v[r->n].pinned = b->shadow_pinned;
	r->n++;
	b->shadow = NULL;
	b->shadow_pinned = 0;
	return r;
}

static void *release_main(void *arg)
{
	struct release *r = arg;
	rgpud_capture_relaxed(D); /* (rgpud's own calls: never a capture's unsafe call) */
	if (r->ctx)
		(void)D->cuCtxSetCurrent(r->ctx);
	for (size_t i = 0; i < r->n; i++)
		host_release(r->v[i].p, r->v[i].len, r->v[i].pinned);
	free(r->v);
	free(r);
	return NULL;
}

static void release_start(struct release *r)
{
	if (!r)
		return;
	pthread_attr_t a;
	pthread_t t;
	int ok = pthread_attr_init(&a) == 0;
	if (ok && pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED) == 0 &&
	    pthread_create(&t, &a, release_main, r) == 0) {
		pthread_attr_destroy(&a);
		return;
	}
	if (ok)
		pthread_attr_destroy(&a);
	release_main(r); /* no thread: here, then */
}

static int shadow_get(struct mem_state *m, struct mem_block *b)
{
	(void)m;
	if (b->shadow)
		return 0;
	return host_prepare(b->len, &b->shadow, &b->shadow_pinned);
}

void mem_shadow_drop(struct mem_state *m, struct mem_block *b)
{
	(void)m;
	if (!b->shadow)
		return;
	host_release(b->shadow, b->len, b->shadow_pinned);
	b->shadow = NULL;
	b->shadow_pinned = 0;
}

uint64_t mem_ready_bytes(struct mem_state *m, int dev)
{
	uint64_t n = 0;
	for (size_t i = 0; m && i < m->nblocks; i++) {
		const struct mem_block *b = m->blocks[i];
		if (b->resident && !b->plain && b->shadow && (dev < 0 || b->dev == (unsigned)dev))
			n += b->len;
	}
	return n;
}

static uint64_t shadow_bytes(struct mem_state *m)
{
	uint64_t n = 0;
	for (size_t i = 0; i < m->nblocks; i++)
		if (m->blocks[i]->resident && m->blocks[i]->shadow)
			n += m->blocks[i]->len;
	return n;
}

static uint64_t bps(uint64_t bytes, uint64_t ns)
{
	return ns ? (uint64_t)((double)bytes / ((double)ns / 1e9)) : 0;
}

/* ---- host copies prepared in the background ---- */

struct prep_job {
	uint64_t va, len;
	void *p;
	int pinned;
};

struct mem_prep {
	pthread_t tid;
	CUcontext ctx;        /* current in the thread (registration needs one) */
	struct prep_job *jobs;
	size_t n, adopted;    /* jobs; how many the main thread took over */
	atomic_size_t done;   /* how many the thread finished */
	atomic_int stop, ended;
	/* the thread's measurement so far (the parent's quantum wants it
	 * before the preparation ends) */
	_Atomic uint64_t bytes, ns;
};

static void *prep_main(void *arg)
{
	struct mem_prep *p = arg;
	rgpud_capture_relaxed(D); /* (rgpud's own calls: never a capture's unsafe call) */
	if (p->ctx)
		(void)D->cuCtxSetCurrent(p->ctx);
	uint64_t t0 = rgpu_now_ns();
	for (size_t i = 0; i < p->n && !atomic_load(&p->stop); i++) {
		if (host_prepare(p->jobs[i].len, &p->jobs[i].p, &p->jobs[i].pinned) < 0)
			break;
		atomic_store(&p->ns, rgpu_now_ns() - t0);
		atomic_store(&p->bytes, atomic_load(&p->bytes) + p->jobs[i].len);
		atomic_store(&p->done, i + 1);
	}
	atomic_store(&p->ended, 1);
	return NULL;
}

/* Gives each finished job's memory to its block (still resident, same
 * size, no copy yet), else back to the system. */
static void prep_adopt(struct mem_state *m, struct mem_prep *p)
{
	size_t done = atomic_load(&p->done);
	if (done > p->adopted)
		m->prep_bps = bps(atomic_load(&p->bytes), atomic_load(&p->ns));
	for (; p->adopted < done; p->adopted++) {
		struct prep_job *j = &p->jobs[p->adopted];
		struct mem_block *b = mem_block_at(m, j->va);
		if (b && b->len == j->len && b->resident == 1 && !b->plain && !b->shadow) {
			b->shadow = j->p;
			b->shadow_pinned = j->pinned;
		} else {
			host_release(j->p, j->len, j->pinned);
		}
	}
}

static void prep_end(struct mem_state *m)
{
	struct mem_prep *p = m->prep;
	pthread_join(p->tid, NULL);
	prep_adopt(m, p);
	free(p->jobs);
	free(p);
	m->prep = NULL;
}

/* Takes over what the background prepared so far; 1 when that changed
 * the bytes ready. */
static int prep_poll(struct mem_state *m)
{
	struct mem_prep *p = m->prep;
	if (!p)
		return 0;
	size_t before = p->adopted;
	if (atomic_load(&p->ended))
		prep_end(m);
	else
		prep_adopt(m, p);
	return m->prep ? m->prep->adopted != before : 1;
}

void mem_prepare_stop(struct session *s)
{
	struct mem_state *m = s->mem;
	if (!m || !m->prep)
		return;
	atomic_store(&m->prep->stop, 1);
	prep_end(m);
}

void mem_prepare_poll(struct session *s)
{
	if (s->mem && prep_poll(s->mem))
		mem_report_if(s, 0);
}

void mem_prepare_start(struct session *s, unsigned dev, uint64_t limit)
{
	struct mem_state *m = s->mem;
	if (!m || !D->have_vmm)
		return;
	mem_prepare_poll(s);
	if (m->prep)
		return; /* still under way */
	uint64_t kept = shadow_bytes(m), cap = keep_cap(), add = 0;
	size_t n = 0;
	/* (a limit takes whole chunks: the one that crosses it too) */
	for (size_t i = 0; i < m->nblocks && (!limit || add < limit); i++) {
		const struct mem_block *b = m->blocks[i];
		if (b->resident == 1 && !b->plain && !b->shadow && b->dev == dev &&
		    kept + add + b->len <= cap) {
			add += b->len;
			n++;
		}
	}
	if (!n)
		return;
	struct mem_prep *p = calloc(1, sizeof(*p));
	struct prep_job *jobs = calloc(n, sizeof(*jobs));
	if (!p || !jobs) {
		free(p);
		free(jobs);
		return;
	}
	size_t k = 0;
	add = 0;
	for (size_t i = 0; i < m->nblocks && k < n && (!limit || add < limit); i++) {
		const struct mem_block *b = m->blocks[i];
		if (b->resident == 1 && !b->plain && !b->shadow && b->dev == dev &&
		    kept + add + b->len <= cap) {
			add += b->len;
			jobs[k++] = (struct prep_job){ .va = b->va, .len = b->len };
			if (!p->ctx) {
				struct hentry *e = ht_get(&s->ht, b->ctx, HK_CTX);
				p->ctx = e ? e->obj : NULL;
			}
		}
	}
	p->jobs = jobs;
	p->n = k;
	if (pthread_create(&p->tid, NULL, prep_main, p) != 0) {
		free(jobs);
		free(p);
		return;
	}
	m->prep = p;
	log_info("%s: preparing host memory for %llu bytes in the background (an eviction is "
		 "expected) [t=%.3f]", s->name, (unsigned long long)add, (double)rgpu_now_ns() / 1e9);
}

/* Synchronises every context that owns movable blocks of m (those the
 * copies were queued in). */
static int sync_ctxs(struct session *s, struct mem_state *m)
{
	int rc = 0;
	uint64_t done[16];
	size_t nd = 0;
	for (size_t i = 0; i < m->nblocks; i++) {
		struct mem_block *b = m->blocks[i];
		if (b->plain || !b->shadow)
			continue;
		size_t k = 0;
		while (k < nd && done[k] != b->ctx)
			k++;
		if (k < nd)
			continue;
		if (nd < 16)
			done[nd++] = b->ctx;
		int r = mem_enter_ctx(s, b->ctx);
		if (!r)
			r = D->cuCtxSynchronize();
		if (r && !rc)
			rc = r;
	}
	return rc;
}

static double secs(uint64_t a, uint64_t b) { return (double)(b - a) / 1e9; }

int mem_evict(struct session *s, uint64_t *freed)
{
	return mem_evict_some(s, -1, 0, freed);
}

int mem_evict_some(struct session *s, int dev, uint64_t want, uint64_t *freed)
{
	struct mem_state *m = s->mem;
	*freed = 0;
	if (!m)
		return CUDA_SUCCESS;
	/* what the background prepared is ready; what it was preparing is
	 * finished first (it is half done) */
	mem_prepare_stop(s);
	uint64_t t0 = rgpu_now_ns(), bytes = 0, queued = 0, ready = 0, fresh = 0, prep_ns = 0;
	int rc = 0;
	/* queue every copy: preparing the next shadow overlaps this copy.
	 * Chunks go in address order, so a session evicted again in part
	 * loses the same chunks, whose host copies it kept. */
	for (size_t i = 0; i < m->nblocks && !rc; i++) {
		struct mem_block *b = m->blocks[i];
		b->evicting = 0;
		if (b->plain || b->resident != 1 || (dev >= 0 && b->dev != (unsigned)dev) ||
		    (want && queued >= want))
			continue;
		b->evicting = 1;
		queued += b->len;
		if (b->shadow) {
			ready += b->len;
		} else {
			uint64_t p0 = rgpu_now_ns();
			if (shadow_get(m, b) < 0) {
				log_warn("%s: no host memory to swap %llu bytes out to", s->name,
					 (unsigned long long)b->len);
				rc = CUDA_ERROR_OUT_OF_MEMORY;
				break;
			}
			prep_ns += rgpu_now_ns() - p0;
			fresh += b->len;
		}
		if ((rc = mem_enter_ctx(s, b->ctx)) == 0)
			rc = D->cuMemcpyDtoHAsync_v2(b->shadow, b->va, b->len, NULL);
	}
	int src = sync_ctxs(s, m);
	if (!rc)
		rc = src;
	if (rc) {
		/* nothing unmapped: the session stays whole on the GPU */
		return rc;
	}
	for (size_t i = 0; i < m->nblocks; i++) {
		struct mem_block *b = m->blocks[i];
		if (!b->evicting || !b->resident || !b->shadow)
			continue;
		b->evicting = 0;
		mem_phys_unmap(b);
		m->evicted++;
		bytes += b->len;
	}
	uint64_t t1 = rgpu_now_ns();
	m->out_bytes += (double)bytes;
	m->out_s += secs(t0, t1);
	/* measurements for the parent's quantum: the copy alone where all
	 * host memory was ready, the preparation where some was not */
	if (bytes && !fresh)
		m->out_bps = bps(bytes, t1 - t0);
	if (fresh && prep_ns)
		m->prep_bps = bps(fresh, prep_ns);
	uint64_t res = 0, sw;
	mem_usage(s, &res, &sw);
	log_info("%s: swapped out %llu bytes of device memory in %.3f s (%.1f GB/s; host memory: "
		 "%llu bytes ready, %llu prepared now; on the GPU for %.3f s) [t=%.3f]", s->name,
		 (unsigned long long)bytes, secs(t0, t1), (double)bytes / 1e9 / (secs(t0, t1) + 1e-9),
		 (unsigned long long)ready, (unsigned long long)fresh,
		 m->on_gpu_since_ns ? secs(m->on_gpu_since_ns, t1) : 0.0, (double)t1 / 1e9);
	if (!res)
		m->on_gpu_since_ns = 0;
	*freed = bytes;
	mem_report_if(s, 1);
	return CUDA_SUCCESS;
}

static int restore_pass(struct session *s);

int mem_restore(struct session *s)
{
	/* a pass may have had to give memory back (mem_ask_room: yield) */
	int rc = 0;
	for (int i = 0; i < 1000 && !rc && s->mem && s->mem->evicted; i++)
		rc = restore_pass(s);
	return rc;
}

/* Unmaps the blocks a failed pass mapped (their bytes are still in their
 * host copies: they are evicted again, as they were). */
static void unmap_pass(struct mem_state *m)
{
	for (size_t i = 0; i < m->nblocks; i++) {
		struct mem_block *b = m->blocks[i];
		if (b->resident == 2) {
			b->resident = 1;
			mem_phys_unmap(b);
		}
	}
}

static int restore_pass(struct session *s)
{
	struct mem_state *m = s->mem;
	if (!m || !m->evicted)
		return CUDA_SUCCESS;
	uint64_t t0 = rgpu_now_ns(), bytes = 0;
	int rc = 0;
	/* room first (the parent may have to evict others meanwhile), then
	 * every copy queued at once.  Room for all of it is asked for before
	 * anything is mapped, and all is mapped or nothing: two sessions each
	 * holding half of what they need while waiting for the other would
	 * wait for nothing.  The request keeps its place in line (and its
	 * bound) until the restore is done: no mem_room_done before. */
	uint64_t need[RGPUD_MAX_GPUS] = { 0 };
	uint64_t ctx_of[RGPUD_MAX_GPUS] = { 0 };
	int asked[RGPUD_MAX_GPUS] = { 0 };
	for (size_t i = 0; i < m->nblocks; i++) {
		struct mem_block *b = m->blocks[i];
		if (!b->plain && !b->resident) {
			need[b->dev] += b->len;
			ctx_of[b->dev] = b->ctx;
		}
	}
	for (int pass = 0;; pass++) {
		int gave_up = 0;
		for (unsigned d = 0; d < RGPUD_MAX_GPUS && !gave_up; d++) {
			while (need[d]) {
				size_t fr = 0, tot = 0;
				if (mem_enter_ctx(s, ctx_of[d]) || D->cuMemGetInfo_v2(&fr, &tot)) {
					gave_up = 1;
					break;
				}
				if (!asked[d])
					mem_report_if(s, 1); /* the parent must know what we hold */
				asked[d] = 1;
				int a = mem_admit(s, d, need[d] + MEM_CHUNK, fr);
				if (a == 0)
					break;
				if (a < 0) {
					gave_up = 1;
					break;
				}
			}
		}
		rc = 0;
		for (size_t i = 0; i < m->nblocks && !rc; i++) {
			struct mem_block *b = m->blocks[i];
			if (b->plain || b->resident)
				continue;
			if ((rc = mem_phys_map(s, b, 0)) == 0)
				b->resident = 2; /* mapped, bytes not back yet */
		}
		if (!rc)
			break;
		unmap_pass(m);
		/* the room went to someone else meanwhile (an allocation is not
		 * admitted: it takes what is free): ask again, a while */
		if (rc != CUDA_ERROR_OUT_OF_MEMORY || gave_up || pass >= 100)
			break;
		struct timespec nap = { 0, 20 * 1000000 };
		nanosleep(&nap, NULL);
	}
	uint64_t t1 = rgpu_now_ns();
	for (size_t i = 0; !rc && i < m->nblocks; i++) {
		struct mem_block *b = m->blocks[i];
		if (b->resident != 2)
			continue;
		b->resident = 1;
		m->evicted--;
		bytes += b->len;
		int r = mem_enter_ctx(s, b->ctx);
		if (!r)
			r = D->cuMemcpyHtoDAsync_v2(b->va, b->shadow, b->len, NULL);
		if (r && !rc)
			rc = r;
	}
	int src = rc ? 0 : sync_ctxs(s, m);
	if (!rc)
		rc = src;
	uint64_t t2 = rgpu_now_ns();
	/* keep shadows for the next eviction, up to the cap; the rest go
	 * back to the system behind the session's back (unpinning and
	 * unmapping 16 GiB took a third of a 48 GiB restore's time) */
	struct release *rel = NULL;
	uint64_t kept = 0;
	for (size_t i = 0; i < m->nblocks; i++) {
		struct mem_block *b = m->blocks[i];
		if (!b->resident || !b->shadow)
			continue;
		if (rc || kept + b->len > keep_cap())
			rel = release_add(rel, m, b, s);
		else
			kept += b->len;
	}
	release_start(rel);
	m->in_bytes += (double)bytes;
	m->in_s += secs(t1, t2);
	if (bytes) {
		m->in_bps = bps(bytes, t2 - t1);
		m->on_gpu_since_ns = t2;
		log_info("%s: swapped in %llu bytes of device memory in %.3f s (copy %.3f s, "
			 "%.1f GB/s; waiting for room %.3f s) [t=%.3f]", s->name,
			 (unsigned long long)bytes, secs(t0, t2), secs(t1, t2),
			 (double)bytes / 1e9 / (secs(t1, t2) + 1e-9), secs(t0, t1), (double)t2 / 1e9);
	}
	mem_report_if(s, 1);
	/* only now: until the parent knows what we hold, the request marks
	 * this session as one coming back (arbiter.c) */
	for (unsigned d = 0; d < RGPUD_MAX_GPUS; d++)
		if (asked[d])
			mem_room_done(s, d);
	return rc;
}

void mem_usage(struct session *s, uint64_t *resident, uint64_t *swapped)
{
	struct mem_state *m = s->mem;
	*resident = *swapped = 0;
	for (size_t i = 0; m && i < m->nblocks; i++) {
		const struct mem_block *b = m->blocks[i];
		if (b->resident)
			*resident += b->len;
		else
			*swapped += b->len;
	}
}

void mem_swap_stats(struct session *s, double *out_bytes, double *out_s, double *in_bytes,
		    double *in_s)
{
	struct mem_state *m = s->mem;
	*out_bytes = m ? m->out_bytes : 0;
	*out_s = m ? m->out_s : 0;
	*in_bytes = m ? m->in_bytes : 0;
	*in_s = m ? m->in_s : 0;
}
