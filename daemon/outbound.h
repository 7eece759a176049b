/*
 * Connections a session's worker opens to another rgpud, as the session's
 * own user and job (its munge credential, so the other rgpud applies that
 * job's leases and owner checks): a move (migrate/out.c) and a peer copy
 * between two servers (ops_peer_remote.c).
 */
#ifndef RGPUD_OUTBOUND_H
#define RGPUD_OUTBOUND_H

#include "transport.h"
#include "wire.h"

#include <stdint.h>

struct session;

#define OUTBOUND_TOKEN_LEN 16

/* Connects to host:port and says HELLO as client_name, with token (the
 * 16 bytes a parked session waits for) unless NULL.  The connection, its
 * rgpud's instance in *instance (0: not told); or NULL with why[], and
 * *refused 1 when that rgpud answered with a refusal (the token unknown
 * there yet, or not this job's). */
struct rgpu_conn *outbound_hello(struct session *s, const char *host, unsigned port,
				 const char *client_name, const uint8_t *token, uint64_t *instance,
				 int *refused, char *why, size_t whylen);

/* Reads one reply frame of op (at most 1 MiB) into *buf (the caller frees
 * it): its status in *st, its fields in *r.  0, or -1. */
int outbound_reply(struct rgpu_conn *c, uint16_t op, uint8_t **buf, struct rd *r, int32_t *st);

#endif
