/* The accept loop and the list of live sessions. */
#include "log.h"
#include "rgpud.h"
#include "session.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

struct rgpud rgpud_server = { .lock = PTHREAD_MUTEX_INITIALIZER, .listen_fd = -1 };

void rgpud_session_register(struct rgpud *srv, struct session *s)
{
	pthread_mutex_lock(&srv->lock);
	s->next = srv->sessions;
	s->prev = NULL;
	if (srv->sessions)
		srv->sessions->prev = s;
	srv->sessions = s;
	srv->nsessions++;
	pthread_mutex_unlock(&srv->lock);
}

void rgpud_session_unregister(struct rgpud *srv, struct session *s)
{
	pthread_mutex_lock(&srv->lock);
	if (s->prev)
		s->prev->next = s->next;
	else
		srv->sessions = s->next;
	if (s->next)
		s->next->prev = s->prev;
	srv->nsessions--;
	pthread_mutex_unlock(&srv->lock);
}

void rgpud_sessions_end_job(uint64_t job_id)
{
	struct rgpud *srv = &rgpud_server;
	pthread_mutex_lock(&srv->lock);
	for (struct session *s = srv->sessions; s; s = s->next) {
		if (s->who.job_id == job_id && job_id != 0) {
			log_info("%s: ending session: job %llu's lease ended", s->name,
				 (unsigned long long)job_id);
			s->ended = 1;
			/* the session thread wakes from recv and frees everything */
			rgpu_conn_shutdown(s->conn);
		}
	}
	pthread_mutex_unlock(&srv->lock);
}

int rgpud_serve(struct rgpud *srv)
{
	pthread_attr_t attr;
	if (pthread_attr_init(&attr) || pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED)) {
		log_err("cannot set up thread attributes");
		return -1;
	}
	while (!srv->stopping) {
		struct pollfd p = { .fd = srv->listen_fd, .events = POLLIN };
		int rc = poll(&p, 1, 500);
		if (rc < 0 && errno != EINTR) {
			log_err("poll on the listening socket: %s", strerror(errno));
			break;
		}
		if (rc <= 0)
			continue;
		struct rgpu_conn *c = rgpu_tcp_accept(srv->listen_fd);
		if (!c) {
			/* EMFILE and friends: keep serving the sessions we have */
			log_warn("accept: %s", strerror(errno));
			continue;
		}
		struct session *s = calloc(1, sizeof(*s));
		if (!s) {
			log_err("out of memory for a new session from %s", c->peer);
			rgpu_conn_close(c);
			continue;
		}
		s->srv = srv;
		s->conn = c;
		ht_init(&s->ht);
		wbuf_init(&s->tx);
		rgpud_session_register(srv, s);
		if (pthread_create(&s->thread, &attr, session_main, s)) {
			log_err("cannot start a thread for %s", c->peer);
			rgpud_session_unregister(srv, s);
			rgpu_conn_close(c);
			free(s);
		}
	}
	pthread_attr_destroy(&attr);
	/* wake every session and wait for them to clean up */
	pthread_mutex_lock(&srv->lock);
	for (struct session *s = srv->sessions; s; s = s->next) {
		s->ended = 1;
		rgpu_conn_shutdown(s->conn);
	}
	pthread_mutex_unlock(&srv->lock);
	for (int i = 0; i < 100; i++) {
		pthread_mutex_lock(&srv->lock);
		int n = srv->nsessions;
		pthread_mutex_unlock(&srv->lock);
		if (!n)
			break;
		struct timespec ts = { 0, 50 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	return 0;
}
