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
	int evicting;        /* chosen by the eviction in progress */
	uint64_t *bitmap;    /* small: 256-byte units in use */
	unsigned nused;      /* small: allocations in it */
	unsigned free_units; /* small: units not in use */
	void *shadow;        /* host copy (evicted, or kept for the next time) */
	int shadow_pinned;
	int exported;        /* in the parent's share registry (export.c) */
	uint8_t token[16];   /* its token there */
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
	uint64_t reported[3];      /* resident, swapped, ready: as the parent knows */
	double out_bytes, out_s, in_bytes, in_s;
	uint64_t on_gpu_since_ns;  /* it last came (back) on the GPU */
	/* the latest measurements, bytes/s (0: none yet; reported to the
	 * parent for its quantum): copies out with host memory ready,
	 * host memory prepared, copies in */
	uint64_t out_bps, prep_bps, in_bps;
	uint64_t reported_bps[3];  /* what the parent got of them */
	unsigned room_asked;       /* devices an allocation asked room on */
	struct mem_prep *prep;     /* host copies prepared in the background */
	/* devices whose contexts enabled peer access to device d's memory:
	 * VMM-backed memory is reachable only where its access says so
	 * (cuCtxEnablePeerAccess opens cuMemAlloc memory, not this) */
	uint64_t peers[RGPUD_MAX_GPUS];
};

struct mem_state *mem_state(struct session *s);
int mem_enter_ctx(struct session *s, uint64_t ctx);
/* ask: ask the parent for room while the GPU has none (else
 * CUDA_ERROR_OUT_OF_MEMORY at once) */
int mem_phys_map(struct session *s, struct mem_block *b, int ask);
/* The block starting at va, or NULL (space.c). */
struct mem_block *mem_block_at(struct mem_state *m, uint64_t va);
/* The block whose mapping holds addr, or NULL. */
struct mem_block *mem_block_holding(struct mem_state *m, uint64_t addr);
void mem_phys_unmap(struct mem_block *b);
/* Evicts resident chunks on dev (-1: all devices) in address order until
 * want bytes (0: all) are queued (swap.c). */
int mem_evict_some(struct session *s, int dev, uint64_t want, uint64_t *freed);
/* Takes b's physical memory out of the share registry (export.c). */
void mem_export_forget(struct mem_block *b);
/* Frees b's host copy (swap.c). */
void mem_shadow_drop(struct mem_state *m, struct mem_block *b);
/* Ends the background preparation, taking over what it prepared (before
 * an eviction, a context's end, the session's end; swap.c). */
void mem_prepare_stop(struct session *s);
/* Takes over what the background prepared so far, reporting it when that
 * changed what is ready (between requests). */
void mem_prepare_poll(struct session *s);
/* Bytes of resident chunks on dev (-1: all) whose host copy is ready. */
uint64_t mem_ready_bytes(struct mem_state *m, int dev);
/* Reports usage to the parent: always with force, else only changes of
 * 64 MiB or more (room.c). */
void mem_report_if(struct session *s, int force);
/* No work of the session queued or running (room.c). */
int mem_session_idle(struct session *s);

#endif
