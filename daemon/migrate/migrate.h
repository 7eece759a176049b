/*
 * Migration and recovery: what the rest of rgpud calls (docs/design.md,
 * "Migration").  The state stream is defined in snapshot.h.
 *
 * Moving a session to another server (or GPU): `rgpu migrate` asks the
 * source parent (MIGRATE, admin); the parent orders each chosen worker
 * over its migration channel; the worker drains, connects to the target
 * rgpud as the session's own user (its munge credential, so the target
 * applies that job's leases and quotas), streams its state there
 * (SESSION_RESTORE, mode 1), and on success tells its client where the
 * session went (MOVED) and ends.  The target's worker, restored, waits
 * (parked in its parent) for the client, which attaches with HELLO and the
 * token and sends again what was not served.
 */
#ifndef RGPUD_MIGRATE_H
#define RGPUD_MIGRATE_H

#include <stddef.h>
#include <stdint.h>

#define MIGRATE_TOKEN_LEN 16
/* how long a restored session waits for its client to attach */
#define MIGRATE_PARK_S 60
/* how long a client attaching waits for its restored session to park */
#define MIGRATE_ATTACH_WAIT_S 5
/* how long a parent waits for one worker to move its session */
#define MIGRATE_ORDER_S 600

struct session;
struct rgpud_principal;
struct rd;
struct wbuf;

/* how long a target may take to re-create objects sent ahead */
#define MIGRATE_AHEAD_S 60

/* ---- worker side (out.c) ---- */
/* Serves one order from the parent: 1 when the session has moved (the
 * caller ends it), 0 when it stays here (the reason went to the parent) or
 * when its objects went ahead (RGPUD_MIGRATE_AHEAD=1: s->move, the session
 * goes on until migrate_ahead_fd is readable or its timeout passes). */
int migrate_serve_order(struct session *s);
/* A move under way: the descriptor to poll with the client's, and how
 * long (ms) until it is due; -1 when none. */
int migrate_ahead_fd(struct session *s, int *timeout_ms);
/* The target is ready (or the time is up): pauses the session and sends
 * the rest.  1 when the session has moved, 0 when it stays. */
int migrate_serve_ahead(struct session *s);
/* The session ends with a move under way: dropped. */
void migrate_ahead_drop(struct session *s);
/* After a restore in mode 1: waits, through the parent, for the client to
 * attach, and serves it from then on.  0, or -1 (nobody came).  Or in two
 * halves: the parent expects the client from gate_park_begin on (the
 * client's HELLO is answered meanwhile), migrate_park_end takes its
 * connection. */
int migrate_park(struct session *s, const uint8_t token[MIGRATE_TOKEN_LEN]);
int migrate_park_end(struct session *s);

/* ---- parent side (parent.c) ---- */
/* MIGRATE from an admin's session. A status, out: its reply fields. */
int migrate_parent_order(const struct rgpud_principal *who, struct rd *r, struct wbuf *out);
/* A worker's G_PARK: waits up to seconds for the connection whose HELLO
 * names token (the moved session's client, or a peer copy's other rgpud);
 * its socket, or -1. */
int migrate_parent_park(const struct rgpud_principal *who, const uint8_t *token, size_t n,
			const char *name, unsigned seconds);
/* HELLO with a token: whether a parked session of this principal waits
 * for it (0) or not (-1, why[] says). */
int migrate_parent_attach_check(const struct rgpud_principal *who, const uint8_t *token,
				char *why, size_t whylen);
/* After the HELLO reply: hands the client's socket fd to the parked
 * worker (the callee dups it).  0, or -1 (it went away meanwhile). */
int migrate_parent_attach(const uint8_t *token, int fd);

/* gate.c: the worker's request to wait (seconds, 0: MIGRATE_PARK_S, at
 * most that) for the connection that names token in its HELLO, whose
 * socket comes back with the reply (SCM_RIGHTS).  The fd, or -1. */
int gate_park(const uint8_t token[MIGRATE_TOKEN_LEN], unsigned seconds);
/* the same in two halves (nothing else may go through the gate between
 * them): the request (0, or -1), then the reply (the fd, or -1) */
int gate_park_begin(const uint8_t token[MIGRATE_TOKEN_LEN], unsigned seconds);
int gate_park_end(void);

/* session.c hooks */
void journal_free(struct session *s);
void memif_cleanup(struct session *s);

/* ops (dispatch.c) */
struct rgpu_hdr;
int op_session_save(struct session *, const struct rgpu_hdr *, struct rd *, struct wbuf *);
int op_session_restore(struct session *, const struct rgpu_hdr *, struct rd *, struct wbuf *);
int op_mem_alloc_at(struct session *, const struct rgpu_hdr *, struct rd *, struct wbuf *);

#endif
