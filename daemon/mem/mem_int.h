/* Internals of the memory manager's worker side (space.c, swap.c, room.c). */
#ifndef RGPUD_MEM_INT_H
#define RGPUD_MEM_INT_H

#include "mem.h"
#include "rgpud.h"
#include "session.h"

#include <sys/types.h>
#include <time.h>

#define D (&rgpud_server.drv)

#define MEM_CHUNK (2ull << 20)        /* VMM granularity (NOTES.md) */
#define MEM_SMALL_MAX (1ull << 20)    /* smaller allocations share chunks */
#define MEM_RANGE_SIZE (512ull << 30) /* reserved per device and worker */

/* One physical mapping: a large allocation's, or a chunk small ones share. */
struct mem_block {
	uint64_t va, len;
	unsigned dev;
	uint64_t ctx;        /* the session's context handle that made it */
	CUmemGenericAllocationHandle h;
	int resident;        /* mapped on the GPU */
	int plain;           /* cuMemAlloc'd (no VMM): never evicted */
	int small;
	uint64_t *bitmap;    /* small: 256-byte units in use */
	unsigned nused;      /* small: allocations in it */
	void *shadow;        /* host copy (evicted, or kept for the next time) */
	int shadow_pinned;
};

struct mem_a {
	uint64_t addr, size;
	struct mem_block *b;
};

struct mem_state {
	struct mem_block **blocks; /* sorted by va */
	size_t nblocks, capblocks;
	struct mem_a *allocs;      /* sorted by addr */
	size_t nallocs, capallocs;
	struct {
		uint64_t base;
		uint64_t next; /* where the next search starts */
	} range[RGPUD_MAX_GPUS];
	size_t evicted;            /* blocks not resident */
	uint64_t last_active_ns;
	double out_bytes, out_s, in_bytes, in_s;
};

struct mem_state *mem_state(struct session *s);
uint64_t mem_now_ns(void);
int mem_enter_ctx(struct session *s, uint64_t ctx);
int mem_phys_map(struct session *s, struct mem_block *b);
void mem_phys_unmap(struct mem_block *b);
/* Frees b's host copy (swap.c). */
void mem_shadow_drop(struct mem_state *m, struct mem_block *b);
/* No work of the session queued or running (room.c). */
int mem_session_idle(struct session *s);

#endif
