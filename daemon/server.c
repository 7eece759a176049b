/*
 * The rgpud parent: accepts connections, authenticates each client (HELLO),
 * then hands the connection to a worker process of its own and serves that
 * worker's lease and quota requests (gate.h).  The parent never initialises
 * CUDA: a GPU fault then ends one worker, not the server.
 */
#include "clock.h"
#include "gate.h"
#include "log.h"
#include "metrics.h"
#include "rgpud.h"
#include "session.h"
#include "opstats.h"
#include "sched/scheduler.h"
#include "migrate/migrate.h"

#include "frame.h"
#include "proto.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct rgpud rgpud_server = { .lock = PTHREAD_MUTEX_INITIALIZER, .listen_fd = -1, .unix_fd = -1,
			      .hello_timeout_ms = RGPUD_HELLO_TIMEOUT_MS,
			      .max_pending_per_host = RGPUD_MAX_PENDING_PER_HOST };

int rgpud_sessions_of_uid(uint32_t uid)
{
	struct rgpud *srv = &rgpud_server;
	int n = 0;
	pthread_mutex_lock(&srv->lock);
	for (struct session *s = srv->sessions; s; s = s->next)
		n += s->hello_done && s->who.authenticated && s->who.uid == uid;
	pthread_mutex_unlock(&srv->lock);
	return n;
}

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

/* Whom the worker runs as (when rgpud runs as root): the client's own uid,
 * proven by its munge credential or, on the same-host socket, by the
 * kernel; a client nobody vouches for (--open over TCP) gets nobody.  The
 * worker then can touch only what its user can, which the same-host path
 * needs anyway (it opens the client's /proc/PID/fd). */
static unsigned nobody_ids[2] = { 65534, 65534 };

static void find_nobody(void)
{
	struct passwd *pw = getpwnam("nobody");
	if (pw) {
		nobody_ids[0] = pw->pw_uid;
		nobody_ids[1] = pw->pw_gid;
	}
}

/* *groups: whether the worker takes the user's supplementary groups too */
static void worker_identity(const struct session *s, int cfd, unsigned *uid, unsigned *gid,
			    int *groups)
{
	*groups = 1;
	struct ucred cr;
	socklen_t cl = sizeof(cr);
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	if (s->who.authenticated) {
		*uid = s->who.uid;
		*gid = s->who.gid;
	} else if (getsockname(cfd, (struct sockaddr *)&ss, &sl) == 0 && ss.ss_family == AF_UNIX &&
		   getsockopt(cfd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0) {
		*uid = cr.uid;
		*gid = cr.gid;
	} else {
		static pthread_once_t once = PTHREAD_ONCE_INIT;
		pthread_once(&once, find_nobody); /* looked up once, not per session */
		*uid = nobody_ids[0];
		*gid = nobody_ids[1];
		*groups = 0; /* none: nobody is nobody */
	}
}

/* Starts `rgpud --session-worker` on the client socket.  argv is built
 * before fork: between fork and exec only async-signal-safe calls. */
static pid_t spawn_worker(struct session *s, int cfd, int ctl, int mig)
{
	struct rgpud *srv = &rgpud_server;
	char fds[32], who[96], lvl[8], runas[96], sched_arg[32];
	unsigned uid, gid;
	int groups;
	worker_identity(s, cfd, &uid, &gid, &groups);
	pid_t parent = getpid();
	snprintf(fds, sizeof(fds), "%d,%d,%d", cfd, ctl, mig);
	snprintf(who, sizeof(who), "%u,%u,%llu,%d,%d", s->who.uid, s->who.gid,
		 (unsigned long long)s->who.job_id, s->who.admin, s->who.authenticated);
	snprintf(lvl, sizeof(lvl), "%d", rgpu_log_level());
	snprintf(runas, sizeof(runas), "%u,%u,%d,%d,%llx", uid, gid, (int)parent, groups,
		 (unsigned long long)srv->instance);
	sched_worker_arg(sched_arg, sizeof(sched_arg));
	int sched_fd = sched_parent_fd();
	/* MPS (daemon/sched/mps.c): the worker's environment says which
	 * server, before its first CUDA call */
	char mps_env[4][600];
	uint32_t pct = 100;
	int nmps = sched_mps_env(&s->who, uid, gid, mps_env, 4, &pct);
	extern char **environ;
	size_t nenv = 0;
	while (environ[nenv])
		nenv++;
	char **envp = calloc(nenv + (size_t)nmps + 1, sizeof(*envp));
	if (!envp)
		return -1;
	size_t k = 0;
	for (size_t i = 0; i < nenv; i++)
		if (strncmp(environ[i], "CUDA_MPS_", 9))
			envp[k++] = environ[i];
	for (int i = 0; i < nmps; i++)
		envp[k++] = mps_env[i];
	envp[k] = NULL;
	char *argv[24];
	int n = 0;
	argv[n++] = "rgpud";
	argv[n++] = "--session-worker";
	argv[n++] = fds;
	argv[n++] = "--worker-who";
	argv[n++] = who;
	argv[n++] = "--worker-name";
	argv[n++] = s->name;
	argv[n++] = "--worker-run-as";
	argv[n++] = runas;
	argv[n++] = "--driver";
	argv[n++] = srv->driver_path;
	argv[n++] = "--log-level";
	argv[n++] = lvl;
	if (srv->use_syslog)
		argv[n++] = "--syslog";
	if (sched_fd >= 0) {
		argv[n++] = "--worker-sched";
		argv[n++] = sched_arg;
	}
	argv[n] = NULL;
	/* The driver places module data (globals) where its own reservations
	 * fall in the process's address space; only a worker laid out like
	 * every other finds them at the same device addresses when a session
	 * is restored there (migration, standby).  A worker runs as the
	 * client's own uid, so randomisation protects little beside it. */
	int pers = srv->worker_random_layout ? -1 : personality(0xffffffff);
	pid_t pid = fork();
	if (pid == 0) {
		/* a worker never outlives the parent that accounts for it; the
		 * check closes the race with a parent that died before prctl */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
			_exit(125);
		if (pers != -1 && personality((unsigned long)pers | ADDR_NO_RANDOMIZE) == -1) {
			static const char msg[] = "rgpud: session worker: cannot turn address-space "
						  "randomisation off (--worker-layout=fixed); a session "
						  "with module globals may not be movable\n";
			if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0) {
				/* nowhere to say it: the worker goes on regardless */
			}
		}
		/* the two descriptors the worker inherits */
		if (fcntl(cfd, F_SETFD, 0) < 0 || fcntl(ctl, F_SETFD, 0) < 0 ||
		    (sched_fd >= 0 && fcntl(sched_fd, F_SETFD, 0) < 0) || fcntl(mig, F_SETFD, 0) < 0)
			_exit(126);
		execve(srv->self_exe, argv, envp);
		_exit(127);
	}
	free(envp);
	if (pid > 0)
		sched_parent_spawned(pid, pct, nmps ? &s->who : NULL, uid);
	else if (nmps)
		sched_mps_session_end(&s->who, uid);
	return pid;
}

static void *conn_thread(void *arg)
{
	struct session *s = arg;
	snprintf(s->name, sizeof(s->name), "client %s", s->conn->peer);
	/* the parent answers HELLO (authentication) itself; the frame was
	 * read whole into s->in by the acceptor, and nothing after it, so
	 * requests pipelined behind it stay in the socket for the worker */
	if (session_serve_one(s) < 0 || !s->hello_done) {
		log_info("%s: disconnected before the session opened", s->name);
		goto out;
	}
	if (s->attach) {
		/* a moved session's client: its restored worker takes over */
		if (migrate_parent_attach(s->attach_token, rgpu_tcp_fd(s->conn)) < 0)
			log_info("%s: the moved session went away before its client came", s->name);
		goto out;
	}
	int sv[2], mv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		log_err("%s: socketpair: %s", s->name, strerror(errno));
		goto out;
	}
	/* the migration channel: orders to the worker (migrate.h) */
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, mv) < 0) {
		log_err("%s: socketpair: %s", s->name, strerror(errno));
		close(sv[0]);
		close(sv[1]);
		goto out;
	}
	pthread_mutex_lock(&rgpud_server.lock);
	s->worker = spawn_worker(s, rgpu_tcp_fd(s->conn), sv[1], mv[1]);
	s->mig_fd = mv[0];
	pthread_mutex_unlock(&rgpud_server.lock);
	close(sv[1]);
	close(mv[1]);
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
	gate_serve(sv[0], &s->who, s->name, s->worker);
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
	opstats_discard(s->opstats);
	if (s->mig_fd > 0)
		close(s->mig_fd);
	if (s->conn)
		rgpu_conn_close(s->conn);
	free(s->rx);
	free(s->in);
	wbuf_free(&s->tx);
	free(s);
	return NULL;
}

/* ---- before authentication: one poll loop, no thread per connection ---- */

struct pending {
	struct rgpu_conn *c;
	int fd;
	long long deadline; /* monotonic ms */
	char addr[64];      /* the peer's address (or local uid) */
	uint8_t hdr[RGPU_HDR_SIZE];
	uint8_t *frame;     /* the HELLO frame, once its header is checked */
	size_t got, need;   /* bytes read so far, of the whole frame */
};

static struct pending *pend;
static size_t npend;

/* The key connections are counted by: the IP address, or the local uid. */
static void peer_key(int fd, char *out, size_t n)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	snprintf(out, n, "?");
	if (getpeername(fd, (struct sockaddr *)&ss, &sl) < 0)
		return;
	if (ss.ss_family == AF_INET)
		inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, out, (socklen_t)n);
	else if (ss.ss_family == AF_INET6)
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, out, (socklen_t)n);
	else if (ss.ss_family == AF_UNIX) {
		struct ucred cr;
		socklen_t cl = sizeof(cr);
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0)
			snprintf(out, n, "local uid %u", (unsigned)cr.uid);
	}
}

static void pending_drop(size_t i)
{
	rgpu_conn_close(pend[i].c);
	free(pend[i].frame);
	pend[i] = pend[--npend];
}

static void pending_add(struct rgpud *srv, struct rgpu_conn *c)
{
	static long long last_warn;
	struct pending p = { .c = c, .fd = rgpu_tcp_fd(c) };
	peer_key(p.fd, p.addr, sizeof(p.addr));
	size_t same = 0;
	for (size_t i = 0; i < npend; i++)
		same += !strcmp(pend[i].addr, p.addr);
	if (npend >= RGPUD_MAX_PENDING || same >= (size_t)srv->max_pending_per_host) {
		long long t = (long long)rgpu_now_ms();
		if (t - last_warn > 10000) { /* a flood: say so now and then */
			log_warn("%s: %zu connections waiting for their HELLO (at most %d per host, "
				 "%d in all): refusing more", p.addr, same, srv->max_pending_per_host,
				 RGPUD_MAX_PENDING);
			last_warn = t;
		}
		metrics_refused("pending_limit");
		rgpu_conn_close(c);
		return;
	}
	static size_t cap;
	if (npend == cap) {
		size_t nc = cap ? cap * 2 : 64;
		struct pending *t = realloc(pend, nc * sizeof(*t));
		if (!t) {
			rgpu_conn_close(c);
			return;
		}
		pend = t;
		cap = nc;
	}
	p.deadline = (long long)rgpu_now_ms() + srv->hello_timeout_ms;
	pend[npend++] = p;
	log_debug("%s: connected", c->peer);
}

static int start_session(struct rgpud *srv, struct rgpu_conn *c, uint8_t *frame, size_t n,
			 pthread_attr_t *attr)
{
	struct session *s = calloc(1, sizeof(*s));
	if (!s) {
		log_err("out of memory for a new session from %s", c->peer);
		return -1;
	}
	s->srv = srv;
	s->conn = c;
	s->out_fd = -1;
	s->in = frame;
	s->in_len = n;
	ht_init(&s->ht);
	wbuf_init(&s->tx);
	snprintf(s->name, sizeof(s->name), "client %s", c->peer);
	rgpud_session_register(srv, s);
	if (pthread_create(&s->thread, attr, conn_thread, s)) {
		log_err("cannot start a thread for %s", c->peer);
		rgpud_session_unregister(srv, s);
		s->in = NULL;
		wbuf_free(&s->tx);
		free(s);
		return -1;
	}
	return 0;
}

/* Reads what is there of the HELLO frame, never past its end (requests
 * pipelined behind it stay in the socket for the worker): 1 when complete,
 * 0 when more is to come, -1 to drop the connection. */
static int pending_fill(struct pending *p)
{
	for (;;) {
		uint8_t *dst = p->got < RGPU_HDR_SIZE ? p->hdr + p->got : p->frame + p->got;
		size_t want = p->got < RGPU_HDR_SIZE ? RGPU_HDR_SIZE - p->got : p->need - p->got;
		ssize_t k = recv(p->fd, dst, want, MSG_DONTWAIT);
		if (k < 0 && (errno == EAGAIN || errno == EINTR))
			return 0;
		if (k <= 0) {
			log_debug("%s: disconnected before HELLO", p->c->peer);
			return -1;
		}
		p->got += (size_t)k;
		if (p->got == RGPU_HDR_SIZE && !p->frame) {
			struct rgpu_hdr h;
			rgpu_hdr_decode(p->hdr, &h);
			const char *bad = NULL;
			if (h.magic != RGPU_PROTO_MAGIC)
				bad = "not an rgpu client (bad frame magic)";
			else if (h.op != RGPU_OP_HELLO || (h.flags & RGPU_F_REPLY))
				bad = "the first request is not HELLO";
			else if (h.len > RGPUD_HELLO_MAX)
				bad = "HELLO too long";
			if (bad) {
				log_warn("%s: %s (op %u, %u bytes), dropping connection", p->c->peer,
					 bad, h.op, h.len);
				metrics_refused("bad_hello");
				return -1;
			}
			p->need = RGPU_HDR_SIZE + h.len;
			if (!(p->frame = malloc(p->need)))
				return -1;
			memcpy(p->frame, p->hdr, RGPU_HDR_SIZE);
		}
		if (p->frame && p->got == p->need)
			return 1;
	}
}

/* A pending connection is readable: once its whole HELLO frame is in, hand
 * it to a session thread.  0: still pending, 1: done with it (started or
 * dropped; removed from the table). */
static int pending_read(struct rgpud *srv, size_t i, pthread_attr_t *attr)
{
	struct pending *p = &pend[i];
	int rc = pending_fill(p);
	if (rc == 0)
		return 0;
	if (rc < 0) {
		pending_drop(i);
		return 1;
	}
	struct rgpu_conn *c = p->c;
	uint8_t *frame = p->frame;
	size_t n = p->need;
	pend[i] = pend[--npend];
	if (start_session(srv, c, frame, n, attr) < 0) {
		free(frame);
		rgpu_conn_close(c);
	}
	return 1;
}

static int accept_failure_is_transient(int e)
{
	return e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM;
}

int rgpud_serve(struct rgpud *srv)
{
	pthread_attr_t attr;
	if (pthread_attr_init(&attr) || pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED)) {
		log_err("cannot set up thread attributes");
		return -1;
	}
	long long paused_until = 0; /* accept() ran out of descriptors: back off */
	int accept_failing = 0;
	struct pollfd *pf = NULL;
	size_t pfcap = 0;
	while (!srv->stopping) {
		long long now = (long long)rgpu_now_ms();
		if (pfcap < npend + 2) {
			size_t nc = npend + 66;
			struct pollfd *t = realloc(pf, nc * sizeof(*t));
			if (!t) {
				log_err("out of memory polling connections");
				break;
			}
			pf = t;
			pfcap = nc;
		}
		nfds_t nf = 0;
		int listening = now >= paused_until;
		if (listening) {
			pf[nf++] = (struct pollfd){ .fd = srv->listen_fd, .events = POLLIN };
			if (srv->unix_fd >= 0)
				pf[nf++] = (struct pollfd){ .fd = srv->unix_fd, .events = POLLIN };
		}
		nfds_t first_pending = nf;
		long long wake = now + 500;
		if (!listening && paused_until < wake)
			wake = paused_until;
		for (size_t i = 0; i < npend; i++) {
			pf[nf + i] = (struct pollfd){ .fd = pend[i].fd, .events = POLLIN };
			if (pend[i].deadline < wake)
				wake = pend[i].deadline;
		}
		nf += (nfds_t)npend;
		int rc = poll(pf, nf, wake > now ? (int)(wake - now) : 0);
		if (rc < 0 && errno != EINTR) {
			log_err("poll on the listening sockets: %s", strerror(errno));
			break;
		}
		now = (long long)rgpu_now_ms();
		/* pending connections first (indices shift as they leave) */
		size_t np = npend;
		for (size_t i = np; i-- > 0;) {
			if (rc > 0 && pf[first_pending + i].revents && pending_read(srv, i, &attr))
				continue;
			if (i < npend && pend[i].deadline <= now) {
				log_info("%s: no HELLO within %d ms: connection closed", pend[i].c->peer,
					 srv->hello_timeout_ms);
				metrics_refused("hello_timeout");
				pending_drop(i);
			}
		}
		for (nfds_t k = 0; rc > 0 && k < first_pending; k++) {
			if (!(pf[k].revents & POLLIN))
				continue;
			struct rgpu_conn *c = pf[k].fd == srv->listen_fd ? rgpu_tcp_accept(srv->listen_fd)
									 : rgpu_unix_accept(srv->unix_fd);
			if (!c) {
				int e = errno;
				if (accept_failure_is_transient(e)) {
					/* the queue stays full: polling again at once would spin */
					paused_until = now + 250;
					if (!accept_failing)
						log_err("accept: %s: not accepting for now (logged once until "
							"accepting works again)", strerror(e));
					accept_failing = 1;
				} else if (e != EAGAIN && e != ECONNABORTED && e != EINTR) {
					log_warn("accept: %s", strerror(e));
				}
				if (e != EAGAIN && e != EINTR)
					metrics_error("accept");
				continue;
			}
			if (accept_failing) {
				log_info("accepting connections again");
				accept_failing = 0;
			}
			metrics_conn_accepted();
			pending_add(srv, c);
		}
	}
	free(pf);
	while (npend)
		pending_drop(npend - 1);
	free(pend);
	pend = NULL;
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
