/* lib/transport_tcp.c over the loopback: listen on 127.0.0.1:0, connect,
 * a 32 MiB sendv of several iovecs arriving intact, EOF detection, the
 * message for a refused connection, and listen-address errors. */
#include "tap.h"
#include "transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <time.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#define BIG (32u * 1024 * 1024)

static unsigned port_of(int fd)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);
	if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
		BAIL("getsockname: %s", strerror(errno));
	return ntohs(sa.sin_port);
}

static uint8_t pattern(size_t i) { return (uint8_t)((i * 2654435761u) >> 13); }

struct rx {
	struct rgpu_conn *c;
	size_t total;
	int rc, intact;
};

static void *receiver(void *arg)
{
	struct rx *x = arg;
	uint8_t *buf = malloc(x->total);
	if (!buf) {
		x->rc = -1;
		return NULL;
	}
	x->rc = rgpu_recv(x->c, buf, x->total);
	x->intact = 0;
	if (x->rc == 0) {
		/* layout: "head" (4) + BIG pattern + "tail!" (5) */
		x->intact = memcmp(buf, "head", 4) == 0 && memcmp(buf + 4 + BIG, "tail!", 5) == 0;
		for (size_t i = 0; x->intact && i < BIG; i++)
			if (buf[4 + i] != pattern(i))
				x->intact = 0;
	}
	free(buf);
	return NULL;
}

int main(void)
{
	char err[256] = "";

	int lfd = rgpu_tcp_listen("127.0.0.1:0", err, sizeof(err));
	if (!ok(lfd >= 0, "listen on 127.0.0.1:0 (%s)", err))
		BAIL("cannot listen");
	unsigned port = port_of(lfd);
	ok(port > 0, "kernel picked port %u", port);

	err[0] = '\0';
	struct rgpu_conn *cli = rgpu_tcp_connect("127.0.0.1", port, 5000, err, sizeof(err));
	if (!ok(cli != NULL, "connect to 127.0.0.1:%u (%s)", port, err))
		BAIL("cannot connect");
	struct rgpu_conn *srv = rgpu_tcp_accept(lfd);
	if (!ok(srv != NULL, "accept"))
		BAIL("accept failed: %s", strerror(errno));
	char want[64];
	snprintf(want, sizeof(want), "127.0.0.1:%u", port);
	is_str(cli->peer, want, "client's peer names the server");
	like(srv->peer, "127.0.0.1:", "server's peer names the client address");
	ok(rgpu_tcp_fd(cli) >= 0 && rgpu_tcp_fd(srv) >= 0 && rgpu_tcp_fd(cli) != rgpu_tcp_fd(srv),
	   "rgpu_tcp_fd gives the sockets");
	is_str(cli->tp->name, "tcp", "transport name");

	/* small round trip both ways */
	struct iovec small[3] = { { "ab", 2 }, { "", 0 }, { "cde", 3 } };
	ok(rgpu_sendv(cli, small, 3) == 0, "sendv of 3 iovecs (one empty)");
	char got[8] = "";
	ok(rgpu_recv(srv, got, 5) == 0 && memcmp(got, "abcde", 5) == 0, "received in order");
	ok(rgpu_sendv(srv, (struct iovec[]){ { "pong", 4 } }, 1) == 0 &&
	   rgpu_recv(cli, got, 4) == 0 && memcmp(got, "pong", 4) == 0, "reply the other way");

	/* liveness settings: keepalive probes and a bound on unacknowledged
	 * data (RGPU_KEEPALIVE_S), a bounded receive (the handshake) */
	ok(rgpu_tcp_keepalive(cli, 60) == 0, "keepalive for 60 s");
	int v = 0;
	socklen_t vl = sizeof(v);
	getsockopt(rgpu_tcp_fd(cli), IPPROTO_TCP, TCP_KEEPIDLE, &v, &vl);
	is_i64(v, 30, "probes start after 30 s idle");
	getsockopt(rgpu_tcp_fd(cli), IPPROTO_TCP, TCP_KEEPCNT, &v, &vl);
	is_i64(v, 3, "3 probes");
	unsigned ut = 0;
	vl = sizeof(ut);
	getsockopt(rgpu_tcp_fd(cli), IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, &vl);
	is_u64(ut, 60000, "unacknowledged data fails the connection after 60 s");
	ok(rgpu_conn_set_recv_timeout(cli, 200) == 0, "a 200 ms receive bound");
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	errno = 0;
	int trc = rgpu_recv(cli, got, 1);
	int terr = errno;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
	ok(trc == -1 && (terr == EAGAIN || terr == EWOULDBLOCK), "a silent peer: EAGAIN (%s)",
	   strerror(terr));
	ok(ms >= 150 && ms < 2000, "after about 200 ms (%ld ms)", ms);
	ok(rgpu_conn_set_recv_timeout(cli, 0) == 0, "bound removed");
	ok(rgpu_sendv(srv, (struct iovec[]){ { "k", 1 } }, 1) == 0 && rgpu_recv(cli, got, 1) == 0 &&
	   got[0] == 'k', "the connection still works after a timed-out receive");

	/* spinning for input (rgpu_conn_spin): none comes, the time runs out;
	 * a byte there, or the peer's end, is found without the time */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int sr = rgpu_conn_spin(cli, 20000000ull);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
	ok(sr == 0 && ms >= 19, "a spin for a silent peer's input runs out (%d after %ld ms)", sr, ms);
	ok(rgpu_sendv(srv, (struct iovec[]){ { "s", 1 } }, 1) == 0 &&
	   rgpu_conn_spin(cli, 10000000000ull) == 1, "a spin finds a byte sent");
	ok(rgpu_recv(cli, got, 1) == 0 && got[0] == 's', "which the receive then takes");

	/* 32 MiB in the middle of three iovecs; the receiver runs concurrently */
	uint8_t *big = malloc(BIG);
	if (!big)
		BAIL("malloc");
	for (size_t i = 0; i < BIG; i++)
		big[i] = pattern(i);
	struct rx x = { .c = srv, .total = 4 + BIG + 5, .rc = -2 };
	pthread_t th;
	if (pthread_create(&th, NULL, receiver, &x) != 0)
		BAIL("pthread_create");
	struct iovec iov[3] = { { "head", 4 }, { big, BIG }, { "tail!", 5 } };
	ok(rgpu_sendv(cli, iov, 3) == 0, "sendv of 4 B + 32 MiB + 5 B");
	ok(iov[1].iov_base == big && iov[1].iov_len == BIG, "sendv leaves the caller's iovecs alone");
	pthread_join(th, NULL);
	ok(x.rc == 0, "receiver got all %zu bytes", x.total);
	ok(x.intact, "32 MiB payload arrived intact");
	free(big);

	/* too many iovecs */
	struct iovec many[9];
	for (int i = 0; i < 9; i++)
		many[i] = (struct iovec){ "z", 1 };
	errno = 0;
	ok(rgpu_sendv(cli, many, 9) == -1 && errno == EINVAL, "sendv of 9 iovecs: EINVAL");

	/* EOF: the client goes away mid-message */
	ok(rgpu_sendv(cli, (struct iovec[]){ { "xyz", 3 } }, 1) == 0, "send 3 bytes then close");
	rgpu_conn_close(cli);
	char buf[16] = "";
	errno = 12345;
	int rc = rgpu_recv(srv, buf, 10);
	ok(rc == -1 && errno == 0, "recv of 10 bytes when 3 arrive before EOF: -1 with errno 0 (errno %d)", errno);
	errno = 12345;
	rc = rgpu_recv(srv, buf, 1);
	ok(rc == -1 && errno == 0, "recv after EOF: -1 with errno 0");
	/* sending to a closed peer fails instead of raising SIGPIPE */
	int failed = 0;
	for (int i = 0; i < 100 && !failed; i++)
		failed = rgpu_sendv(srv, (struct iovec[]){ { buf, sizeof(buf) } }, 1) < 0;
	ok(failed, "sendv to a closed peer eventually fails (no SIGPIPE)");
	rgpu_conn_close(srv);
	rgpu_conn_close(NULL);

	/* connect to a port nobody listens on */
	int tmp = rgpu_tcp_listen("127.0.0.1:0", err, sizeof(err));
	unsigned closed = port_of(tmp);
	close(tmp);
	err[0] = '\0';
	struct rgpu_conn *none = rgpu_tcp_connect("127.0.0.1", closed, 2000, err, sizeof(err));
	ok(none == NULL, "connect to closed port %u fails", closed);
	snprintf(want, sizeof(want), "127.0.0.1:%u", closed);
	like(err, want, "the message names host:port");
	like(err, "refused", "the message gives the reason");

	/* a host that does not resolve */
	err[0] = '\0';
	none = rgpu_tcp_connect("no-such-host.invalid", 7420, 2000, err, sizeof(err));
	ok(none == NULL, "connect to an unresolvable host fails");
	like(err, "no-such-host.invalid", "the message names the host");

	/* listen address errors */
	err[0] = '\0';
	ok(rgpu_tcp_listen("127.0.0.1:abc", err, sizeof(err)) == -1, "listen on port 'abc' fails");
	like(err, "abc", "message names the bad port");
	err[0] = '\0';
	ok(rgpu_tcp_listen("127.0.0.1:70000", err, sizeof(err)) == -1, "listen on port 70000 fails");
	like(err, "70000", "message names the bad port");
	err[0] = '\0';
	ok(rgpu_tcp_listen("127.0.0.1:", err, sizeof(err)) == -1, "listen with an empty port fails");
	like(err, "127.0.0.1:", "message names the address");
	/* the port in use */
	err[0] = '\0';
	char addr[64];
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
	int again = rgpu_tcp_listen(addr, err, sizeof(err));
	ok(again == -1, "listen on a port already listening fails");
	like(err, addr, "message names the address");
	if (again >= 0)
		close(again);

	/* [::1]:0 form, where IPv6 exists */
	err[0] = '\0';
	int v6 = rgpu_tcp_listen("[::1]:0", err, sizeof(err));
	if (v6 >= 0) {
		ok(1, "listen on [::1]:0");
		close(v6);
	} else {
		diag("no IPv6 loopback here: %s", err);
		like(err, "[::1]:0", "IPv6 listen failure names the address");
	}

	close(lfd);
	return tap_done();
}
