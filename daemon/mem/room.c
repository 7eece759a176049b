/*
 * The worker's side of the memory policy (see mem.h): asking the parent for
 * room, answering its questions (is the session idle? evict it), and
 * restoring an evicted session before its next GPU work.
 */
#include "mem_int.h"

#include "clock.h"
#include "gate.h"
#include "log.h"
#include "transport.h"
#include "waiter.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

/* Requests that never touch device memory: served without restoring an
 * evicted session (every other one restores it first, new ones included). */
static int needs_no_gpu(unsigned op)
{
	switch (op) {
	case RGPU_OP_HELLO:
	case RGPU_OP_DEVICE_INFO:
	case RGPU_OP_MEM_GET_INFO:
	case RGPU_OP_MEM_FREE:
	case RGPU_OP_CTX_GET_LIMIT:
	case RGPU_OP_FUNC_GET_ATTRS:
	case RGPU_OP_OCC_MAX_BLOCKS:
	case RGPU_OP_OCC_DYN_SMEM:
	case RGPU_OP_OCC_MAX_CLUSTERS:
	case RGPU_OP_MODULE_GET_FUNCTION:
	case RGPU_OP_LIBRARY_GET_KERNEL:
	case RGPU_OP_KERNEL_GET_FUNCTION:
	case RGPU_OP_LIBRARY_KERNEL_COUNT:
	case RGPU_OP_MODULE_FUNCTIONS:
	case RGPU_OP_STREAM_CREATE:
	case RGPU_OP_STREAM_QUERY:
	case RGPU_OP_EVENT_CREATE:
	case RGPU_OP_EVENT_QUERY:
	case RGPU_OP_EVENT_ELAPSED:
	case RGPU_OP_CAPTURE_STATUS:
	case RGPU_OP_SHM_ATTACH:
	case RGPU_OP_SHM_DETACH:
	case RGPU_OP_LEASE_GRANT:
	case RGPU_OP_LEASE_RELEASE:
	case RGPU_OP_LEASE_LIST:
	case RGPU_OP_SESSION_LIST:
	case RGPU_OP_SESSION_SHARE:
	case RGPU_OP_GPU_STATUS:
	case RGPU_OP_PEER_QUERY:
	case RGPU_OP_POOL_GET_ATTR:
		return 1;
	}
	return 0;
}

int mem_before_request(struct session *s, unsigned op)
{
	struct mem_state *m = s->mem;
	if (!m || !m->evicted || needs_no_gpu(op))
		return 0;
	int rc = mem_restore(s);
	if (rc)
		log_warn("%s: could not bring the session's memory back to the GPU: %s", s->name,
			 rgpud_cu_errname(D, rc));
	return rc;
}

void mem_after_request(struct session *s)
{
	if (s->mem) {
		s->mem->last_active_ns = rgpu_now_ns();
		if (s->mem->prep)
			mem_prepare_poll(s);
	}
}

int mem_session_idle(struct session *s)
{
	if (waiter_busy(s))
		return 0;
	uint64_t cur = s->cur_ctx;
	int idle = 1;
	for (uint32_t i = 0; idle && i < s->ht.n; i++) {
		const struct hentry *c = &s->ht.e[i];
		if (c->kind != HK_CTX)
			continue;
		uint64_t h = ht_id_at(&s->ht, i);
		if (mem_enter_ctx(s, h))
			continue;
		/* a capture under way is activity, and a query would end it */
		if (session_capturing(s, h)) {
			idle = 0;
			break;
		}
		if (D->cuStreamQuery(CU_STREAM_LEGACY) == CUDA_ERROR_NOT_READY ||
		    D->cuStreamQuery(CU_STREAM_PER_THREAD) == CUDA_ERROR_NOT_READY)
			idle = 0;
		for (uint32_t j = 0; idle && j < s->ht.n; j++) {
			const struct hentry *e = &s->ht.e[j];
			if (e->kind == HK_STREAM && e->ctx == h &&
			    D->cuStreamQuery(e->obj) == CUDA_ERROR_NOT_READY)
				idle = 0;
		}
	}
	if (cur)
		mem_enter_ctx(s, cur);
	return idle;
}

static void answer(uint64_t seq, unsigned gpu, uint32_t idle, uint64_t idle_ms, uint64_t bytes)
{
	struct mem_q_answer a = { .seq = seq, .idle = idle, .idle_ms = idle_ms, .bytes = bytes };
	gate_mem_send(MEMQ_ANSWER, gpu, &a, sizeof(a));
}

void mem_ctl_busy(const void *msg, size_t len)
{
	struct mem_parent_msg q;
	if (len != sizeof(q))
		return;
	memcpy(&q, msg, sizeof(q));
	if (q.op != MEMP_PREPARE) /* not answered (the parent asks again) */
		answer(q.seq, (unsigned)q.gpu, 0, 0, 0);
}

static uint64_t resident_on(struct session *s, unsigned gpu)
{
	struct mem_state *m = s->mem;
	uint64_t n = 0;
	for (size_t i = 0; m && i < m->nblocks; i++)
		if (m->blocks[i]->resident && !m->blocks[i]->plain && m->blocks[i]->dev == gpu)
			n += m->blocks[i]->len;
	return n;
}

/* A request of the parent, read from the control socket between requests. */
static void parent_request(struct session *s)
{
	uint8_t buf[256];
	ssize_t n;
	while ((n = recv(gate_ctl_fd(), buf, sizeof(buf), MSG_DONTWAIT)) < 0 && errno == EINTR)
		;
	struct mem_parent_msg q;
	if (n != (ssize_t)sizeof(q))
		return; /* nothing, or not ours: the next gate call finds out */
	memcpy(&q, buf, sizeof(q));
	if (q.rc != MEM_PARENT_MAGIC || q.gpu >= RGPUD_MAX_GPUS)
		return;
	struct mem_state *m = s->mem;
	if (q.op == MEMP_PREPARE) {
		/* an eviction is expected: host copies ahead, no answer */
		mem_prepare_start(s, (unsigned)q.gpu, q.bytes);
		return;
	}
	if (m && m->prep)
		mem_prepare_poll(s);
	int idle = mem_session_idle(s);
	uint64_t idle_ms = m ? (rgpu_now_ns() - m->last_active_ns) / 1000000 : 0;
	if (q.op == MEMP_STATE) {
		answer(q.seq, (unsigned)q.gpu, (uint32_t)idle, idle_ms, resident_on(s, (unsigned)q.gpu));
		return;
	}
	if (q.op == MEMP_EVICT) {
		uint64_t freed = 0;
		int rc = 0;
		if (idle && resident_on(s, (unsigned)q.gpu) &&
		    (rc = mem_evict_some(s, (int)q.gpu, q.bytes, &freed)) != 0) {
			log_warn("%s: eviction asked by rgpud failed: %s", s->name, rgpud_cu_errname(D, rc));
			freed = 0;
		}
		if (!idle)
			log_debug("%s: eviction asked by rgpud refused: work is queued or running",
				  s->name);
		answer(q.seq, (unsigned)q.gpu, freed > 0, idle_ms, freed);
		return;
	}
	answer(q.seq, (unsigned)q.gpu, 0, 0, 0);
}

int mem_parent_fd(struct session *s)
{
	int ctl = gate_ctl_fd();
	if (ctl < 0 || !s->mem || !s->conn || !s->conn->tp || rgpu_conn_fd(s->conn) < 0)
		return -1; /* verbs: not a descriptor to wait on; the parent's
			    * questions then time out and the session counts as busy
			    * (TCP, the Unix socket and the shared-memory queues over
			    * it have one: session_wait_client) */
	return ctl;
}

void mem_parent_input(struct session *s)
{
	parent_request(s);
}

/* A request that outranks ours waits for this session's memory while
 * this one waits for its: give ours back if nothing runs on it (the
 * allocation in progress is not mapped yet; a restore maps nothing before
 * it is admitted), and try again. */
static void give_way(struct session *s, unsigned dev)
{
	uint64_t freed = 0;
	if (mem_session_idle(s))
		mem_evict_some(s, (int)dev, 0, &freed);
}

int mem_ask_room(struct session *s, unsigned dev, uint64_t bytes)
{
	struct mem_q_room q = { .bytes = bytes };
	int rc = gate_mem_call(MEMQ_ROOM, dev, &q, sizeof(q));
	if (rc == MEM_ROOM_YIELD) {
		give_way(s, dev);
		return 1;
	}
	return rc == 0;
}

int mem_admit(struct session *s, unsigned dev, uint64_t bytes, uint64_t free)
{
	struct mem_q_admit q = { .bytes = bytes, .free = free };
	int rc = gate_mem_call(MEMQ_ADMIT, dev, &q, sizeof(q));
	if (rc == MEM_ROOM_YIELD) {
		give_way(s, dev);
		return 1;
	}
	return rc == 0 ? 0 : rc == MEM_ROOM_RETRY ? 1 : -1;
}

void mem_room_done(struct session *s, unsigned dev)
{
	struct mem_q_room q = { 0 };
	(void)s;
	gate_mem_call(MEMQ_ROOM_DONE, dev, &q, sizeof(q));
}

/* Changes smaller than this wait for the next report (each is a round
 * trip to the parent); evictions and restores always report. */
#define REPORT_STEP (64ull << 20)

static uint64_t absdiff(uint64_t a, uint64_t b) { return a > b ? a - b : b - a; }

void mem_report(struct session *s) { mem_report_if(s, 0); }

void mem_report_if(struct session *s, int force)
{
	struct mem_state *m = s->mem;
	struct mem_q_report r = { 0 };
	uint64_t ready_all = 0;
	for (size_t i = 0; m && i < m->nblocks; i++) {
		const struct mem_block *b = m->blocks[i];
		uint64_t *v = b->resident ? r.resident : r.swapped;
		if (b->dev < 8)
			v[b->dev] += b->len;
		if (b->resident)
			r.resident_all += b->len;
		else
			r.swapped_all += b->len;
		if (b->resident && !b->plain && b->shadow) {
			ready_all += b->len;
			if (b->dev < 8)
				r.ready[b->dev] += b->len;
		}
	}
	/* each measurement once: the parent averages them */
	int fresh_rate = 0;
	if (m) {
		uint64_t now[3] = { m->out_bps, m->prep_bps, m->in_bps };
		uint64_t *to[3] = { &r.out_bps, &r.prep_bps, &r.in_bps };
		for (int k = 0; k < 3; k++)
			if (now[k] != m->reported_bps[k]) {
				*to[k] = now[k];
				fresh_rate = 1;
			}
	}
	if (m && !force && !fresh_rate && absdiff(r.resident_all, m->reported[0]) < REPORT_STEP &&
	    absdiff(r.swapped_all, m->reported[1]) < REPORT_STEP &&
	    absdiff(ready_all, m->reported[2]) < REPORT_STEP &&
	    (r.resident_all == 0) == (m->reported[0] == 0))
		return;
	if (m) {
		m->reported[0] = r.resident_all;
		m->reported[1] = r.swapped_all;
		m->reported[2] = ready_all;
		m->reported_bps[0] = m->out_bps;
		m->reported_bps[1] = m->prep_bps;
		m->reported_bps[2] = m->in_bps;
	}
	gate_mem_call(MEMQ_REPORT, 0, &r, sizeof(r));
}
