/*
 * bw_lat: host<->device copy bandwidth and small-call latency through the
 * CUDA driver API.
 *
 * The same binary measures the local GPU (LD_LIBRARY_PATH = the real
 * driver's directory) or a GPU through rgpud (LD_LIBRARY_PATH = the rgpu
 * client, RGPU_SERVERS=host:port/gpu): the libcuda.so.1 found at run time
 * decides.  --target names the column in the output.
 *
 * Bandwidth: synchronous cuMemcpyHtoD / cuMemcpyDtoH of 4 KiB .. 256 MiB,
 * from/to a pinned (cuMemHostAlloc) and a pageable (malloc, pre-touched)
 * host buffer.  Each copy is timed on its own; a size is repeated until
 * --min-time seconds (0.2) and at least 3 copies have run, after one
 * untimed warm-up copy; the result is the median copy time, as
 * GB/s = bytes / median / 1e9.
 *
 * Latency (median of >= 100 calls and >= --min-time seconds, after 20
 * warm-up calls):
 *   ctx_sync      cuCtxSynchronize with nothing queued (through rgpu the
 *                 client knows nothing is queued: no round trip)
 *   null_call     cuCtxGetLimit(CU_LIMIT_STACK_SIZE): through rgpu always
 *                 one round trip (the driver may grow the limit at a
 *                 launch, so the client never answers it), almost no work
 *                 on the server: what one synchronous trip costs
 *   htod_4B       cuMemcpyHtoD of 4 bytes from pinned memory
 *   dtoh_4B       cuMemcpyDtoH of 4 bytes to pinned memory
 *   launch_sync   cuLaunchKernel of a do-nothing kernel (inc_i32 with n = 0,
 *                 1 block of 1 thread: the emulated device knows only the
 *                 test kernels) + cuCtxSynchronize; built only with nvcc
 *   launch_async  a batch of such launches + one cuCtxSynchronize, per
 *                 launch: the launch throughput
 *   launch_enqueue the same batches, the launches' own time (the sync
 *                 left out), per launch: what a launch costs the caller's
 *                 CPU (locally the driver's; through rgpu the client's);
 *                 below launch_async, the GPU or the server bounds the rate
 *
 * Output: a table on stdout; one JSON line per measurement to --json PATH
 * (format in bench_common.h).  Exit 0, or 1 on any CUDA error.
 */
#include <cuda.h>

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"

#ifdef BENCH_HAVE_KERNELS
/* test/kernels/test_kernels.cu as a fatbin (sm_90 + compute_90 PTX),
 * written to bench_kernels.fatbin.c by bench/Makefile. */
extern const unsigned char test_kernels_fatbin[];
extern const size_t test_kernels_fatbin_size;
#endif

static const char *target = "local";
static const char *only; /* --only: one latency measurement */
static FILE *json;
static double min_time = BENCH_MIN_TIME;

static const char *cu_name(CUresult rc)
{
	const char *s = NULL;
	if (cuGetErrorName(rc, &s) != CUDA_SUCCESS || !s)
		return "(unknown CUresult)";
	return s;
}

#define CK(call) do { \
	CUresult ck_rc_ = (call); \
	if (ck_rc_ != CUDA_SUCCESS) { \
		fprintf(stderr, "bw_lat: %s:%d: %s failed: %s (%d)\n", __FILE__, \
			__LINE__, #call, cu_name(ck_rc_), (int)ck_rc_); \
		exit(1); \
	} \
} while (0)

static void usage(FILE *f)
{
	fprintf(f,
"Usage: bw_lat [--target NAME] [--json PATH] [--min SIZE] [--max SIZE] [--min-time SEC]\n"
"              [--device N] [--no-bw] [--no-lat] [--only OP]\n"
"  --target NAME   label of this run in the output (local, rgpud, ...)\n"
"  --json PATH     append one JSON line per measurement to PATH\n"
"  --max SIZE      largest copy (default 256M; also BENCH_MAX_SIZE)\n"
"  --min SIZE      smallest copy (default: every size from 4K)\n"
"  --min-time SEC  minimum time per measurement (default 0.2)\n"
"  --device N      CUDA device ordinal (default 0)\n"
"  --only OPS      of the latencies, only these (null_call,launch_async,...)\n"
"  --own-ctx       a context of its own (cuCtxCreate, as rgpud makes a\n"
"                  session's), not the device's primary context\n");
}

enum dir { H2D, D2H };

static void copy(enum dir d, CUdeviceptr dp, void *hp, size_t n)
{
	if (d == H2D)
		CK(cuMemcpyHtoD(dp, hp, n));
	else
		CK(cuMemcpyDtoH(hp, dp, n));
}

static void bw_one(enum dir d, const char *mem, CUdeviceptr dp, void *hp, size_t n)
{
	struct bench_samples s = { 0 };
	copy(d, dp, hp, n); /* warm-up */
	double start = bench_now();
	for (;;) {
		double t0 = bench_now();
		copy(d, dp, hp, n);
		double t1 = bench_now();
		if (bench_add(&s, t1 - t0) < 0) {
			fprintf(stderr, "bw_lat: out of memory\n");
			exit(1);
		}
		if (bench_done(&s, t1 - start, min_time, BENCH_MIN_REPS))
			break;
	}
	const char *op = d == H2D ? "h2d" : "d2h";
	bench_json_bw(json, "bw_lat", target, op, mem, n, &s);
	char sz[32];
	bench_fmt_size(n, sz, sizeof(sz));
	double med = bench_quantile(s.v, s.n, 0.5, 1);
	printf("  %-4s %-9s %10s %10.3f GB/s %10.1f us %8zu reps\n", op, mem, sz,
	       (double)n / med / 1e9, med * 1e6, s.n);
	free(s.v);
}

/* launch_async: per-launch time within a batch of this many launches */
#define LAUNCH_BATCH 200

struct lat_ctx {
	CUdeviceptr dp;
	void *pinned;
	CUfunction fn;
};

/* launch_enqueue: the last batch's launches alone */
static double enqueue_s;

static void lat_call(const char *op, const struct lat_ctx *c)
{
	if (strcmp(op, "ctx_sync") == 0) {
		CK(cuCtxSynchronize());
	} else if (strcmp(op, "null_call") == 0) {
		size_t v;
		CK(cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE));
	} else if (strcmp(op, "htod_4B") == 0) {
		CK(cuMemcpyHtoD(c->dp, c->pinned, 4));
	} else if (strcmp(op, "dtoh_4B") == 0) {
		CK(cuMemcpyDtoH(c->pinned, c->dp, 4));
	} else if (strcmp(op, "launch_async") == 0 || strcmp(op, "launch_enqueue") == 0) {
		/* launch throughput: a batch of launches, then one sync */
		CUdeviceptr p = c->dp;
		int n = 0;
		void *args[] = { &p, &n };
		double t0 = bench_now();
		for (int i = 0; i < LAUNCH_BATCH; i++)
			CK(cuLaunchKernel(c->fn, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
		enqueue_s = bench_now() - t0;
		CK(cuCtxSynchronize());
	} else {
		CUdeviceptr p = c->dp;
		int n = 0;
		void *args[] = { &p, &n };
		CK(cuLaunchKernel(c->fn, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
		CK(cuCtxSynchronize());
	}
}

/* whether op is one of the comma-separated names in list */
static int listed(const char *list, const char *op)
{
	size_t n = strlen(op);
	for (const char *p = list; p; p = strchr(p, ',')) {
		if (*p == ',')
			p++;
		if (strncmp(p, op, n) == 0 && (p[n] == ',' || p[n] == '\0'))
			return 1;
	}
	return 0;
}

static void lat_one(const char *op, size_t bytes, const struct lat_ctx *c)
{
	if (only && !listed(only, op))
		return;
	struct bench_samples s = { 0 };
	int enq = strcmp(op, "launch_enqueue") == 0;
	double div = strcmp(op, "launch_async") == 0 || enq ? LAUNCH_BATCH : 1;
	for (int i = 0; i < 20; i++)
		lat_call(op, c);
	double start = bench_now();
	for (;;) {
		double t0 = bench_now();
		lat_call(op, c);
		double t1 = bench_now();
		if (bench_add(&s, (enq ? enqueue_s : t1 - t0) / div) < 0) {
			fprintf(stderr, "bw_lat: out of memory\n");
			exit(1);
		}
		if (bench_done(&s, t1 - start, min_time, BENCH_MIN_LAT_REPS))
			break;
	}
	bench_json_lat(json, "bw_lat", target, op, bytes, &s);
	double med = bench_quantile(s.v, s.n, 0.5, 1);
	double p90 = bench_quantile(s.v, s.n, 0.9, 1);
	printf("  %-14s %10.2f us median %10.2f us p90 %8zu reps\n", op,
	       med * 1e6, p90 * 1e6, s.n);
	free(s.v);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "target", required_argument, NULL, 't' },
		{ "json", required_argument, NULL, 'j' },
		{ "max", required_argument, NULL, 'm' },
		{ "min", required_argument, NULL, 'n' },
		{ "min-time", required_argument, NULL, 'T' },
		{ "device", required_argument, NULL, 'd' },
		{ "no-bw", no_argument, NULL, 'B' },
		{ "no-lat", no_argument, NULL, 'L' },
		{ "only", required_argument, NULL, 'O' },
		{ "own-ctx", no_argument, NULL, 'C' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	size_t max = bench_sizes[BENCH_NSIZES - 1], min = 0;
	const char *json_path = NULL;
	int devno = 0, do_bw = 1, do_lat = 1, own_ctx = 0, c;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (bench_env_max("bw_lat", &max))
		return 2;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		int common = bench_common_opt("bw_lat", c, &target, &json_path, &min, &max, &min_time);
		if (common < 0)
			return 2;
		if (common)
			continue;
		switch (c) {
		case 'd': devno = atoi(optarg); break;
		case 'B': do_bw = 0; break;
		case 'L': do_lat = 0; break;
		case 'O': only = optarg; break;
		case 'C': own_ctx = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		usage(stderr);
		return 2;
	}
	if (json_path && !(json = fopen(json_path, "a"))) {
		perror(json_path);
		return 1;
	}

	CUdevice dev;
	CUcontext ctx;
	char name[256] = "";
	CK(cuInit(0));
	CK(cuDeviceGet(&dev, devno));
	CK(cuDeviceGetName(name, sizeof(name), dev));
	if (own_ctx) {
		/* as rgpud makes a session's */
#if CUDA_VERSION >= 13000
		CK(cuCtxCreate(&ctx, NULL, 0, dev));
#else
		CK(cuCtxCreate(&ctx, 0, dev));
#endif
	} else {
		CK(cuDevicePrimaryCtxRetain(&ctx, dev));
		CK(cuCtxSetCurrent(ctx));
	}
	printf("bw_lat: target %s, device %d: %s\n", target, devno, name);

	size_t top = 0;
	for (size_t i = 0; i < BENCH_NSIZES; i++)
		if (bench_sizes[i] <= max)
			top = bench_sizes[i];
	if (top < 4)
		top = 4;

	CUdeviceptr dp;
	void *pinned, *pageable;
	CK(cuMemAlloc(&dp, top));
	CK(cuMemHostAlloc(&pinned, top, 0));
	pageable = malloc(top);
	if (!pageable) {
		fprintf(stderr, "bw_lat: out of memory (%zu bytes)\n", top);
		return 1;
	}
	/* touch every page: first-touch faults are not part of a copy */
	memset(pinned, 0x5a, top);
	memset(pageable, 0xa5, top);
	CK(cuMemsetD8(dp, 0, top));
	CK(cuCtxSynchronize());

	if (do_bw) {
		printf("bandwidth (median of repeats, GB/s = 1e9 B/s):\n");
		for (int d = H2D; d <= D2H; d++) {
			for (int m = 0; m < 2; m++) {
				for (size_t i = 0; i < BENCH_NSIZES && bench_sizes[i] <= max; i++)
					if (bench_sizes[i] >= min)
						bw_one((enum dir)d, m ? "pageable" : "pinned", dp,
					       m ? pageable : pinned, bench_sizes[i]);
			}
		}
	}

	if (do_lat) {
		struct lat_ctx lc = { .dp = dp, .pinned = pinned };
		printf("latency (median per call):\n");
		lat_one("ctx_sync", 0, &lc);
		lat_one("null_call", 0, &lc);
		lat_one("htod_4B", 4, &lc);
		lat_one("dtoh_4B", 4, &lc);
#ifdef BENCH_HAVE_KERNELS
		CUmodule mod;
		CK(cuModuleLoadData(&mod, test_kernels_fatbin));
		CK(cuModuleGetFunction(&lc.fn, mod, "inc_i32"));
		lat_one("launch_sync", 0, &lc);
		lat_one("launch_async", 0, &lc);
		lat_one("launch_enqueue", 0, &lc);
		CK(cuModuleUnload(mod));
#else
		printf("  launch_sync  skipped (built without nvcc: no kernel)\n");
#endif
	}

	CK(cuMemFree(dp));
	CK(cuMemFreeHost(pinned));
	free(pageable);
	if (own_ctx)
		CK(cuCtxDestroy(ctx));
	else
		CK(cuDevicePrimaryCtxRelease(dev));
	if (json && fclose(json)) {
		perror(json_path);
		return 1;
	}
	return 0;
}
