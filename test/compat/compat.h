/* Shared helpers for the compatibility corpus (test/compat/README.md).
 * Each program prints "RESULT <name> <digest>" lines (compared between the
 * direct and the rgpu runs), "INFO ..." lines (reported, not compared), and
 * exits 0 when its own checks passed, 1 otherwise. */
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
	printf("FAIL %s:%d: %s -> %s (%d): %s\n", __FILE__, __LINE__, #x, \
	       cudaGetErrorName(e_), (int)e_, cudaGetErrorString(e_)); \
	fflush(stdout); exit(1); } } while (0)
#define CKK() do { CK(cudaGetLastError()); CK(cudaDeviceSynchronize()); } while (0)

static inline uint64_t fnv(const void *p, size_t n, uint64_t h = 1469598103934665603ull)
{
	const unsigned char *b = (const unsigned char *)p;
	for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 1099511628211ull; }
	return h;
}
static inline void result_hash(const char *name, const void *p, size_t n)
{
	printf("RESULT %s fnv=%016llx\n", name, (unsigned long long)fnv(p, n));
}
static int g_fail;
static inline void verdict(const char *name, double err, double tol)
{
	/* the digest is the verdict; the error itself is informational */
	printf("RESULT %s %s\n", name, err <= tol ? "within-tol" : "OUT-OF-TOL");
	printf("INFO %s maxrelerr=%.3e tol=%.1e\n", name, err, tol);
	if (!(err <= tol)) g_fail = 1;
}
static inline double relerr(double a, double ref)
{
	double d = a - ref; if (d < 0) d = -d;
	double r = ref < 0 ? -ref : ref;
	return d / (r > 1.0 ? r : 1.0);
}
static inline uint32_t lcg(uint32_t *s) { *s = *s * 1664525u + 1013904223u; return *s >> 8; }
static inline float frand(uint32_t *s) { return (float)(lcg(s) & 0xffff) / 65536.0f - 0.5f; }
static inline int finish(void) { printf(g_fail ? "FAILED\n" : "OK\n"); return g_fail; }
