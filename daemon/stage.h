/* Pinned staging buffers for bulk copies over a socket.  A host-to-device
 * chunk lands in a pool buffer and is copied to the GPU on the caller's
 * stream; a device-to-host chunk is copied into one and sent from it.  A
 * buffer returns to the pool when its event fires, so an asynchronous copy
 * never makes the session wait for its stream. */
#ifndef RGPUD_STAGE_H
#define RGPUD_STAGE_H

#include <stdint.h>

struct session;

#define STAGE_MAX 64 /* 64 x RGPU_CHUNK_SIZE = 256 MiB pinned per session */

struct stage_buf {
	void *p;
	void *ev;     /* CUevent recorded after the copy out of p */
	uint64_t ctx; /* context the event belongs to */
	int busy;
	int pinned;
};

struct stage_pool {
	struct stage_buf b[STAGE_MAX];
	int n;
	int next; /* round robin start */
};

/* A free buffer of RGPU_CHUNK_SIZE for the current context ctx: its index,
 * or -1 with *rc set. */
int stage_get(struct session *s, uint64_t ctx, int *rc);
/* Marks buffer i in use until the work queued so far on st is done. */
int stage_put(struct session *s, int i, void *st);
/* Waits until buffer i is free again. */
int stage_wait(struct session *s, int i);
/* A context is going away: forget its events. */
void stage_forget_ctx(struct session *s, uint64_t ctx);
void stage_free(struct session *s);

#endif
