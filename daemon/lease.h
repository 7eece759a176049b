/*
 * Slurm job leases: which job may use which GPU of this rgpud, and how much
 * of its memory.
 *
 * A lease is (job, uid, gpu, mem_limit, expires).  mem_limit 0 leases the
 * whole GPU, exclusively: no other job may hold a lease on that GPU at the
 * same time.  mem_limit > 0 is a slice; several jobs may hold slices of one
 * GPU as long as
 *
 *     sum over the GPU's slices of (mem_limit + RGPUD_LEASE_CTX_RESERVE)
 *         <= the GPU's total memory
 *
 * The reserve covers what a CUDA context costs on the device outside of any
 * cuMemAlloc (code, stacks, printf/heap buffers, the driver's own
 * allocations), which the quota does not see.
 *
 * expires is unix seconds (0 = never).  A lease whose time has come is no
 * longer found by rgpud_lease_find(), is dropped when leases.json is loaded,
 * and is removed by rgpud_lease_expire() (called periodically by access.c,
 * which then ends the job's sessions).
 *
 * The table persists in <state_dir>/leases.json (written through a temp file,
 * fsync and rename, so a crash leaves the old or the new file, never half of
 * one).  Bytes charged (memory in use) are not persisted: session workers
 * die with the rgpud parent (PR_SET_PDEATHSIG), so a restarted rgpud has no
 * sessions, hence no memory in use.
 *
 * Every function is thread-safe (one mutex over the table).
 */
#ifndef RGPUD_LEASE_H
#define RGPUD_LEASE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Device memory set aside per slice lease for one context, by default
 * (rgpud --ctx-reserve changes it; test/gpu/context-cost.sh measures what a
 * context costs).  Every context a session creates is charged this much to
 * its lease, and a slice may hold up to mem_limit + the reserve: the first
 * context comes out of the reserve, every further one (another session of
 * the job, or another context of one session) out of the quota. */
#define RGPUD_LEASE_CTX_RESERVE (526ull << 20)
/* How often access.c looks for expired leases. */
#define RGPUD_LEASE_CHECK_INTERVAL_S 15
#define RGPUD_LEASE_FILE "leases.json"
#define RGPUD_MAX_GPUS 64

struct rgpud_lease {
	uint64_t job_id;
	uint32_t uid;
	uint32_t gpu;
	uint64_t mem_limit; /* bytes; 0 = whole GPU, exclusive */
	uint64_t expires;   /* unix seconds; 0 = never */
	uint64_t used;      /* bytes charged now, contexts included (not persisted) */
	uint64_t peak;      /* the most used has been (not persisted) */
	uint32_t share;     /* compute share, percent 1..100; 0 = none given
			     * (--rgpu-share; daemon/sched/ turns it into a weight) */
};

struct rgpud_gpu_load {
	uint32_t gpu;
	char name[128];
	uint64_t total;    /* device memory (0 if the GPU was never registered) */
	uint64_t reserved; /* slices + their reserves, or total if exclusive */
	int exclusive;     /* a whole-GPU lease holds it */
};

enum rgpud_lease_rc {
	RGPUD_LEASE_OK = 0,
	RGPUD_LEASE_SAME = 1,      /* grant: identical lease already held */
	RGPUD_LEASE_INVAL = -1,    /* bad arguments */
	RGPUD_LEASE_NODEV = -2,    /* no such GPU */
	RGPUD_LEASE_BUSY = -3,     /* exclusive conflict */
	RGPUD_LEASE_NOSPACE = -4,  /* slices would exceed the GPU's memory */
	RGPUD_LEASE_EXISTS = -5,   /* job holds a different lease on that GPU */
	RGPUD_LEASE_IO = -6,       /* could not persist (nothing changed) */
	RGPUD_LEASE_NOTFOUND = -7, /* charge/find: no such lease */
	RGPUD_LEASE_QUOTA = -8,    /* charge: over the lease's quota */
};

/* The per-slice context reserve in force (default RGPUD_LEASE_CTX_RESERVE).
 * Set it before granting: leases already granted were checked with the old
 * value. */
void rgpud_lease_set_ctx_reserve(uint64_t bytes);
uint64_t rgpud_lease_ctx_reserve(void);

/* Loads <state_dir>/leases.json if it exists (state_dir NULL: no
 * persistence, for tests and open mode), dropping expired leases.  The
 * directory is created (0700) if missing.  A file that cannot be parsed is
 * renamed to leases.json.corrupt-<unixtime>, logged as an error naming both
 * paths, and the table starts empty; *err then says so too (warn text) but
 * the call succeeds.  Returns 0, or -1 with err (unreadable directory or
 * file, rename failed).  May be called again after rgpud_lease_fini(). */
int rgpud_lease_init(const char *state_dir, time_t now, char *err, size_t errlen);
void rgpud_lease_fini(void);

/* The GPUs this server has: the daemon registers each (index, name, total
 * memory) after loading the driver.  Grants for a GPU never registered are
 * refused (RGPUD_LEASE_NODEV); leases loaded from leases.json are kept
 * whatever the GPUs (a GPU may come back). */
void rgpud_lease_set_gpu(unsigned gpu, const char *name, uint64_t total);
/* rgpud --memory-overcommit: slices of a GPU may together promise up to
 * pct percent (>= 100) of its memory. */
void rgpud_lease_set_overcommit(unsigned pct);

/* Adds a lease (l->used ignored), checking capacity atomically and
 * persisting it.  An identical lease (same uid, limit, expires) returns
 * RGPUD_LEASE_SAME; one differing only in expires is renewed (RGPUD_LEASE_OK).
 * Failures write a sentence into why. */
int rgpud_lease_grant(const struct rgpud_lease *l, time_t now, char *why, size_t whylen);

/* Claims: the job whose Slurm prolog waits longest for room on a GPU
 * holds that GPU's claim (one per GPU), renewed while it waits.  Other
 * jobs' grants on the GPU then count the claim as taken (a whole-GPU claim
 * leaves them nothing), so the GPU drains for the waiting job instead of
 * being taken by every job that starts after it; the claimer's own grant
 * ignores it and converts it.  Not persisted (a restart drops claims: the
 * prolog renews them).  ttl_s 0 drops the job's claim.  RGPUD_LEASE_OK,
 * _NODEV, _INVAL (a slice larger than the GPU can ever hold), or
 * _BUSY (another job's live claim; why names it). */
int rgpud_lease_claim(uint64_t job_id, unsigned gpu, uint64_t mem_limit, time_t now,
		      unsigned ttl_s, char *why, size_t whylen);

/* Removes every lease of job; returns how many (>= 0).  A persistence failure
 * is logged; the leases are released regardless. */
int rgpud_lease_release_job(uint64_t job_id);

/* Copies the live (unexpired) lease of (job, gpu) into *out: 0 or
 * RGPUD_LEASE_NOTFOUND.  rgpud_lease_job_count counts the job's live leases. */
int rgpud_lease_find(uint64_t job_id, unsigned gpu, time_t now, struct rgpud_lease *out);
int rgpud_lease_job_count(uint64_t job_id, time_t now);
/* The job's live leases held by uid. */
int rgpud_lease_job_uid_count(uint64_t job_id, uint32_t uid, time_t now);

/* Charges bytes to the lease (job, gpu): RGPUD_LEASE_QUOTA if used + bytes
 * exceeds mem_limit + the context reserve or would wrap (mem_limit 0: only
 * the wrap),
 * RGPUD_LEASE_NOTFOUND without a lease.  Nothing changes on failure. */
int rgpud_lease_charge(uint64_t job_id, unsigned gpu, uint64_t bytes);
/* Gives bytes back: RGPUD_LEASE_INVAL (logged, nothing changes) if that is
 * more than the lease has charged; 0 (a no-op) without a lease. */
int rgpud_lease_refund(uint64_t job_id, unsigned gpu, uint64_t bytes);

/* Removes the leases expired at now, persists, and returns the distinct jobs
 * that lost one in a malloc'd array (*jobs, *njobs; free() it). 0 or -1
 * (out of memory). */
int rgpud_lease_expire(time_t now, uint64_t **jobs, size_t *njobs);

/* Snapshots for LEASE_LIST: malloc'd arrays (free() them); 0 or -1. */
int rgpud_lease_list(struct rgpud_lease **leases, size_t *n);
int rgpud_lease_gpus(struct rgpud_gpu_load **gpus, size_t *n);

/* (access.c) Collects expired leases now and ends their jobs' sessions
 * (rgpud_sessions_end_job); what the expiry thread does periodically. */
void rgpud_access_check_expiry(time_t now);

#endif
