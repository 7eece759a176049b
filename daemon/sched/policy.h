/*
 * Scheduling policies for the tenants of one GPU: pure functions, no
 * clocks, no shared memory, so the same code gates real launches (gate.c)
 * and runs in the deterministic simulation (test/sched/test_sched_sim.c).
 *
 * A tenant is one session's use of one GPU.  What the policies see of it:
 *   - weight: its compute share (percent, 1..100);
 *   - attained: GPU time charged to it so far (ns; see sched_charge);
 *   - vtime: attained scaled by 100/weight (fair's virtual time);
 *   - episode: attained since it last went idle (las);
 *   - active: it has work in flight or waits at the gate.
 *
 * fair: weighted fair queueing on attained time.  A tenant may submit while
 *   its vtime is at most the smallest vtime of the other active tenants
 *   plus one quantum; the one furthest behind may always submit, so the
 *   gate cannot deadlock.  History: vtime keeps what a long kernel overran,
 *   and the tenant waits it off later.  Work-conserving: idle tenants do
 *   not count; one coming back is credited at most one quantum below the
 *   others (sched_activate), so idling banks no unbounded credit.
 * las: least attained service: the same rule on episode (unweighted), so a
 *   tenant starting a short episode runs ahead of long-running ones.
 * fifo: no gate (the driver's own time-slicing, rgpud's old behaviour).
 *
 * Under MPS (fair and las) tenants' kernels run side by side, each within
 *   its active thread percentage, and the rule above lets them (within a
 *   quantum of each other) while the parts of the GPU their kernels need
 *   (demand: the grid against what the GPU holds resident, capped by the
 *   percentage) add up to at most all of it.  Past that they contend for
 *   the same SMs, and a kernel that fills its share keeps the other's
 *   blocks waiting for SMs (on an H100 with shares of 75%, two full-grid
 *   tenants with kernels 10x apart side by side had a Jain index of 0.79);
 *   then they take turns: while another's kernels are in flight a tenant
 *   starts only a quantum behind it, and the one ahead stops and drains.
 *
 * Besides the policy (fair and las; not fifo), a tenant keeps at most one
 * quantum of estimated work, or two launches, in flight (sched_inflight_ok):
 * work queued in the GPU cannot be taken back, so queues must stay short
 * for the gate to act.
 */
#ifndef RGPUD_SCHED_POLICY_H
#define RGPUD_SCHED_POLICY_H

#include <stddef.h>
#include <stdint.h>

enum sched_policy { SCHED_POL_FIFO = 0, SCHED_POL_FAIR = 1, SCHED_POL_LAS = 2 };

#define SCHED_QUANTUM_NS_DEFAULT (2000000ull) /* 2 ms of GPU time */
#define SCHED_WEIGHT_DEFAULT 100u            /* no --rgpu-share: a whole GPU's */

struct sched_view {
	int active;
	uint32_t weight;
	uint32_t inflight;   /* launches not yet complete */
	uint64_t vtime;      /* ns at weight 100 */
	uint64_t episode;    /* ns since it last went idle */
	uint64_t mean_ns;    /* its kernels' mean duration (0: unknown) */
	uint64_t running_ns; /* work in flight since its last completion: past a
			      * grace it counts provisionally, so a kernel that
			      * never ends cannot hold the others back for ever */
	uint32_t demand;     /* MPS: percent of the GPU its (next or last)
			      * kernel needs, 1..100 (0: unknown, counts 100) */
};

/* "fair", "las", "fifo" -> the policy, or -1. */
int sched_policy_parse(const char *s);
const char *sched_policy_name(int p);

/* Whether tenant me may submit now, given the others of its GPU (me not
 * among them).  quantum: ns; mps: kernels run side by side (demand
 * counts). */
int sched_may_submit(int policy, uint64_t quantum, int mps, const struct sched_view *me,
		     const struct sched_view *others, size_t n);

/* The part of a GPU (percent, 1..100) a grid of blocks needs, the GPU
 * holding per_sm such blocks on each of its sms SMs at once (the driver's
 * occupancy); 100 when either is unknown (0). */
uint32_t sched_grid_demand(uint64_t blocks, uint32_t per_sm, uint32_t sms);

/* Whether one more launch keeps me's work in flight within a quantum (or
 * two launches). */
int sched_inflight_ok(uint64_t quantum, const struct sched_view *me);

/* GPU time to charge for a kernel whose events measured dur ns.
 * Time-sliced (mps 0): dur itself (a context's events are taken while it
 * holds the GPU, so what they measure is its own time, give or take a
 * slice a long kernel was preempted for).  Under MPS (mps 1) kernels of
 * several tenants run at once: its part of the GPU, pct (its active thread
 * percentage), scaled down when the tenants with work in flight then
 * (busy_pct: the sum of their pct, this one's included) oversubscribe it. */
uint64_t sched_charge(uint64_t dur, uint32_t pct, uint32_t busy_pct, int mps);

/* vtime advance for charged ns at weight (1..100). */
uint64_t sched_vtime_delta(uint64_t charged, uint32_t weight);

/* A tenant becomes active after being idle for idle_ns: after a real rest
 * (SCHED_REST_NS or more) its vtime is raised to at most one quantum below
 * the smallest vtime of the other active tenants (no unbounded credit for
 * idling); after a short pause (a synchronisation between launches) it
 * keeps its history, so what others ran meanwhile is paid back.  vmin:
 * that smallest vtime, or UINT64_MAX when no other tenant is active. */
#define SCHED_REST_NS (5ull * 1000000)
uint64_t sched_activate_vtime(uint64_t vtime, uint64_t vmin, uint64_t quantum, uint64_t idle_ns);

/* Jain's fairness index of x[0..n-1] (1 = all equal). */
double sched_jain(const double *x, size_t n);

#endif
