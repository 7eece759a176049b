/* munge credentials for the client (cred.h). */
#include "config.h"

#include "cred.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_MUNGE
#include <munge.h>
#endif

static void note(char *err, size_t errlen, const char *msg)
{
	if (err && errlen)
		snprintf(err, errlen, "%s", msg);
}

int rgpu_client_credential(void **buf, size_t *len, char *err, size_t errlen)
{
	*buf = NULL;
	*len = 0;
	if (err && errlen)
		err[0] = 0;

	uint64_t job = 0;
	const char *s = getenv("SLURM_JOB_ID");
	if (s && *s) {
		char *end;
		errno = 0;
		unsigned long long v = strtoull(s, &end, 10);
		if (errno || *end || *s < '0' || *s > '9') {
			if (err && errlen)
				snprintf(err, errlen, "SLURM_JOB_ID=\"%s\" is not a job id", s);
			return -1;
		}
		job = v;
	}
#ifndef HAVE_MUNGE
	(void)job;
	note(err, errlen, "rgpu was built without munge: sending no credential");
	return 0;
#else
	char payload[64];
	int plen = snprintf(payload, sizeof(payload), RGPU_CRED_PAYLOAD_PREFIX "%llu",
			    (unsigned long long)job);

	munge_ctx_t ctx = munge_ctx_create();
	if (!ctx) {
		note(err, errlen, "munge: cannot create a context (out of memory)");
		return -1;
	}
	const char *sock = getenv("RGPU_MUNGE_SOCKET");
	int explicit_sock = sock && *sock;
	if (explicit_sock && munge_ctx_set(ctx, MUNGE_OPT_SOCKET, sock) != EMUNGE_SUCCESS) {
		if (err && errlen)
			snprintf(err, errlen, "munge: socket %s: %s", sock, munge_ctx_strerror(ctx));
		munge_ctx_destroy(ctx);
		return -1;
	}
	char *cred = NULL;
	munge_err_t e = munge_encode(&cred, ctx, payload, plen);
	if (e != EMUNGE_SUCCESS) {
		const char *msg = munge_ctx_strerror(ctx);
		if (!msg)
			msg = munge_strerror(e);
		int rc = -1;
		if (err && errlen) {
			if (e == EMUNGE_SOCKET && !explicit_sock)
				snprintf(err, errlen, "munged not reachable (%s): sending no credential",
					 msg);
			else
				snprintf(err, errlen, "munge: cannot make a credential: %s", msg);
		}
		if (e == EMUNGE_SOCKET && !explicit_sock)
			rc = 0;
		free(cred);
		munge_ctx_destroy(ctx);
		return rc;
	}
	munge_ctx_destroy(ctx);
	*buf = cred;
	*len = strlen(cred);
	return 0;
#endif
}
