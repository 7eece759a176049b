/*
 * The execution control API of CUDA 1-3 (deprecated, still declared in
 * cuda.h and served by the driver): a function's block shape, dynamic
 * shared memory and parameter bytes are set call by call, then cuLaunch,
 * cuLaunchGrid or cuLaunchGridAsync runs it.  That state is the client's
 * (it is not device state): kept per function here and launched as
 * cuLaunchKernel with the parameters as one buffer, so the server sees
 * an ordinary launch.
 */
#include "client.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* a kernel's parameters today (CUDA 12.1+): the H200's driver takes 8 KiB
 * and bytes past 4 KiB through this API too (2026-12-03) */
#define LEGACY_PARAM_MAX 32764

struct rc_legacy {
	int block[3];
	unsigned shared;
	size_t size;
	uint8_t buf[LEGACY_PARAM_MAX];
};

/* the state of every function: set from any thread, as the driver allows */
static pthread_mutex_t legacy_lock = PTHREAD_MUTEX_INITIALIZER;

/* f's state, made at its first use; legacy_lock held.  NULL: no memory. */
static struct rc_legacy *state(struct rc_func *f)
{
	if (!f->legacy)
		f->legacy = calloc(1, sizeof(*f->legacy));
	return f->legacy;
}

/* f's state with legacy_lock held (the caller unlocks), or an error. */
static CUresult lock_state(CUfunction hf, struct rc_legacy **st)
{
	struct rc_func *f;
	CUresult rc = rc_func_resolve(hf, &f);
	if (rc)
		return rc;
	pthread_mutex_lock(&legacy_lock);
	if (!(*st = state(f))) {
		pthread_mutex_unlock(&legacy_lock);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuFuncSetBlockShape(CUfunction hf, int x, int y, int z)
{
	if (x <= 0 || y <= 0 || z <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	struct rc_legacy *st;
	CUresult rc = lock_state(hf, &st);
	if (rc)
		return rc;
	st->block[0] = x;
	st->block[1] = y;
	st->block[2] = z;
	pthread_mutex_unlock(&legacy_lock);
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuFuncSetSharedSize(CUfunction hf, unsigned int bytes)
{
	struct rc_legacy *st;
	CUresult rc = lock_state(hf, &st);
	if (rc)
		return rc;
	st->shared = bytes;
	pthread_mutex_unlock(&legacy_lock);
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuParamSetSize(CUfunction hf, unsigned int bytes)
{
	if (bytes > LEGACY_PARAM_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	struct rc_legacy *st;
	CUresult rc = lock_state(hf, &st);
	if (rc)
		return rc;
	st->size = bytes;
	pthread_mutex_unlock(&legacy_lock);
	return CUDA_SUCCESS;
}

/* bytes [off, off+n) of f's parameters */
static CUresult param_set(CUfunction hf, int off, const void *p, unsigned n)
{
	if (off < 0 || (size_t)off > LEGACY_PARAM_MAX || n > LEGACY_PARAM_MAX - (size_t)off || (n && !p))
		return CUDA_ERROR_INVALID_VALUE;
	struct rc_legacy *st;
	CUresult rc = lock_state(hf, &st);
	if (rc)
		return rc;
	if (n)
		memcpy(st->buf + off, p, n);
	pthread_mutex_unlock(&legacy_lock);
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuParamSeti(CUfunction hf, int off, unsigned int v) { return param_set(hf, off, &v, sizeof(v)); }
RC_EXPORT CUresult cuParamSetf(CUfunction hf, int off, float v) { return param_set(hf, off, &v, sizeof(v)); }
RC_EXPORT CUresult cuParamSetv(CUfunction hf, int off, void *p, unsigned int n) { return param_set(hf, off, p, n); }

/* Texture references are not served (cuTexRef*): neither is binding one
 * to a function's parameters. */
RC_EXPORT CUresult cuParamSetTexRef(CUfunction hf, int texunit, CUtexref tex)
{
	(void)hf;
	(void)texunit;
	(void)tex;
	rc_unsupported("cuParamSetTexRef (texture references)");
	return CUDA_ERROR_NOT_SUPPORTED;
}

RC_EXPORT CUresult cuLaunchGridAsync(CUfunction hf, int w, int h, CUstream s)
{
	if (w <= 0 || h <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	/* a copy of what is set (another thread may set the next launch's
	 * meanwhile): the shape and the parameter bytes in use */
	struct rc_legacy *st, *copy;
	CUresult rc = lock_state(hf, &st);
	if (rc)
		return rc;
	size_t n = offsetof(struct rc_legacy, buf) + st->size;
	if ((copy = malloc(n)))
		memcpy(copy, st, n);
	pthread_mutex_unlock(&legacy_lock);
	if (!copy)
		return CUDA_ERROR_OUT_OF_MEMORY;
	size_t size = copy->size;
	void *extra[] = { CU_LAUNCH_PARAM_BUFFER_POINTER, copy->buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
			  CU_LAUNCH_PARAM_END };
	rc = cuLaunchKernel(hf, (unsigned)w, (unsigned)h, 1, (unsigned)copy->block[0], (unsigned)copy->block[1],
			    (unsigned)copy->block[2], copy->shared, s, NULL, extra);
	free(copy);
	return rc;
}

RC_EXPORT CUresult cuLaunchGrid(CUfunction hf, int w, int h) { return cuLaunchGridAsync(hf, w, h, NULL); }
RC_EXPORT CUresult cuLaunch(CUfunction hf) { return cuLaunchGridAsync(hf, 1, 1, NULL); }
