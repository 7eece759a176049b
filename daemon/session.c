#include "session.h"
#include "shm.h"
#include "clock.h"
#include "log.h"
#include "gate.h"
#include "rgpud.h"
#include "devout.h"
#include "waiter.h"
#include "mem/pool.h"
#include "appmem.h"
#include "mem/mem.h"
#include "migrate/migrate.h"
#include "migrate/snapshot.h"
#include "opstats.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int session_send_reply(struct session *s, const struct rgpu_hdr *h, uint32_t flags,
		       int32_t status, const void *data, size_t len)
{
	uint8_t st[4];
	uint32_t u = (uint32_t)status;
	st[0] = (uint8_t)u;
	st[1] = (uint8_t)(u >> 8);
	st[2] = (uint8_t)(u >> 16);
	st[3] = (uint8_t)(u >> 24);
	/* status + fields as one part would need a copy; send as three. */
	struct rgpu_hdr rh = { .magic = RGPU_PROTO_MAGIC, .version = RGPU_PROTO_VERSION,
			       .op = h->op, .flags = RGPU_F_REPLY | flags,
			       .len = (uint32_t)(4 + len), .id = h->id };
	uint8_t hb[RGPU_HDR_SIZE];
	rgpu_hdr_encode(&rh, hb);
	struct iovec iov[3] = { { hb, sizeof(hb) }, { st, 4 }, { (void *)data, len } };
	return rgpu_sendv(s->conn, iov, len ? 3 : 2);
}

int session_send_notice(struct session *s, int32_t status, uint64_t handle, uint64_t seq)
{
	struct rgpu_hdr h = { .op = RGPU_OP_EVENT_DONE, .id = 0 };
	uint8_t p[16];
	for (int i = 0; i < 8; i++) {
		p[i] = (uint8_t)(handle >> (8 * i));
		p[8 + i] = (uint8_t)(seq >> (8 * i));
	}
	return session_send_reply(s, &h, 0, status, p, sizeof(p));
}

void session_forward_output(struct session *s, const struct rgpu_hdr *h)
{
	if (!s->out)
		return;
	size_t len;
	char *buf = devout_take(s->out, &len);
	/* frames of 1 MiB: well under the payload limit */
	for (size_t off = 0; off < len;) {
		size_t k = len - off < (1u << 20) ? len - off : (1u << 20);
		if (rgpu_frame_send(s->conn, RGPU_OP_OUTPUT, RGPU_F_REPLY, h->id, buf + off, k, NULL, 0) < 0)
			break;
		off += k;
	}
	free(buf);
}

void session_prepare(struct session *s)
{
	if (s->prepared)
		return;
	s->prepared = 1;
	pthread_mutex_init(&s->send_lock, NULL);
	s->opstats = opstats_open();
	s->spin_us = server_spin_us(s->name);
	s->burst_spin_us = server_burst_spin_us(s->name);
	if (s->out_fd >= 0) {
		s->out = devout_start(s->out_fd);
		if (!s->out)
			log_warn("%s: device printf output will not reach the client (no reader thread)",
				 s->name);
		else
			s->out_fd = -1; /* devout owns it */
	}
}

/* A sync whose work ends within this long is answered on the main loop:
 * handing it to a waiter thread costs a wake-up that took a context sync
 * from 1.0-1.3 to 1.7 TCP round trips (benchmark run 8, H100). */
#define SYNC_SPIN_NS 50000L

int session_capturing(struct session *s, uint64_t ctx)
{
	struct rgpud_driver *d = &s->srv->drv;
	if (!d->cuStreamIsCapturing)
		return 0; /* (optional: the emulated device has no capture) */
	for (uint32_t i = 0; i < s->ht.n; i++) {
		const struct hentry *e = &s->ht.e[i];
		CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
		if (e->kind == HK_STREAM && e->ctx == ctx &&
		    (d->cuStreamIsCapturing(e->obj, &cs) != CUDA_SUCCESS ||
		     cs != CU_STREAM_CAPTURE_STATUS_NONE))
			return 1;
	}
	return 0;
}

/* No stream of the current context has work queued.  Only a hint: the
 * caller still synchronises, inline, when it says so. */
static int ctx_idle(struct session *s)
{
	struct rgpud_driver *d = &s->srv->drv;
	if (d->cuStreamQuery(CU_STREAM_LEGACY) == CUDA_ERROR_NOT_READY ||
	    d->cuStreamQuery(CU_STREAM_PER_THREAD) == CUDA_ERROR_NOT_READY)
		return 0;
	for (uint32_t i = 0; i < s->ht.n; i++) {
		const struct hentry *e = &s->ht.e[i];
		if (e->kind == HK_STREAM && e->ctx == s->cur_ctx &&
		    d->cuStreamQuery(e->obj) == CUDA_ERROR_NOT_READY)
			return 0;
	}
	return 1;
}

/* 1 when what a sync of this kind waits for is done within SYNC_SPIN_NS */
static int settles_soon(struct session *s, enum wait_kind kind, void *obj)
{
	struct rgpud_driver *d = &s->srv->drv;
	/* querying a capturing stream, or the legacy stream beside one,
	 * invalidates the capture: asked once, not on every look */
	if (kind == WAIT_CTX && session_capturing(s, s->cur_ctx))
		return 0;
	uint64_t t0 = rgpu_now_ns();
	for (;;) {
		int busy = 0;
		switch (kind) {
		case WAIT_CTX: busy = !ctx_idle(s); break;
		case WAIT_STREAM: busy = d->cuStreamQuery(obj) == CUDA_ERROR_NOT_READY; break;
		case WAIT_EVENT: busy = d->cuEventQuery(obj) == CUDA_ERROR_NOT_READY; break;
		}
		if (!busy)
			return 1;
		if (rgpu_now_ns() - t0 > SYNC_SPIN_NS)
			return 0;
	}
}

int session_wait_elsewhere(struct session *s, const struct rgpu_hdr *h, enum wait_kind kind,
			   void *ctx, void *obj)
{
	if (h->flags & RGPU_F_NOREPLY)
		return -1;
	if (settles_soon(s, kind, obj))
		return -1; /* the caller synchronises here, at once */
	/* this sync reports the deferred error (it covers the failed call) */
	if (waiter_post(s, h, kind, (CUcontext)ctx, obj, s->deferred) < 0)
		return -1;
	s->deferred = 0;
	s->pools_sync_due = 1;
	return 0;
}

int session_enter_ctx(struct session *s, uint64_t ctx, struct ctx_state **cs)
{
	struct hentry *e = ht_get(&s->ht, ctx, HK_CTX);
	if (!e)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (s->cur_ctx != ctx) {
		int rc = s->srv->drv.cuCtxSetCurrent(e->obj);
		if (rc)
			return rc;
		s->cur_ctx = ctx;
	}
	if (cs)
		*cs = e->extra;
	return CUDA_SUCCESS;
}

void req_ids(struct rd *r, struct req *q, int shape)
{
	*q = (struct req){ 0 };
	if (shape != REQ_OBJ)
		q->ctx = get_u64(r);
	if (shape != REQ_CTX)
		q->id = get_u64(r);
}

struct hentry *req_obj(struct session *s, const struct req *q, uint64_t id, enum hkind kind)
{
	struct hentry *e = ht_get(&s->ht, id, kind);
	int ctxfree = kind == HK_LIBRARY || kind == HK_KERNEL;
	if (!e || (!ctxfree && e->ctx != q->ctx))
		return NULL;
	return e;
}

int req_enter(struct session *s, struct rd *r, struct req *q, enum hkind kind)
{
	if (!rd_done(r))
		return OP_DROP;
	if (q->ctx || (kind != HK_LIBRARY && kind != HK_KERNEL)) {
		int rc = session_enter_ctx(s, q->ctx, &q->cs);
		if (rc)
			return rc;
	}
	if (kind != HK_FREE && !(q->e = req_obj(s, q, q->id, kind)))
		return CUDA_ERROR_INVALID_HANDLE;
	return CUDA_SUCCESS;
}

void *session_ctx_obj(struct session *s)
{
	struct hentry *e = ht_get(&s->ht, s->cur_ctx, HK_CTX);
	return e ? e->obj : NULL;
}

int req_stream(struct session *s, uint64_t id, CUstream *out)
{
	return session_stream(s, id, out);
}

int session_ctx_drop(struct session *s, CUcontext ctx, struct ctx_state *cs)
{
	struct rgpud_driver *d = &rgpud_server.drv;
	if (cs && cs->green)
		return d->cuGreenCtxDestroy ? d->cuGreenCtxDestroy(cs->green) : CUDA_ERROR_NOT_SUPPORTED;
	if (!cs || !cs->primary)
		return d->cuCtxDestroy_v2(ctx);
	/* the last reference: the driver resets it, freeing what it held */
	CUdevice cd;
	int rc = d->cuDeviceGet(&cd, (int)cs->dev);
	if (!rc)
		rc = d->cuDevicePrimaryCtxRelease_v2(cd);
	if (cs->dev < 64)
		s->primary_held &= ~(1ull << cs->dev);
	cs->primary = 0;
	return rc;
}

int session_stream(struct session *s, uint64_t id, CUstream *out)
{
	/* The driver's special stream handles pass through unchanged. */
	int legacy = id == 0 || id == (uint64_t)(uintptr_t)CU_STREAM_LEGACY;
	if (legacy || id == (uint64_t)(uintptr_t)CU_STREAM_PER_THREAD) {
		*out = (CUstream)(uintptr_t)id;
	} else {
		struct hentry *e = ht_get(&s->ht, id, HK_STREAM);
		if (!e || e->ctx != s->cur_ctx)
			return CUDA_ERROR_INVALID_HANDLE;
		*out = e->obj;
	}
	/* work on a stream being captured builds a graph: the journal keeps
	 * it (a capture's joined streams are known to the driver only; the
	 * legacy stream is never captured) */
	if (s->captures && !s->req_capture && !legacy)
		s->req_capture = session_capture_id(*out);
	return CUDA_SUCCESS;
}

uint64_t session_capture_id(CUstream st)
{
	struct rgpud_driver *d = &rgpud_server.drv;
	CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
	cuuint64_t id = 0;
	if (d->cuStreamGetCaptureInfo_v3) {
		if (d->cuStreamGetCaptureInfo_v3(st, &cs, &id, NULL, NULL, NULL, NULL))
			return 0;
	} else if (!d->cuStreamIsCapturing || d->cuStreamIsCapturing(st, &cs)) {
		return 0;
	}
	if (cs == CU_STREAM_CAPTURE_STATUS_NONE)
		return 0;
	return id ? id : 1;
}

/* index of the last allocation with dptr <= p, or -1 */
static ssize_t alloc_find(const struct session *s, uint64_t p)
{
	size_t lo = 0, hi = s->nalloc;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (s->allocs[mid].dptr <= p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (ssize_t)lo - 1;
}

int session_owns_range(struct session *s, uint64_t p, uint64_t n)
{
	ssize_t i = alloc_find(s, p);
	if (i >= 0) {
		const struct alloc *a = &s->allocs[i];
		if (p - a->dptr <= a->size && n <= a->size - (p - a->dptr))
			return 1;
	}
	return appmem_owns_range(s, p, n) || shm_owns_live(s, p, n);
}

int session_gmem_note(struct session *s, uint64_t dptr)
{
	if (session_gmem_has(s, dptr))
		return 0;
	if (s->ngmem == s->capgmem) {
		size_t cap = s->capgmem ? s->capgmem * 2 : 16;
		uint64_t *g = realloc(s->gmem, cap * sizeof(*g));
		if (!g)
			return -1;
		s->gmem = g;
		s->capgmem = cap;
	}
	s->gmem[s->ngmem++] = dptr;
	return 0;
}

int session_gmem_has(const struct session *s, uint64_t dptr)
{
	for (size_t i = 0; i < s->ngmem; i++)
		if (s->gmem[i] == dptr)
			return 1;
	return 0;
}

int session_alloc_add(struct session *s, uint64_t dptr, uint64_t size, uint64_t ctx,
		      uint64_t module, unsigned dev)
{
	ssize_t at = alloc_find(s, dptr);
	if (at >= 0 && s->allocs[at].dptr == dptr)
		return 0; /* a global looked up twice */
	if (s->nalloc == s->capalloc) {
		size_t cap = s->capalloc ? s->capalloc * 2 : 64;
		struct alloc *a = realloc(s->allocs, cap * sizeof(*a));
		if (!a)
			return -1;
		s->allocs = a;
		s->capalloc = cap;
	}
	size_t i = (size_t)(alloc_find(s, dptr) + 1);
	memmove(&s->allocs[i + 1], &s->allocs[i], (s->nalloc - i) * sizeof(*s->allocs));
	s->allocs[i] = (struct alloc){ dptr, size, ctx, module, dev };
	s->nalloc++;
	return 1;
}

uint64_t session_ctx_charged(const struct ctx_state *cs)
{
	uint64_t n = cs->cost;
	for (int i = 0; i < LIM_N; i++)
		n += cs->lim_charged[i];
	return n;
}

void session_alloc_drop_module(struct session *s, uint64_t module)
{
	size_t j = 0;
	for (size_t i = 0; i < s->nalloc; i++) {
		if (s->allocs[i].module != module)
			s->allocs[j++] = s->allocs[i];
		else
			gate_charge(s->allocs[i].dev, -(int64_t)s->allocs[i].size);
	}
	s->nalloc = j;
}

struct alloc *session_alloc_get(struct session *s, uint64_t dptr)
{
	ssize_t i = alloc_find(s, dptr);
	return i >= 0 && s->allocs[i].dptr == dptr ? &s->allocs[i] : NULL;
}

struct alloc session_alloc_del(struct session *s, uint64_t dptr)
{
	struct alloc none = { 0, 0, 0, 0, 0 };
	ssize_t i = alloc_find(s, dptr);
	if (i < 0 || s->allocs[i].dptr != dptr)
		return none;
	struct alloc a = s->allocs[i];
	memmove(&s->allocs[i], &s->allocs[i + 1], (s->nalloc - (size_t)i - 1) * sizeof(*s->allocs));
	s->nalloc--;
	return a;
}

/* Frees everything the session created.  Destroying a context frees its
 * memory, modules, streams and events in the driver; quotas are refunded
 * per allocation. */
static void session_cleanup(struct session *s)
{
	struct rgpud_driver *d = &s->srv->drv;
	uint64_t freed = 0;
	migrate_ahead_drop(s); /* a move under way ends with the session */
	opstats_close(s->opstats, s->name);
	s->opstats = NULL;
	/* streams held for the client's host functions go on (no client) */
	hostfn_cleanup(s);
	/* no wait may outlive the contexts it waits in */
	waiter_stop(s);
	for (size_t i = 0; i < s->nalloc; i++) {
		/* memory and the globals looked up (both charged) */
		gate_charge(s->allocs[i].dev, -(int64_t)s->allocs[i].size);
		freed += s->allocs[i].size;
	}
	/* CUDA arrays (charged when made; the driver frees them with their
	 * contexts, below) */
	for (uint32_t i = 0; i < s->ht.n; i++)
		if (s->ht.e[i].kind == HK_ARRAY) {
			array_forget(&s->ht.e[i]);
			free(s->ht.e[i].extra);
			s->ht.e[i].extra = NULL;
		}
	/* pinned staging must go while a context still exists */
	shm_cleanup(s);
	stage_free(s);
	appmem_cleanup(s); /* before its window goes with vmem_cleanup */
	vmem_cleanup(s);
	mem_cleanup(s);
	memif_cleanup(s);
	journal_free(s);
	int nctx = 0;
	/* graphs are the process's, not a context's: a client that went away
	 * with some leaves them here (executables first; graphs a graph owns
	 * go with it) */
	for (uint32_t i = 0; d->cuGraphExecDestroy && i < s->ht.n; i++)
		if (s->ht.e[i].kind == HK_GRAPHEXEC)
			d->cuGraphExecDestroy(s->ht.e[i].obj);
	for (uint32_t i = 0; d->cuGraphDestroy && i < s->ht.n; i++)
		if (s->ht.e[i].kind == HK_GRAPH && !s->ht.e[i].parent)
			d->cuGraphDestroy(s->ht.e[i].obj);
	for (uint32_t i = 0; i < s->ht.n; i++) {
		struct hentry *e = &s->ht.e[i];
		if (e->kind == HK_LIBRARY)
			d->cuLibraryUnload(e->obj);
	}
	for (uint32_t i = 0; i < s->ht.n; i++) {
		struct hentry *e = &s->ht.e[i];
		if (e->kind == HK_CTX) {
			struct ctx_state *cs = e->extra;
			gate_charge(cs->dev, -(int64_t)session_ctx_charged(cs));
			int rc = session_ctx_drop(s, e->obj, cs);
			if (rc)
				log_warn("%s: destroying a context: %s", s->name, rgpud_cu_errname(d, rc));
			nctx++;
		}
	}
	d->cuCtxSetCurrent(NULL);
	hostfn_free(s);
	if (nctx || freed)
		log_info("%s: session ended: %d context(s), %llu bytes of device memory freed",
			 s->name, nctx, (unsigned long long)freed);
	devout_stop(s->out);
	s->out = NULL;
	pthread_mutex_destroy(&s->send_lock);
	s->prepared = 0;
	ht_free(&s->ht);
	free(s->allocs);
	free(s->gmem);
	free(s->tex);
	free(s->params);
	free(s->rx);
	free(s->in);
	wbuf_free(&s->tx);
}

/* ---- buffered input: many small frames per system call ---- */

#define IN_CAP (256 * 1024)

/* Makes at least need (<= IN_CAP) bytes available in s->in. */
static int in_fill(struct session *s, size_t need)
{
	if (!s->in && !(s->in = malloc(IN_CAP)))
		return -1;
	if (s->in_len - s->in_off >= need)
		return 0;
	if (s->in_off) {
		memmove(s->in, s->in + s->in_off, s->in_len - s->in_off);
		s->in_len -= s->in_off;
		s->in_off = 0;
	}
	while (s->in_len < need) {
		ssize_t r = rgpu_recv_some(s->conn, s->in + s->in_len, IN_CAP - s->in_len);
		if (r <= 0)
			return -1;
		s->in_len += (size_t)r;
	}
	return 0;
}

int session_recv(struct session *s, void *dst, size_t n)
{
	size_t have = s->in_len - s->in_off;
	size_t k = have < n ? have : n;
	if (k) {
		memcpy(dst, s->in + s->in_off, k);
		s->in_off += k;
		n -= k;
		dst = (char *)dst + k;
	}
	if (!n)
		return 0;
	/* bulk: straight into the destination */
	if (n >= IN_CAP / 4)
		return rgpu_recv(s->conn, dst, n);
	if (in_fill(s, n) < 0)
		return -1;
	memcpy(dst, s->in + s->in_off, n);
	s->in_off += n;
	return 0;
}

int session_skip(struct session *s, size_t n)
{
	char buf[4096];
	while (n) {
		size_t k = n < sizeof(buf) ? n : sizeof(buf);
		if (session_recv(s, buf, k) < 0)
			return -1;
		n -= k;
	}
	return 0;
}

static int read_payload(struct session *s, size_t n)
{
	if (n > s->rxcap) {
		size_t cap = s->rxcap ? s->rxcap : 4096;
		while (cap < n)
			cap *= 2;
		uint8_t *p = realloc(s->rx, cap);
		if (!p)
			return -1;
		s->rx = p;
		s->rxcap = cap;
	}
	return n ? session_recv(s, s->rx, n) : 0;
}

/* the parent has a migration order for this worker (migrate.h) */
#define RGPU_HDR_ORDER (-10)
/* the target of a move whose objects went ahead is ready, or late */
#define RGPU_HDR_AHEAD (-11)

/* Between requests: waits for the client while answering the parent's
 * memory manager (mem.h) and watching for a migration order and a move
 * under way (migrate.h).  1 when an order came, 2 when a move's target is
 * ready (or late), else 0 (the client has input, or a descriptor failed:
 * the next read or gate call finds out). */
static int session_wait_client(struct session *s)
{
	int cfd = s->conn ? rgpu_conn_fd(s->conn) : -1;
	int ctl = mem_parent_fd(s);
	if (cfd < 0 || (ctl < 0 && s->mig_fd <= 0))
		return 0;
	for (;;) {
		int wait_ms = -1;
		int mfd = migrate_ahead_fd(s, &wait_ms);
		if (s->move && wait_ms == 0)
			return 2;
		/* shared-memory call queues: input may be there without the
		 * socket saying so (transport.h) */
		int armed = rgpu_conn_arm(s->conn);
		if (armed)
			return 0;
		struct pollfd pf[4] = { { .fd = cfd, .events = POLLIN },
					{ .fd = ctl, .events = POLLIN },
					{ .fd = s->mig_fd > 0 ? s->mig_fd : -1, .events = POLLIN },
					{ .fd = mfd, .events = POLLIN } };
		int n = poll(pf, 4, wait_ms);
		rgpu_conn_disarm(s->conn);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return 0;
		if (pf[2].revents & POLLIN)
			return 1;
		if (pf[2].revents & (POLLHUP | POLLERR)) {
			/* the parent is gone: the gate notices and ends the worker */
			close(s->mig_fd);
			s->mig_fd = -1;
		}
		if (pf[1].revents & POLLIN)
			mem_parent_input(s);
		else if (pf[1].revents & (POLLHUP | POLLERR))
			return 0;
		/* a late doorbell is no input: wait on */
		if (pf[0].revents &&
		    ((pf[0].revents & (POLLHUP | POLLERR)) || rgpu_conn_ready(s->conn) != 0))
			return 0;
		/* the client's requests first: the pause begins when it waits */
		if (pf[3].revents || (s->move && n == 0))
			return 2;
		if (s->mig_fd <= 0 && ctl < 0)
			return 0;
	}
}

/* After a sync answered at once, a socket client's next call (its next
 * launches, typically) comes within tens of microseconds: spun for
 * (RGPUD_SPIN_US), so that the GPU does not also wait for this thread to
 * wake up.  Only then: a worker that spun for every call over TCP, with a
 * client spinning too, slowed launches on the H100 (2026-11-28).  (The
 * shared-memory queues spin in their transport.)  Within a burst of
 * calls without reply (launches, mostly) the same for RGPUD_BURST_SPIN_US:
 * a client writes a burst in pieces (client/rpc.c), and a thread that
 * slept between them woke up for each.  1: the spin caught input. */
static int spin_after_sync(struct session *s)
{
	unsigned us = s->spin_next == 2 ? s->burst_spin_us : s->spin_us;
	int burst = s->spin_next == 2;
	s->spin_next = 0;
	if (!us || !s->conn || s->conn->tp->arm)
		return 0;
	int r = rgpu_conn_spin(s->conn, (uint64_t)us * 1000u);
	if (r >= 0)
		opstats_spin(s->opstats, burst, r > 0);
	return r > 0;
}

static int recv_hdr(struct session *s, struct rgpu_hdr *h)
{
	int dry = s->in_len - s->in_off < RGPU_HDR_SIZE;
	int caught = s->spin_next && dry ? spin_after_sync(s) : 0;
	if (dry && !caught)
		opstats_wait(s->opstats);
	int w = dry ? session_wait_client(s) : 0;
	if (w)
		return w == 2 ? RGPU_HDR_AHEAD : RGPU_HDR_ORDER;
	if (in_fill(s, RGPU_HDR_SIZE) < 0)
		return RGPU_HDR_EOF;
	rgpu_hdr_decode(s->in + s->in_off, h);
	s->in_off += RGPU_HDR_SIZE;
	if (h->magic != RGPU_PROTO_MAGIC)
		return RGPU_HDR_BAD_MAGIC;
	if (h->len > RGPU_MAX_PAYLOAD)
		return RGPU_HDR_TOO_LONG;
	return RGPU_HDR_OK;
}

static int reply(struct session *s, const struct op_desc *od, const struct rgpu_hdr *h,
		 struct rd *r);

int session_serve_one(struct session *s)
{
	session_prepare(s);
	struct rgpu_hdr h;
	uint64_t t0 = s->opstats ? rgpu_now_ns() : 0;
	int hs = recv_hdr(s, &h);
	if (s->opstats)
		opstats_idle(s->opstats, rgpu_now_ns() - t0);
	if (hs == RGPU_HDR_ORDER)
		return migrate_serve_order(s) ? -1 : 0;
	if (hs == RGPU_HDR_AHEAD)
		return migrate_serve_ahead(s) ? -1 : 0;
	if (hs == RGPU_HDR_EOF) {
		if (errno)
			log_info("%s: connection lost: %s", s->name, strerror(errno));
		return -1;
	}
	if (hs == RGPU_HDR_BAD_MAGIC) {
		log_warn("%s: not an rgpu client (bad frame magic), dropping connection", s->name);
		return -1;
	}
	if (hs == RGPU_HDR_TOO_LONG) {
		log_warn("%s: frame of %u bytes exceeds the %u-byte limit, dropping connection",
			 s->name, h.len, RGPU_MAX_PAYLOAD);
		return -1;
	}
	if (h.flags & RGPU_F_REPLY) {
		log_warn("%s: unexpected reply frame, dropping connection", s->name);
		return -1;
	}
	const struct op_desc *od = rgpud_op(h.op);
	if (!od || (!s->hello_done && h.op != RGPU_OP_HELLO) ||
	    (s->hello_done && h.op == RGPU_OP_HELLO)) {
		log_warn("%s: unexpected opcode %u (%s)%s, dropping connection", s->name, h.op,
			 rgpu_op_name(h.op), s->hello_done ? "" : " before HELLO");
		return -1;
	}
	if (h.version != RGPU_PROTO_VERSION && h.op != RGPU_OP_HELLO) {
		log_warn("%s: protocol version %u in a frame, dropping connection", s->name, h.version);
		return -1;
	}
	size_t pre = od->prefix && od->prefix < h.len ? od->prefix : h.len;
	if (read_payload(s, pre) < 0) {
		log_info("%s: connection lost in a %s request", s->name, rgpu_op_name(h.op));
		return -1;
	}
	struct rd r;
	rd_init(&r, s->rx, pre);
	/* objects that a pending wait uses are destroyed only after it */
	if (od->flags & OPF_DRAINS)
		waiter_drain(s);
	wbuf_reset(&s->tx);
	/* what the request makes and where it runs, for the journal */
	ht_made_reset(&s->ht);
	s->req_capture = 0;
	/* an evicted session's memory comes back before GPU work */
	static const struct op_desc refused = { op_mem_refused, 0, 1, 0 };
	if ((s->mem_err = mem_before_request(s, h.op)))
		od = &refused;
	/* a synchronisation answered by the waiter is one for the pools too
	 * (due again while a wait is left: its reply may have gone first) */
	if (s->pools_sync_due) {
		unsigned busy = waiter_busy(s);
		pb_synced(s);
		s->pools_sync_due = busy != 0;
	}
	/* the main loop's frames never interleave with a waiter's reply */
	uint64_t t1 = s->opstats ? rgpu_now_ns() : 0;
	pthread_mutex_lock(&s->send_lock);
	int rc = reply(s, od, &h, &r);
	pthread_mutex_unlock(&s->send_lock);
	if (s->opstats)
		opstats_op(s->opstats, h.op, rgpu_now_ns() - t1);
	mem_after_request(s);
	s->last_id = h.id;
	return rc;
}

/* Runs the handler and sends its reply; the send lock is held. */
static int reply(struct session *s, const struct op_desc *od, const struct rgpu_hdr *h,
		 struct rd *r)
{
	int st = od->fn(s, h, r, &s->tx);
	/* what made or changed an object is kept for migration (prefix 0:
	 * the whole request is in s->rx) */
	if (st >= 0 && !od->prefix)
		journal_note(s, h->op, s->rx, h->len, st, s->tx.data, s->tx.len);
	else if (st >= 0 && s->req_capture)
		journal_graph_unreplayable(s, "a capture held a request whose data the client "
					      "streamed (not kept)");
	if (st == OP_DROP) {
		log_warn("%s: malformed %s request (%u bytes), dropping connection", s->name,
			 rgpu_op_name(h->op), h->len);
		return -1;
	}
	/* --log-level=debug: which request failed, for programs that report
	 * only a status (XLA's autotuner: "CUDA_ERROR_INVALID_VALUE") */
	if (st > 0)
		log_debug("%s: %s failed: %s", s->name, rgpu_op_name(h->op),
			  rgpud_cu_errname(&rgpud_server.drv, st));
	if (st == OP_REPLIED) {
		/* (a device-to-host copy streams its reply here; a sync
		 * replied to from a waiter thread is not over yet) */
		s->spin_next = h->op == RGPU_OP_MEMCPY_DTOH;
		return s->ended ? -1 : 0;
	}
	if (h->flags & RGPU_F_NOREPLY) {
		if (st && !s->deferred)
			s->deferred = st;
		s->spin_next = 2;
		return 0;
	}
	/*
	 * A deferred (asynchronous) error is reported by the next call that
	 * creates nothing.  A call that created a resource (memory, a stream,
	 * a module, ...) reports its own success: turning it into a failure
	 * would leave the resource alive on the server, unknown to the client
	 * and charged to its quota.  CUDA never fails a call whose object it
	 * made either; the error stays pending for the next call, as CUDA's
	 * sticky and asynchronous errors do.
	 */
	if (st == CUDA_SUCCESS && s->deferred && !(od->flags & OPF_CREATES)) {
		st = s->deferred;
		s->deferred = 0;
		wbuf_reset(&s->tx);
	}
	if (s->tx.oom) {
		st = CUDA_ERROR_OUT_OF_MEMORY;
		wbuf_reset(&s->tx);
	}
	/* on failure the fields, if any, are a reason (admin ops) */
	if (session_send_reply(s, h, 0, st, s->tx.data, s->tx.len) < 0) {
		log_info("%s: cannot send reply: %s", s->name, strerror(errno));
		return -1;
	}
	s->spin_next = (od->flags & OPF_WAITS_GPU) != 0;
	return s->ended ? -1 : 0;
}

void session_run(struct session *s)
{
	session_prepare(s);
	while (!s->ended && session_serve_one(s) == 0)
		;
	session_cleanup(s);
	log_info("%s: disconnected", s->name);
}
