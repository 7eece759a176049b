/*
 * The demo's CUDA program (contrib/demo.sh runs it in a Slurm job on a node
 * without GPUs): on every GPU it was given, copies two vectors in, runs a
 * vector addition kernel, copies the sum back and checks every element.
 * Plain driver API against libcuda.so.1, which in the job is rgpu's client
 * library (the Slurm plugin puts it first on LD_LIBRARY_PATH).
 *
 * The kernel is PTX text, so nothing needs nvcc: a real GPU's driver
 * compiles it; rgpud --emulated runs its own vec_add of the same signature
 * (emu/README.md).
 *
 *   demo_job [N]      N floats per vector (default 1048576)
 *   DEMO_SECONDS=S    keep each GPU busy with the same sum for S seconds
 * Prints a line per GPU and a closing "RESULT: ..." line; exits 0 only if
 * every GPU returned the right sums.
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* c[i] = a[i] + b[i] for i < n: vec_add(const float *a, const float *b,
 * float *c, int n), the signature of test/kernels' vec_add. */
static const char vec_add_ptx[] =
	".version 7.0\n"
	".target sm_52\n"
	".address_size 64\n"
	".visible .entry vec_add(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u32 pn)\n"
	"{\n"
	"	.reg .pred %p<2>;\n"
	"	.reg .f32 %f<4>;\n"
	"	.reg .b32 %r<6>;\n"
	"	.reg .b64 %rd<11>;\n"
	"	ld.param.u64 %rd1, [pa];\n"
	"	ld.param.u64 %rd2, [pb];\n"
	"	ld.param.u64 %rd3, [pc];\n"
	"	ld.param.u32 %r2, [pn];\n"
	"	mov.u32 %r3, %ctaid.x;\n"
	"	mov.u32 %r4, %ntid.x;\n"
	"	mov.u32 %r5, %tid.x;\n"
	"	mad.lo.s32 %r1, %r3, %r4, %r5;\n"
	"	setp.ge.s32 %p1, %r1, %r2;\n"
	"	@%p1 bra DONE;\n"
	"	mul.wide.s32 %rd4, %r1, 4;\n"
	"	cvta.to.global.u64 %rd5, %rd1;\n"
	"	add.s64 %rd6, %rd5, %rd4;\n"
	"	cvta.to.global.u64 %rd7, %rd2;\n"
	"	add.s64 %rd8, %rd7, %rd4;\n"
	"	ld.global.f32 %f1, [%rd6];\n"
	"	ld.global.f32 %f2, [%rd8];\n"
	"	add.f32 %f3, %f1, %f2;\n"
	"	cvta.to.global.u64 %rd9, %rd3;\n"
	"	add.s64 %rd10, %rd9, %rd4;\n"
	"	st.global.f32 [%rd10], %f3;\n"
	"DONE:\n"
	"	ret;\n"
	"}\n";

static const char *errname(CUresult rc)
{
	const char *s = NULL;
	if (cuGetErrorName(rc, &s) != CUDA_SUCCESS || !s)
		return "unknown error";
	return s;
}

/* Each step names what it did; the first failure ends that GPU's run. */
#define STEP(call, what)                                                              \
	do {                                                                          \
		CUresult rc_ = (call);                                                \
		if (rc_ != CUDA_SUCCESS) {                                            \
			printf("  device %d: %s failed: %s\n", dev, what, errname(rc_)); \
			goto out;                                                     \
		}                                                                     \
	} while (0)

/* 0 when the GPU returned a + b for every element. */
static int run_on(int dev, const char *where, int n)
{
	int ok = 0;
	size_t bytes = (size_t)n * sizeof(float);
	float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
	CUcontext ctx = NULL;
	CUmodule mod = NULL;
	CUdeviceptr da = 0, db = 0, dc = 0;
	CUdevice d = 0;
	if (!a || !b || !c) {
		printf("  device %d: out of host memory\n", dev);
		goto out;
	}
	for (int i = 0; i < n; i++) {
		a[i] = (float)i;
		b[i] = (float)(2 * (n - i)) + 0.5f;
		c[i] = -1.0f;
	}
	char name[128] = "";
	STEP(cuDeviceGet(&d, dev), "cuDeviceGet");
	STEP(cuDeviceGetName(name, sizeof(name), d), "cuDeviceGetName");
	printf("device %d: %s%s%s\n", dev, name, where[0] ? ", at " : "", where);
	STEP(cuDevicePrimaryCtxRetain(&ctx, d), "cuDevicePrimaryCtxRetain");
	STEP(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
	STEP(cuModuleLoadData(&mod, vec_add_ptx), "loading the kernel (cuModuleLoadData)");
	CUfunction f;
	STEP(cuModuleGetFunction(&f, mod, "vec_add"), "cuModuleGetFunction");
	STEP(cuMemAlloc(&da, bytes), "cuMemAlloc");
	STEP(cuMemAlloc(&db, bytes), "cuMemAlloc");
	STEP(cuMemAlloc(&dc, bytes), "cuMemAlloc");
	STEP(cuMemcpyHtoD(da, a, bytes), "copying in (cuMemcpyHtoD)");
	STEP(cuMemcpyHtoD(db, b, bytes), "copying in (cuMemcpyHtoD)");
	printf("  in:     2 x %d floats (%.1f MiB) copied to the GPU\n", n,
	       2.0 * (double)bytes / (1 << 20));
	void *args[] = { &da, &db, &dc, &n };
	unsigned threads = 256, blocks = (unsigned)((n + 255) / 256);
	STEP(cuLaunchKernel(f, blocks, 1, 1, threads, 1, 1, 0, NULL, args, NULL),
	     "launching vec_add (cuLaunchKernel)");
	STEP(cuCtxSynchronize(), "running vec_add (cuCtxSynchronize)");
	/* DEMO_SECONDS=S: keep the GPU busy that long (the same sum again and
	 * again), so sessions sharing a GPU show in `rgpu top` */
	const char *sec = getenv("DEMO_SECONDS");
	if (sec && atof(sec) > 0) {
		struct timespec t0, t;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		long rounds = 0;
		do {
			for (int k = 0; k < 16; k++)
				STEP(cuLaunchKernel(f, blocks, 1, 1, threads, 1, 1, 0, NULL, args, NULL),
				     "launching vec_add (cuLaunchKernel)");
			STEP(cuCtxSynchronize(), "running vec_add (cuCtxSynchronize)");
			rounds++;
			clock_gettime(CLOCK_MONOTONIC, &t);
		} while ((double)(t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 < atof(sec));
		printf("  kept:   %ld more launches in %s s\n", rounds * 16, sec);
	}
	printf("  kernel: vec_add, %u blocks x %u threads: c = a + b\n", blocks, threads);
	STEP(cuMemcpyDtoH(c, dc, bytes), "copying out (cuMemcpyDtoH)");
	int bad = 0, first = -1;
	for (int i = 0; i < n; i++)
		if (c[i] != a[i] + b[i]) {
			if (first < 0)
				first = i;
			bad++;
		}
	if (bad) {
		printf("  out:    %d of %d sums WRONG (first: c[%d] = %g, expected %g)\n", bad, n,
		       first, (double)c[first], (double)(a[first] + b[first]));
		goto out;
	}
	printf("  out:    %d sums copied back, every one checked: correct\n", n);
	ok = 1;
out:
	if (dc)
		cuMemFree(dc);
	if (db)
		cuMemFree(db);
	if (da)
		cuMemFree(da);
	if (mod)
		cuModuleUnload(mod);
	if (ctx)
		cuDevicePrimaryCtxRelease(d);
	free(a);
	free(b);
	free(c);
	return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 1 << 20;
	if (n <= 0 || n > (1 << 28)) {
		fprintf(stderr, "usage: demo_job [N floats, 1..%d]\n", 1 << 28);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	CUresult rc = cuInit(0);
	if (rc != CUDA_SUCCESS) {
		printf("RESULT: FAILED: cuInit: %s (the client's log above says why)\n", errname(rc));
		return 1;
	}
	int count = 0;
	rc = cuDeviceGetCount(&count);
	if (rc != CUDA_SUCCESS || count == 0) {
		printf("RESULT: FAILED: no GPU (%s)\n", rc ? errname(rc) : "0 devices");
		return 1;
	}
	/* RGPU_SERVERS lists the devices in order: say where each one is. */
	const char *servers = getenv("RGPU_SERVERS");
	int good = 0;
	for (int dev = 0; dev < count; dev++) {
		char where[128] = "";
		if (servers) {
			const char *p = servers;
			for (int k = 0; k < dev && p; k++) {
				p = strchr(p, ',');
				if (p)
					p++;
			}
			if (p)
				snprintf(where, sizeof(where), "%.*s", (int)strcspn(p, ","), p);
		}
		if (run_on(dev, where, n) == 0)
			good++;
	}
	if (good == count)
		printf("RESULT: OK: %d remote GPU(s), each ran vec_add on %d floats, every result "
		       "correct\n", count, n);
	else
		printf("RESULT: FAILED: %d of %d GPU(s) did not return correct results\n",
		       count - good, count);
	return good == count ? 0 : 1;
}
