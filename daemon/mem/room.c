/*
 * The worker's side of the memory policy (see mem.h): asking the parent for
 * room, answering its questions (is the session idle? evict it), and
 * restoring an evicted session before its next GPU work.
 */
#include "mem_int.h"

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
	if (s->mem)
		s->mem->last_active_ns = mem_now_ns();
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
		uint64_t h = ((uint64_t)c->gen << 32) | (i + 1);
		if (mem_enter_ctx(s, h))
			continue;
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
	int idle = mem_session_idle(s);
	uint64_t idle_ms = m ? (mem_now_ns() - m->last_active_ns) / 1000000 : 0;
	if (q.op == MEMP_STATE) {
		answer(q.seq, (unsigned)q.gpu, (uint32_t)idle, idle_ms, resident_on(s, (unsigned)q.gpu));
		return;
	}
	if (q.op == MEMP_EVICT) {
		uint64_t freed = 0;
		if (idle && resident_on(s, (unsigned)q.gpu) && mem_evict(s, &freed) != 0)
			freed = 0;
		answer(q.seq, (unsigned)q.gpu, freed > 0, idle_ms, freed);
		return;
	}
	answer(q.seq, (unsigned)q.gpu, 0, 0, 0);
}

int mem_parent_fd(struct session *s)
{
	int ctl = gate_ctl_fd();
	if (ctl < 0 || !s->mem || !s->conn || !s->conn->tp ||
	    (strcmp(s->conn->tp->name, "tcp") && strcmp(s->conn->tp->name, "unix")))
		return -1; /* verbs: not a descriptor to wait on; the parent's
			    * questions then time out and the session counts as busy */
	return ctl;
}

void mem_parent_input(struct session *s)
{
	parent_request(s);
}

int mem_ask_room(struct session *s, unsigned dev, uint64_t bytes)
{
	struct mem_q_room q = { .bytes = bytes };
	(void)s;
	return gate_mem_call(MEMQ_ROOM, dev, &q, sizeof(q)) == 0;
}

void mem_room_done(struct session *s, unsigned dev)
{
	struct mem_q_room q = { 0 };
	(void)s;
	gate_mem_call(MEMQ_ROOM_DONE, dev, &q, sizeof(q));
}

void mem_report(struct session *s)
{
	struct mem_state *m = s->mem;
	struct mem_q_report r = { 0 };
	for (size_t i = 0; m && i < m->nblocks; i++) {
		const struct mem_block *b = m->blocks[i];
		uint64_t *v = b->resident ? r.resident : r.swapped;
		if (b->dev < 8)
			v[b->dev] += b->len;
		if (b->resident)
			r.resident_all += b->len;
		else
			r.swapped_all += b->len;
	}
	gate_mem_call(MEMQ_REPORT, 0, &r, sizeof(r));
}
