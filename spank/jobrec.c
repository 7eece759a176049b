/* What a job was granted.  The prolog of the job's first node writes it to
 * <state_dir>/jobs/<id> (that node's epilog releases from it) and to the
 * job's AdminComment, where the job's other nodes (and `rgpu status`) read
 * it: only root and SlurmUser can set an AdminComment, so a user cannot
 * point a job at other GPUs (the servers check leases anyway). */
#include "plugin.h"

#include <inttypes.h>
#include <slurm/slurm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define AC_PREFIX "rgpu;"

static void rec_path(uint32_t job, char *buf, size_t len)
{
	snprintf(buf, len, "%s/jobs/%u", rgpu_cfg.state_dir, job);
}

/* "servers=...;gpus=...;mem=...;error=...[;waited=S][;peak=B;peak_gpu=B;
 * gpu_s=S;kernel_s=S]" */
static void rec_format(const struct rgpu_jobrec *r, char *buf, size_t len, char sep)
{
	int n = snprintf(buf, len, "servers=%s%cgpus=%s%cmem=%" PRIu64 "%cerror=%s", r->servers,
			 sep, r->gpus, sep, r->mem, sep, r->error);
	if (n > 0 && (size_t)n < len && r->waited)
		n += snprintf(buf + n, len - (size_t)n, "%cwaited=%u", sep, r->waited);
	if (n > 0 && (size_t)n < len && r->accounted)
		snprintf(buf + n, len - (size_t)n, "%cpeak=%" PRIu64 "%cpeak_gpu=%" PRIu64
			 "%cgpu_s=%.3f%ckernel_s=%.3f", sep, r->peak, sep, r->peak_max, sep,
			 (double)r->gpu_ms / 1000.0, sep, (double)r->attained_ns / 1e9);
}

static void rec_parse(char *s, char sep, struct rgpu_jobrec *r)
{
	memset(r, 0, sizeof(*r));
	char seps[3] = { sep, '\n', 0 };
	char *save = NULL;
	for (char *t = strtok_r(s, seps, &save); t; t = strtok_r(NULL, seps, &save)) {
		if (!strncmp(t, "servers=", 8))
			snprintf(r->servers, sizeof(r->servers), "%s", t + 8);
		else if (!strncmp(t, "gpus=", 5))
			snprintf(r->gpus, sizeof(r->gpus), "%s", t + 5);
		else if (!strncmp(t, "mem=", 4))
			r->mem = strtoull(t + 4, NULL, 10);
		else if (!strncmp(t, "error=", 6))
			snprintf(r->error, sizeof(r->error), "%s", t + 6);
		else if (!strncmp(t, "waited=", 7))
			r->waited = (uint32_t)strtoul(t + 7, NULL, 10);
	}
}

int rgpu_jobrec_write(uint32_t job, const struct rgpu_jobrec *r)
{
	char dir[1100], path[1200], tmp[1300];
	snprintf(dir, sizeof(dir), "%s/jobs", rgpu_cfg.state_dir);
	(void)rgpu_state_dir_ensure();
	(void)mkdir(dir, 0755);
	rec_path(job, path, sizeof(path));
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return -1;
	char buf[9000];
	rec_format(r, buf, sizeof(buf), '\n');
	fprintf(f, "%s\n", buf);
	if (fclose(f) || chmod(tmp, 0644) || rename(tmp, path)) {
		unlink(tmp);
		return -1;
	}
	return 0;
}

int rgpu_jobrec_read(uint32_t job, struct rgpu_jobrec *r)
{
	char path[1200], buf[9000];
	rec_path(job, path, sizeof(path));
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	rec_parse(buf, '\n', r);
	return 0;
}

void rgpu_jobrec_remove(uint32_t job)
{
	char path[1200];
	rec_path(job, path, sizeof(path));
	unlink(path);
}

int rgpu_jobrec_publish(uint32_t job, const struct rgpu_jobrec *r)
{
	char buf[9000];
	size_t p = (size_t)snprintf(buf, sizeof(buf), AC_PREFIX);
	rec_format(r, buf + p, sizeof(buf) - p, ';');
	job_desc_msg_t d;
	slurm_init_job_desc_msg(&d);
	d.job_id = job;
	d.admin_comment = buf;
	if (slurm_update_job(&d) != SLURM_SUCCESS) {
		slurm_error("rgpu: job %u: cannot set AdminComment: %s", job,
			    slurm_strerror(slurm_get_errno()));
		return -1;
	}
	return 0;
}

int rgpu_jobrec_fetch(uint32_t job, int wait_s, struct rgpu_jobrec *r)
{
	for (int t = 0; t <= wait_s * 2; t++) {
		job_info_msg_t *ji = NULL;
		if (slurm_load_job(&ji, job, SHOW_DETAIL) == SLURM_SUCCESS && ji &&
		    ji->record_count) {
			const char *ac = ji->job_array[0].admin_comment;
			if (ac && !strncmp(ac, AC_PREFIX, strlen(AC_PREFIX))) {
				char *s = strdup(ac + strlen(AC_PREFIX));
				slurm_free_job_info_msg(ji);
				if (!s)
					return -1;
				rec_parse(s, ';', r);
				free(s);
				return 0;
			}
			const char *lic = ji->job_array[0].licenses;
			int wants = lic && strstr(lic, "rgpu");
			slurm_free_job_info_msg(ji);
			if (!wants)
				return 1;
		} else if (ji) {
			slurm_free_job_info_msg(ji);
		}
		if (t < wait_s * 2)
			usleep(500 * 1000);
	}
	return -1;
}
