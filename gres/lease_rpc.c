#include "lease_rpc.h"
#include "frame.h"
#include "lease.h" /* RGPUD_LEASE_CTX_RESERVE: the reserve of servers that do not say */
#include "proto.h"
#include "transport.h"
#include "wire.h"

#include <config.h>
#ifdef HAVE_MUNGE
#include <munge.h>
#endif
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Must match daemon/auth.h's payload (the daemon parses it strictly). */
#define CRED_PREFIX "rgpu-job="

struct rg_conn {
	struct rgpu_conn *io;
	uint64_t next_id;
	uint8_t *rx;
};

/* One request, one reply; the reply payload is left in c->rx. */
static int call(struct rg_conn *c, unsigned op, struct wbuf *req, struct rd *reply, int32_t *status)
{
	uint64_t id = ++c->next_id;
	if (req->oom || rgpu_frame_send(c->io, (uint16_t)op, 0, id, req->data, req->len, NULL, 0))
		return -1;
	struct rgpu_hdr h;
	if (rgpu_frame_recv_hdr(c->io, &h) != RGPU_HDR_OK || !(h.flags & RGPU_F_REPLY) ||
	    h.id != id)
		return -1;
	free(c->rx);
	c->rx = malloc(h.len ? h.len : 1);
	if (!c->rx || (h.len && rgpu_recv(c->io, c->rx, h.len)))
		return -1;
	rd_init(reply, c->rx, h.len);
	*status = get_i32(reply);
	return rd_ok(reply) ? 0 : -1;
}

static void failure(struct rd *r, int32_t st, char *why, size_t whylen)
{
	const char *msg = get_str(r, 1024);
	snprintf(why, whylen, "%s", msg ? msg : "refused");
	(void)st;
}

/* The rg_lease_* calls' request and answer: sends w (and frees it);
 * -1 with "connection lost" in why, the server's refusal (its status,
 * its message in why), or 0 with the reply's fields in *r. */
static int lease_call(struct rg_conn *c, unsigned op, struct wbuf *w, struct rd *r, char *why, size_t whylen)
{
	int32_t st;
	int rc = call(c, op, w, r, &st);
	wbuf_free(w);
	if (rc) {
		snprintf(why, whylen, "connection lost");
		return -1;
	}
	if (st)
		failure(r, st, why, whylen);
	return st;
}

/* A munge credential naming job_id.  With optional set (a user's tool),
 * munged unreachable at its default socket is not an error: *cred stays
 * NULL and note says why (the client library does the same; an open rgpud
 * serves without a credential).  RGPU_MUNGE_SOCKET names another socket,
 * as for the client. */
static int make_cred(uint64_t job_id, int optional, char **cred, size_t *len, char *note,
		     size_t notelen, char *err, size_t errlen)
{
	*cred = NULL;
	*len = 0;
#ifdef HAVE_MUNGE
	char payload[64];
	int plen = snprintf(payload, sizeof(payload), CRED_PREFIX "%" PRIu64, job_id);
	munge_ctx_t ctx = munge_ctx_create();
	if (!ctx) {
		snprintf(err, errlen, "munge: cannot create a context (out of memory)");
		return -1;
	}
	const char *sock = getenv("RGPU_MUNGE_SOCKET");
	int explicit_sock = sock && *sock;
	if (explicit_sock && munge_ctx_set(ctx, MUNGE_OPT_SOCKET, sock) != EMUNGE_SUCCESS) {
		snprintf(err, errlen, "munge: socket %s: %s", sock, munge_ctx_strerror(ctx));
		munge_ctx_destroy(ctx);
		return -1;
	}
	char *out = NULL;
	munge_err_t e = munge_encode(&out, ctx, payload, plen);
	if (e != EMUNGE_SUCCESS) {
		const char *msg = munge_ctx_strerror(ctx);
		if (!msg)
			msg = munge_strerror(e);
		int rc = -1;
		if (optional && e == EMUNGE_SOCKET && !explicit_sock) {
			snprintf(note, notelen, "munged not reachable (%s)", msg);
			rc = 0;
		} else if (explicit_sock) {
			snprintf(err, errlen, "munge (socket %s): %s", sock, msg);
		} else {
			snprintf(err, errlen, "munge: %s", msg);
		}
		free(out);
		munge_ctx_destroy(ctx);
		return rc;
	}
	munge_ctx_destroy(ctx);
	*cred = out;
	*len = strlen(out);
#else
	(void)job_id; (void)optional; (void)err; (void)errlen;
	snprintf(note, notelen, "rgpu was built without munge");
#endif
	return 0;
}

static struct rg_conn *connect_hello(const char *host, unsigned port, uint64_t job_id,
				     int timeout_ms, int optional, char *note, size_t notelen,
				     char *err, size_t errlen)
{
	struct rg_conn *c = calloc(1, sizeof(*c));
	if (!c) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	/* a user's tool on the server's own host goes through the Unix
	 * socket, where the kernel says who it is (rgpu top then shows a
	 * user their sessions, root all of them, without munge) */
	c->io = optional ? rgpu_connect_local_first(host, port, timeout_ms, err, errlen)
			 : rgpu_tcp_connect(host, port, timeout_ms, err, errlen);
	if (!c->io) {
		free(c);
		return NULL;
	}
	char *cred;
	size_t clen;
	if (make_cred(job_id, optional, &cred, &clen, note, notelen, err, errlen)) {
		rg_close(c);
		return NULL;
	}
	struct wbuf w;
	wbuf_init(&w);
	put_u32(&w, RGPU_PROTO_VERSION);
	put_str(&w, "rgpu-slurm");
	put_bytes(&w, cred, clen);
	free(cred);
	struct rd r;
	int32_t st;
	int rc = call(c, RGPU_OP_HELLO, &w, &r, &st);
	wbuf_free(&w);
	if (rc) {
		snprintf(err, errlen, "%s:%u: connection lost during HELLO", host, port);
		rg_close(c);
		return NULL;
	}
	if (st) {
		char why[512];
		failure(&r, st, why, sizeof(why));
		snprintf(err, errlen, "%s:%u refused the session: %s", host, port, why);
		rg_close(c);
		return NULL;
	}
	return c;
}

struct rg_conn *rg_connect(const char *host, unsigned port, uint64_t job_id, int timeout_ms,
			   char *err, size_t errlen)
{
	char note[8];
	return connect_hello(host, port, job_id, timeout_ms, 0, note, sizeof(note), err, errlen);
}

struct rg_conn *rg_connect_user(const char *host, unsigned port, uint64_t job_id,
				int timeout_ms, char *note, size_t notelen, char *err,
				size_t errlen)
{
	if (notelen)
		note[0] = 0;
	return connect_hello(host, port, job_id, timeout_ms, 1, note, notelen, err, errlen);
}

void rg_close(struct rg_conn *c)
{
	if (!c)
		return;
	rgpu_conn_close(c->io);
	free(c->rx);
	free(c);
}

int rg_call(struct rg_conn *c, unsigned op, struct wbuf *req, struct rd *reply, int32_t *status)
{
	return call(c, op, req, reply, status);
}

int rg_lease_grant(struct rg_conn *c, uint64_t job_id, uint32_t uid, uint32_t gpu,
		   uint64_t mem_limit, uint64_t expires, char *why, size_t whylen)
{
	return rg_lease_grant_share(c, job_id, uid, gpu, mem_limit, expires, 0, why, whylen);
}

int rg_lease_grant_share(struct rg_conn *c, uint64_t job_id, uint32_t uid, uint32_t gpu,
			 uint64_t mem_limit, uint64_t expires, uint32_t share, char *why,
			 size_t whylen)
{
	struct wbuf w;
	wbuf_init(&w);
	put_u64(&w, job_id);
	put_u32(&w, uid);
	put_u32(&w, gpu);
	put_u64(&w, mem_limit);
	put_u64(&w, expires);
	if (share) /* appended field: only when there is one */
		put_u32(&w, share);
	struct rd r;
	return lease_call(c, RGPU_OP_LEASE_GRANT, &w, &r, why, whylen);
}

int rg_lease_release(struct rg_conn *c, uint64_t job_id, uint32_t *released, char *why,
		     size_t whylen)
{
	struct wbuf w;
	wbuf_init(&w);
	put_u64(&w, job_id);
	struct rd r;
	int st = lease_call(c, RGPU_OP_LEASE_RELEASE, &w, &r, why, whylen);
	if (st)
		return st;
	uint32_t n = get_u32(&r);
	if (released)
		*released = n;
	return 0;
}

int rg_lease_list(struct rg_conn *c, struct rg_list *out, char *why, size_t whylen)
{
	memset(out, 0, sizeof(*out));
	struct wbuf w;
	wbuf_init(&w);
	struct rd r;
	int st = lease_call(c, RGPU_OP_LEASE_LIST, &w, &r, why, whylen);
	if (st)
		return st;
	uint32_t ng = get_u32(&r);
	if (ng > 4096)
		goto bad;
	out->gpus = calloc(ng ? ng : 1, sizeof(*out->gpus));
	if (!out->gpus)
		goto bad;
	out->ngpu = ng;
	for (uint32_t i = 0; i < ng; i++) {
		struct rg_list_gpu *g = &out->gpus[i];
		g->gpu = get_u32(&r);
		const char *name = get_str(&r, 1024);
		snprintf(g->name, sizeof(g->name), "%s", name ? name : "");
		g->total = get_u64(&r);
		g->reserved = get_u64(&r);
		g->exclusive = get_u32(&r);
	}
	uint32_t nl = get_u32(&r);
	if (!rd_ok(&r) || nl > 1u << 20)
		goto bad;
	out->leases = calloc(nl ? nl : 1, sizeof(*out->leases));
	if (!out->leases)
		goto bad;
	out->nlease = nl;
	for (uint32_t i = 0; i < nl; i++) {
		struct rg_list_lease *l = &out->leases[i];
		l->job_id = get_u64(&r);
		l->uid = get_u32(&r);
		l->gpu = get_u32(&r);
		l->mem_limit = get_u64(&r);
		l->used = get_u64(&r);
		l->expires = get_u64(&r);
	}
	if (!rd_ok(&r))
		goto bad;
	/* appended fields, from servers that send them: the leases' compute
	 * shares (u32 n, u32 share[n]), then the context reserve */
	out->ctx_reserve = RGPUD_LEASE_CTX_RESERVE;
	if (r.left >= 4) {
		uint32_t ns = get_u32(&r);
		if (ns > 1u << 20)
			goto bad;
		for (uint32_t i = 0; i < ns; i++)
			(void)get_u32(&r);
		if (!rd_ok(&r))
			goto bad;
		if (r.left >= 8)
			out->ctx_reserve = get_u64(&r);
	}
	return 0;
bad:
	rg_list_free(out);
	snprintf(why, whylen, "malformed LEASE_LIST reply");
	return RGPU_ERR_PROTO;
}

void rg_list_free(struct rg_list *l)
{
	free(l->gpus);
	free(l->leases);
	memset(l, 0, sizeof(*l));
}

int rg_lease_stats(struct rg_conn *c, uint64_t job_id, struct rg_stat *out, size_t max,
		   size_t *n, char *why, size_t whylen)
{
	*n = 0;
	struct wbuf w;
	wbuf_init(&w);
	put_u64(&w, job_id);
	struct rd r;
	int st = lease_call(c, RGPU_OP_LEASE_STATS, &w, &r, why, whylen);
	if (st)
		return st;
	uint32_t k = get_u32(&r);
	for (uint32_t i = 0; i < k && rd_ok(&r); i++) {
		struct rg_stat s;
		s.gpu = get_u32(&r);
		s.mem_limit = get_u64(&r);
		s.used = get_u64(&r);
		s.peak = get_u64(&r);
		s.held_ms = get_u64(&r);
		s.attained_ns = get_u64(&r);
		if (*n < max)
			out[(*n)++] = s;
	}
	if (!rd_ok(&r)) {
		snprintf(why, whylen, "malformed LEASE_STATS reply");
		return RGPU_ERR_PROTO;
	}
	return 0;
}

int rg_lease_claim(struct rg_conn *c, uint64_t job_id, uint32_t gpu, uint64_t mem_limit,
		   uint32_t ttl_s, char *why, size_t whylen)
{
	struct wbuf w;
	wbuf_init(&w);
	put_u64(&w, job_id);
	put_u32(&w, gpu);
	put_u64(&w, mem_limit);
	put_u32(&w, ttl_s);
	struct rd r;
	return lease_call(c, RGPU_OP_LEASE_CLAIM, &w, &r, why, whylen);
}
