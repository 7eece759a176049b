/*
 * A worker moves its session out (migrate.h says the steps), and a
 * restored worker waits for its client.
 *
 * Orders come over the migration channel, a SOCK_SEQPACKET pair to the
 * parent: i32 gpu, then the target "host:port" (no NUL); the worker
 * answers i32 status, then a sentence.  Orders are taken only between
 * requests: everything the client sent after the last request served is
 * sent again by the client to the new server (MOVED's last_id).
 */
#include "migrate.h"
#include "snapshot.h"
#include "../rgpud.h"
#include "../session.h"
#include "../mem/mem.h"
#include "../outbound.h"
#include "clock.h"
#include "frame.h"
#include "log.h"
#include "proto.h"
#include "wire.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define D (&rgpud_server.drv)
#define OUT_CHUNK (4u << 20)

static void answer(struct session *s, int32_t rc, const char *text)
{
	size_t n = strlen(text);
	uint8_t *m = malloc(4 + n);
	if (!m)
		return;
	memcpy(m, &rc, 4);
	memcpy(m + 4, text, n);
	if (send(s->mig_fd, m, 4 + n, MSG_NOSIGNAL) < 0)
		log_warn("%s: cannot report a migration to the parent: %s", s->name, strerror(errno));
	free(m);
}

/* The frames of SESSION_RESTORE: u32 mode 1, i32 gpu, state bytes. */
struct out_stream {
	struct rgpu_conn *c;
	uint8_t *buf;
	size_t n;
	int32_t gpu;
	uint64_t id;
	uint64_t total; /* stream bytes sent */
};

static int send_frame(struct out_stream *o, int last, const void *data, size_t n)
{
	uint8_t f[8];
	uint32_t mode = 1, g = (uint32_t)o->gpu;
	for (int i = 0; i < 4; i++) {
		f[i] = (uint8_t)(mode >> (8 * i));
		f[4 + i] = (uint8_t)(g >> (8 * i));
	}
	return rgpu_frame_send(o->c, RGPU_OP_SESSION_RESTORE, last ? 0 : RGPU_F_NOREPLY, ++o->id, f,
			       sizeof(f), data, n) < 0
		       ? -1
		       : 0;
}

static int flush(struct out_stream *o, int last)
{
	if (send_frame(o, last, o->buf, o->n) < 0)
		return -1;
	o->n = 0;
	return 0;
}

static int out_write(void *arg, const void *p, size_t n)
{
	struct out_stream *o = arg;
	o->total += n;
	while (n) {
		/* device memory comes in whole chunks: sent from where it lies,
		 * not copied again (the copy cost a fifth of the stream's rate) */
		if (n >= OUT_CHUNK) {
			if ((o->n && flush(o, 0) < 0) || send_frame(o, 0, p, OUT_CHUNK) < 0)
				return -1;
			p = (const uint8_t *)p + OUT_CHUNK;
			n -= OUT_CHUNK;
			continue;
		}
		size_t k = OUT_CHUNK - o->n < n ? OUT_CHUNK - o->n : n;
		memcpy(o->buf + o->n, p, k);
		o->n += k;
		p = (const uint8_t *)p + k;
		n -= k;
		if (o->n == OUT_CHUNK && flush(o, 0) < 0)
			return -1;
	}
	return 0;
}

static int split_target(const char *t, char *host, size_t hn, unsigned *port)
{
	const char *colon = strrchr(t, ':');
	if (!colon || colon == t || (size_t)(colon - t) >= hn)
		return -1;
	char *end;
	unsigned long p = strtoul(colon + 1, &end, 10);
	if (*end || !p || p > 65535)
		return -1;
	size_t n = (size_t)(colon - t);
	if (t[0] == '[' && n >= 2 && t[n - 1] == ']') {
		t++;
		n -= 2;
	}
	memcpy(host, t, n);
	host[n] = '\0';
	*port = (unsigned)p;
	return 0;
}

/* Whether gpu (-1: each its own) can read every GPU the session uses over
 * a peer link: then its memory may go by reference (a target of this
 * very rgpud). */
static int peer_reachable(struct session *s, int32_t gpu)
{
	if (!D->have_vmm || !D->cuDeviceCanAccessPeer || getenv("RGPUD_MIGRATE_NO_PEER"))
		return 0;
	for (unsigned d = 0; d < RGPUD_MAX_GPUS && d < 64; d++) {
		if (!(s->dev_admitted >> d & 1) || gpu < 0 || (unsigned)gpu == d)
			continue;
		CUdevice to, from;
		int ok = 0;
		if (D->cuDeviceGet(&to, gpu) || D->cuDeviceGet(&from, (int)d) ||
		    D->cuDeviceCanAccessPeer(&ok, to, from) || !ok)
			return 0;
	}
	return 1;
}

/* A move under way: the connection to the target and what went there. */
struct move {
	struct rgpu_conn *c;
	struct out_stream o;
	char target[300];
	int by_ref;
	struct snap_ahead ahead; /* objects sent ahead (ahead.seq 0: none) */
	uint64_t ahead_bytes;    /* their bytes */
	uint64_t ahead_ns;       /* the session's stall capturing them */
	uint64_t deadline_ns;    /* for the target to re-create them */
	/* the objects ahead, captured here and sent by a thread of their own:
	 * the target reads them as it re-creates them (module loads: most of
	 * half a second), and a send that waited for it would pause the
	 * session, which the objects go ahead to avoid */
	struct wbuf ahead_buf;
	/* ... in order: pieces of ahead_buf, and records' payloads sent from
	 * where they lie (the journal is frozen until the sender is joined) */
	struct piece {
		const void *ref; /* NULL: ahead_buf's bytes at off */
		size_t off, n;
	} *pieces;
	size_t npieces, cappieces;
	pthread_t sender;
	int sending;     /* the sender runs (join it) */
	int sent_failed; /* the sender's outcome, once joined */
};

static int piece_add(struct move *m, const void *ref, size_t off, size_t n)
{
	struct piece *last = m->npieces ? &m->pieces[m->npieces - 1] : NULL;
	if (!ref && last && !last->ref && last->off + last->n == off) {
		last->n += n; /* (bytes of ahead_buf one after another) */
		return 0;
	}
	if (m->npieces == m->cappieces) {
		size_t cap = m->cappieces ? 2 * m->cappieces : 64;
		struct piece *v = realloc(m->pieces, cap * sizeof(*v));
		if (!v)
			return -1;
		m->pieces = v;
		m->cappieces = cap;
	}
	m->pieces[m->npieces++] = (struct piece){ ref, off, n };
	return 0;
}

static int ahead_write(void *arg, const void *p, size_t n)
{
	struct move *m = arg;
	size_t off = m->ahead_buf.len;
	put_raw(&m->ahead_buf, p, n);
	if (m->ahead_buf.oom || piece_add(m, NULL, off, n) < 0)
		return -1;
	m->ahead_bytes += n;
	return 0;
}

static int ahead_write_ref(void *arg, const void *p, size_t n)
{
	struct move *m = arg;
	if (piece_add(m, p, 0, n) < 0)
		return -1;
	m->ahead_bytes += n;
	return 0;
}

static void *ahead_send(void *arg)
{
	struct move *m = arg;
	rgpud_capture_relaxed(D); /* (rgpud's own calls: never a capture's unsafe call) */
	int rc = 0;
	for (size_t i = 0; i < m->npieces && !rc; i++) {
		const struct piece *pc = &m->pieces[i];
		rc = out_write(&m->o, pc->ref ? pc->ref : m->ahead_buf.data + pc->off, pc->n);
	}
	m->sent_failed = rc < 0 || flush(&m->o, 0) < 0;
	return NULL;
}

/* Waits for the sender; cut (a target that went quiet): its send fails
 * at once instead of waiting for room.  0 when everything went. */
static int sender_join(struct move *m, int cut)
{
	if (m->sending) {
		if (cut)
			rgpu_conn_shutdown(m->c);
		pthread_join(m->sender, NULL);
		m->sending = 0;
	}
	return m->sent_failed ? -1 : 0;
}

static void move_close(struct move *m)
{
	(void)sender_join(m, 1);
	if (m->c)
		rgpu_conn_close(m->c);
	free(m->o.buf);
	wbuf_free(&m->ahead_buf);
	free(m->pieces);
	memset(m, 0, sizeof(*m));
}

/* A move whose objects went ahead, given up or done: the journal thaws. */
static void move_free(struct session *s, struct move *m)
{
	(void)sender_join(m, 1); /* it may read the frozen journal's payloads */
	journal_freeze(s, 0);
	if (m->by_ref)
		snap_exports_drop(s); /* (what went ahead by reference) */
	move_close(m);
	free(m);
}

/* Connects to target as the session's user and says HELLO.  0, or -1 with
 * why[] (m closed). */
static int move_connect(struct session *s, const char *target, int32_t gpu, struct move *m,
			char *why, size_t wl)
{
	char host[256];
	unsigned port;
	memset(m, 0, sizeof(*m));
	if (split_target(target, host, sizeof(host), &port) < 0) {
		snprintf(why, wl, "bad target address '%s' (HOST:PORT)", target);
		return -1;
	}
	const char *no = journal_unmovable(s);
	if (!no && s->shm)
		no = "the session shares memory with a client on this host (RGPU_TRANSPORT=tcp makes a "
		     "session movable)";
	if (no) {
		snprintf(why, wl, "%s", no);
		return -1;
	}
	snprintf(m->target, sizeof(m->target), "%s", target);
	m->o = (struct out_stream){ .gpu = gpu, .buf = malloc(OUT_CHUNK), .id = 1 };
	if (!m->o.buf) {
		snprintf(why, wl, "out of memory");
		return -1;
	}
	uint64_t instance = 0;
	int refused;
	char err[600];
	m->c = outbound_hello(s, host, port, "rgpud worker moving a session", NULL, &instance,
			      &refused, err, sizeof(err));
	if (!m->c) {
		snprintf(why, wl, "%s", err);
		move_close(m);
		return -1;
	}
	m->o.c = m->c;
	m->by_ref = instance == rgpud_server.instance && peer_reachable(s, gpu);
	return 0;
}

/* Pauses the session and sends its state (what did not go ahead), then
 * tells the client where its session is.  0 (moved), -1 with why[] (the
 * session stays), -2 (an object sent ahead changed: nothing more sent). */
static int move_finish(struct session *s, struct move *m, char *why, size_t wl)
{
	uint64_t t0 = rgpu_now_ns();
	struct snap_io io = { .write = out_write, .arg = &m->o, .by_ref = m->by_ref };
	const struct snap_ahead *ahead = m->ahead.seq ? &m->ahead : NULL;
	int cap = snap_capture(s, s->last_id, &io, ahead, why, wl);
	if (cap == -2)
		return -2;
	if (cap < 0 || flush(&m->o, 1) < 0) {
		if (!why[0])
			snprintf(why, wl, "sending the session's state to %s failed", m->target);
		return -1;
	}
	uint64_t t_sent = rgpu_now_ns();
	uint8_t *rbuf = NULL;
	struct rd r;
	int32_t st;
	int got = outbound_reply(m->c, RGPU_OP_SESSION_RESTORE, &rbuf, &r, &st);
	uint64_t t_restored = rgpu_now_ns();
	/* the target has copied what it took by reference, or never will:
	 * the exports go after the client has been told (move_free; one
	 * request to the parent each, part of the pause when made here) */
	int rc = -1;
	if (got < 0) {
		snprintf(why, wl, "%s did not answer the session's state", m->target);
		goto out;
	}
	if (st) {
		const char *t = get_str(&r, 1024);
		snprintf(why, wl, "%s could not restore the session: %s", m->target, t ? t : "?");
		goto out;
	}
	size_t tn;
	const void *token = get_bytes(&r, &tn);
	uint64_t last = get_u64(&r);
	/* (memory the target still copies GPU to GPU while the client comes) */
	uint64_t pending = rd_ok(&r) && r.left >= 8 ? get_u64(&r) : 0;
	if (!rd_ok(&r) || tn != MIGRATE_TOKEN_LEN || last != s->last_id) {
		snprintf(why, wl, "%s answered the session's state with a malformed reply", m->target);
		goto out;
	}
	/* tell the client where its session is now; it sends again what
	 * came after last_id */
	struct wbuf w;
	wbuf_init(&w);
	put_str(&w, m->target);
	put_u32(&w, m->o.gpu < 0 ? UINT32_MAX : (uint32_t)m->o.gpu);
	put_bytes(&w, token, tn);
	put_u64(&w, s->last_id);
	pthread_mutex_lock(&s->send_lock);
	int sent = w.oom ? -1 : rgpu_frame_send(s->conn, RGPU_OP_MOVED, RGPU_F_REPLY, 0, w.data, w.len,
						 NULL, 0);
	pthread_mutex_unlock(&s->send_lock);
	wbuf_free(&w);
	rc = 0; /* either way this copy is over */
	if (sent < 0) {
		/* the client is gone; the restored copy waits for it in vain */
		snprintf(why, wl, "the client went away while its session moved");
		goto out;
	}
	double secs = (double)(rgpu_now_ns() - t0) / 1e9;
	uint64_t all = m->o.total - m->ahead_bytes + io.ref_bytes;
	char ref[96] = "", pre[128] = "";
	if (io.ref_bytes)
		snprintf(ref, sizeof(ref), ", %llu of them device memory copied GPU to GPU",
			 (unsigned long long)io.ref_bytes);
	if (ahead)
		snprintf(pre, sizeof(pre), ", its objects (%llu bytes, captured in %.1f ms) re-created "
			 "there before the pause", (unsigned long long)m->ahead_bytes,
			 (double)m->ahead_ns / 1e6);
	char later[128] = "";
	if (pending)
		snprintf(later, sizeof(later), "; %llu bytes copied there GPU to GPU while the client "
			 "re-attaches", (unsigned long long)pending);
	log_info("%s: session moved to %s%s: %llu bytes of state%s in %.3f s (%.2f GB/s; drained "
		 "and sent in %.1f ms (the drain %.1f ms), restored there in %.1f ms%s)%s", s->name,
		 m->target, m->o.gpu >= 0 ? " (another GPU)" : "", (unsigned long long)all, ref, secs,
		 secs > 0 ? all / secs / 1e9 : 0.0, (double)(t_sent - t0) / 1e6,
		 (double)io.drain_ns / 1e6, (double)(t_restored - t_sent) / 1e6, later, pre);
out:
	free(rbuf);
	return rc;
}

/* Moves the session to target at once; 0 (the client has been told), or
 * -1 with why[] (the session stays, unharmed: nothing was torn down). */
static int move_out(struct session *s, const char *target, int32_t gpu, char *why, size_t wl)
{
	struct move m;
	if (move_connect(s, target, gpu, &m, why, wl) < 0)
		return -1;
	int rc = move_finish(s, &m, why, wl);
	if (m.by_ref)
		snap_exports_drop(s);
	move_close(&m);
	return rc == 0 ? 0 : -1;
}

/* A move sends the session's objects first, while the session runs on,
 * and pauses it once the target has re-created them (contexts and library
 * loads were most of the pause: on two H200s, 2026-11-28, 505 ms instead
 * of 1118 ms over TCP, 41 ms instead of 527 ms between GPUs).
 * RGPUD_MIGRATE_AHEAD=0 sends everything in the pause. */
static int ahead_wanted(struct session *s)
{
	const char *e = getenv("RGPUD_MIGRATE_AHEAD");
	if (e && !strcmp(e, "0"))
		return 0;
	if (e && *e && strcmp(e, "1"))
		log_warn("%s: RGPUD_MIGRATE_AHEAD=%s: not 0 or 1; sending the objects ahead",
			 s->name, e);
	return 1;
}

/* Starts a move whose objects go ahead: 0 when under way (s->move; the
 * session goes on until the target is ready), -1 when it could not start
 * (the caller moves the session at once). */
static int move_ahead_start(struct session *s, const char *target, int32_t gpu)
{
	char why[300] = "";
	struct move *m = calloc(1, sizeof(*m));
	if (!m || move_connect(s, target, gpu, m, why, sizeof(why)) < 0) {
		free(m);
		return -1;
	}
	wbuf_init(&m->ahead_buf);
	struct snap_io io = { .write = ahead_write, .write_ref = ahead_write_ref, .arg = m,
			      .by_ref = m->by_ref };
	uint64_t t0 = rgpu_now_ns();
	if (snap_capture_ahead(s, &io, &m->ahead, why, sizeof(why)) < 0) {
		move_free(s, m);
		return -1;
	}
	m->ahead_ns = rgpu_now_ns() - t0;

	/* the sender must not take signals meant for the worker */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	m->sending = pthread_create(&m->sender, NULL, ahead_send, m) == 0;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!m->sending && (ahead_send(m), m->sent_failed)) {
		move_free(s, m);
		return -1;
	}
	m->deadline_ns = rgpu_now_ns() + (uint64_t)MIGRATE_AHEAD_S * 1000000000ull;
	s->move = m;
	return 0;
}

int migrate_ahead_fd(struct session *s, int *timeout_ms)
{
	struct move *m = s->move;
	if (!m)
		return -1;
	uint64_t now = rgpu_now_ns();
	*timeout_ms = now >= m->deadline_ns ? 0 : (int)((m->deadline_ns - now) / 1000000 + 1);
	return rgpu_conn_fd(m->c);
}

void migrate_ahead_drop(struct session *s)
{
	if (!s->move)
		return;
	answer(s, -1, "the session ended while its objects went ahead");
	move_free(s, s->move);
	s->move = NULL;
}

/* After MOVED: no more to say, and what the client still sends is sent
 * again to the new server; read it until the client lets go (it closes
 * this connection once re-attached), so closing here does not reset a
 * connection whose notice the client has not read yet. */
static void let_go(struct session *s)
{
	int fd = rgpu_conn_fd(s->conn);
	if (fd < 0 || shutdown(fd, SHUT_WR) < 0)
		return;
	char buf[65536];
	for (int waited = 0; waited < 10000;) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		int n = poll(&pf, 1, 100);
		if (n < 0 && errno != EINTR)
			return;
		if (n <= 0) {
			waited += 100;
			continue;
		}
		ssize_t k = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR))
			return;
	}
}

/* Reports a move's outcome (rc 0: moved) to the parent: 1 when the
 * session has moved (the caller ends it), else 0. */
static int moved(struct session *s, int rc, const char *why)
{
	if (rc == 0) {
		answer(s, 0, why[0] ? why : "moved");
		let_go(s);
		return 1;
	}
	log_warn("%s: session not moved: %s", s->name, why);
	answer(s, -1, why);
	return 0;
}

int migrate_serve_order(struct session *s)
{
	uint8_t m[600];
	ssize_t n;
	while ((n = recv(s->mig_fd, m, sizeof(m) - 1, 0)) < 0 && errno == EINTR)
		;
	if (n <= 0) {
		close(s->mig_fd);
		s->mig_fd = -1;
		return 0;
	}
	if (n < 5) {
		answer(s, -1, "malformed order");
		return 0;
	}
	int32_t gpu;
	memcpy(&gpu, m, 4);
	m[n] = '\0';
	char why[512] = "";
	if (s->move) {
		answer(s, -1, "a move of this session is under way");
		return 0;
	}
	/* the answer waits for the target to be ready (migrate_serve_ahead) */
	if (ahead_wanted(s) && move_ahead_start(s, (const char *)m + 4, gpu) == 0)
		return 0;
	return moved(s, move_out(s, (const char *)m + 4, gpu, why, sizeof(why)), why);
}

int migrate_serve_ahead(struct session *s)
{
	struct move *m = s->move;
	if (!m)
		return 0;
	s->move = NULL;
	char why[512] = "";
	uint8_t *rbuf = NULL;
	struct rd r;
	int32_t st = -1;
	struct pollfd pf = { .fd = rgpu_conn_fd(m->c), .events = POLLIN };
	int readable = poll(&pf, 1, 0) == 1;
	int ready = readable && outbound_reply(m->c, RGPU_OP_SESSION_RESTORE, &rbuf, &r, &st) == 0;
	/* a target that answered has read all the objects: the sender is done
	 * (or its send failed); otherwise it is cut short */
	if (sender_join(m, !ready) < 0)
		ready = 0;
	int rc = -1;
	if (ready && st == 0 && get_u32(&r) == SNAP_SYNC_ACK && rd_ok(&r)) {
		rc = move_finish(s, m, why, sizeof(why));
	} else if (ready) {
		const char *t = st ? get_str(&r, 1024) : NULL;
		snprintf(why, sizeof(why), "%s could not re-create the session's objects: %s",
			 m->target, t ? t : "malformed answer");
	} else if (readable) {
		snprintf(why, sizeof(why), "%s went away while re-creating the session's objects",
			 m->target);
	} else {
		snprintf(why, sizeof(why), "%s did not re-create the session's objects in %d s",
			 m->target, MIGRATE_AHEAD_S);
	}
	free(rbuf);
	char target[300];
	snprintf(target, sizeof(target), "%s", m->target);
	int32_t gpu = m->o.gpu;
	move_free(s, m);
	if (rc == -2) {
		/* an object sent ahead changed: the whole state goes now */
		log_info("%s: %s; moving it at once", s->name, why);
		why[0] = '\0';
		rc = move_out(s, target, gpu, why, sizeof(why));
	}
	return moved(s, rc, why);
}

int migrate_park(struct session *s, const uint8_t token[MIGRATE_TOKEN_LEN])
{
	return gate_park_begin(token, 0) < 0 ? -1 : migrate_park_end(s);
}

int migrate_park_end(struct session *s)
{
	int fd = gate_park_end();
	if (fd < 0) {
		log_warn("%s: the client of a restored session did not attach within %d s", s->name,
			 MIGRATE_PARK_S);
		return -1;
	}
	struct rgpu_conn *nc = rgpu_tcp_from_fd(fd);
	if (!nc) {
		close(fd);
		return -1;
	}
	/* the server that sent the state is done with this connection (the
	 * caller, a request handler, holds the send lock) */
	rgpu_conn_close(s->conn);
	s->conn = nc;
	s->in_off = s->in_len = 0;
	snprintf(s->name, sizeof(s->name), "client %s uid %u job %llu (moved here)", nc->peer,
		 s->who.uid, (unsigned long long)s->who.job_id);
	log_info("%s: client attached to its restored session", s->name);
	return 0;
}
