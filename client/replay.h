/*
 * Sessions that survive their server (docs/design.md, "Migration").
 *
 * replay.c: every request sent on a TCP connection is kept until the
 * server has served it (a reply to a later request proves that: requests
 * are served in order), so a session that moves (MOVED notice) or whose
 * server dies can be re-attached elsewhere and the unserved requests sent
 * again, with their ids, so their callers get their replies as if nothing
 * had happened.
 *
 * standby.c: with RGPU_STANDBY, the session is checkpointed to this
 * process (SESSION_SAVE) at the interval the server's administrator chose,
 * the requests since are kept, and when the server dies the session is
 * restored on a standby server (SESSION_RESTORE) and they are replayed.
 */
#ifndef RGPU_CLIENT_REPLAY_H
#define RGPU_CLIENT_REPLAY_H

#include <stddef.h>
#include <stdint.h>

struct rc_conn;
struct rgpu_conn;

/* After the handshake (init.c): starts keeping requests on c (TCP only),
 * and checkpoints when RGPU_STANDBY names standby servers. */
void rc_replay_setup(struct rc_conn *c);
/* rpc.c, c->lock held: a request frame as it goes out.  borrow: b stays
 * the caller's, who calls rc_replay_settle before it may change (a
 * synchronous copy's data: copying 4 MiB chunks into the log cost
 * three quarters of host-to-device bandwidth over TCP). */
void rc_replay_log(struct rc_conn *c, uint64_t id, uint16_t op, uint32_t flags, const void *a,
		   size_t alen, const void *b, size_t blen, int borrow);
/* Whether requests on c are kept past their reply, until a checkpoint
 * (RGPU_STANDBY): a recovery replays them on their own, so each must
 * carry its data (peer_remote.c relays copies between servers then). */
int rc_replay_keeps(struct rc_conn *c);
/* Copies into the log whatever borrowed data is still kept (none once
 * served, unless a standby keeps it until the next checkpoint). */
void rc_replay_settle(struct rc_conn *c);
/* rpc.c: a reply to request id arrived (every request up to id was served). */
void rc_replay_served(struct rc_conn *c, uint64_t id);
/* rpc.c: a successful MEM_ALLOC's address (a recovery re-creates it there). */
void rc_replay_alloc(struct rc_conn *c, uint64_t id, uint64_t dptr);
/* rpc.c: the MOVED notice (len payload bytes follow on the connection). */
int rc_replay_moved(struct rc_conn *c, const uint8_t *payload, uint32_t len);
/* rpc.c: the connection failed at a frame boundary: re-attach the session
 * (moved) or restore it on a standby, then send again what was not served.
 * have_lock: the caller holds c->lock.  0: carry on (c->c is the new
 * connection); -1: nothing to recover, fail as before. */
int rc_replay_recover(struct rc_conn *c, int have_lock, struct rgpu_conn *failed);
/* rpc.c, after a synchronising call returned (c->lock not held): takes a
 * checkpoint when one is due; 1 when it did (the thread's reply buffer
 * was reused). */
int rc_standby_tick(struct rc_conn *c);

/* Set by init.c: the session on c now runs on the server's GPU gpu (a
 * move to another GPU): the devices on c are renamed. */
extern void (*rc_replay_gpu_moved)(struct rc_conn *c, unsigned gpu);

/* standby.c, for replay.c */
struct rc_replay;
/* the checkpoint interval announced in HELLO's reply */
void rc_standby_set_interval(struct rc_conn *c, uint32_t seconds);
/* Restores the last checkpoint on a standby over a fresh connection *out
 * (HELLO done), 0; or -1 with why[]. */
int rc_standby_restore(struct rc_conn *c, struct rgpu_conn **out, char *addr, size_t addrlen,
		       uint64_t *base_id, char *why, size_t whylen);

#endif
