#!/usr/bin/env python3
"""CuPy results (elementwise, reductions, matmul, FFT, sort, a raw kernel),
with the default memory pool and with the stream-ordered pool
(cupy.cuda.MemoryAsyncPool: cuMemAllocAsync); RESULT lines are compared
between a direct run and one through rgpu."""
import hashlib
import sys

import cupy as cp
import numpy as np


def digest(a):
    return hashlib.sha256(np.ascontiguousarray(cp.asnumpy(a)).tobytes()).hexdigest()[:16]


def run(tag):
    rng = np.random.default_rng(1)
    a = cp.asarray(rng.standard_normal((512, 512)).astype(np.float32))
    b = cp.asarray(rng.standard_normal((512, 512)).astype(np.float32))
    print(f"RESULT {tag}_elementwise {digest(cp.sin(a) * b + 3)}")
    print(f"RESULT {tag}_sum {float(cp.sum(a, dtype=cp.float64)):.6f}")
    print(f"RESULT {tag}_matmul {digest(a @ b)}")
    print(f"RESULT {tag}_fft {digest(cp.fft.fft(a[0].astype(cp.complex64)))}")
    print(f"RESULT {tag}_sort {digest(cp.sort(a.ravel()))}")
    k = cp.RawKernel(r'''extern "C" __global__ void twice(const float *x, float *y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 2 * x[i] + 1; }''', "twice")
    y = cp.empty_like(a)
    k(((a.size + 255) // 256,), (256,), (a, y, cp.int32(a.size)))
    print(f"RESULT {tag}_rawkernel {digest(y)}")
    cp.cuda.Stream.null.synchronize()


run("default_pool")
cp.cuda.set_allocator(cp.cuda.MemoryAsyncPool().malloc)
run("async_pool")
print("INFO cupy", cp.__version__)
