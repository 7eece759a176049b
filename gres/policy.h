/*
 * Placement policies: which of the GPUs that fit a request is best.  The
 * selector (select.h) always puts the job's own node first; a policy only
 * orders the rest.  Add one by writing a cost function and listing it in
 * policy.c; plugstack.conf picks it by name (policy=...).
 */
#ifndef RGPU_GRES_POLICY_H
#define RGPU_GRES_POLICY_H

#include "cluster.h"

struct rg_policy {
	const char *name;
	const char *summary;
	/* Lower is better.  Called only for GPUs that fit the request. */
	double (*cost)(const struct rg_cluster *c, const struct rg_gpu *g,
		       const struct rg_request *r);
};

/* NULL or "" gives the default ("balanced"); NULL if the name is unknown. */
const struct rg_policy *rg_policy_find(const char *name);
/* NULL-terminated, for help texts. */
extern const struct rg_policy *const rg_policies[];

#endif
