/* RGPU_STATS=1: counts of what crossed the connection, and where the
 * program waited for a reply (stats.c).  Off by default; when off each
 * hook is one predictable branch. */
#ifndef RGPU_CLIENT_STATS_H
#define RGPU_CLIENT_STATS_H

#include <stddef.h>
#include <stdint.h>

extern int rc_stats_on;

/* reads RGPU_STATS (cuInit, once the settings are loaded) */
void rc_stats_init(void);
/* one request sent: sync when its caller waits for a reply */
void rc_stats_request(unsigned op, int sync, size_t bytes);
/* one write of requests to a connection */
void rc_stats_write(void);
/* bytes read from a connection (frames and their payloads) */
void rc_stats_received(size_t bytes);
/* time a caller spent waiting for a reply to op */
void rc_stats_wait(unsigned op, uint64_t ns);
/* a call answered from the client's own state instead of a round trip */
void rc_stats_local(unsigned op);
/* a copy between GPUs of two servers: from one rgpud to the other, or
 * relayed through this process */
void rc_stats_peer(int relayed, size_t bytes);
/* a wait for the GPU's reply (rpc.c, RGPU_SYNC_SPIN_US): the reply was
 * there already, a spin caught it, or the thread then slept */
enum rc_sync_wait { RC_WAIT_READY, RC_WAIT_SPUN, RC_WAIT_SLEPT };
void rc_stats_sync_wait(enum rc_sync_wait how);

#endif
