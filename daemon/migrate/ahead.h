/*
 * A session's state read ahead while it is restored (ahead.c).
 *
 * Restoring re-creates objects first (contexts, libraries: a third of a
 * second for a PyTorch session on an H100 host) and copies memory in
 * after; read by the restoring thread alone, the stream stalls while it
 * re-creates, and the sender with it.  A thread reads the SESSION_RESTORE
 * frames into host buffers meanwhile (bounded), so the stream moves at the
 * network's speed and the restore takes what has arrived.
 */
#ifndef RGPUD_MIGRATE_AHEAD_H
#define RGPUD_MIGRATE_AHEAD_H

#include "proto.h"

#include <stddef.h>

struct session;
struct ahead;

/* Reserves the reader's address range: called by every worker before its
 * driver maps anything (ahead.c says why). */
void ahead_reserve(void);

/* Starts reading the frames that follow first (a SESSION_RESTORE request
 * whose 8-byte prefix has been read: left bytes of its stream remain).
 * NULL when no thread can run: then the caller reads the stream itself. */
struct ahead *ahead_start(struct session *s, const struct rgpu_hdr *first, size_t left);

/* snap_io.read: n bytes of the stream, in order.  0, or -1 when the
 * stream ended early or a frame was malformed. */
int ahead_read(void *arg, void *p, size_t n);

/* After the restore: stops the reader and frees everything.  *last: the
 * last frame read (the reply answers it).  0 when the stream ended exactly
 * where the restore did (its last frame, nothing left over), else -1. */
int ahead_finish(struct ahead *a, int restored, struct rgpu_hdr *last);

#endif
