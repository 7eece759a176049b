/* Opcode -> handler.  A bulk op reads only its fixed fields up front. */
#include "gate.h"
#include "rgpud.h"
#include "session.h"
#include "migrate/migrate.h"

int op_admin(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	return gate_admin(h->op, r, out);
}

#define OPD(name, fn, prefix) [RGPU_OP_##name] = { op_##fn, prefix, 1, 0 }
#define OPDF(name, fn, prefix, flags) [RGPU_OP_##name] = { op_##fn, prefix, 1, flags }

static const struct op_desc ops[RGPU_OP_MAX] = {
	[RGPU_OP_HELLO] = { op_hello, 0, 0, 0 },
	OPD(DEVICE_INFO, device_info, 0),
	OPDF(CTX_CREATE, ctx_create, 0, OPF_CREATES),
	OPDF(CTX_DESTROY, ctx_destroy, 0, OPF_DRAINS),
	OPD(CTX_SYNC, ctx_sync, 0),
	OPD(CTX_GET_LIMIT, ctx_get_limit, 0),
	OPD(CTX_SET_LIMIT, ctx_set_limit, 0),
	OPD(MEM_GET_INFO, mem_get_info, 0),
	OPDF(MEM_ALLOC, mem_alloc, 0, OPF_CREATES),
	OPD(MEM_FREE, mem_free, 0),
	OPD(MEMCPY_HTOD, memcpy_htod, 40),
	OPD(MEMCPY_DTOH, memcpy_dtoh, 0),
	OPD(MEMCPY_DTOD, memcpy_dtod, 0),
	OPD(MEMSET, memset, 0),
	OPDF(MODULE_LOAD, module_load, 0, OPF_CREATES),
	OPD(MODULE_UNLOAD, module_unload, 0),
	OPDF(MODULE_GET_FUNCTION, module_get_function, 0, OPF_CREATES),
	OPDF(MODULE_GET_GLOBAL, module_get_global, 0, OPF_CREATES),
	OPDF(LIBRARY_LOAD, library_load, 0, OPF_CREATES),
	OPD(LIBRARY_UNLOAD, library_unload, 0),
	OPDF(LIBRARY_GET_KERNEL, library_get_kernel, 0, OPF_CREATES),
	OPDF(KERNEL_GET_FUNCTION, kernel_get_function, 0, OPF_CREATES),
	OPDF(LIBRARY_GET_GLOBAL, library_get_global, 0, OPF_CREATES),
	OPD(LIBRARY_KERNEL_COUNT, library_kernel_count, 0),
	OPD(MODULE_FUNCTIONS, module_functions, 0),
	OPD(LAUNCH, launch, 0),
	OPD(FUNC_GET_ATTRS, func_get_attrs, 0),
	OPD(FUNC_SET_ATTR, func_set_attr, 0),
	OPD(FUNC_SET_CACHE, func_set_cache, 0),
	OPD(OCC_MAX_BLOCKS, occ_max_blocks, 0),
	OPD(OCC_DYN_SMEM, occ_dyn_smem, 0),
	OPD(OCC_MAX_CLUSTERS, occ_max_clusters, 0),
	OPDF(STREAM_CREATE, stream_create, 0, OPF_CREATES),
	OPDF(STREAM_DESTROY, stream_destroy, 0, OPF_DRAINS),
	OPD(STREAM_SYNC, stream_sync, 0),
	OPD(STREAM_QUERY, stream_query, 0),
	OPD(STREAM_WAIT_EVENT, stream_wait_event, 0),
	OPDF(EVENT_CREATE, event_create, 0, OPF_CREATES),
	OPDF(EVENT_DESTROY, event_destroy, 0, OPF_DRAINS),
	OPD(EVENT_RECORD, event_record, 0),
	OPD(EVENT_RECORD_WATCH, event_record_watch, 0),
	OPD(EVENT_SYNC, event_sync, 0),
	OPD(EVENT_QUERY, event_query, 0),
	OPD(EVENT_ELAPSED, event_elapsed, 0),
	OPDF(SHM_ATTACH, shm_attach, 0, OPF_CREATES),
	OPD(SHM_DETACH, shm_detach, 0),
	OPD(SHM_HTOD, shm_htod, 0),
	OPD(SHM_SLOT_WAIT, shm_slot_wait, 0),
	OPD(SHM_DTOH, shm_dtoh, 0),
	OPD(SHM_HOSTCOPY, shm_hostcopy, 0),
	OPDF(TRANSPORT, transport, 0, OPF_DRAINS),
	OPD(CAPTURE_BEGIN, capture_begin, 0),
	OPDF(CAPTURE_END, capture_end, 0, OPF_CREATES),
	OPD(CAPTURE_STATUS, capture_status, 0),
	OPDF(GRAPH_INSTANTIATE, graph_instantiate, 0, OPF_CREATES),
	OPDF(GRAPH_LAUNCH, graph_launch, 0, OPF_CREATES), /* host nodes: its own status */
	OPD(GRAPH_DESTROY, graph_destroy, 0),
	OPD(GRAPH_NODES, graph_nodes, 0),
	OPDF(VMEM_MAP, vmem_map, 0, OPF_CREATES),
	OPD(VMEM_UNMAP, vmem_unmap, 0),
	OPDF(VMM_CREATE, vmm_create, 0, OPF_CREATES),
	OPD(VMM_RELEASE, vmm_release, 0),
	OPD(VMM_MAP, vmm_map, 0),
	OPD(VMM_UNMAP, vmm_unmap, 0),
	OPD(VMM_ACCESS, vmm_access, 0),
	OPD(VMM_EXPORT, vmm_export, 0),
	OPDF(VMM_IMPORT, vmm_import, 0, OPF_CREATES),
	OPD(MEMSET2D, memset2d, 0),
	OPD(PEER_QUERY, peer_query, 0),
	OPD(PEER_ACCESS, peer_access, 0),
	OPD(MEMCPY_PEER, memcpy_peer, 0),
	OPDF(POOL_CREATE, pool_create, 0, OPF_CREATES),
	OPDF(POOL_DESTROY, pool_destroy, 0, OPF_DRAINS),
	OPDF(POOL_DEFAULT, pool_default, 0, OPF_CREATES),
	OPD(POOL_GET_ATTR, pool_get_attr, 0),
	OPD(POOL_SET_ATTR, pool_set_attr, 0),
	OPD(POOL_TRIM, pool_trim, 0),
	OPD(POOL_ACCESS, pool_access, 0),
	OPDF(MEM_ALLOC_ASYNC, mem_alloc_async, 0, OPF_CREATES),
	OPD(MEM_FREE_ASYNC, mem_free_async, 0),
	OPD(GPU_STATUS, gpu_status, 0),
	OPDF(HOSTFN_LAUNCH, hostfn_launch, 0, OPF_CREATES),
	OPDF(HOSTFN_WAIT, hostfn_wait, 0, OPF_CREATES),
	OPD(HOSTFN_DONE, hostfn_done, 0),
	OPD(CALL, call, 0),
	OPDF(GRAPH_OP, graph_op, 0, OPF_CREATES),
	OPD(LINK, link, 0),
	OPD(LEASE_GRANT, admin, 0),
	OPD(LEASE_RELEASE, admin, 0),
	OPD(LEASE_LIST, admin, 0),
	OPD(LEASE_STATS, admin, 0),
	OPD(LEASE_CLAIM, admin, 0),
	OPD(SESSION_LIST, admin, 0),
	OPD(SESSION_SHARE, admin, 0),
	OPDF(SESSION_SAVE, session_save, 0, OPF_DRAINS),
	OPDF(SESSION_RESTORE, session_restore, 8, OPF_DRAINS),
	OPD(MIGRATE, admin, 0),
	OPDF(MEM_ALLOC_AT, mem_alloc_at, 0, OPF_CREATES),
};

const struct op_desc *rgpud_op(unsigned op)
{
	if (op >= RGPU_OP_MAX || !ops[op].fn)
		return NULL;
	return &ops[op];
}
