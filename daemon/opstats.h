/*
 * RGPUD_OP_STATS=1: where a session's worker spent its time, logged when
 * the session ends (opstats.c): per kind of request, how many and how long
 * their handling took (the driver's call included), and how long the
 * worker waited for its client.  A diagnosis of rgpud's own overhead
 * against the driver's (rgpud(8)).
 */
#ifndef RGPUD_OPSTATS_H
#define RGPUD_OPSTATS_H

#include <stdint.h>

struct opstats;

/* NULL unless RGPUD_OP_STATS=1 (then nothing is measured). */
struct opstats *opstats_open(void);
void opstats_idle(struct opstats *o, uint64_t ns);
void opstats_op(struct opstats *o, unsigned op, uint64_t ns);
/* Of that handling, the time inside the driver's call (where a handler
 * measures it: launches); the rest is rgpud's own. */
void opstats_driver(struct opstats *o, unsigned op, uint64_t ns);
/* A spin for the client's next call after a sync (session.c): caught it
 * (1) or ran out (0). */
void opstats_spin(struct opstats *o, int burst, int caught);
/* The input was found empty: the thread waits (or spun first). */
void opstats_wait(struct opstats *o);
/* Logs the session's line (if it served any request) and frees o. */
void opstats_close(struct opstats *o, const char *name);
/* Frees o unlogged (the parent's part of a connection: its HELLO). */
void opstats_discard(struct opstats *o);

#endif
