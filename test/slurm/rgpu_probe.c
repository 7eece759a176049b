/*
 * What a job's CUDA program sees, for the Slurm tests: the devices (name,
 * memory, cuMemGetInfo) and, with --alloc SIZE, whether an allocation of
 * SIZE bytes on device 0 succeeds.  --hold S keeps the context S seconds
 * (jobs sharing a GPU at the same time).  Loads libcuda.so.1 with dlopen,
 * so it builds without the toolkit: LD_LIBRARY_PATH picks the rgpu client.
 *
 *   rgpu_probe [--alloc BYTES] [--hold SECONDS]
 * Prints "devices N", a line per device, "alloc BYTES OK|<error name>";
 * exits 0 if every call it made (the allocation aside) succeeded.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;

/* Declares name as a pointer of the given signature, resolved by dlsym. */
#define SYM(name, ret, args) ret(*name) args = (ret(*) args)dlsym(h, #name)

int main(int argc, char **argv)
{
	unsigned long long alloc = 0;
	int hold = 0;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--alloc"))
			alloc = strtoull(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--hold"))
			hold = atoi(argv[i + 1]);
	}
	void *h = dlopen("libcuda.so.1", RTLD_NOW);
	if (!h) {
		printf("error dlopen: %s\n", dlerror());
		return 1;
	}
	SYM(cuInit, CUresult, (unsigned));
	SYM(cuDeviceGetCount, CUresult, (int *));
	SYM(cuDeviceGet, CUresult, (CUdevice *, int));
	SYM(cuDeviceGetName, CUresult, (char *, int, CUdevice));
	SYM(cuDeviceTotalMem_v2, CUresult, (size_t *, CUdevice));
	SYM(cuCtxCreate_v2, CUresult, (CUcontext *, unsigned, CUdevice));
	SYM(cuCtxDestroy_v2, CUresult, (CUcontext));
	SYM(cuCtxSetCurrent, CUresult, (CUcontext));
	SYM(cuMemGetInfo_v2, CUresult, (size_t *, size_t *));
	SYM(cuMemAlloc_v2, CUresult, (CUdeviceptr *, size_t));
	SYM(cuMemFree_v2, CUresult, (CUdeviceptr));
	SYM(cuGetErrorName, CUresult, (CUresult, const char **));
	if (!cuInit || !cuDeviceGetCount || !cuCtxCreate_v2 || !cuMemGetInfo_v2 || !cuMemAlloc_v2) {
		printf("error: libcuda.so.1 lacks driver entry points\n");
		return 1;
	}
#define NAME(rc) (cuGetErrorName && cuGetErrorName(rc, &en) == 0 ? en : "?")
	const char *en = NULL;
	CUresult rc = cuInit(0);
	if (rc) {
		printf("error cuInit: %d %s\n", rc, NAME(rc));
		return 1;
	}
	int n = 0;
	rc = cuDeviceGetCount(&n);
	if (rc) {
		printf("error cuDeviceGetCount: %d %s\n", rc, NAME(rc));
		return 1;
	}
	printf("devices %d\n", n);
	int bad = 0;
	CUcontext ctx0 = NULL;
	for (int i = 0; i < n; i++) {
		CUdevice d;
		char name[128] = "";
		size_t tot = 0, fr = 0, ctot = 0;
		CUcontext ctx = NULL;
		if ((rc = cuDeviceGet(&d, i)) || (rc = cuDeviceGetName(name, sizeof(name), d)) ||
		    (rc = cuDeviceTotalMem_v2(&tot, d)) || (rc = cuCtxCreate_v2(&ctx, 0, d)) ||
		    (rc = cuMemGetInfo_v2(&fr, &ctot))) {
			printf("device %d error %d %s\n", i, rc, NAME(rc));
			bad = 1;
			continue;
		}
		printf("device %d name=%s total=%zu meminfo_free=%zu meminfo_total=%zu\n", i, name,
		       tot, fr, ctot);
		if (i == 0)
			ctx0 = ctx;
		else
			cuCtxDestroy_v2(ctx);
	}
	if (alloc && ctx0) {
		CUdeviceptr p = 0;
		cuCtxSetCurrent(ctx0);
		rc = cuMemAlloc_v2(&p, alloc);
		printf("alloc %llu %s\n", alloc, rc ? NAME(rc) : "OK");
		if (!rc)
			cuMemFree_v2(p);
	}
	fflush(stdout);
	if (hold)
		sleep((unsigned)hold);
	if (ctx0)
		cuCtxDestroy_v2(ctx0);
	return bad;
}
