/* InfiniBand verbs transport: a TCP connection upgraded to two RC queue
 * pairs, one for control messages (send/receive, credit flow control), one
 * for bulk data (RDMA write with immediate into a registered ring on the
 * peer).  The protocol logic lives in verbs_core.c; this file holds the
 * device calls.  NOT RUN ON HARDWARE YET (docs/transports.md). */
#include "clock.h"
#include "transport.h"
#include "verbs_core.h"

#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { Q_CTRL = 0, Q_BULK = 1 };
/* wr_id: kind in the high 32 bits, buffer index in the low. */
enum { W_CTRL_RECV = 1, W_CTRL_SEND, W_BULK_RECV, W_BULK_SEND };
/* vstream entry kinds */
enum { K_CTRL = 1, K_SLOT = 2 };

#define WRID(kind, idx) ((uint64_t)(kind) << 32 | (uint32_t)(idx))

/* A stack of free buffer indices. */
struct freelist {
	uint32_t *idx;
	uint32_t n, cap;
};

struct vconn {
	struct rgpu_conn base;
	struct rgpu_conn *tcp; /* owned; kept for liveness and orderly close */
	int tcp_fd;

	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_qp *qp[2];
	uint8_t port, link_layer, gid_index;
	uint16_t lid;
	enum ibv_mtu mtu;
	union ibv_gid gid;
	uint32_t psn[2];

	/* registered memory: control receive and send buffers, our receive
	 * ring (peer-writable), bulk bounce buffers */
	uint8_t *crx, *ctx_buf, *ring, *bounce;
	struct ibv_mr *crx_mr, *ctx_mr, *ring_mr, *bounce_mr;

	/* the peer's ring */
	uint64_t peer_ring;
	uint32_t peer_rkey, peer_slot_size, peer_ctrl_msg;

	pthread_mutex_t send_mu; /* one sendv at a time: keeps slot order */
	pthread_mutex_t mu;      /* everything below */
	pthread_cond_t cv;
	int polling;             /* a thread sleeps on the channel; others wait on cv */
	unsigned long ncompl;    /* completions handled, to detect progress */
	struct rgpu_vcredit cred;
	struct rgpu_vring_tx rtx;
	struct rgpu_vring_rx rrx;
	struct freelist ctx_free, bounce_free;
	struct rgpu_vstream rx;
	uint32_t tx_seq;
	int failed, fail_errno, eof, closing;
};

/* ---------------------------------------------------------------- helpers */

static int fl_init(struct freelist *f, uint32_t n)
{
	if (!(f->idx = calloc(n, sizeof(*f->idx))))
		return -1;
	f->cap = f->n = n;
	for (uint32_t i = 0; i < n; i++)
		f->idx[i] = n - 1 - i;
	return 0;
}
static int fl_get(struct freelist *f) { return f->n ? (int)f->idx[--f->n] : -1; }
static void fl_put(struct freelist *f, uint32_t i)
{
	if (f->n < f->cap)
		f->idx[f->n++] = i;
}

static void fail_locked(struct vconn *v, int e)
{
	if (!v->failed) {
		v->failed = 1;
		v->fail_errno = e;
	}
	pthread_cond_broadcast(&v->cv);
}

static int post_ctrl_recv(struct vconn *v, uint32_t i)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(v->crx + (size_t)i * RGPU_VERBS_CTRL_MSG),
			       .length = RGPU_VERBS_CTRL_MSG, .lkey = v->crx_mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = WRID(W_CTRL_RECV, i), .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *badwr;
	return ibv_post_recv(v->qp[Q_CTRL], &wr, &badwr) ? -1 : 0;
}

/* Writes with immediate consume a receive but place no data through it. */
static int post_bulk_recv(struct vconn *v)
{
	struct ibv_recv_wr wr = { .wr_id = WRID(W_BULK_RECV, 0) };
	struct ibv_recv_wr *badwr;
	return ibv_post_recv(v->qp[Q_BULK], &wr, &badwr) ? -1 : 0;
}

/* Posts a control message already in send buffer i. */
static int post_ctrl_send(struct vconn *v, uint32_t i, uint32_t bytes)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(v->ctx_buf + (size_t)i * RGPU_VERBS_CTRL_MSG),
			       .length = bytes, .lkey = v->ctx_mr->lkey };
	struct ibv_send_wr wr = { .wr_id = WRID(W_CTRL_SEND, i), .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr *badwr;
	return ibv_post_send(v->qp[Q_CTRL], &wr, &badwr) ? -1 : 0;
}

/* An explicit CREDIT when enough is owed and a credit and buffer remain. */
static void maybe_credit_locked(struct vconn *v)
{
	if (v->failed || v->closing)
		return;
	if (!rgpu_vcredit_need_explicit(&v->cred) && !rgpu_vring_rx_need_explicit(&v->rrx))
		return;
	if (!rgpu_vcredit_can_credit(&v->cred))
		return;
	int i = fl_get(&v->ctx_free);
	if (i < 0)
		return;
	struct rgpu_vhdr h = { .type = RGPU_VMSG_CREDIT };
	h.ctrl_ret = rgpu_vcredit_take(&v->cred);
	h.slot_ret = rgpu_vring_rx_take(&v->rrx);
	rgpu_vhdr_encode(&h, v->ctx_buf + (size_t)i * RGPU_VERBS_CTRL_MSG);
	rgpu_vcredit_use(&v->cred);
	if (post_ctrl_send(v, (uint32_t)i, RGPU_VHDR_SIZE) < 0)
		fail_locked(v, EIO);
}

/* vstream release: the reader has used a message up. */
static int release_cb(void *arg, uint8_t kind, uint32_t tag)
{
	struct vconn *v = arg;
	if (kind == K_CTRL) {
		if (post_ctrl_recv(v, tag) < 0)
			return -1;
		rgpu_vcredit_reposted(&v->cred);
		return 0;
	}
	return rgpu_vring_rx_free(&v->rrx, tag);
}

static int handle_wc(struct vconn *v, const struct ibv_wc *wc)
{
	uint32_t kind = (uint32_t)(wc->wr_id >> 32), idx = (uint32_t)wc->wr_id;
	if (wc->status != IBV_WC_SUCCESS) {
		/* flushes after we moved the QPs to ERROR on close are expected */
		if (v->closing && wc->status == IBV_WC_WR_FLUSH_ERR)
			return 0;
		errno = EIO;
		return -1;
	}
	switch (kind) {
	case W_CTRL_SEND:
		fl_put(&v->ctx_free, idx);
		return 0;
	case W_BULK_SEND:
		fl_put(&v->bounce_free, idx);
		return 0;
	case W_CTRL_RECV: {
		struct rgpu_vhdr h;
		const uint8_t *m = v->crx + (size_t)idx * RGPU_VERBS_CTRL_MSG;
		if (idx >= RGPU_VERBS_QDEPTH || rgpu_vhdr_decode(m, wc->byte_len, &h) < 0 ||
		    rgpu_vcredit_grant(&v->cred, h.ctrl_ret) < 0 ||
		    rgpu_vring_tx_release(&v->rtx, h.slot_ret) < 0) {
			errno = EPROTO;
			return -1;
		}
		if (h.type == RGPU_VMSG_CREDIT) {
			/* nothing to read: the buffer goes straight back */
			if (post_ctrl_recv(v, idx) < 0)
				return -1;
			rgpu_vcredit_reposted(&v->cred);
			return 0;
		}
		if (rgpu_vstream_put(&v->rx, h.seq, m + RGPU_VHDR_SIZE, h.len, K_CTRL, idx) < 0) {
			errno = EPROTO;
			return -1;
		}
		return 0;
	}
	case W_BULK_RECV: {
		uint32_t seq8, len;
		if (wc->opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc->wc_flags & IBV_WC_WITH_IMM)) {
			errno = EPROTO;
			return -1;
		}
		rgpu_vimm_decode(ntohl(wc->imm_data), &seq8, &len);
		int slot = rgpu_vring_rx_arrive(&v->rrx);
		if (slot < 0 || !len || len > RGPU_VERBS_SLOT_SIZE ||
		    rgpu_vstream_put(&v->rx, seq8, v->ring + (size_t)slot * RGPU_VERBS_SLOT_SIZE, len,
				     K_SLOT, (uint32_t)slot) < 0) {
			errno = EPROTO;
			return -1;
		}
		/* slot credits bound the writes in flight, so the receive can
		 * be re-posted at once */
		return post_bulk_recv(v);
	}
	}
	errno = EPROTO;
	return -1;
}

/* Handles every completion there is; fails the connection on an error. */
static void poll_cq_locked(struct vconn *v)
{
	struct ibv_wc wc[32];
	for (;;) {
		int n = ibv_poll_cq(v->cq, 32, wc);
		if (n < 0) {
			fail_locked(v, EIO);
			return;
		}
		if (!n)
			break;
		for (int i = 0; i < n; i++)
			if (handle_wc(v, &wc[i]) < 0) {
				fail_locked(v, errno ? errno : EIO);
				return;
			}
		v->ncompl += (unsigned long)n;
	}
	maybe_credit_locked(v);
}

/* Checks the TCP side channel: EOF there means the peer closed or died
 * (an RC receiver cannot tell otherwise).  Nothing else may arrive on it. */
static void check_tcp_locked(struct vconn *v)
{
	char b;
	ssize_t r = recv(v->tcp_fd, &b, 1, MSG_DONTWAIT);
	if (r == 0)
		v->eof = 1;
	else if (r > 0)
		fail_locked(v, EPROTO);
	else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
		v->eof = 1;
}

/* Waits for something to happen (a completion, EOF, shutdown), mu held.
 * One thread sleeps on the completion channel and the TCP socket; the
 * others wait for it on cv, so completions are never handled twice. */
static void wait_locked(struct vconn *v, int timeout_ms)
{
	if (v->polling) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += (long)(timeout_ms < 0 ? 1000 : timeout_ms) * 1000000L;
		ts.tv_sec += ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		pthread_cond_timedwait(&v->cv, &v->mu, &ts);
		return;
	}
	v->polling = 1;
	unsigned long before = v->ncompl;
	if (ibv_req_notify_cq(v->cq, 0)) {
		fail_locked(v, EIO);
		goto out;
	}
	/* a completion that arrived before the request raised no event */
	poll_cq_locked(v);
	if (v->ncompl != before || v->failed)
		goto out;
	pthread_mutex_unlock(&v->mu);
	struct pollfd p[2] = { { .fd = v->ch->fd, .events = POLLIN },
			       { .fd = v->tcp_fd, .events = POLLIN } };
	int pr = poll(p, 2, timeout_ms);
	pthread_mutex_lock(&v->mu);
	if (pr > 0 && p[0].revents) {
		struct ibv_cq *cq;
		void *cq_ctx;
		if (ibv_get_cq_event(v->ch, &cq, &cq_ctx) == 0)
			ibv_ack_cq_events(cq, 1);
	}
	if (pr > 0 && p[1].revents)
		check_tcp_locked(v);
	poll_cq_locked(v);
out:
	v->polling = 0;
	pthread_cond_broadcast(&v->cv);
}

/* ---------------------------------------------------------- the interface */

static int dead_locked(struct vconn *v)
{
	if (v->failed) {
		errno = v->fail_errno;
		return 1;
	}
	if (v->eof || v->closing) {
		errno = EPIPE;
		return 1;
	}
	return 0;
}

static int send_ctrl(struct vconn *v, struct rgpu_viov *cur, size_t len)
{
	pthread_mutex_lock(&v->mu);
	int i;
	for (;;) {
		if (dead_locked(v))
			goto fail;
		poll_cq_locked(v);
		if (rgpu_vcredit_can_data(&v->cred) && v->ctx_free.n)
			break;
		wait_locked(v, -1);
	}
	i = fl_get(&v->ctx_free);
	rgpu_vcredit_use(&v->cred);
	struct rgpu_vhdr h = { .type = RGPU_VMSG_DATA, .seq = v->tx_seq++, .len = (uint32_t)len };
	h.ctrl_ret = rgpu_vcredit_take(&v->cred);
	h.slot_ret = rgpu_vring_rx_take(&v->rrx);
	pthread_mutex_unlock(&v->mu);
	/* the buffer is ours until posted: copy without the lock */
	uint8_t *m = v->ctx_buf + (size_t)i * RGPU_VERBS_CTRL_MSG;
	rgpu_vhdr_encode(&h, m);
	rgpu_viov_copy(cur, m + RGPU_VHDR_SIZE, len);
	pthread_mutex_lock(&v->mu);
	if (post_ctrl_send(v, (uint32_t)i, (uint32_t)(RGPU_VHDR_SIZE + len)) < 0) {
		fail_locked(v, EIO);
		errno = EIO;
		goto fail;
	}
	pthread_mutex_unlock(&v->mu);
	return 0;
fail:
	pthread_mutex_unlock(&v->mu);
	return -1;
}

static int send_bulk(struct vconn *v, struct rgpu_viov *cur, size_t len)
{
	pthread_mutex_lock(&v->mu);
	for (;;) {
		if (dead_locked(v))
			goto fail;
		poll_cq_locked(v);
		if (v->rtx.inuse < v->rtx.nslots && v->bounce_free.n)
			break;
		wait_locked(v, -1);
	}
	int slot = rgpu_vring_tx_acquire(&v->rtx);
	int b = fl_get(&v->bounce_free);
	uint32_t seq = v->tx_seq++;
	pthread_mutex_unlock(&v->mu);
	uint8_t *buf = v->bounce + (size_t)b * RGPU_VERBS_SLOT_SIZE;
	rgpu_viov_copy(cur, buf, len);
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = (uint32_t)len,
			       .lkey = v->bounce_mr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = WRID(W_BULK_SEND, b), .sg_list = &sge, .num_sge = 1,
		.opcode = IBV_WR_RDMA_WRITE_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
		.imm_data = htonl(rgpu_vimm_encode(seq, (uint32_t)len)),
		.wr.rdma = { .remote_addr = v->peer_ring + (uint64_t)slot * v->peer_slot_size,
			     .rkey = v->peer_rkey },
	};
	struct ibv_send_wr *badwr;
	pthread_mutex_lock(&v->mu);
	if (ibv_post_send(v->qp[Q_BULK], &wr, &badwr)) {
		fail_locked(v, EIO);
		errno = EIO;
		goto fail;
	}
	pthread_mutex_unlock(&v->mu);
	return 0;
fail:
	pthread_mutex_unlock(&v->mu);
	return -1;
}

static int verbs_sendv(struct rgpu_conn *c, const struct iovec *iov, int n)
{
	struct vconn *v = (struct vconn *)c;
	if (n < 0) {
		errno = EINVAL;
		return -1;
	}
	struct rgpu_viov cur;
	rgpu_viov_init(&cur, iov, n);
	const size_t ctrl_max = RGPU_VERBS_CTRL_MSG - RGPU_VHDR_SIZE;
	/* a write must fit both our bounce buffer and the peer's slot */
	const size_t bulk_max = v->peer_slot_size < RGPU_VERBS_SLOT_SIZE ? v->peer_slot_size
									 : RGPU_VERBS_SLOT_SIZE;
	int rc = 0;
	pthread_mutex_lock(&v->send_mu);
	for (;;) {
		size_t len;
		int k = rgpu_vsplit_next(&cur, ctrl_max, ctrl_max, bulk_max, &len);
		if (k == RGPU_VSPLIT_NONE)
			break;
		rc = k == RGPU_VSPLIT_BULK ? send_bulk(v, &cur, len) : send_ctrl(v, &cur, len);
		if (rc < 0)
			break;
	}
	pthread_mutex_unlock(&v->send_mu);
	return rc;
}

/* Up to n bytes, at least min (min <= n): the count, or -1 (errno 0 at
 * EOF, as for TCP). */
static ssize_t recv_at_least(struct vconn *v, uint8_t *buf, size_t n, size_t min)
{
	size_t got = 0;
	pthread_mutex_lock(&v->mu);
	while (got < min) {
		long r = rgpu_vstream_read(&v->rx, buf + got, n - got, release_cb, v);
		if (r < 0) {
			fail_locked(v, EIO);
		} else if (r > 0) {
			got += (size_t)r;
			maybe_credit_locked(v);
			continue;
		}
		if (v->failed) {
			errno = v->fail_errno;
			goto fail;
		}
		poll_cq_locked(v);
		if (rgpu_vstream_ready(&v->rx))
			continue;
		if (v->eof || v->closing) {
			/* everything the peer sent completed before its TCP
			 * close (it drains its sends first) */
			errno = 0;
			goto fail;
		}
		wait_locked(v, -1);
	}
	pthread_mutex_unlock(&v->mu);
	return (ssize_t)got;
fail:
	pthread_mutex_unlock(&v->mu);
	return -1;
}

static int verbs_recv(struct rgpu_conn *c, void *buf, size_t n)
{
	return recv_at_least((struct vconn *)c, buf, n, n) < 0 ? -1 : 0;
}

static ssize_t verbs_recv_some(struct rgpu_conn *c, void *buf, size_t n)
{
	return recv_at_least((struct vconn *)c, buf, n, n ? 1 : 0);
}

static void verbs_shutdown(struct rgpu_conn *c)
{
	struct vconn *v = (struct vconn *)c;
	/* A blocked thread polls the TCP socket: shutting it down wakes it
	 * with EOF, and tells the peer. */
	pthread_mutex_lock(&v->mu);
	v->eof = 1;
	pthread_cond_broadcast(&v->cv);
	pthread_mutex_unlock(&v->mu);
	rgpu_conn_shutdown(v->tcp);
}

static void destroy(struct vconn *v)
{
	for (int i = 0; i < 2; i++)
		if (v->qp[i])
			ibv_destroy_qp(v->qp[i]);
	if (v->crx_mr)
		ibv_dereg_mr(v->crx_mr);
	if (v->ctx_mr)
		ibv_dereg_mr(v->ctx_mr);
	if (v->ring_mr)
		ibv_dereg_mr(v->ring_mr);
	if (v->bounce_mr)
		ibv_dereg_mr(v->bounce_mr);
	if (v->cq)
		ibv_destroy_cq(v->cq);
	if (v->ch)
		ibv_destroy_comp_channel(v->ch);
	if (v->pd)
		ibv_dealloc_pd(v->pd);
	if (v->ctx)
		ibv_close_device(v->ctx);
	free(v->crx);
	free(v->ctx_buf);
	free(v->ring);
	free(v->bounce);
	free(v->ctx_free.idx);
	free(v->bounce_free.idx);
	pthread_mutex_destroy(&v->send_mu);
	pthread_mutex_destroy(&v->mu);
	pthread_cond_destroy(&v->cv);
	free(v);
}

static void verbs_close(struct rgpu_conn *c)
{
	struct vconn *v = (struct vconn *)c;
	/* Let our posted sends complete (the peer's HCA has the data) before
	 * the TCP close tells the peer we are gone; bounded, as the peer may
	 * be dead already. */
	pthread_mutex_lock(&v->mu);
	uint64_t t0 = rgpu_now_ms();
	while (!v->failed && !v->eof &&
	       (v->ctx_free.n < v->ctx_free.cap || v->bounce_free.n < v->bounce_free.cap)) {
		if (rgpu_now_ms() - t0 > 2000)
			break;
		wait_locked(v, 100);
	}
	v->closing = 1;
	pthread_mutex_unlock(&v->mu);
	rgpu_conn_close(v->tcp);
	destroy(v);
}

static const struct rgpu_transport verbs_transport = {
	.name = "verbs",
	.sendv = verbs_sendv,
	.recv = verbs_recv,
	.recv_some = verbs_recv_some,
	.shutdown = verbs_shutdown,
	.close = verbs_close,
};

/* ------------------------------------------------------------- discovery */

/* Picks a device and ACTIVE port: RGPU_VERBS_DEVICE / RGPU_VERBS_PORT
 * narrow the choice.  Returns an open context or NULL with a reason. */
static struct ibv_context *open_port(uint8_t *port_out, struct ibv_port_attr *pa_out,
				     char *why, size_t n)
{
	int num = 0;
	errno = 0;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list || num == 0) {
		snprintf(why, n, "no RDMA devices found (libibverbs lists none: no HCA, or no "
			 "kernel driver or provider library for it)%s%s",
			 errno ? ": " : "", errno ? strerror(errno) : "");
		if (list)
			ibv_free_device_list(list);
		return NULL;
	}
	const char *want_dev = getenv("RGPU_VERBS_DEVICE");
	const char *want_port = getenv("RGPU_VERBS_PORT");
	int wp = want_port && *want_port ? atoi(want_port) : 0;
	char seen[256] = "";
	size_t sl = 0;
	struct ibv_context *found = NULL;
	for (int d = 0; d < num && !found; d++) {
		const char *name = ibv_get_device_name(list[d]);
		if (want_dev && *want_dev && strcmp(want_dev, name))
			continue;
		struct ibv_context *ctx = ibv_open_device(list[d]);
		if (!ctx) {
			sl += (size_t)snprintf(seen + sl, sl < sizeof(seen) ? sizeof(seen) - sl : 0,
					       " %s: cannot open;", name);
			continue;
		}
		struct ibv_device_attr da;
		if (ibv_query_device(ctx, &da)) {
			ibv_close_device(ctx);
			continue;
		}
		for (int p = 1; p <= da.phys_port_cnt && !found; p++) {
			struct ibv_port_attr pa;
			if (wp && p != wp)
				continue;
			if (ibv_query_port(ctx, (uint8_t)p, &pa))
				continue;
			if (pa.state == IBV_PORT_ACTIVE) {
				*port_out = (uint8_t)p;
				*pa_out = pa;
				found = ctx;
			} else if (sl < sizeof(seen)) {
				sl += (size_t)snprintf(seen + sl, sizeof(seen) - sl, " %s port %d: %s;",
						       name, p, ibv_port_state_str(pa.state));
			}
		}
		if (!found)
			ibv_close_device(ctx);
	}
	ibv_free_device_list(list);
	if (!found)
		snprintf(why, n, "%d RDMA device(s) but no ACTIVE port%s%s%s%s", num,
			 want_dev && *want_dev ? " matching RGPU_VERBS_DEVICE" : "",
			 *seen ? " (" : "", *seen ? seen + 1 : "", *seen ? ")" : "");
	return found;
}

int rgpu_verbs_available(char *why, size_t n)
{
	uint8_t port;
	struct ibv_port_attr pa;
	struct ibv_context *ctx = open_port(&port, &pa, why, n);
	if (!ctx)
		return 0;
	snprintf(why, n, "%s port %u is ACTIVE", ibv_get_device_name(ctx->device), port);
	ibv_close_device(ctx);
	return 1;
}

/* ----------------------------------------------------------------- setup */

static void *alloc_reg(struct vconn *v, size_t size, int access, struct ibv_mr **mr)
{
	void *p = NULL;
	/* page-aligned: registration pins whole pages anyway */
	if (posix_memalign(&p, 4096, size))
		return NULL;
	memset(p, 0, size);
	if (!(*mr = ibv_reg_mr(v->pd, p, size, access))) {
		free(p);
		return NULL;
	}
	return p;
}

/* Everything up to INIT, with receives posted: 0 or -1 with a reason. */
static int local_setup(struct vconn *v, char *why, size_t n)
{
	struct ibv_port_attr pa;
	if (!(v->ctx = open_port(&v->port, &pa, why, n)))
		return -1;
	v->lid = pa.lid;
	v->mtu = pa.active_mtu;
	v->link_layer = pa.link_layer == IBV_LINK_LAYER_ETHERNET ? 2 : 1;
	const char *gi = getenv("RGPU_VERBS_GID_INDEX");
	v->gid_index = (uint8_t)(gi && *gi ? atoi(gi) : 0);
	if (ibv_query_gid(v->ctx, v->port, v->gid_index, &v->gid))
		memset(&v->gid, 0, sizeof(v->gid));
	const char *step = "ibv_alloc_pd";
	if (!(v->pd = ibv_alloc_pd(v->ctx)))
		goto fail;
	step = "ibv_create_comp_channel";
	if (!(v->ch = ibv_create_comp_channel(v->ctx)))
		goto fail;
	/* non-blocking: we only read an event after poll() says there is one */
	int fl = fcntl(v->ch->fd, F_GETFL);
	if (fl >= 0)
		(void)fcntl(v->ch->fd, F_SETFL, fl | O_NONBLOCK);
	/* one CQ for both QPs, deep enough for both their queues */
	step = "ibv_create_cq";
	if (!(v->cq = ibv_create_cq(v->ctx, 4 * RGPU_VERBS_QDEPTH, NULL, v->ch, 0)))
		goto fail;
	for (int q = 0; q < 2; q++) {
		struct ibv_qp_init_attr ia = {
			.send_cq = v->cq, .recv_cq = v->cq, .qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = RGPU_VERBS_QDEPTH, .max_recv_wr = RGPU_VERBS_QDEPTH,
				 .max_send_sge = 1, .max_recv_sge = 1 },
		};
		step = "ibv_create_qp";
		if (!(v->qp[q] = ibv_create_qp(v->pd, &ia)))
			goto fail;
		struct ibv_qp_attr a = {
			.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = v->port,
			.qp_access_flags = q == Q_BULK ? IBV_ACCESS_REMOTE_WRITE : 0,
		};
		step = "ibv_modify_qp(INIT)";
		if (ibv_modify_qp(v->qp[q], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
						    IBV_QP_ACCESS_FLAGS))
			goto fail;
		uint32_t r = 0;
		if (getrandom(&r, sizeof(r), 0) != sizeof(r))
			r = (uint32_t)time(NULL) ^ (uint32_t)getpid() << 8 ^ (uint32_t)q;
		v->psn[q] = r & 0xffffff;
	}
	size_t csz = (size_t)RGPU_VERBS_QDEPTH * RGPU_VERBS_CTRL_MSG;
	step = "ibv_reg_mr";
	if (!(v->crx = alloc_reg(v, csz, IBV_ACCESS_LOCAL_WRITE, &v->crx_mr)) ||
	    !(v->ctx_buf = alloc_reg(v, csz, 0, &v->ctx_mr)) ||
	    !(v->ring = alloc_reg(v, (size_t)RGPU_VERBS_SLOTS * RGPU_VERBS_SLOT_SIZE,
				  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, &v->ring_mr)) ||
	    !(v->bounce = alloc_reg(v, (size_t)RGPU_VERBS_BOUNCE * RGPU_VERBS_SLOT_SIZE, 0,
				    &v->bounce_mr)))
		goto fail;
	step = "out of memory";
	if (fl_init(&v->ctx_free, RGPU_VERBS_QDEPTH) < 0 ||
	    fl_init(&v->bounce_free, RGPU_VERBS_BOUNCE) < 0)
		goto fail;
	step = "ibv_post_recv";
	for (uint32_t i = 0; i < RGPU_VERBS_QDEPTH; i++)
		if (post_ctrl_recv(v, i) < 0)
			goto fail;
	for (uint32_t i = 0; i < RGPU_VERBS_SLOTS; i++)
		if (post_bulk_recv(v) < 0)
			goto fail;
	return 0;
fail:
	snprintf(why, n, "%s failed on %s: %s", step, ibv_get_device_name(v->ctx->device),
		 strerror(errno ? errno : ENOMEM));
	return -1;
}

static int connect_qps(struct vconn *v, const struct rgpu_vinfo *p, char *why, size_t n)
{
	enum ibv_mtu mtu = p->mtu < v->mtu ? (enum ibv_mtu)p->mtu : v->mtu;
	for (int q = 0; q < 2; q++) {
		struct ibv_qp_attr a = {
			.qp_state = IBV_QPS_RTR, .path_mtu = mtu,
			.dest_qp_num = q == Q_CTRL ? p->ctrl_qpn : p->bulk_qpn,
			.rq_psn = q == Q_CTRL ? p->ctrl_psn : p->bulk_psn,
			.max_dest_rd_atomic = 1, .min_rnr_timer = 12,
			.ah_attr = { .dlid = p->lid, .sl = 0, .src_path_bits = 0,
				     .port_num = v->port },
		};
		/* RoCE has no LIDs: address by GID */
		if (p->link_layer == 2 || !p->lid) {
			a.ah_attr.is_global = 1;
			memcpy(a.ah_attr.grh.dgid.raw, p->gid, 16);
			a.ah_attr.grh.sgid_index = v->gid_index;
			a.ah_attr.grh.hop_limit = 64;
		}
		if (ibv_modify_qp(v->qp[q], &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
						    IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
						    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
			snprintf(why, n, "ibv_modify_qp(RTR): %s", strerror(errno));
			return -1;
		}
		struct ibv_qp_attr s = {
			.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7,
			.sq_psn = v->psn[q], .max_rd_atomic = 1,
		};
		if (ibv_modify_qp(v->qp[q], &s, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
						    IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
						    IBV_QP_MAX_QP_RD_ATOMIC)) {
			snprintf(why, n, "ibv_modify_qp(RTS): %s", strerror(errno));
			return -1;
		}
	}
	return 0;
}

/* Sends ours, then reads theirs: the messages are small enough for the
 * socket buffers, so both sides may send first. */
static int swap(struct rgpu_conn *tcp, const uint8_t *mine, uint8_t *theirs, size_t n)
{
	struct iovec iov = { .iov_base = (void *)mine, .iov_len = n };
	return rgpu_sendv(tcp, &iov, 1) < 0 || rgpu_recv(tcp, theirs, n) < 0 ? -1 : 0;
}

struct rgpu_conn *rgpu_verbs_upgrade(struct rgpu_conn *tcp, int is_server, struct rgpu_error *e)
{
	char *err = e->text;
	const size_t errlen = sizeof(e->text);
	struct vconn *v = calloc(1, sizeof(*v));
	char why[160] = "";
	struct rgpu_vinfo me = { 0 }, peer;
	uint8_t buf[RGPU_VINFO_SIZE], pbuf[RGPU_VINFO_SIZE];
	if (!v) {
		me.status = 1;
		snprintf(me.reason, sizeof(me.reason), "out of memory");
	} else {
		pthread_mutex_init(&v->send_mu, NULL);
		pthread_mutex_init(&v->mu, NULL);
		pthread_cond_init(&v->cv, NULL);
		if (local_setup(v, why, sizeof(why)) < 0) {
			me.status = 1;
			snprintf(me.reason, sizeof(me.reason), "%s", why);
		}
	}
	if (!me.status) {
		me.port = v->port;
		me.link_layer = v->link_layer;
		me.mtu = (uint8_t)v->mtu;
		me.gid_index = v->gid_index;
		me.lid = v->lid;
		me.ctrl_qpn = v->qp[Q_CTRL]->qp_num;
		me.ctrl_psn = v->psn[Q_CTRL];
		me.bulk_qpn = v->qp[Q_BULK]->qp_num;
		me.bulk_psn = v->psn[Q_BULK];
		me.ctrl_depth = RGPU_VERBS_QDEPTH;
		me.ctrl_msg_size = RGPU_VERBS_CTRL_MSG;
		me.ring_slots = RGPU_VERBS_SLOTS;
		me.slot_size = RGPU_VERBS_SLOT_SIZE;
		me.ring_rkey = v->ring_mr->rkey;
		me.ring_addr = (uintptr_t)v->ring;
		memcpy(me.gid, v->gid.raw, 16);
	}
	/* Phase 1: both sides always send their info, so a side that cannot
	 * do verbs still tells the other, and both stay on TCP together. */
	rgpu_vinfo_encode(&me, buf);
	if (swap(tcp, buf, pbuf, sizeof(pbuf)) < 0) {
		snprintf(err, errlen, "verbs setup exchange over TCP failed: %s",
			 errno ? strerror(errno) : "connection closed");
		goto broken;
	}
	if (rgpu_vinfo_decode(pbuf, sizeof(pbuf), &peer, err, errlen) < 0)
		goto broken;
	if (me.status) {
		snprintf(err, errlen, "verbs unavailable here: %s", me.reason);
		goto fallback;
	}
	if (peer.status) {
		snprintf(err, errlen, "verbs unavailable at the peer: %s", peer.reason);
		goto fallback;
	}
	/* Our ring geometry is fixed; the peer's tells us where to write.
	 * Control messages must fit the peer's receive buffers. */
	if (peer.ctrl_msg_size < RGPU_VERBS_CTRL_MSG || peer.ctrl_depth != RGPU_VERBS_QDEPTH) {
		me.status = 1;
		snprintf(me.reason, sizeof(me.reason), "peer queue geometry differs");
	} else {
		v->peer_ring = peer.ring_addr;
		v->peer_rkey = peer.ring_rkey;
		v->peer_slot_size = peer.slot_size;
		v->peer_ctrl_msg = peer.ctrl_msg_size;
		rgpu_vcredit_init(&v->cred, peer.ctrl_depth);
		rgpu_vring_tx_init(&v->rtx, peer.ring_slots);
		rgpu_vring_rx_init(&v->rrx, RGPU_VERBS_SLOTS);
		rgpu_vstream_init(&v->rx);
		if (connect_qps(v, &peer, why, sizeof(why)) < 0) {
			me.status = 1;
			snprintf(me.reason, sizeof(me.reason), "%s", why);
		}
	}
	/* Phase 2: after RTS on both sides (so receives are posted and the
	 * QPs can answer), each says whether it is ready. */
	uint8_t r[RGPU_VREADY_SIZE], pr[RGPU_VREADY_SIZE];
	uint32_t pst;
	char preason[RGPU_VREASON_LEN];
	rgpu_vready_encode(me.status, me.reason, r);
	if (swap(tcp, r, pr, sizeof(pr)) < 0) {
		snprintf(err, errlen, "verbs setup exchange over TCP failed: %s",
			 errno ? strerror(errno) : "connection closed");
		goto broken;
	}
	if (rgpu_vready_decode(pr, sizeof(pr), &pst, preason, err, errlen) < 0)
		goto broken;
	if (me.status || pst) {
		snprintf(err, errlen, "verbs connection failed %s: %s", me.status ? "here" : "at the peer",
			 me.status ? me.reason : preason);
		goto fallback;
	}
	v->base.tp = &verbs_transport;
	v->tcp = tcp;
	v->tcp_fd = rgpu_tcp_fd(tcp);
	snprintf(v->base.peer, sizeof(v->base.peer), "%.100s/verbs", tcp->peer);
	(void)is_server; /* the exchange is symmetric; kept for logs and future roles */
	return &v->base;
broken:
	e->code = RGPU_E_BROKEN;
	/* The TCP byte stream is no longer in step: make the caller's next
	 * use of it fail instead of reading setup bytes as frames. */
	rgpu_conn_shutdown(tcp);
	goto out;
fallback:
	e->code = RGPU_E_UNAVAILABLE;
out:
	if (v)
		destroy(v);
	return NULL;
}
