/*
 * Who may use which GPU, and with what quota.  The session code calls these
 * hooks; access.c implements them (open access, or munge credentials checked
 * against Slurm job leases: see lease.h).
 */
#ifndef RGPUD_ACCESS_H
#define RGPUD_ACCESS_H

#include <stddef.h>
#include <stdint.h>

struct wbuf;
struct rd;

struct rgpud_principal {
	uint32_t uid, gid;
	uint64_t job_id;   /* 0 when the client is not in a job */
	int admin;         /* root or SlurmUser: may manage leases */
	int authenticated; /* credential verified (false in open mode) */
	int local_root;    /* root on this host, proven by the kernel (Unix socket) */
};

struct rgpud_access_config {
	int require_lease;     /* --leases: munge credential + job lease required */
	int open_access;       /* --open (without --leases): no credential needed */
	/* without either: a munge credential of root or of these is required
	 * (--allow-users, --allow-groups; a group admits its members, primary
	 * or supplementary) */
	const uint32_t *allow_uids;
	size_t nallow_uids;
	const uint32_t *allow_gids;
	size_t nallow_gids;
	int max_sessions_per_user; /* authenticated uids other than root; 0: none */
	int check_interval_s;      /* how often expired leases are collected (0: default) */
	const char *state_dir; /* where leases persist across restarts */
	unsigned admin_uid;    /* besides root, may manage leases (SlurmUser) */
};

/* Once at start-up (loads persisted leases).  0 or -1+err. */
int rgpud_access_init(const struct rgpud_access_config *cfg, char *err, size_t errlen);
/* Starts the lease expiry thread: after daemon(), which keeps no thread
 * but the caller.  0 or -1+err. */
int rgpud_access_start(char *err, size_t errlen);
void rgpud_access_fini(void);

/* Called once per connection with HELLO's credential bytes (may be empty).
 * 0: accepted, *who filled in.  -1: refused, why says so (sent to the client
 * and logged). */
int rgpud_access_hello(const void *cred, size_t len, const char *peer,
		       struct rgpud_principal *who, char *why, size_t whylen);

/* Called when a session first uses a GPU (context creation, DEVICE_INFO).
 * 0: allowed, *mem_limit set (0 = no quota).  -1: refused with why. */
int rgpud_access_device(const struct rgpud_principal *who, unsigned gpu,
			uint64_t *mem_limit, char *why, size_t whylen);

/* Device-memory accounting against the quota of the caller's lease on gpu
 * (summed over every session of the job).  charge(n) before an allocation:
 * 0 = fits, -1 = over quota (or it would wrap); refund(n) after a free or a
 * failed allocation: -1 if more than was charged (nothing changes).  No-ops
 * without leases. */
int rgpud_access_charge(const struct rgpud_principal *who, unsigned gpu, uint64_t bytes);
int rgpud_access_refund(const struct rgpud_principal *who, unsigned gpu, uint64_t bytes);
/* Quota (0 = none) and bytes charged so far, for cuMemGetInfo. */
void rgpud_access_usage(const struct rgpud_principal *who, unsigned gpu,
			uint64_t *limit, uint64_t *used);

/* Lease and status opcodes (RGPU_OP_LEASE_* in proto.h).  Reads the request
 * from r, writes the reply fields (after the status) to reply, returns the
 * status.  Returns -1 if the opcode is not one of them. */
int rgpud_access_admin_op(const struct rgpud_principal *who, unsigned op,
			  struct rd *r, struct wbuf *reply);

#endif
