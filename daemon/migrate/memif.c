/*
 * The narrow memory interface (memif.h), served by the memory manager
 * (mem/mem.h): a session's cuMemAlloc'd memory lives in a reserved range
 * of the worker, and mem_restore_at re-creates an allocation at its
 * address in another worker (which adopts the source's range).
 *
 * Without the VMM API (a driver that lacks it) the memory manager hands
 * out plain cuMemAlloc memory: then the emulated device places the next
 * mapping where it is told (cuRgpuEmuPlaceNext, a test hook of emu/), and
 * a real driver gets 2 MiB granules mapped at the address if it grants
 * them (else the restore fails, saying so).
 */
#include "memif.h"
#include "snapshot.h"
#include "vmmstate.h"
#include "../gate.h"
#include "../rgpud.h"
#include "../session.h"
#include "../mem/mem.h"
#include "log.h"

#include <dlfcn.h>
#include <stdlib.h>

#define D (&rgpud_server.drv)
#define GRAIN (2ull << 20)

struct memif_run {
	uint64_t addr, size;
	CUmemGenericAllocationHandle h;
	struct memif_run *next;
};

int memif_each(struct session *s, int (*fn)(void *arg, const struct memif_alloc *a), void *arg)
{
	for (size_t i = 0; i < s->nalloc; i++) {
		const struct alloc *a = &s->allocs[i];
		struct memif_alloc m = { a->dptr, a->size, a->ctx, a->dev,
					 a->module ? MEMK_GLOBAL
						   : vmem_owns(s, a->dptr) ? MEMK_FIXED : MEMK_ALLOC };
		int rc = fn(arg, &m);
		if (rc)
			return rc;
	}
	/* the application's VMM mappings (vmmstate.h) */
	return vmm_each_map(s, fn, arg);
}

typedef CUresult (*place_fn)(CUdeviceptr);

static place_fn emu_place(void)
{
	static place_fn fn;
	static int looked;
	if (!looked) {
		looked = 1;
		if (D->dl)
			*(void **)&fn = dlsym(D->dl, "cuRgpuEmuPlaceNext");
	}
	return fn;
}

int migrate_place_next(uint64_t addr)
{
	place_fn fn = emu_place();
	if (!fn)
		return -1;
	fn(addr);
	return 0;
}

static int mapped(struct session *s, uint64_t g)
{
	for (struct memif_run *r = s->memif_runs; r; r = r->next)
		if (g >= r->addr && g < r->addr + r->size)
			return 1;
	return 0;
}

/* Maps the granules [lo, hi) that are not mapped yet, one run each. */
static int map_granules(struct session *s, unsigned dev, uint64_t lo, uint64_t hi)
{
	if (!D->have_vmm)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				     .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = (int)dev } };
	for (uint64_t g = lo; g < hi; g += GRAIN) {
		if (mapped(s, g))
			continue;
		CUdeviceptr got = 0;
		int rc = D->cuMemAddressReserve(&got, GRAIN, GRAIN, g, 0);
		if (!rc && got != g) {
			D->cuMemAddressFree(got, GRAIN);
			rc = CUDA_ERROR_INVALID_VALUE;
		}
		if (rc)
			return rc;
		CUmemGenericAllocationHandle h = 0;
		rc = D->cuMemCreate(&h, GRAIN, &prop, 0);
		if (!rc && (rc = D->cuMemMap(g, GRAIN, 0, h, 0)))
			D->cuMemRelease(h);
		if (!rc) {
			CUmemAccessDesc acc = { .location = prop.location,
						.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
			if ((rc = D->cuMemSetAccess(g, GRAIN, &acc, 1))) {
				D->cuMemUnmap(g, GRAIN);
				D->cuMemRelease(h);
			}
		}
		struct memif_run *r = rc ? NULL : malloc(sizeof(*r));
		if (!rc && !r) {
			D->cuMemUnmap(g, GRAIN);
			D->cuMemRelease(h);
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		}
		if (rc) {
			D->cuMemAddressFree(g, GRAIN);
			return rc;
		}
		*r = (struct memif_run){ g, GRAIN, h, s->memif_runs };
		s->memif_runs = r;
	}
	return 0;
}

int memif_restore_at(struct session *s, uint64_t ctx, unsigned dev, uint64_t dptr, uint64_t size)
{
	if (!size || dptr + size < dptr)
		return CUDA_ERROR_INVALID_VALUE;
	if (gate_charge_bytes(dev, size) < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	int rc;
	CUdeviceptr got = 0;
	if (D->have_vmm) {
		rc = mem_restore_at(s, ctx, dev, dptr, size, NULL);
	} else if (emu_place()) {
		migrate_place_next(dptr);
		rc = D->cuMemAlloc_v2(&got, size);
		if (!rc && got != dptr) {
			D->cuMemFree_v2(got);
			rc = CUDA_ERROR_INVALID_VALUE;
		}
		migrate_place_next(0);
	} else {
		rc = map_granules(s, dev, dptr & ~(GRAIN - 1), (dptr + size + GRAIN - 1) & ~(GRAIN - 1));
	}
	if (!rc && session_alloc_add(s, dptr, size, ctx, 0, dev) < 0)
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	if (rc) {
		gate_refund_bytes(dev, size);
		log_warn("%s: cannot re-create %llu bytes of device memory at %#llx: %s", s->name,
			 (unsigned long long)size, (unsigned long long)dptr, rgpud_cu_errname(D, rc));
	}
	return rc;
}

void memif_cleanup(struct session *s)
{
	while (s->memif_runs) {
		struct memif_run *r = s->memif_runs;
		s->memif_runs = r->next;
		D->cuMemUnmap(r->addr, r->size);
		D->cuMemRelease(r->h);
		D->cuMemAddressFree(r->addr, r->size);
		free(r);
	}
}
