/*
 * The transfer layer: how bulk data moves between a client buffer and GPU
 * memory, shared by the client and rgpud.
 *
 * Two pieces, each written once:
 *
 *  - xfer_run, the one chunk-pipelining loop.  A copy is cut into chunks;
 *    each chunk is staged (a buffer filled or a DMA queued) and then emitted
 *    (handed to the other side).  With lookahead 1 chunk k+1 is staged
 *    before chunk k is emitted, so the wire and the GPU overlap (rgpud's
 *    device-to-host copies); with lookahead 0 each chunk goes as soon as it
 *    is staged (the client's host-to-device copies, back to back).
 *
 *  - struct xfer_pool, the one buffer-plus-event pool.  A buffer is busy
 *    from the moment work on it is queued on a stream until the event
 *    recorded behind that work fires; it is then free for reuse without the
 *    stream ever being waited for, unless its owner keeps it (a
 *    device-to-host chunk is read after its copy, when it is sent).  A private pool (socket staging) owns
 *    pinned host memory and grows on demand; a shared pool (the same-host
 *    staging ring) lays its buffers over memory the client maps too, with a
 *    per-buffer flag in that memory saying which side holds it.
 *
 * The providers built on these (the client's socket-staged, shared-memory
 * ring and shared-memory direct paths; the verbs transport carries the
 * socket-staged one) sit behind struct rc_xfer_provider in the client
 * (client/xfer_client.h); rgpud's side is daemon/stage.c, used by the
 * handlers in daemon/ops_memory.c and ops_shm.c.
 * Nothing here knows CUDA: the GPU side comes in through struct xfer_dev.
 */
#ifndef RGPU_XFER_H
#define RGPU_XFER_H

#include <stddef.h>
#include <stdint.h>

/* ---- the chunk loop ---- */

struct xfer_chunk {
	uint64_t off; /* within the whole copy */
	size_t len;
	int buf;      /* the stage step's buffer, or -1 */
	int queued;   /* GPU work was queued for it */
};

struct xfer_steps {
	/* Begins chunk c (c->off, c->len set): 0 or an error status. */
	int (*stage)(void *arg, struct xfer_chunk *c);
	/* Completes chunk c and hands it on (last: the final chunk).  0, an
	 * error status, or XFER_LOST when the connection is gone. */
	int (*emit)(void *arg, struct xfer_chunk *c, int last);
	/* After a failure: gives back a chunk that was staged and not emitted
	 * (NULL: nothing to give back). */
	void (*abandon)(void *arg, struct xfer_chunk *c);
};

#define XFER_LOST (-1)
/* out of host memory (CUDA_ERROR_OUT_OF_MEMORY's value; rgpud checks) */
#define XFER_ERR_NOMEM 2

/* Runs the whole copy of total bytes in pieces of chunk bytes.  Returns 0,
 * the first error status (every staged chunk then abandoned), or
 * XFER_LOST.  *queued tells whether any GPU work was queued, so that a
 * caller cleaning up after an error waits for a stream only when it was
 * used. */
int xfer_run(uint64_t total, size_t chunk, int lookahead, const struct xfer_steps *s,
	     void *arg, int *queued);

/* ---- the buffer-plus-event pool ---- */

/* The GPU side, from the driver (rgpud) or a test double.  Statuses are
 * CUresult values: 0 success. */
struct xfer_dev {
	int (*event_create)(void **ev);
	void (*event_destroy)(void *ev);
	int (*event_record)(void *ev, void *stream);
	int (*event_query)(void *ev); /* 0: the work before it is done */
	int (*event_sync)(void *ev);
	/* pinned host memory: 0, or an error (then plain memory serves) */
	int (*host_alloc)(void **p, size_t n);
	void (*host_free)(void *p);
};

#define XFER_POOL_MAX 64

struct xfer_buf {
	uint8_t *p;
	void *ev;      /* recorded behind the last work on p */
	uint64_t ctx;  /* the context ev belongs to */
	uint64_t seq;  /* 0: no work in flight; else the order it was queued */
	int release;   /* shared pools: hand back to the peer when done */
	int kept;      /* its owner still reads it: not free when work is done */
	int owned;     /* 1 pinned, 2 plain memory (private pools) */
};

/* Called while a shared pool waits for the peer to hand a buffer back
 * (after waited_ms): 0 to go on waiting, else the status to give up with
 * (XFER_LOST: the peer is gone).  It sleeps a little itself. */
typedef int (*xfer_idle_fn)(void *arg, unsigned waited_ms);

struct xfer_pool {
	const struct xfer_dev *dev;
	struct xfer_buf b[XFER_POOL_MAX];
	int n, max, next;
	size_t size;             /* bytes per buffer */
	uint64_t seq;
	uint32_t *shared;        /* shared pools: per-buffer flag, 0 free */
	xfer_idle_fn idle;
	void *idle_arg;
	int warned;
};

/* A private pool of up to max buffers of size bytes, allocated on demand. */
void xfer_pool_init(struct xfer_pool *p, const struct xfer_dev *dev, int max, size_t size);
/* A shared pool over n buffers at base (buffer i at base + i * size);
 * flags[i] is the shared flag of buffer i. */
void xfer_pool_init_shared(struct xfer_pool *p, const struct xfer_dev *dev, uint8_t *base,
			   int n, size_t size, uint32_t *flags, xfer_idle_fn idle, void *arg);
/* A free buffer with an event of context ctx: its index, or -1 with *rc
 * set (a shared pool marks it taken in the shared flag). */
int xfer_pool_get(struct xfer_pool *p, uint64_t ctx, int *rc);
/* Readies buffer i (chosen by the peer) for work in context ctx. */
int xfer_pool_claim(struct xfer_pool *p, int i, uint64_t ctx);
/* Buffer i is busy until the work queued so far on stream is done; with
 * release, a shared buffer goes back to the peer then. */
int xfer_pool_put(struct xfer_pool *p, int i, void *stream, int release);
/* Buffer i stays taken after its work is done, until xfer_pool_unkeep or
 * xfer_pool_drop: the data a device-to-host copy left there is still to be
 * sent while later chunks take buffers. */
void xfer_pool_keep(struct xfer_pool *p, int i);
void xfer_pool_unkeep(struct xfer_pool *p, int i);
/* Waits until buffer i has no work in flight. */
int xfer_pool_wait(struct xfer_pool *p, int i);
/* Frees every buffer whose work is done. */
void xfer_pool_reap(struct xfer_pool *p);
/* Returns once some buffer is free or about to be handed back (waits for
 * the oldest work in flight if need be). */
int xfer_pool_wait_any(struct xfer_pool *p);
/* Gives buffer i up after a failure: no work of it is in flight. */
void xfer_pool_drop(struct xfer_pool *p, int i);
/* A context is going away: waits for its work, destroys its events. */
void xfer_pool_forget_ctx(struct xfer_pool *p, uint64_t ctx);
/* Waits for all work, destroys every event, frees owned memory. */
void xfer_pool_free(struct xfer_pool *p);

#endif
