#include "select.h"
#include "size.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rg_gpu *rg_pick(struct rg_cluster *c, const struct rg_request *r,
		       const struct rg_policy *p)
{
	struct rg_gpu *best = NULL;
	int best_local = 0;
	double best_cost = 0;
	for (size_t i = 0; i < c->ngpu; i++) {
		struct rg_gpu *g = &c->gpu[i];
		const struct rg_server *s = &c->srv[g->server];
		if (!s->up || !rg_gpu_fits(g, r))
			continue;
		/* The own node's GPUs first, except that a slice does not open
		 * an idle GPU of its own node for that: slices go to idle GPUs
		 * in the cluster's order, which every node's prolog shares, so
		 * slices placed at the same moment from different nodes (or
		 * from views that missed each other's grants) land on the same
		 * GPU instead of one idle GPU each, which left no GPU whole for
		 * a whole-GPU job (the burst test: a whole-GPU job waited 11 s
		 * in its prolog with 35% of the GPUs' memory unreserved). */
		int local = r->local_node && !strcmp(s->node, r->local_node) &&
			    !(r->mem && g->nslices == 0);
		if (best && local < best_local)
			continue;
		double cost = p->cost(c, g, r);
		if (!best || local > best_local || cost < best_cost) {
			best = g;
			best_local = local;
			best_cost = cost;
		}
	}
	return best;
}

static void rollback(struct rg_cluster *c, const struct rg_backend *b, uint64_t job,
		     const uint32_t *got, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		uint32_t sv = c->gpu[got[i]].server;
		int seen = 0;
		for (unsigned j = 0; j < i; j++)
			seen |= c->gpu[got[j]].server == sv;
		if (!seen)
			b->release(b->ctx, &c->srv[sv], job);
	}
}

int rg_reserve(struct rg_cluster *c, const struct rg_request *r, const struct rg_policy *p,
	       const struct rg_backend *b, uint32_t *out, char *why, size_t whylen)
{
	unsigned n = 0;
	char last[256] = "";
	for (size_t i = 0; i < c->ngpu; i++)
		c->gpu[i].skip = 0;
	while (n < r->count) {
		struct rg_gpu *g = rg_pick(c, r, p);
		if (!g) {
			rollback(c, b, r->job_id, out, n);
			if (last[0])
				snprintf(why, whylen, "%s (last refusal: %s)",
					 n ? "could not complete the reservation" :
					     "no GPU accepted the reservation", last);
			else
				rg_explain(c, r, why, whylen);
			return -1;
		}
		struct rg_server *s = &c->srv[g->server];
		int rc = b->grant(b->ctx, s, g, r, last, sizeof(last));
		if (rc == RG_GRANT_OK) {
			rg_cluster_apply(c, g, r);
			g->skip = 1; /* a job gets a GPU once */
			out[n++] = (uint32_t)(g - c->gpu);
		} else if (rc == RG_GRANT_UNREACHABLE) {
			s->up = 0;
		} else {
			g->skip = 1;
		}
	}
	return 0;
}

void rg_explain(const struct rg_cluster *c, const struct rg_request *r, char *why, size_t len)
{
	unsigned up = rg_cluster_ngpus_up(c), fit = 0;
	struct rg_request one = *r;
	for (size_t i = 0; i < c->ngpu; i++) {
		const struct rg_gpu *g = &c->gpu[i];
		struct rg_gpu tmp = *g;
		tmp.skip = 0;
		if (c->srv[g->server].up && rg_gpu_fits(&tmp, &one))
			fit++;
	}
	char sz[32] = "";
	if (r->mem)
		rgpu_format_size(r->mem, sz, sizeof(sz));
	snprintf(why, len, "%u %s%s%s asked for, %u GPU(s) reachable, %u with room now",
		 r->count, r->mem ? "slice(s) of " : "whole GPU(s)", sz, "", up, fit);
}
