#include "gate.h"
#include "log.h"
#include "metrics.h"
#include "session.h"
#include "sched/scheduler.h"
#include "wire.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum gate_op { G_DEVICE = 1, G_CHARGE, G_USAGE, G_ADMIN, G_REFUND };

struct gate_req {
	uint32_t op, gpu, admin_op, len;
	uint64_t bytes; /* G_CHARGE, G_REFUND */
};

/* A reply is this header and len bytes, cut into messages of at most
 * GATE_MSG bytes (a LEASE_LIST of many leases does not fit one). */
struct gate_rep {
	int32_t rc;
	uint32_t len;
	uint64_t limit, used;
};

#define GATE_MSG (64 * 1024)
#define GATE_REQ_MAX GATE_MSG
#define GATE_REPLY_MAX (RGPU_MAX_PAYLOAD - 4096)

static int ctl = -1;

void gate_attach(int fd) { ctl = fd; }

/* One exchange; the reply payload goes to *buf (grown as needed, at most
 * GATE_REPLY_MAX) or, with buf NULL, is discarded. */
static int gate_call(struct gate_req *q, const void *payload, struct gate_rep *p,
		     uint8_t **buf, size_t *cap)
{
	static __thread uint8_t *msg;
	if (!msg && !(msg = malloc(GATE_MSG)))
		return -1;
	if (q->len > GATE_REQ_MAX - sizeof(*q))
		return -1;
	memcpy(msg, q, sizeof(*q));
	if (q->len)
		memcpy(msg + sizeof(*q), payload, q->len);
	/* a signal (a timer, a debugger) must not end the session */
	ssize_t n;
	while ((n = send(ctl, msg, sizeof(*q) + q->len, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	if (n < 0)
		return -1;
	while ((n = recv(ctl, msg, GATE_MSG, 0)) < 0 && errno == EINTR)
		;
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
	return p.rc;
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
static int send_reply(int fd, uint8_t *msg, struct gate_rep *p, const struct wbuf *out)
{
	p->len = (uint32_t)out->len;
	size_t first = out->len < GATE_MSG - sizeof(*p) ? out->len : GATE_MSG - sizeof(*p);
	memcpy(msg, p, sizeof(*p));
	if (first)
		memcpy(msg + sizeof(*p), out->data, first);
	if (send(fd, msg, sizeof(*p) + first, MSG_NOSIGNAL) < 0)
		return -1;
	for (size_t off = first; off < out->len;) {
		size_t k = out->len - off < GATE_MSG ? out->len - off : GATE_MSG;
		if (send(fd, out->data + off, k, MSG_NOSIGNAL) < 0)
			return -1;
		off += k;
	}
	return 0;
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
	while (msg) {
		ssize_t n = recv(fd, msg, GATE_MSG, 0);
		if (n <= 0) {
			if (n < 0 && errno == EINTR)
				continue;
			break;
		}
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
			if (p.rc == 0)
				charged[q.gpu] += q.bytes;
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
			}
			break;
		case G_USAGE:
			rgpud_access_usage(who, q.gpu, &p.limit, &p.used);
			break;
		case G_ADMIN: {
			struct rd r;
			rd_init(&r, msg + sizeof(q), q.len);
			int rc = sched_parent_op(who, worker, q.admin_op, &r, &out);
			if (rc == -1)
				rc = rgpud_access_admin_op(who, q.admin_op, &r, &out);
			p.rc = rc == -1 ? OP_DROP : rc;
			break;
		}
		default:
			p.rc = -1;
		}
		if (out.oom || out.len > GATE_REPLY_MAX)
			break;
		if (send_reply(fd, msg, &p, &out) < 0)
			break;
	}
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
	metrics_session_close(ms);
}
