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
};

/* Called once per connection with HELLO's credential bytes (may be empty).
 * 0: accepted, *who filled in.  -1: refused, why says so (sent to the client
 * and logged). */
int rgpud_access_hello(const void *cred, size_t len, const char *peer,
		       struct rgpud_principal *who, char *why, size_t whylen);

/* Called when a session first uses a GPU (context creation, DEVICE_INFO).
 * 0: allowed, *mem_limit set (0 = no quota).  -1: refused with why. */
int rgpud_access_device(const struct rgpud_principal *who, unsigned gpu,
			uint64_t *mem_limit, char *why, size_t whylen);

/* Lease and status opcodes (RGPU_OP_LEASE_* in proto.h).  Reads the request
 * from r, writes the reply fields (after the status) to reply, returns the
 * status.  Returns -1 if the opcode is not one of them. */
int rgpud_access_admin_op(const struct rgpud_principal *who, unsigned op,
			  struct rd *r, struct wbuf *reply);

#endif
