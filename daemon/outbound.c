/* Connections a session's worker opens to another rgpud (outbound.h). */
#include "outbound.h"
#include "rgpud.h"
#include "session.h"
#include "frame.h"
#include "proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef HAVE_MUNGE
#include <munge.h>
#endif

#define CONNECT_MS 10000

/* The session's own credential: its user, its job. */
static void credential(struct session *s, struct wbuf *w)
{
#ifdef HAVE_MUNGE
	char payload[64];
	char *cred = NULL;
	snprintf(payload, sizeof(payload), "rgpu-job=%llu", (unsigned long long)s->who.job_id);
	munge_ctx_t ctx = munge_ctx_create();
	const char *sock = getenv("RGPU_MUNGE_SOCKET"); /* as the client's */
	if (ctx && sock && sock[0])
		munge_ctx_set(ctx, MUNGE_OPT_SOCKET, sock);
	if (ctx && munge_encode(&cred, ctx, payload, (int)strlen(payload)) == EMUNGE_SUCCESS &&
	    cred) {
		put_bytes(w, cred, strlen(cred));
		free(cred);
		munge_ctx_destroy(ctx);
		return;
	}
	free(cred);
	if (ctx)
		munge_ctx_destroy(ctx);
#else
	(void)s;
#endif
	put_bytes(w, NULL, 0); /* a server with --open needs none */
}

int outbound_reply(struct rgpu_conn *c, uint16_t op, uint8_t **buf, struct rd *r, int32_t *st)
{
	struct rgpu_hdr h;
	*buf = NULL;
	if (rgpu_frame_recv_hdr(c, &h) != RGPU_HDR_OK || !(h.flags & RGPU_F_REPLY) || h.op != op ||
	    h.len < 4 || h.len > (1u << 20))
		return -1;
	if (!(*buf = malloc(h.len)) || rgpu_recv(c, *buf, h.len) < 0)
		return -1;
	rd_init(r, *buf, h.len);
	*st = get_i32(r);
	return 0;
}

struct rgpu_conn *outbound_hello(struct session *s, const char *host, unsigned port,
				 const char *client_name, const uint8_t *token, uint64_t *instance,
				 int *refused, char *why, size_t whylen)
{
	char err[256];
	*refused = 0;
	*instance = 0;
	struct rgpu_conn *c = rgpu_tcp_connect(host, port, CONNECT_MS, err, sizeof(err));
	if (!c) {
		snprintf(why, whylen, "cannot reach %s:%u: %s", host, port, err);
		return NULL;
	}
	uint8_t *rbuf = NULL;
	struct wbuf w;
	wbuf_init(&w);
	put_u32(&w, RGPU_PROTO_VERSION);
	put_str(&w, client_name);
	credential(s, &w);
	if (token)
		put_bytes(&w, token, OUTBOUND_TOKEN_LEN);
	struct rd r;
	int32_t st;
	int ok = 0;
	if (w.oom || rgpu_frame_send(c, RGPU_OP_HELLO, 0, 1, w.data, w.len, NULL, 0) < 0 ||
	    outbound_reply(c, RGPU_OP_HELLO, &rbuf, &r, &st) < 0) {
		snprintf(why, whylen, "no handshake with %s:%u", host, port);
	} else if (st) {
		const char *t = get_str(&r, 1024);
		snprintf(why, whylen, "%s:%u refused: %s", host, port, t ? t : "no reason given");
		*refused = 1;
	} else {
		/* the reply: text, GPUs, checkpoint interval, the rgpud's instance */
		(void)get_str(&r, 1024);
		(void)get_u32(&r);
		if (r.left >= 12) {
			(void)get_u32(&r);
			*instance = get_u64(&r);
		}
		ok = rd_ok(&r);
		if (!ok)
			snprintf(why, whylen, "a malformed handshake from %s:%u", host, port);
	}
	free(rbuf);
	wbuf_free(&w);
	if (!ok) {
		rgpu_conn_close(c);
		return NULL;
	}
	return c;
}
