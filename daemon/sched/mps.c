/*
 * MPS per job (rgpud --mps=job): one MPS control daemon per Slurm job (per
 * uid for sessions outside a job), started by the parent when the job's
 * first session starts and stopped after its last one ends.  A fatal GPU
 * fault reaches every client of an MPS server (measured on an H100,
 * /work/shared/NOTES.md), so a server per job keeps a fault inside the job
 * that caused it; the GPU time-slices between the jobs' servers (and any
 * session without MPS).  Within a job, sessions run kernels at the same
 * time, each capped to its share of the GPU's threads
 * (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE from --rgpu-share).  Needs root (the
 * daemon serves the job's uid) and nvidia-cuda-mps-control; without it
 * sessions run time-sliced, as with --mps=off.
 */
#include "access.h"
#include "lease.h"
#include "log.h"
#include "seg.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NGROUP 256

static struct group {
	char key[32];
	int sessions;
} groups[NGROUP];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int warned;

static void group_key(const struct rgpud_principal *who, char *key, size_t n)
{
	if (who->job_id)
		snprintf(key, n, "job%llu", (unsigned long long)who->job_id);
	else
		snprintf(key, n, "uid%u", who->uid);
}

static int mkdir_owned(const char *path, uid_t uid, gid_t gid)
{
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		return -1;
	if (geteuid() == 0 && chown(path, uid, gid) < 0)
		return -1;
	return 0;
}

/* Runs the control program with the group's directories; input (may be
 * NULL) goes to its stdin.  Its exit status, or -1. */
static int run_control(const char *dir, const char *input)
{
	const struct sched_config *c = sched_config();
	char pipe_env[600], log_env[600];
	snprintf(pipe_env, sizeof(pipe_env), "CUDA_MPS_PIPE_DIRECTORY=%s/pipe", dir);
	snprintf(log_env, sizeof(log_env), "CUDA_MPS_LOG_DIRECTORY=%s/log", dir);
	char *argv[] = { (char *)c->mps_control, input ? NULL : "-d", NULL };
	char *envp[] = { pipe_env, log_env, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			 NULL };
	int in[2] = { -1, -1 };
	if (input && pipe2(in, O_CLOEXEC) < 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		if (input && dup2(in[0], 0) < 0)
			_exit(126);
		int devnull = open("/dev/null", O_RDWR);
		if (devnull >= 0) {
			if (!input)
				dup2(devnull, 0);
			dup2(devnull, 1);
		}
		execve(c->mps_control, argv, envp);
		_exit(127);
	}
	if (input) {
		close(in[0]);
		if (pid > 0 && write(in[1], input, strlen(input)) < 0)
			log_warn("MPS: cannot talk to %s: %s", c->mps_control, strerror(errno));
		close(in[1]);
	}
	if (pid < 0)
		return -1;
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The job's share on this server (the smallest of its leases'), or 0. */
static uint32_t job_share(uint64_t job)
{
	struct rgpud_lease *l = NULL;
	size_t n = 0;
	uint32_t share = 0;
	if (!job || rgpud_lease_list(&l, &n))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (l[i].job_id == job && l[i].share && (!share || l[i].share < share))
			share = l[i].share;
	free(l);
	return share;
}

int sched_mps_env(const struct rgpud_principal *who, char env[][600], int max, uint32_t *pct)
{
	*pct = 100;
	const struct sched_config *c = sched_config();
	if (c->mps != SCHED_MPS_JOB || max < 3)
		return 0;
	char key[32], dir[600], sub[700];
	group_key(who, key, sizeof(key));
	snprintf(dir, sizeof(dir), "%s/%s", c->mps_dir, key);
	pthread_mutex_lock(&mu);
	int gi = -1, freei = -1;
	for (int i = 0; i < NGROUP; i++) {
		if (groups[i].sessions && !strcmp(groups[i].key, key))
			gi = i;
		else if (!groups[i].sessions && freei < 0)
			freei = i;
	}
	if (gi < 0) {
		int ok = freei >= 0 && access(c->mps_control, X_OK) == 0 &&
			 (mkdir(c->mps_dir, 0755) == 0 || errno == EEXIST) &&
			 mkdir_owned(dir, who->uid, who->gid) == 0;
		snprintf(sub, sizeof(sub), "%s/pipe", dir);
		ok = ok && mkdir_owned(sub, who->uid, who->gid) == 0;
		snprintf(sub, sizeof(sub), "%s/log", dir);
		ok = ok && mkdir_owned(sub, who->uid, who->gid) == 0;
		int st = ok ? run_control(dir, NULL) : -1;
		if (st != 0) {
			if (!warned++)
				log_warn("MPS: cannot start %s for %s (%s): sessions run time-sliced "
					 "(logged once)", c->mps_control, key,
					 ok ? "it failed" : strerror(errno));
			pthread_mutex_unlock(&mu);
			return 0;
		}
		log_info("MPS: control daemon for %s started (%s)", key, dir);
		gi = freei;
		snprintf(groups[gi].key, sizeof(groups[gi].key), "%s", key);
	}
	groups[gi].sessions++;
	pthread_mutex_unlock(&mu);
	int n = 0;
	snprintf(env[n++], 600, "CUDA_MPS_PIPE_DIRECTORY=%s/pipe", dir);
	snprintf(env[n++], 600, "CUDA_MPS_LOG_DIRECTORY=%s/log", dir);
	uint32_t share = job_share(who->job_id);
	if (share && share < 100) {
		snprintf(env[n++], 600, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%u", share);
		*pct = share;
	}
	return n;
}

void sched_mps_session_end(const struct rgpud_principal *who)
{
	const struct sched_config *c = sched_config();
	if (c->mps != SCHED_MPS_JOB)
		return;
	char key[32], dir[600];
	group_key(who, key, sizeof(key));
	snprintf(dir, sizeof(dir), "%s/%s", c->mps_dir, key);
	pthread_mutex_lock(&mu);
	for (int i = 0; i < NGROUP; i++) {
		if (!groups[i].sessions || strcmp(groups[i].key, key))
			continue;
		if (--groups[i].sessions == 0) {
			if (run_control(dir, "quit\n") != 0)
				log_warn("MPS: stopping the control daemon of %s failed", key);
			else
				log_info("MPS: control daemon for %s stopped", key);
		}
		break;
	}
	pthread_mutex_unlock(&mu);
}

void sched_mps_shutdown(void)
{
	const struct sched_config *c = sched_config();
	if (c->mps != SCHED_MPS_JOB)
		return;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < NGROUP; i++) {
		if (!groups[i].sessions)
			continue;
		char dir[600];
		snprintf(dir, sizeof(dir), "%s/%s", c->mps_dir, groups[i].key);
		run_control(dir, "quit\n");
		groups[i].sessions = 0;
	}
	pthread_mutex_unlock(&mu);
}
