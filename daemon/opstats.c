/* Where a session's worker spent its time (opstats.h). */
#include "opstats.h"
#include "log.h"
#include "proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct opstats {
	uint64_t n[RGPU_OP_MAX], ns[RGPU_OP_MAX], drv_ns[RGPU_OP_MAX];
	uint64_t idle_ns;
	uint64_t spins[2][2]; /* after a sync, in a burst: ran out, caught the next call */
	uint64_t waits;       /* times the input was found empty (after any spin) */
};

struct opstats *opstats_open(void)
{
	const char *e = getenv("RGPUD_OP_STATS");
	if (!e || strcmp(e, "1"))
		return NULL;
	return calloc(1, sizeof(struct opstats));
}

void opstats_idle(struct opstats *o, uint64_t ns)
{
	if (o)
		o->idle_ns += ns;
}

void opstats_op(struct opstats *o, unsigned op, uint64_t ns)
{
	if (o && op < RGPU_OP_MAX) {
		o->n[op]++;
		o->ns[op] += ns;
	}
}

void opstats_driver(struct opstats *o, unsigned op, uint64_t ns)
{
	if (o && op < RGPU_OP_MAX)
		o->drv_ns[op] += ns;
}

void opstats_spin(struct opstats *o, int burst, int caught)
{
	if (o)
		o->spins[burst ? 1 : 0][caught ? 1 : 0]++;
}

void opstats_wait(struct opstats *o)
{
	if (o)
		o->waits++;
}

void opstats_close(struct opstats *o, const char *name)
{
	if (!o)
		return;
	/* every kind served, the longest in all first */
	char line[8192];
	size_t len = 0;
	uint64_t total = 0, calls = 0;
	for (unsigned op = 0; op < RGPU_OP_MAX; op++) {
		total += o->ns[op];
		calls += o->n[op];
	}
	for (int k = 0; k < RGPU_OP_MAX; k++) {
		unsigned best = RGPU_OP_MAX;
		for (unsigned op = 0; op < RGPU_OP_MAX; op++)
			if (o->n[op] && (best == RGPU_OP_MAX || o->ns[op] > o->ns[best]))
				best = op;
		if (best == RGPU_OP_MAX)
			break;
		int w = snprintf(line + len, sizeof(line) - len, "%s %s %llu x %.2f us",
				 k ? ";" : "", rgpu_op_name(best), (unsigned long long)o->n[best],
				 (double)o->ns[best] / 1e3 / (double)o->n[best]);
		if (w < 0 || (size_t)w >= sizeof(line) - len)
			break;
		len += (size_t)w;
		if (o->drv_ns[best]) {
			w = snprintf(line + len, sizeof(line) - len, " (driver %.2f us)",
				     (double)o->drv_ns[best] / 1e3 / (double)o->n[best]);
			if (w < 0 || (size_t)w >= sizeof(line) - len)
				break;
			len += (size_t)w;
		}
		o->n[best] = 0;
	}
	char spins[256] = "";
	for (int b = 0; b < 2; b++) {
		size_t l = strlen(spins);
		if (o->spins[b][0] + o->spins[b][1])
			snprintf(spins + l, sizeof(spins) - l, ", %s, %llu spins caught the next "
				 "call, %llu ran out", b ? "within bursts" : "after syncs",
				 (unsigned long long)o->spins[b][1], (unsigned long long)o->spins[b][0]);
	}
	if (calls)
		log_info("%s: op stats: %llu requests, %.3f s handling them, %.3f s waiting for the "
			 "client (%llu waits%s);%s", name, (unsigned long long)calls,
			 (double)total / 1e9, (double)o->idle_ns / 1e9, (unsigned long long)o->waits,
			 spins, line);
	free(o);
}

void opstats_discard(struct opstats *o)
{
	free(o);
}
