/*
 * Self-test of the emulated device: dlopen()s librgpu-emu.so ($RGPU_EMU_LIB,
 * else .libs/librgpu-emu.so), loads every entry point rgpud uses
 * (daemon/driver.h) and checks the behaviour the end-to-end tests rely on.
 */
#include "driver.h"
#include "test_kernels.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static struct rgpud_driver D;
static CUresult (*elapsed_v2)(float *, CUevent, CUevent);

#define CK(call, expect)                                                          \
	do {                                                                      \
		CUresult r_ = (call);                                             \
		if (r_ != (expect)) {                                             \
			fprintf(stderr, "%s:%d: %s = %d, expected %d\n", __FILE__, \
				__LINE__, #call, (int)r_, (int)(expect));         \
			exit(1);                                                  \
		}                                                                 \
	} while (0)
#define OK(call) CK(call, CUDA_SUCCESS)
#define EXPECT(cond)                                                              \
	do {                                                                      \
		if (!(cond)) {                                                    \
			fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #cond); \
			exit(1);                                                  \
		}                                                                 \
	} while (0)

/* A well-formed minimal fatbin: header (version 1, 16 bytes, 16 bytes of
 * entries) and one empty ELF entry. */
#define FATBIN_WORDS { 0xBA55ED50u, 0x00100001u, 16, 0, 0x00010002u, 16, 0, 0 }
static const uint32_t fatbin_image[8] = FATBIN_WORDS;

/* A 64-bit little-endian ELF header with no sections (e_ehsize 64). */
static void elf_header(unsigned char *e)
{
	memset(e, 0, 64);
	memcpy(e, "\x7f" "ELF", 4);
	e[4] = 2;  /* ELFCLASS64 */
	e[5] = 1;  /* ELFDATA2LSB */
	e[6] = 1;  /* EV_CURRENT */
	e[52] = 64; /* e_ehsize */
}

static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry vec_add()\n{ ret; }\n";

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void load(void)
{
	const char *path = getenv("RGPU_EMU_LIB");

	if (!path || !*path)
		path = ".libs/librgpu-emu.so";
	D.dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!D.dl) {
		fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
		exit(1);
	}
#define LOAD(fn)                                                       \
	*(void **)&D.fn = dlsym(D.dl, #fn);                            \
	if (!D.fn) {                                                   \
		fprintf(stderr, "missing entry point %s\n", #fn);      \
		exit(1);                                               \
	}
	RGPUD_DRIVER_FUNCS(LOAD)
	RGPUD_DRIVER_MODFUNCS(LOAD)
#undef LOAD
	*(void **)&elapsed_v2 = dlsym(D.dl, "cuEventElapsedTime_v2");
	EXPECT(elapsed_v2 != NULL);
	/* Internals stay hidden. */
	EXPECT(dlsym(D.dl, "emu_ctx_enter") == NULL);
	EXPECT(dlsym(D.dl, "emu_kernels") == NULL);
}

static void launch(CUfunction f, unsigned gx, unsigned gy, unsigned bx, unsigned by, CUstream s, void **params)
{
	OK(D.cuLaunchKernel(f, gx, gy, 1, bx, by, 1, 0, s, params, NULL));
}

static void test_device(void)
{
	char name[64];
	CUuuid u0, u1;
	CUdevice dev;
	size_t total;
	int n, v;
	const char *s;

	CK(D.cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
	CK(D.cuCtxCreate_v2(&(CUcontext){ 0 }, 0, 0), CUDA_ERROR_NOT_INITIALIZED);
	CK(D.cuInit(1), CUDA_ERROR_INVALID_VALUE);
	OK(D.cuInit(0));
	OK(D.cuInit(0));
	OK(D.cuDriverGetVersion(&v));
	EXPECT(v == CUDA_VERSION);
	OK(D.cuDeviceGetCount(&n));
	EXPECT(n == 2);
	OK(D.cuDeviceGet(&dev, 1));
	EXPECT(dev == 1);
	CK(D.cuDeviceGet(&dev, 2), CUDA_ERROR_INVALID_DEVICE);
	OK(D.cuDeviceGetName(name, sizeof name, 1));
	EXPECT(strcmp(name, "rgpu emulated device 1") == 0);
	OK(D.cuDeviceGetUuid_v2(&u0, 0));
	OK(D.cuDeviceGetUuid_v2(&u1, 1));
	EXPECT(memcmp(&u0, &u1, sizeof u0) != 0);
	OK(D.cuDeviceGetUuid_v2(&u1, 0));
	EXPECT(memcmp(&u0, &u1, sizeof u0) == 0);
	OK(D.cuDeviceTotalMem_v2(&total, 0));
	EXPECT(total == (4ULL << 30));
	for (int a = 1; a < CU_DEVICE_ATTRIBUTE_MAX; a++)
		OK(D.cuDeviceGetAttribute(&v, (CUdevice_attribute)a, 0));
	CK(D.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, 0), CUDA_ERROR_INVALID_VALUE);
	OK(D.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
	EXPECT(v == 9);
	OK(D.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
	EXPECT(v == 132);
	OK(D.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 0));
	EXPECT(v == 64);
	OK(D.cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 0));
	EXPECT(v == 232448);
	OK(D.cuGetErrorName(CUDA_ERROR_ILLEGAL_ADDRESS, &s));
	EXPECT(strcmp(s, "CUDA_ERROR_ILLEGAL_ADDRESS") == 0);
	OK(D.cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
	EXPECT(strcmp(s, "out of memory") == 0);
	CK(D.cuGetErrorName((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
}

static void test_memory(void)
{
	size_t fr0, fr, total, lim;
	CUdeviceptr p, q;
	CUcontext ctx;
	uint32_t buf[64];
	void *h;

	OK(D.cuCtxCreate_v2(&ctx, 0, 0));
	OK(D.cuMemGetInfo_v2(&fr0, &total));
	EXPECT(total == (4ULL << 30));
	EXPECT(fr0 == total - (64ULL << 20));
	OK(D.cuMemAlloc_v2(&p, 1 << 20));
	EXPECT(p % 256 == 0);
	OK(D.cuMemGetInfo_v2(&fr, &total));
	EXPECT(fr == fr0 - (1 << 20));
	CK(D.cuMemAlloc_v2(&q, fr + 1), CUDA_ERROR_OUT_OF_MEMORY);
	CK(D.cuMemAlloc_v2(&q, 0), CUDA_ERROR_INVALID_VALUE);
	OK(D.cuMemAlloc_v2(&q, 256));

	/* Bounds checks. */
	memset(buf, 0, sizeof buf);
	OK(D.cuMemcpyHtoD_v2(q + 248, buf, 8));
	CK(D.cuMemcpyHtoD_v2(q + 252, buf, 8), CUDA_ERROR_INVALID_VALUE);
	CK(D.cuMemcpyDtoH_v2(buf, q - 4, 8), CUDA_ERROR_INVALID_VALUE);
	CK(D.cuMemcpyDtoH_v2(buf, 0x1000, 4), CUDA_ERROR_INVALID_VALUE);
	CK(D.cuMemcpyDtoD_v2(q, p + (1 << 20) - 100, 256), CUDA_ERROR_INVALID_VALUE);
	CK(D.cuMemsetD32_v2(q, 1, 65), CUDA_ERROR_INVALID_VALUE);
	CK(D.cuMemsetD32_v2(q + 2, 1, 4), CUDA_ERROR_INVALID_VALUE);
	CK(D.cuMemsetD8Async(q + 256, 1, 1, NULL), CUDA_ERROR_INVALID_VALUE);

	/* Copies and memsets do what they say. */
	OK(D.cuMemsetD32_v2(q, 0xdeadbeef, 64));
	OK(D.cuMemsetD16_v2(q, 0x1234, 2));
	OK(D.cuMemsetD8_v2(q + 4, 0x56, 1));
	OK(D.cuMemcpyDtoD_v2(p, q, 256));
	OK(D.cuMemcpyDtoH_v2(buf, p, 256));
	EXPECT(buf[0] == 0x12341234 && buf[1] == 0xdeadbe56 && buf[63] == 0xdeadbeef);
	for (int i = 0; i < 64; i++)
		buf[i] = (uint32_t)i;
	OK(D.cuMemcpyHtoDAsync_v2(p, buf, sizeof buf, NULL));
	memset(buf, 0xff, sizeof buf);   /* copied at enqueue time */
	OK(D.cuMemcpyDtoHAsync_v2(buf, p, sizeof buf, NULL));
	OK(D.cuMemsetD32Async(p, 7, 1, NULL));
	OK(D.cuCtxSynchronize());
	EXPECT(buf[0] == 0 && buf[5] == 5 && buf[63] == 63);

	CK(D.cuMemFree_v2(p + 4), CUDA_ERROR_INVALID_VALUE);
	OK(D.cuMemFree_v2(p));
	OK(D.cuMemFree_v2(q));
	OK(D.cuMemGetInfo_v2(&fr, &total));
	EXPECT(fr == fr0);
	CK(D.cuMemcpyHtoD_v2(q, buf, 4), CUDA_ERROR_INVALID_VALUE);

	OK(D.cuMemHostAlloc(&h, 12345, 0));
	memset(h, 1, 12345);
	OK(D.cuMemFreeHost(h));
	CK(D.cuMemFreeHost(buf), CUDA_ERROR_INVALID_VALUE);

	OK(D.cuCtxGetLimit(&lim, CU_LIMIT_STACK_SIZE));
	EXPECT(lim == 1024);
	OK(D.cuCtxGetLimit(&lim, CU_LIMIT_PRINTF_FIFO_SIZE));
	EXPECT(lim == 1 << 20);
	OK(D.cuCtxGetLimit(&lim, CU_LIMIT_MALLOC_HEAP_SIZE));
	EXPECT(lim == 8 << 20);
	OK(D.cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 4096));
	OK(D.cuCtxGetLimit(&lim, CU_LIMIT_STACK_SIZE));
	EXPECT(lim == 4096);
	CK(D.cuCtxGetLimit(&lim, CU_LIMIT_MAX), CUDA_ERROR_UNSUPPORTED_LIMIT);

	OK(D.cuCtxDestroy_v2(ctx));
	CK(D.cuMemAlloc_v2(&p, 16), CUDA_ERROR_INVALID_CONTEXT);
	CK(D.cuCtxSetCurrent(ctx), CUDA_ERROR_INVALID_CONTEXT);
}

static void ref_matmul(const float *A, const float *B, float *C, int n)
{
	for (int r = 0; r < n; r++)
		for (int c = 0; c < n; c++) {
			float acc = 0.0f;

			for (int k = 0; k < n; k++)
				acc = fmaf(A[r * n + k], B[k * n + c], acc);
			C[r * n + c] = acc;
		}
}

static void test_matmul(CUmodule mod, int n)
{
	size_t bytes = (size_t)n * n * sizeof(float);
	float *A = malloc(bytes), *B = malloc(bytes), *C = malloc(bytes), *R = malloc(bytes);
	CUdeviceptr dA, dB, dC;
	unsigned g = (unsigned)(n + MATMUL_TILE - 1) / MATMUL_TILE;
	void *params[] = { &dA, &dB, &dC, &n };
	CUfunction f;

	EXPECT(A && B && C && R);
	srand(42);
	for (int i = 0; i < n * n; i++) {
		A[i] = (float)rand() / RAND_MAX - 0.5f;
		B[i] = (float)rand() / RAND_MAX * 3.0f;
	}
	ref_matmul(A, B, R, n);
	OK(D.cuModuleGetFunction(&f, mod, "matmul_tiled"));
	OK(D.cuMemAlloc_v2(&dA, bytes));
	OK(D.cuMemAlloc_v2(&dB, bytes));
	OK(D.cuMemAlloc_v2(&dC, bytes));
	OK(D.cuMemcpyHtoD_v2(dA, A, bytes));
	OK(D.cuMemcpyHtoD_v2(dB, B, bytes));
	launch(f, g, g, MATMUL_TILE, MATMUL_TILE, NULL, params);
	OK(D.cuMemcpyDtoH_v2(C, dC, bytes));
	EXPECT(memcmp(C, R, bytes) == 0);
	OK(D.cuMemFree_v2(dA));
	OK(D.cuMemFree_v2(dB));
	OK(D.cuMemFree_v2(dC));
	free(A);
	free(B);
	free(C);
	free(R);
}

static void test_kernels(void)
{
	enum { N = 1000 };
	static float a[N], b[N], c[N];
	static double x[N], y[N], y0[N];
	CUdeviceptr da, db, dc, dx, dy, gs, gc, lgs;
	size_t off, sz, gbytes;
	CUcontext ctx;
	CUmodule mod;
	CUlibrary lib;
	CUkernel kern;
	CUfunction f, f2;
	int n = N, v, counter;
	float scale = 3.0f;
	uint32_t fatbin[8] = FATBIN_WORDS;
	unsigned char elf[64];

	OK(D.cuCtxCreate_v2(&ctx, 0, 1));
	CK(D.cuModuleLoadData(&mod, "not an image"), CUDA_ERROR_INVALID_IMAGE);
	CK(D.cuModuleLoadData(&mod, "\x7f"), CUDA_ERROR_INVALID_IMAGE);
	elf_header(elf);
	OK(D.cuModuleLoadData(&mod, elf));
	OK(D.cuModuleUnload(mod));
	CK(D.cuModuleUnload(mod), CUDA_ERROR_INVALID_HANDLE);
	OK(D.cuModuleLoadData(&mod, ptx));
	CK(D.cuModuleGetFunction(&f, mod, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
	CK(D.cuModuleGetGlobal_v2(&gs, &gbytes, mod, "g_nothing"), CUDA_ERROR_NOT_FOUND);

	/* Parameter layouts. */
	OK(D.cuModuleGetFunction(&f, mod, "scale_double"));
	OK(D.cuFuncGetParamInfo(f, 2, &off, &sz));
	EXPECT(off == 16 && sz == 4);
	OK(D.cuFuncGetParamInfo(f, 3, &off, &sz));
	EXPECT(off == 20 && sz == 1);
	CK(D.cuFuncGetParamInfo(f, 4, &off, &sz), CUDA_ERROR_INVALID_VALUE);
	OK(D.cuModuleGetFunction(&f, mod, "fill_u32"));
	OK(D.cuFuncGetParamInfo(f, 2, &off, &sz));
	EXPECT(off == 16 && sz == 8);
	OK(D.cuModuleGetFunction(&f, mod, "axpy_struct"));
	OK(D.cuFuncGetParamInfo(f, 0, &off, &sz));
	EXPECT(off == 0 && sz == 32);
	CK(D.cuFuncGetParamInfo(f, 1, &off, &sz), CUDA_ERROR_INVALID_VALUE);

	/* vec_add */
	for (int i = 0; i < N; i++) {
		a[i] = (float)i * 0.5f;
		b[i] = (float)(N - i);
	}
	OK(D.cuMemAlloc_v2(&da, sizeof a));
	OK(D.cuMemAlloc_v2(&db, sizeof b));
	OK(D.cuMemAlloc_v2(&dc, sizeof c));
	OK(D.cuMemcpyHtoD_v2(da, a, sizeof a));
	OK(D.cuMemcpyHtoD_v2(db, b, sizeof b));
	OK(D.cuModuleGetFunction(&f, mod, "vec_add"));
	CK(D.cuLaunchKernel(f, 4, 1, 1, 1025, 1, 1, 0, NULL, (void *[]){ &da, &db, &dc, &n }, NULL),
	   CUDA_ERROR_INVALID_VALUE);
	CK(D.cuLaunchKernel(f, 0, 1, 1, 256, 1, 1, 0, NULL, (void *[]){ &da, &db, &dc, &n }, NULL),
	   CUDA_ERROR_INVALID_VALUE);
	CK(D.cuLaunchKernel(f, 1, 1, 1, 32, 32, 2, 0, NULL, (void *[]){ &da, &db, &dc, &n }, NULL),
	   CUDA_ERROR_INVALID_VALUE);
	launch(f, 4, 1, 256, 1, NULL, (void *[]){ &da, &db, &dc, &n });
	OK(D.cuMemcpyDtoH_v2(c, dc, sizeof c));
	for (int i = 0; i < N; i++)
		EXPECT(c[i] == a[i] + b[i]);

	test_matmul(mod, 16);
	test_matmul(mod, 33);

	/* axpy_struct: a struct passed by value. */
	for (int i = 0; i < N; i++) {
		x[i] = i * 0.25;
		y[i] = y0[i] = 1.0 - i;
	}
	OK(D.cuMemAlloc_v2(&dx, sizeof x));
	OK(D.cuMemAlloc_v2(&dy, sizeof y));
	OK(D.cuMemcpyHtoD_v2(dx, x, sizeof x));
	OK(D.cuMemcpyHtoD_v2(dy, y, sizeof y));
	struct axpy_args args = { 2.5, (const double *)(uintptr_t)dx, (double *)(uintptr_t)dy, N, 3 };
	OK(D.cuModuleGetFunction(&f, mod, "axpy_struct"));
	launch(f, (N + 127) / 128, 1, 128, 1, NULL, (void *[]){ &args });
	OK(D.cuMemcpyDtoH_v2(y, dy, sizeof y));
	for (int i = 0; i < N; i++)
		EXPECT(y[i] == y0[i] + (2.5 * x[i] + 3.0));

	/* scale_double */
	double s = 1.5;
	char bias = -2;
	OK(D.cuModuleGetFunction(&f, mod, "scale_double"));
	launch(f, 8, 1, 128, 1, NULL, (void *[]){ &dx, &s, &n, &bias });
	OK(D.cuMemcpyDtoH_v2(y, dx, sizeof y));
	for (int i = 0; i < N; i++)
		EXPECT(y[i] == x[i] * 1.5 - 2.0);

	/* Module globals: written by memcpy, read and updated by a kernel. */
	OK(D.cuModuleGetGlobal_v2(&gs, &gbytes, mod, "g_scale"));
	EXPECT(gbytes == 4);
	OK(D.cuModuleGetGlobal_v2(&gc, &gbytes, mod, "g_counter"));
	EXPECT(gbytes == 4 && gc != gs);
	OK(D.cuMemcpyHtoD_v2(gs, &scale, 4));
	OK(D.cuModuleGetFunction(&f, mod, "scale_by_global"));
	launch(f, 4, 1, 256, 1, NULL, (void *[]){ &da, &n });
	launch(f, 4, 1, 256, 1, NULL, (void *[]){ &da, &n });
	OK(D.cuMemcpyDtoH_v2(c, da, sizeof c));
	for (int i = 0; i < N; i++)
		EXPECT(c[i] == a[i] * 9.0f);
	OK(D.cuMemcpyDtoH_v2(&counter, gc, 4));
	EXPECT(counter == 2 * N);

	/* A library: its own globals, kernels through cuKernelGetFunction. */
	OK(D.cuLibraryLoadData(&lib, fatbin, NULL, NULL, 0, NULL, NULL, 0));
	OK(D.cuLibraryGetGlobal(&lgs, &gbytes, lib, "g_counter"));
	EXPECT(lgs != gc);
	OK(D.cuMemcpyDtoH_v2(&counter, lgs, 4));
	EXPECT(counter == 0);
	CK(D.cuLibraryGetKernel(&kern, lib, "nope"), CUDA_ERROR_NOT_FOUND);
	OK(D.cuLibraryGetKernel(&kern, lib, "inc_i32"));
	OK(D.cuKernelGetParamInfo(kern, 1, &off, &sz));
	EXPECT(off == 8 && sz == 4);
	CK(D.cuKernelGetParamInfo(kern, 2, &off, &sz), CUDA_ERROR_INVALID_VALUE);
	OK(D.cuKernelGetFunction(&f2, kern));
	/* Parameters through extra (one packed buffer). */
	struct { CUdeviceptr p; int n; } packed = { dc, 10 };
	size_t psize = 12;
	void *extra[] = { CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &psize,
			  CU_LAUNCH_PARAM_END };
	OK(D.cuMemsetD32_v2(dc, 5, N));
	OK(D.cuLaunchKernel(f2, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, extra));
	OK(D.cuMemcpyDtoH_v2(&v, dc + 9 * 4, 4));
	EXPECT(v == 6);
	OK(D.cuMemcpyDtoH_v2(&v, dc + 10 * 4, 4));
	EXPECT(v == 5);
	OK(D.cuLibraryUnload(lib));
	CK(D.cuKernelGetFunction(&f2, kern), CUDA_ERROR_INVALID_HANDLE);

	/* Attributes and occupancy. */
	OK(D.cuModuleGetFunction(&f, mod, "matmul_tiled"));
	OK(D.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f));
	EXPECT(v == 2048);
	OK(D.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f));
	EXPECT(v == 1024);
	OK(D.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100000));
	OK(D.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f));
	EXPECT(v == 100000);
	OK(D.cuFuncSetCacheConfig(f, CU_FUNC_CACHE_PREFER_SHARED));
	OK(D.cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&v, f, 256, 0, 0));
	EXPECT(v == 8);
	OK(D.cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&v, f, 32, 0, 0));
	EXPECT(v == 32);
	OK(D.cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&v, f, 0, 0, 0));
	EXPECT(v == 0);

	OK(D.cuModuleUnload(mod));
	OK(D.cuCtxDestroy_v2(ctx));
}


static CUresult lib_load(CUlibrary *lib, const void *image)
{
	return D.cuLibraryLoadData(lib, image, NULL, NULL, 0, NULL, NULL, 0);
}

/* Runs scale_by_global over d[0..n) with f (a CUfunction, or a CUkernel
 * cast to one) in the current context and checks d == a * factor. */
static void scale_check(CUfunction f, CUdeviceptr d, const float *a, int n, float factor)
{
	float *c = malloc((size_t)n * sizeof(float));

	EXPECT(c);
	launch(f, (unsigned)(n + 127) / 128, 1, 128, 1, NULL, (void *[]){ &d, &n });
	OK(D.cuMemcpyDtoH_v2(c, d, (size_t)n * sizeof(float)));
	for (int i = 0; i < n; i++)
		EXPECT(c[i] == a[i] * factor);
	free(c);
}

/* Libraries are context-independent: loaded with no current context, one
 * instance of their globals per context, created on first use. */
static void test_libraries(void)
{
	enum { N = 300 };
	float a[N], s0 = 2.0f, s1 = -0.5f, fv;
	CUlibrary lib, lib2;
	CUkernel kern, kinc, kbusy, k2;
	CUcontext c0, c1, c2;
	CUfunction f0, f1, f;
	CUdeviceptr g0, g1, gc0, gc1, g, d0, d1, d2;
	CUstream s;
	unsigned count;
	unsigned long long ns = 100000000ULL;    /* 100 ms */
	size_t off, sz, bytes, fr0, fr, total;
	int n = N, v;

	for (int i = 0; i < N; i++)
		a[i] = (float)i - 100.0f;

	/* No current context: loading and the context-free queries work. */
	OK(D.cuCtxSetCurrent(NULL));
	CK(lib_load(&lib, "not an image"), CUDA_ERROR_INVALID_IMAGE);
	CK(lib_load(NULL, fatbin_image), CUDA_ERROR_INVALID_VALUE);
	OK(lib_load(&lib, fatbin_image));
	OK(lib_load(&lib2, ptx));
	EXPECT(lib != lib2);
	OK(D.cuLibraryGetKernelCount(&count, lib));
	EXPECT(count == TEST_KERNELS_N);
	CK(D.cuLibraryGetKernelCount(NULL, lib), CUDA_ERROR_INVALID_VALUE);
	CK(D.cuLibraryGetKernelCount(&count, (CUlibrary)&count), CUDA_ERROR_INVALID_HANDLE);
	OK(D.cuLibraryGetKernel(&kern, lib, "scale_by_global"));
	OK(D.cuLibraryGetKernel(&kinc, lib, "inc_i32"));
	OK(D.cuLibraryGetKernel(&kbusy, lib, "busy_wait_ns"));
	OK(D.cuLibraryGetKernel(&k2, lib2, "scale_by_global"));
	EXPECT(k2 != kern);
	CK(D.cuLibraryGetKernel(&k2, lib, "nope"), CUDA_ERROR_NOT_FOUND);
	OK(D.cuLibraryGetKernel(&k2, lib2, "scale_by_global"));
	OK(D.cuKernelGetParamInfo(kern, 1, &off, &sz));
	EXPECT(off == 8 && sz == 4);
	CK(D.cuKernelGetParamInfo(kern, 2, &off, &sz), CUDA_ERROR_INVALID_VALUE);
	CK(D.cuKernelGetParamInfo((CUkernel)lib, 0, &off, &sz), CUDA_ERROR_INVALID_HANDLE);
	/* ... but a function or a global needs one. */
	CK(D.cuKernelGetFunction(&f, kern), CUDA_ERROR_INVALID_CONTEXT);
	CK(D.cuLibraryGetGlobal(&g, &bytes, lib, "g_scale"), CUDA_ERROR_INVALID_CONTEXT);
	CK(D.cuLaunchKernel((CUfunction)kern, 1, 1, 1, 1, 1, 1, 0, NULL, (void *[]){ &d0, &n }, NULL),
	   CUDA_ERROR_INVALID_CONTEXT);

	/* Context 0: its own instance, created on first use. */
	OK(D.cuCtxCreate_v2(&c0, 0, 0));
	CK(D.cuKernelGetFunction(&f, (CUkernel)lib), CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuLibraryGetGlobal(&g, &bytes, (CUlibrary)kern, "g_scale"), CUDA_ERROR_INVALID_HANDLE);
	OK(D.cuKernelGetFunction(&f0, kern));
	OK(D.cuKernelGetFunction(&f, kern));
	EXPECT(f == f0 && (void *)f0 != (void *)kern);
	OK(D.cuLibraryGetGlobal(&g0, &bytes, lib, "g_scale"));
	EXPECT(bytes == 4);
	CK(D.cuLibraryGetGlobal(&g, &bytes, lib, "g_nothing"), CUDA_ERROR_NOT_FOUND);
	OK(D.cuLibraryGetGlobal(&gc0, NULL, lib, "g_counter"));
	OK(D.cuLibraryGetGlobal(&g, NULL, lib, "g_scale"));
	EXPECT(g == g0 && gc0 == g0 + 4);
	OK(D.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f0));
	EXPECT(v == 1024);
	OK(D.cuMemcpyHtoD_v2(g0, &s0, 4));
	OK(D.cuMemAlloc_v2(&d0, sizeof a));
	OK(D.cuMemcpyHtoD_v2(d0, a, sizeof a));
	OK(D.cuMemGetInfo_v2(&fr0, &total));

	/* Context 1 (another device): another instance, fresh globals. */
	OK(D.cuCtxCreate_v2(&c1, 0, 1));
	OK(D.cuLibraryGetGlobal(&g1, &bytes, lib, "g_scale"));
	EXPECT(g1 != g0);
	OK(D.cuMemcpyDtoH_v2(&fv, g1, 4));
	EXPECT(fv == 0.0f);
	OK(D.cuMemcpyHtoD_v2(g1, &s1, 4));
	OK(D.cuKernelGetFunction(&f1, kern));
	EXPECT(f1 != f0);
	/* c0's function and globals are not c1's. */
	CK(D.cuLaunchKernel(f0, 1, 1, 1, 1, 1, 1, 0, NULL, (void *[]){ &d0, &n }, NULL),
	   CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuMemcpyDtoH_v2(&fv, g0, 4), CUDA_ERROR_INVALID_VALUE);
	OK(D.cuMemAlloc_v2(&d1, sizeof a));
	OK(D.cuMemcpyHtoD_v2(d1, a, sizeof a));
	/* A CUkernel cast to CUfunction is its function in c1. */
	scale_check((CUfunction)kern, d1, a, N, s1);
	OK(D.cuLibraryGetGlobal(&gc1, NULL, lib, "g_counter"));
	OK(D.cuMemcpyDtoH_v2(&v, gc1, 4));
	EXPECT(v == N);

	/* Back in c0: its g_scale, its counter. */
	OK(D.cuCtxSetCurrent(c0));
	scale_check(f0, d0, a, N, s0);
	for (int i = 0; i < N; i++)
		a[i] *= s0;
	scale_check((CUfunction)kern, d0, a, N, s0);
	OK(D.cuMemcpyDtoH_v2(&v, gc0, 4));
	EXPECT(v == 2 * N);
	OK(D.cuMemGetInfo_v2(&fr, &total));
	EXPECT(fr == fr0);   /* library globals are not counted */
	OK(D.cuCtxSetCurrent(c1));
	OK(D.cuMemcpyDtoH_v2(&v, gc1, 4));
	EXPECT(v == N);

	/* A context destroyed with instances of both libraries alive, and a
	 * launch still queued. */
	OK(D.cuCtxCreate_v2(&c2, 0, 0));
	OK(D.cuLibraryGetGlobal(&g, NULL, lib2, "g_scale"));
	OK(D.cuMemcpyHtoD_v2(g, &s1, 4));
	OK(D.cuMemAlloc_v2(&d2, 4));
	OK(D.cuMemsetD32_v2(d2, 0, 1));
	OK(D.cuStreamCreateWithPriority(&s, 0, 0));
	launch((CUfunction)kbusy, 1, 1, 1, 1, s, (void *[]){ &ns });
	launch((CUfunction)kinc, 1, 1, 1, 1, s, (void *[]){ &d2, &(int){ 1 } });
	launch((CUfunction)k2, 1, 1, 1, 1, s, (void *[]){ &d2, &(int){ 1 } });
	OK(D.cuCtxDestroy_v2(c2));
	CK(D.cuKernelGetFunction(&f, kern), CUDA_ERROR_INVALID_CONTEXT);
	/* The other contexts' instances are untouched. */
	OK(D.cuCtxSetCurrent(c0));
	OK(D.cuMemGetInfo_v2(&fr, &total));
	EXPECT(fr == fr0);
	OK(D.cuMemcpyDtoH_v2(&fv, g0, 4));
	EXPECT(fv == s0);
	OK(D.cuKernelGetFunction(&f, kern));
	EXPECT(f == f0);

	/* Unload with no current context, after use in two contexts and with
	 * a launch still queued in c1. */
	OK(D.cuCtxSetCurrent(c1));
	launch((CUfunction)kbusy, 1, 1, 1, 1, NULL, (void *[]){ &ns });
	launch(f1, 1, 1, 128, 1, NULL, (void *[]){ &d1, &n });
	OK(D.cuCtxSetCurrent(NULL));
	OK(D.cuLibraryUnload(lib));
	CK(D.cuLibraryUnload(lib), CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuLibraryGetKernelCount(&count, lib), CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuKernelGetParamInfo(kern, 0, &off, &sz), CUDA_ERROR_INVALID_HANDLE);
	OK(D.cuCtxSetCurrent(c1));
	OK(D.cuMemcpyDtoH_v2(&fv, d1 + 4, 4));
	EXPECT(fv == (1.0f - 100.0f) * s1 * s1);   /* the queued launch ran */
	CK(D.cuLaunchKernel(f1, 1, 1, 1, 1, 1, 1, 0, NULL, (void *[]){ &d1, &n }, NULL),
	   CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuMemcpyDtoH_v2(&fv, g1, 4), CUDA_ERROR_INVALID_VALUE);
	OK(D.cuCtxSetCurrent(c0));
	CK(D.cuKernelGetFunction(&f, kern), CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuLibraryGetGlobal(&g, NULL, lib, "g_scale"), CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuLaunchKernel((CUfunction)kern, 1, 1, 1, 1, 1, 1, 0, NULL, (void *[]){ &d0, &n }, NULL),
	   CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f0), CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuMemcpyDtoH_v2(&fv, g0, 4), CUDA_ERROR_INVALID_VALUE);
	/* lib2 is still there; its instance in c0 starts fresh. */
	OK(D.cuLibraryGetGlobal(&g, NULL, lib2, "g_scale"));
	OK(D.cuMemcpyDtoH_v2(&fv, g, 4));
	EXPECT(fv == 0.0f);
	OK(D.cuCtxDestroy_v2(c0));
	OK(D.cuCtxDestroy_v2(c1));
	OK(D.cuLibraryUnload(lib2));
}

static void test_streams(void)
{
	CUcontext ctx;
	CUmodule mod;
	CUfunction busy, inc;
	CUstream s1, s2, nb;
	CUevent e0, e1, ent;
	CUdeviceptr p;
	unsigned long long ns = 200000000ULL;   /* 200 ms */
	int one = 1, v;
	float ms;

	OK(D.cuCtxCreate_v2(&ctx, 0, 0));
	OK(D.cuModuleLoadData(&mod, ptx));
	OK(D.cuModuleGetFunction(&busy, mod, "busy_wait_ns"));
	OK(D.cuModuleGetFunction(&inc, mod, "inc_i32"));
	OK(D.cuMemAlloc_v2(&p, 4));
	OK(D.cuMemsetD32_v2(p, 0, 1));
	OK(D.cuStreamCreateWithPriority(&s1, 0, -1));
	OK(D.cuStreamCreateWithPriority(&s2, 0, 0));
	OK(D.cuStreamCreateWithPriority(&nb, CU_STREAM_NON_BLOCKING, 0));
	CK(D.cuStreamCreateWithPriority(&s2, 0x10, 0), CUDA_ERROR_INVALID_VALUE);
	OK(D.cuEventCreate(&e0, 0));
	OK(D.cuEventCreate(&e1, 0));
	OK(D.cuEventCreate(&ent, CU_EVENT_DISABLE_TIMING));

	/* In-order execution, queries while busy, event timing. */
	OK(D.cuEventRecord(e0, s1));
	launch(busy, 1, 1, 1, 1, s1, (void *[]){ &ns });
	launch(inc, 1, 1, 1, 1, s1, (void *[]){ &p, &one });
	OK(D.cuEventRecord(e1, s1));
	OK(D.cuEventRecord(ent, s1));
	CK(D.cuStreamQuery(s1), CUDA_ERROR_NOT_READY);
	CK(D.cuEventQuery(e1), CUDA_ERROR_NOT_READY);
	CK(D.cuEventElapsedTime(&ms, e0, e1), CUDA_ERROR_NOT_READY);
	OK(D.cuStreamSynchronize(s1));
	OK(D.cuStreamQuery(s1));
	OK(D.cuEventQuery(e1));
	OK(D.cuEventElapsedTime(&ms, e0, e1));
	EXPECT(ms >= 200.0f);
	OK(elapsed_v2(&ms, e0, e1));
	EXPECT(ms >= 200.0f);
	CK(D.cuEventElapsedTime(&ms, e0, ent), CUDA_ERROR_INVALID_HANDLE);
	OK(D.cuMemcpyDtoH_v2(&v, p, 4));
	EXPECT(v == 1);

	/* Legacy NULL stream: a synchronous copy waits for blocking streams. */
	launch(busy, 1, 1, 1, 1, s2, (void *[]){ &ns });
	launch(inc, 1, 1, 1, 1, s2, (void *[]){ &p, &one });
	OK(D.cuMemcpyDtoH_v2(&v, p, 4));
	EXPECT(v == 2);
	/* ... but not for non-blocking ones. */
	launch(busy, 1, 1, 1, 1, nb, (void *[]){ &ns });
	launch(inc, 1, 1, 1, 1, nb, (void *[]){ &p, &one });
	OK(D.cuMemcpyDtoH_v2(&v, p, 4));
	CK(D.cuStreamQuery(nb), CUDA_ERROR_NOT_READY);
	EXPECT(v == 2);
	/* (Done before the next increment, which nothing orders after it.) */
	OK(D.cuStreamSynchronize(nb));
	/* A blocking stream waits for earlier NULL-stream work. */
	launch(busy, 1, 1, 1, 1, NULL, (void *[]){ &ns });
	launch(inc, 1, 1, 1, 1, s1, (void *[]){ &p, &one });
	CK(D.cuStreamQuery(s1), CUDA_ERROR_NOT_READY);
	OK(D.cuStreamSynchronize(s1));
	OK(D.cuStreamSynchronize(nb));
	OK(D.cuMemcpyDtoH_v2(&v, p, 4));
	EXPECT(v == 4);

	/* cuStreamWaitEvent across streams (nb does not sync with NULL). */
	launch(busy, 1, 1, 1, 1, s1, (void *[]){ &ns });
	OK(D.cuEventRecord(e1, s1));
	OK(D.cuStreamWaitEvent(nb, e1, 0));
	launch(inc, 1, 1, 1, 1, nb, (void *[]){ &p, &one });
	CK(D.cuStreamQuery(nb), CUDA_ERROR_NOT_READY);
	OK(D.cuEventSynchronize(e1));
	OK(D.cuStreamSynchronize(nb));
	OK(D.cuMemcpyDtoH_v2(&v, p, 4));
	EXPECT(v == 5);

	/* Destroying an event with work queued on it is fine. */
	launch(busy, 1, 1, 1, 1, s2, (void *[]){ &ns });
	OK(D.cuEventRecord(e0, s2));
	OK(D.cuEventDestroy_v2(e0));
	CK(D.cuEventQuery(e0), CUDA_ERROR_INVALID_HANDLE);
	OK(D.cuStreamDestroy_v2(s2));
	CK(D.cuStreamQuery(s2), CUDA_ERROR_INVALID_HANDLE);
	/* Work left queued when the context goes. */
	launch(busy, 1, 1, 1, 1, s1, (void *[]){ &ns });
	OK(D.cuEventDestroy_v2(e1));
	OK(D.cuEventDestroy_v2(ent));
	OK(D.cuStreamDestroy_v2(nb));
	OK(D.cuCtxDestroy_v2(ctx));
}

static void test_faults(void)
{
	CUcontext a, b, c;
	CUmodule ma, mb, mc;
	CUfunction f;
	CUdeviceptr p, q, bogus = 0x1000;
	int n = 100, v;

	OK(D.cuCtxCreate_v2(&a, 0, 0));
	OK(D.cuModuleLoadData(&ma, ptx));
	OK(D.cuMemAlloc_v2(&p, 4));
	OK(D.cuCtxCreate_v2(&b, 0, 1));
	OK(D.cuModuleLoadData(&mb, ptx));
	OK(D.cuMemAlloc_v2(&q, 4));

	/* A pointer of another context is just as illegal. */
	OK(D.cuCtxSetCurrent(a));
	OK(D.cuModuleGetFunction(&f, ma, "illegal_write"));
	launch(f, 1, 1, 1, 1, NULL, (void *[]){ &q });
	CK(D.cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
	CK(D.cuMemAlloc_v2(&p, 4), CUDA_ERROR_ILLEGAL_ADDRESS);
	CK(D.cuMemcpyDtoH_v2(&v, p, 4), CUDA_ERROR_ILLEGAL_ADDRESS);
	CK(D.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, (void *[]){ &bogus }, NULL), CUDA_ERROR_ILLEGAL_ADDRESS);

	/* The other context is fine. */
	OK(D.cuCtxSetCurrent(b));
	OK(D.cuModuleGetFunction(&f, mb, "illegal_write"));
	launch(f, 1, 1, 1, 1, NULL, (void *[]){ &q });
	OK(D.cuCtxSynchronize());
	OK(D.cuMemcpyDtoH_v2(&v, q, 4));
	EXPECT(v == 1);
	/* An out-of-bounds index faults too. */
	OK(D.cuCtxCreate_v2(&c, 0, 1));
	OK(D.cuModuleLoadData(&mc, ptx));
	OK(D.cuModuleGetFunction(&f, mc, "inc_i32"));
	OK(D.cuMemAlloc_v2(&p, 99 * 4));
	launch(f, 1, 1, 128, 1, NULL, (void *[]){ &p, &n });
	CK(D.cuMemcpyDtoH_v2(&v, p, 4), CUDA_ERROR_ILLEGAL_ADDRESS);
	OK(D.cuCtxDestroy_v2(c));
	OK(D.cuCtxDestroy_v2(a));
	OK(D.cuCtxSetCurrent(b));
	OK(D.cuMemFree_v2(q));
	OK(D.cuCtxDestroy_v2(b));
}

static void test_destroy_frees(void)
{
	CUcontext obs, c;
	CUmodule m;
	CUstream s;
	CUevent e;
	CUdeviceptr p;
	size_t f0, f1, f2, total;

	OK(D.cuCtxCreate_v2(&obs, 0, 0));
	OK(D.cuMemGetInfo_v2(&f0, &total));
	OK(D.cuCtxCreate_v2(&c, 0, 0));
	OK(D.cuMemAlloc_v2(&p, 100 << 20));
	OK(D.cuMemAlloc_v2(&p, 3 << 20));
	OK(D.cuModuleLoadData(&m, ptx));
	OK(D.cuStreamCreateWithPriority(&s, 0, 0));
	OK(D.cuEventCreate(&e, 0));
	OK(D.cuEventRecord(e, s));
	OK(D.cuMemGetInfo_v2(&f1, &total));
	EXPECT(f1 == f0 - (64ULL << 20) - (103ULL << 20));
	OK(D.cuCtxDestroy_v2(c));
	OK(D.cuCtxSetCurrent(obs));
	OK(D.cuMemGetInfo_v2(&f2, &total));
	EXPECT(f2 == f0);
	OK(D.cuCtxDestroy_v2(obs));
}

/* A device's primary context: the first retain makes it,
 * later ones get the same; the last release frees what it held; a
 * release too many is refused. */
static void test_primary(void)
{
	CUcontext obs, p1, p2;
	CUdeviceptr p;
	size_t f0, f1, f2, total;

	OK(D.cuCtxCreate_v2(&obs, 0, 0));
	OK(D.cuMemGetInfo_v2(&f0, &total));
	OK(D.cuDevicePrimaryCtxSetFlags_v2(0, CU_CTX_SCHED_BLOCKING_SYNC));
	CK(D.cuDevicePrimaryCtxSetFlags_v2(0, 0x40000000u), CUDA_ERROR_INVALID_VALUE);
	OK(D.cuDevicePrimaryCtxRetain(&p1, 0));
	OK(D.cuDevicePrimaryCtxRetain(&p2, 0));
	EXPECT(p1 == p2 && p1 != obs);
	OK(D.cuCtxSetCurrent(p1));
	OK(D.cuMemAlloc_v2(&p, 10 << 20));
	OK(D.cuCtxSetCurrent(obs));
	OK(D.cuMemGetInfo_v2(&f1, &total));
	EXPECT(f1 == f0 - (64ULL << 20) - (10ULL << 20));
	OK(D.cuDevicePrimaryCtxRelease_v2(0));
	OK(D.cuMemGetInfo_v2(&f1, &total));
	EXPECT(f1 == f0 - (64ULL << 20) - (10ULL << 20)); /* one reference left */
	OK(D.cuDevicePrimaryCtxRelease_v2(0));
	OK(D.cuMemGetInfo_v2(&f2, &total));
	EXPECT(f2 == f0);
	CK(D.cuDevicePrimaryCtxRelease_v2(0), CUDA_ERROR_INVALID_CONTEXT);
	CK(D.cuDevicePrimaryCtxRetain(&p1, 99), CUDA_ERROR_INVALID_DEVICE);
	/* made again after the last release */
	OK(D.cuDevicePrimaryCtxRetain(&p1, 0));
	OK(D.cuDevicePrimaryCtxRelease_v2(0));
	OK(D.cuDevicePrimaryCtxSetFlags_v2(0, 0));
	OK(D.cuCtxDestroy_v2(obs));
}

/* One context per thread, as rgpud runs one thread per client.  They share
 * one library, each instantiating it in its own context. */
static CUkernel thread_kernel;

static void *thread_main(void *arg)
{
	enum { N = 4096 };
	float *a = malloc(N * sizeof(float)), *c = malloc(N * sizeof(float));
	CUcontext ctx;
	CUmodule m;
	CUfunction f, lf;
	CUstream s;
	CUdeviceptr da, dc;
	int n = N;

	EXPECT(a && c);
	for (int i = 0; i < N; i++)
		a[i] = (float)i;
	OK(D.cuCtxCreate_v2(&ctx, 0, (int)(intptr_t)arg % 2));
	OK(D.cuModuleLoadData(&m, ptx));
	OK(D.cuModuleGetFunction(&f, m, "vec_add"));
	OK(D.cuKernelGetFunction(&lf, thread_kernel));
	OK(D.cuStreamCreateWithPriority(&s, 0, 0));
	OK(D.cuMemAlloc_v2(&da, N * sizeof(float)));
	OK(D.cuMemAlloc_v2(&dc, N * sizeof(float)));
	for (int it = 0; it < 20; it++) {
		OK(D.cuCtxSetCurrent(ctx));
		OK(D.cuMemcpyHtoDAsync_v2(da, a, N * sizeof(float), s));
		launch(it % 3 == 0 ? f : it % 3 == 1 ? lf : (CUfunction)thread_kernel, N / 256, 1, 256, 1, s,
		       (void *[]){ &da, &da, &dc, &n });
		OK(D.cuMemcpyDtoHAsync_v2(c, dc, N * sizeof(float), s));
		OK(D.cuStreamSynchronize(s));
		for (int i = 0; i < N; i++)
			EXPECT(c[i] == 2.0f * a[i]);
	}
	OK(D.cuCtxDestroy_v2(ctx));
	free(a);
	free(c);
	return NULL;
}

static void test_threads(void)
{
	pthread_t t[4];
	CUlibrary lib;

	OK(lib_load(&lib, ptx));
	OK(D.cuLibraryGetKernel(&thread_kernel, lib, "vec_add"));
	for (intptr_t i = 0; i < 4; i++)
		EXPECT(pthread_create(&t[i], NULL, thread_main, (void *)i) == 0);
	for (int i = 0; i < 4; i++)
		EXPECT(pthread_join(t[i], NULL) == 0);
	OK(D.cuLibraryUnload(lib));
}

/* Virtual memory management: resolved by name so the test does not depend
 * on daemon/driver.h listing them. */
static struct {
	CUresult (*gran)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
	CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
	CUresult (*afree)(CUdeviceptr, size_t);
	CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
	CUresult (*release)(CUmemGenericAllocationHandle);
	CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
	CUresult (*unmap)(CUdeviceptr, size_t);
	CUresult (*access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
} V;

static void test_vmm(void)
{
	enum { N = 1000 };
	const size_t G = 2ULL << 20;
	const CUdeviceptr fixed = 0x600000000000ULL + (64ULL << 20);
	static float a[N], b[N], c[N];
	CUmemAllocationProp prop = { 0 };
	CUmemAccessDesc acc = { 0 };
	CUmemGenericAllocationHandle h, h2, hbig;
	CUdeviceptr base, any, p, da, db, dc, plain;
	CUcontext ctx, ctx2, other;
	CUmodule mod;
	CUfunction f;
	CUstream s;
	size_t g, fr0, fr, total;
	uint32_t buf[64];
	int n = N;

#define VLOAD(field, name) EXPECT((*(void **)&V.field = dlsym(D.dl, name)) != NULL)
	VLOAD(gran, "cuMemGetAllocationGranularity");
	VLOAD(reserve, "cuMemAddressReserve");
	VLOAD(afree, "cuMemAddressFree");
	VLOAD(create, "cuMemCreate");
	VLOAD(release, "cuMemRelease");
	VLOAD(map, "cuMemMap");
	VLOAD(unmap, "cuMemUnmap");
	VLOAD(access, "cuMemSetAccess");
#undef VLOAD

	OK(D.cuCtxCreate_v2(&ctx, 0, 0));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	OK(V.gran(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	EXPECT(g == G);
	OK(V.gran(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
	EXPECT(g == G);
	prop.location.id = 2;
	CK(V.gran(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_ERROR_INVALID_DEVICE);
	prop.location.id = 0;
	prop.type = CU_MEM_ALLOCATION_TYPE_INVALID;
	CK(V.gran(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_ERROR_INVALID_VALUE);
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;

	/* Reservations: exactly at a fixed address, or anywhere aligned. */
	CK(V.reserve(&base, G + 4096, 0, fixed, 0), CUDA_ERROR_INVALID_VALUE);
	OK(V.reserve(&base, 4 * G, 0, fixed, 0));
	EXPECT(base == fixed);
	CK(V.reserve(&p, 2 * G, 0, fixed + G, 0), CUDA_ERROR_INVALID_VALUE);
	CK(V.reserve(&p, 2 * G, 0, fixed - G, 0), CUDA_ERROR_INVALID_VALUE);
	OK(V.reserve(&any, 2 * G, 0, 0, 0));
	EXPECT(any % G == 0 && any != base);

	/* Physical memory is charged like cuMemAlloc. */
	OK(D.cuMemGetInfo_v2(&fr0, &total));
	CK(V.create(&hbig, (total + G) / G * G, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
	CK(V.create(&h, G + 1, &prop, 0), CUDA_ERROR_INVALID_VALUE);
	OK(V.create(&h, 2 * G, &prop, 0));
	OK(V.create(&h2, G, &prop, 0));
	OK(D.cuMemGetInfo_v2(&fr, &total));
	EXPECT(fr == fr0 - 3 * G);

	/* Mapped but not yet accessible; then accessible to device 0. */
	CK(V.map(base + 3 * G, 2 * G, 0, h, 0), CUDA_ERROR_INVALID_VALUE);    /* past the reservation */
	OK(V.map(base, 2 * G, 0, h, 0));
	CK(V.map(base + G, G, 0, h2, 0), CUDA_ERROR_INVALID_VALUE);           /* overlaps */
	OK(V.map(base + 2 * G, G, 0, h2, 0));
	CK(D.cuMemcpyHtoD_v2(base, buf, sizeof buf), CUDA_ERROR_INVALID_VALUE);
	acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	acc.location.id = 0;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	CK(V.access(base, G, &acc, 1), CUDA_ERROR_INVALID_VALUE);             /* half a mapping */
	OK(V.access(base, 3 * G, &acc, 1));
	CK(V.afree(base, 4 * G), CUDA_ERROR_INVALID_VALUE);                   /* still mapped */

	/* Copies, memsets and a kernel on it, like cuMemAlloc memory. */
	for (int i = 0; i < 64; i++)
		buf[i] = 0x1000u + (uint32_t)i;
	OK(D.cuMemcpyHtoD_v2(base + 4096, buf, sizeof buf));
	memset(buf, 0, sizeof buf);
	OK(D.cuMemcpyDtoH_v2(buf, base + 4096, sizeof buf));
	for (int i = 0; i < 64; i++)
		EXPECT(buf[i] == 0x1000u + (uint32_t)i);
	OK(D.cuMemsetD32_v2(base + 2 * G - 128, 0xabcdu, 64));  /* spans two mappings */
	OK(D.cuMemcpyDtoH_v2(buf, base + 2 * G - 128, sizeof buf));
	for (int i = 0; i < 64; i++)
		EXPECT(buf[i] == 0xabcdu);
	CK(D.cuMemcpyHtoD_v2(base + 3 * G - 128, buf, sizeof buf), CUDA_ERROR_INVALID_VALUE);
	OK(D.cuMemAlloc_v2(&plain, sizeof buf));
	OK(D.cuMemcpyDtoD_v2(plain, base + 4096, sizeof buf));
	OK(D.cuStreamCreateWithPriority(&s, 0, 0));
	OK(D.cuMemcpyDtoDAsync_v2(base + G, plain, sizeof buf, s));
	OK(D.cuMemcpyDtoHAsync_v2(buf, base + G, sizeof buf, s));
	OK(D.cuStreamSynchronize(s));
	for (int i = 0; i < 64; i++)
		EXPECT(buf[i] == 0x1000u + (uint32_t)i);

	for (int i = 0; i < N; i++) {
		a[i] = (float)i * 1.5f;
		b[i] = (float)(7 - i);
	}
	da = base + 3 * G - 4096 * 2;   /* in h2 */
	db = base + G;                  /* in h */
	dc = base + 2 * G - 2048;       /* spans h and h2 */
	OK(D.cuMemcpyHtoDAsync_v2(da, a, sizeof a, s));
	OK(D.cuMemcpyHtoD_v2(db, b, sizeof b));
	OK(D.cuModuleLoadData(&mod, ptx));
	OK(D.cuModuleGetFunction(&f, mod, "vec_add"));
	launch(f, 4, 1, 256, 1, s, (void *[]){ &da, &db, &dc, &n });
	OK(D.cuMemcpyDtoHAsync_v2(c, dc, sizeof c, s));
	OK(D.cuStreamSynchronize(s));
	for (int i = 0; i < N; i++)
		EXPECT(c[i] == a[i] + b[i]);

	/* Device 1 was given no access: its contexts can not use it. */
	OK(D.cuCtxCreate_v2(&other, 0, 1));
	CK(D.cuMemcpyDtoH_v2(buf, base, sizeof buf), CUDA_ERROR_INVALID_VALUE);
	OK(D.cuCtxDestroy_v2(other));

	/* The mappings outlive the context they were used from. */
	OK(D.cuCtxCreate_v2(&ctx2, 0, 0));
	OK(D.cuCtxSetCurrent(ctx));
	OK(D.cuCtxDestroy_v2(ctx));
	OK(D.cuCtxSetCurrent(ctx2));
	OK(D.cuMemcpyDtoH_v2(buf, base + 4096, sizeof buf));
	for (int i = 0; i < 64; i++)
		EXPECT(buf[i] == 0x1000u + (uint32_t)i);

	/* Released memory lives while it is mapped. */
	OK(V.release(h));
	CK(V.release(h), CUDA_ERROR_INVALID_VALUE);
	CK(V.map(base + 3 * G, G, 0, h, 0), CUDA_ERROR_INVALID_HANDLE);
	OK(D.cuMemGetInfo_v2(&fr, &total));
	EXPECT(fr == fr0 - 3 * G);
	OK(D.cuMemcpyDtoH_v2(buf, base + 4096, sizeof buf));
	EXPECT(buf[5] == 0x1005u);

	/* Unmapping: whole mappings only, then the range is unusable. */
	CK(V.unmap(base, G), CUDA_ERROR_INVALID_VALUE);
	OK(V.unmap(base, 2 * G));
	CK(D.cuMemcpyDtoH_v2(buf, base + 4096, sizeof buf), CUDA_ERROR_INVALID_VALUE);
	CK(D.cuMemsetD8_v2(base, 0, 16), CUDA_ERROR_INVALID_VALUE);
	OK(D.cuMemGetInfo_v2(&fr, &total));
	EXPECT(fr == fr0 - G);
	OK(D.cuMemcpyDtoH_v2(buf, base + 2 * G, sizeof buf));  /* h2 still there */
	OK(V.unmap(base + 2 * G, G));
	CK(D.cuMemcpyDtoH_v2(buf, base + 2 * G, sizeof buf), CUDA_ERROR_INVALID_VALUE);
	OK(D.cuMemGetInfo_v2(&fr, &total));
	EXPECT(fr == fr0 - G);      /* h2 not released yet */
	/* Memory can be mapped again, elsewhere. */
	OK(V.map(any + G, G, 0, h2, 0));
	acc.location.id = 1;
	OK(V.access(any + G, G, &acc, 1));
	CK(D.cuMemcpyDtoH_v2(buf, any + G, sizeof buf), CUDA_ERROR_INVALID_VALUE);  /* device 1 only */
	acc.location.id = 0;
	OK(V.access(any + G, G, &acc, 1));
	OK(D.cuMemcpyDtoH_v2(buf, any + G, sizeof buf));
	OK(V.unmap(any + G, G));
	OK(V.release(h2));
	OK(D.cuMemGetInfo_v2(&fr, &total));
	EXPECT(fr == fr0);

	CK(V.afree(base, 2 * G), CUDA_ERROR_INVALID_VALUE);
	OK(V.afree(base, 4 * G));
	OK(V.afree(any, 2 * G));
	OK(V.reserve(&p, 2 * G, 0, fixed + G, 0));   /* free again */
	EXPECT(p == fixed + G);
	OK(V.afree(p, 2 * G));
	OK(D.cuCtxDestroy_v2(ctx2));
}

/* An image in a heap buffer of exactly n bytes (ASan and valgrind see any
 * read past it). */
static void *exact(const void *p, size_t n)
{
	void *b = malloc(n);

	EXPECT(b != NULL);
	memcpy(b, p, n);
	return b;
}

static void expect_bad_image(const void *img, size_t n, const char *what)
{
	void *b = exact(img, n);
	CUmodule mod;
	CUlibrary lib;
	CUresult m = D.cuModuleLoadData(&mod, b);
	CUresult l = D.cuLibraryLoadData(&lib, b, NULL, NULL, 0, NULL, NULL, 0);

	if (m != CUDA_ERROR_INVALID_IMAGE || l != CUDA_ERROR_INVALID_IMAGE) {
		fprintf(stderr, "%s:%d: image \"%s\": module %d, library %d, expected %d\n", __FILE__,
			__LINE__, what, (int)m, (int)l, (int)CUDA_ERROR_INVALID_IMAGE);
		exit(1);
	}
	free(b);
}

/* The loader reads only what an image's own headers claim, and refuses
 * headers that disagree with each other (issue 16: an over-read on a
 * malformed image). */
static void test_images(void)
{
	static const struct {
		const char *what;
		uint32_t w[8];
		size_t n;
	} bad[] = {
		{ "fatbin header size 0", { 0xBA55ED50u, 0x00000001u, 16, 0, 0x00010002u, 16, 0, 0 }, 32 },
		{ "fatbin version 2", { 0xBA55ED50u, 0x00100002u, 16, 0, 0x00010002u, 16, 0, 0 }, 32 },
		{ "fatbin without entries", { 0xBA55ED50u, 0x00100001u, 0, 0 }, 16 },
		{ "fatbin of 8 GiB", { 0xBA55ED50u, 0x00100001u, 0, 2 }, 16 },
		{ "entry past the fatbin", { 0xBA55ED50u, 0x00100001u, 16, 0, 0x00010002u, 16, 64, 0 }, 32 },
		{ "entry header size 0", { 0xBA55ED50u, 0x00100001u, 16, 0, 0x00010002u, 0, 0, 0 }, 32 },
		{ "entry header past the fatbin", { 0xBA55ED50u, 0x00100001u, 16, 0, 0x00010002u, 64, 0, 0 }, 32 },
		{ "entry header cut short", { 0xBA55ED50u, 0x00100001u, 24, 0, 0x00010002u, 16, 0, 0 }, 32 },
	};
	static const uint32_t two[12] = { 0xBA55ED50u, 0x00100001u, 32, 0, 0x00010002u, 16, 0, 0,
					  0x00010001u, 16, 0, 0 };
	unsigned char elf[64];
	CUcontext ctx;
	CUmodule mod;
	void *b;

	OK(D.cuCtxCreate_v2(&ctx, 0, 0));
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		expect_bad_image(bad[i].w, bad[i].n, bad[i].what);
	/* well-formed, in exact buffers: accepted */
	b = exact(fatbin_image, sizeof fatbin_image);
	OK(D.cuModuleLoadData(&mod, b));
	OK(D.cuModuleUnload(mod));
	free(b);
	b = exact(two, sizeof two);
	OK(D.cuModuleLoadData(&mod, b));
	OK(D.cuModuleUnload(mod));
	free(b);
	elf_header(elf);
	b = exact(elf, sizeof elf);
	OK(D.cuModuleLoadData(&mod, b));
	OK(D.cuModuleUnload(mod));
	free(b);

	elf_header(elf);
	elf[4] = 1; /* 32-bit */
	expect_bad_image(elf, sizeof elf, "ELF class 32");
	elf_header(elf);
	elf[5] = 2; /* big-endian */
	expect_bad_image(elf, sizeof elf, "ELF big-endian");
	elf_header(elf);
	elf[52] = 52;
	expect_bad_image(elf, sizeof elf, "ELF header size 52");
	elf_header(elf);
	elf[60] = 2;      /* e_shnum */
	elf[58] = 40;     /* e_shentsize: not Elf64_Shdr */
	elf[40] = 64;     /* e_shoff */
	expect_bad_image(elf, sizeof elf, "ELF section header size 40");
	elf[58] = 64;
	elf[62] = 2;      /* e_shstrndx == e_shnum */
	expect_bad_image(elf, sizeof elf, "ELF section name index out of range");
	elf[62] = 0;
	elf[40] = 0;      /* section table over the header */
	expect_bad_image(elf, sizeof elf, "ELF section table at 0");
	elf_header(elf);
	elf[56] = 1;      /* e_phnum */
	elf[54] = 32;     /* e_phentsize: not Elf64_Phdr */
	elf[32] = 64;
	expect_bad_image(elf, sizeof elf, "ELF program header size 32");
	OK(D.cuCtxDestroy_v2(ctx));
}

/* Handles the device did not hand out, or took back, are refused, never
 * dereferenced: what the real driver would crash on fails here. */
static void test_strict_handles(void)
{
	CUcontext ctx, other;
	CUmodule mod;
	CUfunction f, fo;
	CUstream st, st_other;
	CUevent ev, ev_other;
	CUlibrary lib;
	CUkernel k;
	int v;
	size_t off, sz;
	uint64_t forged[64] = { 0 };
	void *bogus = forged;

	OK(D.cuCtxCreate_v2(&other, 0, 0));
	OK(D.cuStreamCreateWithPriority(&st_other, 0, 0));
	OK(D.cuEventCreate(&ev_other, 0));
	OK(D.cuModuleLoadData(&mod, ptx));
	OK(D.cuModuleGetFunction(&fo, mod, "inc_i32"));
	OK(D.cuCtxCreate_v2(&ctx, 0, 0));

	/* forged handles of every kind */
	CK(D.cuCtxSetCurrent((CUcontext)bogus), CUDA_ERROR_INVALID_CONTEXT);
	CK(D.cuCtxDestroy_v2((CUcontext)bogus), CUDA_ERROR_INVALID_CONTEXT);
	CK(D.cuStreamSynchronize((CUstream)bogus), CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuStreamQuery((CUstream)bogus), CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuStreamDestroy_v2((CUstream)bogus), CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuEventRecord((CUevent)bogus, NULL), CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuEventSynchronize((CUevent)bogus), CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuEventDestroy_v2((CUevent)bogus), CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuModuleUnload((CUmodule)bogus), CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuModuleGetFunction(&f, (CUmodule)bogus, "inc_i32"), CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, (CUfunction)bogus), CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuFuncGetParamInfo((CUfunction)bogus, 0, &off, &sz), CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuLaunchKernel((CUfunction)bogus, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuLibraryUnload((CUlibrary)bogus), CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuLibraryGetKernel(&k, (CUlibrary)bogus, "inc_i32"), CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuKernelGetFunction(&f, (CUkernel)bogus), CUDA_ERROR_INVALID_HANDLE);
	{
		unsigned cnt;
		const char *name;
		CUfunction fs[16];
		CK(D.cuModuleGetFunctionCount(&cnt, (CUmodule)bogus), CUDA_ERROR_INVALID_HANDLE);
		CK(D.cuModuleEnumerateFunctions(fs, 16, (CUmodule)bogus), CUDA_ERROR_INVALID_HANDLE);
		CK(D.cuFuncGetName(&name, (CUfunction)bogus), CUDA_ERROR_INVALID_HANDLE);
		CK(D.cuModuleGetFunctionCount(&cnt, mod), CUDA_ERROR_INVALID_HANDLE); /* other ctx */
		OK(D.cuCtxSetCurrent(other));
		OK(D.cuModuleGetFunctionCount(&cnt, mod));
		EXPECT(cnt == TEST_KERNELS_N);
		OK(D.cuModuleEnumerateFunctions(fs, cnt, mod));
		OK(D.cuFuncGetName(&name, fs[0]));
		EXPECT(strcmp(name, "vec_add") == 0);
		OK(D.cuFuncGetName(&name, fo));
		EXPECT(strcmp(name, "inc_i32") == 0);
		OK(D.cuCtxSetCurrent(ctx));
	}
	CK(D.cuMemsetD8Async(0, 0, 0, (CUstream)bogus), CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuMemcpyHtoDAsync_v2(0, forged, 0, (CUstream)bogus), CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuMemcpyDtoHAsync_v2(forged, 0, 0, (CUstream)bogus), CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuStreamWaitEvent(NULL, (CUevent)bogus, 0), CUDA_ERROR_INVALID_HANDLE);

	/* another context's objects */
	CK(D.cuStreamSynchronize(st_other), CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuEventRecord(ev_other, NULL), CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, fo), CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuModuleUnload(mod), CUDA_ERROR_INVALID_HANDLE);

	/* taken back: destroyed streams and events, unloaded modules and
	 * libraries, a destroyed context */
	OK(D.cuStreamCreateWithPriority(&st, 0, 0));
	OK(D.cuEventCreate(&ev, 0));
	OK(D.cuStreamDestroy_v2(st));
	OK(D.cuEventDestroy_v2(ev));
	CK(D.cuStreamQuery(st), CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuEventQuery(ev), CUDA_ERROR_INVALID_HANDLE);
	OK(D.cuCtxSetCurrent(other));
	OK(D.cuModuleUnload(mod));
	CK(D.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, fo), CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuLaunchKernel(fo, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_HANDLE);
	OK(D.cuLibraryLoadData(&lib, fatbin_image, NULL, NULL, 0, NULL, NULL, 0));
	OK(D.cuLibraryGetKernel(&k, lib, "inc_i32"));
	OK(D.cuKernelGetFunction(&f, k));
	OK(D.cuLibraryUnload(lib));
	CK(D.cuKernelGetFunction(&f, k), CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, f), CUDA_ERROR_INVALID_HANDLE);
	CK(D.cuLibraryUnload(lib), CUDA_ERROR_INVALID_HANDLE);
	OK(D.cuCtxDestroy_v2(other));
	CK(D.cuCtxSetCurrent(other), CUDA_ERROR_INVALID_CONTEXT);
	CK(D.cuCtxDestroy_v2(other), CUDA_ERROR_INVALID_CONTEXT);
	OK(D.cuCtxDestroy_v2(ctx));
}

/*
 * One pool per device across processes (pool.c): two processes on a 1 GiB
 * device cannot both hold 600 MiB; once the holder is killed its share
 * returns.  Runs before this process loads the device itself (each child
 * loads its own copy, as rgpud's workers do).
 */
static void pool_child(int ready_fd, int go_fd, int holder)
{
	CUdevice dev;
	CUcontext ctx;
	CUdeviceptr p;
	size_t fr, tot;
	char c = 'x';

	load();
	OK(D.cuInit(0));
	OK(D.cuDeviceGet(&dev, 0));
	OK(D.cuCtxCreate_v2(&ctx, 0, dev));
	if (holder) {
		OK(D.cuMemAlloc_v2(&p, 600u << 20));
		EXPECT(write(ready_fd, &c, 1) == 1);
		for (;;)
			pause(); /* until killed: its share must come back */
	}
	/* the holder has its 600 MiB: the device's free memory says so */
	EXPECT(read(go_fd, &c, 1) == 1);
	OK(D.cuMemGetInfo_v2(&fr, &tot));
	EXPECT(tot == 1u << 30 && fr < 400u << 20);
	CK(D.cuMemAlloc_v2(&p, 600u << 20), CUDA_ERROR_OUT_OF_MEMORY);
	EXPECT(write(ready_fd, &c, 1) == 1);
	/* the holder was killed */
	EXPECT(read(go_fd, &c, 1) == 1);
	OK(D.cuMemGetInfo_v2(&fr, &tot));
	EXPECT(fr > 800u << 20);
	OK(D.cuMemAlloc_v2(&p, 600u << 20));
	OK(D.cuMemFree_v2(p));
	OK(D.cuCtxDestroy_v2(ctx));
	exit(0);
}

static void test_shared_pool(void)
{
	int up[2], a_go[2], b_go[2], st;
	char c = 'g', name[64];
	pid_t a, b;

	snprintf(name, sizeof name, "selftest-%ld", (long)getpid());
	setenv("RGPU_EMU_POOL", name, 1);
	setenv("RGPU_EMU_MEM", "1G", 1);
	EXPECT(pipe(up) == 0 && pipe(a_go) == 0 && pipe(b_go) == 0);
	if ((a = fork()) == 0)
		pool_child(up[1], a_go[0], 1);
	EXPECT(a > 0 && read(up[0], &c, 1) == 1);
	if ((b = fork()) == 0)
		pool_child(up[1], b_go[0], 0);
	EXPECT(b > 0 && write(b_go[1], &c, 1) == 1);
	EXPECT(read(up[0], &c, 1) == 1); /* B was refused */
	EXPECT(kill(a, SIGKILL) == 0 && waitpid(a, &st, 0) == a);
	EXPECT(write(b_go[1], &c, 1) == 1);
	EXPECT(waitpid(b, &st, 0) == b && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	unsetenv("RGPU_EMU_POOL");
	for (int i = 0; i < 2; i++) {
		close(up[i]);
		close(a_go[i]);
		close(b_go[i]);
	}
}

int main(void)
{
	double t0 = now_ms();

	unsetenv("RGPU_EMU_DEVICES");
	test_shared_pool();

	/* A known configuration, whatever the caller's environment says. */
	unsetenv("RGPU_EMU_DEVICES");
	setenv("RGPU_EMU_MEM", "4G", 1);
	load();
	test_device();
	test_memory();
	test_kernels();
	test_libraries();
	test_streams();
	test_faults();
	test_destroy_frees();
	test_primary();
	test_threads();
	test_vmm();
	test_images();
	test_strict_handles();
	dlclose(D.dl);
	printf("emu_selftest: all checks passed (%.0f ms)\n", now_ms() - t0);
	return 0;
}
