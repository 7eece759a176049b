/*
 * rgpu's stream-ordered pools (cuMemAllocAsync, cuMemFreeAsync): each
 * allocation is a block of the memory manager (mem.h), a session
 * allocation charged to the quota like cuMemAlloc memory, at an address
 * in the worker's reserved range.  So pool memory is swapped out with its
 * session, and migration and recovery re-create it at the same addresses
 * (the driver's pools hand out addresses of their own, which no other
 * process can have again).
 *
 * A free is stream-ordered: the block waits (PB_PENDING, an event
 * recorded on the stream) until the stream passes the free, then is
 * cached in its pool (PB_FREE).  An allocation takes, in this order, a
 * cached block of its size class, a pending block freed on the same
 * stream (stream order makes it safe), a pending block of another stream
 * behind a dependency on its free (the pool's
 * CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, on by default), and
 * only then new memory.  Cached memory above the pool's release threshold
 * is given back at synchronisations that reach the server, at a trim, and
 * whenever new memory does not fit.  The other two reuse attributes are
 * kept and answered but change nothing: a cached block's free is done, so
 * reusing it is always safe.
 */
#ifndef RGPUD_MEM_POOL_H
#define RGPUD_MEM_POOL_H

#include "../driver.h"

#include <stdint.h>

struct session;
struct pool;

enum pb_state { PB_USED, PB_PENDING, PB_FREE };

struct pblock {
	uint64_t addr, size;    /* size: the allocation's size class */
	uint64_t ctx;           /* the session context it was allocated in */
	struct pool *pool;      /* NULL: its pool was destroyed (freed for good) */
	unsigned gpu;
	enum pb_state state;
	CUevent ev;             /* recorded at the free */
	uint64_t ev_ctx;        /* the context ev belongs to */
	uint64_t sid, sctx;     /* the stream freed on: handle, its context */
};

/* An allocation of size bytes from pl for context ctx (current) in stream
 * order on stream st (session handle sid); at nonzero: exactly there (a
 * replay of one the client holds).  A CUresult. */
int pb_alloc(struct session *s, struct pool *pl, uint64_t ctx, uint64_t sid, CUstream st,
	     uint64_t size, uint64_t at, uint64_t *addr);
/* cuMemFreeAsync of the block at addr on stream st (captured: refused,
 * a graph cannot free memory made outside it here): a CUresult, or -1
 * when addr is no block. */
int pb_free_async(struct session *s, uint64_t addr, uint64_t ctx, uint64_t sid, CUstream st,
		  int captured);
/* cuMemFree of the block at addr: given back now; a CUresult, or -1. */
int pb_free_now(struct session *s, uint64_t addr);
/* Pending blocks whose free is done become cached (those of a destroyed
 * pool are given back). */
void pb_sweep(struct session *s);
/* A synchronisation: what the pools cache above their thresholds goes.
 * (One the waiter thread answered sets s->pools_sync_due: the session's
 * next requests call this until no wait is left.) */
void pb_synced(struct session *s);
/* Gives back pl's cached memory until it reserves keep bytes or less. */
void pb_trim(struct session *s, struct pool *pl, uint64_t keep);
/* pl is being destroyed: its cached and pending blocks go (after their
 * frees), the ones in use stay until freed. */
void pb_pool_gone(struct session *s, struct pool *pl);
/* Context ctx is being destroyed (its allocations go with it). */
void pb_forget_ctx(struct session *s, uint64_t ctx);
/* A restore: the session allocation at addr (size bytes, made by the
 * state's MEMORY record) becomes a block of pl (NULL: of a destroyed
 * pool), in use or cached.  A CUresult. */
int pb_adopt(struct session *s, struct pool *pl, uint64_t addr, uint64_t size, int used);
/* Session end: the blocks' records and events (their memory goes with
 * the session's allocations). */
void pb_cleanup(struct session *s);

#endif
