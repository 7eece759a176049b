/*
 * Restore: a stream (snapshot.h) rebuilt into a fresh session.  Every
 * CREATE record is served again by its own request handler, with the
 * handle table told the id to make, so the client's handles stay valid;
 * memory is re-created at its address (memif.h) and its bytes copied in;
 * the table's layout is set last, so that ids made afterwards are the
 * ones the source would have made (recovery replays requests that
 * create objects).
 */
#include "snapshot.h"
#include "clock.h"
#include "memif.h"
#include "../rgpud.h"
#include "../session.h"
#include "../share.h"
#include "../stage.h"
#include "../gate.h"
#include "../mem/mem.h"
#include "log.h"
#include "proto.h"
#include "xfer.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/personality.h>
#include <time.h>
#include <unistd.h>

#define D (&rgpud_server.drv)
#define MAX_CREATE (RGPU_MAX_PAYLOAD + 64)

/* The source's physical memory, mapped here for a PEER record's copy
 * (kept until the restore ends: small allocations share one mapping). */
struct imported {
	uint8_t token[16];
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;   /* where it is mapped here */
	uint64_t len;
	unsigned dev;     /* the GPU it lies on */
	int mapped;       /* (unmapped while objects are made: the handle stays) */
	struct imported *next;
};

/* The fields MEMORY and PEER records begin with (snapshot.h). */
struct mem_head {
	uint64_t dptr, size, ctx;
	unsigned dev; /* where it goes: the record's GPU, or the one moved to */
	int kind;
};

/* A PEER record's copy, made after every object is restored; or a PREP
 * record's memory, made ready ahead of the pause. */
struct peer_copy {
	struct mem_head h;
	uint8_t token[16];
	uint64_t va, blen;
	int used;   /* (PREP) named again by the pause */
	int queued; /* (PEER) its copy is queued */
	struct peer_copy *next;
};

/* A restored context's streams for the GPU-to-GPU copies: of their own
 * (non-blocking: the MEMORY records' copies on the legacy stream do not
 * wait for them), two, taken in turn by pieces of COPY_PIECE, the size at
 * which one copy ran at the link's speed (bench/migrate/peer_copy: 386 of
 * 383-388 GB/s on two H200s; one copy per block on the legacy stream moved
 * 267 GB/s). */
#define COPY_STREAMS 2
#define COPY_PIECE (64ull << 20)
struct copy_ctx {
	uint64_t ctx;
	CUcontext cu;
	CUstream st[COPY_STREAMS];
	unsigned turn;
	struct copy_ctx *next;
};

/* Contexts whose legacy stream holds MEMORY records' copies not waited
 * for: a record no longer waits for its own (in a move's pause they
 * queued behind the GPU-to-GPU copies: 3.4 ms of a same-GPU pause on the
 * H200), the restore waits for them all before the session serves. */
#define MEM_PENDING_MAX 64
struct mem_pending {
	CUcontext ctx[MEM_PENDING_MAX];
	unsigned n;
};

/* Waits for every context's MEMORY copies: 0 or the first CUresult. */
static int mem_pending_wait(struct mem_pending *mp)
{
	int rc = 0;
	for (unsigned i = 0; i < mp->n; i++) {
		D->cuCtxSetCurrent(mp->ctx[i]);
		int k = D->cuStreamSynchronize(NULL);
		if (k && !rc)
			rc = k;
	}
	mp->n = 0;
	return rc;
}

/* ctx's legacy stream has copies queued: 0, or the CUresult of waiting
 * for them at once when the list is full. */
static int mem_pending_add(struct mem_pending *mp, CUcontext ctx)
{
	for (unsigned i = 0; i < mp->n; i++)
		if (mp->ctx[i] == ctx)
			return 0;
	if (mp->n < MEM_PENDING_MAX) {
		mp->ctx[mp->n++] = ctx;
		return 0;
	}
	return (int)D->cuStreamSynchronize(NULL);
}

struct rst {
	struct session *s;
	const struct snap_io *io;
	int gpu_to;
	char *why;
	size_t whylen;
	struct imported *imp;
	struct peer_copy *copies, **copies_tail;
	struct peer_copy *preps; /* PREP records' memory */
	struct snap_info *info;
	struct copy_ctx *cctx; /* streams the copies were queued on */
	int queued;            /* copies queued since the last wait */
	uint64_t copy_t0;      /* when the first copy was queued */
	struct mem_pending mp;  /* MEMORY records' copies not waited for */
	uint64_t vmm_made;      /* the VMM_CREATE of id 0 made this (vmmstate.h) */
	uint64_t *ids;          /* an IDS record's: what the next CREATE makes */
	uint32_t nids;
	int graph_phase;        /* the graph records (after everything else) began */
};

static int get(struct rst *r, void *p, size_t n)
{
	if (n && r->io->read(r->io->arg, p, n) < 0) {
		snprintf(r->why, r->whylen, "the session's state ended early");
		return -1;
	}
	return 0;
}

__attribute__((format(printf, 2, 3))) static int bad(struct rst *r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->why, r->whylen, fmt, ap);
	va_end(ap);
	return -1;
}
#define BAD(...) bad(r, __VA_ARGS__)

static int header(struct rst *r, uint64_t len, struct snap_info *info)
{
	uint8_t f[8 + 4 + 4 + 4 + 8 + 8 + 4 + 4 * SNAP_MAX_GPUS];
	if (len < 40 || len > sizeof(f))
		return BAD("malformed session state (header of %llu bytes)", (unsigned long long)len);
	if (get(r, f, len) < 0)
		return -1;
	if (memcmp(f, SNAP_MAGIC, 8) || snap_gl(f + 8, 4) != SNAP_VERSION)
		return BAD("not a session state of this rgpud's format (version %u expected)",
			   SNAP_VERSION);
	info->uid = (uint32_t)snap_gl(f + 12, 4);
	info->gid = (uint32_t)snap_gl(f + 16, 4);
	info->job = snap_gl(f + 20, 8);
	info->last_id = snap_gl(f + 28, 8);
	info->ngpu = (uint32_t)snap_gl(f + 36, 4);
	if (info->ngpu > SNAP_MAX_GPUS || len != 40 + 4ull * info->ngpu)
		return BAD("malformed session state (header)");
	for (uint32_t i = 0; i < info->ngpu; i++)
		info->gpus[i] = (uint32_t)snap_gl(f + 40 + 4 * i, 4);
	return 0;
}

static void preps_drop(struct rst *r, uint64_t dptr, uint64_t size);
static int imports_unmap(struct rst *r);

/* The requests that build graphs: with what ran in their captures, the
 * last CREATE records (snapshot.h) */
static int graph_op(unsigned op)
{
	return op == RGPU_OP_CAPTURE_BEGIN || op == RGPU_OP_CAPTURE_END ||
	       op == RGPU_OP_GRAPH_INSTANTIATE || op == RGPU_OP_GRAPH_DESTROY ||
	       op == RGPU_OP_GRAPH_OP;
}

/* The requests that make pools again (poolstate.h) */
static int pool_op(unsigned op)
{
	return op == RGPU_OP_POOL_CREATE || op == RGPU_OP_POOL_DEFAULT ||
	       op == RGPU_OP_POOL_SET_ATTR || op == RGPU_OP_POOL_ACCESS || op == RGPU_OP_POOL_ADOPT;
}

/* IDS: the handles the next CREATE record makes. */
static int ids(struct rst *r, uint64_t len)
{
	uint8_t w[8];
	if (len < 4 || r->ids || get(r, w, 4) < 0)
		return len < 4 || r->ids ? BAD("malformed session state (ids)") : -1;
	uint64_t n = snap_gl(w, 4);
	if (!n || n > 65536 || len != 4 + 8 * n)
		return BAD("malformed session state (%llu ids)", (unsigned long long)n);
	if (!(r->ids = malloc(n * sizeof(*r->ids))))
		return BAD("out of memory restoring a graph");
	for (uint64_t i = 0; i < n; i++) {
		if (get(r, w, 8) < 0)
			return -1;
		r->ids[i] = snap_gl(w, 8);
	}
	r->nids = (uint32_t)n;
	r->graph_phase = 1;
	return 0;
}

/* One CREATE record served again by its handler; *op: its request;
 * synced: in the pause of a move whose objects went ahead. */
static int create(struct rst *r, uint64_t len, unsigned *op_out, int synced)
{
	struct session *s = r->s;
	uint8_t f[32];
	if (len < sizeof(f) || len > MAX_CREATE)
		return BAD("malformed session state (a request of %llu bytes)", (unsigned long long)len);
	if (get(r, f, sizeof(f)) < 0)
		return -1;
	uint16_t op = (uint16_t)snap_gl(f, 2);
	*op_out = op;
	if (graph_op(op))
		r->graph_phase = 1;
	/* (pool requests make no device memory: prepared memory stays) */
	if (!r->graph_phase && !pool_op(op)) {
		if (imports_unmap(r) < 0)
			return -1;
		if (synced) {
			preps_drop(r, 0, 0);
			r->info->pause_creates++;
		}
	}
	uint64_t plen = snap_gl(f + 4, 4), id = snap_gl(f + 8, 8), result = snap_gl(f + 16, 8),
		 place = snap_gl(f + 24, 8);
	if (plen != len - sizeof(f))
		return BAD("malformed session state (request length)");
	const struct op_desc *od = rgpud_op(op);
	if (!od || op == RGPU_OP_HELLO || op >= 208)
		return BAD("malformed session state (request %u)", op);
	uint8_t *p = malloc(plen ? plen : 1);
	if (!p)
		return BAD("out of memory restoring a request of %llu bytes", (unsigned long long)plen);
	if (get(r, p, plen) < 0) {
		free(p);
		return -1;
	}
	/* a move to another GPU: contexts and physical memory are made
	 * there (each request's first field), and access is given to it */
	if ((op == RGPU_OP_CTX_CREATE || op == RGPU_OP_VMM_CREATE || op == RGPU_OP_POOL_CREATE ||
	     op == RGPU_OP_POOL_DEFAULT) && r->gpu_to >= 0 && plen >= 4)
		snap_le(p, (uint32_t)r->gpu_to, 4);
	/* (a session moved onto one GPU has no peers to give access) */
	if (op == RGPU_OP_POOL_ACCESS && r->gpu_to >= 0) {
		free(p);
		return 0;
	}
	/* handle 0 in a VMM request: the physical memory made last under a
	 * new id (one released while mapped: vmmstate.h) */
	if (op == RGPU_OP_VMM_MAP && plen == 32 && !snap_gl(p + 24, 8))
		snap_le(p + 24, r->vmm_made, 8);
	if (op == RGPU_OP_VMM_RELEASE && plen == 8 && !snap_gl(p, 8))
		snap_le(p, r->vmm_made, 8);
	if (op == RGPU_OP_VMM_ACCESS && r->gpu_to >= 0 && plen >= 28) {
		/* u64 addr, u64 size, u32 n, n x (u32 gpu, u32 flags): one */
		snap_le(p + 16, 1, 4);
		snap_le(p + 20, (uint32_t)r->gpu_to, 4);
		snap_le(p + 24, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, 4);
		plen = 28;
	}
	s->ht.force_id = id;
	s->ht.force = r->ids;
	s->ht.nforce = r->nids;
	ht_made_reset(&s->ht);
	s->req_capture = 0;
	if (place)
		migrate_place_next(place);
	struct rgpu_hdr h = { .magic = RGPU_PROTO_MAGIC, .version = RGPU_PROTO_VERSION, .op = op,
			      .len = (uint32_t)plen };
	struct rd rd;
	rd_init(&rd, p, plen);
	wbuf_reset(&s->tx);
	int st = od->fn(s, &h, &rd, &s->tx);
	s->ht.force_id = 0;
	uint32_t unused = s->ht.nforce, wanted = r->nids;
	s->ht.force = NULL;
	s->ht.nforce = 0;
	free(r->ids);
	r->ids = NULL;
	r->nids = 0;
	if (place)
		migrate_place_next(0);
	int rc = 0;
	uint64_t made = s->tx.len >= 8 ? snap_gl(s->tx.data, 8) : 0;
	if (st)
		rc = BAD("re-creating an object (%s) failed: %s", rgpu_op_name(op),
			 st > 0 ? rgpud_cu_errname(D, st) : "malformed request");
	else if (wanted && (unused || s->ht.nmade != wanted))
		rc = BAD("replaying a graph's request (%s) made %u handles, not %u",
			 rgpu_op_name(op), s->ht.nmade - (wanted - unused), wanted);
	else if (op == RGPU_OP_VMM_CREATE && !id && !(r->vmm_made = made))
		rc = BAD("re-creating physical memory (VMM_CREATE) gave no handle");
	else if (id && made != id)
		rc = BAD("re-creating an object (%s) gave handle %#llx, not %#llx", rgpu_op_name(op),
			 (unsigned long long)made, (unsigned long long)id);
	else if (result && made != result &&
		 (op == RGPU_OP_MODULE_GET_GLOBAL || op == RGPU_OP_LIBRARY_GET_GLOBAL ||
		  op == RGPU_OP_LIBRARY_GET_MANAGED))
		rc = BAD("a module global moved from %#llx to %#llx: this device does not place "
			 "module data where the source had it%s", (unsigned long long)result,
			 (unsigned long long)made,
			 personality(0xffffffff) & ADDR_NO_RANDOMIZE
				 ? " (another driver version or GPU model?)"
				 : " (this worker's address space is randomised: rgpud "
				   "--worker-layout=random, or the system refused to turn it off)");
	if (!rc)
		journal_note(s, op, p, plen, 0, s->tx.data, s->tx.len);
	wbuf_reset(&s->tx);
	free(p);
	return rc;
}

static void mem_head_read(struct rst *r, const uint8_t f[32], struct mem_head *m)
{
	m->dptr = snap_gl(f, 8);
	m->size = snap_gl(f + 8, 8);
	m->ctx = snap_gl(f + 16, 8);
	m->dev = r->gpu_to >= 0 ? (unsigned)r->gpu_to : (unsigned)snap_gl(f + 24, 4);
	m->kind = (int)snap_gl(f + 28, 4);
}

/* Makes the memory's restored context current. */
static int mem_enter(struct rst *r, const struct mem_head *m)
{
	struct hentry *e = ht_get(&r->s->ht, m->ctx, HK_CTX);
	if (!e)
		return BAD("memory at %#llx names no restored context", (unsigned long long)m->dptr);
	D->cuCtxSetCurrent(e->obj);
	r->s->cur_ctx = m->ctx;
	return 0;
}

static int restore_at(struct rst *r, const struct mem_head *h);

/* MEMORY records up to this size are copied from pageable memory */
#define MEM_SMALL_COPY (64u << 10)

static int memory(struct rst *r, uint64_t len)
{
	struct session *s = r->s;
	uint8_t f[32];
	if (len < sizeof(f) || get(r, f, sizeof(f)) < 0)
		return len < sizeof(f) ? BAD("malformed session state (memory)") : -1;
	struct mem_head m;
	mem_head_read(r, f, &m);
	uint64_t dptr = m.dptr, size = m.size, ctx = m.ctx;
	int kind = m.kind;
	if (size != len - sizeof(f) || kind < MEMK_ALLOC || kind > MEMK_GLOBAL)
		return BAD("malformed session state (memory record)");
	if (mem_enter(r, &m) < 0)
		return -1;
	if (kind == MEMK_ALLOC) {
		preps_drop(r, dptr, size);
		if (restore_at(r, &m) < 0)
			return -1;
	} else if (!session_owns_range(s, dptr, size)) {
		return BAD("memory at %#llx was not re-created by its object", (unsigned long long)dptr);
	}
	int rc = 0;
	if (size <= MEM_SMALL_COPY) {
		/* a module's globals, typically: from pageable memory, which
		 * the driver stages itself (a pinned buffer made now would
		 * wait for the GPU-to-GPU copies under way) */
		uint8_t *b = malloc(size ? size : 1);
		if (!b)
			return BAD("out of memory");
		if (get(r, b, size) < 0) {
			free(b);
			return -1;
		}
		rc = size ? D->cuMemcpyHtoDAsync_v2(dptr, b, size, NULL) : 0;
		free(b);
	} else {
		/* through the session's staging pool, as a client's
		 * host-to-device copy: each chunk is received into a free
		 * pinned buffer and queued, the buffer back when its copy is
		 * done, so the network and the GPU overlap as far as the pool
		 * reaches */
		struct xfer_pool *pool = stage_pool(s);
		for (uint64_t off = 0; off < size && !rc;) {
			size_t k = size - off < RGPU_CHUNK_SIZE ? (size_t)(size - off) : RGPU_CHUNK_SIZE;
			int i = xfer_pool_get(pool, ctx, &rc);
			if (i < 0)
				break;
			if (get(r, pool->b[i].p, k) < 0) {
				xfer_pool_drop(pool, i);
				D->cuStreamSynchronize(NULL);
				return -1;
			}
			rc = stage_htod(pool, i, dptr + off, k, NULL, 0, 0);
			off += k;
		}
	}
	if (rc) {
		D->cuStreamSynchronize(NULL);
	} else {
		/* waited for with the rest (the restore's end) */
		struct hentry *e = ht_get(&s->ht, ctx, HK_CTX);
		rc = e ? mem_pending_add(&r->mp, e->obj) : (int)D->cuStreamSynchronize(NULL);
	}
	if (rc)
		return BAD("writing device memory at %#llx: %s", (unsigned long long)dptr,
			   rgpud_cu_errname(D, rc));
	return 0;
}

/* Maps an imported block at an address of its own, readable by dev. */
static int import_map(struct rst *r, struct imported *m, unsigned dev)
{
	uint64_t t0 = rgpu_now_ns();
	int stage = 0, rc;
	if (!(rc = D->cuMemAddressReserve(&m->va, m->len, 2ull << 20, 0, 0)) && ++stage &&
	    !(rc = D->cuMemMap(m->va, m->len, 0, m->h, 0))) {
		++stage;
		/* the copying GPU reads it over the peer link */
		CUmemAccessDesc acc = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE,
						      .id = (int)dev },
					.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
		rc = D->cuMemSetAccess(m->va, m->len, &acc, 1);
	}
	if (rc) {
		if (stage >= 2)
			D->cuMemUnmap(m->va, m->len);
		if (stage >= 1)
			D->cuMemAddressFree(m->va, m->len);
		return BAD("cannot map the source's device memory (GPU %u) for GPU %u: %s", m->dev,
			   dev, rgpud_cu_errname(D, rc));
	}
	m->mapped = 1;
	r->info->map_ns += rgpu_now_ns() - t0;
	return 0;
}

/* The source's physical memory under token, mapped here and readable by
 * dev; NULL with why[] set. */
static struct imported *import(struct rst *r, const uint8_t token[16], uint64_t len, unsigned dev)
{
	for (struct imported *m = r->imp; m; m = m->next)
		if (!memcmp(m->token, token, 16)) {
			if (m->len != len)
				return BAD("malformed session state (peer memory)"), NULL;
			return m->mapped || import_map(r, m, dev) == 0 ? m : NULL;
		}
	int fd = -1;
	unsigned gpu = 0;
	uint64_t size = 0;
	uint8_t tok[16];
	memcpy(tok, token, 16);
	uint64_t t0 = rgpu_now_ns();
	int rc = gate_share_get(tok, &fd, &gpu, &size);
	if (rc) {
		BAD("the source's device memory is not shared with this worker (%s)",
		    rc == CUDA_ERROR_NOT_PERMITTED ? "another job or user" : "unknown token");
		return NULL;
	}
	struct imported *m = calloc(1, sizeof(*m));
	if (!m || size != len) {
		close(fd);
		free(m);
		BAD(m ? "malformed session state (peer memory of %llu bytes, %llu shared)"
		      : "out of memory", (unsigned long long)len, (unsigned long long)size);
		return NULL;
	}
	memcpy(m->token, token, 16);
	m->len = len;
	m->dev = gpu;
	rc = D->cuMemImportFromShareableHandle(&m->h, (void *)(intptr_t)fd,
					       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	close(fd);
	r->info->map_ns += rgpu_now_ns() - t0;
	if (rc) {
		free(m);
		BAD("cannot import the source's device memory (GPU %u): %s", gpu, rgpud_cu_errname(D, rc));
		return NULL;
	}
	if (import_map(r, m, dev) < 0) {
		D->cuMemRelease(m->h);
		free(m);
		return NULL;
	}
	m->next = r->imp;
	r->imp = m;
	return m;
}

static void import_unmap(struct imported *m)
{
	if (!m->mapped)
		return;
	D->cuMemUnmap(m->va, m->len);
	D->cuMemAddressFree(m->va, m->len);
	m->mapped = 0;
}

static void imports_free(struct imported *m)
{
	while (m) {
		struct imported *next = m->next;
		import_unmap(m);
		D->cuMemRelease(m->h);
		free(m);
		m = next;
	}
}

/* The source's blocks unmapped (objects made next must find the driver's
 * address space as the source's was); their handles stay, so mapping them
 * again for the copies is a map, not an import. */
static int copies_wait(struct rst *r);
static int imports_unmap(struct rst *r)
{
	/* (never under copies still reading them) */
	int rc = r->queued ? copies_wait(r) : 0;
	for (struct imported *m = r->imp; m; m = m->next)
		import_unmap(m);
	return rc;
}

/* A restore's mappings of the source's memory, let go once the source
 * has been answered (snap_restore_done): unmapping gigabytes took part of
 * a move's pause.  One restore at a time per worker. */
static struct imported *imports_left;

void snap_restore_done(void)
{
	imports_free(imports_left);
	imports_left = NULL;
}

static void *release_thread(void *arg)
{
	rgpud_capture_relaxed(D); /* (rgpud's own calls: never a capture's unsafe call) */
	imports_free(arg);
	return NULL;
}

void snap_restore_release_later(void)
{
	struct imported *m = imports_left;
	imports_left = NULL;
	if (!m)
		return;
	/* on a thread of its own: the client waits to attach meanwhile (the
	 * driver's calls are thread-safe, and none of these mappings is the
	 * session's); where no thread can start, here */
	pthread_t t;
	pthread_attr_t at;
	if (pthread_attr_init(&at) == 0) {
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		int rc = pthread_create(&t, &at, release_thread, m);
		pthread_attr_destroy(&at);
		if (rc == 0)
			return;
	}
	imports_free(m);
}

/* Device memory re-created at its address; the source's blocks mapped
 * here ahead (PREP) may lie where memory allocated since must go: then
 * they are let go (mapped again for the copies) and it is tried again.
 * 0, or -1 with why[] set. */
static int restore_at(struct rst *r, const struct mem_head *h)
{
	int rc = memif_restore_at(r->s, h->ctx, h->dev, h->dptr, h->size);
	if (rc == CUDA_ERROR_INVALID_VALUE && r->imp) {
		if (imports_unmap(r) < 0)
			return -1;
		rc = memif_restore_at(r->s, h->ctx, h->dev, h->dptr, h->size);
	}
	if (rc)
		return BAD("cannot re-create %llu bytes of device memory at %#llx: %s",
			   (unsigned long long)h->size, (unsigned long long)h->dptr,
			   rgpud_cu_errname(D, rc));
	return 0;
}

/* The fields of a PEER or PREP record into c, checked. */
static int peer_read(struct rst *r, uint64_t len, struct peer_copy *c)
{
	uint8_t f[64];
	if (len != sizeof(f))
		return BAD("malformed session state (peer record)");
	if (get(r, f, sizeof(f)) < 0)
		return -1;
	mem_head_read(r, f, &c->h);
	memcpy(c->token, f + 32, 16);
	c->va = snap_gl(f + 48, 8);
	c->blen = snap_gl(f + 56, 8);
	uint64_t dptr = c->h.dptr, size = c->h.size;
	if ((c->h.kind != MEMK_ALLOC && c->h.kind != MEMK_FIXED) || !size || dptr < c->va ||
	    dptr - c->va > c->blen || size > c->blen - (dptr - c->va))
		return BAD("malformed session state (peer record)");
	return 0;
}

/* Frees memory a PREP record made that the pause did not name. */
static void prep_free(struct rst *r, struct peer_copy *p)
{
	struct alloc a = session_alloc_del(r->s, p->h.dptr);
	if (!a.size)
		return;
	if (mem_enter(r, &p->h) == 0)
		(void)mem_free(r->s, p->h.dptr);
	gate_refund_bytes(a.dev, a.size);
}

/* Prepared memory that no PEER record claimed, within [dptr, dptr + size)
 * (all of it for size 0), freed: what the source freed since. */
static void preps_drop(struct rst *r, uint64_t dptr, uint64_t size)
{
	for (struct peer_copy **pp = &r->preps; *pp;) {
		struct peer_copy *p = *pp;
		if (!p->used && (!size || (p->h.dptr < dptr + size && dptr < p->h.dptr + p->h.size))) {
			prep_free(r, p);
			*pp = p->next;
			free(p);
			continue;
		}
		pp = &p->next;
	}
}

/* Pinned staging buffers made ahead of a move's pause whose copies go GPU
 * to GPU: the pause's MEMORY records by value (memory mapped by the
 * client, VMM) would otherwise make them then, and making pinned memory
 * waits for the copies under way. */
#define STAGE_PRIME 2
static int stage_prime(struct rst *r)
{
	struct xfer_pool *pool = stage_pool(r->s);
	if (mem_enter(r, &r->preps->h) < 0)
		return -1;
	int got[STAGE_PRIME], n = 0, rc = 0;
	/* (each kept meanwhile, so that the next is another) */
	while (n < STAGE_PRIME && (got[n] = xfer_pool_get(pool, r->preps->h.ctx, &rc)) >= 0)
		xfer_pool_keep(pool, got[n++]);
	while (n--)
		xfer_pool_drop(pool, got[n]);
	if (rc)
		return BAD("no staging memory for the session's state: %s", rgpud_cu_errname(D, rc));
	return 0;
}

/* bytes of each prepared block copied ahead (prep) */
#define WARM_BYTES (64u << 10)
static int copy_queue(struct rst *r, uint64_t ctx, CUdeviceptr dst, CUdeviceptr src, uint64_t n);

/* A PREP record: the memory re-created at its address and the source's
 * block mapped here, while the session still runs on the source. */
static int prep(struct rst *r, uint64_t len)
{
	struct peer_copy *p = calloc(1, sizeof(*p));
	if (!p)
		return BAD("out of memory");
	if (peer_read(r, len, p) < 0 || mem_enter(r, &p->h) < 0) {
		free(p);
		return -1;
	}
	if (p->h.kind == MEMK_FIXED) {
		/* an application VMM mapping, made by the requests ahead of it:
		 * the source's block mapped here now, so that its PEER record
		 * in the pause only copies */
		uint64_t at = p->h.dptr;
		int owned = session_owns_range(r->s, at, p->h.size);
		struct imported *m = owned ? import(r, p->token, p->blen, p->h.dev) : NULL;
		if (m)
			r->info->prep_vmm += p->h.size;
		free(p);
		if (!owned)
			return BAD("prepared memory at %#llx was not made by its objects",
				   (unsigned long long)at);
		return m ? 0 : -1;
	}
	if (p->h.kind != MEMK_ALLOC) {
		int kind = p->h.kind;
		free(p);
		return BAD("malformed session state (prepared memory of kind %d)", kind);
	}
	if (restore_at(r, &p->h) < 0) {
		free(p);
		return -1;
	}
	p->next = r->preps;
	r->preps = p;
	r->info->prep_bytes += p->h.size;
	struct imported *m = import(r, p->token, p->blen, p->h.dev);
	if (!m)
		return -1;
	/* a first copy from the source's block, while the session runs on
	 * there: what a context's first GPU-to-GPU copy sets up (its copy
	 * streams, the path to the peer) is not part of the pause; the bytes
	 * are overwritten then, or the memory freed (after SYNC waits) */
	uint64_t n = p->h.size < WARM_BYTES ? p->h.size : WARM_BYTES;
	return copy_queue(r, p->h.ctx, p->h.dptr, m->va + (p->h.dptr - p->va), n);
}

/* A PEER record: the memory re-created at its address now (unless a PREP
 * record made it already), to be filled GPU to GPU from the source's own
 * physical memory once every object is restored.  (Mapping the source's
 * memory here takes address space from the driver; done between module
 * loads, it moved the modules' data away from the addresses the client
 * knows: measured on two H100s.) */
static int copy_one(struct rst *r, struct peer_copy *c, int mapped_only);
static int peer(struct rst *r, uint64_t len)
{
	struct peer_copy *c = calloc(1, sizeof(*c));
	if (!c)
		return BAD("out of memory");
	*r->copies_tail = c;
	r->copies_tail = &c->next;
	if (peer_read(r, len, c) < 0 || mem_enter(r, &c->h) < 0)
		return -1;
	uint64_t dptr = c->h.dptr, size = c->h.size;
	if (c->h.kind == MEMK_FIXED) {
		/* an application VMM mapping: re-made by the CREATE records
		 * before it (vmmstate.h); only its bytes come by reference */
		if (!session_owns_range(r->s, dptr, size))
			return BAD("memory at %#llx was not re-created by its object",
				   (unsigned long long)dptr);
		return copy_one(r, c, 1) < 0 ? -1 : 0;
	}
	for (struct peer_copy *p = r->preps; p; p = p->next)
		if (!p->used && p->h.dptr == dptr && p->h.size == size && p->h.ctx == c->h.ctx &&
		    p->h.dev == c->h.dev) {
			p->used = 1;
			r->info->prep_used += size;
			/* the source has paused: its bytes are final, and the
			 * copy runs while the rest of the state is read */
			return copy_one(r, c, 1) < 0 ? -1 : 0;
		}
	preps_drop(r, dptr, size);
	if (restore_at(r, &c->h) < 0)
		return -1;
	return copy_one(r, c, 1) < 0 ? -1 : 0;
}

/* The copy streams of the context that is current (the memory's: made
 * current by mem_enter), made on first use; NULL with why[] set. */
static struct copy_ctx *copy_ctx_get(struct rst *r, uint64_t ctx)
{
	for (struct copy_ctx *c = r->cctx; c; c = c->next)
		if (c->ctx == ctx)
			return c;
	struct copy_ctx *c = calloc(1, sizeof(*c));
	if (!c)
		return BAD("out of memory"), NULL;
	c->ctx = ctx;
	struct hentry *e = ht_get(&r->s->ht, ctx, HK_CTX);
	c->cu = e ? e->obj : NULL;
	for (unsigned i = 0; i < COPY_STREAMS; i++) {
		int rc = D->cuStreamCreateWithPriority(&c->st[i], CU_STREAM_NON_BLOCKING, 0);
		if (rc) {
			while (i--)
				D->cuStreamDestroy_v2(c->st[i]);
			free(c);
			return BAD("no stream to copy the session's memory GPU to GPU: %s",
				   rgpud_cu_errname(D, rc)), NULL;
		}
	}
	c->next = r->cctx;
	r->cctx = c;
	return c;
}

/* Queues n bytes from src (the source's block mapped here) to dst on the
 * current context's copy streams, in pieces taken by them in turn. */
static int copy_queue(struct rst *r, uint64_t ctx, CUdeviceptr dst, CUdeviceptr src, uint64_t n)
{
	struct copy_ctx *c = copy_ctx_get(r, ctx);
	if (!c)
		return -1;
	uint64_t t0 = rgpu_now_ns();
	if (!r->copy_t0)
		r->copy_t0 = t0;
	for (uint64_t off = 0; off < n;) {
		uint64_t k = n - off < COPY_PIECE ? n - off : COPY_PIECE;
		int rc = D->cuMemcpyDtoDAsync_v2(dst + off, src + off, k,
						 c->st[c->turn++ % COPY_STREAMS]);
		if (rc)
			return BAD("copying device memory at %#llx GPU to GPU: %s",
				   (unsigned long long)(dst + off), rgpud_cu_errname(D, rc));
		off += k;
		r->info->copy_calls++;
	}
	r->queued = 1;
	r->info->copy_queue_ns += rgpu_now_ns() - t0;
	return 0;
}

/* Waits for every copy queued (0, or -1 with why[] set). */
static int copies_wait(struct rst *r)
{
	int rc = 0;
	for (struct copy_ctx *c = r->cctx; c; c = c->next)
		for (unsigned i = 0; i < COPY_STREAMS; i++) {
			if (c->cu && i == 0)
				D->cuCtxSetCurrent(c->cu);
			int k = D->cuStreamSynchronize(c->st[i]);
			if (k && !rc)
				rc = k;
		}
	r->queued = 0;
	if (rc)
		return BAD("waiting for the GPU-to-GPU copies of device memory: %s",
			   rgpud_cu_errname(D, rc));
	return 0;
}

/* The copy streams go, after what they hold is done (on any path: the
 * source's blocks are unmapped only after). */
static void copy_ctx_free(struct copy_ctx *l)
{
	while (l) {
		struct copy_ctx *c = l;
		l = c->next;
		if (c->cu)
			D->cuCtxSetCurrent(c->cu);
		for (unsigned i = 0; i < COPY_STREAMS; i++) {
			D->cuStreamSynchronize(c->st[i]);
			D->cuStreamDestroy_v2(c->st[i]);
		}
		free(c);
	}
}

/* A PEER record's copy queued, its source's block mapped here first
 * unless mapped_only (in mid-stream, mapping would take address space
 * that objects made later must find as the source had it: then it waits
 * for the end).  1 queued, 0 left for later, -1 failed. */
static int copy_one(struct rst *r, struct peer_copy *c, int mapped_only)
{
	if (c->queued)
		return 1;
	struct imported *m = NULL;
	for (m = r->imp; m && memcmp(m->token, c->token, 16); m = m->next)
		;
	if (mapped_only && (!m || !m->mapped || m->len != c->blen))
		return 0;
	if (mem_enter(r, &c->h) < 0 || !(m = import(r, c->token, c->blen, c->h.dev)))
		return -1;
	uint64_t dptr = c->h.dptr;
	if (copy_queue(r, c->h.ctx, dptr, m->va + (dptr - c->va), c->h.size) < 0)
		return -1;
	c->queued = 1;
	r->info->peer_bytes += c->h.size;
	if (mapped_only)
		r->info->copy_early += c->h.size;
	return 1;
}

/* The PEER records' copies not queued yet, queued; with wait, waited for
 * (all of them: those queued as their records came too). */
static int peer_copies(struct rst *r, int wait)
{
	for (struct peer_copy *c = r->copies; c; c = c->next)
		if (copy_one(r, c, 0) < 0)
			return -1;
	if (!wait)
		return 0;
	int rc = copies_wait(r);
	if (r->copy_t0)
		r->info->copy_ns = rgpu_now_ns() - r->copy_t0;
	return rc;
}

static void peer_copies_free(struct rst *r)
{
	while (r->copies) {
		struct peer_copy *c = r->copies;
		r->copies = c->next;
		free(c);
	}
	r->copies_tail = &r->copies;
}

static int table(struct rst *r, uint64_t len)
{
	uint8_t w[4];
	if (len < 8 || get(r, w, 4) < 0)
		return len < 8 ? BAD("malformed session state (table)") : -1;
	uint64_t n = snap_gl(w, 4);
	if (n > (1u << 28) || len < 8 + 4 * n)
		return BAD("malformed session state (table of %llu)", (unsigned long long)n);
	uint32_t *gens = malloc((n + 1) * 4);
	uint32_t *freel = NULL;
	int rc = -1;
	if (!gens)
		return BAD("out of memory for the handle table");
	for (uint64_t i = 0; i < n; i++) {
		if (get(r, w, 4) < 0)
			goto out;
		gens[i] = (uint32_t)snap_gl(w, 4);
	}
	if (get(r, w, 4) < 0)
		goto out;
	uint64_t nf = snap_gl(w, 4);
	if (nf > n || len != 8 + 4 * n + 4 * nf) {
		BAD("malformed session state (free list)");
		goto out;
	}
	if (!(freel = malloc((nf + 1) * 4))) {
		BAD("out of memory for the handle table");
		goto out;
	}
	for (uint64_t i = 0; i < nf; i++) {
		if (get(r, w, 4) < 0)
			goto out;
		freel[i] = (uint32_t)snap_gl(w, 4);
	}
	if (ht_set_layout(&r->s->ht, (uint32_t)n, gens, freel, (uint32_t)nf) < 0)
		BAD("the restored handle table disagrees with the source's");
	else
		rc = 0;
out:
	free(gens);
	free(freel);
	return rc;
}

/* A restore's GPU-to-GPU copies, left to run once it is answered. */
struct snap_defer {
	struct session *s;
	int gpu_to;
	struct imported *imp;
	struct peer_copy *copies;
	struct copy_ctx *cctx; /* the streams they are queued on */
	uint64_t copy_t0;
	struct mem_pending mp; /* and the MEMORY records' copies */
};

uint64_t snap_defer_bytes(const struct snap_defer *d)
{
	uint64_t n = 0;
	for (const struct peer_copy *c = d ? d->copies : NULL; c; c = c->next)
		n += c->h.size;
	return n;
}

int snap_restore_finish(struct snap_defer *d, struct snap_info *info, char *why, size_t whylen)
{
	struct rst rr = { .s = d->s, .gpu_to = d->gpu_to, .why = why, .whylen = whylen,
			  .info = info, .imp = d->imp, .copies = d->copies, .cctx = d->cctx,
			  .queued = 1, .copy_t0 = d->copy_t0 };
	struct rst *r = &rr;
	r->copies_tail = &r->copies;
	uint64_t t0 = rgpu_now_ns();
	int rc = peer_copies(r, 1);
	int mrc = mem_pending_wait(&d->mp);
	if (!rc && mrc)
		rc = BAD("writing device memory: %s", rgpud_cu_errname(D, mrc));
	info->mem_ns += rgpu_now_ns() - t0;
	peer_copies_free(r);
	copy_ctx_free(r->cctx);
	free(d);
	snap_restore_done(); /* (none left: one restore at a time) */
	imports_left = r->imp; /* let go by the caller */
	D->cuCtxSetCurrent(NULL);
	r->s->cur_ctx = 0;
	if (rc && !why[0])
		snprintf(why, whylen, "copying the session's memory GPU to GPU failed");
	return rc ? -1 : 0;
}

void snap_restore_cancel(struct snap_defer *d)
{
	if (!d)
		return;
	struct rst rr = { .copies = d->copies };
	peer_copies_free(&rr);
	mem_pending_wait(&d->mp);
	copy_ctx_free(d->cctx); /* (before the blocks they read go) */
	imports_free(d->imp);
	free(d);
}

int snap_restore(struct session *s, const struct snap_io *io, int gpu_to, struct snap_info *info,
		 char *why, size_t whylen, struct snap_defer **defer)
{
	if (defer)
		*defer = NULL;
	struct rst rr = { .s = s, .io = io, .gpu_to = gpu_to, .why = why, .whylen = whylen,
			  .info = info };
	struct rst *r = &rr;
	r->copies_tail = &r->copies;
	memset(info, 0, sizeof(*info));
	if (s->ht.n)
		return BAD("a session is restored only into a fresh one");
	uint64_t nrec = 0, t_sync = 0;
	int rc = 0, ended = 0, paused_mem = 0, synced = 0;
	uint64_t op_ns[RGPU_OP_MAX] = { 0 };
	uint32_t op_n[RGPU_OP_MAX] = { 0 };
	while (!rc && !ended) {
		uint8_t h[SNAP_REC_HDR];
		if (get(r, h, sizeof(h)) < 0) {
			rc = -1;
			break;
		}
		uint32_t tag = (uint32_t)snap_gl(h, 4);
		uint64_t len = snap_gl(h + 8, 8);
		if (t_sync && !info->pause_wait_ns) /* (the source paused and sent) */
			info->pause_wait_ns = rgpu_now_ns() - t_sync + 1;
		if (nrec == 0 && tag != SNAP_HEADER) {
			rc = BAD("not a session state (no header)");
			break;
		}
		switch (tag) {
		case SNAP_HEADER:
			rc = nrec ? BAD("malformed session state (two headers)") : header(r, len, info);
			break;
		case SNAP_IDS:
			rc = ids(r, len);
			break;
		case SNAP_CREATE: {
			/* objects made since the PREP records: the driver's
			 * address space as the source's was (module data goes
			 * where it went there), so the source's blocks mapped
			 * ahead go (mapped again for the copies), and in the
			 * pause, prepared memory no record has claimed.  The
			 * graph records come last and place nothing: the
			 * copies go on under them. */
			uint64_t t0 = rgpu_now_ns();
			unsigned op = RGPU_OP_MAX;
			rc = create(r, len, &op, synced);
			uint64_t dt = rgpu_now_ns() - t0;
			info->create_ns += dt;
			if (r->graph_phase) {
				info->graph_recs++;
				info->graph_ns += dt;
				info->graph_pause += synced;
			}
			if (op < RGPU_OP_MAX) {
				op_ns[op] += dt;
				op_n[op]++;
			}
			break;
		}
		case SNAP_MEMORY: {
			uint64_t t0 = rgpu_now_ns();
			paused_mem = 1;
			rc = memory(r, len);
			info->mem_ns += rgpu_now_ns() - t0;
			info->mem_bytes += len;
			break;
		}
		case SNAP_PEER: {
			uint64_t t0 = rgpu_now_ns();
			paused_mem = 1;
			rc = peer(r, len);
			info->mem_ns += rgpu_now_ns() - t0;
			info->peer_ns += rgpu_now_ns() - t0;
			info->peer_recs++;
			break;
		}
		case SNAP_PREP: {
			uint64_t t0 = rgpu_now_ns();
			rc = paused_mem ? BAD("malformed session state (prepared memory late)")
					: prep(r, len);
			info->prep_ns += rgpu_now_ns() - t0;
			break;
		}
		case SNAP_TABLE: {
			uint64_t t0 = rgpu_now_ns();
			rc = table(r, len);
			info->table_ns += rgpu_now_ns() - t0;
			break;
		}
		case SNAP_SYNC:
			/* the objects sent ahead are made: say so, then wait
			 * for the rest */
			if (len || !io->sync)
				rc = BAD("malformed session state (sync)");
			else if (r->queued && copies_wait(r) < 0)
				rc = -1; /* (the PREP records' first copies) */
			else if (r->preps && stage_prime(r) < 0)
				rc = -1;
			else if (io->sync(io->arg) < 0)
				rc = BAD("the sender of the session's state went away");
			synced = 1;
			/* (graph records ahead end here: the pause's objects
			 * find the address space as the source left it) */
			r->graph_phase = 0;
			r->copy_t0 = 0;
			info->copy_calls = info->copy_queue_ns = 0; /* (the pause's alone) */
			t_sync = rgpu_now_ns();
			break;
		case SNAP_LAST: {
			uint8_t l[8];
			if (len != 8 || get(r, l, 8) < 0)
				rc = len != 8 ? BAD("malformed session state (last)") : -1;
			else
				info->last_id = snap_gl(l, 8);
			break;
		}
		case SNAP_END: {
			uint8_t n[8];
			if (len != 8 || get(r, n, 8) < 0)
				rc = BAD("malformed session state (end)");
			else if (snap_gl(n, 8) != nrec)
				rc = BAD("session state of %llu records, %llu received",
					 (unsigned long long)snap_gl(n, 8), (unsigned long long)nrec);
			ended = 1;
			break;
		}
		default:
			rc = BAD("malformed session state (record %u)", tag);
		}
		nrec++;
	}
	free(r->ids);
	r->ids = NULL;
	if (!rc)
		preps_drop(r, 0, 0);
	uint64_t t_end = rgpu_now_ns();
	/* the copies not queued yet (their blocks were not mapped here when
	 * their records came) are queued now; they and the rest run after
	 * the answer, while the client re-attaches (defer), or are waited
	 * for here */
	if (!rc && r->copies) {
		uint64_t t0 = rgpu_now_ns();
		rc = peer_copies(r, !defer);
		info->mem_ns += rgpu_now_ns() - t0;
	}
	if (!rc && r->copies && defer && (*defer = calloc(1, sizeof(**defer)))) {
		**defer = (struct snap_defer){ .s = s, .gpu_to = gpu_to, .imp = r->imp,
					       .copies = r->copies, .cctx = r->cctx,
					       .copy_t0 = r->copy_t0, .mp = r->mp };
		r->imp = NULL;
		r->copies = NULL;
		r->copies_tail = &r->copies;
		r->cctx = NULL;
		r->mp.n = 0;
	} else if (!rc && r->copies && defer) {
		rc = peer_copies(r, 1);
	}
	/* (on every other path, before the session serves or goes) */
	int mrc = mem_pending_wait(&r->mp);
	if (!rc && mrc)
		rc = BAD("writing device memory: %s", rgpud_cu_errname(D, mrc));
	if (synced)
		info->pause_ns = rgpu_now_ns() - t_sync;
	info->tail_ns = rgpu_now_ns() - t_end;
	peer_copies_free(r);
	copy_ctx_free(r->cctx); /* (done, or waited for on failure) */
	r->cctx = NULL;
	if (rc) {
		imports_free(r->imp);
		r->imp = NULL;
	} else {
		snap_restore_done(); /* (none left: one restore at a time) */
		imports_left = r->imp;
		r->imp = NULL;
	}
	while (r->preps) { /* (the session is torn down on failure) */
		struct peer_copy *p = r->preps;
		r->preps = p->next;
		free(p);
	}
	for (unsigned op = 0; op < RGPU_OP_MAX; op++)
		if (op_ns[op] > info->slow_ns) {
			info->slow_ns = op_ns[op];
			info->slow_op = (uint16_t)op;
			info->slow_n = op_n[op];
		}
	D->cuCtxSetCurrent(NULL);
	s->cur_ctx = 0;
	if (rc && !why[0])
		snprintf(why, whylen, "restoring the session failed");
	return rc ? -1 : 0;
}
