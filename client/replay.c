/*
 * The request log and re-attachment (replay.h).
 *
 * Requests are appended as they go out (under the connection's send lock,
 * so in id order) and dropped once served.  A connection that fails at a
 * frame boundary is recovered here: with a MOVED notice, the session is
 * re-attached where it went (HELLO with its token) and the requests after
 * the last one the old server served are sent again; without one, a
 * standby restores the last checkpoint (standby.c) and every request since
 * is sent again.  Replayed requests keep their ids: callers waiting for a
 * reply get it from the new server; replies nobody waits for any more
 * are skipped by the reader.
 */
#include "replay_int.h"
#include "client.h"
#include "clock.h"
#include "cred.h"
#include "frame.h"
#include "log.h"
#include "settings.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void (*rc_replay_gpu_moved)(struct rc_conn *c, unsigned gpu);

static int loggable(uint16_t op)
{
	/* the handshake and a restore are never replayed; a checkpoint in
	 * progress when the server dies is (its caller then gets the new
	 * server's state) */
	return op != RGPU_OP_HELLO && op != RGPU_OP_SESSION_RESTORE && op != RGPU_OP_TRANSPORT;
}

void rc_replay_setup(struct rc_conn *c)
{
	if (c->local || c->replay)
		return; /* a same-host session is not movable (its memory is shared) */
	struct rc_replay *rp = calloc(1, sizeof(*rp));
	if (!rp) {
		log_warn("%s:%u: out of memory for the request log: the session cannot move",
			 c->host, c->port);
		return;
	}
	pthread_mutex_init(&rp->lock, NULL);
	rp->interval_s = c->ckpt_interval;
	c->replay = rp;
	rc_standby_setup(c);
}

/* with rp->lock held */
static void drop_upto(struct rc_replay *rp, uint64_t id)
{
	size_t k = 0;
	while (k < rp->n && rp->v[k].id <= id) {
		rp->bytes -= rp->v[k].len;
		rp->borrowed -= rp->v[k].ext != NULL;
		free(rp->v[k].data);
		k++;
	}
	if (k) {
		memmove(rp->v, rp->v + k, (rp->n - k) * sizeof(*rp->v));
		rp->n -= k;
	}
}

void rc_replay_trim(struct rc_replay *rp, uint64_t id)
{
	pthread_mutex_lock(&rp->lock);
	drop_upto(rp, id);
	pthread_mutex_unlock(&rp->lock);
}

void rc_replay_log(struct rc_conn *c, uint64_t id, uint16_t op, uint32_t flags, const void *a,
		   size_t alen, const void *b, size_t blen, int borrow)
{
	struct rc_replay *rp = c->replay;
	if (!rp || !loggable(op))
		return;
	borrow = borrow && blen;
	size_t own = borrow ? alen : alen + blen;
	uint8_t *d = malloc(own ? own : 1);
	pthread_mutex_lock(&rp->lock);
	if (!d || (rp->n == rp->cap && !rc_replay_grow(rp))) {
		/* a request that cannot be kept makes the session unmovable */
		if (!rp->lost)
			log_warn("%s:%u: out of memory for the request log: the session can no "
				 "longer move or recover", c->host, c->port);
		rp->lost = 1;
		pthread_mutex_unlock(&rp->lock);
		free(d);
		return;
	}
	if (alen)
		memcpy(d, a, alen);
	if (blen && !borrow)
		memcpy(d + alen, b, blen);
	rp->v[rp->n++] = (struct rc_logent){ .id = id, .op = op, .flags = flags, .len = alen + blen,
					     .data = d, .ext = borrow ? b : NULL,
					     .ext_len = borrow ? blen : 0 };
	rp->borrowed += borrow;
	rp->bytes += alen + blen;
	pthread_mutex_unlock(&rp->lock);
}

int rc_replay_keeps(struct rc_conn *c)
{
	struct rc_replay *rp = c->replay;
	if (!rp)
		return 0;
	pthread_mutex_lock(&rp->lock);
	int keep = rp->keep;
	pthread_mutex_unlock(&rp->lock);
	return keep;
}

void rc_replay_settle(struct rc_conn *c)
{
	struct rc_replay *rp = c->replay;
	if (!rp)
		return;
	pthread_mutex_lock(&rp->lock);
	for (size_t i = 0; i < rp->n && rp->borrowed; i++) {
		struct rc_logent *e = &rp->v[i];
		if (!e->ext)
			continue;
		size_t own = e->len - e->ext_len;
		uint8_t *d = realloc(e->data, e->len);
		if (!d) {
			if (!rp->lost)
				log_warn("%s:%u: out of memory for the request log: the session "
					 "can no longer move or recover", c->host, c->port);
			rp->lost = 1;
		} else {
			memcpy(d + own, e->ext, e->ext_len);
			e->data = d;
		}
		e->ext = NULL;
		e->ext_len = 0;
		rp->borrowed--;
	}
	pthread_mutex_unlock(&rp->lock);
}

int rc_replay_grow(struct rc_replay *rp)
{
	size_t cap = rp->cap ? rp->cap * 2 : 256;
	struct rc_logent *v = realloc(rp->v, cap * sizeof(*v));
	if (!v)
		return 0;
	rp->v = v;
	rp->cap = cap;
	return 1;
}

void rc_replay_served(struct rc_conn *c, uint64_t id)
{
	struct rc_replay *rp = c->replay;
	if (!rp || !id)
		return;
	pthread_mutex_lock(&rp->lock);
	if (!rp->keep) /* with a standby: kept until the next checkpoint */
		drop_upto(rp, id);
	pthread_mutex_unlock(&rp->lock);
}

void rc_replay_alloc(struct rc_conn *c, uint64_t id, uint64_t dptr)
{
	struct rc_replay *rp = c->replay;
	if (!rp || !rp->keep)
		return;
	pthread_mutex_lock(&rp->lock);
	for (size_t i = rp->n; i-- > 0;)
		if (rp->v[i].id == id) {
			rp->v[i].dptr = dptr;
			break;
		}
	pthread_mutex_unlock(&rp->lock);
}

int rc_replay_moved(struct rc_conn *c, const uint8_t *b, uint32_t len)
{
	struct rc_replay *rp = c->replay;
	struct rd r;
	rd_init(&r, b, len);
	const char *addr = get_str(&r, 299);
	uint32_t gpu = get_u32(&r);
	size_t tn = 0;
	const void *token = get_bytes(&r, &tn);
	uint64_t last = get_u64(&r);
	int ok = rd_done(&r) && addr && tn == RC_TOKEN_LEN && rp;
	if (ok) {
		pthread_mutex_lock(&rp->lock);
		snprintf(rp->moved_addr, sizeof(rp->moved_addr), "%s", addr);
		rp->moved_gpu = gpu;
		memcpy(rp->token, token, tn);
		rp->moved_last = last;
		rp->moved_ns = rgpu_now_ns();
		rp->moved = 1;
		pthread_mutex_unlock(&rp->lock);
		log_info("the session on %s:%u moved to %s: reconnecting", c->host, c->port, addr);
	} else {
		log_err("%s:%u: a malformed notice that the session moved%s", c->host, c->port,
			rp ? "" : " (this connection keeps no request log: it cannot follow)");
	}
	return ok ? 0 : -1;
}

/* ---- exchanges on a connection nobody else uses yet ---- */

int rc_xchg_reply(struct rgpu_conn *nc, uint16_t op, int32_t *st, uint8_t **buf, struct rd *r)
{
	for (;;) {
		struct rgpu_hdr h;
		if (rgpu_frame_recv_hdr(nc, &h) != RGPU_HDR_OK || !(h.flags & RGPU_F_REPLY) ||
		    h.len > (1u << 20))
			return -1;
		if (h.op == RGPU_OP_OUTPUT) {
			if (rgpu_frame_skip(nc, h.len) < 0)
				return -1;
			continue;
		}
		if (h.op != op || h.len < 4 || !(*buf = malloc(h.len)))
			return -1;
		if (rgpu_recv(nc, *buf, h.len) < 0)
			return -1;
		*st = (int32_t)((uint32_t)(*buf)[0] | (uint32_t)(*buf)[1] << 8 |
				(uint32_t)(*buf)[2] << 16 | (uint32_t)(*buf)[3] << 24);
		rd_init(r, *buf + 4, h.len - 4);
		return 0;
	}
}

int rc_xchg_hello(struct rc_conn *c, struct rgpu_conn *nc, const uint8_t *token, char *why,
		  size_t wl)
{
	void *cred = NULL;
	size_t clen = 0;
	char cerr[256] = "";
	if (rgpu_client_credential(&cred, &clen, cerr, sizeof(cerr)) < 0) {
		snprintf(why, wl, "cannot make a credential: %s", cerr);
		return -1;
	}
	char me[200], host[128] = "?";
	gethostname(host, sizeof(host) - 1);
	snprintf(me, sizeof(me), "pid %d on %s (%s)", (int)getpid(), host,
		 token ? "re-attaching a moved session" : "recovering a session");
	struct wbuf w;
	wbuf_init(&w);
	put_u32(&w, RGPU_PROTO_VERSION);
	put_str(&w, me);
	put_bytes(&w, cred, clen);
	free(cred);
	if (token)
		put_bytes(&w, token, RC_TOKEN_LEN);
	uint64_t id = __atomic_add_fetch(&c->next_id, 1, __ATOMIC_RELAXED);
	int32_t st = 0;
	uint8_t *buf = NULL;
	struct rd r;
	int rc = -1;
	if (w.oom || rgpu_frame_send(nc, RGPU_OP_HELLO, 0, id, w.data, w.len, NULL, 0) < 0 ||
	    rc_xchg_reply(nc, RGPU_OP_HELLO, &st, &buf, &r) < 0)
		snprintf(why, wl, "no handshake");
	else if (st) {
		const char *m = get_str(&r, 1024);
		snprintf(why, wl, "refused: %s", m ? m : "no reason given");
	} else {
		(void)get_str(&r, 1024);
		(void)get_u32(&r);
		if (r.left >= 4)
			rc_standby_set_interval(c, get_u32(&r));
		if (r.left >= 8)
			c->instance = get_u64(&r); /* another rgpud now */
		rc = 0;
	}
	free(buf);
	wbuf_free(&w);
	return rc;
}

/* Splits "host:port" (IPv6 in brackets). */
int rc_split_addr(const char *a, char *host, size_t hn, unsigned *port)
{
	struct rgpu_server_ent e;
	char err[200];
	if (rgpu_servers_parse(a, &e, 1, err, sizeof(err)) != 1 || strlen(e.host) >= hn)
		return -1;
	snprintf(host, hn, "%s", e.host);
	*port = e.port;
	return 0;
}

struct rgpu_conn *rc_xchg_connect(const char *addr, char *why, size_t wl)
{
	char host[256], err[256];
	unsigned port;
	if (rc_split_addr(addr, host, sizeof(host), &port) < 0) {
		snprintf(why, wl, "bad address '%s'", addr);
		return NULL;
	}
	struct rgpu_conn *nc = rgpu_tcp_connect(host, port, (int)rc_setting(RS_CONNECT_TIMEOUT_MS),
						err, sizeof(err));
	if (!nc) {
		snprintf(why, wl, "%s", err);
		return NULL;
	}
	(void)rgpu_tcp_keepalive(nc, (int)rc_setting(RS_KEEPALIVE_S));
	(void)rgpu_conn_set_recv_timeout(nc, (int)rc_setting(RS_HANDSHAKE_TIMEOUT_MS));
	return nc;
}

/* Sends again every kept request after base (c->lock held). */
static int resend(struct rc_conn *c, struct rgpu_conn *nc, uint64_t base, int standby)
{
	struct rc_replay *rp = c->replay;
	pthread_mutex_lock(&rp->lock);
	int rc = 0;
	size_t n = 0;
	for (size_t i = 0; i < rp->n && !rc; i++) {
		struct rc_logent *e = &rp->v[i];
		if (e->id <= base)
			continue;
		if (standby && e->op == RGPU_OP_MEM_ALLOC && e->dptr && e->len >= 16) {
			/* the application holds this address: the memory must
			 * come back exactly there */
			uint8_t f[24];
			memcpy(f, e->data, 16); /* ctx, size */
			memcpy(f + 16, f + 8, 8);
			for (int k = 0; k < 8; k++)
				f[8 + k] = (uint8_t)(e->dptr >> (8 * k));
			rc = rgpu_frame_send(nc, RGPU_OP_MEM_ALLOC_AT, RGPU_F_NOREPLY, e->id, f, 24, NULL,
					     0);
		} else if (standby && e->op == RGPU_OP_MEM_ALLOC_ASYNC && e->dptr && e->len == 32 &&
			   !e->ext_len) {
			/* the same from a pool: the request names the address */
			uint8_t f[40];
			memcpy(f, e->data, 32);
			for (int k = 0; k < 8; k++)
				f[32 + k] = (uint8_t)(e->dptr >> (8 * k));
			rc = rgpu_frame_send(nc, e->op, e->flags, e->id, f, 40, NULL, 0);
		} else {
			rc = rgpu_frame_send(nc, e->op, e->flags, e->id, e->data,
					     e->len - e->ext_len, e->ext, e->ext_len);
		}
		n++;
	}
	pthread_mutex_unlock(&rp->lock);
	if (!rc)
		log_info("%s:%u: %zu request(s) sent again", c->host, c->port, n);
	return rc;
}

int rc_replay_recover(struct rc_conn *c, int have_lock, struct rgpu_conn *failed)
{
	struct rc_replay *rp = c->replay;
	if (!rp)
		return -1;
	if (!have_lock)
		pthread_mutex_lock(&c->lock);
	int rc = -1;
	if (c->c != failed) {
		rc = 0; /* another thread recovered it meanwhile */
		goto out;
	}
	pthread_mutex_lock(&rp->lock);
	int moved = rp->moved, lost = rp->lost;
	char addr[300];
	uint8_t token[RC_TOKEN_LEN];
	uint32_t gpu = rp->moved_gpu;
	uint64_t base = rp->moved_last, since = rp->moved_ns;
	snprintf(addr, sizeof(addr), "%s", rp->moved_addr);
	memcpy(token, rp->token, sizeof(token));
	pthread_mutex_unlock(&rp->lock);
	if (lost) {
		log_err("%s:%u: the session cannot be recovered (requests were lost)", c->host,
			c->port);
		goto out;
	}
	/* others blocked on the old connection wake and wait for this */
	rgpu_conn_shutdown(failed);
	char why[400] = "";
	struct rgpu_conn *nc = NULL;
	uint64_t t_conn = rgpu_now_ns(), t_hello = 0, t_sent = 0;
	if (moved) {
		nc = rc_xchg_connect(addr, why, sizeof(why));
		t_hello = rgpu_now_ns();
		if (nc && rc_xchg_hello(c, nc, token, why, sizeof(why)) < 0) {
			rgpu_conn_close(nc);
			nc = NULL;
		}
		if (!nc)
			log_err("the session moved to %s, but re-attaching failed: %s", addr, why);
	} else {
		if (rc_standby_restore(c, &nc, addr, sizeof(addr), &base, why, sizeof(why)) < 0) {
			if (why[0])
				log_err("%s:%u: the server is lost and the session cannot be recovered: "
					"%s", c->host, c->port, why);
			nc = NULL;
		}
	}
	if (!nc)
		goto out;
	uint64_t t_resend = rgpu_now_ns();
	if (resend(c, nc, base, !moved) < 0) {
		log_err("%s: sending the session's requests again failed", addr);
		rgpu_conn_close(nc);
		goto out;
	}
	t_sent = rgpu_now_ns();
	(void)rgpu_conn_set_recv_timeout(nc, 0);
	char host[256];
	unsigned port;
	if (rc_split_addr(addr, host, sizeof(host), &port) == 0) {
		snprintf(c->host, sizeof(c->host), "%s", host);
		c->port = port;
	}
	if (moved && gpu != UINT32_MAX && rc_replay_gpu_moved)
		rc_replay_gpu_moved(c, gpu);
	pthread_mutex_lock(&rp->lock);
	rp->moved = 0;
	struct rgpu_conn **slot = &rp->old[rp->recoveries % RC_OLD_CONNS];
	if (*slot)
		rgpu_conn_close(*slot);
	*slot = failed;
	rp->recoveries++;
	pthread_mutex_unlock(&rp->lock);
	/* requests queued to go out together were logged and sent again */
	wbuf_reset(&c->txq);
	c->txq_n = 0;
	__atomic_store_n(&c->c, nc, __ATOMIC_RELEASE);
	if (moved) {
		log_info("session re-attached on %s (%.1f ms after the notice that it moved)", addr,
			 (double)(rgpu_now_ns() - since) / 1e6);
		/* where those milliseconds went */
		log_debug("re-attach: %.2f ms to the notice's handling, connect %.2f ms, hello "
			  "%.2f ms, requests sent again %.2f ms", (double)(t_conn - since) / 1e6,
			  (double)(t_hello - t_conn) / 1e6, (double)(t_resend - t_hello) / 1e6,
			  (double)(t_sent - t_resend) / 1e6);
	}
	else
		log_info("session recovered on %s", addr);
	rc = 0;
out:
	if (!have_lock)
		pthread_mutex_unlock(&c->lock);
	return rc;
}
