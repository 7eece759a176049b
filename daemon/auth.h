/*
 * Client authentication for rgpud: a munge credential (HELLO's credential
 * bytes) proves the client's uid and gid; its payload names the Slurm job the
 * client runs in.  munged rejects expired and replayed credentials.
 *
 * Payload format (written by client/cred.c): the ASCII text
 * "rgpu-job=<decimal job id>", no NUL; job id 0 when not in a job.
 */
#ifndef RGPUD_AUTH_H
#define RGPUD_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define RGPU_CRED_PAYLOAD_PREFIX "rgpu-job="
/* Longest credential accepted (munge's are a few hundred bytes). */
#define RGPUD_AUTH_MAX_CRED 8192

struct rgpud_cred {
	uint32_t uid, gid;
	uint64_t job_id;
};

/* Decodes and checks a credential (munged's socket: RGPU_MUNGE_SOCKET or
 * munge's default).  0, or -1 with why: "no munge credential",
 * "munge: <munge's error>", "munge credential payload ...", or "rgpud was
 * built without munge". */
int rgpud_auth_decode(const void *cred, size_t len, struct rgpud_cred *out,
		      char *why, size_t whylen);

/* Whether uid may manage leases (root, or admin_uid). */
static inline int rgpud_auth_is_admin(uint32_t uid, unsigned admin_uid)
{
	return uid == 0 || uid == admin_uid;
}

/* Strict parse of the payload; 0 or -1. */
int rgpud_auth_parse_payload(const void *p, size_t n, uint64_t *job_id);

#endif
