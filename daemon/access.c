/*
 * Access control (access.h).  Three modes:
 *
 *  - allow (the default): a munge credential is required, of root or of a
 *    user or group rgpud was told to admit (--allow-users, --allow-groups);
 *    those may use every GPU without quota.
 *  - open (--open): everyone may use every GPU without quota.  A valid
 *    munge credential, if the client sends one, still names the principal
 *    (uid, job) for the logs.
 *  - leases (require_lease 1): a munge credential is required; a client may
 *    use only the GPUs its job holds a lease for (lease.h), within the
 *    lease's memory quota, charged per (job, GPU) over all the job's
 *    sessions.  Only root or admin_uid (SlurmUser) may grant and release
 *    leases.  Expired leases are collected every RGPUD_LEASE_CHECK_INTERVAL_S
 *    seconds and their jobs' sessions ended.
 */
#include "config.h"

#include "access.h"
#include "auth.h"
#include "lease.h"
#include "log.h"
#include "proto.h"
#include "wire.h"

#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1
#endif
#include <cuda.h>

#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <pwd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Provided by the session layer (session.h); this default only logs, so the
 * access code links (and its tests run) without it. */
void rgpud_sessions_end_job(uint64_t job_id) __attribute__((weak));
void rgpud_sessions_end_job(uint64_t job_id)
{
	log_warn("leases: no session layer linked: cannot end the sessions of job %" PRIu64,
		 job_id);
}

/* Provided by the parent (server.c); without it no session is counted. */
int rgpud_sessions_of_uid(uint32_t uid) __attribute__((weak));
int rgpud_sessions_of_uid(uint32_t uid)
{
	(void)uid;
	return 0;
}

static int require_lease, open_access, max_sessions_per_user;
static int check_interval_s = RGPUD_LEASE_CHECK_INTERVAL_S;
static unsigned admin_uid;
static uint32_t *allow_uids, *allow_gids;
static size_t nallow_uids, nallow_gids;

static pthread_t expiry_thread;
static int expiry_running, expiry_stop;
static pthread_mutex_t expiry_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t expiry_cv;

void rgpud_access_check_expiry(time_t now)
{
	uint64_t *jobs = NULL;
	size_t n = 0;
	if (rgpud_lease_expire(now, &jobs, &n))
		log_err("leases: out of memory collecting expired leases");
	for (size_t i = 0; i < n; i++) {
		log_warn("leases: job %" PRIu64 " lost a lease by expiry: ending its sessions",
			 jobs[i]);
		rgpud_sessions_end_job(jobs[i]);
	}
	free(jobs);
}

static void *expiry_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&expiry_mu);
	while (!expiry_stop) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += check_interval_s;
		while (!expiry_stop &&
		       pthread_cond_timedwait(&expiry_cv, &expiry_mu, &ts) != ETIMEDOUT)
			;
		if (expiry_stop)
			break;
		pthread_mutex_unlock(&expiry_mu);
		rgpud_access_check_expiry(time(NULL));
		pthread_mutex_lock(&expiry_mu);
	}
	pthread_mutex_unlock(&expiry_mu);
	return NULL;
}

int rgpud_access_init(const struct rgpud_access_config *cfg, char *err, size_t errlen)
{
	require_lease = cfg->require_lease;
	open_access = cfg->open_access && !require_lease;
	max_sessions_per_user = cfg->max_sessions_per_user;
	check_interval_s = cfg->check_interval_s > 0 ? cfg->check_interval_s
						     : RGPUD_LEASE_CHECK_INTERVAL_S;
	admin_uid = cfg->admin_uid;
	free(allow_uids);
	free(allow_gids);
	allow_uids = allow_gids = NULL;
	nallow_uids = nallow_gids = 0;
	if (!require_lease && !open_access) {
		size_t nu = cfg->nallow_uids, ng = cfg->nallow_gids;
		allow_uids = malloc((nu ? nu : 1) * sizeof(*allow_uids));
		allow_gids = malloc((ng ? ng : 1) * sizeof(*allow_gids));
		if (!allow_uids || !allow_gids) {
			snprintf(err, errlen, "out of memory");
			return -1;
		}
		if (nu)
			memcpy(allow_uids, cfg->allow_uids, nu * sizeof(*allow_uids));
		if (ng)
			memcpy(allow_gids, cfg->allow_gids, ng * sizeof(*allow_gids));
		nallow_uids = nu;
		nallow_gids = ng;
#ifndef HAVE_MUNGE
		log_err("access: a credential is required but rgpud was built without munge: "
			"every client will be refused (start rgpud with --open to serve everyone)");
#endif
	}
	if (!require_lease) {
		/* No lease table; the GPU registry still serves LEASE_LIST. */
		if (open_access)
			log_info("access: open mode: every client may use every GPU");
		else
			log_info("access: a munge credential of root or of an allowed user or group "
				 "(%zu users, %zu groups) is required", nallow_uids, nallow_gids);
		return rgpud_lease_init(NULL, time(NULL), err, errlen);
	}
	if (!cfg->state_dir || !*cfg->state_dir) {
		snprintf(err, errlen, "leases need a state directory (to survive restarts)");
		return -1;
	}
#ifndef HAVE_MUNGE
	log_err("access: leases required but rgpud was built without munge: "
		"every client will be refused");
#endif
	char lerr[1024];
	if (rgpud_lease_init(cfg->state_dir, time(NULL), lerr, sizeof(lerr))) {
		snprintf(err, errlen, "%s", lerr);
		return -1;
	}
	/* (a corrupt leases.json was renamed aside and logged by lease.c) */
	log_info("access: leases required (state in %s, admin uid 0 and %u)", cfg->state_dir,
		 admin_uid);
	return 0;
}

int rgpud_access_start(char *err, size_t errlen)
{
	if (!require_lease || expiry_running)
		return 0;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&expiry_cv, &ca);
	pthread_condattr_destroy(&ca);
	expiry_stop = 0;
	int e = pthread_create(&expiry_thread, NULL, expiry_main, NULL);
	if (e) {
		pthread_cond_destroy(&expiry_cv);
		snprintf(err, errlen, "cannot start the lease expiry thread: %s", strerror(e));
		return -1;
	}
	expiry_running = 1;
	return 0;
}

void rgpud_access_fini(void)
{
	if (expiry_running) {
		pthread_mutex_lock(&expiry_mu);
		expiry_stop = 1;
		pthread_cond_signal(&expiry_cv);
		pthread_mutex_unlock(&expiry_mu);
		pthread_join(expiry_thread, NULL);
		pthread_cond_destroy(&expiry_cv);
		expiry_running = 0;
	}
	rgpud_lease_fini();
	require_lease = open_access = 0;
	free(allow_uids);
	free(allow_gids);
	allow_uids = allow_gids = NULL;
	nallow_uids = nallow_gids = 0;
}

/* Whether rgpud was told to admit uid (by name or through a group). */
static int allowed(uint32_t uid, uint32_t gid)
{
	if (uid == 0)
		return 1;
	for (size_t i = 0; i < nallow_uids; i++)
		if (allow_uids[i] == uid)
			return 1;
	if (!nallow_gids)
		return 0;
	gid_t groups[256];
	int ng = 256;
	struct passwd pw, *res = NULL;
	char buf[4096];
	if (getpwuid_r(uid, &pw, buf, sizeof(buf), &res) || !res ||
	    getgrouplist(res->pw_name, gid, groups, &ng) < 0) {
		groups[0] = gid; /* unknown user here, or too many groups: its own gid */
		ng = 1;
	}
	for (size_t i = 0; i < nallow_gids; i++) {
		if (allow_gids[i] == gid)
			return 1;
		for (int k = 0; k < ng; k++)
			if (groups[k] == allow_gids[i])
				return 1;
	}
	return 0;
}

/* --max-sessions-per-user, for authenticated users other than root */
static int over_session_limit(uint32_t uid, char *why, size_t whylen)
{
	if (!max_sessions_per_user || uid == 0)
		return 0;
	int n = rgpud_sessions_of_uid(uid);
	if (n < max_sessions_per_user)
		return 0;
	snprintf(why, whylen, "uid %u already has %d sessions on this rgpud, its limit "
		 "(--max-sessions-per-user)", uid, n);
	return 1;
}

int rgpud_access_hello(const void *cred, size_t len, const char *peer,
		       struct rgpud_principal *who, char *why, size_t whylen)
{
	memset(who, 0, sizeof(*who));
	if (!peer)
		peer = "?";
	struct rgpud_cred c;
	char err[512];
	int ok = rgpud_auth_decode(cred, len, &c, err, sizeof(err)) == 0;
	if (ok) {
		who->uid = c.uid;
		who->gid = c.gid;
		who->job_id = c.job_id;
		who->authenticated = 1;
		who->admin = rgpud_auth_is_admin(c.uid, admin_uid);
	}
	if (open_access) {
		if (ok)
			log_debug("access: %s is uid %u, job %" PRIu64, peer, c.uid, c.job_id);
		else if (len)
			log_debug("access: %s: credential ignored in open mode: %s", peer, err);
		return 0;
	}
	if (!require_lease) {
		if (!ok) {
			snprintf(why, whylen, "this rgpud requires a munge credential: %s%s", err,
				 len ? "" : " (or its administrator may serve everyone with rgpud --open)");
			goto refuse;
		}
		if (!allowed(c.uid, c.gid)) {
			snprintf(why, whylen, "uid %u is not allowed to use this rgpud (its "
				 "administrator admits users with --allow-users= and --allow-groups=)",
				 c.uid);
			goto refuse;
		}
		if (over_session_limit(c.uid, why, whylen))
			goto refuse;
		log_info("access: %s: uid %u, job %" PRIu64 " (allowed)", peer, c.uid, c.job_id);
		return 0;
	}
	if (!ok) {
		snprintf(why, whylen, "%s", err);
		goto refuse;
	}
	if (!who->admin) {
		if (c.job_id == 0) {
			snprintf(why, whylen, "uid %u is not in a Slurm job: GPUs on this server "
				 "need a job lease", c.uid);
			goto refuse;
		}
		/* another uid's job is refused here, before a worker exists */
		if (rgpud_lease_job_uid_count(c.job_id, c.uid, time(NULL)) == 0) {
			snprintf(why, whylen, "job %" PRIu64 " of uid %u holds no lease on this server",
				 c.job_id, c.uid);
			goto refuse;
		}
	}
	if (over_session_limit(c.uid, why, whylen))
		goto refuse;
	log_info("access: %s: uid %u, job %" PRIu64 "%s", peer, c.uid, c.job_id,
		 who->admin ? " (admin)" : "");
	return 0;
refuse:
	log_warn("access: refused %s: %s", peer, why);
	memset(who, 0, sizeof(*who));
	return -1;
}

int rgpud_access_device(const struct rgpud_principal *who, unsigned gpu,
			uint64_t *mem_limit, char *why, size_t whylen)
{
	*mem_limit = 0;
	if (!require_lease)
		return 0;
	if (!who->authenticated) {
		snprintf(why, whylen, "no munge credential");
		goto refuse;
	}
	struct rgpud_lease l;
	if (who->job_id == 0 || rgpud_lease_find(who->job_id, gpu, time(NULL), &l)) {
		snprintf(why, whylen, "job %" PRIu64 " of uid %u holds no lease on GPU %u",
			 who->job_id, who->uid, gpu);
		goto refuse;
	}
	if (l.uid != who->uid) {
		snprintf(why, whylen, "job %" PRIu64 "'s lease on GPU %u belongs to uid %u, not uid %u",
			 who->job_id, gpu, l.uid, who->uid);
		goto refuse;
	}
	*mem_limit = l.mem_limit;
	return 0;
refuse:
	log_warn("access: refused GPU %u: %s", gpu, why);
	return -1;
}

int rgpud_access_charge(const struct rgpud_principal *who, unsigned gpu, uint64_t bytes)
{
	if (!require_lease || bytes == 0)
		return 0;
	int rc = rgpud_lease_charge(who->job_id, gpu, bytes);
	if (rc == RGPUD_LEASE_QUOTA)
		log_info("access: job %" PRIu64 " GPU %u: %" PRIu64 " more bytes would exceed "
			 "its quota", who->job_id, gpu, bytes);
	else if (rc)
		log_warn("access: job %" PRIu64 " GPU %u: allocation refused: no lease",
			 who->job_id, gpu);
	return rc ? -1 : 0;
}

int rgpud_access_refund(const struct rgpud_principal *who, unsigned gpu, uint64_t bytes)
{
	if (!require_lease || bytes == 0)
		return 0;
	return rgpud_lease_refund(who->job_id, gpu, bytes) ? -1 : 0;
}

void rgpud_access_usage(const struct rgpud_principal *who, unsigned gpu,
			uint64_t *limit, uint64_t *used)
{
	*limit = 0;
	*used = 0;
	struct rgpud_lease l;
	if (require_lease && rgpud_lease_find(who->job_id, gpu, time(NULL), &l) == 0) {
		*limit = l.mem_limit;
		*used = l.used;
	}
}

/* ---- lease opcodes ---- */

static int fail(struct wbuf *reply, int status, const char *msg)
{
	put_str(reply, msg);
	return status;
}

static int lease_status(int rc)
{
	switch (rc) {
	case RGPUD_LEASE_OK:
	case RGPUD_LEASE_SAME: return CUDA_SUCCESS;
	case RGPUD_LEASE_NODEV: return CUDA_ERROR_INVALID_DEVICE;
	case RGPUD_LEASE_BUSY: return CUDA_ERROR_DEVICE_UNAVAILABLE;
	case RGPUD_LEASE_NOSPACE: return CUDA_ERROR_OUT_OF_MEMORY;
	case RGPUD_LEASE_EXISTS: return CUDA_ERROR_ALREADY_ACQUIRED;
	case RGPUD_LEASE_IO: return CUDA_ERROR_OPERATING_SYSTEM;
	default: return CUDA_ERROR_INVALID_VALUE;
	}
}

static int may_manage(const struct rgpud_principal *who, unsigned op, struct wbuf *reply,
		      int *status)
{
	char msg[256];
	if (!require_lease) {
		*status = fail(reply, CUDA_ERROR_NOT_SUPPORTED,
			       open_access ? "rgpud runs in open mode (without leases): nothing to manage"
					   : "rgpud runs without leases: nothing to manage");
		return 0;
	}
	if (!who->authenticated || !who->admin) {
		snprintf(msg, sizeof(msg), "%s: uid %u may not manage leases (root and uid %u only)",
			 rgpu_op_name(op), who->uid, admin_uid);
		log_warn("access: %s", msg);
		*status = fail(reply, RGPU_ERR_AUTH, msg);
		return 0;
	}
	return 1;
}

static int op_grant(const struct rgpud_principal *who, struct rd *r, struct wbuf *reply)
{
	struct rgpud_lease l = { 0 };
	l.job_id = get_u64(r);
	l.uid = get_u32(r);
	l.gpu = get_u32(r);
	l.mem_limit = get_u64(r);
	l.expires = get_u64(r);
	if (rd_ok(r) && r->left) /* appended: the compute share */
		l.share = get_u32(r);
	if (!rd_done(r))
		return fail(reply, RGPU_ERR_PROTO, "malformed LEASE_GRANT");
	int status;
	if (!may_manage(who, RGPU_OP_LEASE_GRANT, reply, &status))
		return status;
	char why[512];
	int rc = rgpud_lease_grant(&l, time(NULL), why, sizeof(why));
	if (rc < 0) {
		log_warn("access: lease for job %" PRIu64 " on GPU %u refused: %s", l.job_id, l.gpu,
			 why);
		return fail(reply, lease_status(rc), why);
	}
	return CUDA_SUCCESS;
}

static int op_release(const struct rgpud_principal *who, struct rd *r, struct wbuf *reply)
{
	uint64_t job = get_u64(r);
	if (!rd_done(r))
		return fail(reply, RGPU_ERR_PROTO, "malformed LEASE_RELEASE");
	int status;
	if (!may_manage(who, RGPU_OP_LEASE_RELEASE, reply, &status))
		return status;
	int n = rgpud_lease_release_job(job);
	/* Even without leases left: the job's sessions must go (and free
	 * their memory) once Slurm says the job is over. */
	rgpud_sessions_end_job(job);
	put_u32(reply, (uint32_t)n);
	return CUDA_SUCCESS;
}

static int op_list(const struct rgpud_principal *who, struct rd *r, struct wbuf *reply)
{
	if (!rd_done(r))
		return fail(reply, RGPU_ERR_PROTO, "malformed LEASE_LIST");
	if (require_lease && !who->authenticated)
		return fail(reply, RGPU_ERR_AUTH, "LEASE_LIST needs a munge credential");
	struct rgpud_gpu_load *g = NULL;
	struct rgpud_lease *l = NULL;
	size_t ng = 0, nl = 0;
	if (rgpud_lease_gpus(&g, &ng) || rgpud_lease_list(&l, &nl)) {
		free(g);
		free(l);
		return fail(reply, CUDA_ERROR_OUT_OF_MEMORY, "out of memory");
	}
	put_u32(reply, (uint32_t)ng);
	for (size_t i = 0; i < ng; i++) {
		put_u32(reply, g[i].gpu);
		put_str(reply, g[i].name);
		put_u64(reply, g[i].total);
		put_u64(reply, g[i].reserved);
		put_u32(reply, (uint32_t)g[i].exclusive);
	}
	/* a user sees only their own leases; root and SlurmUser see all */
	size_t shown = 0;
	for (size_t i = 0; i < nl; i++)
		if (who->admin || l[i].uid == who->uid)
			l[shown++] = l[i];
	nl = shown;
	put_u32(reply, (uint32_t)nl);
	for (size_t i = 0; i < nl; i++) {
		put_u64(reply, l[i].job_id);
		put_u32(reply, l[i].uid);
		put_u32(reply, l[i].gpu);
		put_u64(reply, l[i].mem_limit);
		put_u64(reply, l[i].used);
		put_u64(reply, l[i].expires);
	}
	put_u32(reply, (uint32_t)nl); /* appended: the compute shares */
	for (size_t i = 0; i < nl; i++)
		put_u32(reply, l[i].share);
	free(g);
	free(l);
	return CUDA_SUCCESS;
}

int rgpud_access_admin_op(const struct rgpud_principal *who, unsigned op,
			  struct rd *r, struct wbuf *reply)
{
	switch (op) {
	case RGPU_OP_LEASE_GRANT: return op_grant(who, r, reply);
	case RGPU_OP_LEASE_RELEASE: return op_release(who, r, reply);
	case RGPU_OP_LEASE_LIST: return op_list(who, r, reply);
	default: return -1;
	}
}
