/*
 * The session's side of migration and recovery: SESSION_SAVE (a
 * checkpoint to the client), SESSION_RESTORE (a session rebuilt from a
 * stream, sent by a client recovering on a standby or by another server's
 * worker migrating it here) and MEM_ALLOC_AT (recovery replays).
 */
#include "migrate.h"
#include "memif.h"
#include "snapshot.h"
#include "../gate.h"
#include "../rgpud.h"
#include "../session.h"
#include "log.h"
#include "proto.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define D (&rgpud_server.drv)
#define OUT_CHUNK (4u << 20)

/* ---- SESSION_SAVE: the stream as reply frames ---- */

struct save_out {
	struct session *s;
	const struct rgpu_hdr *h;
	uint8_t *buf;
	size_t n;
};

static int save_write(void *arg, const void *p, size_t n)
{
	struct save_out *o = arg;
	while (n) {
		size_t k = OUT_CHUNK - o->n < n ? OUT_CHUNK - o->n : n;
		memcpy(o->buf + o->n, p, k);
		o->n += k;
		p = (const uint8_t *)p + k;
		n -= k;
		if (o->n == OUT_CHUNK) {
			if (session_send_reply(o->s, o->h, RGPU_F_MORE, 0, o->buf, o->n) < 0)
				return -1;
			o->n = 0;
		}
	}
	return 0;
}

int op_session_save(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	if (!rd_done(r))
		return OP_DROP;
	struct save_out o = { .s = s, .h = h, .buf = malloc(OUT_CHUNK) };
	char why[300] = "";
	if (!o.buf)
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct snap_io io = { .write = save_write, .arg = &o };
	int rc = snap_capture(s, h->id, &io, NULL, why, sizeof(why));
	if (rc == 0) {
		rc = session_send_reply(s, h, 0, 0, o.buf, o.n);
		free(o.buf);
		return rc < 0 ? (s->ended = 1, OP_REPLIED) : OP_REPLIED;
	}
	free(o.buf);
	/* only for now (a capture, a host function under way): the client
	 * asks again soon (CUDA_ERROR_NOT_READY) */
	if (rc == -3)
		log_info("%s: checkpoint deferred: %s", s->name, why);
	else
		log_warn("%s: checkpoint refused: %s", s->name, why);
	put_str(out, why);
	session_send_reply(s, h, 0, rc == -3 ? CUDA_ERROR_NOT_READY : CUDA_ERROR_NOT_SUPPORTED,
			   out->data, out->len);
	return OP_REPLIED;
}

/* ---- SESSION_RESTORE: the stream from request frames ---- */

struct restore_in {
	struct session *s;
	struct rgpu_hdr last; /* the frame being read */
	size_t left;          /* its stream bytes not read yet */
	int done;             /* the last frame (no NOREPLY) has been started */
};

static int restore_read(void *arg, void *p, size_t n)
{
	struct restore_in *in = arg;
	while (n) {
		if (!in->left) {
			if (in->done)
				return -1;
			uint8_t hb[RGPU_HDR_SIZE], f[8];
			struct rgpu_hdr h;
			if (session_recv(in->s, hb, sizeof(hb)) < 0)
				return -1;
			rgpu_hdr_decode(hb, &h);
			if (h.magic != RGPU_PROTO_MAGIC || h.op != RGPU_OP_SESSION_RESTORE ||
			    (h.flags & RGPU_F_REPLY) || h.len < 8 || h.len > RGPU_MAX_PAYLOAD ||
			    session_recv(in->s, f, 8) < 0)
				return -1;
			in->last = h;
			in->left = h.len - 8;
			in->done = !(h.flags & RGPU_F_NOREPLY);
			continue;
		}
		size_t k = in->left < n ? in->left : n;
		if (session_recv(in->s, p, k) < 0)
			return -1;
		in->left -= k;
		p = (uint8_t *)p + k;
		n -= k;
	}
	return 0;
}

/* A SYNC record: the objects sent ahead are re-created (snapshot.h). */
static int restore_sync(void *arg)
{
	struct restore_in *in = arg;
	struct wbuf w;
	wbuf_init(&w);
	put_u32(&w, SNAP_SYNC_ACK);
	int rc = w.oom ? -1 : session_send_reply(in->s, &in->last, 0, 0, w.data, w.len);
	wbuf_free(&w);
	return rc < 0 ? -1 : 0;
}

static void log_restored(struct session *s, int32_t gpu, uint32_t mode, const struct snap_info *i)
{
	char gpus[200] = "";
	for (uint32_t k = 0; k < i->ngpu; k++) {
		size_t l = strlen(gpus);
		snprintf(gpus + l, sizeof(gpus) - l, "%s%u", k ? "," : "",
			 gpu >= 0 ? (unsigned)gpu : i->gpus[k]);
	}
	char peer[96] = "";
	if (i->peer_bytes)
		snprintf(peer, sizeof(peer), ", %llu of them copied GPU to GPU",
			 (unsigned long long)i->peer_bytes);
	char prep[240] = "";
	if (i->prep_bytes)
		snprintf(prep, sizeof(prep), "; before the pause %llu bytes of memory made ready in "
			 "%.3f s, %llu of them still in use at the pause",
			 (unsigned long long)i->prep_bytes, (double)i->prep_ns / 1e9,
			 (unsigned long long)i->prep_used);
	if (i->prep_vmm) {
		size_t l = strlen(prep);
		snprintf(prep + l, sizeof(prep) - l, "; %llu bytes of VMM memory mapped from the "
			 "source before the pause", (unsigned long long)i->prep_vmm);
	}
	char maps[128] = "";
	if (i->peer_bytes || i->prep_bytes)
		snprintf(maps, sizeof(maps), "; the source's memory mapped here in %.4f s, %u object(s) "
			 "made in the pause", (double)i->map_ns / 1e9, i->pause_creates);
	char pause[320] = "";
	if (i->pause_ns)
		snprintf(pause, sizeof(pause), "; the paused session's state came %.2f ms after the "
			 "objects ahead were made, answered %.2f ms later (%.2f ms after its end; "
			 "%llu PEER records %.2f ms, %llu copies queued in %.2f ms, the handle table "
			 "%.2f ms), %llu bytes copied as their records came, the copies done in %.2f ms",
			 (double)i->pause_wait_ns / 1e6, (double)(i->pause_ns - i->pause_wait_ns) / 1e6,
			 (double)i->tail_ns / 1e6, (unsigned long long)i->peer_recs,
			 (double)i->peer_ns / 1e6, (unsigned long long)i->copy_calls,
			 (double)i->copy_queue_ns / 1e6, (double)i->table_ns / 1e6,
			 (unsigned long long)i->copy_early, (double)i->copy_ns / 1e6);
	char slow[192] = "";
	if (i->slow_ns)
		snprintf(slow, sizeof(slow), " (most in %u %s: %.3f s)", i->slow_n,
			 rgpu_op_name(i->slow_op), (double)i->slow_ns / 1e9);
	if (i->graph_recs) {
		size_t l = strlen(slow);
		snprintf(slow + l, sizeof(slow) - l, ", its graphs made again from %llu requests in "
			 "%.2f ms (%llu of them in the pause)", (unsigned long long)i->graph_recs,
			 (double)i->graph_ns / 1e6, (unsigned long long)i->graph_pause);
	}
	log_info("%s: session restored on GPU %s (uid %u job %llu, %s; objects re-created in "
		 "%.3f s%s, %llu bytes of memory received and copied in%s in %.3f s%s%s%s)",
		 s->name, gpus[0] ? gpus : "-", i->uid, (unsigned long long)i->job,
		 mode ? "waiting for its client" : "its client goes on", (double)i->create_ns / 1e9,
		 slow, (unsigned long long)(i->mem_bytes + i->peer_bytes), peer,
		 (double)i->mem_ns / 1e9, prep, maps, pause);
}

int op_session_restore(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint32_t mode = get_u32(r);
	int32_t gpu = (int32_t)get_u32(r);
	if (r->bad || mode > 1 || h->len < 8)
		return OP_DROP;
	struct restore_in in = { .s = s, .last = *h, .left = h->len - 8,
				 .done = !(h->flags & RGPU_F_NOREPLY) };
	struct snap_io io = { .read = restore_read, .arg = &in, .sync = restore_sync };
	struct snap_info info;
	struct snap_defer *defer = NULL;
	char why[300] = "";
	int rc;
	if (gpu >= 0 && gpu >= rgpud_server.ndev) {
		snprintf(why, sizeof(why), "no GPU %d on this server", (int)gpu);
		rc = CUDA_ERROR_INVALID_DEVICE;
	} else {
		rc = snap_restore(s, &io, gpu, &info, why, sizeof(why), mode == 1 ? &defer : NULL);
		if (rc == 0 && (in.left || !in.done)) {
			snprintf(why, sizeof(why), "data after the end of the session's state");
			rc = -1;
		}
		/* the state is the user's own, or was sent by a server that
		 * authenticated as that user: a stream naming someone else is
		 * refused (it could name objects of another job) */
		if (rc == 0 && s->who.authenticated &&
		    (info.uid != s->who.uid || info.job != s->who.job_id)) {
			snprintf(why, sizeof(why), "the state belongs to uid %u job %llu, not to this "
				 "session's", info.uid, (unsigned long long)info.job);
			rc = CUDA_ERROR_NOT_PERMITTED;
		}
	}
	if (rc) {
		snap_restore_cancel(defer);
		log_warn("%s: restoring a session failed: %s", s->name, why);
		put_str(out, why);
		session_send_reply(s, &in.last, 0, rc > 0 ? rc : CUDA_ERROR_INVALID_VALUE, out->data,
				   out->len);
		s->ended = 1; /* half a session is no session */
		return OP_REPLIED;
	}
	uint8_t token[MIGRATE_TOKEN_LEN];
	if (getrandom(token, sizeof(token), 0) != (ssize_t)sizeof(token)) {
		snap_restore_cancel(defer);
		put_str(out, "no randomness for a session token");
		session_send_reply(s, &in.last, 0, CUDA_ERROR_OPERATING_SYSTEM, out->data, out->len);
		s->ended = 1;
		return OP_REPLIED;
	}
	put_bytes(out, token, sizeof(token));
	put_u64(out, info.last_id);
	/* memory still to copy GPU to GPU as this answer goes (it is copied
	 * while the client re-attaches) */
	put_u64(out, snap_defer_bytes(defer));
	int sent = session_send_reply(s, &in.last, 0, 0, out->data, out->len);
	if (sent < 0) {
		snap_restore_cancel(defer);
		snap_restore_done();
		s->ended = 1;
		return OP_REPLIED;
	}
	/* the parent expects the client from here on: its HELLO is answered
	 * while the copies run */
	int parked = mode == 1 && gate_park_begin(token, 0) == 0;
	if (mode == 1 && !parked)
		s->ended = 1;
	if (defer && snap_restore_finish(defer, &info, why, sizeof(why)) < 0) {
		log_err("%s: the moved session's memory was not copied: %s", s->name, why);
		s->ended = 1;
	}
	log_restored(s, gpu, mode, &info);
	/* the source's memory mapped here goes while the client attaches */
	if (mode == 1)
		snap_restore_release_later();
	else
		snap_restore_done();
	if (parked && migrate_park_end(s) < 0)
		s->ended = 1;
	return OP_REPLIED;
}

/* ---- MEM_ALLOC_AT ---- */

int op_mem_alloc_at(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX);
	uint64_t dptr = get_u64(r), size = get_u64(r);
	int rc = req_enter(s, r, &q, HK_FREE);
	if (rc)
		return rc;
	return memif_restore_at(s, q.ctx, q.cs->dev, dptr, size);
}
