/*
 * Helpers shared by bw_lat.c and raw_tcp.c: the size list, size parsing,
 * a monotonic clock, medians and the JSON line writer.
 *
 * Every measurement is one JSON object on one line, with the same keys in
 * both programs so run-bench.sh can join them:
 *   bandwidth: {"tool","target","kind":"bw","op","mem","bytes","reps",
 *               "median_s","min_s","gbps"}        (gbps = bytes/median_s/1e9)
 *   latency:   {"tool","target","kind":"lat","op","bytes","reps",
 *               "median_us","p10_us","p90_us","min_us"}
 */
#ifndef RGPU_BENCH_COMMON_H
#define RGPU_BENCH_COMMON_H

#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const size_t bench_sizes[] = {
	4u << 10, 64u << 10, 1u << 20, 4u << 20, 16u << 20, 64u << 20, 256u << 20,
};
#define BENCH_NSIZES (sizeof(bench_sizes) / sizeof(bench_sizes[0]))

/* Defaults: a measurement runs for at least BENCH_MIN_TIME seconds and at
 * least BENCH_MIN_REPS (bandwidth) / BENCH_MIN_LAT_REPS (latency) times. */
#define BENCH_MIN_TIME 0.2
#define BENCH_MIN_REPS 3
#define BENCH_MIN_LAT_REPS 100
#define BENCH_MAX_REPS 1000000

static inline double bench_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* "4096", "4K", "64KiB", "16M", "1G": binary units, a bare number is bytes.
 * 0 on success. */
static inline int bench_parse_size(const char *s, size_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -1;
	unsigned shift = 0;
	switch (*end) {
	case '\0': break;
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	default: return -1;
	}
	if (shift && (strcmp(end, "") == 0 || strcmp(end, "iB") == 0 || strcmp(end, "B") == 0))
		end += strlen(end);
	if (*end)
		return -1;
	if (v > (SIZE_MAX >> shift))
		return -1;
	*out = (size_t)(v << shift);
	return 0;
}

/* BENCH_MAX_SIZE, where set, in *max: 0, or -1 with a message naming
 * prog. */
static inline int bench_env_max(const char *prog, size_t *max)
{
	const char *env = getenv("BENCH_MAX_SIZE");
	if (env && *env && bench_parse_size(env, max)) {
		fprintf(stderr, "%s: bad BENCH_MAX_SIZE '%s'\n", prog, env);
		return -1;
	}
	return 0;
}

/* The options both programs take, as getopt_long returned option c:
 * --target ('t'), --json ('j'), --max ('m'), --min ('n': the smallest
 * copy measured), --min-time ('T').  1 when c was one of them, 0 when not,
 * -1 on a bad size (said on stderr). */
static inline int bench_common_opt(const char *prog, int c, const char **target, const char **json_path,
				   size_t *min, size_t *max, double *min_time)
{
	switch (c) {
	case 't': *target = optarg; return 1;
	case 'j': *json_path = optarg; return 1;
	case 'm':
	case 'n':
		if (bench_parse_size(optarg, c == 'm' ? max : min)) {
			fprintf(stderr, "%s: bad size '%s'\n", prog, optarg);
			return -1;
		}
		return 1;
	case 'T': *min_time = atof(optarg); return 1;
	default: return 0;
	}
}

static inline void bench_fmt_size(size_t n, char *buf, size_t len)
{
	if (n >= (1u << 20) && n % (1u << 20) == 0)
		snprintf(buf, len, "%zu MiB", n >> 20);
	else if (n >= 1024 && n % 1024 == 0)
		snprintf(buf, len, "%zu KiB", n >> 10);
	else
		snprintf(buf, len, "%zu B", n);
}

static inline int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Sorts v in place; q in [0,1], nearest rank (q = 0.5: the median, the mean
 * of the two middle values for an even count). */
static inline double bench_quantile(double *v, size_t n, double q, int sorted)
{
	if (n == 0)
		return 0.0;
	if (!sorted)
		qsort(v, n, sizeof(*v), bench_cmp_double);
	if (q == 0.5)
		return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
	size_t i = (size_t)(q * (double)(n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}

/* A growing array of per-repetition times (seconds). */
struct bench_samples {
	double *v;
	size_t n, cap;
};

static inline int bench_add(struct bench_samples *s, double t)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 1024;
		double *v = realloc(s->v, cap * sizeof(*v));
		if (!v)
			return -1;
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n++] = t;
	return 0;
}

/* Enough repetitions?  At least min_reps and min_time seconds in all. */
static inline int bench_done(const struct bench_samples *s, double elapsed,
			     double min_time, size_t min_reps)
{
	if (s->n >= BENCH_MAX_REPS)
		return 1;
	return s->n >= min_reps && elapsed >= min_time;
}

static inline void bench_json_bw(FILE *f, const char *tool, const char *target,
				 const char *op, const char *mem, size_t bytes,
				 struct bench_samples *s)
{
	double med = bench_quantile(s->v, s->n, 0.5, 0);
	double mn = s->v[0];
	if (!f)
		return;
	fprintf(f, "{\"tool\": \"%s\", \"target\": \"%s\", \"kind\": \"bw\", \"op\": \"%s\", "
		"\"mem\": \"%s\", \"bytes\": %zu, \"reps\": %zu, \"median_s\": %.9g, "
		"\"min_s\": %.9g, \"gbps\": %.6g}\n",
		tool, target, op, mem, bytes, s->n, med, mn,
		med > 0 ? (double)bytes / med / 1e9 : 0.0);
	fflush(f);
}

static inline void bench_json_lat(FILE *f, const char *tool, const char *target,
				  const char *op, size_t bytes, struct bench_samples *s)
{
	double med = bench_quantile(s->v, s->n, 0.5, 0);
	double p10 = bench_quantile(s->v, s->n, 0.1, 1);
	double p90 = bench_quantile(s->v, s->n, 0.9, 1);
	if (!f)
		return;
	fprintf(f, "{\"tool\": \"%s\", \"target\": \"%s\", \"kind\": \"lat\", \"op\": \"%s\", "
		"\"bytes\": %zu, \"reps\": %zu, \"median_us\": %.6g, \"p10_us\": %.6g, "
		"\"p90_us\": %.6g, \"min_us\": %.6g}\n",
		tool, target, op, bytes, s->n, med * 1e6, p10 * 1e6, p90 * 1e6,
		s->v[0] * 1e6);
	fflush(f);
}

#endif
