/* Selection policy, rollback and snapshot round trip, with a fake
 * reservation backend (no server, no Slurm).  TAP. */
#include "cluster.h"
#include "lease.h"
#include "policy.h"
#include "select.h"
#include "snapshot.h"
#include "tap.h"

#include <stdlib.h>
#include <unistd.h>

#define GiB (1ull << 30)

struct fake {
	int refuse_gpu;        /* cluster gpu index refused, or -1 */
	int down_server;       /* server index unreachable, or -1 */
	int grants, releases;
	uint64_t released_job;
	struct rg_cluster *c;
};

static int fake_grant(void *ctx, const struct rg_server *s, const struct rg_gpu *g,
		      const struct rg_request *r, char *why, size_t whylen)
{
	struct fake *f = ctx;
	if ((int)(s - f->c->srv) == f->down_server) {
		snprintf(why, whylen, "down");
		return RG_GRANT_UNREACHABLE;
	}
	if ((int)(g - f->c->gpu) == f->refuse_gpu) {
		snprintf(why, whylen, "GPU busy");
		return RG_GRANT_REFUSED;
	}
	f->grants++;
	return RG_GRANT_OK;
}

static void fake_release(void *ctx, const struct rg_server *s, uint64_t job)
{
	struct fake *f = ctx;
	f->releases++;
	f->released_job = job;
}

/* nodes gpu1..gpuN with 2 GPUs of 16 GiB each, plus nothing for cpu1. */
static void mk(struct rg_cluster *c, int nodes)
{
	rg_cluster_init(c);
	for (int i = 1; i <= nodes; i++) {
		char n[16];
		snprintf(n, sizeof(n), "gpu%d", i);
		rg_cluster_add_server(c, n, n, 7420);
		rg_cluster_add_gpu(c, 0, "emu", 16 * GiB, 0, 0, 0);
		rg_cluster_add_gpu(c, 1, "emu", 16 * GiB, 0, 0, 0);
	}
}

int main(void)
{
	struct rg_cluster c;
	struct fake f = { .refuse_gpu = -1, .down_server = -1, .c = &c };
	struct rg_backend b = { fake_grant, fake_release, &f };
	const struct rg_policy *bal = rg_policy_find(NULL);
	uint32_t out[8];
	char why[512];

	ok(bal && !strcmp(bal->name, "balanced"), "default policy is balanced");
	ok(rg_policy_find("least-loaded") && rg_policy_find("pack"), "named policies exist");
	ok(!rg_policy_find("nope"), "unknown policy is NULL");

	/* A 2-GPU whole request from a GPU-less node spreads over nodes. */
	mk(&c, 2);
	struct rg_request r = { .count = 2, .local_node = "cpu1", .job_id = 7 };
	ok(rg_reserve(&c, &r, bal, &b, out, why, sizeof(why)) == 0, "2 whole GPUs reserved");
	ok(c.gpu[out[0]].server != c.gpu[out[1]].server, "one GPU from each node");
	ok(c.gpu[out[0]].exclusive && c.gpu[out[1]].exclusive, "view marks them exclusive");
	rg_cluster_free(&c);

	/* Own node first, even when it is busier. */
	mk(&c, 2);
	rg_cluster_apply(&c, &c.gpu[2], &(struct rg_request){ .count = 1, .mem = GiB });
	r = (struct rg_request){ .count = 1, .local_node = "gpu2", .job_id = 8 };
	ok(rg_reserve(&c, &r, bal, &b, out, why, sizeof(why)) == 0, "1 GPU from gpu2");
	is_u64(c.gpu[out[0]].server, 1, "own node's GPU chosen");
	is_u64(c.gpu[out[0]].index, 1, "its idle GPU, not the shared one");
	rg_cluster_free(&c);

	/* Slices pack onto a shared GPU under balanced; spread under least-loaded. */
	mk(&c, 2);
	r = (struct rg_request){ .count = 1, .mem = 2 * GiB, .local_node = "cpu1", .job_id = 9 };
	ok(rg_reserve(&c, &r, bal, &b, out, why, sizeof(why)) == 0, "first slice");
	uint32_t first = out[0];
	r.job_id = 10;
	ok(rg_reserve(&c, &r, bal, &b, out, why, sizeof(why)) == 0, "second slice");
	is_u64(out[0], first, "balanced packs both slices onto one GPU");
	is_u64(c.gpu[first].nslices, 2, "two slices recorded");
	is_u64(c.gpu[first].reserved, 2 * (2 * GiB + RGPUD_LEASE_CTX_RESERVE),
	       "reserve counts the context reserve");
	r.job_id = 11;
	ok(rg_reserve(&c, &r, rg_policy_find("least-loaded"), &b, out, why, sizeof(why)) == 0,
	   "least-loaded slice");
	ok(c.gpu[out[0]].server != c.gpu[first].server, "least-loaded goes to the idle node");
	rg_cluster_free(&c);

	/* A slice from a GPU node joins a shared GPU elsewhere rather than
	 * opening its own node's idle GPU; with all GPUs idle, slices from
	 * different nodes choose the same GPU (cluster order, not their own). */
	mk(&c, 2);
	rg_cluster_apply(&c, &c.gpu[0], &(struct rg_request){ .count = 1, .mem = GiB });
	r = (struct rg_request){ .count = 1, .mem = GiB, .local_node = "gpu2", .job_id = 17 };
	ok(rg_reserve(&c, &r, bal, &b, out, why, sizeof(why)) == 0, "slice from gpu2");
	is_u64(out[0], 0, "joins gpu1's shared GPU, not an idle one of gpu2");
	rg_cluster_free(&c);
	mk(&c, 2);
	r = (struct rg_request){ .count = 1, .mem = GiB, .local_node = "gpu2", .job_id = 18 };
	ok(rg_reserve(&c, &r, bal, &b, out, why, sizeof(why)) == 0, "slice from gpu2, all idle");
	uint32_t from2 = out[0];
	rg_cluster_free(&c);
	mk(&c, 2);
	r = (struct rg_request){ .count = 1, .mem = GiB, .local_node = "gpu1", .job_id = 19 };
	ok(rg_reserve(&c, &r, bal, &b, out, why, sizeof(why)) == 0, "slice from gpu1, all idle");
	is_u64(out[0], from2, "the same GPU from either node");
	rg_cluster_free(&c);

	/* Whole GPU never lands on a shared one; too-big slice never fits. */
	mk(&c, 1);
	rg_cluster_apply(&c, &c.gpu[0], &(struct rg_request){ .count = 1, .mem = GiB });
	r = (struct rg_request){ .count = 1, .job_id = 12 };
	ok(rg_reserve(&c, &r, bal, &b, out, why, sizeof(why)) == 0 && out[0] == 1,
	   "whole GPU avoids the shared GPU");
	r = (struct rg_request){ .count = 1, .mem = 16 * GiB, .job_id = 13 };
	ok(rg_reserve(&c, &r, bal, &b, out, why, sizeof(why)) < 0, "slice of a whole GPU's size refused");
	ok(strstr(why, "with room now") != NULL, "explained: %s", why);
	is_u64(rg_cluster_max_slice(&c, NULL), 16 * GiB - RGPUD_LEASE_CTX_RESERVE, "max slice");
	rg_cluster_free(&c);

	/* A server's own context reserve (LEASE_LIST) prices its slices. */
	mk(&c, 2);
	rg_cluster_set_reserve(&c, 1, 256ull << 20);
	uint64_t res = 0;
	is_u64(rg_cluster_max_slice(&c, &res), 16 * GiB - (256ull << 20), "max slice, smaller reserve");
	is_u64(res, 256ull << 20, "its reserve");
	r = (struct rg_request){ .count = 1, .mem = 16 * GiB - (256ull << 20), .job_id = 14 };
	ok(rg_reserve(&c, &r, bal, &b, out, why, sizeof(why)) == 0 && c.gpu[out[0]].server == 1,
	   "a slice only the small-reserve server can hold goes there");
	is_u64(c.gpu[out[0]].reserved, 16 * GiB, "reserved with that server's reserve");
	rg_cluster_unapply(&c, &c.gpu[out[0]], r.mem);
	is_u64(c.gpu[out[0]].reserved, 0, "released with it");
	rg_cluster_free(&c);

	/* A refused grant moves on to the next candidate. */
	mk(&c, 2);
	f = (struct fake){ .refuse_gpu = 0, .down_server = -1, .c = &c };
	r = (struct rg_request){ .count = 1, .local_node = "gpu1", .job_id = 14 };
	ok(rg_reserve(&c, &r, bal, &b, out, why, sizeof(why)) == 0, "refusal retried");
	is_u64(out[0], 1, "next GPU on the own node");
	rg_cluster_free(&c);

	/* An unreachable server is skipped as a whole. */
	mk(&c, 2);
	f = (struct fake){ .refuse_gpu = -1, .down_server = 0, .c = &c };
	r = (struct rg_request){ .count = 2, .local_node = "gpu1", .job_id = 15 };
	ok(rg_reserve(&c, &r, bal, &b, out, why, sizeof(why)) == 0, "down server skipped");
	ok(c.gpu[out[0]].server == 1 && c.gpu[out[1]].server == 1, "both from gpu2");
	rg_cluster_free(&c);

	/* Partial reservation is rolled back. */
	mk(&c, 2);
	f = (struct fake){ .refuse_gpu = -1, .down_server = 1, .c = &c };
	r = (struct rg_request){ .count = 3, .job_id = 16 };
	ok(rg_reserve(&c, &r, bal, &b, out, why, sizeof(why)) < 0, "3 GPUs with one node down fails");
	is_u64(f.grants, 2, "two grants were made first");
	is_u64(f.releases, 1, "then released on the one server holding them");
	is_u64(f.released_job, 16, "for that job");
	ok(strstr(why, "down") != NULL, "reason names the refusal: %s", why);
	rg_cluster_free(&c);

	/* Snapshot round trip. */
	mk(&c, 2);
	rg_cluster_apply(&c, &c.gpu[3], &(struct rg_request){ .count = 1, .mem = GiB });
	c.srv[1].up = 0;
	c.taken = 1234;
	char path[] = "/tmp/rgpu-snap-XXXXXX";
	int fd = mkstemp(path);
	close(fd);
	ok(rg_snapshot_save(path, &c, why, sizeof(why)) == 0, "snapshot saved");
	struct rg_cluster d;
	rg_cluster_init(&d);
	ok(rg_snapshot_load(path, &d) == 0, "snapshot loaded");
	is_u64(d.nsrv, 2, "servers");
	is_u64(d.ngpu, 4, "gpus");
	is_u64(d.taken, 1234, "taken");
	is_u64(d.gpu[3].reserved, c.gpu[3].reserved, "reserved kept");
	is_u64(d.gpu[3].nslices, 1, "slices kept");
	is_u64(d.srv[1].up, 0, "down kept");
	is_u64(d.srv[1].reserved, c.srv[1].reserved, "server sums rebuilt");
	unlink(path);
	rg_cluster_free(&c);
	rg_cluster_init(&c);
	ok(rg_snapshot_load(path, &c) < 0, "missing snapshot reported");
	rg_cluster_free(&d);

	/* Polling a server that is not there marks it down. */
	struct rg_server_addr a = { "gpu9", "127.0.0.1", 1 };
	rg_cluster_init(&c);
	is_u64(rg_snapshot_poll(&a, 1, 500, 4, &c), 0, "nobody answers on port 1");
	ok(c.nsrv == 1 && !c.srv[0].up && c.ngpu == 0, "server kept, down, no GPUs");
	rg_cluster_free(&c);
	return tap_done();
}
