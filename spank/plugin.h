/*
 * spank_rgpu: remote GPUs for Slurm jobs.  Shared declarations of the
 * plugin's files; each SPANK context lives in its own file:
 *
 *   rgpu_spank.c      entry points, dispatch by context
 *   options.c         --rgpu-mem and the plugstack.conf arguments
 *   ctx_local.c       sbatch/salloc/srun: refuse wrong requests at submission
 *   ctx_job_script.c  prolog: choose and lease the job's GPUs; epilog: release
 *   ctx_remote.c      slurmstepd: the tasks' environment
 *   discover.c        GPU servers from Slurm's node table
 *   view.c            the load snapshot, refreshed when stale
 *   jobrec.c          what a job was granted (node-local file, AdminComment)
 *   account.c         peak memory and GPU time, recorded at each step's end
 */
#ifndef RGPU_SPANK_PLUGIN_H
#define RGPU_SPANK_PLUGIN_H

#include "cluster.h"
#include "policy.h"
#include "snapshot.h"

#include <slurm/spank.h>
#include <stddef.h>
#include <stdint.h>

struct rgpu_cfg {
	char client_dir[1024]; /* prefixed to the tasks' LD_LIBRARY_PATH */
	char standby[1024];    /* standby=: servers any job may recover on (RGPU_STANDBY) */
	char state_dir[1024];  /* node-local: snapshot, job records */
	unsigned port;         /* rgpud's port on every GPU node */
	const struct rg_policy *policy;
	int ttl;        /* seconds a load snapshot is trusted */
	int timeout_ms; /* per server, connect and reply */
	int parallel;   /* servers polled at once */
	int grace;      /* seconds a lease outlives the job's time limit */
	int wait;       /* seconds the prolog waits for GPU room */
};
extern struct rgpu_cfg rgpu_cfg;

/* options.c */
int rgpu_cfg_parse(int ac, char **av);
/* Expands %n in state_dir (NULL: this host's short name). */
void rgpu_cfg_set_node(const char *node);
/* Creates state_dir and its parents (0755).  0 or -1. */
int rgpu_state_dir_ensure(void);
int rgpu_options_register(spank_t sp);
/* --rgpu-mem as given on the command line (NULL: not given). */
extern char *rgpu_mem_arg;
/* Parses a size for --rgpu-mem; 0 or -1 with a sentence naming the option. */
int rgpu_mem_parse(const char *s, uint64_t *bytes, char *err, size_t errlen);
extern struct spank_option rgpu_mem_option;
/* --rgpu-share: the slice's compute share, a percentage of the GPU
 * (daemon/sched/); 0 or -1 with a sentence naming the option. */
extern char *rgpu_share_arg;
int rgpu_share_parse(const char *s, uint32_t *pct, char *err, size_t errlen);
extern struct spank_option rgpu_share_option;

/* Per context (return 0, or -1 after slurm_error). */
int rgpu_local_post_opt(spank_t sp);
int rgpu_job_prolog(spank_t sp);
int rgpu_job_epilog(spank_t sp);
int rgpu_remote_user_init(spank_t sp);
int rgpu_remote_exit(spank_t sp);
struct rgpu_jobrec;

/* account.c: the job's peak memory and GPU time from its servers into
 * rec (accounted, peak, peak_max, gpu_ms).  0, or -1 if a server did not
 * answer (what the others said is kept). */
int rgpu_account(uint32_t job, struct rgpu_jobrec *rec);
/* ctx_job_script.c: ends the job's leases (once: clears rec's servers). */
void rgpu_release(uint32_t job, struct rgpu_jobrec *rec);

/* discover.c: nodes with Gres=rgpu:N, as servers to poll.  0 or -1. */
int rgpu_discover(struct rg_server_addr **out, size_t *n, char *err, size_t errlen);

/* view.c: the cluster view.  max_age: refresh (poll every server) if the
 * snapshot is older; -1 = any age will do.  With lock, the snapshot stays
 * locked (flock) until rgpu_view_release, so grants from this node are
 * serialised and recorded.  0 or -1 with err. */
int rgpu_view_get(struct rg_cluster *c, int max_age, int lock, char *err, size_t errlen);
/* Whether the last rgpu_view_get polled the servers (1) or used the
 * snapshot file, which other nodes' grants and releases do not update (0). */
int rgpu_view_polled(void);
void rgpu_view_release(struct rg_cluster *c, int save);

/* jobrec.c */
struct rgpu_jobrec {
	char servers[4096];  /* RGPU_SERVERS value */
	char gpus[4096];     /* node:index,... (for the snapshot on release) */
	uint64_t mem;        /* slice size, 0 = whole GPUs */
	char error[512];     /* set when the allocation failed */
	uint32_t waited;     /* seconds the prolog waited for room */
	/* accounting, filled by the epilog (LEASE_STATS) */
	int accounted;
	uint64_t peak;       /* bytes: sum over the job's GPUs of each one's peak */
	uint64_t peak_max;   /* bytes: the largest of those */
	uint64_t gpu_ms;     /* milliseconds sessions held the job's GPUs */
	uint64_t attained_ns; /* their kernels' GPU time (rgpud --sched) */
};
int rgpu_jobrec_write(uint32_t job, const struct rgpu_jobrec *r);
/* 0: found; -1: none. */
int rgpu_jobrec_read(uint32_t job, struct rgpu_jobrec *r);
void rgpu_jobrec_remove(uint32_t job);
/* The record in the job's AdminComment, for the job's other nodes. */
int rgpu_jobrec_publish(uint32_t job, const struct rgpu_jobrec *r);
/* Waits up to wait_s for the AdminComment record; 0, 1 (job has no rgpu
 * record and asks for none), -1 (timeout / error). */
int rgpu_jobrec_fetch(uint32_t job, int wait_s, struct rgpu_jobrec *r);

#endif
