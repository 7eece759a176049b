/*
 * CUDA IPC for cuMemAlloc memory (cuIpcGetMemHandle).  An allocation of
 * the memory manager lies in physical memory the driver can export
 * (daemon/mem/export.c): the handle the client builds carries that
 * memory's token in the parent's share registry, and the importing
 * process (another session of the same job and uid on this rgpud)
 * imports it with VMM_IMPORT and maps it like any shareable handle
 * (client/ipc.c).  The physical memory is a whole block: small
 * allocations share 2 MiB chunks, so an importer can reach the exporter's
 * neighbouring allocations in that chunk (memory of the same job and
 * user).
 *
 * Events (cuIpcGetEventHandle): the driver's IPC handle of an
 * interprocess event goes into the share registry as a small memory file
 * (its bytes behind a tag), so that only a session of the same job and
 * uid on this rgpud gets it, by token, and opens it with the driver.
 */
#include "mem/mem.h"
#include "rgpud.h"
#include "session.h"
#include "share.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define D (&rgpud_server.drv)
#define EV_TAG "rgpuIPCe"
#define EV_FILE (8 + sizeof(CUipcEventHandle))

int op_ipc_export(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	(void)h;
	uint64_t dptr = get_u64(r);
	if (!rd_done(r))
		return OP_DROP;
	/* the start of one of the session's own cuMemAlloc allocations */
	const struct alloc *a = NULL;
	for (size_t i = 0; i < s->nalloc && !a; i++)
		if (s->allocs[i].dptr == dptr && !s->allocs[i].module && !vmem_owns(s, dptr))
			a = &s->allocs[i];
	if (!a)
		return CUDA_ERROR_INVALID_VALUE;
	uint8_t token[16];
	uint64_t va = 0, len = 0;
	int rc = mem_export(s, dptr, token, &va, &len);
	if (rc)
		return rc == CUDA_ERROR_INVALID_VALUE ? CUDA_ERROR_NOT_SUPPORTED : rc;
	put_raw(out, token, 16);
	put_u64(out, dptr - va);
	put_u64(out, len);
	put_u64(out, a->size);
	return CUDA_SUCCESS;
}

int op_ipc_event_export(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	(void)h;
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	int rc = req_enter(s, r, &q, HK_EVENT);
	if (rc)
		return rc;
	if (!D->cuIpcGetEventHandle)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUipcEventHandle eh;
	if ((rc = D->cuIpcGetEventHandle(&eh, q.e->obj)))
		return rc;
	uint8_t file[EV_FILE];
	memcpy(file, EV_TAG, 8);
	memcpy(file + 8, &eh, sizeof(eh));
	int fd = memfd_create("rgpu-ipc-event", MFD_CLOEXEC);
	if (fd < 0)
		return CUDA_ERROR_OPERATING_SYSTEM;
	if (write(fd, file, sizeof(file)) != (ssize_t)sizeof(file)) {
		close(fd);
		return CUDA_ERROR_OPERATING_SYSTEM;
	}
	uint8_t token[16];
	rc = gate_share_put(fd, q.cs->dev, sizeof(file), token);
	close(fd); /* the parent keeps a duplicate */
	if (rc)
		return CUDA_ERROR_OUT_OF_MEMORY; /* (the registry is full) */
	/* (the importer holds the driver's event: the session cannot move) */
	s->ipc_events++;
	put_raw(out, token, 16);
	return CUDA_SUCCESS;
}

int op_ipc_event_open(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	(void)h;
	struct req q;
	req_ids(r, &q, REQ_CTX);
	const void *tok = get_raw(r, 16);
	int rc = req_enter(s, r, &q, HK_FREE);
	if (rc)
		return rc;
	if (!tok)
		return OP_DROP;
	if (!D->cuIpcOpenEventHandle)
		return CUDA_ERROR_NOT_SUPPORTED;
	int fd = -1;
	unsigned gpu = 0;
	uint64_t size = 0;
	uint8_t token[16];
	memcpy(token, tok, 16);
	if ((rc = gate_share_get(token, &fd, &gpu, &size)))
		return rc < 0 ? CUDA_ERROR_INVALID_VALUE : rc;
	uint8_t file[EV_FILE];
	/* (memory shared under a token is no event: its file says so) */
	int ok = size == sizeof(file) && pread(fd, file, sizeof(file), 0) == (ssize_t)sizeof(file) &&
		 !memcmp(file, EV_TAG, 8);
	close(fd);
	if (!ok)
		return CUDA_ERROR_INVALID_VALUE;
	CUipcEventHandle eh;
	memcpy(&eh, file + 8, sizeof(eh));
	CUevent ev = NULL;
	if ((rc = D->cuIpcOpenEventHandle(&ev, eh)))
		return rc;
	uint64_t id = ht_add(&s->ht, HK_EVENT, ev, q.ctx, NULL);
	if (!id) {
		D->cuEventDestroy_v2(ev);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	put_u64(out, id);
	return CUDA_SUCCESS;
}
