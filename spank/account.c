/*
 * Accounting: a job's peak device memory and GPU time, from its servers
 * (LEASE_STATS), recorded where `scontrol show job` (and sacct, with
 * slurmdbd) reads them: the job's AdminComment.  Slurm refuses to update a
 * job that has finished, so this runs at the end of each step on the
 * job's first node (slurmstepd, as root), while the job still runs; the
 * last step's record stands.  The epilog logs the final figures.
 */
#include "plugin.h"
#include "lease_rpc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rgpu_account(uint32_t job, struct rgpu_jobrec *rec)
{
	char *list = strdup(rec->servers), *save = NULL;
	char done[4096] = ",";
	int ok = 0, failed = 0;
	uint64_t sum = 0, max = 0, ms = 0, ns = 0;
	for (char *e = list ? strtok_r(list, ",", &save) : NULL; e;
	     e = strtok_r(NULL, ",", &save)) {
		char *slash = strrchr(e, '/'), *colon;
		if (slash)
			*slash = '\0';
		char key[300];
		snprintf(key, sizeof(key), ",%s,", e);
		if (strstr(done, key))
			continue; /* one query per server covers its GPUs */
		strncat(done, e + 0, sizeof(done) - strlen(done) - 2);
		strcat(done, ",");
		colon = strrchr(e, ':');
		unsigned port = colon ? (unsigned)atoi(colon + 1) : rgpu_cfg.port;
		if (colon)
			*colon = '\0';
		char why[512];
		struct rg_stat st[64];
		size_t n = 0;
		struct rg_conn *c = rg_connect(e, port, 0, rgpu_cfg.timeout_ms, why, sizeof(why));
		if (!c || rg_lease_stats(c, job, st, 64, &n, why, sizeof(why))) {
			slurm_info("rgpu: job %u: no accounting from %s: %s", job, e, why);
			failed = 1;
		} else {
			for (size_t k = 0; k < n; k++) {
				sum += st[k].peak;
				if (st[k].peak > max)
					max = st[k].peak;
				ms += st[k].held_ms;
				ns += st[k].attained_ns;
			}
			ok = 1;
		}
		rg_close(c);
	}
	free(list);
	if (!ok)
		return -1;
	rec->accounted = 1;
	rec->peak = sum;
	rec->peak_max = max;
	rec->gpu_ms = ms;
	rec->attained_ns = ns;
	return failed ? -1 : 0;
}
