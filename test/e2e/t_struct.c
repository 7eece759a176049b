/* Parameter layouts: a 32-byte struct by value (axpy_struct), and
 * double + int + char by value (scale_double).  Values are chosen so every
 * product and sum is exact: the result does not depend on FMA contraction. */
#include "common.h"

_Static_assert(sizeof(struct axpy_args) == 32, "struct axpy_args is 32 bytes");
_Static_assert(offsetof(struct axpy_args, x) == 8, "x at 8");
_Static_assert(offsetof(struct axpy_args, y) == 16, "y at 16");
_Static_assert(offsetof(struct axpy_args, n) == 24, "n at 24");
_Static_assert(offsetof(struct axpy_args, tag) == 28, "tag at 28");

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	primary_ctx(0, NULL);
	CUmodule mod = load_test_module();
	CUfunction faxpy = get_func(mod, "axpy_struct");
	CUfunction fscale = get_func(mod, "scale_double");

	const int n = 10007, used = 10000;
	size_t bytes = (size_t)n * sizeof(double);
	double *x = xmalloc(bytes), *y = xmalloc(bytes), *out = xmalloc(bytes), *ref = xmalloc(bytes);
	for (int i = 0; i < n; i++) {
		x[i] = (double)(i % 1000) * 0.25 - 100.0;
		y[i] = (double)(i % 37) * 0.5;
	}
	CUdeviceptr dx, dy;
	CK(cuMemAlloc(&dx, bytes));
	CK(cuMemAlloc(&dy, bytes));
	CK(cuMemcpyHtoD(dx, x, bytes));
	CK(cuMemcpyHtoD(dy, y, bytes));

	/* y[i] += a * x[i] + tag, for i < used; the rest untouched */
	struct axpy_args aa;
	memset(&aa, 0, sizeof(aa));
	aa.a = -2.5;
	aa.x = (const double *)(uintptr_t)dx;
	aa.y = (double *)(uintptr_t)dy;
	aa.n = used;
	aa.tag = 3;
	void *args[] = { &aa };
	launch1d(faxpy, (unsigned)n, NULL, args);
	CK(cuCtxSynchronize());
	CK(cuMemcpyDtoH(out, dy, bytes));
	for (int i = 0; i < n; i++) {
		ref[i] = i < used ? y[i] + (aa.a * x[i] + (double)aa.tag) : y[i];
		if (memcmp(&out[i], &ref[i], sizeof(double)) != 0)
			fail("axpy_struct: y[%d] = %.17g, want %.17g (a=%g x=%g y=%g tag=%d)", i,
			     out[i], ref[i], aa.a, x[i], y[i], aa.tag);
	}
	result("axpy_struct", out, bytes);
	say("axpy_struct ok");

	/* x[i] = x[i] * s + bias with a negative char */
	double s = -1.5;
	int cnt = used;
	char bias = -7;
	void *args2[] = { &dx, &s, &cnt, &bias };
	launch1d(fscale, (unsigned)n, NULL, args2);
	CK(cuCtxSynchronize());
	CK(cuMemcpyDtoH(out, dx, bytes));
	for (int i = 0; i < n; i++) {
		double want = i < used ? x[i] * s + (double)bias : x[i];
		if (memcmp(&out[i], &want, sizeof(double)) != 0)
			fail("scale_double: x[%d] = %.17g, want %.17g", i, out[i], want);
	}
	result("scale_double", out, bytes);
	say("scale_double ok");

	/* and with a positive char and a non-integral scale */
	s = 0.125;
	bias = 100;
	CK(cuMemcpyHtoD(dx, x, bytes));
	launch1d(fscale, (unsigned)n, NULL, args2);
	CK(cuCtxSynchronize());
	CK(cuMemcpyDtoH(out, dx, bytes));
	for (int i = 0; i < n; i++) {
		double want = i < used ? x[i] * s + (double)bias : x[i];
		if (memcmp(&out[i], &want, sizeof(double)) != 0)
			fail("scale_double(0.125, 100): x[%d] = %.17g, want %.17g", i, out[i], want);
	}

	CK(cuMemFree(dx));
	CK(cuMemFree(dy));
	CK(cuModuleUnload(mod));
	primary_ctx_release(0);
	free(x); free(y); free(out); free(ref);
	say("PASS");
	return 0;
}
