/* The shared segment's layout (sched.h), for parent.c and worker.c. */
#ifndef RGPUD_SCHED_SEG_H
#define RGPUD_SCHED_SEG_H

#include "lease.h" /* RGPUD_MAX_GPUS */
#include "scheduler.h"

#include <stdatomic.h>
#include <stdint.h>

#define SCHED_SEG_MAGIC 0x52474d53u /* "SMGR" */

struct sched_slot {
	_Atomic int32_t pid;        /* the worker; 0: free (written by the parent) */
	_Atomic uint32_t gpu;
	_Atomic uint32_t weight;    /* 1..100 */
	_Atomic uint32_t pct;       /* MPS active thread percentage (100: time-sliced) */
	_Atomic uint32_t inflight;  /* written by the worker from here on */
	_Atomic uint32_t waiting;
	_Atomic uint64_t attained;  /* ns charged */
	_Atomic uint64_t busy;      /* ns its kernels ran (events) */
	_Atomic uint64_t vtime;
	_Atomic uint64_t episode;
	_Atomic uint64_t mean;
	_Atomic uint64_t beat;      /* CLOCK_MONOTONIC ns: last sign of life */
	_Atomic uint64_t idle_since;
	_Atomic uint64_t progress;  /* last completion, or the first launch after idling */
	_Atomic uint32_t demand;    /* MPS: percent of the GPU its last launch needs */
	_Atomic uint32_t used;      /* the worker launched a kernel there (counted in tenants) */
};

struct sched_seg {
	uint32_t magic, nslots;
	int32_t policy, mps;
	uint64_t quantum;
	_Atomic uint32_t gen[RGPUD_MAX_GPUS]; /* bumped (and futex-woken) on change */
	/* slots per GPU whose worker launched a kernel there: a session
	 * admitted to every GPU of its server but running on one shares no
	 * other (two ranks of a job, one GPU each, are not each other's
	 * tenants, even with a context on each other's GPU) */
	_Atomic uint32_t tenants[RGPUD_MAX_GPUS];
	struct sched_slot slot[SCHED_SLOTS];
};

void sched_seg_wake(struct sched_seg *g, unsigned gpu);
/* Waits until gen[gpu] moves from seen, or timeout_ns passes. */
void sched_seg_wait(struct sched_seg *g, unsigned gpu, uint32_t seen, uint64_t timeout_ns);
/* A slot as the policy sees it (active: work in flight or waiting, and
 * alive). */
void sched_slot_view(struct sched_slot *s, uint64_t now, struct sched_view *v);

#endif
