/*
 * Shared helpers for the end-to-end driver-API programs.  Each program
 * checks its results exactly and exits non-zero with a message on the first
 * mismatch or CUDA error; exit 77 means "skipped" (automake's convention).
 *
 * The programs run unchanged against the real driver (the GPU baseline), the
 * rgpu client with rgpud on a real GPU, and the rgpu client with
 * `rgpud --emulated`.  Lines starting "RESULT " carry a digest of the
 * computed data so test/gpu/run-gpu.sh can compare the three.
 */
#ifndef RGPU_E2E_COMMON_H
#define RGPU_E2E_COMMON_H

#include <cuda.h>

#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_kernels.h"

/* test_kernels.cu compiled by nvcc to a fatbin (sm_90 + compute_90 PTX),
 * embedded by the Makefile rule that writes e2e/test_kernels.fatbin.c. */
extern const unsigned char test_kernels_fatbin[];
extern const size_t test_kernels_fatbin_size;

#define SKIP_EXIT 77

static const char *e2e_prog = "e2e";

static inline const char *cu_name(CUresult rc)
{
	const char *s = NULL;
	if (cuGetErrorName(rc, &s) != CUDA_SUCCESS || !s)
		return "(unknown CUresult)";
	return s;
}

static inline void e2e_init(const char *argv0)
{
	const char *s = strrchr(argv0, '/');
	e2e_prog = s ? s + 1 : argv0;
	setvbuf(stdout, NULL, _IOLBF, 0);
}

__attribute__((noreturn, format(printf, 1, 2)))
static inline void fail(const char *fmt, ...)
{
	va_list ap;
	fflush(stdout);
	fprintf(stderr, "%s: FAIL: ", e2e_prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	exit(1);
}

__attribute__((noreturn, format(printf, 1, 2)))
static inline void skip(const char *fmt, ...)
{
	va_list ap;
	printf("%s: SKIP: ", e2e_prog);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	exit(SKIP_EXIT);
}

static inline void cu_die(const char *file, int line, const char *call, CUresult rc)
{
	fail("%s:%d: %s returned %s (%d)", file, line, call, cu_name(rc), (int)rc);
}

/* CK(call): the call must return CUDA_SUCCESS. */
#define CK(call)                                                     \
	do {                                                         \
		CUresult ck_rc_ = (call);                            \
		if (ck_rc_ != CUDA_SUCCESS)                          \
			cu_die(__FILE__, __LINE__, #call, ck_rc_);   \
	} while (0)

/* EXPECT_RC(call, want): the call must return exactly want. */
#define EXPECT_RC(call, want)                                                     \
	do {                                                                      \
		CUresult ex_rc_ = (call);                                         \
		if (ex_rc_ != (want))                                             \
			fail("%s:%d: %s returned %s (%d), expected %s", __FILE__, \
			     __LINE__, #call, cu_name(ex_rc_), (int)ex_rc_,       \
			     cu_name(want));                                      \
	} while (0)

/* CHECK(cond, fmt, ...): a result check with a message. */
#define CHECK(cond, fmt, ...)                                                  \
	do {                                                                   \
		if (!(cond))                                                   \
			fail("%s:%d: check '%s' failed: " fmt, __FILE__,       \
			     __LINE__, #cond, ##__VA_ARGS__);                  \
	} while (0)

static inline void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void say(const char *fmt, ...)
{
	va_list ap;
	printf("%s: ", e2e_prog);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

static inline double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static inline void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		fail("out of host memory (%zu bytes)", n);
	return p;
}

/* FNV-1a 64 over a buffer: the digest printed on RESULT lines. */
static inline uint64_t fnv1a(const void *p, size_t n, uint64_t h)
{
	const uint8_t *b = p;
	if (!h)
		h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

static inline void result(const char *what, const void *p, size_t n)
{
	printf("RESULT %s %016" PRIx64 "\n", what, fnv1a(p, n, 0));
}

/* Deterministic pseudo-random numbers (the same on every machine). */
static inline uint32_t lcg(uint32_t *s)
{
	*s = *s * 1664525u + 1013904223u;
	return *s;
}
/* A float in [-1, 1) with few mantissa bits set (multiples of 2^-12). */
static inline float lcg_float(uint32_t *s)
{
	return (float)((int)(lcg(s) >> 20) - 2048) / 2048.0f;
}

/* cuInit, device dev, its primary context made current. */
/* A one-dimensional copy of bytes between two sides, each host (h) or
 * device (d) memory of the type given. */
static inline CUDA_MEMCPY3D copy3d_1d(CUmemorytype st, const void *sh, CUdeviceptr sd,
				      CUmemorytype dt, void *dh, CUdeviceptr dd, size_t bytes)
{
	CUDA_MEMCPY3D c;
	memset(&c, 0, sizeof(c));
	c.srcMemoryType = st;
	c.srcHost = sh;
	c.srcDevice = sd;
	c.dstMemoryType = dt;
	c.dstHost = dh;
	c.dstDevice = dd;
	c.WidthInBytes = bytes;
	c.Height = 1;
	c.Depth = 1;
	return c;
}

/* A kernel node over n threads in blocks of 256 (launch1d's shape). */
static inline CUDA_KERNEL_NODE_PARAMS kparams(CUfunction f, unsigned n, void **args)
{
	CUDA_KERNEL_NODE_PARAMS k;
	memset(&k, 0, sizeof(k));
	k.func = f;
	k.gridDimX = (n + 255) / 256;
	k.gridDimY = k.gridDimZ = 1;
	k.blockDimX = 256;
	k.blockDimY = k.blockDimZ = 1;
	k.kernelParams = args;
	return k;
}

static inline CUcontext primary_ctx(int dev, CUdevice *out_dev)
{
	CUdevice d;
	CUcontext ctx;
	CK(cuInit(0));
	int n = 0;
	CK(cuDeviceGetCount(&n));
	if (dev >= n)
		fail("device %d requested but only %d device(s) present", dev, n);
	CK(cuDeviceGet(&d, dev));
	CK(cuDevicePrimaryCtxRetain(&ctx, d));
	CK(cuCtxSetCurrent(ctx));
	if (out_dev)
		*out_dev = d;
	return ctx;
}

static inline void primary_ctx_release(int dev)
{
	CUdevice d;
	CK(cuDeviceGet(&d, dev));
	CK(cuCtxSetCurrent(NULL));
	CK(cuDevicePrimaryCtxRelease(d));
}

static inline CUmodule load_test_module(void)
{
	CUmodule m;
	CK(cuModuleLoadData(&m, test_kernels_fatbin));
	return m;
}

static inline CUfunction get_func(CUmodule m, const char *name)
{
	CUfunction f;
	CUresult rc = cuModuleGetFunction(&f, m, name);
	if (rc != CUDA_SUCCESS)
		fail("cuModuleGetFunction(\"%s\") returned %s", name, cu_name(rc));
	return f;
}

/* A 1-D launch of n threads in blocks of 256. */
static inline void launch1d(CUfunction f, unsigned n, CUstream s, void **args)
{
	unsigned blocks = (n + 255) / 256;
	if (!blocks)
		blocks = 1;
	CK(cuLaunchKernel(f, blocks, 1, 1, 256, 1, 1, 0, s, args, NULL));
}

/* Is this the rgpu client (RGPU_SERVERS set) rather than a real driver? */
static inline int via_rgpu(void)
{
	const char *s = getenv("RGPU_SERVERS");
	return s && *s;
}

/* Environment integer with a default. */
static inline long env_long(const char *name, long def)
{
	const char *s = getenv(name);
	if (!s || !*s)
		return def;
	return strtol(s, NULL, 0);
}

#endif
