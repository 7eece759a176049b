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
	ht_init(t);
}

uint64_t ht_add(struct htable *t, enum hkind kind, void *obj, uint64_t ctx, void *extra)
{
	uint32_t slot;
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
	return ((uint64_t)h->gen << 32) | (uint64_t)(slot + 1);
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

void ht_del_children(struct htable *t, uint64_t parent)
{
	if (!parent)
		return;
	for (uint32_t i = 0; i < t->n; i++) {
		struct hentry *h = &t->e[i];
		if (h->kind != HK_FREE && h->parent == parent)
			ht_del(t, ((uint64_t)h->gen << 32) | (i + 1));
	}
}
