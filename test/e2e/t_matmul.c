/* matmul_tiled for n = 256 and n = 33 (not a multiple of the tile):
 * exact match with a host fmaf in k order. */
#include "common.h"

#include <math.h>

static void run(CUfunction f, int n, uint32_t seed)
{
	size_t bytes = (size_t)n * n * sizeof(float);
	float *A = xmalloc(bytes), *B = xmalloc(bytes), *C = xmalloc(bytes), *R = xmalloc(bytes);
	for (int i = 0; i < n * n; i++) {
		A[i] = lcg_float(&seed) * 3.0f + 1e-3f * (float)(i % 7);
		B[i] = lcg_float(&seed) / 7.0f;
	}
	for (int r = 0; r < n; r++)
		for (int c = 0; c < n; c++) {
			float acc = 0.0f;
			for (int k = 0; k < n; k++)
				acc = fmaf(A[r * n + k], B[k * n + c], acc);
			R[r * n + c] = acc;
		}
	CUdeviceptr dA, dB, dC;
	CK(cuMemAlloc(&dA, bytes));
	CK(cuMemAlloc(&dB, bytes));
	CK(cuMemAlloc(&dC, bytes));
	CK(cuMemcpyHtoD(dA, A, bytes));
	CK(cuMemcpyHtoD(dB, B, bytes));
	CK(cuMemsetD8(dC, 0xff, bytes));
	void *args[] = { &dA, &dB, &dC, &n };
	unsigned g = (unsigned)(n + MATMUL_TILE - 1) / MATMUL_TILE;
	CK(cuLaunchKernel(f, g, g, 1, MATMUL_TILE, MATMUL_TILE, 1, 0, NULL, args, NULL));
	CK(cuCtxSynchronize());
	CK(cuMemcpyDtoH(C, dC, bytes));
	int bad = 0;
	for (int i = 0; i < n * n; i++)
		if (memcmp(&C[i], &R[i], sizeof(float)) != 0) {
			if (bad < 5)
				fprintf(stderr, "n=%d C[%d][%d] = %.9g (0x%08x), want %.9g\n", n, i / n,
					i % n, C[i], *(uint32_t *)&C[i], R[i]);
			bad++;
		}
	CHECK(bad == 0, "n=%d: %d of %d elements differ from the host fmaf reference", n, bad, n * n);
	char what[32];
	snprintf(what, sizeof(what), "matmul%d", n);
	result(what, C, bytes);
	say("n=%d ok", n);
	CK(cuMemFree(dA));
	CK(cuMemFree(dB));
	CK(cuMemFree(dC));
	free(A); free(B); free(C); free(R);
}

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	primary_ctx(0, NULL);
	CUmodule mod = load_test_module();
	CUfunction f = get_func(mod, "matmul_tiled");
	run(f, 256, 7);
	run(f, 33, 11);
	run(f, 1, 13);
	CK(cuModuleUnload(mod));
	primary_ctx_release(0);
	say("PASS");
	return 0;
}
