/* Transports move bytes between a client and rgpud.  Each lives in its own
 * file behind this interface (TCP now; shared memory and verbs later), so the
 * protocol code never knows which one carries it. */
#ifndef RGPU_TRANSPORT_H
#define RGPU_TRANSPORT_H

#include "error.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

struct rgpu_conn;

struct rgpu_transport {
	const char *name;
	/* Send every byte of iov or fail: 0, or -1 with errno set. */
	int (*sendv)(struct rgpu_conn *c, const struct iovec *iov, int iovcnt);
	/* Receive exactly n bytes: 0, or -1 (errno set; 0 on orderly EOF). */
	int (*recv)(struct rgpu_conn *c, void *buf, size_t n);
	/* Receive what is there, at least 1 byte and at most n: the count, or
	 * -1 (errno set; 0 on orderly EOF).  Lets a server take many small
	 * frames in one system call. */
	ssize_t (*recv_some)(struct rgpu_conn *c, void *buf, size_t n);
	/* Wakes a thread blocked in recv on this connection (it then fails). */
	void (*shutdown)(struct rgpu_conn *c);
	void (*close)(struct rgpu_conn *c);
	/* Optional (NULL where a transport has none): */
	/* the socket underneath, to poll for hang-up or take credentials */
	int (*fd)(struct rgpu_conn *c);
	/* 1 if a receive would find bytes now, 0 if not, -1 on error */
	int (*ready)(struct rgpu_conn *c);
	/* before polling fd() for input together with other descriptors: 1
	 * if input is there already (do not poll), 0 to poll, -1 on error;
	 * disarm after the poll.  Without them, fd() polls for input. */
	int (*arm)(struct rgpu_conn *c);
	void (*disarm)(struct rgpu_conn *c);
	/* the connection this one is layered over */
	struct rgpu_conn *(*under)(struct rgpu_conn *c);
	/* bounds each receive (rgpu_conn_set_recv_timeout) */
	int (*recv_timeout)(struct rgpu_conn *c, int ms);
};

struct rgpu_conn {
	const struct rgpu_transport *tp;
	char peer[128]; /* for logs: "host:port" */
};

static inline int rgpu_sendv(struct rgpu_conn *c, const struct iovec *iov, int n)
{
	return c->tp->sendv(c, iov, n);
}
static inline int rgpu_recv(struct rgpu_conn *c, void *buf, size_t n)
{
	return c->tp->recv(c, buf, n);
}
static inline ssize_t rgpu_recv_some(struct rgpu_conn *c, void *buf, size_t n)
{
	return c->tp->recv_some(c, buf, n);
}
static inline void rgpu_conn_shutdown(struct rgpu_conn *c)
{
	c->tp->shutdown(c);
}
static inline void rgpu_conn_close(struct rgpu_conn *c)
{
	if (c)
		c->tp->close(c);
}

/* Waiting for input together with other descriptors (see arm above):
 * rgpu_conn_arm 1: input is there; 0: poll rgpu_conn_fd for POLLIN, then
 * rgpu_conn_disarm. */
static inline int rgpu_conn_arm(struct rgpu_conn *c)
{
	return c->tp->arm ? c->tp->arm(c) : 0;
}
static inline void rgpu_conn_disarm(struct rgpu_conn *c)
{
	if (c->tp->disarm)
		c->tp->disarm(c);
}
/* 1 if a receive would find bytes now, 0 if not, -1 if it cannot tell. */
int rgpu_conn_ready(struct rgpu_conn *c);
/* In a spin loop: tells the CPU (and a hyperthread beside this one). */
static inline void rgpu_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}
/* Waits up to ns for input without sleeping: 1 when a receive would find
 * bytes (or the end), 0 when the time ran out, -1 when the transport
 * cannot tell (then at once).  A thread that expects its answer soon
 * spares the wake-up a sleeping receive costs (tens of microseconds). */
int rgpu_conn_spin(struct rgpu_conn *c, uint64_t ns);

/* TCP (transport_tcp.c).  Errors are written to err as a sentence. */
struct rgpu_conn *rgpu_tcp_connect(const char *host, unsigned port,
				   int timeout_ms, char *err, size_t errlen);
/* addr is "HOST:PORT", "HOST" or ":PORT"; returns a listening fd or -1. */
int rgpu_tcp_listen(const char *addr, char *err, size_t errlen);
/* Accepts one connection; NULL with errno set on failure. */
struct rgpu_conn *rgpu_tcp_accept(int listen_fd);
/* Wraps an already connected socket (a session worker's inherited one). */
struct rgpu_conn *rgpu_tcp_from_fd(int fd);
/* Same host (transport_unix.c): rgpud also listens on an abstract Unix
 * socket named after its TCP port, so only processes in the server's own
 * network namespace (the same node) reach it.  Same framing as TCP. */
int rgpu_unix_listen(unsigned port, char *err, size_t errlen);
struct rgpu_conn *rgpu_unix_connect(unsigned port, char *err, size_t errlen);
struct rgpu_conn *rgpu_unix_accept(int listen_fd);
/* True if host names an address of this machine (in this network
 * namespace): then the Unix socket is worth trying. */
int rgpu_host_is_local(const char *host);
/* The server's Unix socket when host is this machine (the kernel then
 * vouches for who connects), else, or if that fails, TCP. */
struct rgpu_conn *rgpu_connect_local_first(const char *host, unsigned port, int timeout_ms,
					   char *err, size_t errlen);
/* The peer's pid and uid on a Unix connection; -1 on others. */
int rgpu_unix_peer(struct rgpu_conn *c, int *pid, unsigned *uid);
/* internal: a connected stream socket as a "unix" transport connection */
struct rgpu_conn *rgpu_stream_wrap(int fd, const char *peer);
/* Bounds every receive on a TCP or same-host connection to ms
 * milliseconds (0: no bound); a receive that times out fails with EAGAIN.
 * 0, or -1 on other transports. */
int rgpu_conn_set_recv_timeout(struct rgpu_conn *c, int ms);
/* TCP keepalive so that a peer whose host or network is gone is noticed
 * within about `seconds` even while nothing is being sent (a long kernel);
 * also bounds how long sent data may stay unacknowledged.  0 or -1. */
int rgpu_tcp_keepalive(struct rgpu_conn *c, int seconds);
/* The socket under a TCP connection (for poll and credentials). */
int rgpu_tcp_fd(struct rgpu_conn *c);
/* The socket under a TCP or same-host connection (shared-memory queues
 * included), to poll; -1 on others. */
int rgpu_conn_fd(struct rgpu_conn *c);

/* Same host, calls through shared memory (transport_shmq.c): two byte
 * queues of ring bytes each (a power of two, 4 KiB to RGPU_SHMQ_RING_MAX)
 * in a sealed memfd, layered over a same-host connection that stays as
 * the doorbell for a sleeping reader and to notice the peer's end.  The
 * client makes the memory (rgpu_shmq_make: *fd to hand over, *mem its
 * mapping) and the server maps it (rgpu_shmq_map); both then wrap their
 * socket at the same point of the protocol, with nothing in flight.  A
 * reader spins spin_us before it sleeps.  The new connection owns sock and
 * mem (closing it unmaps and closes them); NULL on failure (nothing
 * taken). */
#define RGPU_SHMQ_RING_MAX (16u << 20)
size_t rgpu_shmq_size(size_t ring);
int rgpu_shmq_make(size_t ring, int *fd, void **mem, char *err, size_t errlen);
int rgpu_shmq_map(int fd, size_t ring, void **mem, char *err, size_t errlen);
/* How many waits of this end slept on the socket (0 for another
 * transport): spinning that pays keeps it low (tests, statistics). */
unsigned long rgpu_shmq_sleeps(struct rgpu_conn *c);
struct rgpu_conn *rgpu_shmq_wrap(struct rgpu_conn *sock, void *mem, size_t ring, int is_server,
				 unsigned spin_us);

/* InfiniBand verbs (transport_verbs.c; only in builds with HAVE_VERBS from
 * config.h).  Both ends call rgpu_verbs_upgrade at the same point of the
 * protocol with nothing else in flight on tcp.  Success: a verbs connection
 * that owns tcp (closing it closes tcp).  NULL: e->text says why; e->code
 * RGPU_E_UNAVAILABLE: tcp is the caller's still and usable (the fallback);
 * RGPU_E_BROKEN: the exchange failed and tcp has been shut down.
 * rgpu_verbs_available: 1 if a device has an ACTIVE port, else 0; why says
 * which (docs/transports.md). */
struct rgpu_conn *rgpu_verbs_upgrade(struct rgpu_conn *tcp, int is_server,
				     struct rgpu_error *e);
int rgpu_verbs_available(char *why, size_t n);

#endif
