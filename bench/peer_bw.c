/*
 * peer_bw: copy bandwidth between device 0 and device 1 with cuMemcpyPeer
 * (synchronous) and cuMemcpyPeerAsync on a stream of the destination,
 * both ways.  Through rgpu with RGPU_SERVERS naming two servers, these are
 * the copies between GPUs of two servers (server to server, or through the
 * client with RGPU_PEER_PATH=client); on a real driver with two GPUs, the
 * local peer copies.
 *
 *   peer_bw [--size BYTES] [--reps N]
 *
 * Each direction: one untimed copy, then N timed ones (default 8 of 256
 * MiB); the median copy time gives "BW name GB/s".  The data is checked
 * after each direction (a pattern in the source, read back from the
 * destination): "CHECK name ok|WRONG".  Exit 0, or 1 on a CUDA error or
 * wrong data.
 */
#include <cuda.h>

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"

#define CK(x)                                                                            \
	do {                                                                             \
		CUresult r_ = (x);                                                       \
		if (r_ != CUDA_SUCCESS) {                                                \
			const char *s_ = NULL;                                           \
			cuGetErrorName(r_, &s_);                                         \
			fprintf(stderr, "peer_bw: %s: %s (%d)\n", #x, s_ ? s_ : "?", r_); \
			exit(1);                                                         \
		}                                                                        \
	} while (0)

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* A pattern that differs per word and per direction. */
static void fill(uint32_t *h, size_t words, uint32_t seed)
{
	for (size_t i = 0; i < words; i++)
		h[i] = (uint32_t)(i * 2654435761u) ^ seed;
}

static void run(const char *name, CUcontext dctx, CUdeviceptr dst, CUcontext sctx,
		CUdeviceptr src, size_t n, int reps, int async, uint32_t seed, int *bad)
{
	size_t words = n / 4;
	uint32_t *h = malloc(n), *back = malloc(n);
	if (!h || !back) {
		fprintf(stderr, "peer_bw: out of host memory\n");
		exit(1);
	}
	fill(h, words, seed);
	CK(cuCtxSetCurrent(sctx));
	CK(cuMemcpyHtoD(src, h, n));
	CK(cuCtxSetCurrent(dctx));
	CK(cuMemsetD8(dst, 0, n));
	CUstream st;
	CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
	double *t = calloc((size_t)reps, sizeof(double));
	if (!t)
		exit(1);
	for (int i = -1; i < reps; i++) {
		double t0 = bench_now();
		if (async) {
			CK(cuMemcpyPeerAsync(dst, dctx, src, sctx, n, st));
			CK(cuStreamSynchronize(st));
		} else {
			CK(cuMemcpyPeer(dst, dctx, src, sctx, n));
		}
		if (i >= 0)
			t[i] = bench_now() - t0;
	}
	qsort(t, (size_t)reps, sizeof(double), cmp_double);
	double med = reps % 2 ? t[reps / 2] : (t[reps / 2 - 1] + t[reps / 2]) / 2;
	printf("BW %s %.3f\n", name, (double)n / med / 1e9);
	memset(back, 0, n);
	CK(cuMemcpyDtoH(back, dst, n));
	int ok = !memcmp(back, h, n);
	printf("CHECK %s %s\n", name, ok ? "ok" : "WRONG");
	*bad |= !ok;
	CK(cuStreamDestroy(st));
	free(t);
	free(h);
	free(back);
}

int main(int argc, char **argv)
{
	size_t n = 256u << 20;
	int reps = 8;
	static const struct option opts[] = { { "size", required_argument, 0, 's' },
					      { "reps", required_argument, 0, 'r' },
					      { 0, 0, 0, 0 } };
	int c;
	while ((c = getopt_long(argc, argv, "s:r:", opts, NULL)) != -1) {
		if (c == 's' && bench_parse_size(optarg, &n) == 0 && n >= 4 && n % 4 == 0)
			continue;
		if (c == 'r' && (reps = atoi(optarg)) > 0)
			continue;
		fprintf(stderr, "usage: peer_bw [--size BYTES (a multiple of 4)] [--reps N >= 1]\n");
		return 2;
	}
	CK(cuInit(0));
	int ndev = 0;
	CK(cuDeviceGetCount(&ndev));
	if (ndev < 2) {
		fprintf(stderr, "peer_bw: needs two devices, has %d\n", ndev);
		return 1;
	}
	CUdevice d0, d1;
	CK(cuDeviceGet(&d0, 0));
	CK(cuDeviceGet(&d1, 1));
	int can = 0;
	CK(cuDeviceCanAccessPeer(&can, d0, d1));
	printf("INFO size %zu reps %d canAccessPeer %d\n", n, reps, can);
	CUcontext c0, c1;
	CK(cuDevicePrimaryCtxRetain(&c0, d0));
	CK(cuDevicePrimaryCtxRetain(&c1, d1));
	CUdeviceptr a, b;
	CK(cuCtxSetCurrent(c0));
	CK(cuMemAlloc(&a, n));
	CK(cuCtxSetCurrent(c1));
	CK(cuMemAlloc(&b, n));
	int bad = 0;
	run("sync_0to1", c1, b, c0, a, n, reps, 0, 0x1234u, &bad);
	run("sync_1to0", c0, a, c1, b, n, reps, 0, 0x5678u, &bad);
	run("async_0to1", c1, b, c0, a, n, reps, 1, 0x9abcu, &bad);
	run("async_1to0", c0, a, c1, b, n, reps, 1, 0xdef0u, &bad);
	CK(cuCtxSetCurrent(c0));
	CK(cuMemFree(a));
	CK(cuCtxSetCurrent(c1));
	CK(cuMemFree(b));
	CK(cuDevicePrimaryCtxRelease(d0));
	CK(cuDevicePrimaryCtxRelease(d1));
	return bad;
}
