/*
 * Does a kernel run as fast on device memory mapped the way rgpud maps a
 * session's (daemon/mem/space.c: cuMemCreate with a POSIX file descriptor
 * handle, mapped at a 2 MiB-aligned address of a reserved range) as on
 * cuMemAlloc's?  NCCL's all-reduce through rgpud ran at local speed for
 * 64 MiB and at 83-87% for 256 MiB (2026-11-28): the loss grows with the
 * buffers, as a translation (TLB) cost would.
 *
 * For each size, three buffers of each kind on GPU 0, a streaming kernel
 * c = a + b (20 runs, timed with events: GB/s moved), then (two GPUs) the
 * same kernel on GPU 1 reading a and b over the link:
 *   alloc      cuMemAlloc (the local baseline)
 *   vmm        cuMemCreate (POSIX fd handle), 2 MiB-aligned, not 1 GiB-aligned
 *   vmm-none   the same without a shareable handle
 *   vmm-1g     the same as vmm, at a 1 GiB-aligned address
 *   vmm-peer   as vmm, access granted to GPU 1 as well
 *   vmm-2m     as vmm, made and mapped in 2 MiB pieces
 * Prints "MEMKIND kind MiB local|peer GB/s".
 *
 *   nvcc -O2 -arch=sm_90 -o memkind bench/memkind/memkind.cu -lcuda
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                        \
	do {                                                                         \
		int r_ = (int)(x);                                                   \
		if (r_) {                                                            \
			fprintf(stderr, "memkind: %s:%d: %s: %d\n", __FILE__, __LINE__, #x, r_); \
			exit(1);                                                     \
		}                                                                    \
	} while (0)

#define MIB (1ull << 20)
#define GIB (1ull << 30)

__global__ void add(const float4 *a, const float4 *b, float4 *c, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float4 x = a[i], y = b[i];
		c[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
	}
}

static int ngpu;

struct buf {
	CUdeviceptr p, res;
	size_t len, reslen;
	int vmm, pieces;
	CUmemGenericAllocationHandle h[512];
};

static void vmm_alloc(struct buf *b, size_t len, int fd, int align1g, int peer, int piece2m)
{
	memset(b, 0, sizeof(*b));
	b->len = len;
	b->vmm = 1;
	/* a range with room to put the buffer 2 MiB past a 1 GiB boundary
	 * (or on it) */
	b->reslen = len + 2 * GIB;
	CK(cuMemAddressReserve(&b->res, b->reslen, GIB, 0, 0));
	CUdeviceptr at = (b->res + GIB - 1) / GIB * GIB;
	b->p = align1g ? at : at + 2 * MIB;
	CUmemAllocationProp prop = {};
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	prop.requestedHandleTypes = fd ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
	size_t step = piece2m ? 2 * MIB : len;
	b->pieces = (int)(len / step);
	if (b->pieces > 512) {
		fprintf(stderr, "memkind: too many pieces\n");
		exit(1);
	}
	for (int i = 0; i < b->pieces; i++) {
		CK(cuMemCreate(&b->h[i], step, &prop, 0));
		CK(cuMemMap(b->p + i * step, step, 0, b->h[i], 0));
	}
	CUmemAccessDesc acc[2] = {};
	acc[0].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	acc[0].location.id = 0;
	acc[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	acc[1] = acc[0];
	acc[1].location.id = 1;
	CK(cuMemSetAccess(b->p, len, acc, peer && ngpu > 1 ? 2 : 1));
}

static void buf_free(struct buf *b)
{
	if (!b->vmm) {
		CK(cuMemFree(b->p));
		return;
	}
	CK(cuMemUnmap(b->p, b->len));
	for (int i = 0; i < b->pieces; i++)
		CK(cuMemRelease(b->h[i]));
	CK(cuMemAddressFree(b->res, b->reslen));
}

/* GB/s of c = a + b on device dev (a, b read, c written) */
static double run(int dev, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, size_t len)
{
	CK(cudaSetDevice(dev));
	size_t n = len / sizeof(float4);
	cudaEvent_t e0, e1;
	CK(cudaEventCreate(&e0));
	CK(cudaEventCreate(&e1));
	int sms = 0;
	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
	add<<<sms * 8, 256>>>((float4 *)a, (float4 *)b, (float4 *)c, n);
	CK(cudaEventRecord(e0));
	const int reps = 20;
	for (int i = 0; i < reps; i++)
		add<<<sms * 8, 256>>>((float4 *)a, (float4 *)b, (float4 *)c, n);
	CK(cudaEventRecord(e1));
	CK(cudaEventSynchronize(e1));
	CK(cudaGetLastError());
	float ms = 0;
	CK(cudaEventElapsedTime(&ms, e0, e1));
	CK(cudaEventDestroy(e0));
	CK(cudaEventDestroy(e1));
	return 3.0 * (double)len * reps / (ms / 1e3) / 1e9;
}

int main(void)
{
	CK(cudaGetDeviceCount(&ngpu));
	CK(cudaSetDevice(0));
	CK(cudaFree(0));
	if (ngpu > 1) {
		int can = 0;
		CK(cudaDeviceCanAccessPeer(&can, 1, 0));
		if (!can)
			ngpu = 1;
		CK(cudaSetDevice(1));
		CK(cudaFree(0));
		if (ngpu > 1)
			CK(cudaDeviceEnablePeerAccess(0, 0));
		CK(cudaSetDevice(0));
	}
	const char *kinds[] = { "alloc", "vmm", "vmm-none", "vmm-1g", "vmm-peer", "vmm-2m" };
	size_t sizes[] = { 64 * MIB, 256 * MIB, 1024 * MIB };
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
			size_t len = sizes[s];
			struct buf bb[3];
			CK(cudaSetDevice(0));
			for (int i = 0; i < 3; i++) {
				if (k == 0) {
					memset(&bb[i], 0, sizeof(bb[i]));
					CK(cuMemAlloc(&bb[i].p, len));
				} else {
					vmm_alloc(&bb[i], len, k != 2, k == 3, k == 4 || k == 0, k == 5);
				}
				CK(cuMemsetD8(bb[i].p, 0, len));
			}
			double l = run(0, bb[0].p, bb[1].p, bb[2].p, len);
			printf("MEMKIND %-9s %5zu local %7.1f GB/s\n", kinds[k], len / MIB, l);
			if (ngpu > 1 && (k == 0 || k == 4)) {
				/* GPU 1 reads a and b over the link, writes c on GPU 0 */
				double p = run(1, bb[0].p, bb[1].p, bb[2].p, len);
				printf("MEMKIND %-9s %5zu peer  %7.1f GB/s\n", kinds[k], len / MIB, p);
			}
			CK(cudaSetDevice(0));
			CK(cudaDeviceSynchronize());
			for (int i = 0; i < 3; i++)
				buf_free(&bb[i]);
		}
	}
	return 0;
}
