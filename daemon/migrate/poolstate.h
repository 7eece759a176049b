/*
 * Stream-ordered pools in a session's captured state (poolstate.c).
 */
#ifndef RGPUD_MIGRATE_POOLSTATE_H
#define RGPUD_MIGRATE_POOLSTATE_H

#include <stddef.h>
#include <stdint.h>

struct session;

/* The requests that make the session's pools again, from their live
 * state, each payload as the client sends it: POOL_DEFAULT or
 * POOL_CREATE under the pool's id, POOL_SET_ATTR for attributes not at
 * their defaults, POOL_ACCESS for GPUs given access, then a POOL_ADOPT
 * per block (its memory goes as the MEMORY or PEER record of a cuMemAlloc
 * allocation, before these).  The high-water marks start again at the
 * current values.  Stops at a nonzero return of fn and returns it. */
int pool_each_request(struct session *s,
		      int (*fn)(void *arg, uint16_t op, uint64_t id, const uint8_t *p, size_t n),
		      void *arg);

#endif
