/*
 * Standby servers and checkpoints (replay.h).
 *
 * RGPU_STANDBY=host[:port][/gpu],... names servers a session may be
 * restored on when its own dies.  The server's administrator sets how
 * often a session is checkpointed (rgpud --checkpoint-interval, told to
 * the client in HELLO's reply); the client asks for the checkpoint
 * (SESSION_SAVE) after a synchronising call once that much time has gone
 * by, keeps it in its own memory with every request sent since, and on
 * the server's death restores it on the first standby that takes it, then
 * sends those requests again.  Cost: the session's device memory in this
 * process's memory (one copy), the requests since the checkpoint, and the
 * time the server takes to copy device memory out at each checkpoint
 * (docs/admin.md).
 */
#include "replay_int.h"
#include "client.h"
#include "clock.h"
#include "frame.h"
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SEND_CHUNK (4u << 20)

void rc_standby_setup(struct rc_conn *c)
{
	struct rc_replay *rp = c->replay;
	const char *spec = getenv("RGPU_STANDBY");
	if (!rp || !spec || !spec[0])
		return;
	struct rgpu_server_ent e[RC_MAX_STANDBY];
	char err[256];
	int n = rgpu_servers_parse(spec, e, RC_MAX_STANDBY, err, sizeof(err));
	if (n <= 0) {
		log_err("RGPU_STANDBY='%s': %s; no standby for this session", spec, err);
		return;
	}
	for (int i = 0; i < n; i++) {
		int h6 = strchr(e[i].host, ':') != NULL;
		snprintf(rp->standby[i].addr, sizeof(rp->standby[i].addr), "%s%s%s:%u", h6 ? "[" : "",
			 e[i].host, h6 ? "]" : "", e[i].port);
		/* "/gpu" given: that GPU; else the one the session had */
		rp->standby[i].gpu = strchr(spec, '/') ? (int)e[i].gpu : -1;
	}
	pthread_mutex_lock(&rp->lock);
	rp->nstandby = n;
	rp->keep = 1;
	pthread_mutex_unlock(&rp->lock);
	if (!rp->interval_s)
		log_warn("RGPU_STANDBY is set, but rgpud at %s:%u takes no checkpoints "
			 "(--checkpoint-interval): its sessions cannot be recovered", c->host, c->port);
}

void rc_standby_set_interval(struct rc_conn *c, uint32_t seconds)
{
	if (c->replay)
		c->replay->interval_s = seconds;
	else
		c->ckpt_interval = seconds;
}

/* how soon a deferred checkpoint is asked for again */
#define CKPT_RETRY_S 0.25

/* Takes a checkpoint: the state stream into memory, the log trimmed. */
static void checkpoint(struct rc_conn *c, struct rc_replay *rp)
{
	double t0 = rgpu_now_s();
	uint64_t id = 0;
	pthread_mutex_lock(&c->lock);
	CUresult rc = rc_send_frame(c, RGPU_OP_SESSION_SAVE, 0, &id, NULL, 0, NULL, 0, 0);
	pthread_mutex_unlock(&c->lock);
	uint8_t *buf = NULL;
	size_t len = 0, cap = 0;
	struct rc_reply f;
	int32_t st = 0;
	char msg[300] = "";
	while (!rc) {
		rc = rc_reply_frame(c, id, RGPU_OP_SESSION_SAVE, &f, NULL, 0);
		if (rc)
			break;
		if (f.st) {
			st = f.st;
			const char *m = get_str(&f.r, 290);
			snprintf(msg, sizeof(msg), "%s", m ? m : "no reason given");
			break;
		}
		if (len + f.len > cap) {
			size_t nc = cap ? cap : (64u << 20);
			while (nc < len + f.len)
				nc *= 2;
			uint8_t *nb = realloc(buf, nc);
			if (!nb) {
				snprintf(msg, sizeof(msg), "out of memory for a checkpoint of %zu bytes",
					 len + f.len);
				st = -1;
				/* the rest of the reply must still be read */
				while (f.flags & RGPU_F_MORE &&
				       rc_reply_frame(c, id, RGPU_OP_SESSION_SAVE, &f, NULL, 0) == 0 && !f.st)
					;
				break;
			}
			buf = nb;
			cap = nc;
		}
		memcpy(buf + len, get_raw(&f.r, f.len), f.len);
		len += f.len;
		if (!(f.flags & RGPU_F_MORE))
			break;
	}
	if (!rc && st == CUDA_ERROR_NOT_READY) {
		/* a capture or a host function under way: asked again at a
		 * synchronisation a little later */
		free(buf);
		pthread_mutex_lock(&rp->lock);
		rp->ckpt_retry = rgpu_now_s() + CKPT_RETRY_S;
		pthread_mutex_unlock(&rp->lock);
		log_debug("%s:%u: checkpoint deferred: %s", c->host, c->port, msg);
		return;
	}
	if (rc || st) {
		free(buf);
		pthread_mutex_lock(&rp->lock);
		rp->ckpt_failed = 1;
		pthread_mutex_unlock(&rp->lock);
		if (!rc)
			log_warn("%s:%u: no checkpoint of this session: %s; it cannot be recovered on a "
				 "standby", c->host, c->port, msg);
		return;
	}
	pthread_mutex_lock(&rp->lock);
	free(rp->ckpt);
	rp->ckpt = buf;
	rp->ckpt_len = len;
	rp->ckpt_id = id;
	rp->last_ckpt = rgpu_now_s();
	pthread_mutex_unlock(&rp->lock);
	rc_replay_trim(rp, id);
	log_info("%s:%u: checkpoint of %zu bytes in %.3f s", c->host, c->port, len, rgpu_now_s() - t0);
}

int rc_standby_tick(struct rc_conn *c)
{
	struct rc_replay *rp = c->replay;
	if (!rp || !rp->nstandby || !rp->interval_s)
		return 0;
	pthread_mutex_lock(&rp->lock);
	double now = rgpu_now_s();
	int due = !rp->ckpt_failed && !rp->ckpt_busy && !rp->lost && now >= rp->ckpt_retry &&
		  (!rp->ckpt || now - rp->last_ckpt >= rp->interval_s);
	if (due)
		rp->ckpt_busy = 1;
	pthread_mutex_unlock(&rp->lock);
	if (!due)
		return 0;
	checkpoint(c, rp);
	pthread_mutex_lock(&rp->lock);
	rp->ckpt_busy = 0;
	pthread_mutex_unlock(&rp->lock);
	return 1;
}

/* SESSION_RESTORE (mode 0) of the checkpoint on nc; 0 or -1 with why[]. */
static int send_state(struct rc_conn *c, struct rgpu_conn *nc, const uint8_t *st, size_t len,
		      int gpu, char *why, size_t wl)
{
	uint8_t f[8] = { 0 };
	uint32_t g = (uint32_t)gpu;
	for (int i = 0; i < 4; i++)
		f[4 + i] = (uint8_t)(g >> (8 * i));
	for (size_t off = 0;;) {
		size_t k = len - off < SEND_CHUNK ? len - off : SEND_CHUNK;
		int last = off + k == len;
		uint64_t id = __atomic_add_fetch(&c->next_id, 1, __ATOMIC_RELAXED);
		if (rgpu_frame_send(nc, RGPU_OP_SESSION_RESTORE, last ? 0 : RGPU_F_NOREPLY, id, f,
				    sizeof(f), st + off, k) < 0) {
			snprintf(why, wl, "sending the checkpoint failed");
			return -1;
		}
		off += k;
		if (last)
			break;
	}
	int32_t s = 0;
	uint8_t *buf = NULL;
	struct rd r;
	int rc = -1;
	if (rc_xchg_reply(nc, RGPU_OP_SESSION_RESTORE, &s, &buf, &r) < 0)
		snprintf(why, wl, "no answer to the checkpoint");
	else if (s) {
		const char *m = get_str(&r, 1024);
		snprintf(why, wl, "the checkpoint was refused: %s", m ? m : "no reason given");
	} else
		rc = 0;
	free(buf);
	return rc;
}

int rc_standby_restore(struct rc_conn *c, struct rgpu_conn **out, char *addr, size_t addrlen,
		       uint64_t *base_id, char *why, size_t whylen)
{
	struct rc_replay *rp = c->replay;
	*out = NULL;
	pthread_mutex_lock(&rp->lock);
	int n = rp->nstandby, have = rp->ckpt != NULL;
	pthread_mutex_unlock(&rp->lock);
	if (!n) {
		why[0] = '\0'; /* no standby: the ordinary failure, nothing to add */
		return -1;
	}
	if (!have) {
		snprintf(why, whylen, "no checkpoint was taken yet");
		return -1;
	}
	char errs[600] = "";
	for (int i = 0; i < n; i++) {
		char w[300] = "";
		struct rgpu_conn *nc = rc_xchg_connect(rp->standby[i].addr, w, sizeof(w));
		if (nc && rc_xchg_hello(c, nc, NULL, w, sizeof(w)) == 0 &&
		    send_state(c, nc, rp->ckpt, rp->ckpt_len, rp->standby[i].gpu, w, sizeof(w)) == 0) {
			snprintf(addr, addrlen, "%s", rp->standby[i].addr);
			*base_id = rp->ckpt_id;
			*out = nc;
			log_info("session restored on standby %s from a checkpoint of %zu bytes", addr,
				 rp->ckpt_len);
			return 0;
		}
		if (nc)
			rgpu_conn_close(nc);
		size_t l = strlen(errs);
		snprintf(errs + l, sizeof(errs) - l, "%s%s: %s", l ? "; " : "", rp->standby[i].addr, w);
	}
	snprintf(why, whylen, "no standby took the session (%s)", errs);
	return -1;
}
