/* The client's proof of identity for rgpud (HELLO's credential bytes). */
#ifndef RGPU_CLIENT_CRED_H
#define RGPU_CLIENT_CRED_H

#include <stddef.h>

/* Payload of the munge credential; must match daemon/auth.h. */
#define RGPU_CRED_PAYLOAD_PREFIX "rgpu-job="

/*
 * Makes a credential for one session: a munge credential (munge_encode, as
 * the calling uid/gid) whose payload is "rgpu-job=<SLURM_JOB_ID or 0>".
 * RGPU_MUNGE_SOCKET names munged's socket instead of munge's default.
 *
 * 0: *buf (free() it; NULL when empty) and *len hold the credential.  The
 * credential is empty when rgpu was built without munge, or when munged is
 * not reachable at its default socket; err then holds a note saying why
 * (worth a debug log: a server that requires leases will refuse the client).
 * -1: err says why (bad SLURM_JOB_ID, munge failure, munged not reachable at
 * an RGPU_MUNGE_SOCKET given explicitly).
 */
int rgpu_client_credential(void **buf, size_t *len, char *err, size_t errlen);

#endif
