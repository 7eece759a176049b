/* Session-local handle table.  Clients never see server pointers: each
 * object gets an id (generation << 32 | slot+1), checked for kind and
 * liveness on every use, so a forged or stale id is an error, not a crash. */
#ifndef RGPUD_HANDLES_H
#define RGPUD_HANDLES_H

#include <stddef.h>
#include <stdint.h>

enum hkind {
	HK_FREE = 0,
	HK_CTX,
	HK_MODULE,
	HK_FUNC,
	HK_LIBRARY,
	HK_KERNEL,
	HK_STREAM,
	HK_EVENT,
	HK_GRAPH,
	HK_GRAPHEXEC,
	HK_VMM,     /* application physical memory (ops_appvmm.c) */
	HK_POOL,    /* stream-ordered memory pool (ops_pool.c) */
	HK_GNODE,     /* a node of a graph (parent: the graph) */
	HK_ARRAY,     /* a CUDA array (ops_array.c) */
	HK_RESDESC,   /* a device resource descriptor (green contexts); the
		       * driver has no call that destroys one */
	HK_HELD,      /* a destroyed stream's or event's slot, kept from reuse
		       * while graphs built with it may be replayed (a move
		       * makes it again: migrate/journal.c) */
};

struct hentry {
	enum hkind kind;
	uint32_t gen;
	void *obj;      /* CUcontext, CUmodule, ... */
	uint64_t ctx;   /* owning context handle (0 for libraries, kernels) */
	uint64_t parent; /* module or library a function or kernel belongs to */
	void *extra;    /* kind-specific data, freed with free() */
};

struct htable {
	struct hentry *e;
	uint32_t n, cap;
	uint32_t *freel;
	uint32_t nfree;
	/* migration (daemon/migrate/): when set, the next ht_add creates
	 * exactly this id, so a restored session keeps its clients' handles;
	 * force[0..nforce) the ids the next ht_adds create, in order (a
	 * graph request makes several: journal.c) */
	uint64_t force_id;
	const uint64_t *force;
	uint32_t nforce;
	/* the ids made since ht_made_reset (the request being served) */
	uint64_t *made;
	uint32_t nmade, capmade;
	int made_lost; /* one did not fit (out of memory) */
};

void ht_init(struct htable *t);
void ht_free(struct htable *t);
/* Forgets the ids made so far (the next request's begin). */
static inline void ht_made_reset(struct htable *t)
{
	t->nmade = 0;
	t->made_lost = 0;
}
/* Returns the new id, or 0 when out of memory. */
uint64_t ht_add(struct htable *t, enum hkind kind, void *obj, uint64_t ctx, void *extra);
/* The id of the object in slot i (whatever its kind). */
static inline uint64_t ht_id_at(const struct htable *t, uint32_t i)
{
	return (uint64_t)t->e[i].gen << 32 | (i + 1);
}
/* The entry, or NULL if id is not a live object of that kind. */
struct hentry *ht_get(struct htable *t, uint64_t id, enum hkind kind);
void ht_del(struct htable *t, uint64_t id);
/* Migration: the table's layout (generation of every slot, the free list
 * in order) as captured, so that ids created after a restore are the ones
 * the source would have made.  gens has n entries; 0, or -1 (no memory,
 * or a live entry where the layout says free). */
int ht_set_layout(struct htable *t, uint32_t n, const uint32_t *gens, const uint32_t *freel,
		  uint32_t nfree);
/* Keeps the slot of id, deleted just now (the last freed), from reuse:
 * 0, or -1 when it is not so. */
int ht_hold(struct htable *t, uint64_t id);
/* Frees the held slots, in slot order. */
void ht_unhold_all(struct htable *t);
/* Deletes every entry whose parent is id (a module's or library's
 * functions and kernels, which die with it). */
void ht_del_children(struct htable *t, uint64_t parent);

#endif
