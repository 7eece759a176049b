/*
 * Device memory handed to another worker of this rgpud by reference: a
 * move between two GPUs of one server (migrate/capture.c) sends, instead
 * of an allocation's bytes, the token under which the parent's share
 * registry holds a file descriptor of its physical memory (the driver's
 * POSIX handle).  The target worker maps it beside its own new memory and
 * copies GPU to GPU (NVLink or PCIe peer-to-peer) rather than through host
 * memory and a socket.  The registry gives the descriptor only to a
 * session of the same job and uid (share.c), as for an application's own
 * shareable handles.  Exports live for one capture: the source drops them
 * when the move ends either way (and the parent drops what a worker left
 * when it ends).
 */
#include "mem_int.h"
#include "../share.h"

#include <string.h>

int mem_export(struct session *s, uint64_t addr, uint8_t token[16], uint64_t *va, uint64_t *len)
{
	struct mem_state *m = s->mem;
	if (!m)
		return CUDA_ERROR_NOT_SUPPORTED;
	struct mem_block *b = mem_block_holding(m, addr);
	if (!b || b->plain || b->resident != 1)
		return CUDA_ERROR_INVALID_VALUE;
	int rc = gate_share_export(b->h, b->dev, b->len, b->token, &b->exported);
	if (rc)
		return rc;
	memcpy(token, b->token, 16);
	*va = b->va;
	*len = b->len;
	return CUDA_SUCCESS;
}

void mem_export_forget(struct mem_block *b)
{
	if (!b->exported)
		return;
	gate_share_drop(b->token);
	b->exported = 0;
}

void mem_export_drop(struct session *s)
{
	struct mem_state *m = s->mem;
	for (size_t i = 0; m && i < m->nblocks; i++)
		mem_export_forget(m->blocks[i]);
}
