/*
 * Contexts: creation and teardown, the per-thread current context, limits,
 * and the sticky error a faulting kernel leaves behind.
 */
#include "emu.h"

#include <stdlib.h>
#include <string.h>

/* Broadcast (under emu_glock) when a dying context loses its last caller. */
static pthread_cond_t refs_cond = PTHREAD_COND_INITIALIZER;
static struct emu_ctx *ctx_list;
static uint64_t next_ctx_id = 1;

/* The current context is per thread, as in CUDA.  The id guards against a
 * destroyed context whose memory was reused for a new one. */
static __thread struct emu_ctx *tls_ctx;
static __thread uint64_t tls_ctx_id;

/* Caller holds emu_glock. */
static struct emu_ctx *find_live(const struct emu_ctx *c, uint64_t id, int check_id)
{
	for (struct emu_ctx *p = ctx_list; p; p = p->next)
		if (p == c && !p->dying && (!check_id || p->id == id))
			return p;
	return NULL;
}

CUcontext emu_ctx_current_handle(void)
{
	return (CUcontext)tls_ctx;
}

int emu_ctx_sticky(struct emu_ctx *ctx)
{
	return __atomic_load_n(&ctx->sticky, __ATOMIC_ACQUIRE);
}

void emu_ctx_fault(struct emu_ctx *ctx, CUresult err)
{
	int expected = 0;

	/* The first fault wins, like the error a real context reports. */
	__atomic_compare_exchange_n(&ctx->sticky, &expected, (int)err, 0,
				    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

CUresult emu_ctx_enter(struct emu_ctx **out)
{
	struct emu_ctx *ctx;
	int sticky;

	emu_lock(&emu_glock);
	if (emu_ndevices == 0) {
		emu_unlock(&emu_glock);
		return CUDA_ERROR_NOT_INITIALIZED;
	}
	ctx = tls_ctx ? find_live(tls_ctx, tls_ctx_id, 1) : NULL;
	if (!ctx) {
		emu_unlock(&emu_glock);
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	sticky = emu_ctx_sticky(ctx);
	if (sticky) {
		emu_unlock(&emu_glock);
		return (CUresult)sticky;
	}
	ctx->refs++;
	emu_unlock(&emu_glock);
	*out = ctx;
	return CUDA_SUCCESS;
}

void emu_ctx_leave(struct emu_ctx *ctx)
{
	emu_lock(&emu_glock);
	if (--ctx->refs == 0 && ctx->dying)
		emu_broadcast(&refs_cond);
	emu_unlock(&emu_glock);
}

CUresult emu_ctx_enter_locked(struct emu_ctx **out)
{
	CUresult rc = emu_ctx_enter(out);
	if (rc == CUDA_SUCCESS)
		emu_lock(&(*out)->lock);
	return rc;
}

void emu_ctx_unlock_leave(struct emu_ctx *ctx)
{
	emu_unlock(&ctx->lock);
	emu_ctx_leave(ctx);
}

CUresult emu_ctx_found(struct emu_ctx *ctx, const void *obj)
{
	if (obj)
		return CUDA_SUCCESS;
	emu_ctx_unlock_leave(ctx);
	return CUDA_ERROR_INVALID_HANDLE;
}

CUresult emu_ctx_hold_all(struct emu_ctx ***out, size_t *n)
{
	struct emu_ctx **v = NULL;
	size_t count = 0, i = 0;

	emu_lock(&emu_glock);
	for (struct emu_ctx *p = ctx_list; p; p = p->next)
		count++;
	if (count) {
		v = malloc(count * sizeof *v);
		if (!v) {
			emu_unlock(&emu_glock);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		for (struct emu_ctx *p = ctx_list; p; p = p->next) {
			p->refs++;
			v[i++] = p;
		}
	}
	emu_unlock(&emu_glock);
	*out = v;
	*n = count;
	return CUDA_SUCCESS;
}

static void ctx_free(struct emu_ctx *ctx)
{
	pthread_rwlock_destroy(&ctx->mem_rw);
	pthread_cond_destroy(&ctx->cond);
	pthread_mutex_destroy(&ctx->lock);
	free(ctx->allocs);
	free(ctx);
}

EMU_API CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	struct emu_ctx *ctx;
	CUresult rc;

	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	emu_lock(&emu_glock);
	if (emu_ndevices == 0) {
		emu_unlock(&emu_glock);
		return CUDA_ERROR_NOT_INITIALIZED;
	}
	if (dev < 0 || dev >= emu_ndevices) {
		emu_unlock(&emu_glock);
		return CUDA_ERROR_INVALID_DEVICE;
	}
	if (emu_pool_take(dev, EMU_CTX_OVERHEAD) != 0) {
		emu_unlock(&emu_glock);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	emu_unlock(&emu_glock);

	rc = CUDA_ERROR_OUT_OF_MEMORY;
	ctx = calloc(1, sizeof *ctx);
	if (!ctx)
		goto fail_reserved;
	if (pthread_mutex_init(&ctx->lock, NULL) != 0)
		goto fail_free;
	if (pthread_cond_init(&ctx->cond, NULL) != 0)
		goto fail_mutex;
	if (pthread_rwlock_init(&ctx->mem_rw, NULL) != 0)
		goto fail_cond;
	ctx->dev = dev;
	ctx->limits[CU_LIMIT_STACK_SIZE] = 1024;
	ctx->limits[CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20;
	ctx->limits[CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20;
	ctx->limits[CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH] = 2;
	ctx->limits[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048;
	ctx->limits[CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 64;
	ctx->limits[CU_LIMIT_PERSISTING_L2_CACHE_SIZE] = 0;
	ctx->limits[CU_LIMIT_SHMEM_SIZE] = 232448;
	ctx->next_stream_id = 1;

	ctx->null_stream = calloc(1, sizeof *ctx->null_stream);
	if (!ctx->null_stream)
		goto fail_rw;
	ctx->null_stream->is_null = 1;
	emu_lock(&ctx->lock);
	rc = emu_stream_start(ctx, ctx->null_stream);
	emu_unlock(&ctx->lock);
	if (rc != CUDA_SUCCESS) {
		free(ctx->null_stream);
		goto fail_rw;
	}

	emu_lock(&emu_glock);
	ctx->id = next_ctx_id++;
	ctx->next = ctx_list;
	ctx_list = ctx;
	emu_unlock(&emu_glock);
	/* cuCtxCreate makes the new context current (pushes it). */
	tls_ctx = ctx;
	tls_ctx_id = ctx->id;
	*pctx = (CUcontext)ctx;
	return CUDA_SUCCESS;

fail_rw:
	pthread_rwlock_destroy(&ctx->mem_rw);
fail_cond:
	pthread_cond_destroy(&ctx->cond);
fail_mutex:
	pthread_mutex_destroy(&ctx->lock);
fail_free:
	free(ctx);
fail_reserved:
	emu_lock(&emu_glock);
	emu_pool_give(dev, EMU_CTX_OVERHEAD);
	emu_unlock(&emu_glock);
	return rc;
}

EMU_API CUresult CUDAAPI cuCtxDestroy_v2(CUcontext hctx)
{
	struct emu_ctx *ctx;

	emu_lock(&emu_glock);
	if (emu_ndevices == 0) {
		emu_unlock(&emu_glock);
		return CUDA_ERROR_NOT_INITIALIZED;
	}
	ctx = hctx ? find_live((struct emu_ctx *)hctx, 0, 0) : NULL;
	/* (a green context's conversion goes with cuGreenCtxDestroy) */
	if (!ctx || ctx->green) {
		emu_unlock(&emu_glock);
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	/* Unlink so no new call can enter, then wait for those inside. */
	ctx->dying = 1;
	for (struct emu_ctx **pp = &ctx_list; *pp; pp = &(*pp)->next)
		if (*pp == ctx) {
			*pp = ctx->next;
			break;
		}
	while (ctx->refs > 0)
		emu_wait(&refs_cond, &emu_glock);
	emu_unlock(&emu_glock);

	/* Streams first (their queued work may still touch memory), then
	 * modules, then the memory itself. */
	emu_streams_destroy_all(ctx);
	emu_modules_destroy_all(ctx);
	emu_arrays_destroy_all(ctx);
	emu_mem_free_all(ctx);

	emu_lock(&emu_glock);
	emu_pool_give(ctx->dev, EMU_CTX_OVERHEAD);
	emu_unlock(&emu_glock);
	if (tls_ctx == ctx) {
		tls_ctx = NULL;
		tls_ctx_id = 0;
	}
	ctx_free(ctx);
	return CUDA_SUCCESS;
}

/* Primary contexts: one per device in this process, made by the first
 * retain (with the flags last set) and destroyed, with all it holds, by the
 * last release, as the driver's.  Retaining one does not make it
 * current. */
static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	CUcontext ctx;
	int refs;
	unsigned flags;
} primary[EMU_MAX_DEVICES];

static int device_ok(CUdevice dev)
{
	emu_lock(&emu_glock);
	int ok = emu_ndevices > 0 && dev >= 0 && dev < emu_ndevices;
	emu_unlock(&emu_glock);
	return ok;
}

EMU_API CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (!device_ok(dev))
		return emu_ndevices ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&primary_lock);
	if (!primary[dev].refs) {
		struct emu_ctx *was = tls_ctx;
		uint64_t was_id = tls_ctx_id;
		rc = cuCtxCreate_v2(&primary[dev].ctx, primary[dev].flags, dev);
		tls_ctx = was;
		tls_ctx_id = was_id;
	}
	if (rc == CUDA_SUCCESS) {
		primary[dev].refs++;
		*pctx = primary[dev].ctx;
	}
	pthread_mutex_unlock(&primary_lock);
	return rc;
}

EMU_API CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	if (!device_ok(dev))
		return emu_ndevices ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&primary_lock);
	if (!primary[dev].refs)
		rc = CUDA_ERROR_INVALID_CONTEXT;
	else if (--primary[dev].refs == 0) {
		rc = cuCtxDestroy_v2(primary[dev].ctx);
		primary[dev].ctx = NULL;
	}
	pthread_mutex_unlock(&primary_lock);
	return rc;
}

EMU_API CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
	if (!device_ok(dev))
		return emu_ndevices ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
	if (flags & ~(unsigned)(CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX))
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&primary_lock);
	primary[dev].flags = flags;
	pthread_mutex_unlock(&primary_lock);
	return CUDA_SUCCESS;
}

CUresult emu_ctx_make_green(CUdevice dev, unsigned sms, void *g, struct emu_ctx **out)
{
	CUcontext prim, c;
	CUresult rc = cuDevicePrimaryCtxRetain(&prim, dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	struct emu_ctx *was = tls_ctx;
	uint64_t was_id = tls_ctx_id;
	rc = cuCtxCreate_v2(&c, 0, dev);
	tls_ctx = was;
	tls_ctx_id = was_id;
	if (rc != CUDA_SUCCESS) {
		cuDevicePrimaryCtxRelease_v2(dev);
		return rc;
	}
	struct emu_ctx *x = (struct emu_ctx *)c;
	x->mem_ctx = (struct emu_ctx *)prim;
	x->green_sms = sms;
	x->green = g;
	*out = x;
	return CUDA_SUCCESS;
}

CUresult emu_ctx_end_green(struct emu_ctx *ctx)
{
	int dev = ctx->dev;
	emu_lock(&emu_glock);
	ctx->green = NULL; /* (so that cuCtxDestroy takes it) */
	emu_unlock(&emu_glock);
	CUresult rc = cuCtxDestroy_v2((CUcontext)ctx);
	CUresult r2 = cuDevicePrimaryCtxRelease_v2(dev);
	return rc != CUDA_SUCCESS ? rc : r2;
}

CUresult emu_ctx_sms(CUcontext h, int *dev, unsigned *sms)
{
	emu_lock(&emu_glock);
	struct emu_ctx *ctx = h ? find_live((struct emu_ctx *)h, 0, 0) : NULL;
	int d = ctx ? ctx->dev : -1;
	unsigned g = ctx ? ctx->green_sms : 0;
	emu_unlock(&emu_glock);
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	int n = 0;
	CUresult rc = cuDeviceGetAttribute(&n, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d);
	if (rc != CUDA_SUCCESS)
		return rc;
	*dev = d;
	*sms = g ? g : (unsigned)n;
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuCtxSetCurrent(CUcontext hctx)
{
	struct emu_ctx *ctx;

	emu_lock(&emu_glock);
	if (emu_ndevices == 0) {
		emu_unlock(&emu_glock);
		return CUDA_ERROR_NOT_INITIALIZED;
	}
	if (!hctx) {
		emu_unlock(&emu_glock);
		tls_ctx = NULL;
		tls_ctx_id = 0;
		return CUDA_SUCCESS;
	}
	ctx = find_live((struct emu_ctx *)hctx, 0, 0);
	if (!ctx) {
		emu_unlock(&emu_glock);
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	tls_ctx = ctx;
	tls_ctx_id = ctx->id;
	emu_unlock(&emu_glock);
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuCtxSynchronize(void)
{
	struct emu_ctx *ctx;
	CUresult rc = emu_capture_unsafe(); /* (as CUDA: unsafe during a capture) */
	if (rc == CUDA_SUCCESS)
		rc = emu_ctx_enter_locked(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	emu_ctx_wait_idle(ctx);
	emu_unlock(&ctx->lock);
	rc = (CUresult)emu_ctx_sticky(ctx);
	emu_ctx_leave(ctx);
	return rc;
}

/* A context made without affinity has the whole device: all its SMs. */
EMU_API CUresult CUDAAPI cuDeviceGetExecAffinitySupport(int *pi, CUexecAffinityType type, CUdevice dev)
{
	int n = 0;
	if (!pi)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = cuDeviceGetAttribute(&n, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (type != CU_EXEC_AFFINITY_TYPE_SM_COUNT)
		return CUDA_ERROR_INVALID_VALUE;
	*pi = 1;
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuCtxGetExecAffinity(CUexecAffinityParam *p, CUexecAffinityType type)
{
	struct emu_ctx *ctx;
	if (!p || type != CU_EXEC_AFFINITY_TYPE_SM_COUNT)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = emu_ctx_enter(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	int n = 0;
	rc = cuDeviceGetAttribute(&n, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, ctx->dev);
	if (rc == CUDA_SUCCESS) {
		memset(p, 0, sizeof(*p));
		p->type = CU_EXEC_AFFINITY_TYPE_SM_COUNT;
		p->param.smCount.val = ctx->green_sms ? ctx->green_sms : (unsigned)n;
	}
	emu_ctx_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
	struct emu_ctx *ctx;
	CUresult rc;

	if (!pvalue)
		return CUDA_ERROR_INVALID_VALUE;
	rc = emu_ctx_enter(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if ((int)limit < 0 || (int)limit >= CU_LIMIT_MAX) {
		rc = CUDA_ERROR_UNSUPPORTED_LIMIT;
	} else {
		emu_lock(&ctx->lock);
		*pvalue = ctx->limits[limit];
		emu_unlock(&ctx->lock);
	}
	emu_ctx_leave(ctx);
	return rc;
}

/* Shared memory bank size: fixed at four bytes, as on every GPU since
 * Volta (whose drivers accept a setting and keep the default). */
EMU_API CUresult CUDAAPI cuCtxGetSharedMemConfig(CUsharedconfig *cfg)
{
	struct emu_ctx *ctx;
	if (!cfg)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = emu_ctx_enter(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	*cfg = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;
	emu_ctx_leave(ctx);
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuCtxSetSharedMemConfig(CUsharedconfig cfg)
{
	struct emu_ctx *ctx;
	if ((int)cfg < CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE || (int)cfg > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = emu_ctx_enter(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	emu_ctx_leave(ctx);
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuCtxSetLimit(CUlimit limit, size_t value)
{
	struct emu_ctx *ctx;
	CUresult rc = emu_ctx_enter(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	if ((int)limit < 0 || (int)limit >= CU_LIMIT_MAX)
		rc = CUDA_ERROR_UNSUPPORTED_LIMIT;
	else if (limit == CU_LIMIT_CIG_ENABLED || limit == CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED)
		rc = CUDA_ERROR_NOT_SUPPORTED;
	else {
		emu_lock(&ctx->lock);
		ctx->limits[limit] = value;
		emu_unlock(&ctx->lock);
	}
	emu_ctx_leave(ctx);
	return rc;
}
