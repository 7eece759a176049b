/*
 * The cluster's load, cached: the selector decides from this file instead
 * of asking every server for every job.  It is refreshed (every server
 * polled once with LEASE_LIST, in parallel) when older than a TTL, and
 * updated in place with each grant made from this node, so jobs started
 * here in a row see each other.  JSON, written through a temporary file and
 * rename, world-readable (sbatch validates sizes against it).
 */
#ifndef RGPU_GRES_SNAPSHOT_H
#define RGPU_GRES_SNAPSHOT_H

#include "cluster.h"

/* A server to poll. */
struct rg_server_addr {
	char node[64];
	char host[128];
	unsigned port;
};

/* Loads path into c (initialised by the caller).  0: loaded; -1: missing
 * or unreadable (c left empty). */
int rg_snapshot_load(const char *path, struct rg_cluster *c);
/* 0 or -1 with err. */
int rg_snapshot_save(const char *path, const struct rg_cluster *c, char *err, size_t errlen);

/* Polls every server (up to `parallel` at once, each bounded by
 * timeout_ms) and builds c from the answers; a server that does not answer
 * is kept, marked down, with no GPUs.  Returns how many answered. */
int rg_snapshot_poll(const struct rg_server_addr *addrs, size_t n, int timeout_ms,
		     int parallel, struct rg_cluster *c);

#endif
