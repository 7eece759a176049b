/*
 * The parent's side of migration: orders to workers (MIGRATE from
 * `rgpu migrate` and `rgpu drain`), and restored sessions parked until
 * their client attaches (HELLO with the token).
 */
#include "clock.h"
#include "migrate.h"
#include "../access.h"
#include "../rgpud.h"
#include "../session.h"
#include "log.h"
#include "proto.h"
#include "wire.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- parked sessions ---- */

struct parked {
	uint8_t token[MIGRATE_TOKEN_LEN];
	const struct rgpud_principal *who;
	int fd; /* the client's socket once it attached, else -1 */
	struct parked *next;
};

static pthread_mutex_t park_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t park_cv = PTHREAD_COND_INITIALIZER;
static struct parked *parked;

static struct parked *park_find(const uint8_t *token)
{
	for (struct parked *p = parked; p; p = p->next)
		if (!memcmp(p->token, token, MIGRATE_TOKEN_LEN))
			return p;
	return NULL;
}

static int same_owner(const struct rgpud_principal *a, const struct rgpud_principal *b)
{
	/* open mode vouches for nobody: the token alone decides */
	if (!a->authenticated || !b->authenticated)
		return 1;
	return a->uid == b->uid && a->job_id == b->job_id;
}

int migrate_parent_park(const struct rgpud_principal *who, const uint8_t *token, size_t n,
			const char *name, unsigned seconds)
{
	if (n != MIGRATE_TOKEN_LEN)
		return -1;
	struct parked me = { .who = who, .fd = -1 };
	memcpy(me.token, token, n);
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += seconds ? seconds : MIGRATE_PARK_S;
	pthread_mutex_lock(&park_lock);
	me.next = parked;
	parked = &me;
	pthread_cond_broadcast(&park_cv); /* a client may already wait for it */
	while (me.fd < 0 && pthread_cond_timedwait(&park_cv, &park_lock, &until) != ETIMEDOUT)
		;
	for (struct parked **pp = &parked; *pp; pp = &(*pp)->next)
		if (*pp == &me) {
			*pp = me.next;
			break;
		}
	pthread_mutex_unlock(&park_lock);
	if (me.fd < 0)
		log_info("%s: nobody came for it within %u s", name, seconds ? seconds : MIGRATE_PARK_S);
	return me.fd;
}

int migrate_parent_attach_check(const struct rgpud_principal *who, const uint8_t *token,
				char *why, size_t whylen)
{
	/* the restored worker parks right after answering the source, which
	 * then tells the client: a quick client can come first (seen in CI),
	 * so it waits a little for the session to park */
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += MIGRATE_ATTACH_WAIT_S;
	uint64_t t0 = rgpu_now_ns();
	pthread_mutex_lock(&park_lock);
	struct parked *p;
	while (!(p = park_find(token)) &&
	       pthread_cond_timedwait(&park_cv, &park_lock, &until) != ETIMEDOUT)
		;
	int ok = p && p->fd < 0 && same_owner(p->who, who);
	pthread_mutex_unlock(&park_lock);
	/* (part of a move's pause: the client waits here for its session) */
	log_debug("a moved session's client waited %.2f ms for the session to park",
		  (double)(rgpu_now_ns() - t0) / 1e6);
	if (!ok)
		snprintf(why, whylen, "no moved session waits here for this client (it timed out "
				      "after %d s, or belongs to someone else)", MIGRATE_PARK_S);
	return ok ? 0 : -1;
}

int migrate_parent_attach(const uint8_t *token, int fd)
{
	int d = dup(fd);
	if (d < 0)
		return -1;
	pthread_mutex_lock(&park_lock);
	struct parked *p = park_find(token);
	if (p && p->fd < 0) {
		p->fd = d;
		d = -1;
		pthread_cond_broadcast(&park_cv);
	}
	pthread_mutex_unlock(&park_lock);
	if (d >= 0) {
		close(d);
		return -1;
	}
	return 0;
}

static int is_parked(const struct rgpud_principal *who)
{
	pthread_mutex_lock(&park_lock);
	int found = 0;
	for (struct parked *p = parked; p; p = p->next)
		found |= p->who == who;
	pthread_mutex_unlock(&park_lock);
	return found;
}

/* ---- orders ---- */

struct target {
	int fd; /* a dup of the worker's migration channel */
	pid_t pid;
	char name[160];
};

/* Sends the order, waits for the worker's answer. */
static int order_one(struct target *t, const char *dest, int32_t gpu, char *res, size_t rl)
{
	size_t dn = strlen(dest);
	uint8_t m[600];
	memcpy(m, &gpu, 4);
	memcpy(m + 4, dest, dn);
	if (send(t->fd, m, 4 + dn, MSG_NOSIGNAL) < 0) {
		snprintf(res, rl, "session %d: its worker is gone", (int)t->pid);
		return -1;
	}
	struct pollfd pf = { .fd = t->fd, .events = POLLIN };
	int n;
	while ((n = poll(&pf, 1, MIGRATE_ORDER_S * 1000)) < 0 && errno == EINTR)
		;
	ssize_t k = n > 0 ? recv(t->fd, m, sizeof(m) - 1, 0) : -1;
	if (k < 4) {
		snprintf(res, rl, "session %d: no answer from its worker%s", (int)t->pid,
			 n == 0 ? " in time" : "");
		return -1;
	}
	int32_t rc;
	memcpy(&rc, m, 4);
	m[k] = '\0';
	snprintf(res, rl, "session %d (%s): %s", (int)t->pid, t->name,
		 rc == 0 ? "moved" : (const char *)m + 4);
	return rc ? -1 : 0;
}

int migrate_parent_order(const struct rgpud_principal *who, struct rd *r, struct wbuf *out)
{
	const char *dest = get_str(r, 520);
	int32_t gpu = (int32_t)get_u32(r);
	uint64_t sid = get_u64(r), job = get_u64(r);
	uint32_t drain = get_u32(r);
	if (!rd_done(r) || !dest || !dest[0] || drain > 1)
		return -1;
	if (!who->admin && !who->local_root) {
		put_str(out, "moving sessions needs root or the SlurmUser (a munge credential, or "
			     "root on the server's own host)");
		return RGPU_ERR_AUTH;
	}
	struct rgpud *srv = &rgpud_server;
	if (drain)
		srv->draining = 1;
	/* the chosen workers, taken under the lock, ordered without it */
	size_t n = 0, cap = 16;
	struct target *t = malloc(cap * sizeof(*t));
	if (!t)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&srv->lock);
	for (struct session *s = srv->sessions; s; s = s->next) {
		if (s->worker <= 0 || s->mig_fd <= 0 || &s->who == who ||
		    (sid && (uint64_t)s->worker != sid) || (job && s->who.job_id != job))
			continue;
		if (is_parked(&s->who))
			continue;
		if (n == cap) {
			struct target *nt = realloc(t, 2 * cap * sizeof(*t));
			if (!nt)
				break;
			t = nt;
			cap *= 2;
		}
		int fd = dup(s->mig_fd);
		if (fd < 0)
			continue;
		t[n] = (struct target){ .fd = fd, .pid = s->worker };
		snprintf(t[n].name, sizeof(t[n].name), "%s", s->name);
		n++;
	}
	pthread_mutex_unlock(&srv->lock);
	uint32_t moved = 0, failed = 0;
	struct wbuf rep;
	wbuf_init(&rep);
	for (size_t i = 0; i < n; i++) {
		char res[700];
		if (order_one(&t[i], dest, gpu, res, sizeof(res)) == 0)
			moved++;
		else
			failed++;
		log_info("migrate to %s: %s", dest, res);
		put_raw(&rep, res, strlen(res));
		put_raw(&rep, "\n", 1);
		close(t[i].fd);
	}
	free(t);
	if (!n) {
		const char *none = sid ? "no such session here\n" : "no session to move\n";
		put_raw(&rep, none, strlen(none));
	}
	put_raw(&rep, "", 1);
	put_u32(out, moved);
	put_u32(out, failed);
	put_str(out, rep.oom ? "(report lost: out of memory)" : (const char *)rep.data);
	wbuf_free(&rep);
	return 0;
}
