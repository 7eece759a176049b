/*
 * Synchronising calls (CTX_SYNC, STREAM_SYNC, EVENT_SYNC) answered off the
 * session's main loop.  The main loop resolves the handles and hands the
 * wait to a small pool of waiter threads; each makes the context current,
 * waits in the driver, forwards what kernels printed and sends the reply
 * (under the session's send lock), while the main loop goes on serving the
 * client's other threads.  Replies to synchronising requests may therefore
 * overtake replies to later requests (lib/proto.h).
 */
#ifndef RGPUD_WAITER_H
#define RGPUD_WAITER_H

#include "driver.h"
#include "frame.h"

#include <stdint.h>

struct session;

enum wait_kind { WAIT_CTX, WAIT_STREAM, WAIT_EVENT };

/* Queues the wait; the reply's status is the wait's result, or else
 * deferred (the session's deferred error that this sync reports).
 * 0, or -1 when no waiter can take it (the caller waits inline). */
int waiter_post(struct session *s, const struct rgpu_hdr *h, enum wait_kind kind,
		CUcontext ctx, void *obj, int32_t deferred);
/* Queues a watch (EVENT_RECORD_WATCH): once the event obj has completed,
 * sends EVENT_DONE (handle, seq) to the client.  0, or -1 (no thread). */
int waiter_post_notice(struct session *s, CUcontext ctx, void *obj, uint64_t handle,
		       uint64_t seq);
/* Returns once no wait is queued or running (before an object a wait
 * may use is destroyed).  The caller must not hold the send lock. */
void waiter_drain(struct session *s);
/* Waits queued or running (the memory manager's idleness test). */
unsigned waiter_busy(struct session *s);
/* Drains, then ends the threads (session end). */
void waiter_stop(struct session *s);

#endif
