/*
 * rgpud's scheduler of the tenants that share a GPU (docs/sharing.md).
 *
 * The parent creates one shared-memory segment (a memfd) at start-up and
 * hands it to every session worker.  It holds a slot per (worker, GPU)
 * the parent admitted: the tenant's weight (its lease's --rgpu-share), and
 * what its worker measured of it (attained GPU time, kernels in flight).
 * A worker gates each launch on the policy (policy.h) by reading the other
 * slots of its GPU: no round trip to the parent, no lock (atomics only), a
 * futex per GPU to wait on, with a timeout.  A worker that dies or stops
 * wedges nothing: its slot stops counting once its heartbeat is older than
 * SCHED_STALE_NS, and the parent frees it when the worker exits.
 *
 * Attained time: the worker records an event before and after each launch
 * and a thread of its own charges each completed kernel (policy.h:
 * sched_charge).  With --sched=fifo and MPS off nothing is recorded
 * (rgpud's old behaviour, at no cost).
 */
#ifndef RGPUD_SCHED_H
#define RGPUD_SCHED_H

#include "policy.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct rgpud_principal;

#define SCHED_SLOTS 512
#define SCHED_STALE_NS (200ull * 1000000)  /* a silent worker stops counting */
#define SCHED_EPISODE_IDLE_NS (5ull * 1000000) /* las: idle this long ends an episode */

/* rgpud's settings (main.c) */
struct sched_config {
	int policy;         /* enum sched_policy */
	uint64_t quantum;   /* ns */
	int mps;            /* SCHED_MPS_* */
	char mps_dir[512];  /* where per-job MPS pipe and log directories go */
	char mps_control[512]; /* nvidia-cuda-mps-control */
	uint32_t mps_default_share; /* thread percentage without a lease share (75) */
};
enum { SCHED_MPS_OFF = 0, SCHED_MPS_JOB = 1 };

/* One session's tenancy of one GPU, as the parent lists it. */
struct sched_tenant_info {
	pid_t pid;
	uint32_t gpu, weight, share, pct;
	uint64_t job;
	uint32_t uid;
	uint64_t attained_ns, busy_ns;
};

/* ---- parent ---- */
/* Creates the segment (before any worker).  0 or -1 with err. */
int sched_parent_init(const struct sched_config *cfg, char *err, size_t errlen);
const struct sched_config *sched_config(void);
/* The segment's descriptor for a worker to inherit (-1 without one). */
int sched_parent_fd(void);
/* The worker's argument for --worker-sched. */
void sched_worker_arg(char *out, size_t n);
/* A worker was admitted to gpu: give it a slot (weight from its lease's
 * share, or a lowered one).  0, or -1 when every slot is taken (the
 * session then runs ungated). */
int sched_parent_admit(pid_t pid, const struct rgpud_principal *who, unsigned gpu);
/* SESSION_SHARE: lowers the worker's share on every GPU (and for GPUs it
 * is admitted to later).  0, or -1 (not a percentage). */
int sched_parent_lower_share(pid_t pid, uint32_t share);
/* The worker exited: its slots are freed; what they attained per GPU is
 * added to ns[gpu] (ns may be NULL). */
void sched_parent_release(pid_t pid, uint64_t *ns, size_t ngpu);
/* What the worker attained on gpu so far (ns), or 0. */
uint64_t sched_parent_attained(pid_t pid, unsigned gpu, uint64_t *busy, uint32_t *weight,
			       uint32_t *pct);
/* The uid worker pid runs as (sched_parent_spawned): 0, or -1 if unknown. */
int sched_parent_run_uid(pid_t pid, unsigned *uid);
/* The worker was started with this MPS active thread percentage (100 or 0:
 * none); mps_who: the principal whose MPS daemon it uses (NULL: none),
 * whose session count sched_parent_release() gives back. */
void sched_parent_spawned(pid_t pid, uint32_t pct, const struct rgpud_principal *mps_who,
			  unsigned run_uid);

/* SESSION_LIST and SESSION_SHARE from the worker pid serving who (list.c):
 * the status, reply fields in out; -1 for another opcode. */
struct rd;
struct wbuf;
int sched_parent_op(const struct rgpud_principal *who, pid_t pid, unsigned op, struct rd *r,
		    struct wbuf *out);

/* ---- worker ---- */
/* From --worker-sched (sched_worker_arg's text).  0 or -1. */
int sched_worker_init(const char *arg);
/* The worker launched a kernel on gpu: from now on it is one of the GPU's
 * tenants (a GPU of one tenant is neither gated nor timed).  A context
 * alone does not count: each rank of a job may make one on its peer's GPU
 * (to enable peer access) and never run anything there. */
void sched_worker_uses(unsigned gpu);
/* Around a launch on ctx's GPU: before() waits until the policy lets the
 * session submit and records a start event (token for after()); after()
 * records the end event (rc: the launch's result; a failed launch is not
 * counted).  Both are no-ops when the scheduler is off. */
struct sched_token {
	void *start;
	int gpu;
};
void sched_before_launch(unsigned gpu, void *cuctx, void *custream, uint32_t demand,
			 struct sched_token *t);
/* Whether launches on gpu should say what part of it they need (demand,
 * percent, for sched_before_launch; sched_grid_demand): only under MPS
 * with other tenants, where the gate weighs it (policy.h).  Otherwise
 * they pass 100 and spare the work. */
int sched_wants_demand(unsigned gpu);
void sched_after_launch(struct sched_token *t, void *cuctx, void *custream, int rc);
/* ctx is about to be destroyed: forget its records. */
void sched_forget_ctx(void *cuctx);

/* ---- MPS (mps.c, parent) ---- */
/* The environment a worker of this job needs before its first CUDA call
 * (CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), starting
 * the job's MPS control daemon if needed.  Outside a job the group is the
 * uid the worker runs as (run_uid, run_gid own the directories).  Writes up to max strings into
 * env; returns how many (0: no MPS for this session) and the thread
 * percentage in *pct (100: the whole GPU). */
int sched_mps_env(const struct rgpud_principal *who, unsigned run_uid, unsigned run_gid,
		  char env[][600], int max, uint32_t *pct);
/* The job's last session ended: stop its MPS daemon. */
void sched_mps_session_end(const struct rgpud_principal *who, unsigned run_uid);
void sched_mps_shutdown(void);

#endif
