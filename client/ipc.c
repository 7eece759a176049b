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
 * servers this way.  Event handles go the same way: a token of the
 * exporting server's share registry for the driver's own IPC handle of an
 * interprocess event, which the importing session's server opens.
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

/* The current context, on rgpud instance (IPC reaches the processes of a
 * job on one server); NULL with *rc set, what (the call and the object)
 * logged when it is another server's. */
static struct rc_ctx *current_on(uint64_t instance, const char *what, CUresult *rc)
{
	struct rc_ctx *cur = rc_current();
	if (!cur) {
		*rc = CUDA_ERROR_INVALID_CONTEXT;
		return NULL;
	}
	uint64_t have = cur->dev->conn->instance;
	if (!have || have != instance) {
		log_warn("%s is on another rgpud than the current context's device: IPC reaches "
			 "the processes of a job on one server", what);
		*rc = CUDA_ERROR_INVALID_VALUE;
		return NULL;
	}
	return cur;
}

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

CUresult rc_ipc_map(uint64_t instance, const uint8_t token[16], uint64_t offset, uint64_t len,
		    uint64_t size, CUdeviceptr *pdptr)
{
	if (!pdptr || !len || len % GRAIN || offset > len || size > len - offset)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc;
	struct rc_ctx *cur = current_on(instance, "CUDA IPC: the memory", &rc);
	if (!cur)
		return rc;
	struct rc_conn *c = cur->dev->conn;
	CUmemGenericAllocationHandle h = 0;
	int ordinal = -1;
	if ((rc = rc_vmm_import(c, token, &h, &ordinal)))
		return rc;
	CUdeviceptr va = 0;
	struct ipc_open *o = calloc(1, sizeof(*o));
	rc = o ? cuMemAddressReserve(&va, len, GRAIN, 0, 0) : CUDA_ERROR_OUT_OF_MEMORY;
	int mapped = 0;
	if (!rc && !(rc = cuMemMap(va, len, 0, h, 0))) {
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
		rc = cuMemSetAccess(va, len, acc, n);
	}
	cuMemRelease(h); /* the mapping holds it */
	if (rc) {
		if (mapped)
			cuMemUnmap(va, len);
		if (va)
			cuMemAddressFree(va, len);
		free(o);
		return rc;
	}
	*o = (struct ipc_open){ .dptr = va + offset, .va = va, .len = len };
	pthread_mutex_lock(&ipc_lock);
	o->next = opened;
	opened = o;
	pthread_mutex_unlock(&ipc_lock);
	*pdptr = o->dptr;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	struct ipc_rec rec;
	memcpy(&rec, handle.reserved, sizeof(rec));
	if (memcmp(rec.magic, IPC_MAGIC, 4) || (flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
		return CUDA_ERROR_INVALID_VALUE;
	return rc_ipc_map(rec.instance, rec.token, rec.offset, rec.len, rec.size, pdptr);
}

RC_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
	return cuIpcOpenMemHandle_v2(pdptr, handle, flags);
}

CUresult rc_ipc_unmap(CUdeviceptr dptr)
{
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
	CUresult rc = cuMemUnmap(o->va, o->len);
	CUresult frc = cuMemAddressFree(o->va, o->len);
	free(o);
	return rc ? rc : frc;
}

RC_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	CUresult rc = rc_initialized();
	return rc ? rc : rc_ipc_unmap(dptr);
}

/* An event's IPC handle: a token of the server's share registry for the
 * driver's IPC handle of the event (IPC_EVENT_EXPORT, daemon/ops_ipc.c). */
#define IPC_EVENT_MAGIC "rgE1"
struct ipc_ev_rec {
	char magic[4];
	uint32_t gpu;
	uint64_t instance;
	uint8_t token[16];
};
_Static_assert(sizeof(struct ipc_ev_rec) <= sizeof(CUipcEventHandle), "an IPC handle holds it");

RC_EXPORT CUresult cuIpcGetEventHandle(CUipcEventHandle *handle, CUevent event)
{
	struct rc_event *ev;
	CUresult rc = rc_obj(event, RC_EVENT, &ev);
	if (rc)
		return rc;
	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	if (!(ev->flags & CU_EVENT_INTERPROCESS))
		return CUDA_ERROR_INVALID_HANDLE; /* as the driver */
	struct rc_conn *c = ev->ctx->dev->conn;
	struct wbuf *w = rc_req();
	put_u64(w, ev->ctx->h);
	put_u64(w, ev->h);
	struct rd r;
	if ((rc = rc_call(c, RGPU_OP_IPC_EVENT_EXPORT, w, &r)))
		return rc;
	const void *tok = get_raw(&r, 16);
	if (!rd_ok(&r) || !tok)
		return CUDA_ERROR_UNKNOWN;
	struct ipc_ev_rec rec;
	memset(&rec, 0, sizeof(rec));
	memcpy(rec.magic, IPC_EVENT_MAGIC, 4);
	rec.gpu = (uint32_t)ev->ctx->dev->gpu;
	rec.instance = c->instance;
	memcpy(rec.token, tok, 16);
	memset(handle, 0, sizeof(*handle));
	memcpy(handle->reserved, &rec, sizeof(rec));
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuIpcOpenEventHandle(CUevent *event, CUipcEventHandle handle)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	struct ipc_ev_rec rec;
	memcpy(&rec, handle.reserved, sizeof(rec));
	if (!event || memcmp(rec.magic, IPC_EVENT_MAGIC, 4))
		return CUDA_ERROR_INVALID_VALUE;
	struct rc_ctx *cur = current_on(rec.instance, "cuIpcOpenEventHandle: the event", &rc);
	if (!cur)
		return rc;
	struct rc_conn *c = cur->dev->conn;
	struct wbuf *w = rc_req();
	put_u64(w, cur->h);
	put_raw(w, rec.token, 16);
	struct rd r;
	if ((rc = rc_call(c, RGPU_OP_IPC_EVENT_OPEN, w, &r)))
		return rc;
	uint64_t h = get_u64(&r);
	if (!rd_ok(&r))
		return CUDA_ERROR_UNKNOWN;
	struct rc_event *ev = rc_event_new(cur, h, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING);
	if (!ev)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*event = (CUevent)ev;
	return CUDA_SUCCESS;
}
