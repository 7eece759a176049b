/*
 * Capture: a drained session written as one stream (snapshot.h).  Order:
 * header; the contexts' CREATE records; cuMemAlloc'd memory (re-created
 * at its address before anything else can take it); every other CREATE
 * record in the order the source served it; fixed-address memory and
 * globals (their objects exist by then); the handle table; END.
 */
#include "snapshot.h"
#include "vmmstate.h"
#include "poolstate.h"
#include "clock.h"
#include "memif.h"
#include "../rgpud.h"
#include "../session.h"
#include "../waiter.h"
#include "../appmem.h"
#include "../mem/mem.h"
#include "../stage.h"
#include "log.h"
#include "proto.h"
#include "xfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define D (&rgpud_server.drv)

struct cap {
	struct session *s;
	struct snap_io *io;
	uint64_t nrec;
	char *why;
	size_t whylen;
	int phase; /* 0: contexts, 1: the other CREATE records */
	uint64_t after; /* only records after this journal seq (sent ahead) */
	uint64_t last;  /* the last record's seq written */
	uint64_t graph_after, graph_last; /* the same for the graph records */
	int vmm_ahead; /* the application's VMM requests went ahead */
};

static int rec_hdr(struct cap *c, uint32_t tag, uint64_t len)
{
	uint8_t h[SNAP_REC_HDR] = { 0 };
	snap_le(h, tag, 4);
	snap_le(h + 8, len, 8);
	c->nrec++;
	if (c->io->write(c->io->arg, h, sizeof(h)) < 0) {
		snprintf(c->why, c->whylen, "the receiving end of the session's state went away");
		return -1;
	}
	return 0;
}

static int put(struct cap *c, const void *p, size_t n)
{
	if (n && c->io->write(c->io->arg, p, n) < 0) {
		snprintf(c->why, c->whylen, "the receiving end of the session's state went away");
		return -1;
	}
	return 0;
}

/* A CREATE record's fields and payload (snapshot.h); by_ref: the payload
 * stays where it is until the journal thaws, so it may go from there. */
static int create_out(struct cap *c, uint16_t op, uint64_t id, uint64_t result, uint64_t place,
		      const uint8_t *p, size_t n, int by_ref)
{
	uint8_t f[32];
	snap_le(f, op, 2);
	snap_le(f + 2, 0, 2);
	snap_le(f + 4, n, 4);
	snap_le(f + 8, id, 8);
	snap_le(f + 16, result, 8);
	snap_le(f + 24, place, 8);
	if (rec_hdr(c, SNAP_CREATE, sizeof(f) + n) < 0 || put(c, f, sizeof(f)) < 0)
		return -1;
	/* ahead of a pause the journal is frozen (snap_capture_ahead): a
	 * library image (tens of MB) goes from where it lies */
	if (by_ref && c->io->write_ref && n) {
		if (c->io->write_ref(c->io->arg, p, n) < 0) {
			snprintf(c->why, c->whylen, "out of memory capturing the session's objects");
			return -1;
		}
		return 0;
	}
	return put(c, p, n);
}

/* The handles a graph record's request made (an IDS record before it). */
static int ids_out(struct cap *c, const struct journal_rec *r)
{
	uint8_t w[8];
	if (rec_hdr(c, SNAP_IDS, 4 + 8ull * r->nids) < 0)
		return -1;
	snap_le(w, r->nids, 4);
	if (put(c, w, 4) < 0)
		return -1;
	for (uint32_t i = 0; i < r->nids; i++) {
		snap_le(w, r->ids[i], 8);
		if (put(c, w, 8) < 0)
			return -1;
	}
	return 0;
}

/* Phase 0: contexts; 1: the other objects (what went ahead skipped);
 * 2: the graph records, all in the pause, after everything they use. */
static int create_rec(void *arg, const struct journal_rec *r)
{
	struct cap *c = arg;
	int phase = r->graph ? 2 : r->op == RGPU_OP_CTX_CREATE ? 0 : 1;
	if (phase != c->phase || r->seq <= (phase < 2 ? c->after : c->graph_after))
		return 0;
	if (phase < 2 && r->seq > c->last)
		c->last = r->seq;
	if (phase == 2 && r->seq > c->graph_last)
		c->graph_last = r->seq;
	if (r->nids && ids_out(c, r) < 0)
		return -1;
	return create_out(c, r->op, r->id, r->result, r->place, r->payload, r->plen, 1);
}

/* A request that makes the application's VMM memory again (vmmstate.h). */
static int vmm_rec(void *arg, uint16_t op, uint64_t id, const uint8_t *p, size_t n)
{
	return create_out(arg, op, id, 0, 0, p, n, 0);
}

/* kinds to write in this pass (bit per MEMK_*) */
struct mem_pass {
	struct cap *c;
	unsigned kinds;
};

/* device memory goes out through the session's staging pool, read from
 * the GPU while the previous chunk is sent (stage_out) */
static int mem_emit(void *arg, struct xfer_pool *pool, int i, size_t n, int last)
{
	(void)last;
	return put(arg, pool->b[i].p, n);
}

/* The fields MEMORY and PEER records begin with (snapshot.h). */
static void mem_fields(uint8_t f[32], const struct memif_alloc *a)
{
	snap_le(f, a->dptr, 8);
	snap_le(f + 8, a->size, 8);
	snap_le(f + 16, a->ctx, 8);
	snap_le(f + 24, a->dev, 4);
	snap_le(f + 28, (uint64_t)a->kind, 4);
}

void snap_exports_drop(struct session *s)
{
	mem_export_drop(s);
	vmm_export_drop(s);
}

/* Device memory by reference (a PEER or PREP record), when the reader can
 * map it: 1 written, 0 not so (it goes by value), -1 failed. */
static int ref_rec(struct cap *c, const struct memif_alloc *a, uint32_t tag)
{
	uint8_t tok[16];
	uint64_t va, len;
	/* cuMemAlloc'd memory (the memory manager's), or an application VMM
	 * mapping (its physical memory: vmmstate.h) */
	if (!c->io->by_ref)
		return 0;
	int rc = a->kind == MEMK_ALLOC   ? mem_export(c->s, a->dptr, tok, &va, &len)
		 : a->kind == MEMK_FIXED ? vmm_export_map(c->s, a->dptr, tok, &va, &len)
					 : CUDA_ERROR_NOT_SUPPORTED;
	if (rc || a->dptr < va || a->dptr + a->size > va + len)
		return 0;
	uint8_t g[32 + 16 + 16];
	mem_fields(g, a);
	memcpy(g + 32, tok, 16);
	snap_le(g + 48, va, 8);
	snap_le(g + 56, len, 8);
	if (rec_hdr(c, tag, sizeof(g)) < 0 || put(c, g, sizeof(g)) < 0)
		return -1;
	if (tag == SNAP_PEER)
		c->io->ref_bytes += a->size;
	return 1;
}

/* A move between GPUs of this rgpud, ahead of its pause: the memory the
 * pause will name by reference, so that the target re-creates it and
 * maps the source's blocks while the session runs on (that was most of
 * a two-GPU pause: 36 of 41 ms on two H200s, 2026-11-28). */
static int prep_rec(void *arg, const struct memif_alloc *a)
{
	struct cap *c = arg;
	struct hentry *e = ht_get(&c->s->ht, a->ctx, HK_CTX);
	/* (application VMM mappings when their requests went ahead: the
	 * target maps the source's blocks now, the pause only copies) */
	if (!e || (a->kind != MEMK_ALLOC && !(a->kind == MEMK_FIXED && c->vmm_ahead)))
		return 0; /* the pause says what is wrong with it */
	D->cuCtxSetCurrent(e->obj);
	return ref_rec(c, a, SNAP_PREP) < 0 ? -1 : 0;
}

static int mem_rec(void *arg, const struct memif_alloc *a)
{
	struct mem_pass *mp = arg;
	struct cap *c = mp->c;
	if (!(mp->kinds & (1u << a->kind)))
		return 0;
	struct hentry *e = ht_get(&c->s->ht, a->ctx, HK_CTX);
	if (!e) {
		snprintf(c->why, c->whylen, "memory at %#llx belongs to no live context",
			 (unsigned long long)a->dptr);
		return -1;
	}
	D->cuCtxSetCurrent(e->obj);
	int ref = ref_rec(c, a, SNAP_PEER);
	if (ref)
		return ref < 0 ? -1 : 0;
	uint8_t f[32];
	mem_fields(f, a);
	if (rec_hdr(c, SNAP_MEMORY, sizeof(f) + a->size) < 0 || put(c, f, sizeof(f)) < 0)
		return -1;
	int queued;
	uint64_t at = 0;
	int rc = stage_out(stage_pool(c->s), a->ctx, NULL, a->dptr, a->size, mem_emit, c, &queued, &at);
	if (rc == XFER_LOST)
		return -1; /* put() said why */
	if (rc) {
		if (queued)
			D->cuCtxSynchronize();
		snprintf(c->why, c->whylen, "reading device memory at %#llx: %s",
			 (unsigned long long)(a->dptr + at), rgpud_cu_errname(D, rc));
		return -1;
	}
	return 0;
}

/* Waits for everything the session queued; a context in a sticky error
 * state cannot be moved (its memory may be unreadable). */
static int drain(struct session *s, char *why, size_t whylen)
{
	waiter_drain(s);
	for (uint32_t i = 0; i < s->ht.n; i++) {
		struct hentry *e = &s->ht.e[i];
		if (e->kind != HK_CTX)
			continue;
		int rc = D->cuCtxSetCurrent(e->obj);
		if (!rc)
			rc = D->cuCtxSynchronize();
		if (rc) {
			snprintf(why, whylen, "a context of the session failed: %s",
				 rgpud_cu_errname(D, rc));
			return -1;
		}
	}
	return 0;
}

static int header(struct cap *c, uint64_t last_id)
{
	struct session *s = c->s;
	uint32_t gpus[SNAP_MAX_GPUS], ngpu = 0;
	for (unsigned g = 0; g < SNAP_MAX_GPUS && g < RGPUD_MAX_GPUS; g++)
		if (s->dev_admitted & (1ull << g))
			gpus[ngpu++] = g;
	uint8_t f[8 + 4 + 4 + 4 + 8 + 8 + 4 + 4 * SNAP_MAX_GPUS];
	size_t n = 0;
	memcpy(f, SNAP_MAGIC, 8);
	n = 8;
	snap_le(f + n, SNAP_VERSION, 4), n += 4;
	snap_le(f + n, s->who.uid, 4), n += 4;
	snap_le(f + n, s->who.gid, 4), n += 4;
	snap_le(f + n, s->who.job_id, 8), n += 8;
	snap_le(f + n, last_id, 8), n += 8;
	snap_le(f + n, ngpu, 4), n += 4;
	for (uint32_t i = 0; i < ngpu; i++)
		snap_le(f + n, gpus[i], 4), n += 4;
	if (rec_hdr(c, SNAP_HEADER, n) < 0 || put(c, f, n) < 0)
		return -1;
	return 0;
}

static int table(struct cap *c)
{
	struct htable *t = &c->s->ht;
	uint64_t len = 4 + 4ull * t->n + 4 + 4ull * t->nfree;
	if (rec_hdr(c, SNAP_TABLE, len) < 0)
		return -1;
	uint8_t w[4];
	snap_le(w, t->n, 4);
	if (put(c, w, 4) < 0)
		return -1;
	for (uint32_t i = 0; i < t->n; i++) {
		snap_le(w, t->e[i].gen, 4);
		if (put(c, w, 4) < 0)
			return -1;
	}
	snap_le(w, t->nfree, 4);
	if (put(c, w, 4) < 0)
		return -1;
	for (uint32_t i = 0; i < t->nfree; i++) {
		snap_le(w, t->freel[i], 4);
		if (put(c, w, 4) < 0)
			return -1;
	}
	return 0;
}

static int has_record(void *arg, const struct journal_rec *r)
{
	uint64_t id = *(uint64_t *)arg;
	for (uint32_t i = 0; i < r->nids; i++)
		if (r->ids[i] == id)
			return 1;
	return r->id == id;
}

/* Every live object must be one the journal can make again: a kind it
 * knows, with the request that made it.  Anything else (application VMM
 * memory, pools, objects of requests added later) is refused by name
 * rather than lost on the way. */
static const char *uncapturable(struct session *s, char *buf, size_t n)
{
	static const char *const kinds[] = { "?", "context", "module", "function", "library",
					      "kernel", "stream", "event", "graph",
					      "executable graph", "VMM physical memory",
					      "memory pool", "graph node", "CUDA array" };
	if (s->ipc_events)
		return "the session shares an event with another process (cuIpcGetEventHandle), "
		       "which is not migrated yet";
	const char *vmm = vmm_unmovable(s);
	if (vmm) {
		snprintf(buf, n, "%s", vmm);
		return buf;
	}
	for (uint32_t i = 0; i < s->ht.n; i++) {
		const struct hentry *e = &s->ht.e[i];
		/* (application VMM memory and pools are written from the live
		 * state) */
		if (e->kind == HK_FREE || e->kind == HK_VMM || e->kind == HK_POOL ||
		    e->kind == HK_HELD)
			continue;
		const char *k = (unsigned)e->kind < sizeof(kinds) / sizeof(kinds[0])
					? kinds[e->kind] : "unknown";
		uint64_t id = ht_id_at(&s->ht, i);
		/* (graphs, their nodes and executables: made by graph records) */
		int known = e->kind <= HK_EVENT || e->kind == HK_GRAPH ||
			    e->kind == HK_GRAPHEXEC || e->kind == HK_GNODE;
		if (!known || !journal_each(s, has_record, &id)) {
			snprintf(buf, n, "the session holds a %s (handle %#llx) that is not migrated "
				 "yet", k, (unsigned long long)id);
			return buf;
		}
	}
	return NULL;
}

/* What cannot be captured, said in why[]: -1 (*later: only for now,
 * until something under way ends), else 0. */
static int movable(struct session *s, char *why, size_t whylen, int *later)
{
	char kb[200];
	const char *no = NULL;
	*later = 1;
	/* (nothing of a host function that has returned is left to move:
	 * the client starts its poll again for the next one) */
	if (hostfn_busy(s))
		no = "a host function (cuLaunchHostFunc, a stream callback, a graph host node) is "
		     "under way or held by a graph: the session can move once none is";
	/* (draining would end the application's capture: cuCtxSynchronize
	 * is not allowed while a stream is captured) */
	if (!no && s->captures)
		no = "a stream capture is under way: the session can move once it ends";
	if (!no)
		*later = 0;
	if (!no)
		no = journal_unmovable(s);
	if (!no)
		no = uncapturable(s, kb, sizeof(kb));
	if (!no && s->shm)
		no = "the session shares memory with a client on the same host (RGPU_TRANSPORT=tcp "
		     "makes a session movable)";
	if (no) {
		snprintf(why, whylen, "%s", no);
		return -1;
	}
	return 0;
}

int snap_capture_ahead(struct session *s, struct snap_io *io, struct snap_ahead *a, char *why,
		       size_t whylen)
{
	int later;
	if (movable(s, why, whylen, &later) < 0)
		return -1;
	struct cap c = { .s = s, .io = io, .why = why, .whylen = whylen };
	/* the last id served goes in LAST, after the pause */
	int rc = header(&c, 0);
	if (!rc)
		rc = journal_each(s, create_rec, &c);
	c.phase = 1;
	if (!rc)
		rc = journal_each(s, create_rec, &c);
	/* the application's VMM memory made there now too (on a move within
	 * a server, making it in the pause was most of that pause: 15.7 of
	 * 22.5 ms on an H200, 2026-12-01); the pause checks it did not change */
	a->vmm_gen = journal_vmm_gen(s);
	a->vmm_sent = 0;
	if (!rc && s->appmem) {
		rc = vmm_each_request(s, vmm_rec, &c);
		a->vmm_sent = c.vmm_ahead = !rc;
	}
	if (!rc && io->by_ref)
		rc = memif_each(s, prep_rec, &c);
	/* the graph records too, when what they use is there by now (the
	 * memory prepared: a capture's copies and memsets name it): their
	 * replay was most of a graphed run's pause within a GPU (5.5 of 6.9
	 * ms on an H200, 2026-12-01) */
	a->graph_seq = 0;
	if (!rc && io->by_ref && (!s->appmem || a->vmm_sent)) {
		c.phase = 2;
		rc = journal_each(s, create_rec, &c);
		a->graph_seq = c.graph_last;
	}
	D->cuCtxSetCurrent(NULL);
	s->cur_ctx = 0;
	if (!rc)
		rc = rec_hdr(&c, SNAP_SYNC, 0);
	if (rc) {
		journal_freeze(s, 0);
		if (io->by_ref)
			snap_exports_drop(s);
		return -1;
	}
	/* from here the records sent keep their payloads (sent by reference)
	 * until the journal thaws */
	journal_freeze(s, c.last > c.graph_last ? c.last : c.graph_last);
	a->seq = c.last;
	a->nrec = c.nrec;
	return 0;
}

int snap_capture(struct session *s, uint64_t last_id, struct snap_io *io,
		 const struct snap_ahead *ahead, char *why, size_t whylen)
{
	int later;
	if (movable(s, why, whylen, &later) < 0)
		return later ? -3 : -1;
	if (ahead) {
		int intact = journal_frozen_intact(s);
		journal_freeze(s, 0);
		if (intact < 0) {
			snprintf(why, whylen, "an object sent ahead changed or went meanwhile");
			return -2;
		}
		if (ahead->vmm_sent && journal_vmm_gen(s) != ahead->vmm_gen) {
			snprintf(why, whylen, "its VMM memory, sent ahead, changed meanwhile");
			return -2;
		}
	}
	uint64_t t0 = rgpu_now_ns();
	if (drain(s, why, whylen) < 0)
		return -1;
	io->drain_ns = rgpu_now_ns() - t0;
	/* memory swapped out to host comes back first: it is read from the
	 * device like the rest */
	uint64_t resident = 0, swapped = 0;
	mem_usage(s, &resident, &swapped);
	int mrc = swapped ? mem_restore(s) : 0;
	if (mrc) {
		snprintf(why, whylen, "the session's swapped-out memory could not come back: %s",
			 rgpud_cu_errname(D, mrc));
		return -1;
	}
	struct cap c = { .s = s, .io = io, .why = why, .whylen = whylen,
			 .after = ahead ? ahead->seq : 0, .nrec = ahead ? ahead->nrec : 0,
			 .graph_after = ahead ? ahead->graph_seq : 0 };
	struct mem_pass first = { &c, 1u << MEMK_ALLOC };
	struct mem_pass rest = { &c, (1u << MEMK_FIXED) | (1u << MEMK_GLOBAL) };
	int rc = ahead ? 0 : header(&c, last_id);
	if (!rc)
		rc = journal_each(s, create_rec, &c);
	if (!rc)
		rc = memif_each(s, mem_rec, &first);
	/* the pools, their blocks now there (never ahead: they change with
	 * every allocation) */
	if (!rc)
		rc = pool_each_request(s, vmm_rec, &c);
	c.phase = 1;
	if (!rc)
		rc = journal_each(s, create_rec, &c);
	if (!rc && !(ahead && ahead->vmm_sent))
		rc = vmm_each_request(s, vmm_rec, &c);
	if (!rc)
		rc = memif_each(s, mem_rec, &rest);
	c.phase = 2;
	if (!rc)
		rc = journal_each(s, create_rec, &c);
	if (!rc)
		rc = table(&c);
	if (!rc && ahead) {
		uint8_t l[8];
		snap_le(l, last_id, 8);
		rc = rec_hdr(&c, SNAP_LAST, 8) < 0 || put(&c, l, 8) < 0 ? -1 : 0;
	}
	if (!rc) {
		uint8_t n[8];
		snap_le(n, c.nrec, 8);
		rc = rec_hdr(&c, SNAP_END, 8) < 0 || put(&c, n, 8) < 0 ? -1 : 0;
	}
	if (rc && io->by_ref)
		snap_exports_drop(s);
	D->cuCtxSetCurrent(NULL);
	s->cur_ctx = 0;
	return rc ? -1 : 0;
}
