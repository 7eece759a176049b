/*
 * Choosing GPUs for a job and reserving them on their servers.
 *
 * The choice reads only the snapshot (no server is contacted to decide);
 * then each chosen GPU is granted on its server.  A refusal (the snapshot
 * was stale, a server is down) skips that GPU, or that server, and the next
 * candidate is tried; if the request cannot be completed every grant made
 * so far is released, so a job never keeps part of what it asked for.
 */
#ifndef RGPU_GRES_SELECT_H
#define RGPU_GRES_SELECT_H

#include "cluster.h"
#include "policy.h"

#include <stddef.h>

/* How grants reach servers: the real one speaks LEASE_GRANT/RELEASE
 * (lease_rpc.h); tests and the benchmark use fakes. */
enum rg_grant_rc {
	RG_GRANT_OK = 0,
	RG_GRANT_REFUSED = -1,    /* that GPU cannot take it: try another */
	RG_GRANT_UNREACHABLE = -2 /* the server is gone: skip all its GPUs */
};
struct rg_backend {
	int (*grant)(void *ctx, const struct rg_server *s, const struct rg_gpu *g,
		     const struct rg_request *r, char *why, size_t whylen);
	/* Ends every lease of the job on s (LEASE_RELEASE is per job). */
	void (*release)(void *ctx, const struct rg_server *s, uint64_t job_id);
	void *ctx;
};

/* The best GPU for one more device of r, by the own-node-first rule and
 * the policy; NULL if none fits.  Pure: reads the view only. */
struct rg_gpu *rg_pick(struct rg_cluster *c, const struct rg_request *r,
		       const struct rg_policy *p);

/* Chooses and grants r->count GPUs; out[i] (indices into c->gpu) in device
 * order.  0, or -1 with why (nothing left reserved).  The view is updated
 * with what was granted. */
int rg_reserve(struct rg_cluster *c, const struct rg_request *r, const struct rg_policy *p,
	       const struct rg_backend *b, uint32_t *out, char *why, size_t whylen);

/* Why no GPU fits r, in a sentence (for the job's error). */
void rg_explain(const struct rg_cluster *c, const struct rg_request *r, char *why, size_t len);

#endif
