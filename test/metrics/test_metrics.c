/*
 * The metrics table and its exposition (daemon/metrics.c), without HTTP:
 * label values are escaped as the Prometheus text format wants; sessions,
 * memory and GPU time add up per (job, GPU) and go back to 0 when sessions
 * end; refusal reasons beyond the table's size are counted as "other";
 * every metric has HELP and TYPE lines.
 */
#include "access.h"
#include "lease.h"
#include "metrics.h"
#include "../unit/tap.h"

#include <sys/wait.h>
#include <time.h>

static int has(const char *text, const char *line)
{
	const char *p = text;
	size_t n = strlen(line);
	while ((p = strstr(p, line))) {
		if ((p == text || p[-1] == '\n') && (p[n] == '\n' || p[n] == '\0'))
			return 1;
		p += n;
	}
	return 0;
}

int main(void)
{
	char out[64];
	metrics_escape("a\\b\"c\nd", out, sizeof(out));
	ok(!strcmp(out, "a\\\\b\\\"c\\nd"), "backslash, quote and newline escaped: %s", out);
	ok(metrics_escape("abc\"", out, 3) == 5 && !strcmp(out, "ab"),
	   "escape truncates within the buffer and returns the length needed");

	char err[256];
	ok(rgpud_lease_init(NULL, time(NULL), err, sizeof(err)) == 0, "lease table (no state)");
	rgpud_lease_set_gpu(0, "GPU \"zero\"\\\n", 1u << 30);

	struct rgpud_principal a = { .job_id = 41 }, b = { .job_id = 42 };
	struct metrics_session *s1 = metrics_session_open(&a);
	struct metrics_session *s2 = metrics_session_open(&a);
	struct metrics_session *s3 = metrics_session_open(&b);
	metrics_session_gpu(s1, 0);
	metrics_session_gpu(s1, 0); /* once per session */
	metrics_session_gpu(s2, 0);
	metrics_session_gpu(s3, 1);
	metrics_session_charge(s1, 0, 1000);
	metrics_session_charge(s2, 0, 24);
	metrics_session_refund(s1, 0, 500);
	metrics_session_charge(s3, 1, 7);
	metrics_session_refund(s3, 1, 8); /* more than it holds: clamped */
	metrics_conn_accepted();
	for (int i = 0; i < 40; i++) {
		static char words[40][8];
		snprintf(words[i], sizeof(words[i]), "w%d", i);
		metrics_refused(words[i]);
	}
	metrics_refused("w0");
	metrics_worker_exit(SIGSEGV);         /* a crash */
	metrics_worker_exit(SIGKILL);         /* rgpud's own kill: not a crash */
	metrics_worker_exit(3 << 8);          /* exit status 3 */

	size_t len;
	char *t = metrics_render(&len);
	ok(t && strlen(t) == len, "rendered (%zu bytes)", len);
	if (!t)
		return tap_done();
	ok(has(t, "rgpud_gpu_memory_total_bytes{gpu=\"0\",name=\"GPU \\\"zero\\\"\\\\\\n\"} 1073741824"),
	   "a GPU name with quote, backslash and newline is escaped");
	ok(has(t, "rgpud_sessions{slurm_job=\"41\"} 2") && has(t, "rgpud_sessions{slurm_job=\"42\"} 1"),
	   "live sessions per job");
	ok(has(t, "rgpud_gpu_sessions{gpu=\"0\",slurm_job=\"41\"} 2") &&
	   has(t, "rgpud_gpu_sessions{gpu=\"1\",slurm_job=\"42\"} 1"), "live sessions per GPU and job");
	ok(has(t, "rgpud_memory_used_bytes{gpu=\"0\",slurm_job=\"41\"} 524") &&
	   has(t, "rgpud_memory_used_bytes{gpu=\"1\",slurm_job=\"42\"} 0"),
	   "memory per GPU and job (a refund beyond the charge is clamped)");
	ok(has(t, "rgpud_sessions_started_total 3") && has(t, "rgpud_connections_accepted_total 1"),
	   "session and connection counters");
	ok(has(t, "rgpud_refusals_total{reason=\"w0\"} 2") &&
	   has(t, "rgpud_refusals_total{reason=\"w31\"} 1") &&
	   has(t, "rgpud_refusals_total{reason=\"other\"} 8") &&
	   !strstr(t, "reason=\"w32\""), "32 reasons, then \"other\"");
	ok(has(t, "rgpud_worker_crashes_total 1") && has(t, "rgpud_errors_total{kind=\"worker_exit\"} 1"),
	   "a worker's signal is a crash, SIGKILL is not, an exit status is an error");

	/* every sample's metric has HELP then TYPE, counters end in _total */
	int bad = 0;
	char *save, *copy = strdup(t);
	char help[128] = "", type[128] = "";
	for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char name[128], kind[32];
		if (sscanf(line, "# HELP %127s", name) == 1) {
			snprintf(help, sizeof(help), "%s", name);
		} else if (sscanf(line, "# TYPE %127s %31s", name, kind) == 2) {
			if (strcmp(name, help) || (!strcmp(kind, "counter") &&
						   !strstr(name, "_total")))
				bad++;
			snprintf(type, sizeof(type), "%s", name);
		} else {
			size_t n = strcspn(line, "{ ");
			if (n != strlen(type) || strncmp(line, type, n))
				bad++;
		}
	}
	free(copy);
	ok(bad == 0, "HELP and TYPE before each metric's samples (%d bad lines)", bad);
	free(t);

	nanosleep(&(struct timespec){ 0, 20 * 1000 * 1000 }, NULL);
	double secs = 0;
	t = metrics_render(&len);
	const char *p = t ? strstr(t, "rgpud_gpu_session_seconds_total{gpu=\"0\",slurm_job=\"41\"} ") : NULL;
	int got = p && sscanf(strchr(p, ' '), "%lf", &secs) == 1;
	ok(got && secs >= 0.04, "GPU time of two live sessions counts up to now (%.3f s)", secs);
	free(t);
	metrics_session_close(s1);
	metrics_session_close(s2);
	metrics_session_close(s3);
	t = metrics_render(&len);
	ok(t && has(t, "rgpud_sessions{slurm_job=\"41\"} 0") &&
	   has(t, "rgpud_memory_used_bytes{gpu=\"0\",slurm_job=\"41\"} 0") &&
	   has(t, "rgpud_sessions_ended_total 3"), "ended sessions hold nothing");
	secs = 0;
	p = t ? strstr(t, "rgpud_gpu_session_seconds_total{gpu=\"0\",slurm_job=\"41\"} ") : NULL;
	got = p && sscanf(strchr(p, ' '), "%lf", &secs) == 1;
	ok(got && secs >= 0.04, "GPU time of two ended sessions is kept (%.3f s)", secs);
	free(t);
	rgpud_lease_fini();
	return tap_done();
}
