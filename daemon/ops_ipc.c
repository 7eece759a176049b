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
 */
#include "mem/mem.h"
#include "rgpud.h"
#include "session.h"

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
