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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct jrec {
	struct journal_rec r;
	int dead;
	int held;     /* a destroyed stream's or event's, kept for graph records */
	uint64_t cap; /* a graph record of a capture under way: its driver id */
};

/* what the graph records of a session may hold before a move refuses to
 * replay them (a program that rebuilds graphs while one lives on) */
#define GRAPH_LOG_MAX_BYTES (256u << 20)

struct journal {
	struct jrec *v;
	size_t n, cap;
	size_t ngraph, graph_bytes; /* graph records */
	uint64_t vmm_gen;           /* application VMM requests served (vmmstate.h) */
	const char *graph_no;       /* why they cannot be replayed, or NULL */
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
	free(e->r.ids);
	e->r.ids = NULL;
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

static struct jrec *add(struct session *s, uint16_t op, const uint8_t *p, size_t n, uint64_t id,
			uint64_t ctx, uint64_t parent, uint64_t result)
{
	struct journal *j = jget(s);
	if (!j)
		return NULL;
	if (j->n == j->cap) {
		size_t cap = j->cap ? j->cap * 2 : 64;
		struct jrec *v = realloc(j->v, cap * sizeof(*v));
		if (!v)
			return NULL;
		j->v = v;
		j->cap = cap;
	}
	uint8_t *copy = malloc(n ? n : 1);
	if (!copy)
		return NULL;
	memcpy(copy, p, n);
	j->v[j->n] = (struct jrec){ .r = { .op = op, .seq = ++j->seq, .id = id, .ctx = ctx,
					   .parent = parent, .result = result, .plen = n,
					   .payload = copy } };
	return &j->v[j->n++];
}

/* A record sent ahead of a move's pause changed or went (journal_freeze;
 * graph records go ahead only within a server, but are counted always). */
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
	j->ngraph = j->graph_bytes = 0;
	for (size_t i = 0; i < j->n; i++) {
		if (j->v[i].dead) {
			payload_free(j, &j->v[i]);
			continue;
		}
		if (j->v[i].r.graph) {
			j->ngraph++;
			j->graph_bytes += j->v[i].r.plen;
		}
		j->v[k++] = j->v[i];
	}
	j->n = k;
}

/* ---- graphs: made again by replaying what built them ----
 *
 * A graph's nodes hold driver objects and device addresses, and an
 * executable graph cannot be read back at all; but every request that
 * built one is a request like any other.  So while a session has graphs
 * (or a capture under way), the journal keeps, in order: the captures
 * (begin, every request served on a stream in the capture, end), the
 * explicit construction (GRAPH_OP), instantiations, updates and
 * destructions, each with the handles it made (nodes get theirs when the
 * client first names them).  A restore serves them again last, with the
 * same handles, so the driver builds the same graphs.  A stream or event
 * destroyed meanwhile keeps its records and its handle's slot (HK_HELD)
 * until the session has no graph left, and its destruction is replayed
 * too.  What replaying cannot make again is refused by name (graph_no):
 * graph memory (its addresses are the driver's choice), conditional
 * handles (their values are baked into kernels' arguments). */

/* No graph left and no capture under way: their records, and what they
 * held, go. */
static void graph_gc(struct session *s, struct journal *j)
{
	if (j->ngraph && s->captures)
		return;
	for (uint32_t i = 0; j->ngraph && i < s->ht.n; i++)
		if (s->ht.e[i].kind == HK_GRAPH || s->ht.e[i].kind == HK_GRAPHEXEC)
			return;
	for (size_t i = 0; i < j->n; i++)
		if (j->v[i].r.graph || j->v[i].held) {
			j->v[i].dead = 1;
			touched(j, &j->v[i]);
		}
	compact(j);
	j->graph_no = NULL;
	ht_unhold_all(&s->ht);
}

static void graph_add(struct session *s, struct journal *j, uint16_t op, const uint8_t *p,
		      size_t n, uint64_t cap)
{
	if (j->graph_no)
		return;
	if (j->graph_bytes + n > GRAPH_LOG_MAX_BYTES) {
		j->graph_no = "its graphs took more requests to build than a move replays "
			      "(256 MiB of them)";
		return;
	}
	struct jrec *e = s->ht.made_lost ? NULL : add(s, op, p, n, 0, rd64(p, n, 0), 0, 0);
	if (e && s->ht.nmade && !(e->r.ids = malloc(s->ht.nmade * sizeof(uint64_t)))) {
		e->dead = 1;
		compact(j);
		e = NULL;
	}
	if (!e) {
		j->graph_no = "out of memory keeping the requests that built its graphs";
		return;
	}
	e->r.graph = 1;
	e->cap = cap;
	if (s->ht.nmade)
		memcpy(e->r.ids, s->ht.made, s->ht.nmade * sizeof(uint64_t));
	e->r.nids = s->ht.nmade;
	j->ngraph++;
	j->graph_bytes += n;
}

/* (graph requests only) */
static uint32_t rd32(const uint8_t *p, size_t n, size_t off)
{
	return off + 4 > n ? 0 : (uint32_t)snap_gl(p + off, 4);
}

/* A graph request (or one served in a capture): kept or acted on, 1;
 * else 0 (not one). */
static int graph_note(struct session *s, uint16_t op, const uint8_t *p, size_t n, int status)
{
	uint64_t cap = s->req_capture;
	if (!cap && op != RGPU_OP_CAPTURE_BEGIN && op != RGPU_OP_CAPTURE_END &&
	    op != RGPU_OP_GRAPH_INSTANTIATE && op != RGPU_OP_GRAPH_DESTROY && op != RGPU_OP_GRAPH_OP)
		return 0;
	struct journal *j = jget(s);
	if (!j)
		return 1;
	if (op == RGPU_OP_CAPTURE_END && status) {
		/* a failed capture built nothing: its requests go */
		for (size_t i = 0; cap && i < j->n; i++)
			if (j->v[i].r.graph && j->v[i].cap == cap)
				j->v[i].dead = 1;
		compact(j);
		graph_gc(s, j);
		return 1;
	}
	if (status)
		return 1;
	if (op == RGPU_OP_GRAPH_OP) {
		/* u64 ctx, u32 sub, ... (lib/proto.h) */
		uint32_t sub = rd32(p, n, 8);
		/* (queries that change nothing: an executable node's enabled
		 * state, a kernel node's attribute) */
		if (sub == RGPU_G_MEM_TRIM || sub == RGPU_G_GET_ENABLED || sub == RGPU_G_KATTR_GET ||
		    sub == RGPU_G_EXEC_FLAGS)
			return 1;
		/* queries: kept only when they named nodes (or a child graph)
		 * for the first time */
		if ((sub == RGPU_G_NODES || sub == RGPU_G_EDGES || sub == RGPU_G_CAPTURE_INFO ||
		     sub == RGPU_G_CHILD_GRAPH) &&
		    !s->ht.nmade)
			return 1;
		if (sub == RGPU_G_COND_HANDLE)
			j->graph_no = "it holds conditional graph nodes, whose handles' values "
				      "kernels keep: not migrated yet";
		if (sub == RGPU_G_ADD) {
			/* u64 graph, u32 ndeps, u64 deps[ndeps], u32 type */
			uint32_t nd = rd32(p, n, 20);
			if (n >= 28 && nd <= (n - 28) / 8 &&
			    rd32(p, n, 24 + 8 * (size_t)nd) == CU_GRAPH_NODE_TYPE_MEM_ALLOC)
				j->graph_no = "it holds graph memory nodes, whose addresses the "
					      "driver chooses: not migrated yet";
		}
	}
	graph_add(s, j, op, p, n, cap);
	if (op == RGPU_OP_CAPTURE_END) {
		/* that capture is over: its records stay with its graph */
		for (size_t i = 0; i < j->n; i++)
			if (j->v[i].cap == cap)
				j->v[i].cap = 0;
	}
	if (op == RGPU_OP_CAPTURE_END || op == RGPU_OP_GRAPH_DESTROY)
		graph_gc(s, j);
	return 1;
}

/* A stream or event destroyed while graph records are kept: its records
 * and handle stay (HK_HELD), its destruction is replayed after them.  1:
 * so kept. */
static int graph_hold(struct session *s, struct journal *j, uint16_t op, const uint8_t *p,
		      size_t n, uint64_t x)
{
	if (!j->ngraph)
		return 0;
	if (ht_hold(&s->ht, x) < 0) {
		j->graph_no = "out of step keeping an object its graphs may use";
		return 0;
	}
	for (size_t i = 0; i < j->n; i++)
		if (!j->v[i].dead && j->v[i].r.id == x)
			j->v[i].held = 1;
	graph_add(s, j, op, p, n, 0);
	return 1;
}

void journal_graph_unreplayable(struct session *s, const char *why)
{
	struct journal *j = jget(s);
	if (j && !j->graph_no)
		j->graph_no = why;
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
	if (graph_note(s, op, p, n, status))
		return;
	if (status != 0)
		return;
	struct journal *j;
	if (op >= RGPU_OP_VMM_CREATE && op <= RGPU_OP_VMM_IMPORT && op != RGPU_OP_VMM_EXPORT &&
	    (j = jget(s)))
		j->vmm_gen++;
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
	case RGPU_OP_LIBRARY_GET_MODULE:
		add(s, op, p, n, made, h0, h1, 0);
		break;
	case RGPU_OP_LIBRARY_GET_KERNEL:
		add(s, op, p, n, made, 0, h0, 0);
		break;
	case RGPU_OP_MODULE_GET_GLOBAL:
	case RGPU_OP_LIBRARY_GET_GLOBAL:
	case RGPU_OP_LIBRARY_GET_MANAGED:
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
	case RGPU_OP_CTX_DESTROY:
		if ((j = jget(s))) {
			drop(j, h0);
			compact(j);
			graph_gc(s, j);
		}
		break;
	case RGPU_OP_LIBRARY_UNLOAD:
		if ((j = jget(s))) {
			if (j->ngraph)
				j->graph_no = "a library was unloaded while it had graphs";
			drop(j, h0);
			compact(j);
		}
		break;
	case RGPU_OP_MODULE_UNLOAD:
	case RGPU_OP_STREAM_DESTROY:
	case RGPU_OP_EVENT_DESTROY:
		if ((j = jget(s))) {
			if (op != RGPU_OP_MODULE_UNLOAD && graph_hold(s, j, op, p, n, h1))
				break;
			if (op == RGPU_OP_MODULE_UNLOAD && j->ngraph)
				j->graph_no = "a module was unloaded while it had graphs";
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

uint64_t journal_vmm_gen(struct session *s)
{
	struct journal *j = jget(s);
	return j ? j->vmm_gen : 0;
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
	static __thread char why[200];
	if (j && j->graph_no) {
		snprintf(why, sizeof(why), "the session's CUDA graphs cannot be made again: %s",
			 j->graph_no);
		return why;
	}
	if (s->ngmem)
		return "the session holds graph memory (cuGraphAddMemAllocNode, or cuMemAllocAsync "
		       "in a capture), whose addresses the driver chooses: not migrated yet";
	if (s->ntex)
		return "the session holds texture or surface objects, which are not migrated yet";
	for (uint32_t i = 0; i < s->ht.n; i++) {
		const struct hentry *e = &s->ht.e[i];
		if (e->kind == HK_ARRAY)
			return "the session holds CUDA arrays, which are not migrated yet";
		if (e->kind == HK_RESDESC || (e->kind == HK_CTX && e->extra &&
					       ((const struct ctx_state *)e->extra)->green))
			return "the session holds green contexts or their resource descriptors, which "
			       "are not migrated yet";
	}
	return NULL;
}

void journal_free(struct session *s)
{
	struct journal *j = s->journal;
	if (!j)
		return;
	for (size_t i = 0; i < j->n; i++) {
		free(j->v[i].r.payload);
		free(j->v[i].r.ids); /* (a graph record's handles) */
	}
	later_free(j);
	free(j->later);
	free(j->v);
	free(j);
	s->journal = NULL;
}
