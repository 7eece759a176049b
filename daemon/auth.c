/* munge credential checks (see auth.h). */
#include "config.h"

#include "auth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_MUNGE
#include <munge.h>
#endif

int rgpud_auth_parse_payload(const void *p, size_t n, uint64_t *job_id)
{
	const size_t plen = sizeof(RGPU_CRED_PAYLOAD_PREFIX) - 1;
	const char *s = p;
	if (!p || n <= plen || n > plen + 20 || memcmp(s, RGPU_CRED_PAYLOAD_PREFIX, plen))
		return -1;
	uint64_t v = 0;
	for (size_t i = plen; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		unsigned d = (unsigned)(s[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	*job_id = v;
	return 0;
}

int rgpud_auth_decode(const void *cred, size_t len, struct rgpud_cred *out,
		      char *why, size_t whylen)
{
	memset(out, 0, sizeof(*out));
	if (!cred || len == 0) {
		snprintf(why, whylen, "no munge credential (is munged running on the client host?)");
		return -1;
	}
#ifndef HAVE_MUNGE
	snprintf(why, whylen, "rgpud was built without munge: cannot check credentials");
	return -1;
#else
	if (len > RGPUD_AUTH_MAX_CRED) {
		snprintf(why, whylen, "munge credential too long (%zu bytes)", len);
		return -1;
	}
	char *text = malloc(len + 1);
	if (!text) {
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	memcpy(text, cred, len);
	text[len] = 0;
	if (strlen(text) != len) {
		free(text);
		snprintf(why, whylen, "munge: credential contains a NUL byte");
		return -1;
	}

	munge_ctx_t ctx = munge_ctx_create();
	if (!ctx) {
		free(text);
		snprintf(why, whylen, "munge: cannot create a context (out of memory)");
		return -1;
	}
	const char *sock = getenv("RGPU_MUNGE_SOCKET");
	if (sock && *sock && munge_ctx_set(ctx, MUNGE_OPT_SOCKET, sock) != EMUNGE_SUCCESS) {
		snprintf(why, whylen, "munge: socket %s: %s", sock, munge_ctx_strerror(ctx));
		munge_ctx_destroy(ctx);
		free(text);
		return -1;
	}
	void *payload = NULL;
	int plen = 0;
	uid_t uid = (uid_t)-1;
	gid_t gid = (gid_t)-1;
	munge_err_t e = munge_decode(text, ctx, &payload, &plen, &uid, &gid);
	free(text);
	int rc = -1;
	if (e != EMUNGE_SUCCESS) {
		const char *msg = munge_ctx_strerror(ctx);
		snprintf(why, whylen, "munge: %s", msg ? msg : munge_strerror(e));
		goto out;
	}
	uint64_t job = 0;
	if (rgpud_auth_parse_payload(payload, plen > 0 ? (size_t)plen : 0, &job)) {
		snprintf(why, whylen, "munge credential of uid %u does not carry an rgpu job id "
			 "(payload of %d bytes)", (unsigned)uid, plen);
		goto out;
	}
	out->uid = (uint32_t)uid;
	out->gid = (uint32_t)gid;
	out->job_id = job;
	rc = 0;
out:
	free(payload);
	munge_ctx_destroy(ctx);
	return rc;
#endif
}
