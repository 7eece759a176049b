/*
 * Decision time of the GPU selector on a simulated cluster (default 10,000
 * GPUs: 1,250 servers of 8), loaded at random.  Measures what a job start
 * pays on its node: loading the snapshot file, then choosing and reserving
 * (with a backend that accepts every grant, so only the decision is timed;
 * the grants themselves are one round trip per chosen server).
 *
 *   bench_select [--gpus N] [--per-server K] [--iters I]
 */
#include "clock.h"
#include "cluster.h"
#include "policy.h"
#include "select.h"
#include "snapshot.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define GiB (1ull << 30)

static int ok_grant(void *ctx, const struct rg_server *s, const struct rg_gpu *g,
		    const struct rg_request *r, char *why, size_t whylen)
{
	return RG_GRANT_OK;
}
static void no_release(void *ctx, const struct rg_server *s, uint64_t job) {}

static void build(struct rg_cluster *c, unsigned gpus, unsigned per)
{
	rg_cluster_init(c);
	srand(42);
	for (unsigned i = 0; i < gpus; i++) {
		if (i % per == 0) {
			char n[32];
			snprintf(n, sizeof(n), "gpu%05u", i / per);
			rg_cluster_add_server(c, n, n, 7420);
		}
		/* A busy cluster: a third exclusive, a third sliced, a third idle. */
		int kind = rand() % 3;
		uint64_t total = 80 * GiB;
		uint64_t res = kind == 1 ? (uint64_t)(rand() % 60 + 1) * GiB : 0;
		rg_cluster_add_gpu(c, i % per, "H100", total, res, kind == 1 ? 2 : 0, kind == 0);
	}
	c->taken = time(NULL);
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	unsigned gpus = 10000, per = 8, iters = 200;
	static const struct option opts[] = {
		{ "gpus", required_argument, NULL, 'g' },
		{ "per-server", required_argument, NULL, 'p' },
		{ "iters", required_argument, NULL, 'i' },
		{ NULL, 0, NULL, 0 },
	};
	int o;
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'g': gpus = (unsigned)atoi(optarg); break;
		case 'p': per = (unsigned)atoi(optarg); break;
		case 'i': iters = (unsigned)atoi(optarg); break;
		default:
			fprintf(stderr, "usage: %s [--gpus N] [--per-server K] [--iters I]\n", argv[0]);
			return 2;
		}
	}
	if (!gpus || !per || !iters)
		return 2;

	struct rg_cluster base;
	build(&base, gpus, per);
	char path[] = "/tmp/rgpu-bench-snap-XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0)
		return 1;
	close(fd);
	char err[256];
	if (rg_snapshot_save(path, &base, err, sizeof(err))) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	printf("cluster: %u GPUs on %zu servers; %u decisions per case\n", gpus, base.nsrv, iters);
	printf("%-14s %-22s %12s %12s %12s\n", "policy", "request", "load+decide", "decide", "p99 decide");

	struct { unsigned count; uint64_t mem; const char *label; } cases[] = {
		{ 1, 0, "1 whole GPU" }, { 2, 0, "2 whole GPUs" }, { 8, 0, "8 whole GPUs" },
		{ 1, 2 * GiB, "1 slice of 2 GiB" }, { 4, 10 * GiB, "4 slices of 10 GiB" },
	};
	struct rg_backend b = { ok_grant, no_release, NULL };
	double *dec = calloc(iters, sizeof(double));
	double *tot = calloc(iters, sizeof(double));
	for (int p = 0; rg_policies[p]; p++) {
		for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
			for (unsigned it = 0; it < iters; it++) {
				double t0 = (double)rgpu_now_ns() / 1e3;
				struct rg_cluster c;
				rg_cluster_init(&c);
				if (rg_snapshot_load(path, &c))
					return 1;
				double t1 = (double)rgpu_now_ns() / 1e3;
				char node[32];
				snprintf(node, sizeof(node), "gpu%05u", (unsigned)rand() % (gpus / per));
				struct rg_request r = { .count = cases[k].count, .mem = cases[k].mem,
							.local_node = it % 2 ? node : "cpu1",
							.job_id = it + 1 };
				uint32_t out[8];
				char why[256];
				if (rg_reserve(&c, &r, rg_policies[p], &b, out, why, sizeof(why))) {
					fprintf(stderr, "%s: %s\n", cases[k].label, why);
					return 1;
				}
				double t2 = (double)rgpu_now_ns() / 1e3;
				dec[it] = t2 - t1;
				tot[it] = t2 - t0;
				rg_cluster_free(&c);
			}
			qsort(dec, iters, sizeof(double), cmp);
			qsort(tot, iters, sizeof(double), cmp);
			printf("%-14s %-22s %9.0f us %9.1f us %9.1f us\n", rg_policies[p]->name,
			       cases[k].label, tot[iters / 2], dec[iters / 2], dec[iters * 99 / 100]);
		}
	}
	printf("(medians; load = parsing the %u-GPU snapshot file)\n", gpus);
	free(dec);
	free(tot);
	unlink(path);
	rg_cluster_free(&base);
	return 0;
}
