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

int sched_may_submit(int policy, uint64_t quantum, const struct sched_view *me,
		     const struct sched_view *others, size_t n)
{
	if (policy == SCHED_POL_FIFO)
		return 1;
	/* queues stay short even alone: a tenant arriving later must not
	 * find a long queue of another's work it cannot overtake */
	if (!sched_inflight_ok(quantum, me))
		return 0;
	uint64_t mine = policy == SCHED_POL_LAS ? me->episode : me->vtime;
	uint64_t least = UINT64_MAX;
	for (size_t i = 0; i < n; i++) {
		if (!others[i].active)
			continue;
		uint64_t v = policy == SCHED_POL_LAS ? others[i].episode : others[i].vtime;
		if (v < least)
			least = v;
	}
	if (least == UINT64_MAX) /* alone: work-conserving */
		return 1;
	return mine <= least || mine - least <= quantum;
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
