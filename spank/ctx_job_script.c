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
 * count=N"), else from an explicit -L rgpu:N.  0: the job wants none. */
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
	const char *ac = j->admin_comment, *lic = j->licenses, *p;
	if (ac && (p = strstr(ac, "rgpu-request;count=")))
		q->count = (unsigned)strtoul(p + 19, NULL, 10);
	else if (lic && (p = strstr(lic, "rgpu:")) && (p == lic || p[-1] == ','))
		q->count = (unsigned)strtoul(p + 5, NULL, 10);
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

static void allocate(uint32_t job, const struct job_req *q, uint64_t mem, const char *me,
		     struct rgpu_jobrec *rec)
{
	struct rg_cluster c;
	char err[512];
	if (rgpu_view_get(&c, rgpu_cfg.ttl, 1, err, sizeof(err))) {
		snprintf(rec->error, sizeof(rec->error), "no GPU view: %s", err);
		return;
	}
	struct rg_request r = { .count = q->count, .mem = mem, .local_node = me,
				.job_id = job, .uid = q->uid, .expires = q->expires };
	struct rpc_ctx x = { calloc(c.nsrv ? c.nsrv : 1, sizeof(struct rg_conn *)), c.nsrv, &c };
	uint32_t *out = calloc(q->count, sizeof(*out));
	if (!x.conn || !out) {
		snprintf(rec->error, sizeof(rec->error), "out of memory");
	} else {
		struct rg_backend b = { rpc_grant, rpc_release, &x };
		if (rg_reserve(&c, &r, rgpu_cfg.policy, &b, out, err, sizeof(err))) {
			snprintf(rec->error, sizeof(rec->error), "no room for %u GPU(s): %s",
				 q->count, err);
		} else {
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
	if (!rec.error[0])
		allocate(job, &q, rec.mem, me, &rec);
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
int rgpu_job_epilog(spank_t sp)
{
	uint32_t job = 0;
	if (spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS)
		return 0;
	struct rgpu_jobrec rec;
	if (rgpu_jobrec_read(job, &rec))
		return 0;
	if (rec.servers[0]) {
		char *list = strdup(rec.servers), *save = NULL;
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
		if (rec.gpus[0] && rgpu_view_get(&c, -1, 1, err, sizeof(err)) == 0) {
			char *g = strdup(rec.gpus);
			save = NULL;
			for (char *e = g ? strtok_r(g, ",", &save) : NULL; e;
			     e = strtok_r(NULL, ",", &save)) {
				char *colon = strrchr(e, ':');
				if (!colon)
					continue;
				*colon = '\0';
				struct rg_gpu *gp = rg_cluster_find(&c, e, (uint32_t)atoi(colon + 1));
				if (gp)
					rg_cluster_unapply(&c, gp, rec.mem);
			}
			free(g);
			rgpu_view_release(&c, 1);
		}
	}
	rgpu_jobrec_remove(job);
	return 0;
}
