/*
 * Unit tests of rgpud's leases (daemon/lease.c), access control
 * (daemon/access.c) and munge authentication (daemon/auth.c,
 * client/cred.c).
 *
 * Built twice: test_lease needs no munged (lease table, persistence,
 * quotas, access in open mode and in lease mode with hand-made principals);
 * test_lease_munge (-DRGPU_TEST_MUNGE) starts a private munged and checks
 * real credentials end to end, or exits 77 (skip) when munged is missing.
 */
#include "config.h"

#include "access.h"
#include "auth.h"
#include "lease.h"
#include "log.h"
#include "proto.h"
#include "wire.h"
#include "../../client/cred.h"

#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1
#endif
#include <cuda.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef HAVE_MUNGE
#include <munge.h>
#endif

#ifdef RGPU_TEST_MUNGE
/* (the unit tests are run by test_lease) */
#pragma GCC diagnostic ignored "-Wunused-function"
#endif

static int failures;
#define CHECK(c)                                                                    \
	do {                                                                        \
		if (!(c)) {                                                         \
			fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #c); \
			failures++;                                                 \
		}                                                                   \
	} while (0)
#define CHECK_STR(s, sub)                                                            \
	do {                                                                         \
		if (!strstr((s), (sub))) {                                           \
			fprintf(stderr, "%s:%d: FAILED: \"%s\" lacks \"%s\"\n", __FILE__, \
				__LINE__, (s), (sub));                               \
			failures++;                                                  \
		}                                                                    \
	} while (0)

#define GiB (1ull << 30)
#define MiB (1ull << 20)

/* ---- the session layer's hook, recorded ---- */

static pthread_mutex_t ended_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t ended[64];
static size_t nended;

void rgpud_sessions_end_job(uint64_t job_id)
{
	pthread_mutex_lock(&ended_mu);
	if (nended < 64)
		ended[nended++] = job_id;
	pthread_mutex_unlock(&ended_mu);
}

/* the parent's session count, as the test sets it */
static int sessions_now;
int rgpud_sessions_of_uid(uint32_t uid)
{
	(void)uid;
	return sessions_now;
}

static int was_ended(uint64_t job)
{
	int n = 0;
	pthread_mutex_lock(&ended_mu);
	for (size_t i = 0; i < nended; i++)
		n += ended[i] == job;
	pthread_mutex_unlock(&ended_mu);
	return n;
}

/* ---- helpers ---- */

static char *make_tmpdir(void)
{
	const char *base = getenv("TMPDIR");
	char tmpl[512];
	snprintf(tmpl, sizeof(tmpl), "%s/rgpu-lease-XXXXXX", base && *base ? base : "/tmp");
	char *d = mkdtemp(tmpl);
	if (!d) {
		perror("mkdtemp");
		exit(99);
	}
	return strdup(d);
}

static void rm_rf(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	char p[1024];
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		unlink(p);
	}
	closedir(d);
	rmdir(dir);
}

static int file_exists(const char *dir, const char *name)
{
	char p[1024];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return access(p, F_OK) == 0;
}

/* Name of the first entry of dir starting with prefix, or "". */
static void find_prefixed(const char *dir, const char *prefix, char *out, size_t n)
{
	out[0] = 0;
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d)))
		if (!strncmp(e->d_name, prefix, strlen(prefix))) {
			snprintf(out, n, "%s", e->d_name);
			break;
		}
	closedir(d);
}

static void write_file(const char *dir, const char *name, const char *text)
{
	char p[1024];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	FILE *f = fopen(p, "w");
	if (!f) {
		perror(p);
		exit(99);
	}
	fputs(text, f);
	fclose(f);
}

static struct rgpud_lease L(uint64_t job, uint32_t uid, uint32_t gpu, uint64_t lim,
			    uint64_t exp)
{
	struct rgpud_lease l = { .job_id = job, .uid = uid, .gpu = gpu, .mem_limit = lim,
				 .expires = exp };
	return l;
}

static int grant(uint64_t job, uint32_t uid, uint32_t gpu, uint64_t lim, uint64_t exp,
		 time_t now, char *why, size_t n)
{
	struct rgpud_lease l = L(job, uid, gpu, lim, exp);
	why[0] = 0;
	return rgpud_lease_grant(&l, now, why, n);
}

static void register_gpus(void)
{
	rgpud_lease_set_gpu(0, "Test GPU A", 16 * GiB);
	rgpud_lease_set_gpu(1, "Test GPU B", 8 * GiB);
}

/* ---- lease table ---- */

/* rgpud --memory-overcommit=1.5: slices may promise 1.5x a GPU's memory
 * (the memory manager swaps the rest), one slice never more than the GPU */
static void test_overcommit(void)
{
	char err[512], why[512];
	time_t now = 1000000;
	CHECK(rgpud_lease_init(NULL, now, err, sizeof(err)) == 0);
	register_gpus();
	rgpud_lease_set_overcommit(150);
	/* GPU 0: 16 GiB, room for 24 GiB of slices and their reserve */
	uint64_t s = 10 * GiB - RGPUD_LEASE_CTX_RESERVE;
	CHECK(grant(31, 1000, 0, s, 0, now, why, sizeof(why)) == RGPUD_LEASE_OK);
	CHECK(grant(32, 1000, 0, s, 0, now, why, sizeof(why)) == RGPUD_LEASE_OK);
	CHECK(grant(33, 1000, 0, 4 * GiB - RGPUD_LEASE_CTX_RESERVE, 0, now, why, sizeof(why)) ==
	      RGPUD_LEASE_OK);
	CHECK(grant(34, 1000, 0, 1 * GiB, 0, now, why, sizeof(why)) == RGPUD_LEASE_NOSPACE);
	/* a single slice still fits the GPU itself */
	CHECK(grant(35, 1000, 1, 8 * GiB, 0, now, why, sizeof(why)) == RGPUD_LEASE_NOSPACE);
	rgpud_lease_set_overcommit(100);
	CHECK(grant(36, 1000, 1, 4 * GiB, 0, now, why, sizeof(why)) == RGPUD_LEASE_OK);
	CHECK(grant(37, 1000, 1, 4 * GiB, 0, now, why, sizeof(why)) == RGPUD_LEASE_NOSPACE);
	rgpud_lease_fini();
}

static void test_grant_conflicts(void)
{
	char err[512], why[512];
	time_t now = 1000000;
	CHECK(rgpud_lease_init(NULL, now, err, sizeof(err)) == 0);
	register_gpus();

	CHECK(grant(1, 1000, 0, 4 * GiB, 0, now, why, sizeof(why)) == RGPUD_LEASE_OK);
	/* idempotent */
	CHECK(grant(1, 1000, 0, 4 * GiB, 0, now, why, sizeof(why)) == RGPUD_LEASE_SAME);
	/* different lease for the same (job, gpu) */
	CHECK(grant(1, 1000, 0, 2 * GiB, 0, now, why, sizeof(why)) == RGPUD_LEASE_EXISTS);
	CHECK_STR(why, "already holds a different lease");
	CHECK(grant(1, 1001, 0, 4 * GiB, 0, now, why, sizeof(why)) == RGPUD_LEASE_EXISTS);
	/* renewal (expires only) */
	CHECK(grant(1, 1000, 0, 4 * GiB, now + 500, now, why, sizeof(why)) == RGPUD_LEASE_OK);
	struct rgpud_lease f;
	CHECK(rgpud_lease_find(1, 0, now, &f) == 0 && f.expires == (uint64_t)now + 500);
	CHECK(grant(1, 1000, 0, 4 * GiB, 0, now, why, sizeof(why)) == RGPUD_LEASE_OK);

	/* a second job shares GPU 0 */
	CHECK(grant(2, 1001, 0, 4 * GiB, 0, now, why, sizeof(why)) == RGPUD_LEASE_OK);
	/* whole GPU 0 is not available any more */
	CHECK(grant(3, 1002, 0, 0, 0, now, why, sizeof(why)) == RGPUD_LEASE_BUSY);
	CHECK_STR(why, "2 other job(s) hold slices");
	/* capacity: 16 GiB - 2 * (4 GiB + reserve) left, which holds a slice
	 * of that less its own reserve */
	const uint64_t left = 8 * GiB - 2 * RGPUD_LEASE_CTX_RESERVE;
	CHECK(grant(4, 1003, 0, left, 0, now, why, sizeof(why)) == RGPUD_LEASE_NOSPACE);
	CHECK_STR(why, "no room");
	CHECK(grant(4, 1003, 0, left - RGPUD_LEASE_CTX_RESERVE, 0, now, why, sizeof(why)) ==
	      RGPUD_LEASE_OK);
	CHECK(grant(5, 1003, 0, 1, 0, now, why, sizeof(why)) == RGPUD_LEASE_NOSPACE);
	/* a slice larger than the GPU */
	CHECK(grant(5, 1003, 1, 8 * GiB, 0, now, why, sizeof(why)) == RGPUD_LEASE_NOSPACE);
	CHECK(grant(5, 1003, 1, UINT64_MAX, 0, now, why, sizeof(why)) == RGPUD_LEASE_NOSPACE);

	/* exclusive GPU 1 */
	CHECK(grant(6, 1004, 1, 0, 0, now, why, sizeof(why)) == RGPUD_LEASE_OK);
	CHECK(grant(6, 1004, 1, 0, 0, now, why, sizeof(why)) == RGPUD_LEASE_SAME);
	CHECK(grant(7, 1005, 1, 1 * GiB, 0, now, why, sizeof(why)) == RGPUD_LEASE_BUSY);
	CHECK_STR(why, "leased whole to job 6");
	CHECK(grant(7, 1005, 1, 0, 0, now, why, sizeof(why)) == RGPUD_LEASE_BUSY);

	/* bad requests */
	CHECK(grant(8, 1, 7, 0, 0, now, why, sizeof(why)) == RGPUD_LEASE_NODEV);
	CHECK_STR(why, "no GPU 7");
	CHECK(grant(8, 1, 1000, 0, 0, now, why, sizeof(why)) == RGPUD_LEASE_NODEV);
	CHECK(grant(0, 1, 0, 0, 0, now, why, sizeof(why)) == RGPUD_LEASE_INVAL);
	CHECK(grant(8, 1, 0, 1, now, now, why, sizeof(why)) == RGPUD_LEASE_INVAL);

	/* load snapshot */
	struct rgpud_gpu_load *g;
	size_t ng;
	CHECK(rgpud_lease_gpus(&g, &ng) == 0 && ng == 2);
	if (ng == 2) {
		CHECK(g[0].gpu == 0 && g[0].total == 16 * GiB && g[0].reserved == 16 * GiB &&
		      !g[0].exclusive && !strcmp(g[0].name, "Test GPU A"));
		CHECK(g[1].gpu == 1 && g[1].exclusive && g[1].reserved == 8 * GiB);
	}
	free(g);
	struct rgpud_lease *ls;
	size_t nl;
	CHECK(rgpud_lease_list(&ls, &nl) == 0 && nl == 4);
	free(ls);

	/* release frees room */
	CHECK(rgpud_lease_job_count(1, now) == 1);
	CHECK(rgpud_lease_release_job(1) == 1);
	CHECK(rgpud_lease_release_job(1) == 0);
	CHECK(rgpud_lease_find(1, 0, now, NULL) == RGPUD_LEASE_NOTFOUND);
	CHECK(grant(5, 1003, 0, 4 * GiB, 0, now, why, sizeof(why)) == RGPUD_LEASE_OK);
	/* a job with two leases releases both */
	CHECK(grant(6, 1004, 0, 0, 0, now, why, sizeof(why)) == RGPUD_LEASE_BUSY);
	CHECK(rgpud_lease_release_job(2) == 1);
	CHECK(rgpud_lease_release_job(4) == 1);
	CHECK(rgpud_lease_release_job(5) == 1);
	CHECK(grant(6, 1004, 0, 0, 0, now, why, sizeof(why)) == RGPUD_LEASE_OK);
	CHECK(rgpud_lease_job_count(6, now) == 2);
	CHECK(rgpud_lease_release_job(6) == 2);
	CHECK(rgpud_lease_job_count(6, now) == 0);
	rgpud_lease_fini();
}

static void test_expiry(void)
{
	char err[512], why[512];
	time_t now = 2000000;
	CHECK(rgpud_lease_init(NULL, now, err, sizeof(err)) == 0);
	register_gpus();
	CHECK(grant(10, 1, 0, 0, now + 10, now, why, sizeof(why)) == RGPUD_LEASE_OK);
	CHECK(grant(11, 1, 1, 1 * GiB, now + 20, now, why, sizeof(why)) == RGPUD_LEASE_OK);
	CHECK(grant(11, 1, 0, 1 * GiB, now + 20, now, why, sizeof(why)) == RGPUD_LEASE_BUSY);
	CHECK(rgpud_lease_find(10, 0, now + 9, NULL) == 0);
	CHECK(rgpud_lease_find(10, 0, now + 10, NULL) == RGPUD_LEASE_NOTFOUND);
	/* an expired lease no longer blocks, even before it is collected */
	CHECK(grant(11, 1, 0, 1 * GiB, now + 20, now + 10, why, sizeof(why)) == RGPUD_LEASE_OK);
	/* an expired, uncollected lease of the same (job, gpu) is replaced */
	CHECK(grant(11, 1, 1, 2 * GiB, 0, now + 25, why, sizeof(why)) == RGPUD_LEASE_OK);

	uint64_t *jobs;
	size_t n;
	CHECK(rgpud_lease_expire(now + 5, &jobs, &n) == 0 && n == 0);
	free(jobs);
	CHECK(rgpud_lease_expire(now + 30, &jobs, &n) == 0);
	CHECK(n == 2); /* job 10 (GPU 0) and job 11 (GPU 0) */
	if (n == 2)
		CHECK((jobs[0] == 10 && jobs[1] == 11) || (jobs[0] == 11 && jobs[1] == 10));
	free(jobs);
	CHECK(rgpud_lease_job_count(11, now + 30) == 1); /* GPU 1, never expires */
	struct rgpud_lease *ls;
	size_t nl;
	CHECK(rgpud_lease_list(&ls, &nl) == 0 && nl == 1);
	free(ls);
	rgpud_lease_fini();
}

static void test_persistence(void)
{
	char err[512], why[512];
	time_t now = 3000000;
	char *dir = make_tmpdir();
	char sub[600];
	snprintf(sub, sizeof(sub), "%s/state", dir); /* created by init */

	CHECK(rgpud_lease_init(sub, now, err, sizeof(err)) == 0);
	CHECK(err[0] == 0);
	register_gpus();
	CHECK(grant(21, 1000, 0, 3 * GiB, 0, now, why, sizeof(why)) == RGPUD_LEASE_OK);
	CHECK(grant(22, 1001, 0, 5 * GiB, now + 100, now, why, sizeof(why)) == RGPUD_LEASE_OK);
	CHECK(grant(23, 1002, 1, 0, UINT64_MAX, now, why, sizeof(why)) == RGPUD_LEASE_OK);
	CHECK(grant(24, 4000000000u, 0, 1, 0, now, why, sizeof(why)) == RGPUD_LEASE_OK);
	CHECK(rgpud_lease_release_job(24) == 1);
	CHECK(rgpud_lease_charge(21, 0, 1000) == 0);
	CHECK(file_exists(sub, "leases.json"));
	CHECK(!file_exists(sub, "leases.json.tmp"));
	struct stat st;
	char p[700];
	snprintf(p, sizeof(p), "%s/leases.json", sub);
	CHECK(stat(p, &st) == 0 && (st.st_mode & 0777) == 0600);
	rgpud_lease_fini();

	/* restart: leases back, usage not */
	CHECK(rgpud_lease_init(sub, now + 1, err, sizeof(err)) == 0);
	struct rgpud_lease f;
	CHECK(rgpud_lease_find(21, 0, now + 1, &f) == 0 && f.uid == 1000 &&
	      f.mem_limit == 3 * GiB && f.expires == 0 && f.used == 0);
	CHECK(rgpud_lease_find(22, 0, now + 1, &f) == 0 && f.uid == 1001 &&
	      f.mem_limit == 5 * GiB && f.expires == (uint64_t)now + 100);
	CHECK(rgpud_lease_find(23, 1, now + 1, &f) == 0 && f.mem_limit == 0 &&
	      f.expires == UINT64_MAX);
	CHECK(rgpud_lease_find(24, 0, now + 1, NULL) == RGPUD_LEASE_NOTFOUND);
	/* capacity still counted after the restart */
	register_gpus();
	CHECK(grant(25, 1, 1, 1 * GiB, 0, now + 1, why, sizeof(why)) == RGPUD_LEASE_BUSY);
	rgpud_lease_fini();

	/* restart after job 22's lease expired: dropped at load, and for good */
	CHECK(rgpud_lease_init(sub, now + 200, err, sizeof(err)) == 0);
	CHECK(rgpud_lease_find(22, 0, now + 200, NULL) == RGPUD_LEASE_NOTFOUND);
	CHECK(rgpud_lease_find(21, 0, now + 200, NULL) == 0);
	rgpud_lease_fini();
	CHECK(rgpud_lease_init(sub, now - 50, err, sizeof(err)) == 0);
	CHECK(rgpud_lease_find(22, 0, now - 50, NULL) == RGPUD_LEASE_NOTFOUND);
	struct rgpud_lease *ls;
	size_t nl;
	CHECK(rgpud_lease_list(&ls, &nl) == 0 && nl == 2);
	free(ls);

	/* a grant that cannot be persisted fails and changes nothing */
	register_gpus();
	rm_rf(sub);
	CHECK(grant(26, 1, 0, 1 * GiB, 0, now, why, sizeof(why)) == RGPUD_LEASE_IO);
	CHECK_STR(why, "leases.json.tmp");
	CHECK(rgpud_lease_find(26, 0, now, NULL) == RGPUD_LEASE_NOTFOUND);
	/* release still releases (and logs the persistence failure) */
	CHECK(rgpud_lease_release_job(21) == 1);
	rgpud_lease_fini();

	/* the state directory is a file */
	write_file(dir, "afile", "x");
	snprintf(p, sizeof(p), "%s/afile", dir);
	CHECK(rgpud_lease_init(p, now, err, sizeof(err)) == -1);
	CHECK_STR(err, "not a directory");
	rgpud_lease_fini();
	rm_rf(dir);
	free(dir);
}

static void corrupt_case(const char *text, const char *expect)
{
	char err[512], name[256];
	time_t now = 4000000;
	char *dir = make_tmpdir();
	write_file(dir, "leases.json", text);
	CHECK(rgpud_lease_init(dir, now, err, sizeof(err)) == 0);
	CHECK_STR(err, "corrupt");
	CHECK_STR(err, expect);
	CHECK(!file_exists(dir, "leases.json"));
	find_prefixed(dir, "leases.json.corrupt-", name, sizeof(name));
	CHECK(!strcmp(name, "leases.json.corrupt-4000000"));
	/* the bad file is kept as it was */
	char p[700], buf[4096] = "";
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	FILE *f = fopen(p, "r");
	if (f) {
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);
		buf[n] = 0;
		fclose(f);
	}
	CHECK(!strcmp(buf, text));
	struct rgpud_lease *ls;
	size_t nl;
	CHECK(rgpud_lease_list(&ls, &nl) == 0 && nl == 0);
	free(ls);
	/* and the daemon carries on: a new grant writes a fresh file */
	register_gpus();
	char why[256];
	CHECK(grant(31, 1, 0, 0, 0, now, why, sizeof(why)) == RGPUD_LEASE_OK);
	CHECK(file_exists(dir, "leases.json"));
	rgpud_lease_fini();
	rm_rf(dir);
	free(dir);
}

static void test_corrupt(void)
{
	corrupt_case("{\"version\": 1, \"leases\": [ {\"job_id\": 5, ", "not valid JSON");
	corrupt_case("garbage", "not valid JSON");
	corrupt_case("", "not valid JSON");
	corrupt_case("[1, 2]", "not a JSON object");
	corrupt_case("{\"version\": 2, \"leases\": []}", "\"version\"");
	corrupt_case("{\"version\": 1}", "\"leases\"");
	corrupt_case("{\"version\": 1, \"leases\": [{\"job_id\": 5, \"uid\": 1, \"gpu\": 0, "
		     "\"mem_limit\": 0}]}", "\"expires\" missing");
	corrupt_case("{\"version\": 1, \"leases\": [{\"job_id\": 5, \"uid\": -1, \"gpu\": 0, "
		     "\"mem_limit\": 0, \"expires\": 0}]}", "\"uid\" out of range");
	corrupt_case("{\"version\": 1, \"leases\": [{\"job_id\": 5, \"uid\": 1, \"gpu\": \"0\", "
		     "\"mem_limit\": 0, \"expires\": 0}]}", "\"gpu\" missing or not an integer");
	corrupt_case("{\"version\": 1, \"leases\": ["
		     "{\"job_id\": 5, \"uid\": 1, \"gpu\": 0, \"mem_limit\": 0, \"expires\": 0},"
		     "{\"job_id\": 5, \"uid\": 1, \"gpu\": 0, \"mem_limit\": 0, \"expires\": 0}]}",
		     "twice");
	/* issue 16.10: numbers past 64 bits saturated to "unlimited" and loaded */
	corrupt_case("{\"version\": 1, \"leases\": [{\"job_id\": 5, \"uid\": 1, \"gpu\": 0, "
		     "\"mem_limit\": 18446744073709551616, \"expires\": 0}]}",
		     "does not fit in 64 bits");
	corrupt_case("{\"version\": 1, \"leases\": [{\"job_id\": 5, \"uid\": 1, \"gpu\": 0, "
		     "\"mem_limit\": 1, \"expires\": 99999999999999999999999}]}",
		     "does not fit in 64 bits");
	corrupt_case("{\"version\": 1, \"leases\": [{\"job_id\": -99999999999999999999, "
		     "\"uid\": 1, \"gpu\": 0, \"mem_limit\": 1, \"expires\": 0}]}",
		     "does not fit in 64 bits");

	/* a valid file with big numbers loads */
	char err[512];
	char *dir = make_tmpdir();
	write_file(dir, "leases.json",
		   "{\"version\": 1, \"leases\": [{\"job_id\": 18446744073709551615, "
		   "\"uid\": 4294967295, \"gpu\": 3, \"mem_limit\": 1, \"expires\": 0}]}");
	CHECK(rgpud_lease_init(dir, 1, err, sizeof(err)) == 0 && err[0] == 0);
	struct rgpud_lease f;
	CHECK(rgpud_lease_find(UINT64_MAX, 3, 1, &f) == 0 && f.uid == UINT32_MAX);
	rgpud_lease_fini();
	rm_rf(dir);
	free(dir);
}

/* issue 16.10: loading was quadratic (200,000 leases took 9 s) */
static void test_load_many(void)
{
	enum { N = 200000 };
	char err[512];
	char *dir = make_tmpdir();
	size_t cap = (size_t)N * 100 + 100, n = 0;
	char *text = malloc(cap);
	n += (size_t)snprintf(text + n, cap - n, "{\"version\": 1, \"leases\": [");
	for (int i = 0; i < N; i++)
		n += (size_t)snprintf(text + n, cap - n, "%s{\"job_id\": %d, \"uid\": 1, \"gpu\": 0, "
				      "\"mem_limit\": 1, \"expires\": 0}", i ? "," : "", i + 1);
	snprintf(text + n, cap - n, "]}");
	write_file(dir, "leases.json", text);
	free(text);
	/* CPU time: a loaded machine must not fail the test, a quadratic
	 * loader (tens of seconds of CPU here) must */
	struct timespec a, b;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
	CHECK(rgpud_lease_init(dir, 1, err, sizeof(err)) == 0 && err[0] == 0);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
	double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
	struct rgpud_lease *ls;
	size_t nl;
	CHECK(rgpud_lease_list(&ls, &nl) == 0 && nl == N);
	free(ls);
	if (s > 3.0)
		fprintf(stderr, "loading %d leases took %.1f s of CPU\n", N, s);
	CHECK(s < 3.0);
	rgpud_lease_fini();
	rm_rf(dir);
	free(dir);
}

static void test_quota(void)
{
	char err[512], why[512];
	time_t now = time(NULL);
	CHECK(rgpud_lease_init(NULL, now, err, sizeof(err)) == 0);
	register_gpus();
	/* quota arithmetic alone: no context reserve (test_ctx_reserve) */
	rgpud_lease_set_ctx_reserve(0);
	CHECK(grant(41, 1, 0, 1000, 0, now, why, sizeof(why)) == RGPUD_LEASE_OK);
	CHECK(grant(42, 1, 1, 0, 0, now, why, sizeof(why)) == RGPUD_LEASE_OK);

	CHECK(rgpud_lease_charge(41, 0, 600) == 0);
	CHECK(rgpud_lease_charge(41, 0, 500) == RGPUD_LEASE_QUOTA);
	CHECK(rgpud_lease_charge(41, 0, 400) == 0);
	CHECK(rgpud_lease_charge(41, 0, 1) == RGPUD_LEASE_QUOTA);
	CHECK(rgpud_lease_charge(41, 0, INT64_MAX) == RGPUD_LEASE_QUOTA);
	struct rgpud_lease f;
	CHECK(rgpud_lease_find(41, 0, now, &f) == 0 && f.used == 1000);
	CHECK(rgpud_lease_refund(41, 0, 600) == 0);
	CHECK(rgpud_lease_charge(41, 0, 500) == 0);
	CHECK(rgpud_lease_refund(41, 0, 900) == 0);
	CHECK(rgpud_lease_find(41, 0, now, &f) == 0 && f.used == 0);
	/* an over-refund is refused, not clamped (issue 16.1: usage read 0) */
	CHECK(rgpud_lease_charge(41, 0, 10) == 0);
	CHECK(rgpud_lease_refund(41, 0, 11) == RGPUD_LEASE_INVAL);
	CHECK(rgpud_lease_find(41, 0, now, &f) == 0 && f.used == 10);
	CHECK(rgpud_lease_refund(41, 0, 10) == 0);
	/* sizes of 2^63 and more are charges like any other */
	CHECK(rgpud_lease_charge(41, 0, 1ull << 63) == RGPUD_LEASE_QUOTA);
	CHECK(rgpud_lease_charge(41, 0, UINT64_MAX) == RGPUD_LEASE_QUOTA);
	CHECK(rgpud_lease_find(41, 0, now, &f) == 0 && f.used == 0);
	/* whole GPU: no quota, usage tracked, and it cannot wrap */
	CHECK(rgpud_lease_charge(42, 1, 100 * GiB) == 0);
	CHECK(rgpud_lease_find(42, 1, now, &f) == 0 && f.used == 100 * GiB);
	CHECK(rgpud_lease_charge(42, 1, UINT64_MAX - 100 * GiB + 1) == RGPUD_LEASE_QUOTA);
	CHECK(rgpud_lease_find(42, 1, now, &f) == 0 && f.used == 100 * GiB);
	/* no lease */
	CHECK(rgpud_lease_charge(43, 0, 1) == RGPUD_LEASE_NOTFOUND);
	CHECK(rgpud_lease_refund(43, 0, 1) == 0);
	CHECK(rgpud_lease_charge(41, 1, 1) == RGPUD_LEASE_NOTFOUND);
	rgpud_lease_set_ctx_reserve(RGPUD_LEASE_CTX_RESERVE);
	rgpud_lease_fini();
}

/* A job waiting for room claims a GPU: others' grants leave the claimed
 * room alone, the claimer's own grant converts it, claims expire. */
static void test_claims(void)
{
	char err[512], why[512];
	time_t now = time(NULL);
	CHECK(rgpud_lease_init(NULL, now, err, sizeof(err)) == 0);
	register_gpus();
	const uint64_t R = RGPUD_LEASE_CTX_RESERVE;
	/* GPU 1 (8 GiB): a slice; job 71 waits for the whole GPU and claims it */
	CHECK(grant(70, 1, 1, 3 * GiB, 0, now, why, sizeof(why)) == RGPUD_LEASE_OK);
	CHECK(rgpud_lease_claim(71, 1, 0, now, 10, why, sizeof(why)) == RGPUD_LEASE_OK);
	CHECK(rgpud_lease_claim(71, 1, 0, now, 10, why, sizeof(why)) == RGPUD_LEASE_OK); /* renewed */
	CHECK(rgpud_lease_claim(72, 1, GiB, now, 10, why, sizeof(why)) == RGPUD_LEASE_BUSY);
	CHECK_STR(why, "claimed by job 71");
	/* nobody else takes the GPU meanwhile, not even a small slice */
	CHECK(grant(72, 1, 1, 1 * GiB, 0, now, why, sizeof(why)) == RGPUD_LEASE_NOSPACE);
	CHECK_STR(why, "claim counted");
	CHECK(grant(73, 1, 1, 0, 0, now, why, sizeof(why)) == RGPUD_LEASE_BUSY);
	/* the claimer gets it once the slice is gone; the claim is converted */
	CHECK(grant(71, 1, 1, 0, 0, now, why, sizeof(why)) == RGPUD_LEASE_BUSY);
	CHECK(rgpud_lease_release_job(70) == 1);
	CHECK(grant(71, 1, 1, 0, 0, now, why, sizeof(why)) == RGPUD_LEASE_OK);
	CHECK(rgpud_lease_release_job(71) == 1);
	CHECK(rgpud_lease_claim(72, 1, GiB, now, 10, why, sizeof(why)) == RGPUD_LEASE_OK);
	CHECK(rgpud_lease_claim(72, 1, GiB, now, 0, why, sizeof(why)) == RGPUD_LEASE_OK); /* dropped */
	CHECK(grant(74, 1, 1, 0, 0, now, why, sizeof(why)) == RGPUD_LEASE_OK);
	CHECK(rgpud_lease_release_job(74) == 1);
	/* GPU 0 (16 GiB): a slice claim holds its room only */
	CHECK(rgpud_lease_claim(80, 0, 4 * GiB, now, 5, why, sizeof(why)) == RGPUD_LEASE_OK);
	CHECK(grant(81, 1, 0, 16 * GiB - 4 * GiB - 2 * R + 1, 0, now, why, sizeof(why)) ==
	      RGPUD_LEASE_NOSPACE);
	CHECK(grant(81, 1, 0, 16 * GiB - 4 * GiB - 2 * R, 0, now, why, sizeof(why)) == RGPUD_LEASE_OK);
	CHECK(rgpud_lease_release_job(81) == 1);
	/* expired: no longer counted, and another job may claim */
	CHECK(grant(82, 1, 0, 16 * GiB - R, 0, now + 6, why, sizeof(why)) == RGPUD_LEASE_OK);
	CHECK(rgpud_lease_claim(83, 0, GiB, now + 6, 5, why, sizeof(why)) == RGPUD_LEASE_OK);
	/* what can never fit is refused */
	CHECK(rgpud_lease_claim(84, 1, 8 * GiB, now, 5, why, sizeof(why)) == RGPUD_LEASE_INVAL);
	CHECK(rgpud_lease_claim(84, 9, GiB, now, 5, why, sizeof(why)) == RGPUD_LEASE_NODEV);
	rgpud_lease_fini();
}

/* The context reserve is a setting (rgpud --ctx-reserve): grants pack by
 * it, a slice may charge its quota plus one reserve, and peak is kept. */
static void test_ctx_reserve(void)
{
	char err[512], why[512];
	time_t now = time(NULL);
	CHECK(rgpud_lease_init(NULL, now, err, sizeof(err)) == 0);
	register_gpus();
	CHECK(rgpud_lease_ctx_reserve() == RGPUD_LEASE_CTX_RESERVE);
	rgpud_lease_set_ctx_reserve(256 * MiB);
	CHECK(rgpud_lease_ctx_reserve() == 256 * MiB);
	/* 8 GiB GPU: six slices of 1 GiB + 256 MiB fit (7.5 GiB), not seven */
	for (uint64_t j = 1; j <= 6; j++)
		CHECK(grant(60 + j, 1, 1, 1 * GiB, 0, now, why, sizeof(why)) == RGPUD_LEASE_OK);
	CHECK(grant(67, 1, 1, 1 * GiB, 0, now, why, sizeof(why)) == RGPUD_LEASE_NOSPACE);
	CHECK_STR(why, "+256.0 MiB context reserve");
	struct rgpud_gpu_load *g;
	size_t ng;
	CHECK(rgpud_lease_gpus(&g, &ng) == 0 && ng == 2);
	for (size_t i = 0; i < ng; i++)
		if (g[i].gpu == 1)
			CHECK(g[i].reserved == 6 * (1 * GiB + 256 * MiB));
	free(g);
	/* a slice charges up to its quota plus the reserve, and no more */
	CHECK(rgpud_lease_charge(61, 1, 256 * MiB) == 0); /* a context */
	CHECK(rgpud_lease_charge(61, 1, 256 * MiB) == 0); /* a second one */
	CHECK(rgpud_lease_charge(61, 1, 1 * GiB - 256 * MiB) == 0);
	CHECK(rgpud_lease_charge(61, 1, 1) == RGPUD_LEASE_QUOTA);
	CHECK(rgpud_lease_refund(61, 1, 1 * GiB) == 0);
	struct rgpud_lease f;
	CHECK(rgpud_lease_find(61, 1, now, &f) == 0 && f.used == 256 * MiB &&
	      f.peak == 1 * GiB + 256 * MiB);
	rgpud_lease_set_ctx_reserve(RGPUD_LEASE_CTX_RESERVE);
	rgpud_lease_fini();
}

/* ---- concurrency ---- */

#define NTHREADS 8
#define NCHARGES 20000

struct thr {
	pthread_t t;
	uint64_t job;
	unsigned gpu;
	uint64_t step;
	long ok;
	int refund;
};

static void *charger(void *arg)
{
	struct thr *t = arg;
	for (int i = 0; i < NCHARGES; i++)
		if (rgpud_lease_charge(t->job, t->gpu, t->step) == 0)
			t->ok++;
	if (t->refund)
		for (long i = 0; i < t->ok; i++)
			rgpud_lease_refund(t->job, t->gpu, t->step);
	return NULL;
}

static void run_threads(uint64_t job, unsigned gpu, uint64_t step, int refund, long *ok)
{
	struct thr t[NTHREADS];
	for (int i = 0; i < NTHREADS; i++) {
		t[i] = (struct thr){ .job = job, .gpu = gpu, .step = step, .refund = refund };
		pthread_create(&t[i].t, NULL, charger, &t[i]);
	}
	*ok = 0;
	for (int i = 0; i < NTHREADS; i++) {
		pthread_join(t[i].t, NULL);
		*ok += t[i].ok;
	}
}

static void test_concurrent(void)
{
	char err[512], why[512];
	time_t now = time(NULL);
	CHECK(rgpud_lease_init(NULL, now, err, sizeof(err)) == 0);
	register_gpus();
	CHECK(grant(51, 1, 0, 0, 0, now, why, sizeof(why)) == RGPUD_LEASE_OK);
	rgpud_lease_set_ctx_reserve(0);
	CHECK(grant(52, 1, 1, 50000 * 3, 0, now, why, sizeof(why)) == RGPUD_LEASE_OK);
	struct rgpud_lease f;
	long ok;

	/* unlimited: every charge counts */
	run_threads(51, 0, 7, 0, &ok);
	CHECK(ok == (long)NTHREADS * NCHARGES);
	CHECK(rgpud_lease_find(51, 0, now, &f) == 0 && f.used == 7ull * NTHREADS * NCHARGES);

	/* limited: exactly the quota is handed out, never more */
	run_threads(52, 1, 3, 0, &ok);
	CHECK(ok == 50000);
	CHECK(rgpud_lease_find(52, 1, now, &f) == 0 && f.used == 150000);
	/* and refunds from all threads bring it back to zero */
	CHECK(rgpud_lease_refund(52, 1, 150000) == 0);
	run_threads(52, 1, 3, 1, &ok);
	CHECK(ok >= 50000);
	CHECK(rgpud_lease_find(52, 1, now, &f) == 0 && f.used == 0);
	rgpud_lease_set_ctx_reserve(RGPUD_LEASE_CTX_RESERVE);
	rgpud_lease_fini();
}

/* ---- access.c ---- */

static int call_op(const struct rgpud_principal *who, unsigned op, struct wbuf *req,
		   struct wbuf *reply)
{
	struct rd r;
	rd_init(&r, req->data, req->len);
	wbuf_reset(reply);
	return rgpud_access_admin_op(who, op, &r, reply);
}

static void put_grant(struct wbuf *w, uint64_t job, uint32_t uid, uint32_t gpu, uint64_t lim,
		      uint64_t exp)
{
	wbuf_reset(w);
	put_u64(w, job);
	put_u32(w, uid);
	put_u32(w, gpu);
	put_u64(w, lim);
	put_u64(w, exp);
}

static const char *reply_str(struct wbuf *reply)
{
	static char buf[512];
	struct rd r;
	rd_init(&r, reply->data, reply->len);
	const char *s = get_str(&r, 511);
	snprintf(buf, sizeof(buf), "%s", s && rd_done(&r) ? s : "<no message>");
	return buf;
}

static void test_access_open(void)
{
	char err[512], why[512];
	struct rgpud_access_config cfg = { .require_lease = 0, .open_access = 1 };
	CHECK(rgpud_access_init(&cfg, err, sizeof(err)) == 0);
	register_gpus();
	struct rgpud_principal who;
	CHECK(rgpud_access_hello(NULL, 0, "1.2.3.4:5", &who, why, sizeof(why)) == 0);
	CHECK(!who.authenticated && who.uid == 0 && who.job_id == 0);
	CHECK(rgpud_access_hello("junk", 4, "1.2.3.4:5", &who, why, sizeof(why)) == 0);
	CHECK(!who.authenticated);
	uint64_t lim = 1, used = 1;
	CHECK(rgpud_access_device(&who, 0, &lim, why, sizeof(why)) == 0 && lim == 0);
	CHECK(rgpud_access_device(&who, 5, &lim, why, sizeof(why)) == 0 && lim == 0);
	CHECK(rgpud_access_charge(&who, 0, 100 * GiB) == 0);
	CHECK(rgpud_access_refund(&who, 0, 100 * GiB) == 0);
	rgpud_access_usage(&who, 0, &lim, &used);
	CHECK(lim == 0 && used == 0);

	struct wbuf req, reply;
	wbuf_init(&req);
	wbuf_init(&reply);
	put_grant(&req, 1, 1, 0, 0, 0);
	CHECK(call_op(&who, RGPU_OP_LEASE_GRANT, &req, &reply) == CUDA_ERROR_NOT_SUPPORTED);
	CHECK_STR(reply_str(&reply), "open mode");
	wbuf_reset(&req);
	CHECK(call_op(&who, RGPU_OP_LEASE_LIST, &req, &reply) == 0);
	struct rd r;
	rd_init(&r, reply.data, reply.len);
	CHECK(get_u32(&r) == 2);
	CHECK(call_op(&who, RGPU_OP_MEM_ALLOC, &req, &reply) == -1);
	wbuf_free(&req);
	wbuf_free(&reply);
	rgpud_access_fini();
}

static void test_access_leases(void)
{
	char err[512], why[512];
	char *dir = make_tmpdir();
	struct rgpud_access_config cfg = { .require_lease = 1, .state_dir = NULL, .admin_uid = 64030 };
	CHECK(rgpud_access_init(&cfg, err, sizeof(err)) == -1);
	CHECK_STR(err, "state directory");
	cfg.state_dir = dir;
	CHECK(rgpud_access_init(&cfg, err, sizeof(err)) == 0);
	register_gpus();

	struct rgpud_principal who;
	CHECK(rgpud_access_hello(NULL, 0, "10.0.0.9:4000", &who, why, sizeof(why)) == -1);
	CHECK_STR(why, "no munge credential");
	CHECK(rgpud_access_hello("MUNGE:junk:", 11, "10.0.0.9:4000", &who, why, sizeof(why)) == -1);
#ifdef HAVE_MUNGE
	CHECK_STR(why, "munge: ");
#endif

	/* principals as hello would fill them from valid credentials */
	struct rgpud_principal user = { .uid = 1000, .gid = 1000, .job_id = 123, .authenticated = 1 };
	struct rgpud_principal user2 = user; /* another session of the same job */
	struct rgpud_principal other = { .uid = 1001, .job_id = 123, .authenticated = 1 };
	struct rgpud_principal root = { .uid = 0, .admin = 1, .authenticated = 1 };
	struct rgpud_principal slurm = { .uid = 64030, .admin = 1, .authenticated = 1 };
	struct rgpud_principal anon = { 0 };
	uint64_t lim, used;

	CHECK(rgpud_access_device(&user, 1, &lim, why, sizeof(why)) == -1);
	CHECK_STR(why, "job 123 of uid 1000 holds no lease on GPU 1");
	CHECK(rgpud_access_device(&anon, 0, &lim, why, sizeof(why)) == -1);

	struct wbuf req, reply;
	wbuf_init(&req);
	wbuf_init(&reply);
	/* only admins grant */
	put_grant(&req, 123, 1000, 1, 2 * GiB, 0);
	CHECK(call_op(&user, RGPU_OP_LEASE_GRANT, &req, &reply) == RGPU_ERR_AUTH);
	CHECK_STR(reply_str(&reply), "may not manage leases");
	CHECK(call_op(&anon, RGPU_OP_LEASE_GRANT, &req, &reply) == RGPU_ERR_AUTH);
	CHECK(call_op(&slurm, RGPU_OP_LEASE_GRANT, &req, &reply) == 0);
	CHECK(reply.len == 0);
	CHECK(call_op(&root, RGPU_OP_LEASE_GRANT, &req, &reply) == 0); /* idempotent */
	put_grant(&req, 123, 1000, 1, 3 * GiB, 0);
	CHECK(call_op(&root, RGPU_OP_LEASE_GRANT, &req, &reply) == CUDA_ERROR_ALREADY_ACQUIRED);
	put_grant(&req, 124, 1002, 1, 0, 0);
	CHECK(call_op(&root, RGPU_OP_LEASE_GRANT, &req, &reply) == CUDA_ERROR_DEVICE_UNAVAILABLE);
	CHECK_STR(reply_str(&reply), "hold slices");
	put_grant(&req, 124, 1002, 1, 6 * GiB, 0);
	CHECK(call_op(&root, RGPU_OP_LEASE_GRANT, &req, &reply) == CUDA_ERROR_OUT_OF_MEMORY);
	put_grant(&req, 124, 1002, 9, 0, 0);
	CHECK(call_op(&root, RGPU_OP_LEASE_GRANT, &req, &reply) == CUDA_ERROR_INVALID_DEVICE);
	wbuf_reset(&req);
	put_u64(&req, 1);
	CHECK(call_op(&root, RGPU_OP_LEASE_GRANT, &req, &reply) == RGPU_ERR_PROTO);
	put_grant(&req, 125, 1002, 0, 0, (uint64_t)time(NULL) + 1000);
	CHECK(call_op(&root, RGPU_OP_LEASE_GRANT, &req, &reply) == 0);

	/* the job's user may now use GPU 1 (only), within its quota */
	CHECK(rgpud_access_device(&user, 1, &lim, why, sizeof(why)) == 0 && lim == 2 * GiB);
	CHECK(rgpud_access_device(&user, 0, &lim, why, sizeof(why)) == -1);
	CHECK_STR(why, "holds no lease on GPU 0");
	CHECK(rgpud_access_device(&other, 1, &lim, why, sizeof(why)) == -1);
	CHECK_STR(why, "belongs to uid 1000, not uid 1001");
	/* every context is charged (issue 16.5): a slice holds its quota plus
	 * one context reserve, so the job's first context is not the quota's
	 * and each further one, of any session, is */
	const uint64_t R = RGPUD_LEASE_CTX_RESERVE;
	CHECK(rgpud_access_charge(&user, 1, R) == 0);
	rgpud_access_usage(&user, 1, &lim, &used);
	CHECK(lim == 2 * GiB && used == 0);
	CHECK(rgpud_access_charge(&user, 1, 1 * GiB) == 0);
	CHECK(rgpud_access_charge(&user2, 1, R) == 0); /* the second session's context */
	rgpud_access_usage(&user2, 1, &lim, &used);
	CHECK(lim == 2 * GiB && used == 1 * GiB + R);
	CHECK(rgpud_access_charge(&user2, 1, 1 * GiB - R) == 0);
	CHECK(rgpud_access_charge(&user2, 1, 1) == -1); /* quota summed over sessions */
	rgpud_access_usage(&user, 1, &lim, &used);
	CHECK(lim == 2 * GiB && used == 2 * GiB);
	CHECK(rgpud_access_refund(&user2, 1, 1 * GiB) == 0); /* session 2 ends */
	rgpud_access_usage(&user2, 1, &lim, &used);
	CHECK(lim == 2 * GiB && used == 1 * GiB);
	rgpud_access_usage(&user2, 0, &lim, &used);
	CHECK(lim == 0 && used == 0);

	/* listing (any authenticated principal) */
	wbuf_reset(&req);
	CHECK(call_op(&anon, RGPU_OP_LEASE_LIST, &req, &reply) == RGPU_ERR_AUTH);
	CHECK(call_op(&user, RGPU_OP_LEASE_LIST, &req, &reply) == 0);
	struct rd r;
	rd_init(&r, reply.data, reply.len);
	CHECK(get_u32(&r) == 2);
	for (int i = 0; i < 2; i++) {
		uint32_t g = get_u32(&r);
		const char *name = get_str(&r, 200);
		uint64_t total = get_u64(&r), reserved = get_u64(&r);
		uint32_t excl = get_u32(&r);
		CHECK(rd_ok(&r));
		if (g == 1)
			CHECK(total == 8 * GiB && reserved == 2 * GiB + RGPUD_LEASE_CTX_RESERVE &&
			      !excl && name && !strcmp(name, "Test GPU B"));
		else
			CHECK(g == 0 && excl && reserved == 16 * GiB);
	}
	/* a user sees only their own leases (issue 16.10)... */
	CHECK(get_u32(&r) == 1);
	CHECK(get_u64(&r) == 123 && get_u32(&r) == 1000);
	/* ...an admin sees every one */
	CHECK(call_op(&slurm, RGPU_OP_LEASE_LIST, &req, &reply) == 0);
	rd_init(&r, reply.data, reply.len);
	CHECK(get_u32(&r) == 2);
	for (int i = 0; i < 2; i++) {
		get_u32(&r);
		get_str(&r, 200);
		get_u64(&r);
		get_u64(&r);
		get_u32(&r);
	}
	CHECK(get_u32(&r) == 2);
	int seen = 0;
	for (int i = 0; i < 2; i++) {
		uint64_t job = get_u64(&r);
		uint32_t uid = get_u32(&r), g = get_u32(&r);
		uint64_t ml = get_u64(&r), u = get_u64(&r), exp = get_u64(&r);
		if (job == 123)
			seen += uid == 1000 && g == 1 && ml == 2 * GiB && u == 1 * GiB + R && exp == 0;
		else
			seen += job == 125 && g == 0 && ml == 0 && exp > 0;
	}
	CHECK(seen == 2);
	/* appended: the compute shares, none given */
	CHECK(get_u32(&r) == 2 && get_u32(&r) == 0 && get_u32(&r) == 0);
	CHECK(get_u64(&r) == R); /* appended: the context reserve in force */
	CHECK(rd_done(&r));

	/* accounting: peak memory and GPU time of a job's leases */
	wbuf_reset(&req);
	put_u64(&req, 123);
	CHECK(call_op(&anon, RGPU_OP_LEASE_STATS, &req, &reply) == RGPU_ERR_AUTH);
	CHECK(call_op(&other, RGPU_OP_LEASE_STATS, &req, &reply) == 0);
	rd_init(&r, reply.data, reply.len);
	CHECK(get_u32(&r) == 0 && rd_done(&r)); /* not their job's lease */
	CHECK(call_op(&user, RGPU_OP_LEASE_STATS, &req, &reply) == 0);
	rd_init(&r, reply.data, reply.len);
	CHECK(get_u32(&r) == 1);
	CHECK(get_u32(&r) == 1 && get_u64(&r) == 2 * GiB);
	uint64_t su = get_u64(&r), sp = get_u64(&r);
	get_u64(&r); /* held_ms: no session layer here */
	get_u64(&r); /* attained_ns: nor a scheduler */
	CHECK(rd_done(&r) && su == 1 * GiB + R && sp == 2 * GiB + R);
	put_u64(&req, 1);
	CHECK(call_op(&slurm, RGPU_OP_LEASE_STATS, &req, &reply) == RGPU_ERR_PROTO);

	/* restart of rgpud: leases survive, usage starts again from zero */
	rgpud_access_fini();
	CHECK(rgpud_access_init(&cfg, err, sizeof(err)) == 0);
	register_gpus();
	CHECK(rgpud_access_device(&user, 1, &lim, why, sizeof(why)) == 0 && lim == 2 * GiB);
	rgpud_access_usage(&user, 1, &lim, &used);
	CHECK(lim == 2 * GiB && used == 0);

	/* release by the epilog ends the job's sessions */
	wbuf_reset(&req);
	put_u64(&req, 123);
	CHECK(call_op(&user, RGPU_OP_LEASE_RELEASE, &req, &reply) == RGPU_ERR_AUTH);
	CHECK(was_ended(123) == 0);
	CHECK(call_op(&slurm, RGPU_OP_LEASE_RELEASE, &req, &reply) == 0);
	rd_init(&r, reply.data, reply.len);
	CHECK(get_u32(&r) == 1 && rd_done(&r));
	CHECK(was_ended(123) == 1);
	CHECK(rgpud_access_device(&user, 1, &lim, why, sizeof(why)) == -1);
	CHECK(rgpud_access_charge(&user, 1, 1) == -1);
	CHECK(rgpud_access_refund(&user, 1, 1) == 0);
	CHECK(call_op(&slurm, RGPU_OP_LEASE_RELEASE, &req, &reply) == 0);
	rd_init(&r, reply.data, reply.len);
	CHECK(get_u32(&r) == 0);

	/* expiry ends the sessions too (node failure: no epilog) */
	CHECK(was_ended(125) == 0);
	rgpud_access_check_expiry(time(NULL));
	CHECK(was_ended(125) == 0);
	rgpud_access_check_expiry(time(NULL) + 2000);
	CHECK(was_ended(125) == 1);

	wbuf_free(&req);
	wbuf_free(&reply);
	rgpud_access_fini();
	/* the expiry's removal was persisted */
	CHECK(rgpud_lease_init(dir, time(NULL), err, sizeof(err)) == 0);
	struct rgpud_lease *ls;
	size_t nl;
	CHECK(rgpud_lease_list(&ls, &nl) == 0 && nl == 0);
	free(ls);
	rgpud_lease_fini();
	rm_rf(dir);
	free(dir);
}

static void test_payload(void)
{
	uint64_t j = 7;
	CHECK(rgpud_auth_parse_payload("rgpu-job=0", 10, &j) == 0 && j == 0);
	CHECK(rgpud_auth_parse_payload("rgpu-job=18446744073709551615", 29, &j) == 0 &&
	      j == UINT64_MAX);
	CHECK(rgpud_auth_parse_payload("rgpu-job=18446744073709551616", 29, &j) == -1);
	CHECK(rgpud_auth_parse_payload("rgpu-job=", 9, &j) == -1);
	CHECK(rgpud_auth_parse_payload("rgpu-job=12a", 12, &j) == -1);
	CHECK(rgpud_auth_parse_payload("rgpu-job=-1", 11, &j) == -1);
	CHECK(rgpud_auth_parse_payload("job=12", 6, &j) == -1);
	CHECK(rgpud_auth_parse_payload(NULL, 0, &j) == -1);
	CHECK(rgpud_auth_parse_payload("rgpu-job=1\0", 11, &j) == -1);
}

/* ---- with a real munged ---- */

#if defined(RGPU_TEST_MUNGE) && defined(HAVE_MUNGE)
static pid_t munged_pid;
static char *munge_dir;

static const char *find_munged(void)
{
	static char path[512];
	const char *env = getenv("PATH");
	char *copy = strdup(env ? env : "");
	char *save = NULL;
	const char *found = NULL;
	for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
		snprintf(path, sizeof(path), "%s/munged", d);
		if (access(path, X_OK) == 0)
			found = path;
	}
	free(copy);
	static const char *std[] = { "/usr/sbin/munged", "/usr/local/sbin/munged", "/sbin/munged" };
	for (size_t i = 0; !found && i < 3; i++)
		if (access(std[i], X_OK) == 0)
			found = std[i];
	return found;
}

static void stop_munged(void)
{
	if (munged_pid > 0) {
		kill(munged_pid, SIGTERM);
		waitpid(munged_pid, NULL, 0);
		munged_pid = 0;
	}
	if (munge_dir) {
		rm_rf(munge_dir);
		free(munge_dir);
		munge_dir = NULL;
	}
}

/* 0, or -1 if munged cannot run here (the test is skipped). */
static int start_munged(void)
{
	const char *munged = find_munged();
	if (!munged) {
		fprintf(stderr, "munged not found: skipping\n");
		return -1;
	}
	munge_dir = make_tmpdir();
	chmod(munge_dir, 0755); /* munged wants its socket reachable by all */
	char key[600], sock[600], pid[600], log[600], seed[600];
	snprintf(key, sizeof(key), "%s/munge.key", munge_dir);
	snprintf(sock, sizeof(sock), "--socket=%s/munge.socket", munge_dir);
	snprintf(pid, sizeof(pid), "--pid-file=%s/munged.pid", munge_dir);
	snprintf(log, sizeof(log), "--log-file=%s/munged.log", munge_dir);
	snprintf(seed, sizeof(seed), "--seed-file=%s/munged.seed", munge_dir);
	unsigned char k[1024];
	int rfd = open("/dev/urandom", O_RDONLY);
	int kfd = open(key, O_WRONLY | O_CREAT | O_EXCL, 0600);
	if (rfd < 0 || kfd < 0 || read(rfd, k, sizeof(k)) != (ssize_t)sizeof(k) ||
	    write(kfd, k, sizeof(k)) != (ssize_t)sizeof(k)) {
		perror("munge key");
		exit(99);
	}
	close(rfd);
	close(kfd);
	char keyopt[620];
	snprintf(keyopt, sizeof(keyopt), "--key-file=%s", key);
	munged_pid = fork();
	if (munged_pid == 0) {
		int devnull = open("/dev/null", O_RDWR);
		dup2(devnull, 0);
		dup2(devnull, 1);
		execl(munged, "munged", "--foreground", keyopt, sock, pid, log, seed, (char *)NULL);
		_exit(127);
	}
	snprintf(sock, sizeof(sock), "%s/munge.socket", munge_dir);
	for (int i = 0; i < 100; i++) {
		int status;
		if (waitpid(munged_pid, &status, WNOHANG) == munged_pid) {
			fprintf(stderr, "munged exited at start (status %d): skipping\n", status);
			munged_pid = 0;
			return -1;
		}
		if (access(sock, F_OK) == 0) {
			setenv("RGPU_MUNGE_SOCKET", sock, 1);
			usleep(100000);
			return 0;
		}
		usleep(50000);
	}
	fprintf(stderr, "munged did not create its socket: skipping\n");
	return -1;
}

/* A credential made as uid nobody (root only): 0 or -1. */
static int cred_as_nobody(const char *job, char *out, size_t n)
{
	int p[2];
	if (getuid() != 0 || pipe(p))
		return -1;
	pid_t c = fork();
	if (c == 0) {
		close(p[0]);
		if (setgid(65534) || setuid(65534))
			_exit(1);
		setenv("SLURM_JOB_ID", job, 1);
		void *buf;
		size_t len;
		char err[256];
		if (rgpu_client_credential(&buf, &len, err, sizeof(err)) || !len)
			_exit(2);
		ssize_t w = write(p[1], buf, len);
		_exit(w == (ssize_t)len ? 0 : 3);
	}
	close(p[1]);
	size_t got = 0;
	ssize_t r;
	while (got < n - 1 && (r = read(p[0], out + got, n - 1 - got)) > 0)
		got += (size_t)r;
	out[got] = 0;
	close(p[0]);
	int status;
	waitpid(c, &status, 0);
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 && got ? 0 : -1;
}

static void test_munge(void)
{
	char err[512], why[512];
	void *buf;
	size_t len;
	struct rgpud_cred c;

	setenv("SLURM_JOB_ID", "4242", 1);
	CHECK(rgpu_client_credential(&buf, &len, err, sizeof(err)) == 0);
	CHECK(buf && len > 10 && !strncmp(buf, "MUNGE:", 6));
	CHECK(rgpud_auth_decode(buf, len, &c, why, sizeof(why)) == 0);
	CHECK(c.uid == getuid() && c.gid == getgid() && c.job_id == 4242);
	/* replay */
	CHECK(rgpud_auth_decode(buf, len, &c, why, sizeof(why)) == -1);
	CHECK_STR(why, "munge: ");
	CHECK_STR(why, "eplayed");
	/* tampered */
	((char *)buf)[len / 2] ^= 1;
	CHECK(rgpud_auth_decode(buf, len, &c, why, sizeof(why)) == -1);
	CHECK_STR(why, "munge: ");
	free(buf);

	unsetenv("SLURM_JOB_ID");
	CHECK(rgpu_client_credential(&buf, &len, err, sizeof(err)) == 0);
	CHECK(rgpud_auth_decode(buf, len, &c, why, sizeof(why)) == 0 && c.job_id == 0);
	free(buf);
	setenv("SLURM_JOB_ID", "12x", 1);
	CHECK(rgpu_client_credential(&buf, &len, err, sizeof(err)) == -1);
	CHECK_STR(err, "SLURM_JOB_ID");
	setenv("SLURM_JOB_ID", "-3", 1);
	CHECK(rgpu_client_credential(&buf, &len, err, sizeof(err)) == -1);

	/* a munge credential that is not rgpu's */
	munge_ctx_t ctx = munge_ctx_create();
	munge_ctx_set(ctx, MUNGE_OPT_SOCKET, getenv("RGPU_MUNGE_SOCKET"));
	char *foreign = NULL;
	CHECK(munge_encode(&foreign, ctx, "hello", 5) == EMUNGE_SUCCESS);
	munge_ctx_destroy(ctx);
	if (foreign) {
		CHECK(rgpud_auth_decode(foreign, strlen(foreign), &c, why, sizeof(why)) == -1);
		CHECK_STR(why, "does not carry an rgpu job id");
		free(foreign);
	}

	/* the daemon side, in lease mode */
	char *dir = make_tmpdir();
	struct rgpud_access_config cfg = { .require_lease = 1, .state_dir = dir, .admin_uid = 64030 };
	CHECK(rgpud_access_init(&cfg, err, sizeof(err)) == 0);
	register_gpus();
	struct rgpud_principal who;
	setenv("SLURM_JOB_ID", "777", 1);
	CHECK(rgpu_client_credential(&buf, &len, err, sizeof(err)) == 0);
	CHECK(rgpud_access_hello(buf, len, "peer:1", &who, why, sizeof(why)) == 0);
	CHECK(who.authenticated && who.uid == getuid() && who.job_id == 777 &&
	      who.admin == (getuid() == 0));
	CHECK(rgpud_access_hello(buf, len, "peer:1", &who, why, sizeof(why)) == -1);
	free(buf);

	char cred[4096];
	if (cred_as_nobody("777", cred, sizeof(cred)) == 0) {
		CHECK(rgpud_access_hello(cred, strlen(cred), "peer:2", &who, why, sizeof(why)) == -1);
		CHECK_STR(why, "job 777 of uid 65534 holds no lease on this server");
		struct rgpud_lease l = L(777, 65534, 0, 1 * GiB, 0);
		CHECK(rgpud_lease_grant(&l, time(NULL), why, sizeof(why)) == 0);
		CHECK(cred_as_nobody("777", cred, sizeof(cred)) == 0);
		CHECK(rgpud_access_hello(cred, strlen(cred), "peer:2", &who, why, sizeof(why)) == 0);
		CHECK(who.uid == 65534 && who.job_id == 777 && !who.admin);
		uint64_t lim;
		CHECK(rgpud_access_device(&who, 0, &lim, why, sizeof(why)) == 0 && lim == 1 * GiB);
		CHECK(rgpud_access_device(&who, 1, &lim, why, sizeof(why)) == -1);
		CHECK_STR(why, "job 777 of uid 65534 holds no lease on GPU 1");
		struct wbuf req, reply;
		wbuf_init(&req);
		wbuf_init(&reply);
		put_u64(&req, 777);
		CHECK(call_op(&who, RGPU_OP_LEASE_RELEASE, &req, &reply) == RGPU_ERR_AUTH);
		wbuf_free(&req);
		wbuf_free(&reply);
		CHECK(cred_as_nobody("0", cred, sizeof(cred)) == 0);
		CHECK(rgpud_access_hello(cred, strlen(cred), "peer:3", &who, why, sizeof(why)) == -1);
		CHECK_STR(why, "not in a Slurm job");
		/* issue 16.10: another uid's job is refused at HELLO (before the
		 * parent spawns a worker for it), not at the first GPU use */
		struct rgpud_lease l2 = L(778, 1234, 0, 1 * GiB, 0);
		CHECK(rgpud_lease_grant(&l2, time(NULL), why, sizeof(why)) == 0);
		CHECK(cred_as_nobody("778", cred, sizeof(cred)) == 0);
		CHECK(rgpud_access_hello(cred, strlen(cred), "peer:4", &who, why, sizeof(why)) == -1);
		CHECK_STR(why, "job 778 of uid 65534 holds no lease");
	} else {
		fprintf(stderr, "(not root: the non-admin uid checks are skipped)\n");
	}
	rgpud_access_fini();
	rm_rf(dir);
	free(dir);

	/* issue 16.3: deny by default.  Without --leases and --open, a munge
	 * credential of root or of an allowed user or group is required. */
	struct rgpud_access_config deny = { 0 };
	CHECK(rgpud_access_init(&deny, err, sizeof(err)) == 0);
	CHECK(rgpud_access_hello(NULL, 0, "peer:5", &who, why, sizeof(why)) == -1);
	CHECK_STR(why, "requires a munge credential");
	CHECK_STR(why, "--open");
	CHECK(rgpu_client_credential(&buf, &len, err, sizeof(err)) == 0);
	CHECK(rgpud_access_hello(buf, len, "peer:5", &who, why, sizeof(why)) == (getuid() == 0 ? 0 : -1));
	free(buf);
	if (getuid() == 0 && cred_as_nobody("0", cred, sizeof(cred)) == 0) {
		CHECK(rgpud_access_hello(cred, strlen(cred), "peer:6", &who, why, sizeof(why)) == -1);
		CHECK_STR(why, "uid 65534 is not allowed");
		rgpud_access_fini();
		uint32_t nobody = 65534, other = 4321;
		struct rgpud_access_config allow_u = { .allow_uids = &other, .nallow_uids = 1 };
		CHECK(rgpud_access_init(&allow_u, err, sizeof(err)) == 0);
		CHECK(cred_as_nobody("0", cred, sizeof(cred)) == 0);
		CHECK(rgpud_access_hello(cred, strlen(cred), "peer:6", &who, why, sizeof(why)) == -1);
		rgpud_access_fini();
		allow_u.allow_uids = &nobody;
		CHECK(rgpud_access_init(&allow_u, err, sizeof(err)) == 0);
		CHECK(cred_as_nobody("0", cred, sizeof(cred)) == 0);
		CHECK(rgpud_access_hello(cred, strlen(cred), "peer:6", &who, why, sizeof(why)) == 0);
		CHECK(who.uid == 65534 && who.authenticated);
		/* --max-sessions-per-user */
		rgpud_access_fini();
		allow_u.max_sessions_per_user = 2;
		CHECK(rgpud_access_init(&allow_u, err, sizeof(err)) == 0);
		sessions_now = 2;
		CHECK(cred_as_nobody("0", cred, sizeof(cred)) == 0);
		CHECK(rgpud_access_hello(cred, strlen(cred), "peer:6", &who, why, sizeof(why)) == -1);
		CHECK_STR(why, "already has 2 sessions");
		sessions_now = 1;
		CHECK(cred_as_nobody("0", cred, sizeof(cred)) == 0);
		CHECK(rgpud_access_hello(cred, strlen(cred), "peer:6", &who, why, sizeof(why)) == 0);
		sessions_now = 0;
		rgpud_access_fini();
		/* groups: nobody's primary group (65534 on Debian: nogroup) */
		uint32_t nogroup = 65534;
		struct rgpud_access_config allow_g = { .allow_gids = &nogroup, .nallow_gids = 1 };
		CHECK(rgpud_access_init(&allow_g, err, sizeof(err)) == 0);
		CHECK(cred_as_nobody("0", cred, sizeof(cred)) == 0);
		CHECK(rgpud_access_hello(cred, strlen(cred), "peer:7", &who, why, sizeof(why)) == 0);
	}
	rgpud_access_fini();

	/* munged unreachable at an explicit socket */
	char *saved = strdup(getenv("RGPU_MUNGE_SOCKET"));
	setenv("RGPU_MUNGE_SOCKET", "/nonexistent/munge.socket", 1);
	CHECK(rgpu_client_credential(&buf, &len, err, sizeof(err)) == -1);
	CHECK_STR(err, "munge");
	setenv("RGPU_MUNGE_SOCKET", saved, 1);
	free(saved);
	unsetenv("SLURM_JOB_ID");
}
#endif

/* The compute share (--rgpu-share, daemon/sched/): granted with an
 * appended field, listed after the leases, persisted; 0 or over 100 is not
 * a share; a different share is a different lease. */
static void test_share(void)
{
	char err[512], why[512];
	char *dir = make_tmpdir();
	struct rgpud_access_config cfg = { .require_lease = 1, .state_dir = dir };
	CHECK(rgpud_access_init(&cfg, err, sizeof(err)) == 0);
	register_gpus();
	struct rgpud_principal root = { .uid = 0, .admin = 1, .authenticated = 1 };
	struct wbuf req, reply;
	wbuf_init(&req);
	wbuf_init(&reply);
	put_grant(&req, 300, 1000, 1, 1 * GiB, 0);
	put_u32(&req, 150);
	CHECK(call_op(&root, RGPU_OP_LEASE_GRANT, &req, &reply) == CUDA_ERROR_INVALID_VALUE);
	CHECK_STR(reply_str(&reply), "share 150");
	put_grant(&req, 300, 1000, 1, 1 * GiB, 0);
	put_u32(&req, 25);
	CHECK(call_op(&root, RGPU_OP_LEASE_GRANT, &req, &reply) == 0);
	CHECK(call_op(&root, RGPU_OP_LEASE_GRANT, &req, &reply) == 0); /* the same again */
	put_grant(&req, 300, 1000, 1, 1 * GiB, 0);
	put_u32(&req, 50);
	CHECK(call_op(&root, RGPU_OP_LEASE_GRANT, &req, &reply) == CUDA_ERROR_ALREADY_ACQUIRED);
	put_grant(&req, 301, 1001, 1, 1 * GiB, 0); /* no share */
	CHECK(call_op(&root, RGPU_OP_LEASE_GRANT, &req, &reply) == 0);
	struct rgpud_lease l;
	CHECK(rgpud_lease_find(300, 1, time(NULL), &l) == 0 && l.share == 25);
	CHECK(rgpud_lease_find(301, 1, time(NULL), &l) == 0 && l.share == 0);
	wbuf_reset(&req);
	CHECK(call_op(&root, RGPU_OP_LEASE_LIST, &req, &reply) == 0);
	struct rd r;
	rd_init(&r, reply.data, reply.len);
	uint32_t ng = get_u32(&r);
	for (uint32_t i = 0; i < ng; i++) {
		get_u32(&r);
		get_str(&r, 200);
		get_u64(&r);
		get_u64(&r);
		get_u32(&r);
	}
	uint32_t nl = get_u32(&r);
	uint64_t jobs[4] = { 0 };
	CHECK(nl == 2);
	for (uint32_t i = 0; i < nl && i < 4; i++) {
		jobs[i] = get_u64(&r);
		get_u32(&r);
		get_u32(&r);
		get_u64(&r);
		get_u64(&r);
		get_u64(&r);
	}
	CHECK(get_u32(&r) == nl);
	for (uint32_t i = 0; i < nl && i < 4; i++) {
		uint32_t sh = get_u32(&r);
		CHECK(sh == (jobs[i] == 300 ? 25u : 0u));
	}
	get_u64(&r); /* then the context reserve */
	CHECK(rd_done(&r));
	/* persisted: a restart keeps the share */
	rgpud_access_fini();
	CHECK(rgpud_access_init(&cfg, err, sizeof(err)) == 0);
	register_gpus();
	CHECK(rgpud_lease_find(300, 1, time(NULL), &l) == 0 && l.share == 25);
	CHECK(rgpud_lease_find(301, 1, time(NULL), &l) == 0 && l.share == 0);
	(void)why;
	wbuf_free(&req);
	wbuf_free(&reply);
	rgpud_access_fini();
}

int main(void)
{
	const char *v = getenv("RGPU_TEST_VERBOSE");
	rgpu_log_open("test_lease", v && *v ? RGPU_LOG_DEBUG : RGPU_LOG_ERR, 0);
	signal(SIGPIPE, SIG_IGN);
#ifdef RGPU_TEST_MUNGE
#ifndef HAVE_MUNGE
	fprintf(stderr, "built without munge: skipping\n");
	return 77;
#else
	if (start_munged()) {
		stop_munged();
		return 77;
	}
	test_munge();
	stop_munged();
#endif
#else
	test_payload();
	test_grant_conflicts();
	test_overcommit();
	test_expiry();
	test_persistence();
	test_corrupt();
	test_load_many();
	test_quota();
	test_ctx_reserve();
	test_claims();
	test_concurrent();
	test_access_open();
	test_access_leases();
	test_share();
#endif
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("ok\n");
	return 0;
}
