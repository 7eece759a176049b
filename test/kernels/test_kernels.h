/*
 * Test kernels shared by the GPU suite and the emulated device.
 * test_kernels.cu holds the CUDA versions; emu/kernels.c implements the same
 * extern "C" kernels on the host, with the same parameter layouts, so one
 * test program runs against a real GPU and against `rgpud --emulated`.
 */
#ifndef RGPU_TEST_KERNELS_H
#define RGPU_TEST_KERNELS_H

#include <stdint.h>

/* Passed by value: 32 bytes, 8-byte aligned (checks the parameter layout
 * of a struct argument). */
struct axpy_args {
	double a;          /* offset 0 */
	const double *x;   /* offset 8 */
	double *y;         /* offset 16 */
	int n;             /* offset 24 */
	char tag;          /* offset 28: y[i] += tag too */
};

#define MATMUL_TILE 16

/* The module's __managed__ int g_managed starts at this (CUDA 11's runtime
 * asks for such variables with cuModuleGetGlobal). */
#define TEST_MANAGED_INIT 4321

/* how many kernels test_kernels.cu defines (the list below) */
#define TEST_KERNELS_N 11

/*
 * Kernels (all extern "C"):
 *  vec_add(const float *a, const float *b, float *c, int n)        c = a + b
 *  matmul_tiled(const float *A, const float *B, float *C, int n)   C = A*B, n x n,
 *                                     row-major, shared-memory tiles of 16
 *  axpy_struct(struct axpy_args args)  y[i] += args.a * x[i] + args.tag
 *  scale_double(double *x, double s, int n, char bias)  x[i] = x[i]*s + bias
 *  scale_by_global(float *x, int n)   x[i] *= g_scale; atomicAdd(&g_counter, 1)
 *                                     per element (module globals:
 *                                     __device__ float g_scale; int g_counter)
 *  fill_u32(unsigned *p, unsigned v, unsigned long long n)   p[i] = v
 *  inc_i32(int *p, int n)             p[i] += 1
 *  busy_wait_ns(unsigned long long ns)  spins ns nanoseconds (globaltimer)
 *  wait_flag(volatile int *flag, int *out, unsigned long long timeout_ns)
 *                                     one thread: spins until *flag != 0,
 *                                     then *out = *flag + 1 (-1 after
 *                                     timeout_ns): host memory seen live
 *  illegal_write(int *p)              *p = 1 (pass a bad address to fault)
 *  print_lines(int n)                 thread i < n prints (device printf)
 *                                     "rgpu printf line %08d of %08d: a..z\n"
 *                                     (66 bytes a line)
 */

#endif
