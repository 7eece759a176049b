/* TRANSPORT: a session moves from the socket it began on to a faster
 * carrier, answered on the old one first, then both ends switch with
 * nothing in flight.  Kind 1: InfiniBand verbs (lib/transport_verbs.c).
 * Kind 2: same host, calls through shared-memory queues with a doorbell
 * (lib/transport_shmq.c). */
#include "config.h"
#include "log.h"
#include "rgpud.h"
#include "session.h"
#include "shm.h"
#include "transport.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* A whole number of microseconds from the environment (0 to 100000),
 * def when unset or bad (a bad value is logged). */
static unsigned env_us(const char *name, const char *var, unsigned def)
{
	const char *e = getenv(var);
	if (!e || !*e)
		return def;
	char *end;
	errno = 0;
	unsigned long v = strtoul(e, &end, 10);
	if (errno || *end || *e < '0' || *e > '9' || v > 100000) {
		log_warn("%s: %s=%s: not a whole number of microseconds from 0 to 100000; using %u",
			 name, var, e, def);
		return def;
	}
	return (unsigned)v;
}

/* RGPUD_SPIN_US: how long a session's thread spins for the next call
 * before it sleeps on the socket (default 100; 0 sleeps at once, a
 * doorbell then wakes it for every call); over a socket, after a sync
 * answered at once (session.c). */
unsigned server_spin_us(const char *name)
{
	return env_us(name, "RGPUD_SPIN_US", 100);
}

/* RGPUD_BURST_SPIN_US: over a socket, how long the thread spins for more
 * of a burst of calls that need no reply (launches) when it has served
 * what came (session.c). */
unsigned server_burst_spin_us(const char *name)
{
	return env_us(name, "RGPUD_BURST_SPIN_US", RGPUD_BURST_SPIN_DEFAULT);
}

static int shmq_upgrade(struct session *s, const struct rgpu_hdr *h, uint32_t fd, uint64_t ring,
			struct wbuf *out)
{
	int pid;
	unsigned uid;
	char err[256];
	void *mem;
	if (rgpu_unix_peer(s->conn, &pid, &uid) < 0) {
		put_str(out, "not on this host");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (s->conn->tp->under) {
		put_str(out, "the session is on shared-memory queues already");
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (s->in_len != s->in_off) {
		put_str(out, "requests are in flight");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (ring > RGPU_SHMQ_RING_MAX) {
		put_str(out, "queues too large");
		return CUDA_ERROR_INVALID_VALUE;
	}
	int mfd = shm_client_fd(s, fd, rgpu_shmq_size((size_t)ring));
	if (mfd < 0) {
		put_str(out, "cannot open the client's queue memory");
		return CUDA_ERROR_INVALID_VALUE;
	}
	int rc = rgpu_shmq_map(mfd, (size_t)ring, &mem, err, sizeof(err));
	close(mfd);
	if (rc < 0) {
		log_warn("%s: calls stay on the socket: %s", s->name, err);
		put_str(out, err);
		return CUDA_ERROR_INVALID_VALUE;
	}
	struct rgpu_conn *q = rgpu_shmq_wrap(s->conn, mem, (size_t)ring, 1, s->spin_us);
	if (!q) {
		munmap(mem, rgpu_shmq_size((size_t)ring));
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	/* the answer goes on the socket; the client switches once it has it */
	int sent = session_send_reply(s, h, 0, 0, NULL, 0);
	s->conn = q; /* owns the socket now, also if that send failed */
	if (sent < 0)
		return OP_DROP;
	log_debug("%s: calls through shared memory (%llu-byte queues)", s->name,
		  (unsigned long long)ring);
	return OP_REPLIED;
}

int op_transport(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint32_t kind = get_u32(r);
	if (kind == 2) {
		uint32_t fd = get_u32(r);
		uint64_t ring = get_u64(r);
		if (!rd_done(r))
			return OP_DROP;
		return shmq_upgrade(s, h, fd, ring, out);
	}
	if (!rd_done(r))
		return OP_DROP;
	const char *why = "unknown transport";
#ifdef HAVE_VERBS
	char buf[256];
	const char *mode = getenv("RGPU_TRANSPORT");
	if (kind == 1 && mode && !strcmp(mode, "tcp"))
		why = "this server runs with RGPU_TRANSPORT=tcp";
	else if (kind == 1 && !rgpu_verbs_available(buf, sizeof(buf)))
		why = buf;
	else if (kind == 1 && s->in_len != s->in_off)
		why = "requests are in flight";
	else if (kind == 1) {
		if (session_send_reply(s, h, 0, 0, NULL, 0) < 0)
			return OP_DROP;
		struct rgpu_error err;
		struct rgpu_conn *v = rgpu_verbs_upgrade(s->conn, 1, &err);
		if (v) {
			s->conn = v;
			log_info("%s: now on InfiniBand verbs", s->name);
		} else {
			log_warn("%s: staying on TCP: %s", s->name, err.text);
		}
		return OP_REPLIED;
	}
#endif
	put_str(out, why);
	return CUDA_ERROR_NOT_SUPPORTED;
}
