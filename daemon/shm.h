/* Shared memory with a same-host client (sessions over the Unix socket):
 * a staging ring for pageable copies, and the client's pinned host memory,
 * both registered with the driver so the GPU reads and writes them
 * directly.  The ring is a shared buffer-plus-event pool (lib/xfer.h). */
#ifndef RGPUD_SHM_H
#define RGPUD_SHM_H

#include "xfer.h"

#include <stddef.h>
#include <stdint.h>

struct session;

#define SHM_MAPS_MAX 1024
#define SHM_SLOTS_MAX 64

struct shm_map {
	uint64_t cbase; /* the client's address of the region */
	uint8_t *sbase; /* ours */
	size_t size;
	int kind;       /* 1 staging ring, 2 host memory, 3 registered (a shared file) */
	int registered; /* 1 pinned with the driver, -1 could not be */
	int live;       /* host memory mapped here at the client's address and
			 * pinned with a device mapping there: kernels, memsets
			 * and copies reach the client's own pages */
};

struct shm_state {
	struct shm_map map[SHM_MAPS_MAX];
	int n;
	int ring;             /* index of the staging ring's map, or -1 */
	struct xfer_pool pool; /* the ring's slots */
	uint64_t mapped;      /* bytes of client memory mapped (and pinnable) */
};

/* Per-session cap on client memory shared (and so pinned) by rgpud:
 * RGPUD_MAX_PINNED, default a quarter of this machine's memory. */
uint64_t shm_pin_cap(void);

/* The same-host client's open file fd (by its number in the client),
 * opened here if it is the client's own regular file of at least size
 * bytes: a descriptor, or -1 (logged). */
int shm_client_fd(struct session *s, uint32_t fd, uint64_t size);

/* [p, p + n) is the client's host memory mapped live here (shm_map.live). */
int shm_owns_live(const struct session *s, uint64_t p, uint64_t n);

void shm_cleanup(struct session *s);
/* A context is going away: its slot events go with it. */
void shm_forget_ctx(struct session *s, uint64_t ctx);

#endif
