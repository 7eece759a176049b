/*
 * A session's stream-ordered pools in its captured state: written at each
 * capture as the requests that make them again (poolstate.h), from the
 * live state.  The capture has drained the session, so every pending free
 * is done: such blocks go as cached.
 */
#include "poolstate.h"
#include "vmmstate.h"
#include "../appmem.h"
#include "../session.h"
#include "../mem/pool.h"
#include "proto.h"
#include "wire.h"

static int attr(struct wbuf *w, const struct pool *pl, uint32_t a, uint64_t v,
		int (*fn)(void *arg, uint16_t op, uint64_t id, const uint8_t *p, size_t n),
		void *arg)
{
	put_u64(w, pl->id);
	put_u32(w, a);
	put_u64(w, v);
	return state_req_emit(w, RGPU_OP_POOL_SET_ATTR, 0, fn, arg);
}

static int pool_requests(struct wbuf *w, const struct pool *pl,
			 int (*fn)(void *arg, uint16_t op, uint64_t id, const uint8_t *p, size_t n),
			 void *arg)
{
	put_u32(w, pl->gpu);
	if (!pl->is_default) {
		put_u64(w, pl->threshold);
		put_u64(w, pl->maxsize);
	}
	uint16_t op = pl->is_default ? RGPU_OP_POOL_DEFAULT : RGPU_OP_POOL_CREATE;
	int rc = state_req_emit(w, op, pl->id, fn, arg);
	if (!rc && pl->is_default && pl->threshold)
		rc = attr(w, pl, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, pl->threshold, fn, arg);
	static const uint32_t reuse[3] = { CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES,
					   CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC,
					   CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES };
	for (int k = 0; k < 3 && !rc; k++)
		if (!pl->reuse[k])
			rc = attr(w, pl, reuse[k], 0, fn, arg);
	uint64_t peers = pl->access & ~(1ull << pl->gpu);
	if (!rc && peers) {
		put_u64(w, pl->id);
		put_u32(w, (uint32_t)__builtin_popcountll(peers));
		for (unsigned g = 0; g < 64; g++)
			if (peers >> g & 1) {
				put_u32(w, g);
				put_u32(w, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
			}
		rc = state_req_emit(w, RGPU_OP_POOL_ACCESS, 0, fn, arg);
	}
	return rc;
}

int pool_each_request(struct session *s,
		      int (*fn)(void *arg, uint16_t op, uint64_t id, const uint8_t *p, size_t n),
		      void *arg)
{
	const struct appmem *a = s->appmem;
	if (!a || (!a->pools && !a->npblocks))
		return 0;
	pb_sweep(s);
	struct wbuf w;
	wbuf_init(&w);
	int rc = 0;
	for (const struct pool *pl = a->pools; pl && !rc; pl = pl->next)
		rc = pool_requests(&w, pl, fn, arg);
	for (size_t i = 0; i < a->npblocks && !rc; i++) {
		const struct pblock *b = &a->pblocks[i];
		put_u64(&w, b->pool ? b->pool->id : 0);
		put_u64(&w, b->addr);
		put_u64(&w, b->size);
		put_u32(&w, b->state == PB_USED);
		rc = state_req_emit(&w, RGPU_OP_POOL_ADOPT, 0, fn, arg);
	}
	wbuf_free(&w);
	return rc;
}
