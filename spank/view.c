/* The cluster view behind every decision: the snapshot file in state_dir,
 * refreshed by polling every server when older than the TTL (so a job start
 * contacts only the servers it reserves on, except once per TTL; a slice's
 * prolog asks for a view of the current second, ctx_job_script.c). */
#include "plugin.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int lock_fd = -1;
static int view_polled;

int rgpu_view_polled(void)
{
	return view_polled;
}

static void path_of(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", rgpu_cfg.state_dir, name);
}

/* Polls into c (empty on entry). */
static int refresh(struct rg_cluster *c, char *err, size_t errlen)
{
	struct rg_server_addr *a;
	size_t n;
	if (rgpu_discover(&a, &n, err, errlen))
		return -1;
	int up = rg_snapshot_poll(a, n, rgpu_cfg.timeout_ms, rgpu_cfg.parallel, c);
	free(a);
	if (n == 0) {
		snprintf(err, errlen, "no GPU servers: no node in slurm.conf has Gres=rgpu:N");
		return -1;
	}
	if (up == 0) {
		snprintf(err, errlen, "none of the %zu GPU servers answered on port %u", n,
			 rgpu_cfg.port);
		return -1;
	}
	return 0;
}

int rgpu_view_get(struct rg_cluster *c, int max_age, int lock, char *err, size_t errlen)
{
	char snap[1100];
	path_of(snap, sizeof(snap), "snapshot.json");
	rg_cluster_init(c);
	view_polled = 0;
	if (lock) {
		char lk[1100];
		(void)rgpu_state_dir_ensure();
		path_of(lk, sizeof(lk), "snapshot.lock");
		lock_fd = open(lk, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (lock_fd < 0 || flock(lock_fd, LOCK_EX)) {
			snprintf(err, errlen, "cannot lock %s: %s", lk, strerror(errno));
			if (lock_fd >= 0)
				close(lock_fd);
			lock_fd = -1;
			return -1;
		}
	}
	int have = rg_snapshot_load(snap, c) == 0 && c->nsrv > 0;
	if (have && (max_age < 0 || time(NULL) - c->taken <= max_age))
		return 0;
	struct rg_cluster fresh;
	rg_cluster_init(&fresh);
	if (refresh(&fresh, err, errlen)) {
		rg_cluster_free(&fresh);
		if (have) {
			/* Better an old view than none: grants still check. */
			slurm_info("rgpu: using an old snapshot: %s", err);
			return 0;
		}
		rgpu_view_release(c, 0);
		return -1;
	}
	rg_cluster_free(c);
	*c = fresh;
	view_polled = 1;
	/* Anyone may read it (sbatch validates sizes); only root writes. */
	char e2[256];
	if (geteuid() == 0 && (rgpu_state_dir_ensure(), rg_snapshot_save(snap, c, e2, sizeof(e2))))
		slurm_info("rgpu: %s", e2);
	return 0;
}

void rgpu_view_release(struct rg_cluster *c, int save)
{
	if (save && geteuid() == 0) {
		char snap[1100], e2[256];
		path_of(snap, sizeof(snap), "snapshot.json");
		if (rg_snapshot_save(snap, c, e2, sizeof(e2)))
			slurm_info("rgpu: %s", e2);
	}
	if (lock_fd >= 0) {
		flock(lock_fd, LOCK_UN);
		close(lock_fd);
		lock_fd = -1;
	}
	rg_cluster_free(c);
}
