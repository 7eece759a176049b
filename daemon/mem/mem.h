/*
 * The memory manager: a session's device memory that can move.
 *
 * Worker side.  Every allocation a session makes (cuMemAlloc, pitched) gets
 * its device address from a range of virtual addresses the worker reserves
 * at a fixed hint (cuMemAddressReserve), backed by physical chunks
 * (cuMemCreate + cuMemMap + cuMemSetAccess).  Evicting a session copies its
 * chunks to pinned host memory and unmaps them, keeping the addresses
 * reserved; restoring maps new chunks at the same addresses and copies the
 * bytes back, so pointers stored in device memory stay valid.  The same
 * addresses can be re-created in another process (mem_restore_at:
 * migration).  Small allocations share 2 MiB chunks.  Where the driver has
 * no VMM (D->have_vmm false), plain cuMemAlloc memory is used and cannot
 * be evicted.
 *
 * When physical memory runs out, the worker asks the rgpud parent for room
 * over the gate (room.c); the parent (arbiter.c) applies the policy:
 * `swap` evicts idle sessions whole (least recently used first, until
 * enough is free) to host memory, but never a session within its quantum
 * (a time on the GPU proportional to what swapping it costs, so swapping
 * cannot take most of the time: see arbiter.c),
 * `wait` queues the request in arrival order until memory is freed, `fail`
 * refuses.  A session that was evicted is restored before its next request
 * that may touch the GPU (mem_before_request).  Quotas are not this
 * module's business: callers charge them through the gate as before.
 *
 * Parent side: the policy, per-worker records (resident and swapped-out
 * bytes per GPU, reported by the workers), and the arbiter.
 */
#ifndef RGPUD_MEM_H
#define RGPUD_MEM_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct session;
struct metrics_session;

/* ---- worker side: allocations (space.c) ---- */

struct mem_info {
	uint64_t addr, size; /* what the session asked for */
	uint64_t ctx;        /* session handle of its context */
	unsigned dev;
	int resident;        /* 0: its bytes are in host memory (swapped out) */
	int movable;         /* 0: plain cuMemAlloc (driver without VMM) */
};

/* Allocates size bytes of device memory on dev for context ctx (current).
 * Restores the session first if it was swapped out.  A CUresult;
 * CUDA_ERROR_OUT_OF_MEMORY when no room could be made under the policy. */
int mem_alloc(struct session *s, uint64_t ctx, unsigned dev, uint64_t size, uint64_t *addr);
/* Frees the allocation starting at addr (resident or not).  A CUresult. */
int mem_free(struct session *s, uint64_t addr);
/* Calls fn for every allocation, in address order; stops at a nonzero
 * return and returns it. */
int mem_foreach(struct session *s, int (*fn)(const struct mem_info *, void *), void *arg);
/* Migration: makes an allocation of size bytes at exactly addr on dev for
 * context ctx and fills it with bytes (size of them; NULL: zeroes).  The
 * address must lie in this worker's reserved range and be free.
 * A CUresult. */
int mem_restore_at(struct session *s, uint64_t ctx, unsigned dev, uint64_t addr, uint64_t size,
		   const void *bytes);
/* The reserved range of dev's allocations (0 before the first one). */
uint64_t mem_range_base(struct session *s, unsigned dev, uint64_t *size);
/* Frees everything of context ctx (it is being destroyed). */
void mem_forget_ctx(struct session *s, uint64_t ctx);
/* Peer access (cuCtxEnablePeerAccess): device from's contexts may, or no
 * longer may, reach the session's memory on device owner; later blocks
 * on owner are mapped so too.  A CUresult. */
int mem_peer_access(struct session *s, unsigned owner, unsigned from, int enable);
/* Frees everything (session end). */
void mem_cleanup(struct session *s);

/* ---- worker side: memory handed over by reference (export.c) ---- */

/* The physical memory under the movable allocation at addr, put in the
 * parent's share registry for a restore by another worker of this rgpud
 * (a move between its GPUs): the token, and the mapping it covers
 * [*va, *va + *len), which holds [addr, addr + size).  0, or a CUresult
 * (not movable memory, or the driver cannot export it: send the bytes). */
int mem_export(struct session *s, uint64_t addr, uint8_t token[16], uint64_t *va,
	       uint64_t *len);
/* Takes every export out of the registry (the move failed or is over). */
void mem_export_drop(struct session *s);

/* ---- worker side: eviction (swap.c) ---- */

/* Copies every resident movable chunk to pinned host memory and unmaps it.
 * The caller has checked that no work of the session is queued or running.
 * *freed: device bytes given back.  A CUresult. */
int mem_evict(struct session *s, uint64_t *freed);
/* Maps and refills every evicted chunk (asking the parent for room); all
 * of them or none: a restore waiting for room holds nothing it restores. */
int mem_restore(struct session *s);
/* Prepares host copies of the session's resident chunks on dev in the
 * background (up to RGPUD_SWAP_KEEP, and up to limit more bytes unless 0),
 * so that an eviction expected soon copies at pinned speed instead of
 * first faulting in host memory. */
void mem_prepare_start(struct session *s, unsigned dev, uint64_t limit);
/* Bytes resident on the GPU and held in host memory, over all devices. */
void mem_usage(struct session *s, uint64_t *resident, uint64_t *swapped);
/* Swap statistics of this session: bytes and seconds of each direction. */
void mem_swap_stats(struct session *s, double *out_bytes, double *out_s, double *in_bytes,
		    double *in_s);

/* ---- worker side: talking to the parent (room.c) ---- */

/* Called before each request is served: restores a swapped-out session
 * when the request may touch the GPU.  0, or a CUresult the request then
 * fails with (its payload is skipped). */
int mem_before_request(struct session *s, unsigned op);
/* Called after each request: the session's last activity (for LRU). */
void mem_after_request(struct session *s);
/* Called when the main loop needs bytes from the client: waits until the
 * connection is readable, answering the parent's requests meanwhile. */
/* Between requests the worker waits for its client and, on this
 * descriptor (-1: none), for the parent's memory manager, whose questions
 * mem_parent_input() answers (session.c, session_wait_client). */
int mem_parent_fd(struct session *s);
void mem_parent_input(struct session *s);
/* A parent request that arrived while the worker waited for a reply of
 * its own (gate.c): answered "busy" at once. */
void mem_ctl_busy(const void *msg, size_t len);
/* Physical memory ran out on dev: asks the parent for room.  1: try again,
 * 0: give up (CUDA_ERROR_OUT_OF_MEMORY). */
int mem_ask_room(struct session *s, unsigned dev, uint64_t bytes);
/* A restore asks to come back with bytes on dev, the GPU having free
 * bytes free: memory just freed for another session's request (in its
 * quantum) is not free for it.  0: go ahead; 1: look at the free memory
 * and ask again; -1: give up (CUDA_ERROR_OUT_OF_MEMORY). */
int mem_admit(struct session *s, unsigned dev, uint64_t bytes, uint64_t free);
/* The parent's answer to a request for room from a worker that holds
 * memory an older waiting request needs (mem_ask_room evicts itself). */
#define MEM_ROOM_YIELD 1
/* MEMQ_ADMIT: not yet, look again */
#define MEM_ROOM_RETRY 2

/* The allocation that asked for room got it (or gave up). */
void mem_room_done(struct session *s, unsigned dev);
/* Tells the parent the session's resident and swapped-out bytes. */
void mem_report(struct session *s);

/* ---- the gate messages (gate.c carries them, room.c and arbiter.c
 * read them) ---- */

/* Sub-operations of a worker's G_MEM request. */
enum mem_gate_op {
	MEMQ_REPORT = 1, /* struct mem_q_report -> rc 0 */
	MEMQ_ROOM,       /* struct mem_q_room -> rc 0: retry, else give up */
	MEMQ_ROOM_DONE,  /* struct mem_q_room -> rc 0 */
	MEMQ_ANSWER,     /* struct mem_q_answer, no reply */
	MEMQ_ADMIT,      /* struct mem_q_admit -> 0: go, MEM_ROOM_RETRY,
			  * MEM_ROOM_YIELD, else give up (MEMQ_ROOM_DONE
			  * ends it, as a room request) */
};

struct mem_q_report {
	uint64_t resident[8], swapped[8]; /* per GPU, the first 8 */
	uint64_t resident_all, swapped_all;
	uint64_t ready[8];   /* resident bytes whose host copy is ready */
	/* this worker's latest measurements, bytes/s (0: none yet): copies
	 * out with host memory ready, host memory prepared, copies in */
	uint64_t out_bps, prep_bps, in_bps;
};
struct mem_q_room {
	uint64_t bytes;
};
struct mem_q_admit {
	uint64_t bytes, free;
};
struct mem_q_answer {
	uint64_t seq;
	uint32_t idle;   /* STATE: no work queued or running; EVICT: evicted */
	uint32_t pad;
	uint64_t idle_ms; /* how long it has been idle */
	uint64_t bytes;  /* STATE: resident on the GPU asked; EVICT: freed */
};

/* A request of the parent to a worker travels as a gate reply whose rc is
 * MEM_PARENT_MAGIC: limit = op << 32 | (seq & 0xffffffff)... see below. */
#define MEM_PARENT_MAGIC 0x4d454d50 /* "MEMP" */
/* STATE and EVICT are answered (MEMQ_ANSWER); PREPARE is not (it starts
 * mem_prepare_start; the next report says how far it got). */
enum mem_parent_op { MEMP_STATE = 1, MEMP_EVICT = 2, MEMP_PREPARE = 3 };
struct mem_parent_msg {
	int32_t rc;      /* MEM_PARENT_MAGIC */
	uint32_t op;
	uint64_t seq;
	uint64_t gpu;
	uint64_t bytes;  /* EVICT: how much is wanted (0: all of it);
			  * PREPARE: at most this much more (0: up to the cap) */
};

/* ---- parent side (arbiter.c) ---- */

enum mem_policy { MEM_POLICY_SWAP = 0, MEM_POLICY_WAIT, MEM_POLICY_FAIL };

/* "swap", "wait" or "fail" -> 0 and *p; -1 otherwise. */
int mem_policy_parse(const char *s, enum mem_policy *p);
const char *mem_policy_name(enum mem_policy p);
/* Set once at start-up, before any worker. wait_s: how long an allocation
 * may wait for room (0: not at all); quantum_ms: the least time a session
 * keeps its memory on a GPU once it got it (--memory-quantum; the quantum
 * is longer where swapping the session costs more: arbiter.c). */
void mem_parent_config(enum mem_policy p, unsigned wait_s, unsigned quantum_ms);
#define MEM_QUANTUM_DEFAULT_MS 1000

struct mem_worker;
/* One record per worker, from gate_serve's start to its end. */
struct mem_worker *mem_parent_open(int ctl_fd, struct metrics_session *ms);
void mem_parent_close(struct mem_worker *w);
/* Serialises what the parent sends a worker (gate replies and requests). */
pthread_mutex_t *mem_parent_send_lock(struct mem_worker *w);
/* bytes of a worker's memory were charged (refund 0) or refunded on gpu:
 * refunds wake allocations waiting for room. */
void mem_parent_charged(struct mem_worker *w, unsigned gpu, uint64_t bytes, int refund);
/* Serves a G_MEM request: the reply's rc, or MEM_NO_REPLY. */
#define MEM_NO_REPLY (-1000)
int mem_parent_request(struct mem_worker *w, unsigned op, unsigned gpu, const void *payload,
		       size_t len);

#endif
