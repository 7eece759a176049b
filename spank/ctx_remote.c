/* slurmstepd, before the tasks start: the environment that makes the job's
 * CUDA programs use its remote GPUs.  Every step of the job, on every node,
 * gets the same GPUs (allocated once per job by the prolog). */
#include "plugin.h"

#include <slurm/slurm.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* Seconds a step on another node waits for the first node's prolog. */
#define FETCH_WAIT_S 60

/* The step's job and its rgpu record on this node (this node's name set
 * for the configuration first): 0 when there is one. */
static int job_record(spank_t sp, uint32_t *job, struct rgpu_jobrec *rec)
{
	*job = 0;
	if (spank_get_item(sp, S_JOB_ID, job) != ESPANK_SUCCESS)
		return -1;
	char node[256];
	if (spank_getenv(sp, "SLURMD_NODENAME", node, sizeof(node)) == ESPANK_SUCCESS)
		rgpu_cfg_set_node(node);
	return rgpu_jobrec_read(*job, rec) ? -1 : 0;
}

int rgpu_remote_user_init(spank_t sp)
{
	uint32_t job;
	struct rgpu_jobrec rec;
	if (job_record(sp, &job, &rec))
		return 0; /* the prolog found no rgpu request */
	if (!strcmp(rec.error, "pending")) {
		int rc = rgpu_jobrec_fetch(job, FETCH_WAIT_S, &rec);
		if (rc == 1)
			return 0;
		if (rc < 0) {
			slurm_error("rgpu: job %u: the job's first node published no GPUs", job);
			return -1;
		}
	}
	if (rec.error[0]) {
		slurm_error("rgpu: job %u has no GPUs: %s", job, rec.error);
		return -1;
	}
	char v[64], old[8192], ld[9300];
	spank_setenv(sp, "RGPU_SERVERS", rec.servers, 1);
	/* where a session may be recovered when its server dies (client/
	 * standby.c): the job's own GPUs (a restarted rgpud takes its sessions
	 * back), then the administrator's pool; a user's own setting stays */
	char sb[sizeof(rec.servers) + sizeof(rgpu_cfg.standby) + 2];
	snprintf(sb, sizeof(sb), "%s%s%s", rec.servers, rgpu_cfg.standby[0] ? "," : "",
		 rgpu_cfg.standby);
	spank_setenv(sp, "RGPU_STANDBY", sb, 0);
	/* Slurm node names of the same devices, for `rgpu status`. */
	spank_setenv(sp, "RGPU_NODES", rec.gpus, 1);
	snprintf(v, sizeof(v), "%u", job);
	spank_setenv(sp, "RGPU_JOB_ID", v, 1);
	if (rec.mem) {
		snprintf(v, sizeof(v), "%" PRIu64, rec.mem);
		spank_setenv(sp, "RGPU_MEM", v, 1);
	}
	if (spank_getenv(sp, "LD_LIBRARY_PATH", old, sizeof(old)) != ESPANK_SUCCESS)
		old[0] = '\0';
	size_t n = strlen(rgpu_cfg.client_dir);
	/* A step inherits the batch script's variable: prefix only once. */
	if (!strncmp(old, rgpu_cfg.client_dir, n) && (old[n] == ':' || old[n] == '\0'))
		return 0;
	snprintf(ld, sizeof(ld), "%s%s%s", rgpu_cfg.client_dir, old[0] ? ":" : "", old);
	spank_setenv(sp, "LD_LIBRARY_PATH", ld, 1);
	return 0;
}

/* slurmstepd (root), a step ended: on the job's first node (the one with
 * the complete record), record the job's peak memory and GPU time so far
 * in its AdminComment, while Slurm still lets it be updated. */
int rgpu_remote_exit(spank_t sp)
{
	uint32_t job;
	struct rgpu_jobrec rec;
	if (job_record(sp, &job, &rec) || rec.error[0] || !rec.servers[0])
		return 0;
	if (rgpu_account(job, &rec) == 0 || rec.accounted)
		rgpu_jobrec_publish(job, &rec);
	/* The batch script's end is the job's end (Slurm ends its other
	 * steps): give the GPUs back now rather than in the epilog, which
	 * runs after Slurm has already freed the job's license, so the next
	 * job's prolog would find them still leased and wait. */
	uint32_t step = 0;
	if (spank_get_item(sp, S_JOB_STEPID, &step) == ESPANK_SUCCESS &&
	    step == SLURM_BATCH_SCRIPT) {
		rgpu_release(job, &rec);
		if (rgpu_jobrec_write(job, &rec))
			slurm_info("rgpu: job %u: cannot rewrite its record", job);
	}
	return 0;
}
