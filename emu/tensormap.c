/*
 * Tensor maps (TMA descriptors): checked as the driver documents them and
 * encoded into the 128 opaque bytes in a layout of our own.  Nothing here
 * reads them back but cuTensorMapReplaceAddress; the point is that a
 * remote client gets the driver's answer, valid or not, through rgpud.
 */
#include "emu.h"

#include <string.h>

#define TMAP_MAGIC 0x746d6170u /* "tmap" */

/* The driver's rules shared by every encoding: 0, or INVALID_VALUE. */
static CUresult check_common(const CUtensorMap *m, CUtensorMapDataType dtype, cuuint32_t rank,
			     cuuint32_t min_rank, const void *addr, const cuuint64_t *dim,
			     const cuuint64_t *stride, const cuuint32_t *estride,
			     CUtensorMapInterleave il, CUtensorMapSwizzle sw,
			     CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
	if (!m || ((uintptr_t)m & 63) || rank < min_rank || rank > 5 || !dim || !estride ||
	    (rank > 1 && !stride))
		return CUDA_ERROR_INVALID_VALUE;
	if ((unsigned)dtype > CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B || (unsigned)il > CU_TENSOR_MAP_INTERLEAVE_32B ||
	    (unsigned)sw > CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B || (unsigned)l2 > CU_TENSOR_MAP_L2_PROMOTION_L2_256B ||
	    (unsigned)oob > CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA)
		return CUDA_ERROR_INVALID_VALUE;
	if (il != CU_TENSOR_MAP_INTERLEAVE_NONE && rank < 3)
		return CUDA_ERROR_INVALID_VALUE;
	if ((uintptr_t)addr % (il == CU_TENSOR_MAP_INTERLEAVE_32B ? 32 : 16))
		return CUDA_ERROR_INVALID_VALUE;
	for (cuuint32_t i = 0; i < rank; i++) {
		if (dim[i] == 0 || dim[i] > (1ull << 32) || estride[i] == 0 || estride[i] > 8)
			return CUDA_ERROR_INVALID_VALUE;
		if (i + 1 < rank && (stride[i] % 16 || stride[i] >= (1ull << 40)))
			return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

static void encode(CUtensorMap *m, unsigned kind, CUtensorMapDataType dtype, cuuint32_t rank,
		   CUtensorMapInterleave il, void *addr, const cuuint64_t *dim,
		   const cuuint64_t *stride, const cuuint32_t *box, const cuuint32_t *estride,
		   unsigned flags)
{
	cuuint64_t *q = m->opaque;
	memset(m, 0, sizeof(*m));
	/* the interleave in the low byte: cuTensorMapReplaceAddress's rule */
	q[0] = (cuuint64_t)TMAP_MAGIC << 32 | (cuuint64_t)kind << 24 | (cuuint64_t)dtype << 16 |
	       (cuuint64_t)rank << 8 | (cuuint64_t)il;
	q[1] = (cuuint64_t)(uintptr_t)addr;
	for (cuuint32_t i = 0; i < rank; i++) {
		q[2 + i] = dim[i];
		if (i + 1 < rank)
			q[7 + i] = stride[i];
		q[11 + i / 2] |= (cuuint64_t)((box ? box[i] : 0) << 8 | estride[i]) << (32 * (i % 2));
	}
	q[15] = flags;
}

EMU_API CUresult CUDAAPI cuTensorMapEncodeTiled(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
						cuuint32_t tensorRank, void *globalAddress,
						const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
						const cuuint32_t *boxDim, const cuuint32_t *elementStrides,
						CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
						CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill)
{
	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult rc = check_common(tensorMap, tensorDataType, tensorRank, 1, globalAddress, globalDim,
				   globalStrides, elementStrides, interleave, swizzle, l2Promotion, oobFill);
	if (rc || !boxDim)
		return rc ? rc : CUDA_ERROR_INVALID_VALUE;
	for (cuuint32_t i = 0; i < tensorRank; i++)
		if (boxDim[i] == 0 || boxDim[i] > 256)
			return CUDA_ERROR_INVALID_VALUE;
	encode(tensorMap, 1, tensorDataType, tensorRank, interleave, globalAddress, globalDim, globalStrides, boxDim,
	       elementStrides, (unsigned)swizzle | (unsigned)l2Promotion << 4 | (unsigned)oobFill << 8);
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuTensorMapEncodeIm2col(
	CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank, void *globalAddress,
	const cuuint64_t *globalDim, const cuuint64_t *globalStrides, const int *pixelBoxLowerCorner,
	const int *pixelBoxUpperCorner, cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,
	const cuuint32_t *elementStrides, CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
	CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill)
{
	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult rc = check_common(tensorMap, tensorDataType, tensorRank, 3, globalAddress, globalDim,
				   globalStrides, elementStrides, interleave, swizzle, l2Promotion, oobFill);
	if (rc || !pixelBoxLowerCorner || !pixelBoxUpperCorner || channelsPerPixel == 0 ||
	    channelsPerPixel > 256 || pixelsPerColumn == 0 || pixelsPerColumn > 1024)
		return rc ? rc : CUDA_ERROR_INVALID_VALUE;
	encode(tensorMap, 2, tensorDataType, tensorRank, interleave, globalAddress, globalDim, globalStrides, NULL,
	       elementStrides, channelsPerPixel << 16 | pixelsPerColumn);
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuTensorMapEncodeIm2colWide(
	CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank, void *globalAddress,
	const cuuint64_t *globalDim, const cuuint64_t *globalStrides, int pixelBoxLowerCornerWidth,
	int pixelBoxUpperCornerWidth, cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,
	const cuuint32_t *elementStrides, CUtensorMapInterleave interleave, CUtensorMapIm2ColWideMode mode,
	CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill)
{
	(void)pixelBoxLowerCornerWidth;
	(void)pixelBoxUpperCornerWidth;
	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult rc = check_common(tensorMap, tensorDataType, tensorRank, 3, globalAddress, globalDim,
				   globalStrides, elementStrides, interleave, swizzle, l2Promotion, oobFill);
	if (rc || (unsigned)mode > CU_TENSOR_MAP_IM2COL_WIDE_MODE_W128 || channelsPerPixel == 0 ||
	    channelsPerPixel > 256 || pixelsPerColumn == 0 || pixelsPerColumn > 1024)
		return rc ? rc : CUDA_ERROR_INVALID_VALUE;
	encode(tensorMap, 3, tensorDataType, tensorRank, interleave, globalAddress, globalDim, globalStrides, NULL,
	       elementStrides, channelsPerPixel << 16 | pixelsPerColumn);
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuTensorMapReplaceAddress(CUtensorMap *tensorMap, void *globalAddress)
{
	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!tensorMap || ((uintptr_t)tensorMap & 63) || (tensorMap->opaque[0] >> 32) != TMAP_MAGIC)
		return CUDA_ERROR_INVALID_VALUE;
	/* the encoding's rule: 32 bytes with 32-byte interleave, else 16 */
	unsigned il = (unsigned)(tensorMap->opaque[0] & 0xff);
	if ((uintptr_t)globalAddress % (il == CU_TENSOR_MAP_INTERLEAVE_32B ? 32 : 16))
		return CUDA_ERROR_INVALID_VALUE;
	tensorMap->opaque[1] = (cuuint64_t)(uintptr_t)globalAddress;
	return CUDA_SUCCESS;
}
