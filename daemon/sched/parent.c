/* The scheduler's parent side: the segment, slots, shares (sched.h). */
#include "access.h"
#include "clock.h"
#include "lease.h"
#include "log.h"
#include "seg.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static struct sched_seg *seg;
static int seg_fd = -1;
static struct sched_config conf = { .policy = SCHED_POL_FAIR, .quantum = SCHED_QUANTUM_NS_DEFAULT };
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

/* shares lowered by SESSION_SHARE, and MPS thread percentages given at
 * spawn, per worker (few: a small table) */
#define NPID 1024
static struct {
	pid_t pid;
	uint32_t lowered, pct;
	int mps;
	struct rgpud_principal who;
	unsigned run_uid;
} pids[NPID];

const struct sched_config *sched_config(void) { return &conf; }

/* nvidia-cuda-mps-control in PATH or where NVIDIA's containers put it */
static void find_control(char *out, size_t n)
{
	const char *path = getenv("PATH");
	char buf[4096];
	snprintf(buf, sizeof(buf), "%s:/usr/local/nvidia/bin:/usr/bin:/usr/sbin",
		 path ? path : "");
	for (char *save = NULL, *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		char p[600];
		snprintf(p, sizeof(p), "%s/nvidia-cuda-mps-control", d);
		if (*d == '/' && access(p, X_OK) == 0) {
			snprintf(out, n, "%s", p);
			return;
		}
	}
	snprintf(out, n, "/usr/bin/nvidia-cuda-mps-control");
}

int sched_parent_init(const struct sched_config *cfg, char *err, size_t errlen)
{
	conf = *cfg;
	if (!conf.mps_control[0])
		find_control(conf.mps_control, sizeof(conf.mps_control));
	seg_fd = memfd_create("rgpud-sched", MFD_CLOEXEC);
	if (seg_fd < 0 || ftruncate(seg_fd, sizeof(struct sched_seg)) < 0) {
		snprintf(err, errlen, "scheduler: shared memory: %s", strerror(errno));
		return -1;
	}
	seg = mmap(NULL, sizeof(*seg), PROT_READ | PROT_WRITE, MAP_SHARED, seg_fd, 0);
	if (seg == MAP_FAILED) {
		seg = NULL;
		snprintf(err, errlen, "scheduler: mmap: %s", strerror(errno));
		return -1;
	}
	seg->magic = SCHED_SEG_MAGIC;
	seg->nslots = SCHED_SLOTS;
	seg->policy = conf.policy;
	seg->mps = conf.mps;
	seg->quantum = conf.quantum;
	return 0;
}

int sched_parent_fd(void) { return seg_fd; }

void sched_worker_arg(char *out, size_t n)
{
	snprintf(out, n, "%d", seg_fd);
}

/* mu held */
static int pid_index(pid_t pid, int create)
{
	int freei = -1;
	for (int i = 0; i < NPID; i++) {
		if (pids[i].pid == pid)
			return i;
		if (!pids[i].pid && freei < 0)
			freei = i;
	}
	if (create && freei >= 0) {
		pids[freei].pid = pid;
		pids[freei].lowered = 0;
		pids[freei].pct = 100;
		pids[freei].mps = 0;
	}
	return create ? freei : -1;
}

void sched_parent_spawned(pid_t pid, uint32_t pct, const struct rgpud_principal *mps_who,
			  unsigned run_uid)
{
	if (pid <= 0)
		return;
	pthread_mutex_lock(&mu);
	int i = pid_index(pid, 1);
	if (i >= 0) {
		pids[i].pct = pct ? pct : 100;
		pids[i].mps = mps_who != NULL;
		if (mps_who)
			pids[i].who = *mps_who;
		pids[i].run_uid = run_uid;
	}
	pthread_mutex_unlock(&mu);
	if (i < 0 && mps_who) /* (no room to remember it: give it back now) */
		sched_mps_session_end(mps_who, run_uid);
}

static uint32_t lease_share(const struct rgpud_principal *who, unsigned gpu)
{
	struct rgpud_lease l;
	if (who->job_id && rgpud_lease_find(who->job_id, gpu, time(NULL), &l) == 0)
		return l.share;
	return 0;
}

int sched_parent_admit(pid_t pid, const struct rgpud_principal *who, unsigned gpu)
{
	if (!seg || gpu >= RGPUD_MAX_GPUS || pid <= 0) /* (0 marks a free slot) */
		return -1;
	uint32_t share = lease_share(who, gpu);
	pthread_mutex_lock(&mu);
	int pi = pid_index(pid, 1);
	uint32_t weight = share ? share : SCHED_WEIGHT_DEFAULT;
	if (pi >= 0 && pids[pi].lowered && pids[pi].lowered < weight)
		weight = pids[pi].lowered;
	uint32_t pct = pi >= 0 ? pids[pi].pct : 100;
	int rc = -1;
	for (unsigned i = 0; i < SCHED_SLOTS; i++) {
		struct sched_slot *s = &seg->slot[i];
		if (atomic_load(&s->pid) == pid && atomic_load(&s->gpu) == gpu) {
			rc = 0; /* admitted already */
			break;
		}
	}
	for (unsigned i = 0; rc && i < SCHED_SLOTS; i++) {
		struct sched_slot *s = &seg->slot[i];
		if (atomic_load(&s->pid))
			continue;
		atomic_store(&s->gpu, gpu);
		atomic_store(&s->weight, weight);
		atomic_store(&s->pct, pct);
		atomic_store(&s->inflight, 0);
		atomic_store(&s->waiting, 0);
		atomic_store(&s->attained, 0);
		atomic_store(&s->busy, 0);
		atomic_store(&s->vtime, 0);
		atomic_store(&s->episode, 0);
		atomic_store(&s->mean, 0);
		atomic_store(&s->beat, 0);
		atomic_store(&s->idle_since, rgpu_now_ns());
		atomic_store(&s->progress, 0);
		atomic_store(&s->used, 0);
		atomic_store(&s->pid, pid); /* last: the slot is ready */
		sched_seg_wake(seg, gpu);
		rc = 0;
	}
	pthread_mutex_unlock(&mu);
	if (rc)
		log_warn("scheduler: no free slot for worker %d on GPU %u: it runs ungated",
			 (int)pid, gpu);
	return rc;
}

int sched_parent_lower_share(pid_t pid, uint32_t share)
{
	if (share < 1 || share > 100)
		return -1;
	if (pid <= 0)
		return 0;
	pthread_mutex_lock(&mu);
	int pi = pid_index(pid, 1);
	if (pi >= 0)
		pids[pi].lowered = share;
	for (unsigned i = 0; seg && i < SCHED_SLOTS; i++) {
		struct sched_slot *s = &seg->slot[i];
		if (atomic_load(&s->pid) == pid && atomic_load(&s->weight) > share)
			atomic_store(&s->weight, share);
	}
	pthread_mutex_unlock(&mu);
	return 0;
}

void sched_parent_release(pid_t pid, uint64_t *ns, size_t ngpu)
{
	if (pid <= 0)
		return;
	pthread_mutex_lock(&mu);
	int pi = pid_index(pid, 0);
	int mps = 0;
	struct rgpud_principal who;
	unsigned run_uid = 0;
	if (pi >= 0) {
		pids[pi].pid = 0;
		mps = pids[pi].mps;
		who = pids[pi].who;
		run_uid = pids[pi].run_uid;
	}
	for (unsigned i = 0; seg && i < SCHED_SLOTS; i++) {
		struct sched_slot *s = &seg->slot[i];
		if (atomic_load(&s->pid) != pid)
			continue;
		unsigned gpu = atomic_load(&s->gpu);
		if (ns && gpu < ngpu)
			ns[gpu] += atomic_load(&s->attained);
		atomic_store(&s->inflight, 0);
		atomic_store(&s->waiting, 0);
		atomic_store(&s->pid, 0);
		if (atomic_exchange(&s->used, 0) && gpu < RGPUD_MAX_GPUS &&
		    atomic_load(&seg->tenants[gpu]))
			atomic_fetch_sub(&seg->tenants[gpu], 1);
		sched_seg_wake(seg, gpu); /* whoever waited on it looks again */
	}
	pthread_mutex_unlock(&mu);
	if (mps)
		sched_mps_session_end(&who, run_uid);
}

int sched_parent_run_uid(pid_t pid, unsigned *uid)
{
	if (pid <= 0)
		return -1;
	pthread_mutex_lock(&mu);
	int i = pid_index(pid, 0);
	if (i >= 0)
		*uid = pids[i].run_uid;
	pthread_mutex_unlock(&mu);
	return i >= 0 ? 0 : -1;
}

uint64_t sched_parent_attained(pid_t pid, unsigned gpu, uint64_t *busy, uint32_t *weight,
			       uint32_t *pct)
{
	if (pid <= 0)
		return 0;
	for (unsigned i = 0; seg && i < SCHED_SLOTS; i++) {
		struct sched_slot *s = &seg->slot[i];
		if (atomic_load(&s->pid) != pid || atomic_load(&s->gpu) != gpu)
			continue;
		if (busy)
			*busy = atomic_load(&s->busy);
		if (weight)
			*weight = atomic_load(&s->weight);
		if (pct)
			*pct = atomic_load(&s->pct);
		return atomic_load(&s->attained);
	}
	return 0;
}
