/*
 * A session's application VMM memory (cuMemCreate, cuMemMap,
 * cuMemSetAccess: ops_appvmm.c) in its captured state: written at each
 * capture as the requests that make it again, from the live state (no
 * journal to keep through unmaps and releases), ids as the client knows
 * them; its bytes go as MEMORY records of its mappings (memif.c).  What is
 * not captured so is refused (vmmstate.h).
 */
#include "vmmstate.h"
#include "memif.h"
#include "snapshot.h"
#include "../appmem.h"
#include "../session.h"
#include "../share.h"
#include "proto.h"
#include "wire.h"

#include <string.h>

/* Whether the mappings of p cover all of it (bytes outside them would be
 * lost: they are captured through the mappings).  (Quadratic; the
 * callers ask only for memory no single mapping covers whole.) */
static int mapped_whole(const struct appmem *a, const struct phys *p)
{
	uint64_t at = 0;
	for (int more = 1; more && at < p->size;) {
		more = 0;
		for (size_t i = 0; i < a->nmaps; i++) {
			const struct amap *m = &a->maps[i];
			if (m->p == p && m->off <= at && m->off + m->size > at) {
				at = m->off + m->size;
				more = 1;
			}
		}
	}
	return at >= p->size;
}

const char *vmm_unmovable(struct session *s)
{
	const struct appmem *a = s->appmem;
	if (!a)
		return NULL;
	if (a->npallocs)
		return "the session holds graph memory allocated during a stream capture (or from "
		       "a pool of another GPU than its stream's), which is not migrated yet";
	/* (the usual case in one pass: each piece mapped once, whole) */
	for (struct phys *p = a->phys; p; p = p->next)
		p->whole = 0;
	for (size_t i = 0; i < a->nmaps; i++)
		if (!a->maps[i].off && a->maps[i].size == a->maps[i].p->size)
			a->maps[i].p->whole = 1;
	for (const struct phys *p = a->phys; p; p = p->next) {
		if (p->exported || !p->charged)
			return "the session shares application VMM memory with another process "
			       "(exported or imported), which is not migrated yet";
		if (!p->whole && !mapped_whole(a, p))
			return "the session holds application VMM memory that is not mapped whole, "
			       "which is not migrated yet";
	}
	return NULL;
}

int state_req_emit(struct wbuf *w, uint16_t op, uint64_t id,
		   int (*fn)(void *arg, uint16_t op, uint64_t id, const uint8_t *p, size_t n),
		   void *arg)
{
	int rc = w->oom ? -1 : fn(arg, op, id, w->data, w->len);
	wbuf_reset(w);
	return rc;
}

/* The mappings of p (NULL: of every handle not released), VMM_MAP naming
 * the handle by id (0 for "the one made last" with p), then their access
 * as each has it (read-only access is given as read and write: the mask
 * keeps no flags). */
static int maps_of(const struct appmem *a, const struct phys *p, struct wbuf *w,
		   int (*fn)(void *arg, uint16_t op, uint64_t id, const uint8_t *p, size_t n),
		   void *arg)
{
	int rc = 0;
	for (size_t i = 0; i < a->nmaps && !rc; i++) {
		const struct amap *m = &a->maps[i];
		if (p ? m->p != p : m->p->released)
			continue;
		put_u64(w, m->addr);
		put_u64(w, m->size);
		put_u64(w, m->off);
		put_u64(w, p ? 0 : m->p->id);
		rc = state_req_emit(w, RGPU_OP_VMM_MAP, 0, fn, arg);
	}
	for (size_t i = 0; i < a->nmaps && !rc; i++) {
		const struct amap *m = &a->maps[i];
		if ((p ? m->p != p : m->p->released) || !m->access)
			continue;
		uint32_t n = (uint32_t)__builtin_popcountll(m->access);
		put_u64(w, m->addr);
		put_u64(w, m->size);
		put_u32(w, n);
		for (unsigned g = 0; g < 64; g++)
			if (m->access >> g & 1) {
				put_u32(w, g);
				put_u32(w, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
			}
		rc = state_req_emit(w, RGPU_OP_VMM_ACCESS, 0, fn, arg);
	}
	return rc;
}

int vmm_each_request(struct session *s,
		     int (*fn)(void *arg, uint16_t op, uint64_t id, const uint8_t *p, size_t n),
		     void *arg)
{
	const struct appmem *a = s->appmem;
	if (!a)
		return 0;
	struct wbuf w;
	wbuf_init(&w);
	int rc = 0;
	/* physical memory the client holds a handle to: made again with that
	 * handle's id, then mapped */
	for (const struct phys *p = a->phys; p && !rc; p = p->next) {
		if (p->released)
			continue;
		put_u32(&w, p->gpu);
		put_u64(&w, p->size);
		put_u32(&w, p->types);
		rc = state_req_emit(&w, RGPU_OP_VMM_CREATE, p->id, fn, arg);
	}
	if (!rc)
		rc = maps_of(a, NULL, &w, fn, arg);
	/* a handle released while mapped: its id may name something else by
	 * now, so it is made under a new one (id 0: the restore makes one),
	 * mapped and released again at once */
	for (const struct phys *p = a->phys; p && !rc; p = p->next) {
		if (!p->released)
			continue;
		put_u32(&w, p->gpu);
		put_u64(&w, p->size);
		put_u32(&w, p->types);
		if (!(rc = state_req_emit(&w, RGPU_OP_VMM_CREATE, 0, fn, arg)) &&
		    !(rc = maps_of(a, p, &w, fn, arg))) {
			put_u64(&w, 0);
			rc = state_req_emit(&w, RGPU_OP_VMM_RELEASE, 0, fn, arg);
		}
	}
	wbuf_free(&w);
	return rc;
}

int vmm_export_map(struct session *s, uint64_t addr, uint8_t token[16], uint64_t *va,
		   uint64_t *len)
{
	const struct appmem *a = s->appmem;
	const struct amap *m = NULL;
	for (size_t i = 0; a && i < a->nmaps && !m; i++)
		if (a->maps[i].addr == addr)
			m = &a->maps[i];
	struct phys *p = m ? m->p : NULL;
	if (!p || !p->fd_ok || p->released)
		return CUDA_ERROR_NOT_SUPPORTED;
	int rc = gate_share_export(p->h, p->gpu, p->size, p->move_token, &p->move_exported);
	if (rc)
		return rc;
	memcpy(token, p->move_token, 16);
	*va = m->addr - m->off; /* where p's first byte would be mapped */
	*len = p->size;
	return CUDA_SUCCESS;
}

void vmm_export_drop(struct session *s)
{
	for (struct phys *p = s->appmem ? s->appmem->phys : NULL; p; p = p->next)
		if (p->move_exported) {
			gate_share_drop(p->move_token);
			p->move_exported = 0;
		}
}

/* A context of the session on a GPU in mask (its id), 0 if none. */
static uint64_t ctx_on(struct session *s, uint64_t mask)
{
	for (uint32_t i = 0; i < s->ht.n; i++) {
		const struct hentry *e = &s->ht.e[i];
		const struct ctx_state *cs = e->kind == HK_CTX ? e->extra : NULL;
		if (cs && cs->dev < 64 && (mask >> cs->dev & 1))
			return ht_id_at(&s->ht, i);
	}
	return 0;
}

int vmm_each_map(struct session *s, int (*fn)(void *arg, const struct memif_alloc *a), void *arg)
{
	const struct appmem *a = s->appmem;
	for (size_t i = 0; a && i < a->nmaps; i++) {
		const struct amap *m = &a->maps[i];
		/* (no access: no byte of it can have been written or read) */
		uint64_t ctx = m->access ? ctx_on(s, m->access) : 0;
		if (!ctx)
			continue;
		struct memif_alloc ma = { m->addr, m->size, ctx, m->p->gpu, MEMK_FIXED };
		int rc = fn(arg, &ma);
		if (rc)
			return rc;
	}
	return 0;
}
