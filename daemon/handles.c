#include "handles.h"

#include <stdlib.h>
#include <string.h>

void ht_init(struct htable *t) { memset(t, 0, sizeof(*t)); }

void ht_free(struct htable *t)
{
	for (uint32_t i = 0; i < t->n; i++)
		if (t->e[i].kind != HK_FREE)
			free(t->e[i].extra);
	free(t->e);
	free(t->freel);
	free(t->made);
	ht_init(t);
}

static int ht_grow(struct htable *t, uint32_t need)
{
	if (need <= t->cap)
		return 0;
	uint32_t cap = t->cap ? t->cap : 64;
	while (cap < need) {
		if (cap > (1u << 29))
			return -1;
		cap *= 2;
	}
	struct hentry *e = realloc(t->e, cap * sizeof(*e));
	if (!e)
		return -1;
	t->e = e;
	uint32_t *fl = realloc(t->freel, cap * sizeof(*fl));
	if (!fl)
		return -1;
	t->freel = fl;
	t->cap = cap;
	return 0;
}

/* The forced id's slot, taken off the free list (restore, ht_set_layout
 * fixes the free list afterwards). */
static int ht_take_forced(struct htable *t, uint32_t slot)
{
	if (slot >= t->n) {
		if (ht_grow(t, slot + 1) < 0)
			return -1;
		for (uint32_t i = t->n; i < slot; i++) {
			t->e[i] = (struct hentry){ .kind = HK_FREE };
			t->freel[t->nfree++] = i;
		}
		t->n = slot + 1;
		return 0;
	}
	if (t->e[slot].kind != HK_FREE)
		return -1;
	for (uint32_t i = 0; i < t->nfree; i++)
		if (t->freel[i] == slot) {
			t->freel[i] = t->freel[--t->nfree];
			break;
		}
	return 0;
}

int ht_set_layout(struct htable *t, uint32_t n, const uint32_t *gens, const uint32_t *freel,
		  uint32_t nfree)
{
	/* slots past the source's end that were used and freed again here
	 * (a restore's temporary objects) carry nothing */
	while (t->n > n && t->e[t->n - 1].kind == HK_FREE)
		t->n--;
	if (n < t->n || nfree > n || ht_grow(t, n ? n : 1) < 0)
		return -1;
	for (uint32_t i = t->n; i < n; i++)
		t->e[i] = (struct hentry){ .kind = HK_FREE };
	t->n = n;
	for (uint32_t i = 0; i < nfree; i++)
		if (freel[i] >= n || t->e[freel[i]].kind != HK_FREE)
			return -1;
	for (uint32_t i = 0; i < n; i++) {
		if (t->e[i].kind == HK_FREE)
			t->e[i].gen = gens[i];
		else if (t->e[i].gen != gens[i])
			return -1;
	}
	memcpy(t->freel, freel, nfree * sizeof(*freel));
	t->nfree = nfree;
	return 0;
}

static void made_note(struct htable *t, uint64_t id)
{
	if (t->nmade == t->capmade) {
		uint32_t cap = t->capmade ? 2 * t->capmade : 16;
		uint64_t *v = realloc(t->made, cap * sizeof(*v));
		if (!v) {
			t->made_lost = 1;
			return;
		}
		t->made = v;
		t->capmade = cap;
	}
	t->made[t->nmade++] = id;
}

static uint64_t add(struct htable *t, enum hkind kind, void *obj, uint64_t ctx, void *extra);

uint64_t ht_add(struct htable *t, enum hkind kind, void *obj, uint64_t ctx, void *extra)
{
	uint64_t id = add(t, kind, obj, ctx, extra);
	if (id)
		made_note(t, id);
	return id;
}

static uint64_t add(struct htable *t, enum hkind kind, void *obj, uint64_t ctx, void *extra)
{
	uint32_t slot;
	if (!t->force_id && t->nforce) {
		t->force_id = *t->force++;
		t->nforce--;
	}
	if (t->force_id) {
		uint64_t id = t->force_id;
		t->force_id = 0;
		slot = (uint32_t)id - 1;
		if ((uint32_t)id == 0 || ht_take_forced(t, slot) < 0)
			return 0;
		struct hentry *h = &t->e[slot];
		*h = (struct hentry){ .kind = kind, .gen = (uint32_t)(id >> 32), .obj = obj,
				      .ctx = ctx, .extra = extra };
		return id;
	}
	if (t->nfree) {
		slot = t->freel[--t->nfree];
	} else {
		if (t->n == t->cap) {
			uint32_t cap = t->cap ? t->cap * 2 : 64;
			if (cap > (1u << 30))
				return 0;
			struct hentry *e = realloc(t->e, cap * sizeof(*e));
			if (!e)
				return 0;
			uint32_t *fl = realloc(t->freel, cap * sizeof(*fl));
			if (!fl) {
				t->e = e;
				return 0;
			}
			t->e = e;
			t->freel = fl;
			t->cap = cap;
		}
		slot = t->n++;
		t->e[slot].gen = 0;
	}
	struct hentry *h = &t->e[slot];
	h->gen++;
	h->kind = kind;
	h->obj = obj;
	h->ctx = ctx;
	h->parent = 0;
	h->extra = extra;
	return ht_id_at(t, slot);
}

struct hentry *ht_get(struct htable *t, uint64_t id, enum hkind kind)
{
	uint32_t slot = (uint32_t)id;
	uint32_t gen = (uint32_t)(id >> 32);
	if (slot == 0 || slot > t->n)
		return NULL;
	struct hentry *h = &t->e[slot - 1];
	if (h->kind != kind || h->gen != gen)
		return NULL;
	return h;
}

void ht_del(struct htable *t, uint64_t id)
{
	uint32_t slot = (uint32_t)id;
	if (slot == 0 || slot > t->n)
		return;
	struct hentry *h = &t->e[slot - 1];
	if (h->kind == HK_FREE || h->gen != (uint32_t)(id >> 32))
		return;
	free(h->extra);
	h->extra = NULL;
	h->kind = HK_FREE;
	h->obj = NULL;
	t->freel[t->nfree++] = slot - 1;
}

int ht_hold(struct htable *t, uint64_t id)
{
	uint32_t slot = (uint32_t)id;
	if (slot == 0 || slot > t->n || !t->nfree || t->freel[t->nfree - 1] != slot - 1)
		return -1;
	struct hentry *h = &t->e[slot - 1];
	if (h->kind != HK_FREE || h->gen != (uint32_t)(id >> 32))
		return -1;
	t->nfree--;
	h->kind = HK_HELD;
	return 0;
}

void ht_unhold_all(struct htable *t)
{
	for (uint32_t i = 0; i < t->n; i++)
		if (t->e[i].kind == HK_HELD) {
			t->e[i].kind = HK_FREE;
			t->freel[t->nfree++] = i;
		}
}

void ht_del_children(struct htable *t, uint64_t parent)
{
	if (!parent)
		return;
	for (uint32_t i = 0; i < t->n; i++) {
		struct hentry *h = &t->e[i];
		if (h->kind != HK_FREE && h->parent == parent)
			ht_del(t, ht_id_at(t, i));
	}
}
