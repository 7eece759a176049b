/* Tensor maps (TMA descriptors, compute capability 9 on): encoded by the
 * driver where the GPU is; through rgpu they come back as the driver made
 * them.  Checks that could fail on either path:
 *  - a valid 2-D tiled map encodes, is not all zero, and encodes the same
 *    twice; one for another address differs;
 *  - replacing the address and putting it back gives the original bytes;
 *  - rank 6, rank 0, a misaligned global address, a zero box, a stride
 *    not a multiple of 16 are refused with CUDA_ERROR_INVALID_VALUE;
 *  - rank 1 with no strides is encoded or refused, never a crash;
 *  - an im2col map of rank 4 encodes. */
#include "common.h"

static int zero(const CUtensorMap *m)
{
	for (int i = 0; i < CU_TENSOR_MAP_NUM_QWORDS; i++)
		if (m->opaque[i])
			return 0;
	return 1;
}

static CUresult tiled(CUtensorMap *m, cuuint32_t rank, CUdeviceptr addr, const cuuint64_t *dim,
		      const cuuint64_t *stride, const cuuint32_t *box)
{
	static const cuuint32_t estride[5] = { 1, 1, 1, 1, 1 };
	return cuTensorMapEncodeTiled(m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, rank, (void *)(uintptr_t)addr,
				      dim, stride, box, estride, CU_TENSOR_MAP_INTERLEAVE_NONE,
				      rank > 1 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
				      CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
				      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

int main(int argc, char **argv)
{
	(void)argc;
	e2e_init(argv[0]);
	CUdevice dev;
	primary_ctx(0, &dev);
	int major;
	CK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
	if (major < 9)
		skip("compute capability %d: no tensor maps", major);
	CUdeviceptr d;
	CK(cuMemAlloc(&d, 4 << 20));
	const cuuint64_t dim[5] = { 1024, 512, 2, 2, 2 };
	const cuuint64_t stride[4] = { 4096, 4096 * 512, 4096 * 512 * 2, 4096 * 512 * 4 };
	const cuuint32_t box[5] = { 32, 32, 1, 1, 1 };
	CUtensorMap a, b, c;

	CK(tiled(&a, 2, d, dim, stride, box));
	CHECK(!zero(&a), "a valid map encodes to zeros");
	CK(tiled(&b, 2, d, dim, stride, box));
	CHECK(!memcmp(&a, &b, sizeof(a)), "the same map encodes differently twice");
	CK(tiled(&c, 2, d + 4096, dim, stride, box));
	CHECK(memcmp(&a, &c, sizeof(a)) != 0, "maps of two addresses are the same");
	say("a 2-D tiled map encodes, the same twice, another for another address");

	CK(cuTensorMapReplaceAddress(&b, (void *)(uintptr_t)(d + 8192)));
	CHECK(memcmp(&a, &b, sizeof(a)) != 0, "replacing the address changed nothing");
	CK(cuTensorMapReplaceAddress(&b, (void *)(uintptr_t)d));
	CHECK(!memcmp(&a, &b, sizeof(a)), "putting the address back does not give the original");
	say("cuTensorMapReplaceAddress changes the address and back");

	static const struct {
		cuuint32_t rank;
		CUdeviceptr off;
		int zero_box, odd_stride;
		const char *what;
	} bad[] = {
		{ 6, 0, 0, 0, "rank 6" },
		{ 0, 0, 0, 0, "rank 0" },
		{ 2, 4, 0, 0, "a global address not 16-byte aligned" },
		{ 2, 0, 1, 0, "a zero box" },
		{ 2, 0, 0, 1, "a stride not a multiple of 16" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cuuint32_t bx[5] = { 32, 32, 1, 1, 1 };
		cuuint64_t st[4] = { 4096, 4096 * 512, 4096 * 512 * 2, 4096 * 512 * 4 };
		if (bad[i].zero_box)
			bx[1] = 0;
		if (bad[i].odd_stride)
			st[0] = 4100;
		CUresult rc = tiled(&c, bad[i].rank, d + bad[i].off, dim, st, bx);
		CHECK(rc == CUDA_ERROR_INVALID_VALUE, "%s: %s, want CUDA_ERROR_INVALID_VALUE",
		      bad[i].what, cu_name(rc));
	}
	say("bad ranks, addresses, boxes and strides are refused");

	/* rank 1 with no strides: the emulated device encodes it; the
	 * H100's and H200's drivers (580) refuse it.  Either answer is the
	 * driver's, as long as it is one of those two and nothing crashes */
	CUresult r1 = tiled(&c, 1, d, dim, NULL, box);
	CHECK(r1 == CUDA_SUCCESS || r1 == CUDA_ERROR_INVALID_VALUE, "a rank-1 map: %s", cu_name(r1));
	CHECK(r1 != CUDA_SUCCESS || !zero(&c), "a rank-1 map encodes to zeros");
	say("a rank-1 map: %s", cu_name(r1));

	const cuuint64_t idim[4] = { 64, 16, 16, 2 };      /* C, W, H, N */
	const cuuint64_t istride[3] = { 256, 256 * 16, 256 * 256 };
	const int lower[2] = { -1, -1 }, upper[2] = { 1, 1 };
	const cuuint32_t iestride[4] = { 1, 1, 1, 1 };
	CK(cuTensorMapEncodeIm2col(&c, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, (void *)(uintptr_t)d, idim,
				   istride, lower, upper, 32, 32, iestride, CU_TENSOR_MAP_INTERLEAVE_NONE,
				   CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
				   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
	CHECK(!zero(&c), "an im2col map encodes to zeros");
	say("an im2col map of rank 4 encodes");

	CK(cuMemFree(d));
	primary_ctx_release(0);
	say("PASS");
	return 0;
}
