#include "compat.h"
/* templated kernels over types and functors, a templated block size */
template <typename T> struct Axpy { T a; __device__ T operator()(T x, T y) const { return a * x + y; } };
template <typename T> struct MaxOp { __device__ T operator()(T x, T y) const { return x > y ? x : y; } };
template <typename T, typename Op, int BS>
__global__ void apply(const T *x, const T *y, T *z, int n, Op op)
{ int i = blockIdx.x * BS + threadIdx.x; if (i < n) z[i] = op(x[i], y[i]); }
template <typename T, typename Op, int BS>
uint64_t run(const char *name, Op op, T (*host)(T, T, Op), int n)
{
	T *x = (T *)malloc(n * sizeof(T)), *y = (T *)malloc(n * sizeof(T)), *z = (T *)malloc(n * sizeof(T));
	uint32_t s = 5; for (int i = 0; i < n; i++) { x[i] = (T)(lcg(&s) % 1000) / (T)8; y[i] = (T)(lcg(&s) % 1000) / (T)4; }
	T *dx, *dy, *dz;
	CK(cudaMalloc(&dx, n * sizeof(T))); CK(cudaMalloc(&dy, n * sizeof(T))); CK(cudaMalloc(&dz, n * sizeof(T)));
	CK(cudaMemcpy(dx, x, n * sizeof(T), cudaMemcpyHostToDevice)); CK(cudaMemcpy(dy, y, n * sizeof(T), cudaMemcpyHostToDevice));
	apply<T, Op, BS><<<(n + BS - 1) / BS, BS>>>(dx, dy, dz, n, op); CKK();
	CK(cudaMemcpy(z, dz, n * sizeof(T), cudaMemcpyDeviceToHost));
	for (int i = 0; i < n; i++) if (z[i] != host(x[i], y[i], op)) { g_fail = 1; printf("INFO %s wrong at %d\n", name, i); break; }
	result_hash(name, z, n * sizeof(T));
	cudaFree(dx); cudaFree(dy); cudaFree(dz); free(x); free(y); free(z);
	return 0;
}
template <typename T> T haxpy(T x, T y, Axpy<T> o) { return o.a * x + y; }
template <typename T> T hmax(T x, T y, MaxOp<T>) { return x > y ? x : y; }
int main()
{
	run<int, Axpy<int>, 128>("tmpl_int_axpy", Axpy<int>{3}, haxpy<int>, 100003);
	run<float, Axpy<float>, 256>("tmpl_float_axpy", Axpy<float>{0.5f}, haxpy<float>, 100003);
	run<double, Axpy<double>, 512>("tmpl_double_axpy", Axpy<double>{1.25}, haxpy<double>, 100003);
	run<double, MaxOp<double>, 64>("tmpl_double_max", MaxOp<double>{}, hmax<double>, 100003);
	run<long long, MaxOp<long long>, 1024>("tmpl_ll_max", MaxOp<long long>{}, hmax<long long>, 100003);
	return finish();
}
