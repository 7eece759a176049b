/* libFuzzer harness: the lease file loader (daemon/lease.c).  The input is
 * a leases.json; it is loaded as rgpud does at start-up, then the loaded
 * table is used (find, charge, grant, expire, list) and unloaded.  The
 * state directory is on tmpfs where there is one, emptied after each run. */
#include "lease.h"
#include "log.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(c) do { if (!(c)) __builtin_trap(); } while (0)

static char dir[256];

static void empty_dir(void)
{
	DIR *d = opendir(dir);
	CHECK(d);
	struct dirent *e;
	char p[600];
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
			unlink(p);
		}
	closedir(d);
}

static void rm_dir(void)
{
	empty_dir();
	rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	rgpu_log_set_level(getenv("RGPU_FUZZ_LOG") ? RGPU_LOG_DEBUG : 0);
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(dir, sizeof(dir), "%s/rgpu-fuzz-lease.XXXXXX", base);
	CHECK(mkdtemp(dir));
	atexit(rm_dir);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const time_t now = 1800000000; /* fixed: a run must not depend on the clock */
	char path[600];
	snprintf(path, sizeof(path), "%s/%s", dir, RGPUD_LEASE_FILE);
	FILE *f = fopen(path, "w");
	CHECK(f);
	CHECK(fwrite(data, 1, size, f) == size || size == 0);
	CHECK(fclose(f) == 0);

	char err[1024];
	int rc = rgpud_lease_init(dir, now, err, sizeof(err));
	CHECK(rc == 0); /* a bad file is renamed aside, never fatal */
	rgpud_lease_set_gpu(0, "fuzz GPU 0", 80ull << 30);
	rgpud_lease_set_gpu(1, "fuzz GPU 1", 16ull << 30);

	struct rgpud_lease *ls;
	size_t n;
	CHECK(rgpud_lease_list(&ls, &n) == 0);
	for (size_t i = 0; i < n; i++) {
		struct rgpud_lease l = ls[i], got;
		CHECK(l.used == 0); /* usage is never loaded */
		CHECK(l.expires == 0 || l.expires > (uint64_t)now); /* expired ones dropped */
		CHECK(rgpud_lease_find(l.job_id, l.gpu, now, &got) == 0);
		CHECK(rgpud_lease_job_count(l.job_id, now) >= 1);
		/* a charge within the quota fits, and is given back */
		if (rgpud_lease_charge(l.job_id, l.gpu, 1) == 0)
			rgpud_lease_charge(l.job_id, l.gpu, -1);
		if (l.mem_limit)
			CHECK(rgpud_lease_charge(l.job_id, l.gpu, (int64_t)(l.mem_limit > INT64_MAX ?
						INT64_MAX : l.mem_limit) ) != RGPUD_LEASE_NOTFOUND);
	}
	free(ls);
	/* capacity checks against what was loaded */
	struct rgpud_lease req = { .job_id = 4242, .uid = 1000, .gpu = 0,
				   .mem_limit = 1ull << 30, .expires = (uint64_t)now + 60 };
	char why[256];
	rc = rgpud_lease_grant(&req, now, why, sizeof(why));
	CHECK(rc == RGPUD_LEASE_OK || rc == RGPUD_LEASE_SAME || rc < 0);
	struct rgpud_gpu_load *g;
	size_t ng;
	CHECK(rgpud_lease_gpus(&g, &ng) == 0);
	free(g);
	uint64_t *jobs;
	size_t nj;
	CHECK(rgpud_lease_expire(now + 86400 * 365, &jobs, &nj) == 0);
	free(jobs);
	rgpud_lease_fini();
	empty_dir();
	return 0;
}
