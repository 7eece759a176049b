/* The shared segment: helpers both sides use. */
#include "seg.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

void sched_seg_wake(struct sched_seg *g, unsigned gpu)
{
	atomic_fetch_add(&g->gen[gpu], 1);
	syscall(SYS_futex, &g->gen[gpu], FUTEX_WAKE, 0x7fffffff, NULL, NULL, 0);
}

void sched_seg_wait(struct sched_seg *g, unsigned gpu, uint32_t seen, uint64_t timeout_ns)
{
	struct timespec ts = { (time_t)(timeout_ns / 1000000000ull),
			       (long)(timeout_ns % 1000000000ull) };
	/* (EAGAIN: it moved already; EINTR, ETIMEDOUT: look again) */
	syscall(SYS_futex, &g->gen[gpu], FUTEX_WAIT, seen, &ts, NULL, 0);
}

void sched_slot_view(struct sched_slot *s, uint64_t now, struct sched_view *v)
{
	uint64_t beat = atomic_load(&s->beat);
	v->weight = atomic_load(&s->weight);
	v->inflight = atomic_load(&s->inflight);
	v->vtime = atomic_load(&s->vtime);
	v->episode = atomic_load(&s->episode);
	v->mean_ns = atomic_load(&s->mean);
	v->demand = atomic_load(&s->demand);
	uint64_t prog = atomic_load(&s->progress);
	v->running_ns = v->inflight && prog && now > prog ? now - prog : 0;
	int alive = beat && (now < beat || now - beat < SCHED_STALE_NS);
	v->active = alive && (v->inflight > 0 || atomic_load(&s->waiting));
}
