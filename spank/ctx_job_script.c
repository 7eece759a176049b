/*
 * Job prolog and epilog (slurmd, as root; PrologFlags=Alloc runs the prolog
 * once per node when the job is allocated, before any step).
 *
 * GPUs are per job: the prolog of the job's first node chooses and leases
 * them (LEASE_GRANT to the chosen rgpud, expiring at the job's time limit
 * plus a grace, the backstop for a node that dies with the job) and records
 * them; the epilog of that node releases them (LEASE_RELEASE).  Steps and
 * the job's other nodes use the same GPUs.  The prolog never fails: a
 * failed prolog drains the node.  A failed allocation is recorded and the
 * job's steps fail with its reason.
 */
#include "plugin.h"
#include "lease_rpc.h"
#include "select.h"

#include <inttypes.h>
#include <slurm/slurm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct job_req {
	unsigned count;
	uint64_t expires;
	uint32_t uid;
};

/* The count from the AdminComment job_submit.lua set ("rgpu-request;
 * count=N").  0: the job wants none.  (The rgpu license counts memory, not
 * GPUs: job_submit.lua refuses -L rgpu given by hand.) */
static int job_request(uint32_t job, struct job_req *q)
{
	job_info_msg_t *ji = NULL;
	memset(q, 0, sizeof(*q));
	if (slurm_load_job(&ji, job, SHOW_DETAIL) != SLURM_SUCCESS || !ji || !ji->record_count) {
		if (ji)
			slurm_free_job_info_msg(ji);
		slurm_error("rgpu: job %u: cannot load the job: %s", job,
			    slurm_strerror(slurm_get_errno()));
		return -1;
	}
	slurm_job_info_t *j = &ji->job_array[0];
	const char *ac = j->admin_comment, *p;
	if (ac && (p = strstr(ac, "rgpu-request;count=")))
		q->count = (unsigned)strtoul(p + 19, NULL, 10);
	q->uid = j->user_id;
	if (j->time_limit != INFINITE && j->end_time > 0)
		q->expires = (uint64_t)j->end_time + (uint64_t)rgpu_cfg.grace;
	slurm_free_job_info_msg(ji);
	return 0;
}

static int first_node(const char *nodelist, const char *me)
{
	if (!nodelist || !me)
		return 1; /* a lone node */
	hostlist_t hl = slurm_hostlist_create(nodelist);
	if (!hl)
		return 1;
	char *first = slurm_hostlist_shift(hl);
	int r = !first || !strcmp(first, me);
	free(first);
	slurm_hostlist_destroy(hl);
	return r;
}

/* LEASE_GRANT/RELEASE over the wire, a connection per server. */
struct rpc_ctx {
	struct rg_conn **conn;
	size_t n;
	struct rg_cluster *c;
};

static struct rg_conn *conn_for(struct rpc_ctx *x, const struct rg_server *s, char *why,
				size_t whylen)
{
	size_t i = (size_t)(s - x->c->srv);
	if (!x->conn[i])
		x->conn[i] = rg_connect(s->host, s->port, 0, rgpu_cfg.timeout_ms, why, whylen);
	return x->conn[i];
}

/* --rgpu-share of the job being granted (0: none), for rpc_grant */
static uint32_t grant_share;

static int rpc_grant(void *ctx, const struct rg_server *s, const struct rg_gpu *g,
		     const struct rg_request *r, char *why, size_t whylen)
{
	struct rpc_ctx *x = ctx;
	struct rg_conn *c = conn_for(x, s, why, whylen);
	if (!c)
		return RG_GRANT_UNREACHABLE;
	int st = rg_lease_grant_share(c, r->job_id, r->uid, g->index, r->mem, r->expires,
				      grant_share, why, whylen);
	if (st < 0)
		return RG_GRANT_UNREACHABLE;
	if (st) {
		slurm_info("rgpu: job %" PRIu64 ": %s GPU %u refused: %s", r->job_id, s->node,
			   g->index, why);
		return RG_GRANT_REFUSED;
	}
	return RG_GRANT_OK;
}

static void rpc_release(void *ctx, const struct rg_server *s, uint64_t job)
{
	char why[256];
	struct rg_conn *c = conn_for(ctx, s, why, sizeof(why));
	if (!c || rg_lease_release(c, job, NULL, why, sizeof(why)))
		slurm_error("rgpu: job %" PRIu64 ": release on %s failed: %s (the lease expires "
			    "with the job's time limit)", job, s->node, why);
}

/* What one attempt at choosing and leasing the job's GPUs gave. */
/* ALLOC_STALE: no room in a snapshot that was not polled just now; the
 * caller asks again at once with a fresh view before it waits. */
enum { ALLOC_OK, ALLOC_WAIT, ALLOC_NEVER, ALLOC_STALE };

/* The GPU a waiting one-GPU job claims (LEASE_CLAIM), renewed at each try,
 * so the GPU drains for it rather than going to jobs that started later. */
#define CLAIM_TTL_S 15
struct claim {
	int held;
	char host[128];
	unsigned port;
	uint32_t gpu;
};

static const struct rg_server *server_of(struct rg_cluster *c, const char *host, unsigned port)
{
	for (size_t i = 0; i < c->nsrv; i++)
		if (c->srv[i].port == port && !strcmp(c->srv[i].host, host))
			return &c->srv[i];
	return NULL;
}

/* Renews the claim, or makes one on the GPU closest to having room (the
 * least memory missing, then the policy's choice). */
static void claim_room(struct rpc_ctx *x, const struct rg_request *r, struct claim *cl)
{
	char why[512];
	struct rg_cluster *c = x->c;
	if (cl->held) {
		const struct rg_server *s = server_of(c, cl->host, cl->port);
		struct rg_conn *k = s ? conn_for(x, s, why, sizeof(why)) : NULL;
		if (k && rg_lease_claim(k, r->job_id, cl->gpu, r->mem, CLAIM_TTL_S, why,
					sizeof(why)) == 0)
			return;
		cl->held = 0;
	}
	for (size_t tries = 0; tries < c->ngpu && tries < 8; tries++) {
		struct rg_gpu *best = NULL;
		uint64_t best_missing = 0;
		for (size_t i = 0; i < c->ngpu; i++) {
			struct rg_gpu *g = &c->gpu[i];
			uint64_t cost = rg_request_cost(g, r);
			if (g->skip == 2 || !c->srv[g->server].up || !g->total || cost > g->total)
				continue;
			uint64_t free_now = g->exclusive || g->reserved >= g->total ? 0
										    : g->total - g->reserved;
			uint64_t missing = cost > free_now ? cost - free_now : 0;
			if (!r->mem && (g->exclusive || g->nslices))
				missing = g->exclusive ? g->total : g->reserved; /* needs it empty */
			if (!best || missing < best_missing) {
				best = g;
				best_missing = missing;
			}
		}
		if (!best)
			return;
		best->skip = 2; /* tried */
		const struct rg_server *s = &c->srv[best->server];
		struct rg_conn *k = conn_for(x, s, why, sizeof(why));
		if (k && rg_lease_claim(k, r->job_id, best->index, r->mem, CLAIM_TTL_S, why,
					sizeof(why)) == 0) {
			cl->held = 1;
			snprintf(cl->host, sizeof(cl->host), "%s", s->host);
			cl->port = s->port;
			cl->gpu = best->index;
			slurm_info("rgpu: job %" PRIu64 ": claims %s GPU %u while it waits for room",
				   r->job_id, s->node, best->index);
			return;
		}
	}
}

/* Drops a claim the job no longer needs (it got another GPU). */
static void claim_drop(struct rpc_ctx *x, const struct rg_request *r, struct claim *cl,
		       const struct rg_server *got_s, uint32_t got_gpu)
{
	char why[256];
	if (!cl->held)
		return;
	cl->held = 0;
	if (got_s && got_s->port == cl->port && !strcmp(got_s->host, cl->host) &&
	    got_gpu == cl->gpu)
		return; /* the grant converted it */
	const struct rg_server *s = server_of(x->c, cl->host, cl->port);
	struct rg_conn *k = s ? conn_for(x, s, why, sizeof(why)) : NULL;
	if (k)
		rg_lease_claim(k, r->job_id, cl->gpu, r->mem, 0, why, sizeof(why));
}

/* GPUs that could hold one device of the request if they were empty. */
static unsigned could_ever_fit(const struct rg_cluster *c, const struct rg_request *r)
{
	unsigned n = 0;
	for (size_t i = 0; i < c->ngpu; i++) {
		const struct rg_gpu *g = &c->gpu[i];
		if (c->srv[g->server].up && g->total && rg_request_cost(g, r) <= g->total)
			n++;
	}
	return n;
}

static int allocate(uint32_t job, const struct job_req *q, uint64_t mem, const char *me,
		    int max_age, struct claim *cl, struct rgpu_jobrec *rec)
{
	struct rg_cluster c;
	char err[512];
	rec->error[0] = '\0';
	if (rgpu_view_get(&c, max_age, 1, err, sizeof(err))) {
		snprintf(rec->error, sizeof(rec->error), "no GPU view: %s", err);
		return ALLOC_WAIT;
	}
	struct rg_request r = { .count = q->count, .mem = mem, .local_node = me,
				.job_id = job, .uid = q->uid, .expires = q->expires };
	struct rpc_ctx x = { calloc(c.nsrv ? c.nsrv : 1, sizeof(struct rg_conn *)), c.nsrv, &c };
	uint32_t *out = calloc(q->count, sizeof(*out));
	int rc = ALLOC_OK;
	if (!x.conn || !out) {
		snprintf(rec->error, sizeof(rec->error), "out of memory");
		rc = ALLOC_WAIT;
	} else {
		struct rg_backend b = { rpc_grant, rpc_release, &x };
		if (rg_reserve(&c, &r, rgpu_cfg.policy, &b, out, err, sizeof(err))) {
			snprintf(rec->error, sizeof(rec->error), "no room for %u GPU(s): %s",
				 q->count, err);
			/* a request no GPU of the cluster could ever take fails
			 * at once; anything else waits for room */
			rc = could_ever_fit(&c, &r) < q->count ? ALLOC_NEVER : ALLOC_WAIT;
			/* The snapshot is this node's: a job started on another
			 * node that released its GPUs a moment ago is still in
			 * it, so "no room" there is often wrong.  Ask the servers
			 * before waiting (a stale refusal cost each such job a
			 * second or more with the room idle, and claimed a GPU by
			 * a view that was out of date). */
			if (rc == ALLOC_WAIT && !rgpu_view_polled())
				rc = ALLOC_STALE;
			/* one GPU: claim the one closest to having room (several
			 * GPUs claimed piecemeal by two jobs could hold each
			 * other up, so those only poll) */
			if (rc == ALLOC_WAIT && q->count == 1)
				claim_room(&x, &r, cl);
		} else {
			claim_drop(&x, &r, cl, &c.srv[c.gpu[out[0]].server], c.gpu[out[0]].index);
			size_t ps = 0, pg = 0;
			for (unsigned i = 0; i < q->count; i++) {
				const struct rg_gpu *g = &c.gpu[out[i]];
				const struct rg_server *s = &c.srv[g->server];
				ps += (size_t)snprintf(rec->servers + ps, sizeof(rec->servers) - ps,
						       "%s%s:%u/%u", i ? "," : "", s->host, s->port,
						       g->index);
				pg += (size_t)snprintf(rec->gpus + pg, sizeof(rec->gpus) - pg,
						       "%s%s:%u", i ? "," : "", s->node, g->index);
				if (ps >= sizeof(rec->servers) || pg >= sizeof(rec->gpus))
					break;
			}
		}
	}
	for (size_t i = 0; x.conn && i < x.n; i++)
		rg_close(x.conn[i]);
	free(x.conn);
	free(out);
	rgpu_view_release(&c, 1);
	return rc;
}

/* Says in the job's AdminComment (squeue -O admin_comment, scontrol show
 * job) that it waits for GPU room, and why.  Other nodes look for the
 * "rgpu;" record only, so this prefix does not confuse them. */
static void publish_wait(uint32_t job, time_t since, const char *why)
{
	char buf[1024];
	snprintf(buf, sizeof(buf), "rgpu-wait;since=%lld;why=%s", (long long)since, why);
	job_desc_msg_t d;
	slurm_init_job_desc_msg(&d);
	d.job_id = job;
	d.admin_comment = buf;
	if (slurm_update_job(&d) != SLURM_SUCCESS)
		slurm_info("rgpu: job %u: cannot set AdminComment: %s", job,
			   slurm_strerror(slurm_get_errno()));
}

int rgpu_job_prolog(spank_t sp)
{
	uint32_t job = 0;
	if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS)
		return 0;
	struct job_req q;
	if (job_request(job, &q) || q.count == 0)
		return 0;
	struct rgpu_jobrec rec = { 0 };
	char *arg = NULL;
	if (spank_option_getopt(sp, &rgpu_mem_option, &arg) == ESPANK_SUCCESS && arg) {
		char err[512];
		if (rgpu_mem_parse(arg, &rec.mem, err, sizeof(err)))
			snprintf(rec.error, sizeof(rec.error), "%s", err);
	}
	grant_share = 0;
	arg = NULL;
	if (spank_option_getopt(sp, &rgpu_share_option, &arg) == ESPANK_SUCCESS && arg) {
		char err[512];
		if (rgpu_share_parse(arg, &grant_share, err, sizeof(err)))
			snprintf(rec.error, sizeof(rec.error), "%s", err);
		else if (!rec.mem) /* a whole GPU is not shared */
			grant_share = 0;
	}
	const char *me = getenv("SLURMD_NODENAME");
	const char *nodes = getenv("SLURM_JOB_NODELIST");
	if (!nodes)
		nodes = getenv("SLURM_NODELIST");
	if (!first_node(nodes, me)) {
		/* Tells this node's steps to wait for the first node's record. */
		snprintf(rec.error, sizeof(rec.error), "pending");
		rgpu_jobrec_write(job, &rec);
		return 0;
	}
	if (!rec.error[0]) {
		/* Slurm admitted the job by its license (memory units, see
		 * job_submit.lua): room exists in total.  When no single GPU has
		 * it yet (fragmentation, a view that was stale), wait for it here
		 * (the job shows CONFIGURING, its AdminComment says why), up to
		 * `wait` seconds, polling afresh. */
		time_t t0 = time(NULL);
		int pause = 1, published = 0, fresh = 0;
		/* A slice packs by the GPUs' current fill, which this node's
		 * snapshot does not have (other nodes' grants and releases):
		 * by a view 30 s old, two slices took two idle GPUs each
		 * believed shared and left no GPU whole.  So a slice decides by
		 * a view of this second (one poll of the servers, shared by the
		 * prologs of this node in that second); a whole GPU needs no
		 * fill and keeps the ttl (a stale view costs it a refusal). */
		int first_age = rec.mem ? 0 : rgpu_cfg.ttl;
		struct claim cl = { 0 };
		for (;;) {
			int rc = allocate(job, &q, rec.mem, me,
					  fresh ? 0 : published ? pause : first_age, &cl, &rec);
			if (rc == ALLOC_STALE && !fresh) {
				fresh = 1; /* again at once, polling every server */
				continue;
			}
			fresh = 0;
			if (rc == ALLOC_STALE)
				rc = ALLOC_WAIT; /* no server answered afresh: wait */
			if (rc != ALLOC_WAIT)
				break;
			long waited = (long)(time(NULL) - t0);
			if (waited >= rgpu_cfg.wait) {
				char e[sizeof(rec.error)];
				snprintf(e, sizeof(e), "%s (after waiting %ld s for room)", rec.error,
					 waited);
				snprintf(rec.error, sizeof(rec.error), "%s", e);
				break;
			}
			if (!published) {
				slurm_info("rgpu: job %u: waiting for GPU room: %s", job, rec.error);
				publish_wait(job, t0, rec.error);
				published = 1;
			}
			sleep((unsigned)pause);
			/* with a claim held the GPU drains for this job: look often */
			if (pause < 5 && !cl.held)
				pause++;
			else if (cl.held)
				pause = 1;
		}
		if (published) { /* it did wait: at least a second, as said */
			long w = (long)(time(NULL) - t0);
			rec.waited = w > 0 ? (uint32_t)w : 1;
		}
	}
	if (rec.error[0])
		slurm_error("rgpu: job %u: %s", job, rec.error);
	else
		slurm_info("rgpu: job %u: granted %s", job, rec.servers);
	if (rgpu_jobrec_write(job, &rec))
		slurm_error("rgpu: job %u: cannot write its record under %s", job,
			    rgpu_cfg.state_dir);
	rgpu_jobrec_publish(job, &rec);
	return 0;
}

/* Releases on every server named in the record, and gives the memory back
 * in this node's snapshot. */
/* Ends the job's leases on every server of its record (LEASE_RELEASE
 * also ends its sessions) and gives the memory back in this node's
 * snapshot; the record then names no servers, so it happens once. */
void rgpu_release(uint32_t job, struct rgpu_jobrec *rec)
{
	if (!rec->servers[0])
		return;
	char *list = strdup(rec->servers), *save = NULL;
	char done[4096] = ",";
	for (char *e = list ? strtok_r(list, ",", &save) : NULL; e;
	     e = strtok_r(NULL, ",", &save)) {
		char *slash = strrchr(e, '/'), *colon;
		if (slash)
			*slash = '\0';
		char key[300];
		snprintf(key, sizeof(key), ",%s,", e);
		if (strstr(done, key))
			continue;
		strncat(done, e, sizeof(done) - strlen(done) - 2);
		strcat(done, ",");
		colon = strrchr(e, ':');
		unsigned port = colon ? (unsigned)atoi(colon + 1) : rgpu_cfg.port;
		if (colon)
			*colon = '\0';
		char why[512];
		uint32_t n = 0;
		struct rg_conn *c = rg_connect(e, port, 0, rgpu_cfg.timeout_ms, why, sizeof(why));
		if (!c || rg_lease_release(c, job, &n, why, sizeof(why)))
			slurm_error("rgpu: job %u: release on %s failed: %s (the lease "
				    "expires with the job's time limit)", job, e, why);
		else
			slurm_info("rgpu: job %u: released %u lease(s) on %s", job, n, e);
		rg_close(c);
	}
	free(list);

	struct rg_cluster c;
	char err[256];
	if (rec->gpus[0] && rgpu_view_get(&c, -1, 1, err, sizeof(err)) == 0) {
		char *g = strdup(rec->gpus);
		save = NULL;
		for (char *e = g ? strtok_r(g, ",", &save) : NULL; e;
		     e = strtok_r(NULL, ",", &save)) {
			char *colon = strrchr(e, ':');
			if (!colon)
				continue;
			*colon = '\0';
			struct rg_gpu *gp = rg_cluster_find(&c, e, (uint32_t)atoi(colon + 1));
			if (gp)
				rg_cluster_unapply(&c, gp, rec->mem);
		}
		free(g);
		rgpu_view_release(&c, 1);
	}
	rec->servers[0] = '\0';
	rec->gpus[0] = '\0';
}

int rgpu_job_epilog(spank_t sp)
{
	uint32_t job = 0;
	if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS)
		return 0;
	struct rgpu_jobrec rec;
	if (rgpu_jobrec_read(job, &rec))
		return 0;
	/* the final figures, for slurmd's log (the job has finished: its
	 * AdminComment holds what its last step recorded) */
	if (rec.servers[0] && rgpu_account(job, &rec) == 0)
		slurm_info("rgpu: job %u: peak device memory %" PRIu64 " bytes (%" PRIu64
			   " on one GPU), GPU time %.3f s", job, rec.peak, rec.peak_max,
			   (double)rec.gpu_ms / 1000.0);
	rgpu_release(job, &rec);
	rgpu_jobrec_remove(job);
	return 0;
}
