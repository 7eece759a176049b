#include "policy.h"

#include <string.h>

static double frac(uint64_t part, uint64_t whole)
{
	return whole ? (double)part / (double)whole : 1.0;
}

/* Spread: the least loaded server, then its least loaded GPU.  Whole GPUs
 * of one job land on different nodes, so they do not share a node's NIC. */
static double least_loaded(const struct rg_cluster *c, const struct rg_gpu *g,
			   const struct rg_request *r)
{
	const struct rg_server *s = &c->srv[g->server];
	return frac(s->reserved, s->total) + 0.01 * frac(g->reserved, g->total);
}

/* Best fit: the GPU left with the least free memory, then the busiest
 * server, so idle GPUs and nodes stay whole for whole-GPU jobs. */
static double pack(const struct rg_cluster *c, const struct rg_gpu *g,
		   const struct rg_request *r)
{
	const struct rg_server *s = &c->srv[g->server];
	uint64_t after = g->total - g->reserved - rg_request_cost(g, r);
	return frac(after, g->total) + 0.01 * (1.0 - frac(s->reserved, s->total));
}

/* Whole GPUs spread (bandwidth), slices pack (whole GPUs stay free). */
static double balanced(const struct rg_cluster *c, const struct rg_gpu *g,
		       const struct rg_request *r)
{
	return r->mem ? pack(c, g, r) : least_loaded(c, g, r);
}

static const struct rg_policy p_balanced = {
	"balanced", "whole GPUs spread over nodes, slices packed onto shared GPUs", balanced
};
static const struct rg_policy p_least = {
	"least-loaded", "the least loaded node and GPU first", least_loaded
};
static const struct rg_policy p_pack = {
	"pack", "fill shared GPUs and busy nodes first (best fit)", pack
};

const struct rg_policy *const rg_policies[] = { &p_balanced, &p_least, &p_pack, NULL };

const struct rg_policy *rg_policy_find(const char *name)
{
	if (!name || !*name)
		return &p_balanced;
	for (int i = 0; rg_policies[i]; i++)
		if (!strcmp(rg_policies[i]->name, name))
			return rg_policies[i];
	return NULL;
}
