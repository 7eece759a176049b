/*
 * step_mix: a training step's call mix through the driver API, for
 * bench/netem/run.sh (the emulated device: no GPU needed).
 *
 *   step_mix [--steps N] [--launches L] [--trips T] [--htod BYTES] [--json PATH --label S]
 *
 * A step: an asynchronous host-to-device copy of BYTES from pinned memory
 * (the batch), L launches of a small kernel (inc_i32 over 256 elements),
 * T-1 calls that each take one round trip (cuCtxGetLimit of the stack
 * size: like the limit and attribute queries an unoptimised client sent),
 * then a 4-byte device-to-host copy and a stream synchronisation (the
 * step's loss.item(): one round trip).  The defaults are the GPT step of
 * bench/train measured on an H100: 467 requests without a reply, 422 kB
 * sent, 1 round trip (T=54 before issue 13's work).
 *
 * Also measured: one round trip alone (null_call, median of 200) and a
 * 16 MiB copy (bandwidth), the two terms of the model
 *   step = base + T * round trip + bytes / bandwidth.
 * Prints one JSON line: label, steps, median_ms, p10_ms, p90_ms,
 * trip_us, h2d_gbps, launches, trips, htod_bytes.
 */
#include <cuda.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern const unsigned char test_kernels_fatbin[];
extern const size_t test_kernels_fatbin_size;

#define CK(x)                                                                            \
	do {                                                                             \
		CUresult r_ = (x);                                                       \
		if (r_ != CUDA_SUCCESS) {                                                \
			fprintf(stderr, "step_mix: %s:%d: %s failed (%d)\n", __FILE__, __LINE__, #x, \
				(int)r_);                                                \
			exit(1);                                                         \
		}                                                                        \
	} while (0)

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double q(double *v, int n, double p)
{
	qsort(v, (size_t)n, sizeof(*v), cmp);
	return v[(int)(p * (n - 1) + 0.5)];
}

int main(int argc, char **argv)
{
	int steps = 30, launches = 467, trips = 1;
	long htod = 422000;
	const char *json = NULL, *label = "run";
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--steps"))
			steps = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--launches"))
			launches = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--trips"))
			trips = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--htod"))
			htod = atol(argv[i + 1]);
		else if (!strcmp(argv[i], "--json"))
			json = argv[i + 1];
		else if (!strcmp(argv[i], "--label"))
			label = argv[i + 1];
		else {
			fprintf(stderr, "step_mix: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	if (steps < 3 || launches < 0 || trips < 1 || htod < 4) {
		fprintf(stderr, "step_mix: bad arguments\n");
		return 2;
	}
	CUdevice dev;
	CUcontext ctx;
	CK(cuInit(0));
	CK(cuDeviceGet(&dev, 0));
	CK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CK(cuCtxSetCurrent(ctx));
	CUmodule mod;
	CUfunction inc;
	CK(cuModuleLoadData(&mod, test_kernels_fatbin));
	CK(cuModuleGetFunction(&inc, mod, "inc_i32"));
	const size_t big = 16u << 20;
	CUdeviceptr d, dbig;
	CK(cuMemAlloc(&d, 256 * sizeof(int)));
	CK(cuMemAlloc(&dbig, big));
	void *pin;
	CK(cuMemHostAlloc(&pin, big, 0));
	memset(pin, 1, big);
	int n = 256, out = 0;
	void *args[] = { &d, &n };

	/* one round trip alone */
	double v[400];
	for (int i = 0; i < 220; i++) {
		size_t lim;
		double t0 = now_s();
		CK(cuCtxGetLimit(&lim, CU_LIMIT_STACK_SIZE));
		if (i >= 20)
			v[i - 20] = now_s() - t0;
	}
	double trip = q(v, 200, 0.5);
	/* bandwidth: 16 MiB to the device */
	for (int i = 0; i < 5; i++) {
		double t0 = now_s();
		CK(cuMemcpyHtoD(dbig, pin, big));
		v[i] = now_s() - t0;
	}
	double gbps = (double)big / q(v, 5, 0.5) / 1e9;

	double *st = calloc((size_t)steps + 3, sizeof(double));
	if (!st)
		return 1;
	for (int s = -3; s < steps; s++) {
		double t0 = now_s();
		CK(cuMemcpyHtoDAsync(dbig, pin, (size_t)htod, NULL));
		for (int i = 0; i < launches; i++)
			CK(cuLaunchKernel(inc, 1, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
		for (int i = 1; i < trips; i++) {
			size_t lim;
			CK(cuCtxGetLimit(&lim, CU_LIMIT_STACK_SIZE));
		}
		CK(cuMemcpyDtoHAsync(&out, d, sizeof(out), NULL));
		CK(cuStreamSynchronize(NULL));
		if (s >= 0)
			st[s] = now_s() - t0;
	}
	double med = q(st, steps, 0.5), p10 = q(st, steps, 0.1), p90 = q(st, steps, 0.9);
	char line[512];
	snprintf(line, sizeof(line),
		 "{\"label\": \"%s\", \"steps\": %d, \"median_ms\": %.4f, \"p10_ms\": %.4f, "
		 "\"p90_ms\": %.4f, \"trip_us\": %.2f, \"h2d_gbps\": %.3f, \"launches\": %d, "
		 "\"trips\": %d, \"htod_bytes\": %ld}",
		 label, steps, med * 1e3, p10 * 1e3, p90 * 1e3, trip * 1e6, gbps, launches, trips, htod);
	puts(line);
	if (json) {
		FILE *f = fopen(json, "a");
		if (!f || fprintf(f, "%s\n", line) < 0 || fclose(f)) {
			perror(json);
			return 1;
		}
	}
	free(st);
	CK(cuMemFreeHost(pin));
	CK(cuMemFree(d));
	CK(cuMemFree(dbig));
	CK(cuModuleUnload(mod));
	CK(cuDevicePrimaryCtxRelease(dev));
	return 0;
}
