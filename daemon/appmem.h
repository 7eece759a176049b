/*
 * Application memory of a session (ops_appvmm.c, ops_pool.c, ops_peer.c):
 * physical memory and mappings the application made with the VMM API,
 * stream-ordered pools and their allocations.  Device addresses are the
 * driver's, the same on client and server: VMM addresses are the client's
 * choice inside a window the session reserves here at the same place.
 */
#ifndef RGPUD_APPMEM_H
#define RGPUD_APPMEM_H

#include "driver.h"

#include <stdint.h>

struct rd;
struct session;

struct phys {
	struct phys *next;
	uint64_t id;            /* session handle (HK_VMM) */
	CUmemGenericAllocationHandle h;
	uint64_t size;
	unsigned gpu;
	int charged;            /* size is charged to the quota (not imported) */
	int maps;               /* live mappings */
	int released;           /* cuMemRelease done: gone with its last mapping */
	int exported;
	uint8_t token[16];
	uint32_t types;         /* the shareable handle types asked for */
	int fd_ok;              /* made exportable (a move within the server
				 * hands it over by reference) */
	int move_exported;      /* so exported for a move, under move_token */
	uint8_t move_token[16];
	int whole;              /* (a capture's scratch: one mapping covers it) */
};

struct amap {
	uint64_t addr, size;
	struct phys *p;
	uint64_t off;           /* where in p it begins */
	uint64_t access;        /* bit g: GPU g may access it */
};

/* A stream-ordered pool (cuMemPoolCreate, a GPU's default pool).  Its
 * memory is rgpu's (mem/pool.h: blocks of the memory manager, so it is
 * swapped, migrated and replayed like cuMemAlloc memory); the driver's
 * pool p serves only allocations made while a stream is captured (graph
 * memory, ops_pool.c). */
struct pool {
	struct pool *next;
	uint64_t id;            /* session handle (HK_POOL) */
	CUmemoryPool p;
	unsigned gpu;
	int is_default;
	uint64_t charged;       /* bytes of p's reserve charged */
	uint64_t threshold;     /* CU_MEMPOOL_ATTR_RELEASE_THRESHOLD */
	uint64_t maxsize;       /* 0: no limit */
	int reuse[3];           /* the three REUSE_* attributes */
	uint64_t reserved, used, reserved_high, used_high;
	uint64_t access;        /* bit g: GPU g given access (cuMemPoolSetAccess) */
};

/* an allocation made from the driver's pool during a stream capture */
struct palloc {
	uint64_t addr, size;
	struct pool *pool;
};

struct appmem {
	struct phys *phys;
	struct amap *maps;      /* sorted by addr, never overlapping */
	size_t nmaps, capmaps;
	uint64_t window;        /* the VMM window, once reserved */
	struct pool *pools;
	struct palloc *pallocs; /* captured allocations, sorted by addr */
	size_t npallocs, cappallocs;
	struct pblock *pblocks; /* rgpu's pool blocks, sorted by addr (mem/pool.h) */
	size_t npblocks, cappblocks;
	size_t npending;        /* of them PB_PENDING */
};

/* The session's state, created on first use (NULL: out of memory). */
struct appmem *appmem_of(struct session *s);
/* [p, p+n) is accessible application memory of the session: mapped VMM
 * memory with access set, or a captured stream-ordered allocation (rgpu's
 * pool blocks are session allocations). */
int appmem_owns_range(struct session *s, uint64_t p, uint64_t n);
/* Frees everything at session end (refunds the quota). */
void appmem_cleanup(struct session *s);
/* ops_pool.c: pools at session end */
void pool_cleanup(struct session *s, struct appmem *a);
int appmem_palloc_find(struct appmem *a, uint64_t p);
/* cuMemFree of a pool allocation at p (a block or a captured one): freed
 * now (a CUresult), or -1 when p is none. */
int pool_free_now(struct session *s, uint64_t p);
/* Reads a request's access descriptors (u32 n, then n times u32 gpu, u32
 * flags: the rest of the request) into desc (room for RGPUD_MAX_GPUS),
 * their count in *n, each GPU admitted for the session: 0, or the
 * request's answer (OP_DROP for a malformed one, or a CUresult). */
int appmem_read_access(struct session *s, struct rd *r, CUmemAccessDesc *desc, uint32_t *n);

#endif
