#include "cluster.h"
#include "lease.h" /* daemon/: RGPUD_LEASE_CTX_RESERVE, the default reserve per slice */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rg_cluster_init(struct rg_cluster *c) { memset(c, 0, sizeof(*c)); }

void rg_cluster_free(struct rg_cluster *c)
{
	free(c->srv);
	free(c->gpu);
	memset(c, 0, sizeof(*c));
}

static int grow(void **p, size_t *cap, size_t n, size_t elem)
{
	if (n < *cap)
		return 0;
	size_t nc = *cap ? *cap * 2 : 16;
	void *q = realloc(*p, nc * elem);
	if (!q)
		return -1;
	*p = q;
	*cap = nc;
	return 0;
}

int rg_cluster_add_server(struct rg_cluster *c, const char *node, const char *host,
			  unsigned port)
{
	if (grow((void **)&c->srv, &c->cap_srv, c->nsrv, sizeof(*c->srv)))
		return -1;
	struct rg_server *s = &c->srv[c->nsrv];
	memset(s, 0, sizeof(*s));
	snprintf(s->node, sizeof(s->node), "%s", node);
	snprintf(s->host, sizeof(s->host), "%s", host);
	s->port = port;
	s->first = (uint32_t)c->ngpu;
	s->ctx_reserve = RGPUD_LEASE_CTX_RESERVE;
	return (int)c->nsrv++;
}

void rg_cluster_set_reserve(struct rg_cluster *c, size_t i, uint64_t bytes)
{
	if (i >= c->nsrv)
		return;
	struct rg_server *s = &c->srv[i];
	s->ctx_reserve = bytes;
	for (uint32_t k = 0; k < s->ngpu; k++)
		c->gpu[s->first + k].ctx_reserve = bytes;
}

int rg_cluster_add_gpu(struct rg_cluster *c, uint32_t index, const char *name,
		       uint64_t total, uint64_t reserved, uint32_t nslices, int exclusive)
{
	if (!c->nsrv || grow((void **)&c->gpu, &c->cap_gpu, c->ngpu, sizeof(*c->gpu)))
		return -1;
	struct rg_server *s = &c->srv[c->nsrv - 1];
	struct rg_gpu *g = &c->gpu[c->ngpu++];
	memset(g, 0, sizeof(*g));
	g->server = (uint32_t)(c->nsrv - 1);
	g->index = index;
	g->ctx_reserve = s->ctx_reserve;
	snprintf(g->name, sizeof(g->name), "%s", name ? name : "");
	g->total = total;
	g->reserved = exclusive ? total : reserved;
	g->nslices = nslices;
	g->exclusive = exclusive;
	s->ngpu++;
	s->total += total;
	s->reserved += g->reserved;
	s->up = 1;
	return 0;
}

uint64_t rg_request_cost(const struct rg_gpu *g, const struct rg_request *r)
{
	return r->mem ? r->mem + g->ctx_reserve : g->total;
}

int rg_gpu_fits(const struct rg_gpu *g, const struct rg_request *r)
{
	if (g->skip || g->exclusive || !g->total)
		return 0;
	if (!r->mem)
		return g->reserved == 0;
	return g->reserved <= g->total && rg_request_cost(g, r) <= g->total - g->reserved;
}

void rg_cluster_apply(struct rg_cluster *c, struct rg_gpu *g, const struct rg_request *r)
{
	uint64_t cost = rg_request_cost(g, r);
	g->reserved += cost;
	c->srv[g->server].reserved += cost;
	if (r->mem)
		g->nslices++;
	else
		g->exclusive = 1;
}

void rg_cluster_unapply(struct rg_cluster *c, struct rg_gpu *g, uint64_t mem)
{
	uint64_t cost = mem ? mem + g->ctx_reserve : g->total;
	cost = cost < g->reserved ? cost : g->reserved;
	g->reserved -= cost;
	struct rg_server *s = &c->srv[g->server];
	s->reserved -= cost < s->reserved ? cost : s->reserved;
	if (mem && g->nslices)
		g->nslices--;
	if (!mem)
		g->exclusive = 0;
}

struct rg_gpu *rg_cluster_find(struct rg_cluster *c, const char *node, uint32_t index)
{
	for (size_t i = 0; i < c->nsrv; i++) {
		struct rg_server *s = &c->srv[i];
		if (strcmp(s->node, node))
			continue;
		for (uint32_t k = 0; k < s->ngpu; k++)
			if (c->gpu[s->first + k].index == index)
				return &c->gpu[s->first + k];
	}
	return NULL;
}

uint64_t rg_cluster_max_slice(const struct rg_cluster *c, uint64_t *reserve)
{
	uint64_t best = 0, res = RGPUD_LEASE_CTX_RESERVE;
	for (size_t i = 0; i < c->ngpu; i++)
		if (c->gpu[i].total > c->gpu[i].ctx_reserve &&
		    c->gpu[i].total - c->gpu[i].ctx_reserve > best) {
			best = c->gpu[i].total - c->gpu[i].ctx_reserve;
			res = c->gpu[i].ctx_reserve;
		}
	if (reserve)
		*reserve = res;
	return best;
}

unsigned rg_cluster_ngpus_up(const struct rg_cluster *c)
{
	unsigned n = 0;
	for (size_t i = 0; i < c->nsrv; i++)
		if (c->srv[i].up)
			n += c->srv[i].ngpu;
	return n;
}
