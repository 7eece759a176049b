#include "gate.h"
#include "rgpud.h"
#include "migrate/migrate.h"
#include "proto.h"
#include "log.h"
#include "mem/mem.h"
#include "metrics.h"
#include "session.h"
#include "sched/scheduler.h"
#include "share.h"
#include "wire.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* G_SHARE_*: shareable physical memory (share.h); a file descriptor
 * travels with the request (PUT) or the reply (GET) as SCM_RIGHTS.
 * G_MEM: the memory manager (mem/arbiter.c).  G_PARK: a restored session
 * waits for its client (migrate.h). */
enum gate_op { G_DEVICE = 1, G_CHARGE, G_USAGE, G_ADMIN, G_REFUND, G_SHARE_PUT, G_SHARE_GET,
	       G_SHARE_DROP, G_MEM, G_PARK };

struct gate_req {
	uint32_t op, gpu, admin_op, len;
	uint64_t bytes; /* G_CHARGE, G_REFUND; G_SHARE_PUT: the size */
	uint8_t token[16]; /* G_SHARE_GET, G_SHARE_DROP */
};

/* A reply is this header and len bytes, cut into messages of at most
 * GATE_MSG bytes (a LEASE_LIST of many leases does not fit one). */
struct gate_rep {
	int32_t rc;
	uint32_t len;
	uint64_t limit, used; /* G_SHARE_GET: gpu, size */
	uint8_t token[16];    /* G_SHARE_PUT */
};

#define GATE_MSG (64 * 1024)
#define GATE_REQ_MAX GATE_MSG
#define GATE_REPLY_MAX (RGPU_MAX_PAYLOAD - 4096)

static int ctl = -1;

void gate_attach(int fd) { ctl = fd; }

int gate_ctl_fd(void) { return ctl; }

/* One exchange; the reply payload goes to *buf (grown as needed, at most
 * GATE_REPLY_MAX) or, with buf NULL, is discarded. */
/* One message with a file descriptor attached (fd >= 0) or received
 * (*fd_in, -1 when none came). */
static ssize_t send_fd(int sock, const void *m, size_t len, int fd)
{
	struct iovec iov = { (void *)m, len };
	union {
		char b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (fd >= 0) {
		memset(&u, 0, sizeof(u));
		mh.msg_control = u.b;
		mh.msg_controllen = sizeof(u.b);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	ssize_t n;
	while ((n = sendmsg(sock, &mh, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	return n;
}

static ssize_t recv_fd(int sock, void *m, size_t cap, int *fd_in)
{
	struct iovec iov = { m, cap };
	union {
		char b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b,
			     .msg_controllen = sizeof(u.b) };
	ssize_t n;
	*fd_in = -1;
	while ((n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
		;
	if (n < 0)
		return n;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
		    c->cmsg_len == CMSG_LEN(sizeof(int))) {
			int fd;
			memcpy(&fd, CMSG_DATA(c), sizeof(int));
			if (*fd_in >= 0)
				close(fd);
			else
				*fd_in = fd;
		}
	return n;
}

static int gate_call_fd(struct gate_req *q, const void *payload, struct gate_rep *p,
			uint8_t **buf, size_t *cap, int fd_out, int *fd_in);

static int gate_call(struct gate_req *q, const void *payload, struct gate_rep *p,
		     uint8_t **buf, size_t *cap)
{
	return gate_call_fd(q, payload, p, buf, cap, -1, NULL);
}

static __thread uint8_t *gate_msg;

/* A request's half of an exchange with the parent (gate_recv is the
 * other): 0, or -1. */
static int gate_send(struct gate_req *q, const void *payload, int fd_out)
{
	uint8_t *msg = gate_msg;
	if (!msg && !(msg = gate_msg = malloc(GATE_MSG)))
		return -1;
	if (q->len > GATE_REQ_MAX - sizeof(*q))
		return -1;
	memcpy(msg, q, sizeof(*q));
	if (q->len)
		memcpy(msg + sizeof(*q), payload, q->len);
	/* a signal (a timer, a debugger) must not end the session */
	return send_fd(ctl, msg, sizeof(*q) + q->len, fd_out) < 0 ? -1 : 0;
}

static int gate_recv(struct gate_rep *p, uint8_t **buf, size_t *cap, int *fd_in);

static int gate_call_fd(struct gate_req *q, const void *payload, struct gate_rep *p,
			uint8_t **buf, size_t *cap, int fd_out, int *fd_in)
{
	if (gate_send(q, payload, fd_out) < 0)
		return -1;
	return gate_recv(p, buf, cap, fd_in);
}

static int gate_recv(struct gate_rep *p, uint8_t **buf, size_t *cap, int *fd_in)
{
	int got_fd = -1;
	uint8_t *msg = gate_msg;
	ssize_t n;
	if (!msg)
		return -1;
	for (;;) {
		n = recv_fd(ctl, msg, GATE_MSG, &got_fd);
		/* the parent's memory manager asking while we wait: busy */
		int32_t magic;
		if (n == (ssize_t)sizeof(struct mem_parent_msg) &&
		    (memcpy(&magic, msg, sizeof(magic)), magic == MEM_PARENT_MAGIC)) {
			if (got_fd >= 0)
				close(got_fd);
			got_fd = -1;
			mem_ctl_busy(msg, (size_t)n);
			continue;
		}
		break;
	}
	if (fd_in)
		*fd_in = got_fd;
	else if (got_fd >= 0)
		close(got_fd);
	if (n < (ssize_t)sizeof(*p))
		return -1;
	memcpy(p, msg, sizeof(*p));
	if (p->len > GATE_REPLY_MAX)
		return -1;
	if (buf && p->len > *cap) {
		uint8_t *nb = realloc(*buf, p->len);
		if (!nb)
			return -1;
		*buf = nb;
		*cap = p->len;
	}
	size_t got = (size_t)n - sizeof(*p);
	if (got > p->len)
		return -1;
	if (buf && got)
		memcpy(*buf, msg + sizeof(*p), got);
	while (got < p->len) {
		n = recv(ctl, msg, GATE_MSG, 0);
		if (n <= 0 || (size_t)n > p->len - got)
			return -1;
		if (buf)
			memcpy(*buf + got, msg, (size_t)n);
		got += (size_t)n;
	}
	return 0;
}

static void lost(void)
{
	/* without the parent nothing can be accounted: stop serving */
	log_err("lost the rgpud parent process; ending the session");
	_exit(3);
}

/* per GPU, what the parent charges a context (set on admission) */
static uint64_t ctx_cost[RGPUD_MAX_GPUS];

int gate_device(unsigned gpu, uint64_t *limit, char *why, size_t whylen)
{
	struct gate_req q = { .op = G_DEVICE, .gpu = gpu };
	struct gate_rep p;
	static __thread uint8_t *buf;
	static __thread size_t cap;
	if (gate_call(&q, NULL, &p, &buf, &cap) < 0)
		lost();
	if (whylen) {
		size_t k = p.len < whylen - 1 ? p.len : whylen - 1;
		if (k)
			memcpy(why, buf, k);
		why[k] = '\0';
	}
	*limit = p.limit;
	if (p.rc == 0 && gpu < RGPUD_MAX_GPUS)
		ctx_cost[gpu] = p.used;
	return p.rc;
}

uint64_t gate_ctx_cost(unsigned gpu)
{
	return gpu < RGPUD_MAX_GPUS ? ctx_cost[gpu] : 0;
}

/* a charge or a refund of bytes on gpu, answered by the parent */
static int gate_bytes(int op, unsigned gpu, uint64_t bytes)
{
	struct gate_req q = { .op = op, .gpu = gpu, .bytes = bytes };
	struct gate_rep p;
	if (!bytes)
		return 0;
	if (gate_call(&q, NULL, &p, NULL, NULL) < 0)
		lost();
	return p.rc;
}

int gate_charge_bytes(unsigned gpu, uint64_t bytes) { return gate_bytes(G_CHARGE, gpu, bytes); }

int gate_refund_bytes(unsigned gpu, uint64_t bytes) { return gate_bytes(G_REFUND, gpu, bytes); }

int gate_charge(unsigned gpu, int64_t delta)
{
	if (delta >= 0)
		return gate_charge_bytes(gpu, (uint64_t)delta);
	/* a size cast from u64 that came out negative lands here: the parent
	 * refuses a refund of more than this worker was charged */
	return gate_refund_bytes(gpu, delta == INT64_MIN ? (uint64_t)INT64_MAX + 1
							 : (uint64_t)-delta);
}

void gate_usage(unsigned gpu, uint64_t *limit, uint64_t *used)
{
	struct gate_req q = { .op = G_USAGE, .gpu = gpu };
	struct gate_rep p;
	if (gate_call(&q, NULL, &p, NULL, NULL) < 0)
		lost();
	*limit = p.limit;
	*used = p.used;
}

int gate_share_put(int fd, unsigned gpu, uint64_t size, uint8_t token[16])
{
	struct gate_req q = { .op = G_SHARE_PUT, .gpu = gpu, .bytes = size };
	struct gate_rep p;
	if (gate_call_fd(&q, NULL, &p, NULL, NULL, fd, NULL) < 0)
		lost();
	memcpy(token, p.token, 16);
	return p.rc;
}

int gate_share_export(CUmemGenericAllocationHandle h, unsigned gpu, uint64_t size,
		      uint8_t token[16], int *done)
{
	if (*done)
		return CUDA_SUCCESS;
	const struct rgpud_driver *d = &rgpud_server.drv;
	if (!d->cuMemExportToShareableHandle)
		return CUDA_ERROR_NOT_SUPPORTED;
	int fd = -1;
	int rc = d->cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	if (rc)
		return rc;
	/* the parent keeps a duplicate */
	rc = gate_share_put(fd, gpu, size, token);
	close(fd);
	if (rc)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*done = 1;
	return CUDA_SUCCESS;
}

int gate_share_get(const uint8_t token[16], int *fd, unsigned *gpu, uint64_t *size)
{
	struct gate_req q = { .op = G_SHARE_GET };
	struct gate_rep p;
	memcpy(q.token, token, 16);
	if (gate_call_fd(&q, NULL, &p, NULL, NULL, -1, fd) < 0)
		lost();
	if (p.rc) {
		if (*fd >= 0)
			close(*fd);
		*fd = -1;
		return p.rc;
	}
	if (*fd < 0)
		return -1;
	*gpu = (unsigned)p.limit;
	*size = p.used;
	return 0;
}

void gate_share_drop(const uint8_t token[16])
{
	struct gate_req q = { .op = G_SHARE_DROP };
	struct gate_rep p;
	memcpy(q.token, token, 16);
	if (gate_call(&q, NULL, &p, NULL, NULL) < 0)
		lost();
}

int gate_mem_call(unsigned sub, unsigned gpu, const void *payload, uint32_t len)
{
	struct gate_req q = { .op = G_MEM, .gpu = gpu, .admin_op = sub, .len = len };
	struct gate_rep p;
	if (gate_call(&q, payload, &p, NULL, NULL) < 0)
		lost();
	return p.rc;
}

int gate_mem_send(unsigned sub, unsigned gpu, const void *payload, uint32_t len)
{
	struct gate_req q = { .op = G_MEM, .gpu = gpu, .admin_op = sub, .len = len };
	uint8_t m[sizeof(q) + 256];
	if (len > 256)
		return -1;
	memcpy(m, &q, sizeof(q));
	memcpy(m + sizeof(q), payload, len);
	ssize_t n;
	while ((n = send(ctl, m, sizeof(q) + len, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	return n < 0 ? -1 : 0;
}

int gate_admin(unsigned op, struct rd *r, struct wbuf *out)
{
	struct gate_req q = { .op = G_ADMIN, .admin_op = op, .len = (uint32_t)r->left };
	struct gate_rep p;
	static __thread uint8_t *buf;
	static __thread size_t cap;
	if (r->left > GATE_REQ_MAX - sizeof(q))
		return OP_DROP;
	if (gate_call(&q, r->p, &p, &buf, &cap) < 0)
		lost();
	put_raw(out, buf, p.len);
	return p.rc;
}

/* Sends the reply header and out's bytes in GATE_MSG pieces. */
static int send_reply(int fd, uint8_t *msg, struct gate_rep *p, const struct wbuf *out, int with_fd)
{
	p->len = (uint32_t)out->len;
	size_t first = out->len < GATE_MSG - sizeof(*p) ? out->len : GATE_MSG - sizeof(*p);
	memcpy(msg, p, sizeof(*p));
	if (first)
		memcpy(msg + sizeof(*p), out->data, first);
	if (send_fd(fd, msg, sizeof(*p) + first, with_fd) < 0)
		return -1;
	for (size_t off = first; off < out->len;) {
		size_t k = out->len - off < GATE_MSG ? out->len - off : GATE_MSG;
		if (send(fd, out->data + off, k, MSG_NOSIGNAL) < 0)
			return -1;
		off += k;
	}
	return 0;
}

int gate_park_begin(const uint8_t token[MIGRATE_TOKEN_LEN], unsigned seconds)
{
	struct gate_req q = { .op = G_PARK, .len = MIGRATE_TOKEN_LEN,
			      .bytes = seconds ? seconds : MIGRATE_PARK_S };
	return gate_send(&q, token, -1);
}

int gate_park_end(void)
{
	/* an exchange like any other: the memory manager's questions that come
	 * while the parent waits for the client are answered meanwhile */
	struct gate_rep p;
	int fd = -1;
	if (gate_recv(&p, NULL, NULL, &fd) < 0)
		lost();
	if (p.rc && fd >= 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

int gate_park(const uint8_t token[MIGRATE_TOKEN_LEN], unsigned seconds)
{
	if (gate_park_begin(token, seconds) < 0)
		lost();
	return gate_park_end();
}

void gate_serve(int fd, const struct rgpud_principal *who, const char *name, pid_t worker)
{
	uint8_t *msg = malloc(GATE_MSG);
	/* what this worker holds, per GPU: it can give back no more than that */
	uint64_t charged[RGPUD_MAX_GPUS] = { 0 };
	struct wbuf out;
	wbuf_init(&out);
	struct metrics_session *ms = metrics_session_open(who);
	/* listed under the uid it runs as when no credential names one (the
	 * kernel's on the same-host socket, nobody over TCP) */
	unsigned uid = who->uid;
	if (!who->authenticated && sched_parent_run_uid(worker, &uid) < 0)
		uid = who->uid;
	metrics_session_worker(ms, (int)worker, uid);
	/* the memory manager's record of this worker (mem/arbiter.c) */
	struct mem_worker *mw = mem_parent_open(fd, ms);
	while (msg) {
		int fd_in = -1, fd_out = -1;
		ssize_t n = recv_fd(fd, msg, GATE_MSG, &fd_in);
		if (n <= 0)
			break;
		struct gate_req q;
		if ((size_t)n < sizeof(q))
			break;
		memcpy(&q, msg, sizeof(q));
		if (q.len != (size_t)n - sizeof(q) || (q.op != G_ADMIN && q.gpu >= RGPUD_MAX_GPUS))
			break;
		struct gate_rep p = { 0 };
		char why[256] = "";
		wbuf_reset(&out);
		switch (q.op) {
		case G_DEVICE:
			p.rc = rgpud_access_device(who, q.gpu, &p.limit, why, sizeof(why));
			/* what each context costs the session (the lease's reserve) */
			p.used = rgpud_access_ctx_cost();
			if (p.rc)
				metrics_refused("gpu");
			else {
				metrics_session_gpu(ms, q.gpu);
				sched_parent_admit(worker, who, q.gpu);
			}
			put_raw(&out, why, strlen(why));
			break;
		case G_CHARGE:
			if (q.bytes > UINT64_MAX - charged[q.gpu])
				p.rc = -1;
			else
				p.rc = rgpud_access_charge(who, q.gpu, q.bytes);
			if (p.rc == 0) {
				charged[q.gpu] += q.bytes;
				mem_parent_charged(mw, q.gpu, q.bytes, 0);
			}
			if (p.rc)
				metrics_refused("quota");
			else
				metrics_session_charge(ms, q.gpu, q.bytes);
			break;
		case G_REFUND:
			if (q.bytes > charged[q.gpu]) {
				log_warn("%s: refund of %llu bytes on GPU %u exceeds the %llu it holds: "
					 "refused", name, (unsigned long long)q.bytes, q.gpu,
					 (unsigned long long)charged[q.gpu]);
				p.rc = -1;
				break;
			}
			p.rc = rgpud_access_refund(who, q.gpu, q.bytes);
			if (p.rc == 0) {
				charged[q.gpu] -= q.bytes;
				metrics_session_refund(ms, q.gpu, q.bytes);
				mem_parent_charged(mw, q.gpu, q.bytes, 1);
			}
			break;
		case G_USAGE:
			rgpud_access_usage(who, q.gpu, &p.limit, &p.used);
			break;
		case G_ADMIN: {
			struct rd r;
			rd_init(&r, msg + sizeof(q), q.len);
			int rc;
			if (q.admin_op == RGPU_OP_MIGRATE)
				rc = migrate_parent_order(who, &r, &out);
			else if ((rc = sched_parent_op(who, worker, q.admin_op, &r, &out)) == -1)
				rc = rgpud_access_admin_op(who, q.admin_op, &r, &out);
			p.rc = rc == -1 ? OP_DROP : rc;
			break;
		}
		case G_SHARE_PUT:
			p.rc = share_put(who, msg, fd_in, q.gpu, q.bytes, p.token);
			fd_in = -1; /* kept by the registry (or closed) */
			break;
		case G_SHARE_GET: {
			unsigned gpu = 0;
			p.rc = share_get(who, q.token, &fd_out, &gpu, &p.used);
			p.limit = gpu;
			break;
		}
		case G_SHARE_DROP:
			share_drop(msg, q.token);
			break;
		case G_MEM:
			p.rc = mem_parent_request(mw, q.admin_op, q.gpu, msg + sizeof(q), q.len);
			if (p.rc == MEM_NO_REPLY) {
				if (fd_in >= 0)
					close(fd_in);
				continue;
			}
			break;
		case G_PARK:
			/* a restored session waits for its client (migrate.h),
			 * or a peer copy's source for the destination's worker
			 * (ops_peer_remote.c): the socket goes back with the reply */
			fd_out = migrate_parent_park(who, msg + sizeof(q), q.len, name,
						     q.bytes > MIGRATE_PARK_S ? MIGRATE_PARK_S
									      : (unsigned)q.bytes);
			p.rc = fd_out < 0 ? -1 : 0;
			break;
		default:
			p.rc = -1;
		}
		if (fd_in >= 0)
			close(fd_in);
		if (out.oom || out.len > GATE_REPLY_MAX) {
			if (fd_out >= 0)
				close(fd_out);
			break;
		}
		/* the memory manager sends this worker requests of its own */
		pthread_mutex_t *sl = mem_parent_send_lock(mw);
		if (sl)
			pthread_mutex_lock(sl);
		int sent = send_reply(fd, msg, &p, &out, fd_out);
		if (sl)
			pthread_mutex_unlock(sl);
		if (fd_out >= 0)
			close(fd_out);
		if (sent < 0)
			break;
	}
	share_drop_owner(msg);
	free(msg);
	wbuf_free(&out);
	/* the worker is gone: whatever it did not give back is freed with it */
	for (unsigned g = 0; g < RGPUD_MAX_GPUS; g++) {
		if (charged[g] > 0) {
			log_info("%s: refunding %llu bytes on GPU %u", name,
				 (unsigned long long)charged[g], g);
			rgpud_access_refund(who, g, charged[g]);
		}
	}
	/* its GPU time goes to the metrics before its scheduler slots go */
	for (unsigned g = 0; g < RGPUD_MAX_GPUS; g++) {
		uint64_t ns = sched_parent_attained(worker, g, NULL, NULL, NULL);
		if (ns)
			metrics_session_gpu_time(ms, g, ns);
	}
	sched_parent_release(worker, NULL, 0);
	mem_parent_close(mw);
	metrics_session_close(ms);
}
