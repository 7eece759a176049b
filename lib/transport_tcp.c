#include "transport.h"
#include "clock.h"
#include "proto.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

struct tcp_conn {
	struct rgpu_conn base;
	int fd;
};

static int tcp_sendv(struct rgpu_conn *c, const struct iovec *iov_in, int n)
{
	struct tcp_conn *t = (struct tcp_conn *)c;
	struct iovec iov[8];
	if (n > 8 || n < 0) {
		errno = EINVAL;
		return -1;
	}
	memcpy(iov, iov_in, sizeof(*iov) * (size_t)n);
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)n };
	while (mh.msg_iovlen) {
		ssize_t w = sendmsg(t->fd, &mh, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		size_t done = (size_t)w;
		while (mh.msg_iovlen && done >= mh.msg_iov->iov_len) {
			done -= mh.msg_iov->iov_len;
			mh.msg_iov++;
			mh.msg_iovlen--;
		}
		if (mh.msg_iovlen) {
			mh.msg_iov->iov_base = (char *)mh.msg_iov->iov_base + done;
			mh.msg_iov->iov_len -= done;
		}
	}
	return 0;
}

static int tcp_recv(struct rgpu_conn *c, void *buf, size_t n)
{
	struct tcp_conn *t = (struct tcp_conn *)c;
	char *p = buf;
	while (n) {
		ssize_t r = recv(t->fd, p, n, MSG_WAITALL);
		if (r == 0) {
			errno = 0;
			return -1;
		}
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

static ssize_t tcp_recv_some(struct rgpu_conn *c, void *buf, size_t n)
{
	struct tcp_conn *t = (struct tcp_conn *)c;
	for (;;) {
		ssize_t r = recv(t->fd, buf, n, 0);
		if (r == 0) {
			errno = 0;
			return -1;
		}
		if (r < 0 && errno == EINTR)
			continue;
		return r;
	}
}

static void tcp_shutdown(struct rgpu_conn *c)
{
	(void)shutdown(((struct tcp_conn *)c)->fd, SHUT_RDWR);
}

static void tcp_close(struct rgpu_conn *c)
{
	struct tcp_conn *t = (struct tcp_conn *)c;
	close(t->fd);
	free(t);
}

static int tcp_fd(struct rgpu_conn *c) { return ((struct tcp_conn *)c)->fd; }

static const struct rgpu_transport tcp_transport = {
	.name = "tcp",
	.sendv = tcp_sendv,
	.recv = tcp_recv,
	.recv_some = tcp_recv_some,
	.shutdown = tcp_shutdown,
	.close = tcp_close,
	.fd = tcp_fd,
};

static void tcp_tune(int fd)
{
	int one = 1;
	/* Small calls must not wait for Nagle; bulk data is sent in large
	 * writev()s, so this costs nothing there. */
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	(void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
}

/* The same stream operations carry a same-host Unix socket
 * (transport_unix.c); only the name differs. */
static const struct rgpu_transport unix_transport = {
	.name = "unix",
	.sendv = tcp_sendv,
	.recv = tcp_recv,
	.recv_some = tcp_recv_some,
	.shutdown = tcp_shutdown,
	.close = tcp_close,
	.fd = tcp_fd,
};

struct rgpu_conn *rgpu_stream_wrap(int fd, const char *peer)
{
	struct tcp_conn *t = calloc(1, sizeof(*t));
	if (!t) {
		close(fd);
		return NULL;
	}
	t->base.tp = &unix_transport;
	t->fd = fd;
	snprintf(t->base.peer, sizeof(t->base.peer), "%s", peer);
	return &t->base;
}

static struct rgpu_conn *tcp_wrap(int fd, const struct sockaddr *sa, socklen_t salen)
{
	struct tcp_conn *t = calloc(1, sizeof(*t));
	if (!t) {
		close(fd);
		return NULL;
	}
	t->base.tp = &tcp_transport;
	t->fd = fd;
	char h[96], s[16];
	if (sa && getnameinfo(sa, salen, h, sizeof(h), s, sizeof(s),
			      NI_NUMERICHOST | NI_NUMERICSERV) == 0)
		snprintf(t->base.peer, sizeof(t->base.peer), "%s:%s", h, s);
	else
		snprintf(t->base.peer, sizeof(t->base.peer), "fd%d", fd);
	return &t->base;
}

struct rgpu_conn *rgpu_tcp_from_fd(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	if (getpeername(fd, (struct sockaddr *)&ss, &len) < 0)
		return NULL;
	if (ss.ss_family == AF_UNIX)
		return rgpu_stream_wrap(fd, "local");
	return tcp_wrap(fd, (struct sockaddr *)&ss, len);
}

int rgpu_tcp_fd(struct rgpu_conn *c) { return ((struct tcp_conn *)c)->fd; }

int rgpu_conn_fd(struct rgpu_conn *c) { return c->tp->fd ? c->tp->fd(c) : -1; }

int rgpu_conn_ready(struct rgpu_conn *c)
{
	if (c->tp->ready)
		return c->tp->ready(c);
	int fd = rgpu_conn_fd(c);
	if (fd < 0)
		return -1;
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int n = poll(&p, 1, 0);
	return n < 0 ? -1 : n > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR));
}

int rgpu_conn_spin(struct rgpu_conn *c, uint64_t ns)
{
	uint64_t t0 = rgpu_now_ns();
	for (;;) {
		int r = rgpu_conn_ready(c);
		if (r != 0)
			return r;
		if (rgpu_now_ns() - t0 >= ns)
			return 0;
		rgpu_cpu_relax();
	}
}

int rgpu_conn_set_recv_timeout(struct rgpu_conn *c, int ms)
{
	if (c->tp->recv_timeout)
		return c->tp->recv_timeout(c, ms);
	if (c->tp != &tcp_transport && c->tp != &unix_transport)
		return -1;
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
	return setsockopt(((struct tcp_conn *)c)->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

int rgpu_tcp_keepalive(struct rgpu_conn *c, int seconds)
{
	if (c->tp != &tcp_transport)
		return -1;
	int fd = ((struct tcp_conn *)c)->fd;
	/* idle half the time, then three probes in the other half */
	int idle = seconds / 2 > 0 ? seconds / 2 : 1;
	int intvl = seconds / 6 > 0 ? seconds / 6 : 1;
	int cnt = 3, one = 1;
	unsigned user_ms = (unsigned)seconds * 1000u;
	if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) < 0 ||
	    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) < 0 ||
	    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl)) < 0 ||
	    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt)) < 0 ||
	    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_ms, sizeof(user_ms)) < 0)
		return -1;
	return 0;
}

static int connect_timeout(int fd, const struct sockaddr *sa, socklen_t len, int timeout_ms)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -1;
	int rc = connect(fd, sa, len);
	if (rc < 0 && errno == EINPROGRESS) {
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		rc = poll(&p, 1, timeout_ms);
		if (rc == 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		if (rc < 0)
			return -1;
		int soerr = 0;
		socklen_t sl = sizeof(soerr);
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
			return -1;
		if (soerr) {
			errno = soerr;
			return -1;
		}
		rc = 0;
	}
	if (rc < 0)
		return -1;
	return fcntl(fd, F_SETFL, fl);
}

struct rgpu_conn *rgpu_tcp_connect(const char *host, unsigned port,
				   int timeout_ms, char *err, size_t errlen)
{
	char ps[16];
	snprintf(ps, sizeof(ps), "%u", port);
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res = NULL;
	int gai = getaddrinfo(host, ps, &hints, &res);
	if (gai) {
		snprintf(err, errlen, "cannot resolve %s: %s", host, gai_strerror(gai));
		return NULL;
	}
	int saved = 0;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0) {
			saved = errno;
			continue;
		}
		if (connect_timeout(fd, ai->ai_addr, ai->ai_addrlen, timeout_ms) == 0) {
			tcp_tune(fd);
			struct rgpu_conn *c = tcp_wrap(fd, ai->ai_addr, ai->ai_addrlen);
			freeaddrinfo(res);
			if (!c)
				snprintf(err, errlen, "out of memory");
			return c;
		}
		saved = errno;
		close(fd);
	}
	freeaddrinfo(res);
	snprintf(err, errlen, "cannot connect to %s:%u: %s", host, port, strerror(saved));
	return NULL;
}

int rgpu_tcp_listen(const char *addr, char *err, size_t errlen)
{
	char host[256] = "";
	char port[16];
	const char *colon = strrchr(addr, ':');
	snprintf(port, sizeof(port), "%u", RGPU_DEFAULT_PORT);
	if (colon) {
		size_t hl = (size_t)(colon - addr);
		if (hl >= sizeof(host) || strlen(colon + 1) >= sizeof(port) || !colon[1]) {
			snprintf(err, errlen, "bad listen address '%s' (want HOST:PORT)", addr);
			return -1;
		}
		memcpy(host, addr, hl);
		host[hl] = '\0';
		strcpy(port, colon + 1);
	} else {
		snprintf(host, sizeof(host), "%s", addr);
	}
	/* [v6addr] form */
	size_t hl = strlen(host);
	if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
		memmove(host, host + 1, hl - 2);
		host[hl - 2] = '\0';
	}
	char *end;
	long pn = strtol(port, &end, 10);
	if (*end || pn < 0 || pn > 65535) {
		snprintf(err, errlen, "bad port '%s' in listen address '%s'", port, addr);
		return -1;
	}
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE };
	struct addrinfo *res = NULL;
	int gai = getaddrinfo(*host ? host : NULL, port, &hints, &res);
	if (gai) {
		snprintf(err, errlen, "cannot resolve listen address '%s': %s", addr, gai_strerror(gai));
		return -1;
	}
	int fd = -1, saved = 0;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0) {
			saved = errno;
			continue;
		}
		int one = 1;
		(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 128) == 0)
			break;
		saved = errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		snprintf(err, errlen, "cannot listen on '%s': %s", addr, strerror(saved));
	return fd;
}

struct rgpu_conn *rgpu_tcp_accept(int listen_fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int fd;
	do {
		fd = accept4(listen_fd, (struct sockaddr *)&ss, &len, SOCK_CLOEXEC);
	} while (fd < 0 && errno == EINTR);
	if (fd < 0)
		return NULL;
	tcp_tune(fd);
	return tcp_wrap(fd, (struct sockaddr *)&ss, len);
}
