/* cuGetProcAddress, error names and strings, export tables. */
#include "client.h"
#include "export_tables.h"
#include "log.h"
#include "procaddr.h"
#include "trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int sym_cmp(const void *k, const void *e)
{
	return strcmp(k, ((const struct rc_sym *)e)->name);
}

static void *sym_find(const char *name)
{
	const struct rc_sym *s = bsearch(name, rc_syms, (size_t)rc_nsyms, sizeof(*rc_syms), sym_cmp);
	if (!s)
		return NULL;
	/* RGPU_TRACE: the entry point's wrapper, which reports the call */
	const struct rc_sym *t = &rc_trace_syms[s - rc_syms];
	if (t->fn && rc_trace_mode() != RC_TRACE_OFF)
		return t->fn;
	return s->fn;
}

/*
 * A versioned entry point (cuFoo_v2, _v3 ...) answers requests from
 * programs built for a toolkit at least as new as the version that
 * introduced it.  The default (_v2 of the CUDA 3.2 64-bit API) covers most;
 * the rest are listed.
 */
static const struct { const char *name; int since; } versioned[] = {
	{ "cuCtxCreate_v3", 11040 },
	{ "cuCtxCreate_v4", 12050 },
	{ "cuDeviceGetUuid_v2", 11040 },
	{ "cuDevicePrimaryCtxRelease_v2", 11000 },
	{ "cuDevicePrimaryCtxReset_v2", 11000 },
	{ "cuDevicePrimaryCtxSetFlags_v2", 11000 },
	{ "cuEventElapsedTime_v2", 12080 },
	{ "cuGetProcAddress_v2", 12000 },
	{ "cuGraphAddKernelNode_v2", 12000 },
	{ "cuGraphExecKernelNodeSetParams_v2", 12000 },
	{ "cuGraphInstantiate_v2", 11000 },
	{ "cuGraphExecUpdate_v2", 12000 },
	{ "cuGraphKernelNodeGetParams_v2", 12000 },
	{ "cuGraphKernelNodeSetParams_v2", 12000 },
	{ "cuGraphAddDependencies_v2", 12030 },
	{ "cuGraphAddNode_v2", 12030 },
	{ "cuGraphGetEdges_v2", 12030 },
	{ "cuGraphNodeGetDependencies_v2", 12030 },
	{ "cuGraphNodeGetDependentNodes_v2", 12030 },
	{ "cuGraphRemoveDependencies_v2", 12030 },
	{ "cuIpcOpenMemHandle_v2", 11000 },
	{ "cuMemAdvise_v2", 12020 },
	{ "cuMemPrefetchAsync_v2", 12020 },
	{ "cuMemcpyBatchAsync_v2", 13000 },
	{ "cuMemcpy3DBatchAsync_v2", 13000 },
	{ "cuStreamBatchMemOp_v2", 11070 },
	{ "cuStreamBeginCapture_v2", 10010 },
	{ "cuStreamGetCaptureInfo_v2", 11030 },
	{ "cuStreamGetCaptureInfo_v3", 12030 },
	{ "cuStreamGetCtx_v2", 12050 },
	{ "cuStreamUpdateCaptureDependencies_v2", 12030 },
	{ "cuStreamWaitValue32_v2", 11070 },
	{ "cuStreamWaitValue64_v2", 11070 },
	{ "cuStreamWriteValue32_v2", 11070 },
	{ "cuStreamWriteValue64_v2", 11070 },
	{ "cuCtxGetDevice_v2", 12080 },
	{ "cuCtxSynchronize_v2", 12080 },
	{ "cuGraphicsResourceGetMappedPointer_v2", 3000 },
	{ "cuTexRefSetAddress2D_v3", 4010 },
	{ "cuLinkCreate_v2", 6050 },
	{ "cuLinkAddData_v2", 6050 },
	{ "cuLinkAddFile_v2", 6050 },
	{ "cuMemHostRegister_v2", 6050 },
	{ "cuGraphicsResourceSetMapFlags_v2", 6050 },
};

static int since(const char *vname)
{
	for (size_t i = 0; i < sizeof(versioned) / sizeof(versioned[0]); i++)
		if (!strcmp(versioned[i].name, vname))
			return versioned[i].since;
	return 3020;
}

static void *resolve(const char *symbol, int version, int ptds)
{
	char name[256];
	void *fn = NULL;
	/* newest variant the caller's toolkit knows */
	for (int v = 9; v >= 1 && !fn; v--) {
		if (v == 1)
			snprintf(name, sizeof(name), "%s", symbol);
		else
			snprintf(name, sizeof(name), "%s_v%d", symbol, v);
		if (v > 1 && since(name) > version)
			continue;
		if (ptds) {
			char pt[300];
			snprintf(pt, sizeof(pt), "%s_ptds", name);
			if (!(fn = sym_find(pt))) {
				snprintf(pt, sizeof(pt), "%s_ptsz", name);
				fn = sym_find(pt);
			}
		}
		if (!fn)
			fn = sym_find(name);
	}
	return fn;
}

RC_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
				       CUdriverProcAddressQueryResult *status)
{
	if (!symbol || !pfn)
		return CUDA_ERROR_INVALID_VALUE;
	int ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
	*pfn = resolve(symbol, version, ptds);
	if (status)
		*status = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	if (!*pfn)
		log_debug("cuGetProcAddress: no %s (version %d)", symbol, version);
	return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

RC_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
	return cuGetProcAddress_v2(symbol, pfn, version, flags, NULL);
}

static const struct rc_err *err_find(CUresult e)
{
	for (int i = 0; i < rc_nerrs; i++)
		if (rc_errs[i].code == (int)e)
			return &rc_errs[i];
	return NULL;
}

RC_EXPORT CUresult cuGetErrorName(CUresult e, const char **s)
{
	if (!s)
		return CUDA_ERROR_INVALID_VALUE;
	const struct rc_err *x = err_find(e);
	*s = x ? x->name : NULL;
	return x ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* The driver's own short messages for the common codes, which programs
 * print and scripts grep for; other codes fall back to cuda.h's text. */
static const struct { int code; const char *text; } driver_text[] = {
	{ 0, "no error" },
	{ 1, "invalid argument" },
	{ 2, "out of memory" },
	{ 3, "initialization error" },
	{ 4, "driver shutting down" },
	{ 100, "no CUDA-capable device is detected" },
	{ 101, "invalid device ordinal" },
	{ 200, "device kernel image is invalid" },
	{ 201, "invalid device context" },
	{ 209, "no kernel image is available for execution on the device" },
	{ 218, "a PTX JIT compilation failed" },
	{ 301, "file not found" },
	{ 400, "invalid resource handle" },
	{ 500, "named symbol not found" },
	{ 600, "device not ready" },
	{ 700, "an illegal memory access was encountered" },
	{ 701, "too many resources requested for launch" },
	{ 702, "the launch timed out and was terminated" },
	{ 719, "unspecified launch failure" },
	{ 800, "operation not permitted" },
	{ 801, "operation not supported" },
	{ 999, "unknown error" },
};

RC_EXPORT CUresult cuGetErrorString(CUresult e, const char **s)
{
	if (!s)
		return CUDA_ERROR_INVALID_VALUE;
	const struct rc_err *x = err_find(e);
	*s = x ? x->text : NULL;
	for (size_t i = 0; x && i < sizeof(driver_text) / sizeof(driver_text[0]); i++)
		if (driver_text[i].code == (int)e)
			*s = driver_text[i].text;
	return x ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

RC_EXPORT CUresult cuGetExportTable(const void **table, const CUuuid *id)
{
	CUresult rc = rc_export_table(table, id);
	if (rc == CUDA_ERROR_NOT_SUPPORTED) {
		char hex[33];
		for (int i = 0; i < 16; i++)
			snprintf(hex + 2 * i, 3, "%02x", (unsigned char)id->bytes[i]);
		log_info("cuGetExportTable %s: private table not served", hex);
	}
	return rc;
}
