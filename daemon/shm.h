/* Shared memory with a same-host client (sessions over the Unix socket):
 * a staging ring for pageable copies, and the client's pinned host memory,
 * both registered with the driver so the GPU reads and writes them
 * directly. */
#ifndef RGPUD_SHM_H
#define RGPUD_SHM_H

#include <stddef.h>
#include <stdint.h>

struct session;

#define SHM_MAPS_MAX 1024
#define SHM_SLOTS_MAX 64

struct shm_map {
	uint64_t cbase; /* the client's address of the region */
	uint8_t *sbase; /* ours */
	size_t size;
	int kind;       /* 1 staging ring, 2 host memory */
	int registered; /* 1 pinned with the driver, -1 could not be */
};

struct shm_state {
	struct shm_map map[SHM_MAPS_MAX];
	int n;
	int ring;                     /* index of the staging ring, or -1 */
	uint32_t nslots;
	uint32_t *slot_state;         /* in the shared page */
	void *slot_ev[SHM_SLOTS_MAX]; /* CUevent after the GPU's read */
	uint64_t slot_ctx[SHM_SLOTS_MAX];
	uint64_t slot_seq[SHM_SLOTS_MAX]; /* 0: not in flight */
	uint64_t seq;
};

void shm_cleanup(struct session *s);
/* A context is going away: its slot events go with it. */
void shm_forget_ctx(struct session *s, uint64_t ctx);

#endif
