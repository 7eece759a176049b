/* A synthetic tenant for the scheduler's tests (run-sched.sh): it launches
 * busy_wait_ns kernels of T_KERNEL_US microseconds for T_SECONDS seconds,
 * either back to back with a synchronisation every T_DEPTH launches
 * (T_MODE=async, the default) or one at a time, each waited for
 * (T_MODE=sync: its latencies are measured).  It checks that its kernels
 * really ran (inc_i32 after each batch) and prints
 *
 *   TENANT kernels=N elapsed_ms=T p50_us=A p99_us=B
 *
 * T_FAULT_MS=M: instead, after M ms it launches illegal_write at a bad
 * address and expects its context to fail (CUDA_ERROR_ILLEGAL_ADDRESS).
 * T_BLOCKS=B: its busy kernels have B blocks of 32 threads (default 1;
 * under MPS the scheduler weighs the part of the GPU a grid needs).
 * T_OTHER_CTX=1: it makes a context on its second GPU as well, and runs
 * nothing there. */
#include "common.h"

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	(void)argc;
	e2e_init(argv[0]);
	long kus = env_long("T_KERNEL_US", 1000);
	double secs = (double)env_long("T_SECONDS_MS", 2000) / 1e3;
	long depth = env_long("T_DEPTH", 8);
	long fault_ms = env_long("T_FAULT_MS", 0);
	unsigned blocks = (unsigned)env_long("T_BLOCKS", 1);
	const char *mode = getenv("T_MODE");
	int sync = mode && !strcmp(mode, "sync");
	/* T_OTHER_CTX=1: a context on its second GPU too, where it runs
	 * nothing (as each rank of a job does to enable peer access) */
	if (env_long("T_OTHER_CTX", 0)) {
		int ndev = 0;
		CK(cuInit(0));
		CK(cuDeviceGetCount(&ndev));
		CHECK(ndev >= 2, "T_OTHER_CTX needs two GPUs, the client has %d", ndev);
		primary_ctx(1, NULL);
		CUdeviceptr o;
		CK(cuMemAlloc(&o, 4096)); /* (the server makes the context by now) */
		CK(cuMemFree(o));
	}
	primary_ctx(0, NULL);
	CUmodule mod = load_test_module();
	CUfunction fbusy = get_func(mod, "busy_wait_ns");
	CUfunction finc = get_func(mod, "inc_i32");
	CUfunction fbad = get_func(mod, "illegal_write");
	CUdeviceptr d;
	CK(cuMemAlloc(&d, sizeof(int)));
	CK(cuMemsetD32(d, 0, 1));
	unsigned long long ns = (unsigned long long)kus * 1000ull;
	void *pb[] = { &ns };
	int one = 1;
	void *pi[] = { &d, &one };
	size_t cap = 1 << 16, nlat = 0;
	double *lat = xmalloc(cap * sizeof(*lat));
	long kernels = 0, incs = 0;
	double t0 = now_ms(), end = t0 + secs * 1e3;
	while (now_ms() < end) {
		if (fault_ms && now_ms() - t0 >= (double)fault_ms) {
			CUdeviceptr bad = 16;
			void *pf[] = { &bad };
			CK(cuLaunchKernel(fbad, 1, 1, 1, 1, 1, 1, 0, NULL, pf, NULL));
			CUresult rc = cuCtxSynchronize();
			CHECK(rc == CUDA_ERROR_ILLEGAL_ADDRESS, "the fault gave %s", cu_name(rc));
			say("faulted as asked: %s", cu_name(rc));
			printf("TENANT faulted=1\n");
			return 0;
		}
		if (sync) {
			double a = now_ms();
			CK(cuLaunchKernel(fbusy, blocks, 1, 1, 32, 1, 1, 0, NULL, pb, NULL));
			CK(cuCtxSynchronize());
			if (nlat < cap)
				lat[nlat++] = (now_ms() - a) * 1e3;
			kernels++;
			continue;
		}
		for (long i = 0; i < depth; i++)
			CK(cuLaunchKernel(fbusy, blocks, 1, 1, 32, 1, 1, 0, NULL, pb, NULL));
		CK(cuLaunchKernel(finc, 1, 1, 1, 1, 1, 1, 0, NULL, pi, NULL));
		incs++;
		CK(cuCtxSynchronize());
		kernels += depth;
	}
	double el = now_ms() - t0;
	int v = 0;
	CK(cuMemcpyDtoH(&v, d, sizeof(v)));
	CHECK(v == incs, "the counter says %d, %ld increments were launched", v, incs);
	double p50 = 0, p99 = 0;
	if (nlat) {
		qsort(lat, nlat, sizeof(*lat), cmp_d);
		p50 = lat[nlat / 2];
		p99 = lat[(size_t)(0.99 * (double)(nlat - 1))];
	}
	printf("TENANT kernels=%ld elapsed_ms=%.1f p50_us=%.1f p99_us=%.1f\n", kernels, el, p50, p99);
	free(lat);
	CK(cuMemFree(d));
	return 0;
}
