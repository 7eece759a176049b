/*
 * How a GPU-to-GPU copy of a session's memory runs fastest between two
 * GPUs of one host, as a migration's restore makes it: the source's
 * physical memory (VMM, exported) mapped in the target worker, the
 * target's memory made there.  Compares, on 2 GiB in 64 MiB pieces:
 *   peer   cuMemcpyPeerAsync between two cuMemAlloc buffers (the baseline
 *          PyTorch's copy_ and p2p_bw.py measure)
 *   pull   cuMemcpyDtoDAsync issued on the target GPU (what restore did)
 *   push   the same issued on the source GPU
 * each on 1 and 4 streams.  Prints "COPY mode streams GB/s".
 *
 *   gcc -I/usr/local/cuda/include bench/migrate/peer_copy.c -ldl -o peer_copy
 *   LD_LIBRARY_PATH=/usr/local/nvidia/lib64 ./peer_copy
 */
#define _POSIX_C_SOURCE 200809L
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define TOTAL (2ull << 30)
#define PIECE (64ull << 20)
#define REPS 10

static void *lib;
static void *sym(const char *n)
{
	void *p = dlsym(lib, n);
	if (!p) {
		fprintf(stderr, "peer_copy: no %s\n", n);
		exit(2);
	}
	return p;
}
#define F(name, ...) static CUresult (*name)(__VA_ARGS__)
F(p_cuInit, unsigned);
F(p_cuDevicePrimaryCtxRetain, CUcontext *, CUdevice);
F(p_cuCtxSetCurrent, CUcontext);
F(p_cuMemAlloc, CUdeviceptr *, size_t);
F(p_cuMemcpyPeerAsync, CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream);
F(p_cuMemcpyDtoDAsync, CUdeviceptr, CUdeviceptr, size_t, CUstream);
F(p_cuStreamCreate, CUstream *, unsigned);
F(p_cuStreamSynchronize, CUstream);
F(p_cuCtxSynchronize, void);
F(p_cuMemCreate, CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
F(p_cuMemAddressReserve, CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
F(p_cuMemMap, CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
F(p_cuMemSetAccess, CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
F(p_cuCtxEnablePeerAccess, CUcontext, unsigned);

#define CK(x)                                                                  \
	do {                                                                   \
		CUresult r_ = (x);                                             \
		if (r_) {                                                      \
			fprintf(stderr, "peer_copy: %s: %d\n", #x, (int)r_);   \
			exit(1);                                               \
		}                                                              \
	} while (0)

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static CUdeviceptr vmm(int dev)
{
	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				     .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev } };
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;
	CK(p_cuMemCreate(&h, TOTAL, &prop, 0));
	CK(p_cuMemAddressReserve(&va, TOTAL, 2 << 20, 0, 0));
	CK(p_cuMemMap(va, TOTAL, 0, h, 0));
	CUmemAccessDesc acc[2];
	for (int d = 0; d < 2; d++)
		acc[d] = (CUmemAccessDesc){ .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = d },
					    .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CK(p_cuMemSetAccess(va, TOTAL, acc, 2));
	return va;
}

/* one pass: TOTAL bytes in PIECE copies over n streams of ctx; GB/s */
static double pass(int mode, CUcontext on, CUstream *st, int n, CUdeviceptr dst, CUdeviceptr src,
		   CUcontext dctx, CUcontext sctx)
{
	CK(p_cuCtxSetCurrent(on));
	double best = 0;
	for (int rep = 0; rep < REPS + 1; rep++) {
		double t0 = now();
		for (unsigned long long off = 0, i = 0; off < TOTAL; off += PIECE, i++) {
			if (mode == 0)
				CK(p_cuMemcpyPeerAsync(dst + off, dctx, src + off, sctx, PIECE, st[i % n]));
			else
				CK(p_cuMemcpyDtoDAsync(dst + off, src + off, PIECE, st[i % n]));
		}
		for (int k = 0; k < n; k++)
			CK(p_cuStreamSynchronize(st[k]));
		double bw = TOTAL / (now() - t0) / 1e9;
		if (rep && bw > best) /* (the first pass warms up) */
			best = bw;
	}
	return best;
}

int main(void)
{
	if (!(lib = dlopen("libcuda.so.1", RTLD_NOW))) {
		fprintf(stderr, "peer_copy: %s\n", dlerror());
		return 2;
	}
	*(void **)&p_cuInit = sym("cuInit");
	*(void **)&p_cuDevicePrimaryCtxRetain = sym("cuDevicePrimaryCtxRetain");
	*(void **)&p_cuCtxSetCurrent = sym("cuCtxSetCurrent");
	*(void **)&p_cuMemAlloc = sym("cuMemAlloc_v2");
	*(void **)&p_cuMemcpyPeerAsync = sym("cuMemcpyPeerAsync");
	*(void **)&p_cuMemcpyDtoDAsync = sym("cuMemcpyDtoDAsync_v2");
	*(void **)&p_cuStreamCreate = sym("cuStreamCreate");
	*(void **)&p_cuStreamSynchronize = sym("cuStreamSynchronize");
	*(void **)&p_cuCtxSynchronize = sym("cuCtxSynchronize");
	*(void **)&p_cuMemCreate = sym("cuMemCreate");
	*(void **)&p_cuMemAddressReserve = sym("cuMemAddressReserve");
	*(void **)&p_cuMemMap = sym("cuMemMap");
	*(void **)&p_cuMemSetAccess = sym("cuMemSetAccess");
	*(void **)&p_cuCtxEnablePeerAccess = sym("cuCtxEnablePeerAccess");
	CK(p_cuInit(0));
	CUcontext c[2];
	CUstream st[2][4];
	CUdeviceptr a[2], v[2];
	for (int d = 0; d < 2; d++) {
		CK(p_cuDevicePrimaryCtxRetain(&c[d], d));
		CK(p_cuCtxSetCurrent(c[d]));
		for (int k = 0; k < 4; k++)
			CK(p_cuStreamCreate(&st[d][k], CU_STREAM_NON_BLOCKING));
		CK(p_cuMemAlloc(&a[d], TOTAL));
		v[d] = vmm(d);
	}
	for (int d = 0; d < 2; d++) {
		CK(p_cuCtxSetCurrent(c[d]));
		CUresult r = p_cuCtxEnablePeerAccess(c[1 - d], 0);
		if (r && r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
			CK(r);
	}
	/* GPU 0 is the source, GPU 1 the target */
	for (int n = 1; n <= 4; n *= 4) {
		printf("COPY peer-on-source %d %.1f\n", n, pass(0, c[0], st[0], n, a[1], a[0], c[1], c[0]));
		printf("COPY peer-on-target %d %.1f\n", n, pass(0, c[1], st[1], n, a[1], a[0], c[1], c[0]));
		printf("COPY pull %d %.1f\n", n, pass(1, c[1], st[1], n, v[1], v[0], c[1], c[0]));
		printf("COPY push %d %.1f\n", n, pass(1, c[0], st[0], n, v[1], v[0], c[1], c[0]));
		fflush(stdout);
	}
	return 0;
}
