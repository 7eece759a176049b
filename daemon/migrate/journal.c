/*
 * The creation journal: for every live object of a session, the request
 * that made it (module and library images included: a restore loads them
 * again from these bytes), and the requests that changed it since
 * (function attributes, context limits).  An object's records go when it
 * is destroyed, with those of everything that died with it.  A capture
 * writes them in order; a restore serves them again with the same ids.
 */
#include "snapshot.h"
#include "../session.h"
#include "proto.h"

#include <endian.h>
#include <stdlib.h>
#include <string.h>

struct jrec {
	struct journal_rec r;
	int dead;
};

struct journal {
	struct jrec *v;
	size_t n, cap;
	int graphs; /* live graphs: not captured (docs/design.md) */
	uint64_t seq;    /* the last record's */
	uint64_t frozen; /* records up to this were sent ahead (0: none) */
	int broken;      /* one of those changed or went since */
	/* payloads of frozen records that went: a move's sender may still be
	 * reading them (they go ahead by reference), freed when it thaws */
	void **later;
	size_t nlater, caplater;
};

/* A dead record's payload: freed now, or kept until the journal thaws. */
static void payload_free(struct journal *j, struct jrec *e)
{
	if (j->frozen && e->r.seq <= j->frozen) {
		if (j->nlater == j->caplater) {
			size_t cap = j->caplater ? 2 * j->caplater : 16;
			void **v = realloc(j->later, cap * sizeof(*v));
			if (!v) {
				/* keep it for good rather than free it under a reader */
				e->r.payload = NULL;
				return;
			}
			j->later = v;
			j->caplater = cap;
		}
		j->later[j->nlater++] = e->r.payload;
	} else {
		free(e->r.payload);
	}
	e->r.payload = NULL;
}

static void later_free(struct journal *j)
{
	for (size_t i = 0; i < j->nlater; i++)
		free(j->later[i]);
	j->nlater = 0;
}

/* (every request passes here, launches too: a load, not a byte loop) */
static uint64_t rd64(const uint8_t *p, size_t n, size_t off)
{
	uint64_t v;
	if (off + 8 > n)
		return 0;
	memcpy(&v, p + off, 8);
	return le64toh(v);
}

static struct journal *jget(struct session *s)
{
	if (!s->journal)
		s->journal = calloc(1, sizeof(struct journal));
	return s->journal;
}

static void add(struct session *s, uint16_t op, const uint8_t *p, size_t n, uint64_t id,
		uint64_t ctx, uint64_t parent, uint64_t result)
{
	struct journal *j = jget(s);
	if (!j)
		return;
	if (j->n == j->cap) {
		size_t cap = j->cap ? j->cap * 2 : 64;
		struct jrec *v = realloc(j->v, cap * sizeof(*v));
		if (!v)
			return;
		j->v = v;
		j->cap = cap;
	}
	uint8_t *copy = malloc(n ? n : 1);
	if (!copy)
		return;
	memcpy(copy, p, n);
	j->v[j->n++] = (struct jrec){ .r = { .op = op, .seq = ++j->seq, .id = id, .ctx = ctx,
					     .parent = parent, .result = result, .plen = n,
					     .payload = copy } };
}

/* A record sent ahead of a move's pause changed or went (journal_freeze). */
static void touched(struct journal *j, const struct jrec *e)
{
	if (e->r.seq <= j->frozen)
		j->broken = 1;
}

/* Drops the records of object x and, transitively, of what belongs to it
 * (a context's objects, a module's functions, a library's kernels and
 * their functions). */
static void drop(struct journal *j, uint64_t x)
{
	if (!x)
		return;
	for (size_t i = 0; i < j->n; i++) {
		struct jrec *e = &j->v[i];
		if (e->dead || (e->r.id != x && e->r.parent != x && e->r.ctx != x))
			continue;
		e->dead = 1;
		touched(j, e);
		if (e->r.id && e->r.id != x)
			drop(j, e->r.id);
	}
}

static void compact(struct journal *j)
{
	size_t k = 0;
	for (size_t i = 0; i < j->n; i++) {
		if (j->v[i].dead)
			payload_free(j, &j->v[i]);
		else
			j->v[k++] = j->v[i];
	}
	j->n = k;
}

/* The module or library record a global belongs to gets the page that
 * global sits on: the emulated device can place a restored module's
 * globals there (restore.c). */
static void note_place(struct journal *j, uint64_t parent, uint64_t dptr)
{
	for (size_t i = 0; i < j->n; i++)
		if (!j->v[i].dead && j->v[i].r.id == parent && j->v[i].r.op == RGPU_OP_MODULE_LOAD &&
		    !j->v[i].r.place) {
			j->v[i].r.place = dptr & ~(uint64_t)4095;
			touched(j, &j->v[i]);
		}
}

void journal_note(struct session *s, uint16_t op, const uint8_t *p, size_t n, int status,
		  const uint8_t *reply, size_t rlen)
{
	if (status != 0)
		return;
	struct journal *j;
	uint64_t made = rd64(reply, rlen, 0);
	uint64_t h0 = rd64(p, n, 0), h1 = rd64(p, n, 8);
	switch (op) {
	case RGPU_OP_CTX_CREATE:
		add(s, op, p, n, made, made, 0, 0);
		break;
	case RGPU_OP_MODULE_LOAD:
	case RGPU_OP_STREAM_CREATE:
	case RGPU_OP_EVENT_CREATE:
		add(s, op, p, n, made, h0, 0, 0);
		break;
	case RGPU_OP_LIBRARY_LOAD:
		add(s, op, p, n, made, 0, 0, 0);
		break;
	case RGPU_OP_MODULE_GET_FUNCTION:
	case RGPU_OP_KERNEL_GET_FUNCTION:
		add(s, op, p, n, made, h0, h1, 0);
		break;
	case RGPU_OP_LIBRARY_GET_KERNEL:
		add(s, op, p, n, made, 0, h0, 0);
		break;
	case RGPU_OP_MODULE_GET_GLOBAL:
	case RGPU_OP_LIBRARY_GET_GLOBAL:
		add(s, op, p, n, 0, h0, h1, made);
		if ((j = jget(s)) && op == RGPU_OP_MODULE_GET_GLOBAL)
			note_place(j, h1, made);
		if (j && op == RGPU_OP_LIBRARY_GET_GLOBAL && j->n)
			j->v[j->n - 1].r.place = made & ~(uint64_t)4095; /* (its own record) */
		break;
	case RGPU_OP_FUNC_SET_ATTR:
	case RGPU_OP_FUNC_SET_CACHE:
		add(s, op, p, n, 0, h0, h1, 0);
		break;
	case RGPU_OP_CTX_SET_LIMIT:
		add(s, op, p, n, 0, h0, 0, 0);
		break;
	case RGPU_OP_VMEM_MAP:
		add(s, op, p, n, 0, h0, 0, h1);
		break;
	case RGPU_OP_CAPTURE_END:
	case RGPU_OP_GRAPH_INSTANTIATE:
		if ((j = jget(s)))
			j->graphs++;
		break;
	case RGPU_OP_GRAPH_DESTROY:
		if ((j = jget(s)) && j->graphs)
			j->graphs--;
		break;
	case RGPU_OP_CTX_DESTROY:
		if ((j = jget(s))) {
			drop(j, h0);
			compact(j);
		}
		break;
	case RGPU_OP_LIBRARY_UNLOAD:
		if ((j = jget(s))) {
			drop(j, h0);
			compact(j);
		}
		break;
	case RGPU_OP_MODULE_UNLOAD:
	case RGPU_OP_STREAM_DESTROY:
	case RGPU_OP_EVENT_DESTROY:
		if ((j = jget(s))) {
			drop(j, h1);
			compact(j);
		}
		break;
	case RGPU_OP_VMEM_UNMAP:
		if ((j = jget(s))) {
			for (size_t i = 0; i < j->n; i++)
				if (j->v[i].r.op == RGPU_OP_VMEM_MAP && j->v[i].r.result == h1) {
					j->v[i].dead = 1;
					touched(j, &j->v[i]);
				}
			compact(j);
		}
		break;
	default:
		break;
	}
}

void journal_freeze(struct session *s, uint64_t seq)
{
	struct journal *j = jget(s);
	if (j) {
		j->frozen = seq;
		j->broken = 0;
		if (!seq)
			later_free(j);
	}
}

int journal_frozen_intact(struct session *s)
{
	struct journal *j = s->journal;
	return j && j->frozen && !j->broken ? 0 : -1;
}

int journal_each(struct session *s, int (*fn)(void *arg, const struct journal_rec *r), void *arg)
{
	struct journal *j = s->journal;
	for (size_t i = 0; j && i < j->n; i++) {
		int rc = fn(arg, &j->v[i].r);
		if (rc)
			return rc;
	}
	return 0;
}

const char *journal_unmovable(struct session *s)
{
	struct journal *j = s->journal;
	if (j && j->graphs)
		return "the session holds CUDA graphs, which are not migrated yet";
	if (s->ntex)
		return "the session holds texture or surface objects, which are not migrated yet";
	for (uint32_t i = 0; i < s->ht.n; i++)
		if (s->ht.e[i].kind == HK_ARRAY)
			return "the session holds CUDA arrays, which are not migrated yet";
	return NULL;
}

void journal_free(struct session *s)
{
	struct journal *j = s->journal;
	if (!j)
		return;
	for (size_t i = 0; i < j->n; i++)
		free(j->v[i].r.payload);
	later_free(j);
	free(j->later);
	free(j->v);
	free(j);
	s->journal = NULL;
}
