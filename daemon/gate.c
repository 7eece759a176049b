#include "gate.h"
#include "log.h"
#include "metrics.h"
#include "session.h"
#include "wire.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum gate_op { G_DEVICE = 1, G_CHARGE, G_USAGE, G_ADMIN };

struct gate_req {
	uint32_t op, gpu, admin_op, len;
	int64_t delta;
};

struct gate_rep {
	int32_t rc;
	uint32_t len;
	uint64_t limit, used;
};

#define GATE_MAX (256 * 1024)

static int ctl = -1;

void gate_attach(int fd) { ctl = fd; }

/* One exchange; the reply payload (at most cap bytes) goes to buf. */
static int gate_call(struct gate_req *q, const void *payload, struct gate_rep *p, void *buf, size_t cap)
{
	static __thread uint8_t *msg;
	if (!msg && !(msg = malloc(GATE_MAX)))
		return -1;
	if (q->len > GATE_MAX - sizeof(*q))
		return -1;
	memcpy(msg, q, sizeof(*q));
	if (q->len)
		memcpy(msg + sizeof(*q), payload, q->len);
	if (send(ctl, msg, sizeof(*q) + q->len, MSG_NOSIGNAL) < 0)
		return -1;
	ssize_t n = recv(ctl, msg, GATE_MAX, 0);
	if (n < (ssize_t)sizeof(*p))
		return -1;
	memcpy(p, msg, sizeof(*p));
	if (p->len > (size_t)n - sizeof(*p))
		return -1;
	size_t k = p->len < cap ? p->len : cap;
	if (k)
		memcpy(buf, msg + sizeof(*p), k);
	p->len = (uint32_t)k;
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
	if (gate_call(&q, NULL, &p, why, whylen ? whylen - 1 : 0) < 0)
		lost();
	if (whylen)
		why[p.len] = '\0';
	*limit = p.limit;
	return p.rc;
}

int gate_charge(unsigned gpu, int64_t delta)
{
	struct gate_req q = { .op = G_CHARGE, .gpu = gpu, .delta = delta };
	struct gate_rep p;
	if (gate_call(&q, NULL, &p, NULL, 0) < 0)
		lost();
	return p.rc;
}

void gate_usage(unsigned gpu, uint64_t *limit, uint64_t *used)
{
	struct gate_req q = { .op = G_USAGE, .gpu = gpu };
	struct gate_rep p;
	if (gate_call(&q, NULL, &p, NULL, 0) < 0)
		lost();
	*limit = p.limit;
	*used = p.used;
}

int gate_admin(unsigned op, struct rd *r, struct wbuf *out)
{
	struct gate_req q = { .op = G_ADMIN, .admin_op = op, .len = (uint32_t)r->left };
	struct gate_rep p;
	static __thread uint8_t *buf;
	if (!buf && !(buf = malloc(GATE_MAX)))
		return OP_DROP;
	if (r->left > GATE_MAX - sizeof(q))
		return OP_DROP;
	if (gate_call(&q, r->p, &p, buf, GATE_MAX) < 0)
		lost();
	put_raw(out, buf, p.len);
	return p.rc;
}

void gate_serve(int fd, const struct rgpud_principal *who, const char *name)
{
	uint8_t *msg = malloc(GATE_MAX);
	int64_t charged[RGPUD_MAX_GPUS] = { 0 };
	struct wbuf out;
	wbuf_init(&out);
	struct metrics_session *ms = metrics_session_open(who);
	while (msg) {
		ssize_t n = recv(fd, msg, GATE_MAX, 0);
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
			else
				metrics_session_gpu(ms, q.gpu);
			put_raw(&out, why, strlen(why));
			break;
		case G_CHARGE:
			p.rc = rgpud_access_charge(who, q.gpu, q.delta);
			if (p.rc == 0)
				charged[q.gpu] += q.delta;
			if (p.rc)
				metrics_refused("quota");
			else if (q.delta > 0)
				metrics_session_charge(ms, q.gpu, (uint64_t)q.delta);
			else if (q.delta > INT64_MIN)
				metrics_session_refund(ms, q.gpu, (uint64_t)-q.delta);
			break;
		case G_USAGE:
			rgpud_access_usage(who, q.gpu, &p.limit, &p.used);
			break;
		case G_ADMIN: {
			struct rd r;
			rd_init(&r, msg + sizeof(q), q.len);
			int rc = rgpud_access_admin_op(who, q.admin_op, &r, &out);
			p.rc = rc == -1 ? OP_DROP : rc;
			break;
		}
		default:
			p.rc = -1;
		}
		if (out.oom || out.len > GATE_MAX - sizeof(p))
			break;
		p.len = (uint32_t)out.len;
		memcpy(msg, &p, sizeof(p));
		if (out.len)
			memcpy(msg + sizeof(p), out.data, out.len);
		if (send(fd, msg, sizeof(p) + out.len, MSG_NOSIGNAL) < 0)
			break;
	}
	free(msg);
	wbuf_free(&out);
	/* the worker is gone: whatever it did not give back is freed with it */
	for (unsigned g = 0; g < RGPUD_MAX_GPUS; g++) {
		if (charged[g] > 0) {
			log_info("%s: refunding %lld bytes on GPU %u", name, (long long)charged[g], g);
			rgpud_access_charge(who, g, -charged[g]);
		}
	}
	metrics_session_close(ms);
}
