/* rgpud's side of the transfer layer (lib/xfer.h): the driver behind the
 * buffer-plus-event pool, and the two copy directions that the socket
 * handlers (ops_memory.c) and the shared-memory handlers (ops_shm.c) share.
 * A host-to-device chunk lands in a pool buffer and is copied to the GPU on
 * the caller's stream; a device-to-host copy is pipelined through pool
 * buffers by xfer_run.  A buffer returns to its pool when its event fires,
 * so an asynchronous copy never makes the session wait for its stream. */
#ifndef RGPUD_STAGE_H
#define RGPUD_STAGE_H

#include "proto.h"
#include "xfer.h"

#include <stddef.h>
#include <stdint.h>

struct session;

#define STAGE_MAX 64 /* 64 x RGPU_CHUNK_SIZE = 256 MiB pinned per session */

/* The driver's events, streams and pinned memory. */
extern const struct xfer_dev stage_dev;

/* The session's private pool (s->pool), set up on first use. */
struct xfer_pool *stage_pool(struct session *s);

/* The checks every copy starts with: ctx made current, the stream sid
 * resolved into *st, [dev, dev+n) the session's memory.  A CUresult. */
int stage_check(struct session *s, uint64_t ctx, uint64_t sid, uint64_t dev, uint64_t n,
		void **st);

/* One host-to-device chunk whose data is in buffer i of pool: queued on st;
 * with release a shared buffer goes back to the client when the GPU has
 * read it; with sync, waits for the copy.  A CUresult. */
int stage_htod(struct xfer_pool *pool, int i, uint64_t dst, size_t n, void *st, int release,
	       int sync);

/* Hands one device-to-host chunk (in buffer i) to the client: 0, or -1 when
 * the connection is lost. */
typedef int (*stage_send_fn)(struct session *s, const struct rgpu_hdr *h, struct xfer_pool *pool,
			     int i, size_t n, int more);

/* Hands on one chunk of device memory, in buffer i of pool (last: the
 * final one): 0, or -1 when its receiver is gone. */
typedef int (*stage_emit_fn)(void *arg, struct xfer_pool *pool, int i, size_t n, int last);

/* Device memory [src, src + size) out through pool, in RGPU_CHUNK_SIZE
 * chunks: chunk k+1 read from the GPU (on st) while chunk k is handed to
 * emit, each buffer kept until emit is done with it.  0, a CUresult (*at:
 * the offset of the chunk that failed), or XFER_LOST (emit said -1);
 * *queued as xfer_run says.  The one loop behind a client's device-to-host
 * copy and a migration's capture. */
int stage_out(struct xfer_pool *pool, uint64_t ctx, void *st, uint64_t src, uint64_t size,
	      stage_emit_fn emit, void *arg, int *queued, uint64_t *at);

/* A device-to-host copy of size bytes at src, pipelined through pool and
 * sent with send; rc: the checks' status (nonzero: only the error frame
 * goes).  Returns OP_REPLIED or OP_DROP. */
int stage_dtoh(struct session *s, const struct rgpu_hdr *h, struct xfer_pool *pool, uint64_t ctx,
	       void *st, uint64_t src, uint64_t size, stage_send_fn send, int rc);

/* A context is going away: forget its events. */
void stage_forget_ctx(struct session *s, uint64_t ctx);
void stage_free(struct session *s);

#endif
