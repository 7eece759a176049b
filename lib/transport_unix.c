/* Same-host transport: an abstract Unix socket.  The bytes are the same
 * frames as over TCP; what makes it fast is the shared memory the client
 * and its session worker set up over it (see proto.h, SHM_*). */
#include "transport.h"

#include <errno.h>
#include <netdb.h>
#include <pwd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* "\0rgpud.PORT": abstract names need no file and vanish with the socket;
 * they are per network namespace, as a node is in the Slurm tests. */
static socklen_t unix_addr(unsigned port, struct sockaddr_un *sa)
{
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	int n = snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1, "rgpud.%u", port);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

int rgpu_unix_listen(unsigned port, char *err, size_t errlen)
{
	struct sockaddr_un sa;
	socklen_t len = unix_addr(port, &sa);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, len) < 0 || listen(fd, 128) < 0) {
		snprintf(err, errlen, "cannot listen on the local socket @rgpud.%u: %s", port, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* Who may own the same-host socket: RGPU_SERVER_USER (a name or uid) if
 * set, else root; the client's own uid always (a server one runs oneself
 * learns nothing new).  -1 with err if RGPU_SERVER_USER names nobody. */
static int expected_server_uid(uid_t *uid, char *err, size_t errlen)
{
	const char *u = getenv("RGPU_SERVER_USER");
	*uid = 0;
	if (!u || !*u)
		return 0;
	char *end;
	errno = 0;
	unsigned long v = strtoul(u, &end, 10);
	struct passwd *pw = getpwnam(u);
	if (pw)
		*uid = pw->pw_uid;
	else if (!errno && !*end && *u >= '0' && *u <= '9' && v < (unsigned long)(uid_t)-1)
		*uid = (uid_t)v;
	else {
		snprintf(err, errlen, "RGPU_SERVER_USER=%s: no such user", u);
		return -1;
	}
	return 0;
}

struct rgpu_conn *rgpu_unix_connect(unsigned port, char *err, size_t errlen)
{
	struct sockaddr_un sa;
	socklen_t len = unix_addr(port, &sa);
	uid_t want;
	if (expected_server_uid(&want, err, errlen) < 0)
		return NULL;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, len) < 0) {
		snprintf(err, errlen, "no local rgpud at @rgpud.%u: %s", port, strerror(errno));
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	/* Any local user can bind an abstract name first: before a credential
	 * goes out, the kernel says who owns the other end. */
	struct ucred cr;
	socklen_t cl = sizeof(cr);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0) {
		snprintf(err, errlen, "@rgpud.%u: cannot learn who serves it: %s", port, strerror(errno));
		close(fd);
		return NULL;
	}
	if (cr.uid != want && cr.uid != getuid()) {
		snprintf(err, errlen, "@rgpud.%u is held by uid %u (pid %d), not by rgpud's user "
			 "(uid %u; RGPU_SERVER_USER sets it): not talking to it", port,
			 (unsigned)cr.uid, (int)cr.pid, (unsigned)want);
		close(fd);
		return NULL;
	}
	char peer[32];
	snprintf(peer, sizeof(peer), "local:%u", port);
	return rgpu_stream_wrap(fd, peer);
}

struct rgpu_conn *rgpu_unix_accept(int listen_fd)
{
	int fd;
	do {
		fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
	} while (fd < 0 && errno == EINTR);
	if (fd < 0)
		return NULL;
	struct ucred cr;
	socklen_t cl = sizeof(cr);
	char peer[64] = "local";
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0)
		snprintf(peer, sizeof(peer), "local pid %d", (int)cr.pid);
	return rgpu_stream_wrap(fd, peer);
}

int rgpu_unix_peer(struct rgpu_conn *c, int *pid, unsigned *uid)
{
	while (c->tp->under) /* the shared-memory queues ride on it */
		c = c->tp->under(c);
	if (strcmp(c->tp->name, "unix") != 0)
		return -1;
	struct ucred cr;
	socklen_t cl = sizeof(cr);
	if (getsockopt(rgpu_tcp_fd(c), SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0)
		return -1;
	*pid = (int)cr.pid;
	*uid = cr.uid;
	return 0;
}

int rgpu_host_is_local(const char *host)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM };
	struct addrinfo *res = NULL;
	if (getaddrinfo(host, NULL, &hints, &res))
		return 0;
	int local = 0;
	/* an address is ours if we can bind to it */
	for (struct addrinfo *ai = res; ai && !local; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		local = bind(fd, ai->ai_addr, ai->ai_addrlen) == 0;
		close(fd);
	}
	freeaddrinfo(res);
	return local;
}

struct rgpu_conn *rgpu_connect_local_first(const char *host, unsigned port, int timeout_ms,
					   char *err, size_t errlen)
{
	struct rgpu_conn *c = NULL;
	if (rgpu_host_is_local(host))
		c = rgpu_unix_connect(port, err, errlen);
	return c ? c : rgpu_tcp_connect(host, port, timeout_ms, err, errlen);
}
