/*
 * rgpu's stream-ordered pools: blocks, their reuse and their release
 * (pool.h says the rules).
 */
#include "pool.h"
#include "appmem.h"
#include "rgpud.h"
#include "session.h"
#include "migrate/memif.h"

#include <stdlib.h>
#include <string.h>

#define D (&rgpud_server.drv)
#define MiB (1ull << 20)

/* The size class of a request: a power of two up to 1 MiB (small blocks
 * share the memory manager's 2 MiB chunks), whole 2 MiB granules above,
 * so that a freed block fits the next request of about its size. */
static uint64_t size_class(uint64_t n)
{
	if (n > MiB)
		return n > UINT64_MAX - 2 * MiB ? 0 : (n + 2 * MiB - 1) & ~(2 * MiB - 1);
	uint64_t c = 512;
	while (c < n)
		c <<= 1;
	return c;
}

/* the first block at or after addr */
static size_t upper(const struct appmem *a, uint64_t addr)
{
	size_t lo = 0, hi = a->npblocks;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (a->pblocks[mid].addr < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int find(const struct appmem *a, uint64_t addr)
{
	size_t i = a ? upper(a, addr) : 0;
	return a && i < a->npblocks && a->pblocks[i].addr == addr ? (int)i : -1;
}

static void account(struct pool *pl, const struct pblock *b, int sign)
{
	if (!pl)
		return;
	if (sign > 0) {
		pl->reserved += b->size;
		if (pl->reserved > pl->reserved_high)
			pl->reserved_high = pl->reserved;
	} else {
		pl->reserved -= b->size;
	}
}

static void use(struct pool *pl, uint64_t size, int sign)
{
	if (!pl)
		return;
	if (sign > 0) {
		pl->used += size;
		if (pl->used > pl->used_high)
			pl->used_high = pl->used;
	} else {
		pl->used -= size;
	}
}

static int insert(struct appmem *a, const struct pblock *b)
{
	if (a->npblocks == a->cappblocks) {
		size_t cap = a->cappblocks ? a->cappblocks * 2 : 64;
		struct pblock *n = realloc(a->pblocks, cap * sizeof(*n));
		if (!n)
			return -1;
		a->pblocks = n;
		a->cappblocks = cap;
	}
	size_t i = upper(a, b->addr);
	memmove(&a->pblocks[i + 1], &a->pblocks[i], (a->npblocks - i) * sizeof(*a->pblocks));
	a->pblocks[i] = *b;
	a->npblocks++;
	a->npending += b->state == PB_PENDING;
	account(b->pool, b, 1);
	if (b->state == PB_USED)
		use(b->pool, b->size, 1);
	return 0;
}

/* Takes block i off the list (its memory stays). */
static void unlist(struct appmem *a, size_t i)
{
	struct pblock *b = &a->pblocks[i];
	if (b->state == PB_USED)
		use(b->pool, b->size, -1);
	a->npending -= b->state == PB_PENDING;
	account(b->pool, b, -1);
	memmove(&a->pblocks[i], &a->pblocks[i + 1], (a->npblocks - i - 1) * sizeof(*a->pblocks));
	a->npblocks--;
}

/* Gives block i's memory back, as cuMemFree would (ops_memory.c). */
static int release(struct session *s, struct appmem *a, size_t i)
{
	struct pblock b = a->pblocks[i];
	unlist(a, i);
	if (b.ev)
		D->cuEventDestroy_v2(b.ev);
	return session_mem_free(s, b.addr);
}

void pb_sweep(struct session *s)
{
	struct appmem *a = s->appmem;
	/* (every allocation sweeps: nothing to do when no free is pending) */
	for (size_t i = 0; a && a->npending && i < a->npblocks;) {
		struct pblock *b = &a->pblocks[i];
		if (b->state == PB_PENDING && (!b->ev || D->cuEventQuery(b->ev) != CUDA_ERROR_NOT_READY)) {
			b->state = PB_FREE;
			a->npending--;
			if (!b->pool) {
				release(s, a, i);
				continue;
			}
		}
		i++;
	}
}

/* Gives back cached blocks of pl (NULL: of every pool on gpu) while it
 * reserves more than keep bytes, largest first. */
static void shrink(struct session *s, struct pool *pl, unsigned gpu, uint64_t keep)
{
	struct appmem *a = s->appmem;
	while (a && (!pl || pl->reserved > keep)) {
		int best = -1;
		for (size_t i = 0; i < a->npblocks; i++) {
			const struct pblock *b = &a->pblocks[i];
			if (b->state == PB_FREE && (pl ? b->pool == pl : b->gpu == gpu) &&
			    (best < 0 || b->size > a->pblocks[best].size))
				best = (int)i;
		}
		if (best < 0)
			return;
		release(s, a, (size_t)best);
	}
}

void pb_synced(struct session *s)
{
	struct appmem *a = s->appmem;
	s->pools_sync_due = 0;
	if (!a || !a->npblocks)
		return;
	pb_sweep(s);
	for (struct pool *pl = a->pools; pl; pl = pl->next)
		if (pl->reserved > pl->threshold)
			shrink(s, pl, pl->gpu, pl->threshold);
}

void pb_trim(struct session *s, struct pool *pl, uint64_t keep)
{
	pb_sweep(s);
	shrink(s, pl, pl->gpu, keep);
}

/* A block of pl for a request of class want on stream (sid, sctx): a
 * cached one first, then one freed on that stream, then (if the pool
 * allows it) one freed on another; the smallest that fits with at most a
 * quarter to spare (any that fits when tight: no room for new memory).
 * -1: none. */
static int pick(const struct appmem *a, const struct pool *pl, uint64_t want, uint64_t sid,
		uint64_t sctx, int tight)
{
	int best = -1, best_rank = 3;
	for (size_t i = 0; i < a->npblocks; i++) {
		const struct pblock *b = &a->pblocks[i];
		if (b->pool != pl || b->state == PB_USED || b->size < want ||
		    (!tight && b->size - want > want / 4))
			continue;
		int rank = b->state == PB_FREE ? 0 : b->sid == sid && b->sctx == sctx ? 1 : 2;
		if (rank == 2 && !pl->reuse[2])
			continue;
		if (rank < best_rank || (rank == best_rank && b->size < a->pblocks[best].size)) {
			best = (int)i;
			best_rank = rank;
		}
	}
	return best;
}

/* Block i handed out for stream st (after its free when that was on
 * another stream). */
static int take(struct appmem *a, size_t i, uint64_t sid, uint64_t sctx, CUstream st)
{
	struct pblock *b = &a->pblocks[i];
	if (b->state == PB_PENDING && (b->sid != sid || b->sctx != sctx)) {
		int rc = D->cuStreamWaitEvent(st, b->ev, 0);
		if (rc)
			return rc;
	}
	a->npending -= b->state == PB_PENDING;
	b->state = PB_USED;
	use(b->pool, b->size, 1);
	return CUDA_SUCCESS;
}

/* New memory for a block of pl: at addr when asked (a replay), charged
 * to the quota and registered as the session's. */
static int grow(struct session *s, struct pool *pl, uint64_t ctx, uint64_t want, uint64_t at,
		uint64_t *addr)
{
	uint64_t p = at;
	int rc = at ? memif_restore_at(s, ctx, pl->gpu, at, want)
		    : session_mem_alloc(s, ctx, pl->gpu, want, &p);
	if (rc)
		return rc;
	struct pblock b = { .addr = p, .size = want, .ctx = ctx, .pool = pl, .gpu = pl->gpu,
			    .state = PB_USED };
	if (insert(s->appmem, &b) < 0) {
		session_mem_free(s, p);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*addr = p;
	return CUDA_SUCCESS;
}

/* A replay's allocation at: the block that starts there if it is free
 * (the same one the client got), else new memory there, cached blocks in
 * the way given back first. */
static int alloc_at(struct session *s, struct pool *pl, uint64_t ctx, uint64_t sid,
		    uint64_t sctx, CUstream st, uint64_t want, uint64_t at, uint64_t *addr)
{
	struct appmem *a = s->appmem;
	int i = find(a, at);
	if (i >= 0 && a->pblocks[i].pool == pl && a->pblocks[i].state != PB_USED &&
	    a->pblocks[i].size >= want) {
		int rc = take(a, (size_t)i, sid, sctx, st);
		if (!rc)
			*addr = at;
		return rc;
	}
	for (size_t k = 0; k < a->npblocks;) {
		const struct pblock *b = &a->pblocks[k];
		if (b->addr < at + want && at < b->addr + b->size) {
			if (b->state == PB_USED)
				return CUDA_ERROR_INVALID_VALUE; /* the client holds it */
			if (b->state == PB_PENDING && b->ev)
				D->cuEventSynchronize(b->ev);
			release(s, a, k);
			continue;
		}
		k++;
	}
	return grow(s, pl, ctx, want, at, addr);
}

int pb_alloc(struct session *s, struct pool *pl, uint64_t ctx, uint64_t sid, CUstream st,
	     uint64_t size, uint64_t at, uint64_t *addr)
{
	struct appmem *a = s->appmem;
	uint64_t want = size_class(size);
	if (!a || !want)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pb_sweep(s);
	if (at)
		return alloc_at(s, pl, ctx, sid, ctx, st, want, at, addr);
	for (int tight = 0; tight < 2; tight++) {
		int i = pick(a, pl, want, sid, ctx, tight);
		if (i >= 0 && take(a, (size_t)i, sid, ctx, st) == CUDA_SUCCESS) {
			*addr = a->pblocks[i].addr;
			return CUDA_SUCCESS;
		}
		if (tight)
			break;
		/* new memory, if it fits */
		if (pl->maxsize && pl->reserved + want > pl->maxsize)
			shrink(s, pl, pl->gpu, pl->maxsize > want ? pl->maxsize - want : 0);
		if (pl->maxsize && pl->reserved + want > pl->maxsize)
			continue;
		int rc = grow(s, pl, ctx, want, 0, addr);
		if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
			/* what the session's pools cache on this GPU makes
			 * room first */
			shrink(s, NULL, pl->gpu, 0);
			rc = grow(s, pl, ctx, want, 0, addr);
		}
		if (rc != CUDA_ERROR_OUT_OF_MEMORY)
			return rc;
	}
	return CUDA_ERROR_OUT_OF_MEMORY;
}

int pb_free_async(struct session *s, uint64_t addr, uint64_t ctx, uint64_t sid, CUstream st,
		  int captured)
{
	struct appmem *a = s->appmem;
	int i = find(a, addr);
	if (i < 0)
		return -1;
	struct pblock *b = &a->pblocks[i];
	if (b->state != PB_USED)
		return CUDA_ERROR_INVALID_VALUE; /* freed twice */
	if (captured)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	if (b->ev && b->ev_ctx != ctx) {
		D->cuEventDestroy_v2(b->ev);
		b->ev = NULL;
	}
	int rc = b->ev ? 0 : D->cuEventCreate(&b->ev, CU_EVENT_DISABLE_TIMING);
	if (rc) {
		b->ev = NULL;
		return rc;
	}
	b->ev_ctx = ctx;
	if ((rc = D->cuEventRecord(b->ev, st)))
		return rc;
	b->state = PB_PENDING;
	a->npending++;
	b->sid = sid;
	b->sctx = ctx;
	use(b->pool, b->size, -1);
	return CUDA_SUCCESS;
}

int pb_free_now(struct session *s, uint64_t addr)
{
	struct appmem *a = s->appmem;
	int i = find(a, addr);
	if (i < 0)
		return -1;
	if (a->pblocks[i].state != PB_USED)
		return CUDA_ERROR_INVALID_VALUE;
	return release(s, a, (size_t)i);
}

void pb_pool_gone(struct session *s, struct pool *pl)
{
	struct appmem *a = s->appmem;
	for (size_t i = 0; a && i < a->npblocks;) {
		struct pblock *b = &a->pblocks[i];
		if (b->pool != pl) {
			i++;
			continue;
		}
		if (b->state == PB_USED) {
			/* outlives its pool, as the driver's do: given back
			 * when freed */
			account(pl, b, -1);
			use(pl, b->size, -1);
			b->pool = NULL;
			i++;
			continue;
		}
		if (b->state == PB_PENDING && b->ev)
			D->cuEventSynchronize(b->ev);
		release(s, a, i);
	}
}

void pb_forget_ctx(struct session *s, uint64_t ctx)
{
	struct appmem *a = s->appmem;
	for (size_t i = 0; a && i < a->npblocks;) {
		struct pblock *b = &a->pblocks[i];
		if (b->ev_ctx == ctx)
			b->ev = NULL; /* destroyed with its context */
		if (b->ctx == ctx) {
			if (b->ev)
				D->cuEventDestroy_v2(b->ev);
			unlist(a, i); /* its memory goes with the context's */
			continue;
		}
		if (b->state == PB_PENDING && !b->ev) {
			b->state = PB_FREE; /* its stream went with the context */
			a->npending--;
		}
		i++;
	}
}

int pb_adopt(struct session *s, struct pool *pl, uint64_t addr, uint64_t size, int used)
{
	struct appmem *a = appmem_of(s);
	struct alloc *g = session_alloc_get(s, addr);
	if (!a || !g || g->module || g->size != size || find(a, addr) >= 0 ||
	    (pl && pl->gpu != g->dev) || (!pl && !used))
		return CUDA_ERROR_INVALID_VALUE;
	struct pblock b = { .addr = addr, .size = size, .ctx = g->ctx, .pool = pl, .gpu = g->dev,
			    .state = used ? PB_USED : PB_FREE };
	return insert(a, &b) < 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

void pb_cleanup(struct session *s)
{
	struct appmem *a = s->appmem;
	if (!a)
		return;
	for (size_t i = 0; i < a->npblocks; i++)
		if (a->pblocks[i].ev)
			D->cuEventDestroy_v2(a->pblocks[i].ev);
	free(a->pblocks);
	a->pblocks = NULL;
	a->npblocks = a->cappblocks = a->npending = 0;
}
