/* Stream attributes (kept per stream, checked: CUDA's stream attributes
 * are hints the emulated device does not act on) and the profiler switch
 * (no profiler: starting and stopping succeed, as the driver does when
 * none is attached). */
#include "emu.h"

#include <cudaProfiler.h>
#include <stdlib.h>
#include <string.h>

struct sattr {
	struct sattr *next;
	CUstream stream;
	CUstreamAttrID id;
	CUstreamAttrValue v;
};

static pthread_mutex_t attr_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sattr *attrs;

static int known(CUstreamAttrID id)
{
	switch (id) {
	case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
	case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
	case CU_LAUNCH_ATTRIBUTE_PRIORITY:
	case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
	case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
		return 1;
	default:
		return 0;
	}
}

/* The stream's priority (the one attribute its creation sets) and id. */
static CUresult stream_check(CUstream h, int *prio, unsigned long long *id)
{
	struct emu_ctx *ctx;
	struct emu_stream *s;
	CUresult rc = emu_stream_enter(h, &ctx, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	*prio = s->priority;
	*id = s->id;
	emu_ctx_unlock_leave(ctx);
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuStreamGetAttribute(CUstream h, CUstreamAttrID id, CUstreamAttrValue *v)
{
	int prio = 0;
	if (!v || !known(id))
		return CUDA_ERROR_INVALID_VALUE;
	unsigned long long sid;
	CUresult rc = stream_check(h, &prio, &sid);
	if (rc != CUDA_SUCCESS)
		return rc;
	memset(v, 0, sizeof(*v));
	if (id == CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY)
		v->syncPolicy = CU_SYNC_POLICY_AUTO;
	if (id == CU_LAUNCH_ATTRIBUTE_PRIORITY)
		v->priority = prio;
	emu_lock(&attr_lock);
	for (struct sattr *a = attrs; a; a = a->next)
		if (a->stream == h && a->id == id)
			*v = a->v;
	emu_unlock(&attr_lock);
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuStreamSetAttribute(CUstream h, CUstreamAttrID id, const CUstreamAttrValue *v)
{
	int prio = 0;
	if (!v || !known(id) || id == CU_LAUNCH_ATTRIBUTE_PRIORITY)
		return CUDA_ERROR_INVALID_VALUE;
	if (id == CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY &&
	    (v->syncPolicy < CU_SYNC_POLICY_AUTO || v->syncPolicy > CU_SYNC_POLICY_BLOCKING_SYNC))
		return CUDA_ERROR_INVALID_VALUE;
	unsigned long long sid;
	CUresult rc = stream_check(h, &prio, &sid);
	if (rc != CUDA_SUCCESS)
		return rc;
	emu_lock(&attr_lock);
	struct sattr *a;
	for (a = attrs; a; a = a->next)
		if (a->stream == h && a->id == id)
			break;
	if (!a && (a = calloc(1, sizeof(*a)))) {
		a->stream = h;
		a->id = id;
		a->next = attrs;
		attrs = a;
	}
	if (a)
		a->v = *v;
	emu_unlock(&attr_lock);
	return a ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* A stream destroyed takes its attributes along (stream.c calls this). */
void emu_attr_forget(CUstream h)
{
	emu_lock(&attr_lock);
	for (struct sattr **pp = &attrs; *pp;) {
		if ((*pp)->stream == h) {
			struct sattr *a = *pp;
			*pp = a->next;
			free(a);
		} else {
			pp = &(*pp)->next;
		}
	}
	emu_unlock(&attr_lock);
}

EMU_API CUresult CUDAAPI cuProfilerStart(void)
{
	return emu_initialized() ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

EMU_API CUresult CUDAAPI cuProfilerStop(void)
{
	return emu_initialized() ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

EMU_API CUresult CUDAAPI cuStreamGetId(CUstream h, unsigned long long *id)
{
	int prio;
	return id ? stream_check(h, &prio, id) : CUDA_ERROR_INVALID_VALUE;
}
