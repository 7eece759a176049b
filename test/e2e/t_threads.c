/* Many threads on one connection (one context), each doing mixed calls:
 * allocations, copies of several sizes (multi-chunk ones included) with the
 * data checked, launches on its own stream, synchronisations, queries,
 * and managed memory incremented by each thread's kernels and read back on
 * the host while the other threads launch and synchronise (written on the
 * host only before the threads start: host writes while another thread's
 * kernel may run are not allowed on devices without concurrent managed
 * access).
 * All threads also look up the same kernels and their attributes at once:
 * each name must give one handle, each attribute one value.
 * T_THREADS (default 8), T_ITERS (default 12), T_MANAGED=0 leaves managed
 * memory out (under helgrind: another thread's acquire rewrites a region,
 * with the same bytes, while its owner reads it; that is the software
 * coherence's design, not a locking fault). */
#include "common.h"

#include <pthread.h>

static CUcontext ctx;
static CUmodule mod;
static int iters;
static int has_managed;

#define NAMES 3
static const char *const names[NAMES] = { "inc_i32", "fill_u32", "vec_add" };

#define MN 4096

struct tstate {
	int id;
	int *m; /* managed, MN ints, or NULL */
	CUfunction f[NAMES];
	int maxthreads[NAMES];
	pthread_t th;
};

static pthread_barrier_t start;

/* On a mismatch, says how far it goes (a race shows as a whole run of
 * another copy's data, not one element). */
static void check_ints(const int *got, size_t n, int base, int add, const char *what, int id,
		       int it)
{
	size_t first = n, last = 0, bad = 0;
	for (size_t i = 0; i < n; i++)
		if (got[i] != base + (int)i + add) {
			if (first == n)
				first = i;
			last = i;
			bad++;
		}
	if (bad)
		fail("thread %d iteration %d: %s[%zu] = %d, want %d (%zu of %zu elements wrong, "
		     "[%zu..%zu]; [%zu] = %d)",
		     id, it, what, first, got[first], base + (int)first + add, bad, n, first, last,
		     last, got[last]);
}

static void *worker(void *arg)
{
	struct tstate *t = arg;
	CK(cuCtxSetCurrent(ctx));
	pthread_barrier_wait(&start);
	/* all at once: the same names */
	for (int k = 0; k < NAMES; k++) {
		CK(cuModuleGetFunction(&t->f[k], mod, names[k]));
		CK(cuFuncGetAttribute(&t->maxthreads[k], CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
				      t->f[k]));
	}
	CUfunction finc = t->f[0];
	CUstream s;
	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	uint32_t seed = (uint32_t)t->id * 7919u + 1;
	for (int it = 0; it < iters; it++) {
		/* small to several chunks (4 MiB pieces over TCP) */
		size_t n;
		switch ((lcg(&seed) >> 8) % 4) {
		case 0: n = 1 + lcg(&seed) % 1000; break;
		case 1: n = 1000 + lcg(&seed) % 100000; break;
		case 2: n = 300000 + lcg(&seed) % 300000; break;
		default: n = (9u << 20) / 4 + lcg(&seed) % 1000; break;
		}
		size_t bytes = n * sizeof(int);
		int base = t->id * 1000000 + it * 1000;
		int *h = xmalloc(bytes), *back = xmalloc(bytes);
		for (size_t i = 0; i < n; i++)
			h[i] = base + (int)i;
		CUdeviceptr d;
		CK(cuMemAlloc(&d, bytes));
		CK(cuMemcpyHtoD(d, h, bytes));
		int nn = (int)n;
		void *args[] = { &d, &nn };
		launch1d(finc, (unsigned)n, s, args);
		launch1d(finc, (unsigned)n, s, args);
		/* queries while the stream may run */
		size_t fr = 0, tot = 0;
		CK(cuMemGetInfo(&fr, &tot));
		CHECK(tot > 0 && fr <= tot, "cuMemGetInfo: free %zu of %zu", fr, tot);
		CUresult q = cuStreamQuery(s);
		CHECK(q == CUDA_SUCCESS || q == CUDA_ERROR_NOT_READY, "cuStreamQuery: %s", cu_name(q));
		CK(cuStreamSynchronize(s));
		memset(back, 0, bytes);
		CK(cuMemcpyDtoH(back, d, bytes));
		check_ints(back, n, base, 2, "device data", t->id, it);
		/* an asynchronous round trip on the stream */
		launch1d(finc, (unsigned)n, s, args);
		memset(back, 0, bytes);
		CK(cuMemcpyDtoHAsync(back, d, bytes, s));
		CK(cuStreamSynchronize(s));
		check_ints(back, n, base, 3, "async data", t->id, it);
		CK(cuMemFree(d));
		if (t->m) {
			/* managed: this thread's kernel increments, the host reads */
			CUdeviceptr md = (CUdeviceptr)(uintptr_t)t->m;
			int mnn = MN;
			void *margs[] = { &md, &mnn };
			launch1d(finc, MN, s, margs);
			CK(cuStreamSynchronize(s));
			check_ints(t->m, MN, t->id * 1000000, it + 1, "managed data", t->id, it);
		}
		free(h);
		free(back);
	}
	CK(cuStreamDestroy(s));
	return NULL;
}

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	int nthreads = (int)env_long("T_THREADS", 8);
	iters = (int)env_long("T_ITERS", 12);
	if (nthreads < 2 || nthreads > 64)
		fail("T_THREADS=%d: expected 2 to 64", nthreads);
	ctx = primary_ctx(0, NULL);
	mod = load_test_module();
	struct tstate *t = calloc((size_t)nthreads, sizeof(*t));
	if (!t)
		fail("out of memory");
	has_managed = env_long("T_MANAGED", 1) != 0;
	for (int i = 0; i < nthreads && has_managed; i++) {
		CUdeviceptr md;
		CUresult rc = cuMemAllocManaged(&md, MN * sizeof(int), CU_MEM_ATTACH_GLOBAL);
		if (rc == CUDA_ERROR_NOT_SUPPORTED) {
			has_managed = 0;
			break;
		}
		CK(rc);
		t[i].m = (int *)(uintptr_t)md;
		for (int k = 0; k < MN; k++)
			t[i].m[k] = (i + 1) * 1000000 + k;
	}
	pthread_barrier_init(&start, NULL, (unsigned)nthreads);
	double t0 = now_ms();
	for (int i = 0; i < nthreads; i++) {
		t[i].id = i + 1;
		if (pthread_create(&t[i].th, NULL, worker, &t[i]))
			fail("pthread_create");
	}
	for (int i = 0; i < nthreads; i++)
		pthread_join(t[i].th, NULL);
	for (int i = 1; i < nthreads; i++)
		for (int k = 0; k < NAMES; k++) {
			CHECK(t[i].f[k] == t[0].f[k],
			      "threads 1 and %d got different handles for %s", i + 1, names[k]);
			CHECK(t[i].maxthreads[k] == t[0].maxthreads[k] && t[0].maxthreads[k] > 0,
			      "%s: max threads per block %d in thread %d, %d in thread 1", names[k],
			      t[i].maxthreads[k], i + 1, t[0].maxthreads[k]);
		}
	say("%d threads x %d iterations in %.0f ms%s", nthreads, iters, now_ms() - t0,
	    has_managed ? " (with managed memory)" : "");
	for (int i = 0; i < nthreads; i++)
		if (t[i].m)
			CK(cuMemFree((CUdeviceptr)(uintptr_t)t[i].m));
	CK(cuModuleUnload(mod));
	primary_ctx_release(0);
	free(t);
	say("PASS");
	return 0;
}
