/* The execution control API of CUDA 1-3 (deprecated, still in cuda.h):
 *  - vec_add with its parameters set by cuParamSetv/cuParamSeti and
 *    cuParamSetSize, its block by cuFuncSetBlockShape, some dynamic shared
 *    memory by cuFuncSetSharedSize, launched by cuLaunchGrid;
 *  - fill_u32 by cuLaunchGridAsync on a stream, on a 2D grid;
 *  - inc_i32 by cuLaunch (one block);
 *  - the parameters copied at the launch: set again right after it, the
 *    queued launch keeps the old ones;
 *  - whether a bad block shape, bytes past 4 KiB and a too large size are
 *    taken is the driver's to say (a RESULT line, compared on a GPU).
 * Exits non-zero on any mismatch. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include "common.h"

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	primary_ctx(0, NULL);
	CUmodule mod = load_test_module();

	/* vec_add(const float *a, const float *b, float *c, int n) */
	const int n = 3000;
	float *a = xmalloc(n * sizeof(float)), *b = xmalloc(n * sizeof(float)), *c = xmalloc(n * sizeof(float));
	for (int i = 0; i < n; i++) {
		a[i] = (float)i * 0.25f;
		b[i] = 1000.0f - (float)i;
	}
	CUdeviceptr da, db, dc;
	CK(cuMemAlloc(&da, n * sizeof(float)));
	CK(cuMemAlloc(&db, n * sizeof(float)));
	CK(cuMemAlloc(&dc, n * sizeof(float)));
	CK(cuMemcpyHtoD(da, a, n * sizeof(float)));
	CK(cuMemcpyHtoD(db, b, n * sizeof(float)));
	CK(cuMemsetD32(dc, 0, n));
	CUfunction add = get_func(mod, "vec_add");
	CK(cuFuncSetBlockShape(add, 128, 1, 1));
	CK(cuFuncSetSharedSize(add, 256));
	CK(cuParamSetv(add, 0, &da, sizeof(da)));
	CK(cuParamSetv(add, 8, &db, sizeof(db)));
	CK(cuParamSetv(add, 16, &dc, sizeof(dc)));
	CK(cuParamSeti(add, 24, (unsigned)n));
	CK(cuParamSetSize(add, 28));
	CK(cuLaunchGrid(add, (n + 127) / 128, 1));
	/* set again at once: the launch queued keeps the bytes it had */
	CK(cuParamSeti(add, 24, 1));
	CK(cuCtxSynchronize());
	CK(cuMemcpyDtoH(c, dc, n * sizeof(float)));
	for (int i = 0; i < n; i++)
		CHECK(c[i] == a[i] + b[i], "c[%d] = %g, want %g", i, c[i], a[i] + b[i]);
	say("cuLaunchGrid: vec_add over %d elements", n);

	/* fill_u32(unsigned *p, unsigned v, unsigned long long n) on a stream */
	const unsigned long long m = 4 * 256;
	CUdeviceptr dp;
	CK(cuMemAlloc(&dp, m * sizeof(unsigned)));
	CK(cuMemsetD32(dp, 0, m));
	CUfunction fill = get_func(mod, "fill_u32");
	CUstream s;
	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CK(cuFuncSetBlockShape(fill, 256, 1, 1));
	CK(cuParamSetv(fill, 0, &dp, sizeof(dp)));
	CK(cuParamSeti(fill, 8, 0xfeedu));
	CK(cuParamSetv(fill, 16, (void *)&m, sizeof(m)));
	CK(cuParamSetSize(fill, 24));
	CK(cuLaunchGridAsync(fill, 4, 2, s));
	CK(cuStreamSynchronize(s));
	unsigned *u = xmalloc(m * sizeof(unsigned));
	CK(cuMemcpyDtoH(u, dp, m * sizeof(unsigned)));
	for (unsigned long long i = 0; i < m; i++)
		CHECK(u[i] == 0xfeedu, "p[%llu] = %#x after cuLaunchGridAsync", i, u[i]);
	say("cuLaunchGridAsync: fill_u32 on a 4 x 2 grid");

	/* inc_i32(int *p, int n): one block */
	int k[64], got[64];
	for (int i = 0; i < 64; i++)
		k[i] = i * 3;
	CUdeviceptr dk;
	CK(cuMemAlloc(&dk, sizeof(k)));
	CK(cuMemcpyHtoD(dk, k, sizeof(k)));
	CUfunction inc = get_func(mod, "inc_i32");
	CK(cuFuncSetBlockShape(inc, 64, 1, 1));
	CK(cuParamSetv(inc, 0, &dk, sizeof(dk)));
	CK(cuParamSeti(inc, 8, 64));
	CK(cuParamSetSize(inc, 12));
	CK(cuLaunch(inc));
	CK(cuLaunch(inc));
	CK(cuCtxSynchronize());
	CK(cuMemcpyDtoH(got, dk, sizeof(got)));
	for (int i = 0; i < 64; i++)
		CHECK(got[i] == k[i] + 2, "k[%d] = %d after two cuLaunch, want %d", i, got[i], k[i] + 2);
	say("cuLaunch: inc_i32 twice");

	/* the edges: taken or not, as the driver says */
	int taken[3];
	taken[0] = cuFuncSetBlockShape(inc, 0, 1, 1) == CUDA_SUCCESS;
	unsigned long long junk = 0;
	taken[1] = cuParamSetv(inc, 4096, &junk, sizeof(junk)) == CUDA_SUCCESS;
	taken[2] = cuParamSetSize(inc, 8192) == CUDA_SUCCESS;
	say("a 0-thread block shape %s, bytes past 4 KiB %s, an 8 KiB size %s", taken[0] ? "taken" : "refused",
	    taken[1] ? "taken" : "refused", taken[2] ? "taken" : "refused");
	result("legacy_launch_edges", taken, sizeof(taken));
	result("legacy_launch", c, n * sizeof(float));

	CK(cuStreamDestroy(s));
	CK(cuMemFree(da));
	CK(cuMemFree(db));
	CK(cuMemFree(dc));
	CK(cuMemFree(dp));
	CK(cuMemFree(dk));
	CK(cuModuleUnload(mod));
	free(a);
	free(b);
	free(c);
	free(u);
	say("PASS");
	return 0;
}
