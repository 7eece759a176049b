/* Device memory at the client's chosen address, through the driver's
 * virtual memory management: managed and mapped host memory get a device
 * copy at the very address the application uses, so pointers inside data
 * and kernel arguments mean the same on both sides (the GMAC idea). */
#include "log.h"
#include "rgpud.h"
#include "gate.h"
#include "session.h"

#include <stdlib.h>

#define D (&rgpud_server.drv)
#define VMEM_GRAIN (2u << 20)
/* The shared range the client allocates such memory in (coherence.c;
 * 0x600000000000 unless RGPU_VA_BASE moves it).  The driver honours a fixed
 * address for one large reservation of this range (NOTES.md), not for
 * small ones placed at will, so the session reserves the client's whole
 * window (16 TiB, aligned) at its first request and maps pieces into it. */
#define VMEM_WINDOW_SIZE (16ull << 40)

struct vmem {
	uint64_t addr, size;
	CUmemGenericAllocationHandle h;
	uint64_t ctx;
	unsigned dev;
	struct vmem *next;
};

int op_vmem_map(struct session *s, const struct rgpu_hdr *hd, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX);
	uint64_t addr = get_u64(r), size = get_u64(r);
	int rc = req_enter(s, r, &q, HK_FREE);
	if (rc)
		return rc;
	uint64_t ctx = q.ctx;
	struct ctx_state *cs = q.cs;
	if (!D->have_vmm)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (!addr || !size || addr % VMEM_GRAIN || size % VMEM_GRAIN || addr + size < addr)
		return CUDA_ERROR_INVALID_VALUE;
	if (gate_charge(cs->dev, (int64_t)size) < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				     .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE,
						   .id = (int)cs->dev } };
	uint64_t base = addr & ~(VMEM_WINDOW_SIZE - 1);
	if ((s->vmem_window && base != s->vmem_window) || addr + size > base + VMEM_WINDOW_SIZE ||
	    base == 0) {
		gate_charge(cs->dev, -(int64_t)size);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (!s->vmem_window) {
		CUdeviceptr got = 0;
		rc = D->cuMemAddressReserve(&got, VMEM_WINDOW_SIZE, VMEM_GRAIN, base, 0);
		if (!rc && got != base) {
			/* taken here: refuse, never move */
			log_warn("%s: the driver placed the shared window at %#llx, not %#llx",
				 s->name, (unsigned long long)got, (unsigned long long)base);
			D->cuMemAddressFree(got, VMEM_WINDOW_SIZE);
			rc = CUDA_ERROR_INVALID_VALUE;
		}
		if (rc) {
			gate_charge(cs->dev, -(int64_t)size);
			return rc;
		}
		s->vmem_window = got;
	}
	/* physical memory, mapped at addr inside the window, made usable */
	CUmemGenericAllocationHandle h = 0;
	int created = 0, mapped = 0;
	rc = D->cuMemCreate(&h, size, &prop, 0);
	created = rc == CUDA_SUCCESS;
	if (!rc)
		mapped = (rc = D->cuMemMap(addr, size, 0, h, 0)) == CUDA_SUCCESS;
	if (!rc) {
		/* host memory is every GPU's: its device copy is usable from
		 * the GPUs that reach this one (kernels on several GPUs share
		 * a pinned flag: p2pBandwidthLatencyTest) */
		CUmemAccessDesc acc[RGPUD_MAX_GPUS];
		size_t n = 0;
		acc[n++] = (CUmemAccessDesc){ .location = prop.location,
					      .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
		for (int d = 0; d < rgpud_server.ndev && d < RGPUD_MAX_GPUS && n < RGPUD_MAX_GPUS; d++) {
			int can = 0;
			if ((unsigned)d != cs->dev && D->cuDeviceCanAccessPeer(&can, d, (int)cs->dev) == 0 &&
			    can)
				acc[n++] = (CUmemAccessDesc){
					.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = d },
					.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
		}
		rc = D->cuMemSetAccess(addr, size, acc, n);
	}
	struct vmem *v = rc ? NULL : calloc(1, sizeof(*v));
	if (!rc && (!v || session_alloc_add(s, addr, size, ctx, 0, cs->dev) < 0))
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	if (rc) {
		if (mapped)
			D->cuMemUnmap(addr, size);
		if (created)
			D->cuMemRelease(h);
		free(v);
		gate_charge(cs->dev, -(int64_t)size);
		return rc;
	}
	*v = (struct vmem){ addr, size, h, ctx, cs->dev, s->vmem };
	s->vmem = v;
	return CUDA_SUCCESS;
}

static void vmem_release(struct vmem *v)
{
	D->cuMemUnmap(v->addr, v->size);
	D->cuMemRelease(v->h);
}

int op_vmem_unmap(struct session *s, const struct rgpu_hdr *hd, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX);
	uint64_t addr = get_u64(r);
	int rc = req_enter(s, r, &q, HK_FREE);
	if (rc)
		return rc;
	for (struct vmem **pp = &s->vmem; *pp; pp = &(*pp)->next) {
		struct vmem *v = *pp;
		if (v->addr != addr)
			continue;
		/* the GPU may still use it: wait, as cuMemFree does */
		D->cuCtxSynchronize();
		session_alloc_del(s, addr);
		vmem_release(v);
		gate_charge(v->dev, -(int64_t)v->size);
		*pp = v->next;
		free(v);
		return CUDA_SUCCESS;
	}
	return CUDA_ERROR_INVALID_VALUE;
}

void vmem_cleanup(struct session *s)
{
	while (s->vmem) {
		struct vmem *v = s->vmem;
		s->vmem = v->next;
		vmem_release(v);
		free(v);
	}
	if (s->vmem_window)
		D->cuMemAddressFree(s->vmem_window, VMEM_WINDOW_SIZE);
	s->vmem_window = 0;
}

int vmem_owns(struct session *s, uint64_t addr)
{
	for (struct vmem *v = s->vmem; v; v = v->next)
		if (v->addr == addr)
			return 1;
	return 0;
}

/* A context is going away: its fixed-address memory goes with it (the
 * caller has already refunded it with the context's allocations). */
void vmem_forget_ctx(struct session *s, uint64_t ctx)
{
	for (struct vmem **pp = &s->vmem; *pp;) {
		struct vmem *v = *pp;
		if (v->ctx == ctx) {
			vmem_release(v);
			*pp = v->next;
			free(v);
		} else {
			pp = &v->next;
		}
	}
}
