/* Scheduling policies (policy.h): pure functions. */
#include "policy.h"

#include <string.h>

int sched_policy_parse(const char *s)
{
	if (!s)
		return -1;
	if (!strcmp(s, "fair"))
		return SCHED_POL_FAIR;
	if (!strcmp(s, "las"))
		return SCHED_POL_LAS;
	if (!strcmp(s, "fifo"))
		return SCHED_POL_FIFO;
	return -1;
}

const char *sched_policy_name(int p)
{
	switch (p) {
	case SCHED_POL_FAIR: return "fair";
	case SCHED_POL_LAS: return "las";
	case SCHED_POL_FIFO: return "fifo";
	default: return "?";
	}
}

int sched_inflight_ok(uint64_t quantum, const struct sched_view *me)
{
	/* two launches always: the next is queued while one runs, so the GPU
	 * does not idle while the worker notices a completion */
	if (me->inflight < 2)
		return 1;
	uint64_t mean = me->mean_ns ? me->mean_ns : quantum;
	return mean < quantum && (uint64_t)me->inflight * mean < quantum;
}

/* What the policy compares: attained (weighted for fair), plus, past a
 * grace of a few quanta and mean kernels (a kernel queued behind another
 * tenant's waits that long in the normal course), what has been running
 * since the tenant's last completion: a kernel that never ends then counts
 * as it goes. */
static uint64_t key(int policy, uint64_t quantum, const struct sched_view *v)
{
	uint64_t grace = 4 * quantum + 4 * v->mean_ns;
	uint64_t run = v->running_ns > grace ? v->running_ns - grace : 0;
	if (policy == SCHED_POL_LAS)
		return v->episode + run < v->episode ? UINT64_MAX : v->episode + run;
	uint64_t r = sched_vtime_delta(run, v->weight);
	return v->vtime + r < v->vtime ? UINT64_MAX : v->vtime + r;
}

static uint32_t demand_of(const struct sched_view *v)
{
	return v->demand && v->demand <= 100 ? v->demand : 100;
}

int sched_may_submit(int policy, uint64_t quantum, int mps, const struct sched_view *me,
		     const struct sched_view *others, size_t n)
{
	if (policy == SCHED_POL_FIFO)
		return 1;
	/* queues stay short even alone: a tenant arriving later must not
	 * find a long queue of another's work it cannot overtake */
	if (!sched_inflight_ok(quantum, me))
		return 0;
	uint64_t mine = key(policy, quantum, me);
	uint64_t least = UINT64_MAX;
	uint32_t need = demand_of(me);
	int busy = 0;
	for (size_t i = 0; i < n; i++) {
		if (!others[i].active)
			continue;
		uint64_t v = key(policy, quantum, &others[i]);
		if (v < least)
			least = v;
		need += demand_of(&others[i]);
		busy |= others[i].inflight > 0;
	}
	if (least == UINT64_MAX) /* alone: work-conserving */
		return 1;
	/* turns under MPS when they do not fit side by side (policy.h):
	 * while another's kernels run, only a tenant a quantum behind starts
	 * (the other, a quantum ahead, stops and drains) */
	if (mps && need > 100 && busy)
		return mine < least && least - mine > quantum;
	return mine <= least || mine - least <= quantum;
}

uint32_t sched_grid_demand(uint64_t blocks, uint32_t per_sm, uint32_t sms)
{
	if (!per_sm || !sms || !blocks)
		return 100;
	uint64_t cap = (uint64_t)per_sm * sms;
	if (blocks >= cap)
		return 100;
	uint64_t pct = (blocks * 100 + cap - 1) / cap;
	return pct ? (uint32_t)pct : 1;
}

uint64_t sched_charge(uint64_t dur, uint32_t pct, uint32_t busy_pct, int mps)
{
	if (!mps) /* time-sliced: a context's events run only in its own slices */
		return dur;
	if (pct == 0 || pct > 100)
		pct = 100;
	uint32_t div = busy_pct > 100 ? busy_pct : 100;
	if (busy_pct < pct) /* (this tenant is busy: at least its own) */
		div = 100;
	return (uint64_t)((unsigned __int128)dur * pct / div);
}

uint64_t sched_vtime_delta(uint64_t charged, uint32_t weight)
{
	if (weight == 0 || weight > 100)
		weight = SCHED_WEIGHT_DEFAULT;
	return (uint64_t)((unsigned __int128)charged * 100 / weight);
}

uint64_t sched_activate_vtime(uint64_t vtime, uint64_t vmin, uint64_t quantum, uint64_t idle_ns)
{
	if (idle_ns < SCHED_REST_NS || vmin == UINT64_MAX || vmin < quantum)
		return vtime;
	uint64_t floor = vmin - quantum;
	return vtime < floor ? floor : vtime;
}

double sched_jain(const double *x, size_t n)
{
	double s = 0, s2 = 0;
	for (size_t i = 0; i < n; i++) {
		s += x[i];
		s2 += x[i] * x[i];
	}
	return n && s2 > 0 ? s * s / ((double)n * s2) : 1.0;
}
