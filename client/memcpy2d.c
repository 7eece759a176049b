/* Pitched (2D) copies, stream-ordered allocation, cooperative launches,
 * names: composed from the calls the client already forwards. */
#include "client.h"
#include "log.h"

#include <stdlib.h>
#include <string.h>

uintptr_t rc_copy_side(CUmemorytype t, CUdeviceptr d, const void *h, CUmemorytype *kind)
{
	if (t != CU_MEMORYTYPE_UNIFIED) {
		*kind = t;
		return t == CU_MEMORYTYPE_HOST ? (uintptr_t)h : (uintptr_t)d;
	}
	uintptr_t a = d ? (uintptr_t)d : (uintptr_t)h;
	*kind = rc_alloc_lookup(a, NULL, NULL, NULL) == 0 ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
	return a;
}

/* The first byte of a pitched area at base + y * pitch + x, checked so that
 * neither it nor the last byte of h rows of w wraps around the address
 * space: 0, or -1. */
static int place(uintptr_t base, size_t x, size_t y, size_t pitch, size_t w, size_t h,
		 uintptr_t *out)
{
	size_t off, span, end;
	if (__builtin_mul_overflow(y, pitch, &off) || __builtin_add_overflow(off, x, &off) ||
	    __builtin_mul_overflow(h - 1, pitch, &span) || __builtin_add_overflow(span, w, &span) ||
	    __builtin_add_overflow(base, off, out) || __builtin_add_overflow(*out, span, &end))
		return -1;
	return 0;
}

static CUresult memcpy2d(const CUDA_MEMCPY2D *p, CUstream s, int async)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	CUmemorytype st, dt;
	uintptr_t sa = rc_copy_side(p->srcMemoryType, p->srcDevice, p->srcHost, &st);
	uintptr_t da = rc_copy_side(p->dstMemoryType, p->dstDevice, p->dstHost, &dt);
	if (st == CU_MEMORYTYPE_ARRAY || dt == CU_MEMORYTYPE_ARRAY) {
		/* a 3D copy of one slice (array.c) */
		CUDA_MEMCPY3D q = {
			.srcXInBytes = p->srcXInBytes, .srcY = p->srcY, .srcMemoryType = p->srcMemoryType,
			.srcHost = p->srcHost, .srcDevice = p->srcDevice, .srcArray = p->srcArray,
			.srcPitch = p->srcPitch, .dstXInBytes = p->dstXInBytes, .dstY = p->dstY,
			.dstMemoryType = p->dstMemoryType, .dstHost = p->dstHost, .dstDevice = p->dstDevice,
			.dstArray = p->dstArray, .dstPitch = p->dstPitch,
			.WidthInBytes = p->WidthInBytes, .Height = p->Height, .Depth = 1 };
		return rc_memcpy3d(&q, s, async);
	}
	size_t w = p->WidthInBytes, h = p->Height;
	size_t sp = st == CU_MEMORYTYPE_HOST && !p->srcPitch ? w : p->srcPitch;
	size_t dp = dt == CU_MEMORYTYPE_HOST && !p->dstPitch ? w : p->dstPitch;
	if (!w || !h)
		return CUDA_SUCCESS;
	if (sp < w || dp < w)
		return CUDA_ERROR_INVALID_VALUE;
	uintptr_t src, dst;
	size_t span;
	if (place(sa, p->srcXInBytes, p->srcY, sp, w, h, &src) < 0 ||
	    place(da, p->dstXInBytes, p->dstY, dp, w, h, &dst) < 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (st == CU_MEMORYTYPE_HOST && dt == CU_MEMORYTYPE_HOST) {
		for (size_t y = 0; y < h; y++)
			memmove((void *)(dst + y * dp), (const void *)(src + y * sp), w);
		return CUDA_SUCCESS;
	}
	if (st == CU_MEMORYTYPE_DEVICE && dt == CU_MEMORYTYPE_HOST) {
		/* one fetch of the whole pitched span, then the rows here */
		span = (h - 1) * sp + w; /* checked by place() */
		if (sp == w && dp == w)
			return async ? cuMemcpyDtoHAsync_v2((void *)dst, src, span, s)
				     : cuMemcpyDtoH_v2((void *)dst, src, span);
		uint8_t *tmp = malloc(span);
		if (!tmp)
			return CUDA_ERROR_OUT_OF_MEMORY;
		rc = async ? cuMemcpyDtoHAsync_v2(tmp, src, span, s) : cuMemcpyDtoH_v2(tmp, src, span);
		if (!rc && async)
			rc = cuStreamSynchronize(s); /* the rows are placed here */
		for (size_t y = 0; !rc && y < h; y++)
			memcpy((void *)(dst + y * dp), tmp + y * sp, w);
		free(tmp);
		return rc;
	}
	/* to the device: whole rows only (the gaps between rows are not the
	 * caller's to overwrite); rows go without waiting, in order */
	if (sp == w && dp == w) {
		size_t n = w * h;
		if (st == CU_MEMORYTYPE_HOST)
			return async ? cuMemcpyHtoDAsync_v2(dst, (const void *)src, n, s)
				     : cuMemcpyHtoD_v2(dst, (const void *)src, n);
		return async ? cuMemcpyDtoDAsync_v2(dst, src, n, s) : cuMemcpyDtoD_v2(dst, src, n);
	}
	for (size_t y = 0; !rc && y < h; y++) {
		if (st == CU_MEMORYTYPE_HOST)
			rc = cuMemcpyHtoDAsync_v2(dst + y * dp, (const void *)(src + y * sp), w, s);
		else
			rc = cuMemcpyDtoDAsync_v2(dst + y * dp, src + y * sp, w, s);
	}
	if (!rc && !async)
		rc = cuStreamSynchronize(s);
	return rc;
}

RC_EXPORT CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *p) { return memcpy2d(p, NULL, 0); }
RC_EXPORT CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *p) { return memcpy2d(p, NULL, 0); }
RC_EXPORT CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *p, CUstream s) { return memcpy2d(p, s, 1); }

/* Stream-ordered allocation: pool.c */

RC_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
					     unsigned bx, unsigned by, unsigned bz, unsigned shmem,
					     CUstream s, void **params)
{
	CUlaunchAttribute a = { .id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE, .value.cooperative = 1 };
	CUlaunchConfig cfg = { .gridDimX = gx, .gridDimY = gy, .gridDimZ = gz, .blockDimX = bx,
			       .blockDimY = by, .blockDimZ = bz, .sharedMemBytes = shmem,
			       .hStream = s, .attrs = &a, .numAttrs = 1 };
	return cuLaunchKernelEx(&cfg, f, params, NULL);
}

RC_EXPORT CUresult cuFuncGetName(const char **name, CUfunction fn)
{
	struct rc_func *f;
	CUresult rc = rc_func_resolve(fn, &f);
	if (rc)
		return rc;
	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	struct rc_kernel *k = (struct rc_kernel *)fn;
	*name = k->magic == RC_KERNEL ? k->name : f->name;
	return *name ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

RC_EXPORT CUresult cuKernelGetName(const char **name, CUkernel k)
{
	return cuFuncGetName(name, (CUfunction)k);
}
