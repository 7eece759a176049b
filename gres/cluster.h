/*
 * The cluster as the GPU selector sees it: GPU servers (one rgpud per
 * Slurm node) and the load of each of their GPUs.  The view is a snapshot
 * (see snapshot.h), not live: a server may refuse a grant it made stale,
 * and the selector then tries the next candidate (select.h).
 */
#ifndef RGPU_GRES_CLUSTER_H
#define RGPU_GRES_CLUSTER_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

struct rg_server {
	char node[64];  /* Slurm node name */
	char host[128]; /* address clients and the plugin connect to */
	unsigned port;
	int up;         /* answered its last poll */
	uint32_t first, ngpu;     /* its GPUs: cluster gpu[first .. first+ngpu) */
	uint64_t total, reserved; /* sums over its GPUs, for policies */
	uint64_t ctx_reserve;     /* what rgpud reserves per slice (LEASE_LIST) */
};

struct rg_gpu {
	uint32_t server; /* index into the cluster's servers */
	uint32_t index;  /* GPU number on that server */
	char name[64];
	uint64_t total, reserved; /* bytes; reserved == total when exclusive */
	uint32_t nslices;
	uint64_t ctx_reserve; /* its server's, copied here for the cost functions */
	int exclusive;
	int skip; /* refused a grant (or is already ours) in this selection */
};

struct rg_cluster {
	struct rg_server *srv;
	size_t nsrv, cap_srv;
	struct rg_gpu *gpu;
	size_t ngpu, cap_gpu;
	time_t taken; /* when the load was polled */
};

/* What a job asks for: count GPUs, whole (mem 0) or slices of mem bytes. */
struct rg_request {
	unsigned count;
	uint64_t mem;
	const char *local_node; /* the job's node: its GPUs come first */
	uint64_t job_id;
	uint32_t uid;
	uint64_t expires; /* unix seconds, 0 = never */
};

void rg_cluster_init(struct rg_cluster *c);
void rg_cluster_free(struct rg_cluster *c);
/* Appends a server (GPUs added next with rg_cluster_add_gpu); its index or -1. */
int rg_cluster_add_server(struct rg_cluster *c, const char *node, const char *host,
			  unsigned port);
/* The context reserve of server i (and its GPUs): rgpud's --ctx-reserve,
 * as LEASE_LIST reports it.  RGPUD_LEASE_CTX_RESERVE until set. */
void rg_cluster_set_reserve(struct rg_cluster *c, size_t i, uint64_t bytes);
/* Appends a GPU to the last server added; 0 or -1. */
int rg_cluster_add_gpu(struct rg_cluster *c, uint32_t index, const char *name,
		       uint64_t total, uint64_t reserved, uint32_t nslices, int exclusive);

/* Bytes a grant takes from a GPU: the slice plus the context reserve rgpud
 * sets aside for it, or the whole GPU. */
uint64_t rg_request_cost(const struct rg_gpu *g, const struct rg_request *r);
/* The GPU can take the request now (by this view). */
int rg_gpu_fits(const struct rg_gpu *g, const struct rg_request *r);
/* Records a grant in the view, so later picks (and the saved snapshot)
 * see it. */
void rg_cluster_apply(struct rg_cluster *c, struct rg_gpu *g, const struct rg_request *r);
/* Undoes rg_cluster_apply (a lease released). */
void rg_cluster_unapply(struct rg_cluster *c, struct rg_gpu *g, uint64_t mem);
/* The GPU index on the named node, or NULL. */
struct rg_gpu *rg_cluster_find(struct rg_cluster *c, const char *node, uint32_t index);
/* Largest slice any GPU could ever hold (0 if no GPU is known); *reserve
 * (when not NULL) gets that GPU's context reserve. */
uint64_t rg_cluster_max_slice(const struct rg_cluster *c, uint64_t *reserve);
unsigned rg_cluster_ngpus_up(const struct rg_cluster *c);

#endif
