/*
 * The rgpud parent: accepts connections, authenticates each client (HELLO),
 * then hands the connection to a worker process of its own and serves that
 * worker's lease and quota requests (gate.h).  The parent never initialises
 * CUDA: a GPU fault then ends one worker, not the server.
 */
#include "gate.h"
#include "log.h"
#include "metrics.h"
#include "rgpud.h"
#include "session.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

struct rgpud rgpud_server = { .lock = PTHREAD_MUTEX_INITIALIZER, .listen_fd = -1, .unix_fd = -1 };

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
	if (!job_id)
		return;
	pthread_mutex_lock(&srv->lock);
	for (struct session *s = srv->sessions; s; s = s->next) {
		if (s->who.job_id != job_id || s->worker <= 0)
			continue;
		log_info("%s: ending session: job %llu's lease ended", s->name,
			 (unsigned long long)job_id);
		/* the driver frees the worker's GPU memory when it exits */
		kill(s->worker, SIGKILL);
	}
	pthread_mutex_unlock(&srv->lock);
}

/* Starts `rgpud --session-worker` on the client socket.  argv is built
 * before fork: between fork and exec only async-signal-safe calls. */
static pid_t spawn_worker(struct session *s, int cfd, int ctl)
{
	struct rgpud *srv = &rgpud_server;
	char fds[32], who[96], lvl[8];
	snprintf(fds, sizeof(fds), "%d,%d", cfd, ctl);
	snprintf(who, sizeof(who), "%u,%u,%llu,%d,%d", s->who.uid, s->who.gid,
		 (unsigned long long)s->who.job_id, s->who.admin, s->who.authenticated);
	snprintf(lvl, sizeof(lvl), "%d", rgpu_log_level());
	char *argv[16];
	int n = 0;
	argv[n++] = "rgpud";
	argv[n++] = "--session-worker";
	argv[n++] = fds;
	argv[n++] = "--worker-who";
	argv[n++] = who;
	argv[n++] = "--worker-name";
	argv[n++] = s->name;
	argv[n++] = "--driver";
	argv[n++] = srv->driver_path;
	argv[n++] = "--log-level";
	argv[n++] = lvl;
	if (srv->use_syslog)
		argv[n++] = "--syslog";
	argv[n] = NULL;
	pid_t pid = fork();
	if (pid == 0) {
		/* the two descriptors the worker inherits */
		if (fcntl(cfd, F_SETFD, 0) < 0 || fcntl(ctl, F_SETFD, 0) < 0)
			_exit(126);
		execv(srv->self_exe, argv);
		_exit(127);
	}
	return pid;
}

static void *conn_thread(void *arg)
{
	struct session *s = arg;
	snprintf(s->name, sizeof(s->name), "client %s", s->conn->peer);
	log_info("%s: connected", s->name);
	/* the parent answers HELLO (authentication) itself */
	if (session_serve_one(s) < 0 || !s->hello_done) {
		log_info("%s: disconnected before the session opened", s->name);
		goto out;
	}
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		log_err("%s: socketpair: %s", s->name, strerror(errno));
		goto out;
	}
	pthread_mutex_lock(&rgpud_server.lock);
	s->worker = spawn_worker(s, rgpu_tcp_fd(s->conn), sv[1]);
	pthread_mutex_unlock(&rgpud_server.lock);
	close(sv[1]);
	if (s->worker < 0) {
		log_err("%s: cannot start a session worker: %s", s->name, strerror(errno));
		metrics_error("spawn");
		close(sv[0]);
		goto out;
	}
	/* the worker owns the client connection now */
	rgpu_conn_close(s->conn);
	s->conn = NULL;
	log_debug("%s: served by worker %d", s->name, (int)s->worker);
	gate_serve(sv[0], &s->who, s->name);
	close(sv[0]);
	int st = 0;
	while (waitpid(s->worker, &st, 0) < 0 && errno == EINTR)
		;
	metrics_worker_exit(st);
	if (WIFSIGNALED(st) && WTERMSIG(st) != SIGKILL)
		log_warn("%s: worker %d died of signal %d", s->name, (int)s->worker, WTERMSIG(st));
	else if (WIFEXITED(st) && WEXITSTATUS(st))
		log_warn("%s: worker %d exited with status %d", s->name, (int)s->worker, WEXITSTATUS(st));
out:
	rgpud_session_unregister(&rgpud_server, s);
	if (s->conn)
		rgpu_conn_close(s->conn);
	free(s->rx);
	free(s->in);
	wbuf_free(&s->tx);
	free(s);
	return NULL;
}

int rgpud_serve(struct rgpud *srv)
{
	pthread_attr_t attr;
	if (pthread_attr_init(&attr) || pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED)) {
		log_err("cannot set up thread attributes");
		return -1;
	}
	while (!srv->stopping) {
		struct pollfd p[2] = { { .fd = srv->listen_fd, .events = POLLIN },
				       { .fd = srv->unix_fd, .events = POLLIN } };
		int rc = poll(p, srv->unix_fd >= 0 ? 2 : 1, 500);
		if (rc < 0 && errno != EINTR) {
			log_err("poll on the listening sockets: %s", strerror(errno));
			break;
		}
		if (rc <= 0)
			continue;
		struct rgpu_conn *c = (p[0].revents & POLLIN) ? rgpu_tcp_accept(srv->listen_fd)
							      : rgpu_unix_accept(srv->unix_fd);
		if (!c) {
			/* EMFILE and friends: keep serving the sessions we have */
			log_warn("accept: %s", strerror(errno));
			metrics_error("accept");
			continue;
		}
		metrics_conn_accepted();
		struct session *s = calloc(1, sizeof(*s));
		if (!s) {
			log_err("out of memory for a new session from %s", c->peer);
			rgpu_conn_close(c);
			continue;
		}
		s->srv = srv;
		s->conn = c;
		s->out_fd = -1;
		ht_init(&s->ht);
		wbuf_init(&s->tx);
		rgpud_session_register(srv, s);
		if (pthread_create(&s->thread, &attr, conn_thread, s)) {
			log_err("cannot start a thread for %s", c->peer);
			rgpud_session_unregister(srv, s);
			rgpu_conn_close(c);
			free(s);
		}
	}
	pthread_attr_destroy(&attr);
	/* end every worker and wait for their threads */
	pthread_mutex_lock(&srv->lock);
	for (struct session *s = srv->sessions; s; s = s->next) {
		if (s->worker > 0)
			kill(s->worker, SIGTERM);
		else if (s->conn)
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
