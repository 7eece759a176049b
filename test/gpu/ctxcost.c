/*
 * One CUDA context held open, for test/gpu/context-cost.sh: the script
 * starts several of these at once and reads the device's used memory
 * (nvidia-smi) before and after, so the difference is what a context
 * really costs on the device (driver state, stacks, printf FIFO, heap,
 * loaded code), whoever serves it: the local driver, an MPS server, or
 * rgpud (this program then loads rgpu's libcuda.so.1 from
 * LD_LIBRARY_PATH and the context lives in an rgpud session worker).
 *
 *   ctxcost [--lmem-max] [--stack B] [--heap B] [--printf B] [--kernel]
 *           --ready FILE
 *
 * Creates a context on device 0 (flags: CU_CTX_LMEM_RESIZE_TO_MAX with
 * --lmem-max), sets the given limits, with --kernel loads a small PTX
 * module and runs its kernel once, then writes "ready <free> <total>"
 * (cuMemGetInfo) to FILE and waits until it is killed (SIGTERM) or 120 s
 * pass.  Exit 0, or 1 with a message naming the failing call.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char ptx[] =
	".version 7.0\n"
	".target sm_50\n"
	".address_size 64\n"
	".visible .entry touch(.param .u64 p)\n"
	"{\n"
	"	.reg .b64 %rd<3>;\n"
	"	.reg .b32 %r<2>;\n"
	"	ld.param.u64 %rd1, [p];\n"
	"	cvta.to.global.u64 %rd2, %rd1;\n"
	"	mov.u32 %r1, %tid.x;\n"
	"	st.global.u32 [%rd2], %r1;\n"
	"	ret;\n"
	"}\n";

#define SYM(name) name##_t *p_##name
typedef CUresult CUDAAPI cuInit_t(unsigned);
typedef CUresult CUDAAPI cuDeviceGet_t(CUdevice *, int);
typedef CUresult CUDAAPI cuCtxCreate_v2_t(CUcontext *, unsigned, CUdevice);
typedef CUresult CUDAAPI cuCtxSetLimit_t(CUlimit, size_t);
typedef CUresult CUDAAPI cuModuleLoadData_t(CUmodule *, const void *);
typedef CUresult CUDAAPI cuModuleGetFunction_t(CUfunction *, CUmodule, const char *);
typedef CUresult CUDAAPI cuMemAlloc_v2_t(CUdeviceptr *, size_t);
typedef CUresult CUDAAPI cuLaunchKernel_t(CUfunction, unsigned, unsigned, unsigned, unsigned,
					  unsigned, unsigned, unsigned, CUstream, void **, void **);
typedef CUresult CUDAAPI cuCtxSynchronize_t(void);
typedef CUresult CUDAAPI cuMemGetInfo_v2_t(size_t *, size_t *);

static volatile sig_atomic_t stop;
static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

#define CALL(x) do { CUresult r_ = (x); if (r_) { fprintf(stderr, "ctxcost: %s: error %d\n", #x, (int)r_); return 1; } } while (0)

int main(int argc, char **argv)
{
	unsigned flags = 0;
	size_t stack = 0, heap = 0, fifo = 0;
	int kernel = 0;
	const char *ready = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--lmem-max"))
			flags |= CU_CTX_LMEM_RESIZE_TO_MAX;
		else if (!strcmp(argv[i], "--kernel"))
			kernel = 1;
		else if (!strcmp(argv[i], "--stack") && i + 1 < argc)
			stack = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--heap") && i + 1 < argc)
			heap = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--printf") && i + 1 < argc)
			fifo = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--ready") && i + 1 < argc)
			ready = argv[++i];
		else {
			fprintf(stderr, "ctxcost: unknown argument %s\n", argv[i]);
			return 2;
		}
	}
	if (!ready) {
		fprintf(stderr, "ctxcost: --ready FILE is required\n");
		return 2;
	}
	void *lib = dlopen("libcuda.so.1", RTLD_NOW);
	if (!lib) {
		fprintf(stderr, "ctxcost: %s\n", dlerror());
		return 1;
	}
#define LOAD(name) SYM(name) = (name##_t *)dlsym(lib, #name); \
	if (!p_##name) { fprintf(stderr, "ctxcost: no %s\n", #name); return 1; }
	LOAD(cuInit) LOAD(cuDeviceGet) LOAD(cuCtxCreate_v2) LOAD(cuCtxSetLimit)
	LOAD(cuModuleLoadData) LOAD(cuModuleGetFunction) LOAD(cuMemAlloc_v2)
	LOAD(cuLaunchKernel) LOAD(cuCtxSynchronize) LOAD(cuMemGetInfo_v2)

	CUdevice dev;
	CUcontext ctx;
	CALL(p_cuInit(0));
	CALL(p_cuDeviceGet(&dev, 0));
	CALL(p_cuCtxCreate_v2(&ctx, flags, dev));
	if (stack)
		CALL(p_cuCtxSetLimit(CU_LIMIT_STACK_SIZE, stack));
	if (heap)
		CALL(p_cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, heap));
	if (fifo)
		CALL(p_cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, fifo));
	if (kernel) {
		CUmodule m;
		CUfunction f;
		CUdeviceptr d;
		CALL(p_cuModuleLoadData(&m, ptx));
		CALL(p_cuModuleGetFunction(&f, m, "touch"));
		CALL(p_cuMemAlloc_v2(&d, 4096));
		void *args[] = { &d };
		CALL(p_cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
		CALL(p_cuCtxSynchronize());
	}
	size_t fr = 0, tot = 0;
	CALL(p_cuMemGetInfo_v2(&fr, &tot));
	signal(SIGTERM, on_term);
	signal(SIGINT, on_term);
	char tmp[4096];
	snprintf(tmp, sizeof(tmp), "%s.tmp", ready);
	FILE *f = fopen(tmp, "w");
	if (!f || fprintf(f, "ready %zu %zu\n", fr, tot) < 0 || fclose(f) || rename(tmp, ready)) {
		perror("ctxcost: ready file");
		return 1;
	}
	for (int t = 0; t < 1200 && !stop; t++)
		usleep(100 * 1000);
	return 0;
}
