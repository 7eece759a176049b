/*
 * The memory a capture moves and a restore re-creates, behind a narrow
 * interface: iterate a session's allocations; re-create one at the same
 * address.  The memory manager (daemon/mem/mem.h, issue 9) serves exactly
 * this once it lands; until then memif.c does it with what the driver has
 * (docs/design.md, "Migration").
 */
#ifndef RGPUD_MIGRATE_MEMIF_H
#define RGPUD_MIGRATE_MEMIF_H

#include <stdint.h>

struct session;

struct memif_alloc {
	uint64_t dptr, size, ctx;
	unsigned dev;
	int kind; /* MEMK_* (snapshot.h) */
};

/* Visits every allocation of s (cuMemAlloc'd, fixed-address, globals);
 * stops at a nonzero return and returns it. */
int memif_each(struct session *s, int (*fn)(void *arg, const struct memif_alloc *a), void *arg);

/* Device memory of size bytes at exactly dptr on dev, owned by context ctx,
 * charged to the session's quota and registered as cuMemAlloc'd memory.
 * A CUresult; CUDA_ERROR_INVALID_VALUE when the address is taken here. */
int memif_restore_at(struct session *s, uint64_t ctx, unsigned dev, uint64_t dptr, uint64_t size);

/* The emulated device places its next mapping at addr (0: anywhere); -1
 * on a real driver, which has no such hook. */
int migrate_place_next(uint64_t addr);

/* Frees what memif_restore_at mapped (the session is ending). */
void memif_cleanup(struct session *s);

#endif
