/*
 * Host implementations of the test kernels (test/kernels/test_kernels.cu),
 * with the parameter layouts the CUDA ABI gives them: the parameters of a
 * kernel are laid out like the members of a C struct.
 *
 * A kernel runs in its stream's worker thread with emu_mem_rdlock() held
 * (unless it touches no memory).  Every device range it touches is checked
 * against the context's allocations first; a miss is an illegal address,
 * which the caller makes the context's sticky error, like a GPU fault.
 *
 * Threads are not emulated one by one: each kernel works out which
 * elements the grid covers (its threads index by x only) and does them in
 * order.  Where the grid has several threads per element (y/z extents >
 * 1) the result is the one a single application gives, a possible outcome
 * of the same race on a GPU; atomics (g_counter) count every thread.
 */
#include "emu.h"
#include "test_kernels.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

_Static_assert(sizeof(struct axpy_args) == 32, "axpy_args is 32 bytes in the kernel ABI");
_Static_assert(offsetof(struct axpy_args, tag) == 28, "axpy_args.tag at 28");

/* Elements covered by threads i = blockIdx.x * blockDim.x + threadIdx.x,
 * i < n. */
static uint64_t cover(const struct emu_launch *l, long long n)
{
	uint64_t t = (uint64_t)l->grid[0] * l->block[0];

	if (n <= 0)
		return 0;
	return (uint64_t)n < t ? (uint64_t)n : t;
}

/* Threads that share each x index. */
static uint64_t replicas(const struct emu_launch *l)
{
	return (uint64_t)l->grid[1] * l->grid[2] * l->block[1] * l->block[2];
}

#define ARG(l, type, off) ({ type v_; memcpy(&v_, (l)->args + (off), sizeof v_); v_; })

/* Maps count elements of elem bytes at p, or sets *rc and returns NULL. */
static void *dev(const struct emu_launch *l, CUdeviceptr p, uint64_t count, size_t elem, CUresult *rc)
{
	void *h;

	if (p % elem != 0) {
		*rc = CUDA_ERROR_MISALIGNED_ADDRESS;
		return NULL;
	}
	if (count > SIZE_MAX / elem) {
		*rc = CUDA_ERROR_ILLEGAL_ADDRESS;
		return NULL;
	}
	h = emu_mem_map(l->ctx, p, (size_t)count * elem);
	if (!h)
		*rc = CUDA_ERROR_ILLEGAL_ADDRESS;
	return h;
}

static CUresult k_vec_add(const struct emu_launch *l)
{
	uint64_t cnt = cover(l, ARG(l, int, 24));
	CUresult rc = CUDA_SUCCESS;
	const float *a, *b;
	float *c;

	if (cnt == 0)
		return CUDA_SUCCESS;
	a = dev(l, ARG(l, CUdeviceptr, 0), cnt, sizeof(float), &rc);
	b = dev(l, ARG(l, CUdeviceptr, 8), cnt, sizeof(float), &rc);
	c = dev(l, ARG(l, CUdeviceptr, 16), cnt, sizeof(float), &rc);
	if (!a || !b || !c)
		return rc;
	for (uint64_t i = 0; i < cnt; i++)
		c[i] = a[i] + b[i];
	return CUDA_SUCCESS;
}

/* Is row (or column) r covered by blocks of 16 (MATMUL_TILE) with g blocks
 * of b threads each? */
static int tile_covered(uint64_t r, unsigned g, unsigned b)
{
	uint64_t blk = r / MATMUL_TILE;

	if (blk >= g)
		blk = g - 1;
	return r >= blk * MATMUL_TILE && r - blk * MATMUL_TILE < b;
}

/*
 * C = A*B for the covered rows and columns, accumulating with fmaf in k
 * order from 0.0f: what the tiled GPU kernel computes (its padding adds
 * fmaf(0, 0, acc), which leaves acc unchanged as acc is never -0).
 * Correct results need 16x16 blocks, as on the GPU.
 */
static CUresult k_matmul_tiled(const struct emu_launch *l)
{
	int ni = ARG(l, int, 24);
	uint64_t n, r0 = UINT64_MAX, r1 = 0, c0 = UINT64_MAX, c1 = 0;
	CUresult rc = CUDA_SUCCESS;
	const float *A, *B;
	float *C;

	if (ni <= 0)
		return CUDA_SUCCESS;
	n = (uint64_t)ni;
	for (uint64_t i = 0; i < n; i++) {
		if (tile_covered(i, l->grid[1], l->block[1])) {
			if (i < r0) r0 = i;
			r1 = i;
		}
		if (tile_covered(i, l->grid[0], l->block[0])) {
			if (i < c0) c0 = i;
			c1 = i;
		}
	}
	if (r0 == UINT64_MAX || c0 == UINT64_MAX)
		return CUDA_SUCCESS;
	/* Bounding ranges of what the kernel reads and writes. */
	A = dev(l, ARG(l, CUdeviceptr, 0) + r0 * n * sizeof(float), (r1 - r0 + 1) * n, sizeof(float), &rc);
	B = dev(l, ARG(l, CUdeviceptr, 8) + c0 * sizeof(float), (n - 1) * n + c1 - c0 + 1, sizeof(float), &rc);
	C = dev(l, ARG(l, CUdeviceptr, 16) + (r0 * n + c0) * sizeof(float), (r1 - r0) * n + c1 - c0 + 1,
		sizeof(float), &rc);
	if (!A || !B || !C)
		return rc;
	/* Rebase so A[r*n + k] etc. index like the kernel does. */
	A -= r0 * n;
	B -= c0;
	C -= r0 * n + c0;
	for (uint64_t r = r0; r <= r1; r++) {
		if (!tile_covered(r, l->grid[1], l->block[1]))
			continue;
		for (uint64_t c = c0; c <= c1; c++) {
			float acc = 0.0f;

			if (!tile_covered(c, l->grid[0], l->block[0]))
				continue;
			for (uint64_t k = 0; k < n; k++)
				acc = fmaf(A[r * n + k], B[k * n + c], acc);
			C[r * n + c] = acc;
		}
	}
	return CUDA_SUCCESS;
}

static CUresult k_axpy_struct(const struct emu_launch *l)
{
	struct axpy_args a;
	uint64_t cnt;
	CUresult rc = CUDA_SUCCESS;
	const double *x;
	double *y;

	memcpy(&a, l->args, sizeof a);
	cnt = cover(l, a.n);
	if (cnt == 0)
		return CUDA_SUCCESS;
	x = dev(l, (CUdeviceptr)(uintptr_t)a.x, cnt, sizeof(double), &rc);
	y = dev(l, (CUdeviceptr)(uintptr_t)a.y, cnt, sizeof(double), &rc);
	if (!x || !y)
		return rc;
	/* nvcc contracts a*x + tag into one fma, then adds y. */
	for (uint64_t i = 0; i < cnt; i++)
		y[i] += fma(a.a, x[i], (double)a.tag);
	return CUDA_SUCCESS;
}

static CUresult k_scale_double(const struct emu_launch *l)
{
	double s = ARG(l, double, 8);
	char bias = ARG(l, char, 20);
	uint64_t cnt = cover(l, ARG(l, int, 16));
	CUresult rc = CUDA_SUCCESS;
	double *x;

	if (cnt == 0)
		return CUDA_SUCCESS;
	x = dev(l, ARG(l, CUdeviceptr, 0), cnt, sizeof(double), &rc);
	if (!x)
		return rc;
	for (uint64_t i = 0; i < cnt; i++)
		x[i] = fma(x[i], s, (double)bias);
	return CUDA_SUCCESS;
}

static CUresult k_scale_by_global(const struct emu_launch *l)
{
	uint64_t cnt = cover(l, ARG(l, int, 8));
	CUresult rc = CUDA_SUCCESS;
	unsigned *counter;
	float *x, *g, scale;

	if (cnt == 0)
		return CUDA_SUCCESS;
	x = dev(l, ARG(l, CUdeviceptr, 0), cnt, sizeof(float), &rc);
	g = dev(l, l->globals, 2, sizeof(float), &rc);
	if (!x || !g)
		return rc;
	scale = g[0];
	for (uint64_t i = 0; i < cnt; i++)
		x[i] *= scale;
	/* atomicAdd(&g_counter, 1) by every thread with i < n; wraps like
	 * the GPU's 32-bit add. */
	counter = (unsigned *)(g + 1);
	__atomic_fetch_add(counter, (unsigned)(cnt * replicas(l)), __ATOMIC_RELAXED);
	return CUDA_SUCCESS;
}

static CUresult k_fill_u32(const struct emu_launch *l)
{
	unsigned v = ARG(l, unsigned, 8);
	unsigned long long n = ARG(l, unsigned long long, 16);
	uint64_t t = (uint64_t)l->grid[0] * l->block[0];
	uint64_t cnt = n < t ? n : t;
	CUresult rc = CUDA_SUCCESS;
	unsigned *p;

	if (cnt == 0)
		return CUDA_SUCCESS;
	p = dev(l, ARG(l, CUdeviceptr, 0), cnt, sizeof(unsigned), &rc);
	if (!p)
		return rc;
	for (uint64_t i = 0; i < cnt; i++)
		p[i] = v;
	return CUDA_SUCCESS;
}

static CUresult k_inc_i32(const struct emu_launch *l)
{
	uint64_t cnt = cover(l, ARG(l, int, 8));
	CUresult rc = CUDA_SUCCESS;
	int *p;

	if (cnt == 0)
		return CUDA_SUCCESS;
	p = dev(l, ARG(l, CUdeviceptr, 0), cnt, sizeof(int), &rc);
	if (!p)
		return rc;
	for (uint64_t i = 0; i < cnt; i++)
		p[i] = (int)((unsigned)p[i] + 1u);
	return CUDA_SUCCESS;
}

/* All threads spin concurrently on a GPU, so the kernel takes ns. */
static CUresult k_busy_wait_ns(const struct emu_launch *l)
{
	unsigned long long ns = ARG(l, unsigned long long, 0);
	if (emu_devclock_shared()) {
		/* the device is busy for ns: other processes' kernels wait */
		emu_devclock_run(l->ctx->dev, ns);
		return CUDA_SUCCESS;
	}
	uint64_t end = emu_now_ns() + ns;
	struct timespec ts;

	if (end < ns)
		end = UINT64_MAX;
	ts.tv_sec = (time_t)(end / 1000000000ULL);
	ts.tv_nsec = (long)(end % 1000000000ULL);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
	return CUDA_SUCCESS;
}

static CUresult k_wait_flag(const struct emu_launch *l)
{
	CUresult rc = CUDA_SUCCESS;
	volatile int *flag = dev(l, ARG(l, CUdeviceptr, 0), 1, sizeof(int), &rc);
	volatile int *out = dev(l, ARG(l, CUdeviceptr, 8), 1, sizeof(int), &rc);
	unsigned long long timeout = ARG(l, unsigned long long, 16);
	if (!flag || !out)
		return rc;
	uint64_t start = emu_now_ns();
	int v;
	while ((v = __atomic_load_n(flag, __ATOMIC_SEQ_CST)) == 0) {
		if (emu_now_ns() - start > timeout) {
			__atomic_store_n(out, -1, __ATOMIC_SEQ_CST);
			return CUDA_SUCCESS;
		}
		struct timespec ts = { 0, 100 * 1000 };
		nanosleep(&ts, NULL);
	}
	__atomic_store_n(out, v + 1, __ATOMIC_SEQ_CST);
	return CUDA_SUCCESS;
}

static CUresult k_illegal_write(const struct emu_launch *l)
{
	CUresult rc = CUDA_SUCCESS;
	int *p = dev(l, ARG(l, CUdeviceptr, 0), 1, sizeof(int), &rc);

	if (!p)
		return rc;
	*p = 1;
	return CUDA_SUCCESS;
}

/* Device printf: thread i < n prints its line; the driver writes device
 * output to the process's stdout, as CUDA's does at synchronisation. */
static CUresult k_print_lines(const struct emu_launch *l)
{
	uint64_t cnt = cover(l, ARG(l, int, 0));

	for (uint64_t i = 0; i < cnt; i++)
		printf("rgpu printf line %08d of %08d: abcdefghijklmnopqrstuvwxyz\n", (int)i,
		       ARG(l, int, 0));
	fflush(stdout);
	return CUDA_SUCCESS;
}

#define P(o, s) { (o), (s) }
const struct emu_kernel emu_kernels[EMU_NKERNELS] = {
	{ "vec_add", 4, { P(0, 8), P(8, 8), P(16, 8), P(24, 4) }, 28, 0, 1, k_vec_add },
	{ "matmul_tiled", 4, { P(0, 8), P(8, 8), P(16, 8), P(24, 4) }, 28,
	  2 * MATMUL_TILE * MATMUL_TILE * (int)sizeof(float), 1, k_matmul_tiled },
	{ "axpy_struct", 1, { P(0, 32) }, 32, 0, 1, k_axpy_struct },
	{ "scale_double", 4, { P(0, 8), P(8, 8), P(16, 4), P(20, 1) }, 21, 0, 1, k_scale_double },
	{ "scale_by_global", 2, { P(0, 8), P(8, 4) }, 12, 0, 1, k_scale_by_global },
	{ "fill_u32", 3, { P(0, 8), P(8, 4), P(16, 8) }, 24, 0, 1, k_fill_u32 },
	{ "inc_i32", 2, { P(0, 8), P(8, 4) }, 12, 0, 1, k_inc_i32 },
	{ "busy_wait_ns", 1, { P(0, 8) }, 8, 0, 0, k_busy_wait_ns },
	{ "illegal_write", 1, { P(0, 8) }, 8, 0, 1, k_illegal_write },
	{ "print_lines", 1, { P(0, 4) }, 4, 0, 0, k_print_lines },
	{ "wait_flag", 3, { P(0, 8), P(8, 8), P(16, 8) }, 24, 0, 1, k_wait_flag },
};
#undef P
const int emu_nkernels = EMU_NKERNELS;
_Static_assert(EMU_NKERNELS == TEST_KERNELS_N, "every kernel of test_kernels.cu is emulated");

const struct emu_kernel *emu_kernel_find(const char *name, int *index)
{
	if (!name)
		return NULL;
	for (int i = 0; i < EMU_NKERNELS; i++)
		if (strcmp(emu_kernels[i].name, name) == 0) {
			if (index)
				*index = i;
			return &emu_kernels[i];
		}
	return NULL;
}
