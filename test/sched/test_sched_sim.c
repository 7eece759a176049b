/*
 * A deterministic simulation of the scheduling policies (daemon/sched/
 * policy.c) with synthetic tenants on a virtual clock.  The gate, the
 * in-flight bound, the charging and the activation rule are the same
 * functions rgpud's workers call; only the GPU is a model:
 *
 *  - time-sliced (no MPS): one tenant's kernels run at a time; the GPU
 *    switches to the next tenant with work after a time slice (2 ms, what
 *    a short kernel beside a flooder waited on an H100) or when the
 *    running tenant has nothing queued;
 *  - MPS: every tenant's head kernel runs at once; a kernel that needs a
 *    part `width` of the GPU gets min(width, cap) (its active thread
 *    percentage), all scaled down when they add up past the GPU.
 *
 * What a worker measures is what events would: a kernel runs from when its
 * stream reaches it (its submission, or the end of the kernel before it)
 * to its end.
 */
#include "policy.h"
#include "tap.h"

#include <math.h>

#define DT 5000ull /* ns per step */
#define NT 4
#define QMAX 64
#define TS_SLICE 2000000ull

struct tenant {
	/* workload */
	uint64_t kernel_ns; /* alone, with the whole GPU */
	double width;       /* part of the GPU the kernel can use (> 1: larger than it) */
	uint32_t weight, pct;
	int depth;          /* closed loop: kernels it keeps queued */
	int sync;           /* 1: launch one, wait for it, think, repeat */
	int batch;          /* > 0: launch that many, wait for all, think, repeat
			     * (a synchronisation after each batch) */
	uint64_t think_ns;
	uint64_t start_ns, stop_after; /* arrives at; stops after that many kernels (0: never) */
	/* state */
	double rem[QMAX];   /* remaining ns of the queued kernels (at full rate) */
	uint64_t sub[QMAX], began[QMAX];
	int q;
	uint64_t next_try;  /* sync: when it launches next */
	int in_batch;       /* batch: launched in this batch so far */
	uint64_t done, submitted;
	int waiting;
	uint64_t idle_since;
	struct sched_view v;
	uint64_t attained;
	uint64_t lat[20000];
	size_t nlat;
	uint64_t finished_at;
	uint64_t progress;  /* last completion, or the launch after idling */
};

struct sim {
	int mps, policy;
	uint64_t quantum, now;
	int n, owner;
	uint64_t slice_left;
	struct tenant t[NT];
};

/* what a worker sees of tenant j: its kernel in flight counts for the time
 * since its last completion (or its first launch) */
static struct sched_view view_of(struct sim *s, int j)
{
	struct sched_view v = s->t[j].v;
	v.running_ns = v.inflight && s->now > s->t[j].progress ? s->now - s->t[j].progress : 0;
	/* the part of the GPU its kernels need, within its thread cap (what
	 * sched_grid_demand and the worker make of a launch) */
	double w = s->t[j].width > 1 ? 1 : s->t[j].width;
	uint32_t d = (uint32_t)ceil(w * 100 - 1e-9);
	v.demand = d < s->t[j].pct ? d : s->t[j].pct;
	return v;
}

static void others_of(struct sim *s, int i, struct sched_view *o, size_t *n)
{
	*n = 0;
	for (int j = 0; j < s->n; j++)
		if (j != i)
			o[(*n)++] = view_of(s, j);
}

static uint64_t vmin_others(struct sim *s, int i)
{
	uint64_t m = UINT64_MAX;
	for (int j = 0; j < s->n; j++)
		if (j != i && s->t[j].v.active && s->t[j].v.vtime < m)
			m = s->t[j].v.vtime;
	return m;
}

static int wants(struct sim *s, struct tenant *t)
{
	if (s->now < t->start_ns || (t->stop_after && t->submitted >= t->stop_after))
		return 0;
	if (t->sync)
		return t->q == 0 && s->now >= t->next_try;
	if (t->batch) {
		if (t->in_batch == t->batch && t->q == 0 && s->now >= t->next_try)
			t->in_batch = 0; /* the sync returned: the next batch */
		return t->in_batch < t->batch;
	}
	return t->q < t->depth;
}

static void submit_phase(struct sim *s)
{
	for (int i = 0; i < s->n; i++) {
		struct tenant *t = &s->t[i];
		while (wants(s, t)) {
			struct sched_view o[NT];
			size_t no;
			if (!t->v.active) {
				/* becoming active (rgpud: the first launch after idling) */
				t->v.vtime = sched_activate_vtime(t->v.vtime, vmin_others(s, i), s->quantum,
								  s->now - t->idle_since);
				if (s->now - t->idle_since >= 5000000ull)
					t->v.episode = 0;
			}
			others_of(s, i, o, &no);
			struct sched_view mine = view_of(s, i);
			if (!sched_may_submit(s->policy, s->quantum, s->mps, &mine, o, no)) {
				t->waiting = 1;
				t->v.active = 1;
				break;
			}
			t->waiting = 0;
			t->rem[t->q] = (double)t->kernel_ns;
			t->sub[t->q] = s->now;
			t->began[t->q] = t->q || !s->mps ? 0 : s->now;
			t->q++;
			t->submitted++;
			if (t->batch && ++t->in_batch == t->batch)
				t->next_try = 0;
			if (t->v.inflight++ == 0)
				t->progress = s->now;
			t->v.active = 1;
		}
		if (!wants(s, t))
			t->waiting = 0;
	}
}

static void complete(struct sim *s, int i)
{
	struct tenant *t = &s->t[i];
	uint64_t dur = s->now - t->began[0];
	uint32_t busy = 0;
	for (int j = 0; j < s->n; j++)
		if (s->t[j].q)
			busy += s->t[j].pct;
	uint64_t c = sched_charge(dur, t->pct, busy, s->mps);
	t->attained += c;
	t->v.vtime += sched_vtime_delta(c, t->weight);
	t->v.episode += c;
	t->v.mean_ns = t->v.mean_ns ? (t->v.mean_ns * 7 + dur) / 8 : dur;
	if (t->nlat < sizeof(t->lat) / sizeof(t->lat[0]))
		t->lat[t->nlat++] = s->now - t->sub[0];
	for (int k = 1; k < t->q; k++) {
		t->rem[k - 1] = t->rem[k];
		t->sub[k - 1] = t->sub[k];
	}
	t->q--;
	t->v.inflight--;
	t->done++;
	t->progress = s->now;
	if (t->q)
		t->began[0] = s->mps ? s->now : 0;
	else {
		t->idle_since = s->now;
		t->v.active = t->waiting;
		if (t->sync || (t->batch && t->in_batch == t->batch))
			t->next_try = s->now + t->think_ns;
	}
	if (t->stop_after && t->done == t->stop_after)
		t->finished_at = s->now;
	if (getenv("SIMDBG") && t->stop_after)
		fprintf(stderr, "t=%.3f ms done %llu dur %.3f\n", s->now / 1e6, (unsigned long long)t->done, dur / 1e6);
}

static void gpu_phase(struct sim *s)
{
	double rate[NT] = { 0 };
	if (s->mps) {
		double sum = 0, alloc[NT] = { 0 };
		for (int i = 0; i < s->n; i++) {
			if (!s->t[i].q)
				continue;
			double w = s->t[i].width > 1 ? 1 : s->t[i].width;
			double cap = s->t[i].pct / 100.0;
			alloc[i] = w < cap ? w : cap;
			sum += alloc[i];
		}
		for (int i = 0; i < s->n; i++) {
			if (!s->t[i].q)
				continue;
			double a = sum > 1 ? alloc[i] / sum : alloc[i];
			double w = s->t[i].width > 1 ? 1 : s->t[i].width;
			rate[i] = a / w;
		}
	} else {
		/* time-sliced: the owner runs; switch at the end of its slice
		 * or when it has nothing queued */
		int o = s->owner;
		if (!s->t[o].q || s->slice_left == 0) {
			for (int k = 1; k <= s->n; k++) {
				int j = (o + k) % s->n;
				if (s->t[j].q) {
					if (j != o || !s->t[o].q)
						s->slice_left = TS_SLICE;
					else
						s->slice_left = TS_SLICE;
					s->owner = o = j;
					break;
				}
			}
		}
		if (s->t[o].q) {
			rate[o] = 1;
			s->slice_left = s->slice_left > DT ? s->slice_left - DT : 0;
		}
	}
	s->now += DT;
	for (int i = 0; i < s->n; i++) {
		struct tenant *t = &s->t[i];
		if (!t->q || rate[i] <= 0)
			continue;
		/* time-sliced: the start event is taken when the context runs */
		if (!t->began[0])
			t->began[0] = s->now - DT;
		t->rem[0] -= rate[i] * DT;
		if (t->rem[0] <= 0.5)
			complete(s, i);
	}
}

static void run(struct sim *s, uint64_t until)
{
	while (s->now < until) {
		submit_phase(s);
		gpu_phase(s);
	}
}

static void init(struct sim *s, int mps, int policy, int n)
{
	memset(s, 0, sizeof(*s));
	s->mps = mps;
	s->policy = policy;
	s->quantum = SCHED_QUANTUM_NS_DEFAULT;
	s->n = n;
	for (int i = 0; i < n; i++) {
		s->t[i].weight = SCHED_WEIGHT_DEFAULT;
		s->t[i].pct = 100;
		s->t[i].width = 1;
		s->t[i].depth = 8;
		s->t[i].v.weight = SCHED_WEIGHT_DEFAULT;
	}
}

static uint64_t p99(struct tenant *t)
{
	/* insertion-free: count the values above each candidate (small n) */
	size_t n = t->nlat;
	if (!n)
		return 0;
	uint64_t *v = malloc(n * sizeof(*v));
	memcpy(v, t->lat, n * sizeof(*v));
	for (size_t i = 1; i < n; i++) /* insertion sort; n <= 20000, nearly sorted */
		for (size_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
			uint64_t x = v[j];
			v[j] = v[j - 1];
			v[j - 1] = x;
		}
	uint64_t r = v[(size_t)(0.99 * (double)(n - 1))];
	free(v);
	return r;
}

/* Two tenants, kernels 10x apart, equal shares: slowdowns alike. */
static double equal_shares_jain(int mps, int policy)
{
	struct sim s;
	init(&s, mps, policy, 2);
	s.t[0].kernel_ns = 1000000;
	s.t[1].kernel_ns = 100000;
	uint64_t T = 2000000000ull;
	run(&s, T);
	double sd[2];
	for (int i = 0; i < 2; i++) {
		double alone = (double)T / (double)s.t[i].kernel_ns;
		sd[i] = alone / (double)(s.t[i].done ? s.t[i].done : 1);
	}
	diag("policy %s %s: slowdowns %.2f %.2f", sched_policy_name(policy), mps ? "MPS" : "time-sliced",
	     sd[0], sd[1]);
	return sched_jain(sd, 2);
}

/* Shares 3:1: attained GPU time ratio. */
static double shares_ratio(int mps, int policy, double *real)
{
	struct sim s;
	init(&s, mps, policy, 2);
	s.t[0].kernel_ns = 1000000;
	s.t[1].kernel_ns = 300000;
	s.t[0].weight = s.t[0].v.weight = 75;
	s.t[1].weight = s.t[1].v.weight = 25;
	if (mps) {
		s.t[0].pct = 75;
		s.t[1].pct = 25;
	}
	run(&s, 2000000000ull);
	/* the GPU time each really had: kernels done x their alone time */
	*real = (double)(s.t[0].done * s.t[0].kernel_ns) / (double)(s.t[1].done * s.t[1].kernel_ns);
	double r = (double)s.t[0].attained / (double)(s.t[1].attained ? s.t[1].attained : 1);
	diag("policy %s %s: attained %.3f / %.3f s, ratio %.2f (kernels' work ratio %.2f)",
	     sched_policy_name(policy), mps ? "MPS" : "time-sliced", s.t[0].attained / 1e9,
	     s.t[1].attained / 1e9, r, *real);
	return r;
}

/* A short-kernel tenant (launch, wait, think) beside a flooder whose grids
 * are larger than the GPU: the short one's p99 latency. */
static uint64_t short_beside_flooder(int mps, int policy, int flooder)
{
	struct sim s;
	init(&s, mps, policy, flooder ? 2 : 1);
	struct tenant *sh = &s.t[0];
	sh->kernel_ns = 20000;
	sh->width = 0.125;
	sh->sync = 1;
	sh->think_ns = 200000;
	if (mps) {
		sh->pct = 25;
		sh->weight = sh->v.weight = 25;
	}
	if (flooder) {
		struct tenant *f = &s.t[1];
		f->kernel_ns = 16 * 1000000ull;
		f->width = 16;
		if (mps) {
			f->pct = 75;
			f->weight = f->v.weight = 75;
		}
	}
	run(&s, 1000000000ull);
	uint64_t p = p99(sh);
	diag("policy %s %s, %s: short kernel p99 %.1f us over %zu kernels", sched_policy_name(policy),
	     mps ? "MPS" : "time-sliced", flooder ? "beside a flooder" : "alone", p / 1e3, sh->nlat);
	return p;
}

/* A long-running tenant, and one that starts a short episode of 20 kernels
 * later: when does the episode end (ns after it began)? */
static uint64_t short_episode(int policy)
{
	struct sim s;
	init(&s, 0, policy, 2);
	s.t[0].kernel_ns = 1000000;
	s.t[1].kernel_ns = 1000000;
	s.t[1].depth = 2;
	s.t[1].start_ns = 300000000ull;
	s.t[1].stop_after = 20;
	run(&s, 600000000ull);
	uint64_t d = s.t[1].finished_at ? s.t[1].finished_at - s.t[1].start_ns : UINT64_MAX;
	diag("policy %s: a 20 ms episode beside a long-running tenant took %.1f ms",
	     sched_policy_name(policy), d / 1e6);
	return d;
}

int main(void)
{
	/* the pure parts */
	ok(sched_policy_parse("fair") == SCHED_POL_FAIR && sched_policy_parse("las") == SCHED_POL_LAS &&
	   sched_policy_parse("fifo") == SCHED_POL_FIFO && sched_policy_parse("FAIR") < 0 &&
	   sched_policy_parse("") < 0 && sched_policy_parse(NULL) < 0, "policy names");
	is_u64(sched_charge(1000, 100, 200, 0), 1000, "time-sliced: what the events measured");
	is_u64(sched_charge(1000, 25, 100, 1), 250, "MPS 25%%: a quarter");
	is_u64(sched_charge(1000, 75, 150, 1), 500, "MPS oversubscribed 75 of 150: half");
	is_u64(sched_vtime_delta(1000, 25), 4000, "weight 25: vtime runs 4x");
	is_u64(sched_activate_vtime(10, 5000000, 2000000, SCHED_REST_NS), 3000000,
	       "idle credit bounded to a quantum after a rest");
	is_u64(sched_activate_vtime(10, 5000000, 2000000, 100000), 10, "a short pause keeps its history");
	is_u64(sched_activate_vtime(9000000, 5000000, 2000000, SCHED_REST_NS), 9000000,
	       "no credit taken away");
	struct sched_view me = { .active = 1, .vtime = 5000000, .inflight = 0 };
	struct sched_view other = { .active = 1, .vtime = 1000000 };
	ok(!sched_may_submit(SCHED_POL_FAIR, 2000000, 0, &me, &other, 1), "fair: too far ahead waits");
	ok(sched_may_submit(SCHED_POL_FIFO, 2000000, 0, &me, &other, 1), "fifo: never waits");
	other.active = 0;
	ok(sched_may_submit(SCHED_POL_FAIR, 2000000, 0, &me, &other, 1), "fair: work-conserving");
	other.active = 1;
	me.vtime = 500000;
	me.inflight = 2;
	me.mean_ns = 1000000;
	ok(!sched_may_submit(SCHED_POL_FAIR, 2000000, 0, &me, &other, 1), "in-flight bound: 2 x 1 ms >= 2 ms");
	other.active = 0;
	ok(!sched_may_submit(SCHED_POL_FAIR, 2000000, 0, &me, &other, 1), "  even alone");
	other.active = 1;
	me.inflight = 1;
	ok(sched_may_submit(SCHED_POL_FAIR, 2000000, 0, &me, &other, 1), "behind and within the bound");
	double j1[2] = { 1, 1 }, j2[2] = { 1, 3 };
	ok(fabs(sched_jain(j1, 2) - 1) < 1e-9 && fabs(sched_jain(j2, 2) - 0.8) < 1e-9, "Jain");

	/* under MPS, demand decides: tenants that fit side by side never
	 * wait, whatever their history; past the GPU they take turns */
#define MPS_GATE(me, other) sched_may_submit(SCHED_POL_FAIR, 2000000, 1, me, other, 1)
#define TS_GATE(me, other) sched_may_submit(SCHED_POL_FAIR, 2000000, 0, me, other, 1)
	{
		struct sched_view a = { .active = 1, .weight = 100, .vtime = 9000000, .demand = 30 };
		struct sched_view b = { .active = 1, .weight = 100, .inflight = 1, .vtime = 0,
					.demand = 30 };
		ok(!MPS_GATE(&a, &b), "MPS: 30%% beside 30%% in flight, far ahead: waits (fair's rule)");
		a.vtime = 1000000;
		ok(MPS_GATE(&a, &b), "  within a quantum: side by side");
		ok(TS_GATE(&a, &b), "  (time-sliced the same)");
		a.vtime = 9000000;
		a.demand = b.demand = 75;
		ok(!MPS_GATE(&a, &b), "MPS: 75%% beside 75%% in flight: the one ahead waits");
		a.vtime = 1000000;
		ok(!MPS_GATE(&a, &b), "  even within a quantum (turns)");
		a.vtime = 0;
		ok(!MPS_GATE(&a, &b), "  level with the one in flight: waits for its turn to end");
		b.vtime = 3000000;
		ok(MPS_GATE(&a, &b), "  a quantum behind it: goes (the other stops and drains)");
		b.inflight = 0; /* b waits for its turn */
		a.vtime = 9000000;
		b.vtime = 0;
		ok(!MPS_GATE(&a, &b), "  nothing in flight, far ahead of a waiting one: waits");
		a.vtime = 1000000;
		ok(MPS_GATE(&a, &b), "  within a quantum of it: goes (its turn)");
		b.inflight = 1;
		b.vtime = 0;
		a.vtime = 9000000;
		b.demand = 0;
		a.demand = 1;
		ok(!MPS_GATE(&a, &b), "  an unknown demand counts as the whole GPU");
		is_u64(sched_grid_demand(132, 8, 132), 13, "a grid of 132 blocks, 8 per SM on 132 SMs: 13%%");
		is_u64(sched_grid_demand(1056, 8, 132), 100, "  1056 blocks: all of it");
		is_u64(sched_grid_demand(1, 8, 132), 1, "  one block: 1%%");
		is_u64(sched_grid_demand(5000, 0, 132), 100, "  occupancy unknown: all of it");
	}
	{
		/* four tenants of an eighth of the GPU each, capped at 75%: side
		 * by side as without the gate */
		uint64_t done[2];
		for (int pol = 0; pol < 2; pol++) {
			struct sim sm;
			init(&sm, 1, pol ? SCHED_POL_FAIR : SCHED_POL_FIFO, 4);
			for (int i = 0; i < 4; i++) {
				sm.t[i].kernel_ns = 500000;
				sm.t[i].width = 0.125;
				sm.t[i].pct = 75;
			}
			run(&sm, 500000000ull);
			done[pol] = 0;
			for (int i = 0; i < 4; i++)
				done[pol] += sm.t[i].done;
		}
		ok(done[1] >= done[0] * 98 / 100,
		   "MPS, four 1/8 tenants capped at 75%%: fair runs %llu kernels, ungated %llu",
		   (unsigned long long)done[1], (unsigned long long)done[0]);
		/* two full-grid tenants capped at 75%, kernels 10x apart: turns,
		 * not side by side; equal GPU time */
		struct sim sm;
		init(&sm, 1, SCHED_POL_FAIR, 2);
		sm.t[0].kernel_ns = 1000000;
		sm.t[1].kernel_ns = 100000;
		sm.t[0].pct = sm.t[1].pct = 75;
		uint64_t both = 0, any = 0;
		while (sm.now < 1000000000ull) {
			submit_phase(&sm);
			if (sm.t[0].q && sm.t[1].q)
				both++;
			if (sm.t[0].q || sm.t[1].q)
				any++;
			gpu_phase(&sm);
		}
		double att[2] = { (double)sm.t[0].attained, (double)sm.t[1].attained };
		ok((double)both / (double)any < 0.5,
		   "MPS, two full-grid tenants at 75%%: both in flight %.0f%% of the busy time (turns)",
		   100.0 * (double)both / (double)any);
		ok(sched_jain(att, 2) >= 0.97, "  attained %.3f s and %.3f s (Jain %.3f)", att[0] / 1e9,
		   att[1] / 1e9, sched_jain(att, 2));
		/* the same pair with weights 75:25: turns keep the 3:1 */
		init(&sm, 1, SCHED_POL_FAIR, 2);
		for (int i = 0; i < 2; i++) {
			sm.t[i].kernel_ns = 2000000;
			sm.t[i].pct = 75;
		}
		sm.t[0].weight = sm.t[0].v.weight = 75;
		sm.t[1].weight = sm.t[1].v.weight = 25;
		run(&sm, 3000000000ull);
		double r = (double)sm.t[0].attained / (double)sm.t[1].attained;
		ok(fabs(r / 3 - 1) <= 0.10, "  weights 75:25 taking turns: attained ratio %.2f", r);
	}

	/* equal shares, kernels 10x apart */
	double j = equal_shares_jain(0, SCHED_POL_FAIR);
	ok(j >= 0.97, "fair, time-sliced: Jain %.3f >= 0.97", j);
	j = equal_shares_jain(1, SCHED_POL_FAIR);
	ok(j >= 0.97, "fair, MPS: Jain %.3f >= 0.97", j);

	/* shares 3:1 */
	double real;
	double r = shares_ratio(0, SCHED_POL_FAIR, &real);
	ok(fabs(r / 3 - 1) <= 0.10, "fair, time-sliced, 3:1: attained ratio %.2f within 10%% of 3", r);
	/* (time-sliced, a kernel preempted by a time slice is charged the
	 * slice too: docs/sharing.md) */
	ok(real > 2.4, "  and the kernels' work split %.2f (at least 2.4)", real);
	r = shares_ratio(1, SCHED_POL_FAIR, &real);
	ok(fabs(r / 3 - 1) <= 0.10, "fair, MPS 75/25: attained ratio %.2f within 10%% of 3", r);
	ok(fabs(real / 3 - 1) <= 0.10, "  and the kernels' work split %.2f", real);
	r = shares_ratio(0, SCHED_POL_FIFO, &real);
	ok(fabs(real - 1) <= 0.15, "fifo ignores shares: the work split %.2f (about 1)", real);

	/* a short-kernel tenant beside a flooder */
	uint64_t alone = short_beside_flooder(1, SCHED_POL_FAIR, 0);
	uint64_t mps = short_beside_flooder(1, SCHED_POL_FAIR, 1);
	ok(mps <= 2 * alone, "MPS with shares as thread caps: p99 %.1f us <= 2x alone (%.1f us)",
	   mps / 1e3, alone / 1e3);
	uint64_t ts = short_beside_flooder(0, SCHED_POL_FAIR, 1);
	ok(ts <= TS_SLICE + 2 * alone, "time-sliced, fair: p99 %.1f us bounded by a time slice",
	   ts / 1e3);

	/* a tenant whose kernel never ends holds no one back for ever */
	{
		struct sched_view hung = { .active = 1, .weight = 100, .inflight = 1, .vtime = 0,
					   .running_ns = 0 };
		struct sched_view late = { .active = 1, .weight = 100, .vtime = 10000000,
					   .episode = 10000000 };
		ok(!sched_may_submit(SCHED_POL_FAIR, 2000000, 0, &late, &hung, 1),
		   "fair: far ahead of a tenant that just launched: waits");
		hung.running_ns = 9000000;
		ok(!sched_may_submit(SCHED_POL_FAIR, 2000000, 0, &late, &hung, 1),
		   "  its kernel running 9 ms is in the grace (4 quanta)");
		hung.running_ns = 19000000;
		ok(sched_may_submit(SCHED_POL_FAIR, 2000000, 0, &late, &hung, 1),
		   "  running 19 ms counts past the grace: goes");
		ok(sched_may_submit(SCHED_POL_LAS, 2000000, 0, &late, &hung, 1), "las: the same");
		ok(!sched_may_submit(SCHED_POL_FAIR, 2000000, 1, &late, &hung, 1),
		   "  under MPS, taking turns, it waits a quantum longer");
		hung.running_ns = 25000000;
		ok(sched_may_submit(SCHED_POL_FAIR, 2000000, 1, &late, &hung, 1),
		   "  and goes at 25 ms");
		hung.running_ns = 19000000;
		hung.running_ns = 0;
		ok(!sched_may_submit(SCHED_POL_LAS, 2000000, 0, &late, &hung, 1), "  (las waits otherwise)");
	}

	/* las favours short episodes */
	uint64_t e_las = short_episode(SCHED_POL_LAS), e_fair = short_episode(SCHED_POL_FAIR);
	ok(e_las <= 23000000ull, "las: the 20 ms episode ends in %.1f ms (<= 23)", e_las / 1e6);
	ok(e_las * 4 < e_fair * 3, "las ends it sooner than fair (%.1f ms)", e_fair / 1e6);
	return tap_done();
}
