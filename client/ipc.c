/*
 * CUDA IPC of device memory (cuIpcGetMemHandle, cuIpcOpenMemHandle,
 * cuIpcCloseMemHandle) between the processes of a job on one rgpud.
 *
 * The exporting session's server exports the physical memory under the
 * allocation (IPC_EXPORT: daemon/ops_ipc.c) and answers a token of its
 * share registry; the 64-byte handle carries that token, the rgpud's
 * instance and where the allocation lies in that memory.  The importing
 * process imports the token as a VMM handle (VMM_IMPORT, honoured for
 * sessions of the same job and uid only), maps it at an address of its
 * own window and gives its current device access, as the driver does.
 * Handles of another rgpud are refused: device memory does not cross
 * servers this way.  IPC event handles are not served.
 */
#include "client.h"
#include "log.h"

#include <stdlib.h>
#include <string.h>

#define IPC_MAGIC "rgI1"
#define GRAIN (2ull << 20)

struct ipc_rec {
	char magic[4];
	uint32_t gpu;       /* the server's GPU it lies on */
	uint64_t instance;  /* the rgpud that exported it */
	uint8_t token[16];
	uint64_t offset;    /* of the allocation in the physical memory */
	uint64_t len;       /* of the physical memory */
	uint64_t size;      /* of the allocation */
};
_Static_assert(sizeof(struct ipc_rec) <= sizeof(CUipcMemHandle), "an IPC handle holds it");

/* What this process opened: unmapped by cuIpcCloseMemHandle. */
struct ipc_open {
	CUdeviceptr dptr, va;
	uint64_t len;
	struct ipc_open *next;
};
static pthread_mutex_t ipc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ipc_open *opened;

RC_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr dptr)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	struct rc_ctx *ctx = NULL;
	CUdeviceptr base = 0;
	size_t size = 0;
	/* a pointer inside an allocation exports the whole allocation, as
	 * the driver does (measured on the H100: it gives a handle) */
	if (!handle || rc_alloc_lookup(dptr, &ctx, &base, &size) < 0 || !ctx)
		return CUDA_ERROR_INVALID_VALUE;
	struct rc_conn *c = ctx->dev->conn;
	struct wbuf *w = rc_req();
	put_u64(w, base);
	struct rd r;
	if ((rc = rc_call(c, RGPU_OP_IPC_EXPORT, w, &r)))
		return rc;
	struct ipc_rec rec;
	memset(&rec, 0, sizeof(rec));
	memcpy(rec.magic, IPC_MAGIC, 4);
	const void *tok = get_raw(&r, 16);
	rec.offset = get_u64(&r);
	rec.len = get_u64(&r);
	rec.size = get_u64(&r);
	if (!rd_ok(&r) || !tok)
		return CUDA_ERROR_UNKNOWN;
	memcpy(rec.token, tok, 16);
	rec.gpu = (uint32_t)ctx->dev->gpu;
	rec.instance = c->instance;
	memset(handle, 0, sizeof(*handle));
	memcpy(handle->reserved, &rec, sizeof(rec));
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	struct ipc_rec rec;
	memcpy(&rec, handle.reserved, sizeof(rec));
	if (!pdptr || memcmp(rec.magic, IPC_MAGIC, 4) || !rec.len || rec.len % GRAIN ||
	    rec.offset > rec.len || rec.size > rec.len - rec.offset ||
	    (flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
		return CUDA_ERROR_INVALID_VALUE;
	struct rc_ctx *cur = rc_current();
	if (!cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	struct rc_conn *c = cur->dev->conn;
	if (!c->instance || c->instance != rec.instance) {
		log_warn("cuIpcOpenMemHandle: the memory is on another rgpud than the current "
			 "context's device: IPC reaches the processes of a job on one server");
		return CUDA_ERROR_INVALID_VALUE;
	}
	CUmemGenericAllocationHandle h = 0;
	int ordinal = -1;
	if ((rc = rc_vmm_import(c, rec.token, &h, &ordinal)))
		return rc;
	CUdeviceptr va = 0;
	struct ipc_open *o = calloc(1, sizeof(*o));
	rc = o ? cuMemAddressReserve(&va, rec.len, GRAIN, 0, 0) : CUDA_ERROR_OUT_OF_MEMORY;
	int mapped = 0;
	if (!rc && !(rc = cuMemMap(va, rec.len, 0, h, 0))) {
		mapped = 1;
		/* the current context's device, and the memory's own */
		CUmemAccessDesc acc[2];
		size_t n = 0;
		acc[n++] = (CUmemAccessDesc){ .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE,
							    .id = cur->ordinal },
					      .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
		if (ordinal >= 0 && ordinal != cur->ordinal)
			acc[n++] = (CUmemAccessDesc){ .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE,
								    .id = ordinal },
						      .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
		rc = cuMemSetAccess(va, rec.len, acc, n);
	}
	cuMemRelease(h); /* the mapping holds it */
	if (rc) {
		if (mapped)
			cuMemUnmap(va, rec.len);
		if (va)
			cuMemAddressFree(va, rec.len);
		free(o);
		return rc;
	}
	*o = (struct ipc_open){ .dptr = va + rec.offset, .va = va, .len = rec.len };
	pthread_mutex_lock(&ipc_lock);
	o->next = opened;
	opened = o;
	pthread_mutex_unlock(&ipc_lock);
	*pdptr = o->dptr;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
	return cuIpcOpenMemHandle_v2(pdptr, handle, flags);
}

RC_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	pthread_mutex_lock(&ipc_lock);
	struct ipc_open *o = NULL, **pp;
	for (pp = &opened; *pp; pp = &(*pp)->next)
		if ((*pp)->dptr == dptr) {
			o = *pp;
			*pp = o->next;
			break;
		}
	pthread_mutex_unlock(&ipc_lock);
	if (!o)
		return CUDA_ERROR_INVALID_VALUE;
	rc = cuMemUnmap(o->va, o->len);
	CUresult frc = cuMemAddressFree(o->va, o->len);
	free(o);
	return rc ? rc : frc;
}

RC_EXPORT CUresult cuIpcGetEventHandle(CUipcEventHandle *handle, CUevent event)
{
	(void)handle;
	(void)event;
	rc_unsupported("cuIpcGetEventHandle (IPC event handles)");
	return CUDA_ERROR_NOT_SUPPORTED;
}

RC_EXPORT CUresult cuIpcOpenEventHandle(CUevent *event, CUipcEventHandle handle)
{
	(void)event;
	(void)handle;
	rc_unsupported("cuIpcOpenEventHandle (IPC event handles)");
	return CUDA_ERROR_NOT_SUPPORTED;
}
