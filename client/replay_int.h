/* Internals shared by replay.c and standby.c (replay.h is the interface). */
#ifndef RGPU_CLIENT_REPLAY_INT_H
#define RGPU_CLIENT_REPLAY_INT_H

#include "replay.h"
#include "wire.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define RC_TOKEN_LEN 16
#define RC_MAX_STANDBY 16

struct rc_logent {
	uint64_t id;
	uint16_t op;
	uint32_t flags;
	uint64_t dptr; /* MEM_ALLOC(_ASYNC): the address it returned, once known */
	size_t len;    /* all of the payload: data's, then ext's */
	uint8_t *data; /* owned */
	/* a synchronous copy's data, still the caller's (rc_replay_settle) */
	const uint8_t *ext;
	size_t ext_len;
};

struct rc_standby {
	char addr[300]; /* host:port */
	int gpu;        /* -1: the GPU index the session had */
};

struct rc_replay {
	pthread_mutex_t lock;
	struct rc_logent *v; /* in id order */
	size_t n, cap, bytes;
	size_t borrowed;     /* entries with ext */
	int lost;            /* a request could not be kept */
	int keep;            /* standby: keep everything since the checkpoint */
	/* the MOVED notice */
	int moved;
	char moved_addr[300];
	uint32_t moved_gpu;
	uint8_t token[RC_TOKEN_LEN];
	uint64_t moved_last;
	uint64_t moved_ns; /* when the notice came (the log says how long re-attaching took) */
	unsigned recoveries;
	/* connections replaced by a recovery: a thread may still be about to
	 * read from one (it fails and finds c->c changed); closed once older
	 * than RC_OLD_CONNS recoveries */
#define RC_OLD_CONNS 8
	struct rgpu_conn *old[RC_OLD_CONNS];
	/* standby (standby.c) */
	struct rc_standby standby[RC_MAX_STANDBY];
	int nstandby;
	unsigned interval_s;  /* the server's checkpoint interval (0: none) */
	double last_ckpt;     /* monotonic seconds */
	uint8_t *ckpt;        /* the last checkpoint's state stream */
	size_t ckpt_len;
	uint64_t ckpt_id;     /* its SESSION_SAVE's request id */
	int ckpt_failed;      /* the server refused one: no more tries */
	double ckpt_retry;    /* deferred (something under way): not before then */
	int ckpt_busy;
};

void rc_standby_setup(struct rc_conn *c);
void rc_replay_trim(struct rc_replay *rp, uint64_t id);
int rc_replay_grow(struct rc_replay *rp);
int rc_xchg_reply(struct rgpu_conn *nc, uint16_t op, int32_t *st, uint8_t **buf, struct rd *r);
int rc_xchg_hello(struct rc_conn *c, struct rgpu_conn *nc, const uint8_t *token, char *why,
		  size_t wl);
struct rgpu_conn *rc_xchg_connect(const char *addr, char *why, size_t wl);
int rc_split_addr(const char *a, char *host, size_t hn, unsigned *port);

#endif
