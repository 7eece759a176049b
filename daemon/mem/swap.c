/*
 * Eviction and restore of a whole session (see mem.h).
 *
 * The host copy of a chunk ("shadow") is anonymous memory on transparent
 * huge pages, faulted in by several threads and registered (pinned) with
 * the driver in pieces, so the GPU copies at pinned bandwidth.  Fresh host
 * memory is slow to fault in (measured on the H100 host: 2 GB/s on 4 KiB
 * pages with one thread, 22 GB/s on huge pages with 8 threads, then 48
 * GB/s to pin), so a session keeps its shadows after a restore, up to
 * RGPUD_SWAP_KEEP bytes (default a quarter of the node's memory), and the
 * next eviction copies at the GPU's pinned copy speed.  Copies are queued
 * asynchronously block after block: the host work of preparing the next
 * shadow overlaps the GPU's copy of the previous one.
 */
#include "mem_int.h"

#include "log.h"
#include "size.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PIECE (256ull << 20) /* pinned in pieces of this much */
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

static int shadow_get(struct mem_state *m, struct mem_block *b)
{
	(void)m;
	if (b->shadow)
		return 0;
	void *p = mmap(NULL, b->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -1;
#ifdef MADV_HUGEPAGE
	madvise(p, b->len, MADV_HUGEPAGE);
#endif
	touch_parallel(p, b->len);
	int pinned = 1;
	for (uint64_t off = 0; off < b->len; off += PIECE) {
		uint64_t k = b->len - off < PIECE ? b->len - off : PIECE;
		if (D->cuMemHostRegister_v2((char *)p + off, k, CU_MEMHOSTREGISTER_PORTABLE)) {
			/* unpinned, copies still work (slower): undo the rest */
			for (uint64_t o = 0; o < off; o += PIECE)
				D->cuMemHostUnregister((char *)p + o);
			pinned = 0;
			break;
		}
	}
	b->shadow = p;
	b->shadow_pinned = pinned;
	return 0;
}

void mem_shadow_drop(struct mem_state *m, struct mem_block *b)
{
	(void)m;
	if (!b->shadow)
		return;
	if (b->shadow_pinned)
		for (uint64_t o = 0; o < b->len; o += PIECE)
			D->cuMemHostUnregister((char *)b->shadow + o);
	munmap(b->shadow, b->len);
	b->shadow = NULL;
	b->shadow_pinned = 0;
}

/* Synchronises every context that blocks of m were copied in. */
static int sync_ctxs(struct session *s, struct mem_state *m, int resident_now)
{
	int rc = 0;
	uint64_t done[16];
	size_t nd = 0;
	for (size_t i = 0; i < m->nblocks; i++) {
		struct mem_block *b = m->blocks[i];
		if (b->plain || b->resident != resident_now || !b->shadow)
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
	struct mem_state *m = s->mem;
	*freed = 0;
	if (!m)
		return CUDA_SUCCESS;
	uint64_t t0 = mem_now_ns(), bytes = 0;
	int rc = 0, fresh = 0;
	/* queue every copy: preparing the next shadow overlaps this copy */
	for (size_t i = 0; i < m->nblocks && !rc; i++) {
		struct mem_block *b = m->blocks[i];
		if (b->plain || !b->resident)
			continue;
		fresh |= !b->shadow;
		if (shadow_get(m, b) < 0) {
			log_warn("%s: no host memory to swap %llu bytes out to", s->name,
				 (unsigned long long)b->len);
			rc = CUDA_ERROR_OUT_OF_MEMORY;
			break;
		}
		if ((rc = mem_enter_ctx(s, b->ctx)) == 0)
			rc = D->cuMemcpyDtoHAsync_v2(b->shadow, b->va, b->len, NULL);
	}
	int src = sync_ctxs(s, m, 1);
	if (!rc)
		rc = src;
	if (rc) {
		/* nothing unmapped: the session stays whole on the GPU */
		return rc;
	}
	for (size_t i = 0; i < m->nblocks; i++) {
		struct mem_block *b = m->blocks[i];
		if (b->plain || !b->resident || !b->shadow)
			continue;
		mem_phys_unmap(b);
		m->evicted++;
		bytes += b->len;
	}
	m->out_bytes += (double)bytes;
	m->out_s += secs(t0, mem_now_ns());
	*freed = bytes;
	log_info("%s: swapped out %llu bytes of device memory in %.3f s (%.1f GB/s, %s)", s->name,
		 (unsigned long long)bytes, secs(t0, mem_now_ns()),
		 (double)bytes / 1e9 / (secs(t0, mem_now_ns()) + 1e-9),
		 fresh ? "host memory prepared now" : "host memory kept from before");
	mem_report(s);
	return CUDA_SUCCESS;
}

int mem_restore(struct session *s)
{
	struct mem_state *m = s->mem;
	if (!m || !m->evicted)
		return CUDA_SUCCESS;
	uint64_t t0 = mem_now_ns(), bytes = 0;
	int rc = 0;
	/* room first (the parent may have to evict others meanwhile), then
	 * every copy queued at once.  Room for all of it is asked for before
	 * anything is mapped: two sessions each holding half of what they
	 * need while waiting for the other would wait for nothing. */
	uint64_t need[RGPUD_MAX_GPUS] = { 0 };
	uint64_t ctx_of[RGPUD_MAX_GPUS] = { 0 };
	for (size_t i = 0; i < m->nblocks; i++) {
		struct mem_block *b = m->blocks[i];
		if (!b->plain && !b->resident) {
			need[b->dev] += b->len;
			ctx_of[b->dev] = b->ctx;
		}
	}
	for (unsigned d = 0; d < RGPUD_MAX_GPUS; d++) {
		size_t fr = 0, tot = 0;
		int asked = 0;
		while (need[d] && mem_enter_ctx(s, ctx_of[d]) == 0 &&
		       D->cuMemGetInfo_v2(&fr, &tot) == 0 && fr < need[d] + MEM_CHUNK) {
			asked = 1;
			if (!mem_ask_room(s, d, need[d] + MEM_CHUNK - fr))
				break;
		}
		if (asked)
			mem_room_done(s, d);
	}
	size_t mapped = 0;
	for (size_t i = 0; i < m->nblocks; i++) {
		struct mem_block *b = m->blocks[i];
		if (b->plain || b->resident)
			continue;
		if ((rc = mem_phys_map(s, b)))
			break;
		b->resident = 2; /* mapped, bytes not back yet */
		mapped++;
	}
	uint64_t t1 = mem_now_ns();
	for (size_t i = 0; i < m->nblocks; i++) {
		struct mem_block *b = m->blocks[i];
		if (b->resident != 2)
			continue;
		if (rc) {
			/* not all of it fits: give back what was mapped */
			b->resident = 1;
			mem_phys_unmap(b);
			continue;
		}
		b->resident = 1;
		m->evicted--;
		bytes += b->len;
		int r = mem_enter_ctx(s, b->ctx);
		if (!r)
			r = D->cuMemcpyHtoDAsync_v2(b->va, b->shadow, b->len, NULL);
		if (r && !rc)
			rc = r;
	}
	(void)mapped;
	int src = sync_ctxs(s, m, 1);
	if (!rc)
		rc = src;
	/* keep shadows for the next eviction, up to the cap */
	uint64_t kept = 0;
	for (size_t i = 0; i < m->nblocks; i++) {
		struct mem_block *b = m->blocks[i];
		if (!b->resident || !b->shadow)
			continue;
		if (rc || kept + b->len > keep_cap())
			mem_shadow_drop(m, b);
		else
			kept += b->len;
	}
	uint64_t t2 = mem_now_ns();
	m->in_bytes += (double)bytes;
	m->in_s += secs(t1, t2);
	if (bytes)
		log_info("%s: swapped in %llu bytes of device memory in %.3f s (copy %.3f s, "
			 "%.1f GB/s; waiting for room %.3f s)", s->name, (unsigned long long)bytes,
			 secs(t0, t2), secs(t1, t2), (double)bytes / 1e9 / (secs(t1, t2) + 1e-9),
			 secs(t0, t1));
	mem_report(s);
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
