/*
 * A session's device allocations (see mem.h): a reserved range of virtual
 * addresses per device, physical chunks mapped into it, small allocations
 * sharing 2 MiB chunks.
 */
#include "mem_int.h"

#include "clock.h"
#include "log.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Where a worker's ranges go: below 16 TiB, which RGPU_VA_BASE (the
 * client's managed range, a multiple of 16 TiB) never names, in slots of
 * MEM_RANGE_SIZE; the driver honoured a fixed hint there on the H100
 * (0xa0000000000 and 0xe0000000000 exactly; 0x10000000000 not). */
#define MEM_RANGE_FIRST 0x0a0000000000ull
#define MEM_RANGE_SLOTS 11

struct mem_state *mem_state(struct session *s)
{
	if (!s->mem) {
		s->mem = calloc(1, sizeof(*s->mem));
		if (s->mem)
			s->mem->last_active_ns = rgpu_now_ns();
	}
	return s->mem;
}

/* ---- blocks, sorted by address ---- */

static size_t block_upper(const struct mem_state *m, uint64_t va)
{
	size_t lo = 0, hi = m->nblocks;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (m->blocks[mid]->va <= va)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

struct mem_block *mem_block_at(struct mem_state *m, uint64_t va)
{
	size_t i = block_upper(m, va);
	return i && m->blocks[i - 1]->va == va ? m->blocks[i - 1] : NULL;
}

struct mem_block *mem_block_holding(struct mem_state *m, uint64_t addr)
{
	size_t i = block_upper(m, addr);
	if (!i)
		return NULL;
	struct mem_block *b = m->blocks[i - 1];
	return addr < b->va + b->len ? b : NULL;
}

static int block_insert(struct mem_state *m, struct mem_block *b)
{
	if (m->nblocks == m->capblocks) {
		size_t cap = m->capblocks ? 2 * m->capblocks : 32;
		struct mem_block **nb = realloc(m->blocks, cap * sizeof(*nb));
		if (!nb)
			return -1;
		m->blocks = nb;
		m->capblocks = cap;
	}
	size_t i = block_upper(m, b->va);
	memmove(&m->blocks[i + 1], &m->blocks[i], (m->nblocks - i) * sizeof(*m->blocks));
	m->blocks[i] = b;
	m->nblocks++;
	return 0;
}

static void block_remove(struct mem_state *m, struct mem_block *b)
{
	for (size_t i = 0; i < m->nblocks; i++)
		if (m->blocks[i] == b) {
			memmove(&m->blocks[i], &m->blocks[i + 1],
				(m->nblocks - i - 1) * sizeof(*m->blocks));
			m->nblocks--;
			return;
		}
}

/* ---- allocations, sorted by address ---- */

static ssize_t alloc_find(const struct mem_state *m, uint64_t addr)
{
	size_t lo = 0, hi = m->nallocs;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (m->allocs[mid].addr < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < m->nallocs && m->allocs[lo].addr == addr ? (ssize_t)lo : -1;
}

static int alloc_insert(struct mem_state *m, uint64_t addr, uint64_t size, struct mem_block *b)
{
	if (m->nallocs == m->capallocs) {
		size_t cap = m->capallocs ? 2 * m->capallocs : 64;
		struct mem_a *na = realloc(m->allocs, cap * sizeof(*na));
		if (!na)
			return -1;
		m->allocs = na;
		m->capallocs = cap;
	}
	size_t i = 0;
	while (i < m->nallocs && m->allocs[i].addr < addr)
		i++;
	memmove(&m->allocs[i + 1], &m->allocs[i], (m->nallocs - i) * sizeof(*m->allocs));
	m->allocs[i] = (struct mem_a){ addr, size, b };
	m->nallocs++;
	return 0;
}

/* ---- the reserved range of a device ---- */

static int range_reserve_at(struct session *s, struct mem_state *m, unsigned dev, uint64_t near);

static int range_reserve(struct session *s, struct mem_state *m, unsigned dev)
{
	return range_reserve_at(s, m, dev, 0);
}

/* near: an address the range should hold (a migrated session's), or 0 */
static int range_reserve_at(struct session *s, struct mem_state *m, unsigned dev, uint64_t near)
{
	if (m->range[dev].base)
		return CUDA_SUCCESS;
	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				     .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = (int)dev } };
	size_t gran = 0;
	int rc = D->cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (rc)
		return rc;
	if (!gran || MEM_CHUNK % gran)
		return CUDA_ERROR_NOT_SUPPORTED; /* only 2 MiB divisors are handled */
	/* a slot per server of the client (and device), so that the
	 * addresses of a client's several sessions differ (an address names
	 * one server's memory); for a client that does not say, one per
	 * process, so they rarely coincide; any other free slot else */
	unsigned first = s->range_hint
				 ? (unsigned)((s->range_hint - 1) * 3 + dev) % MEM_RANGE_SLOTS
				 : (unsigned)(getpid() + 5 * dev) % MEM_RANGE_SLOTS;
	if (near >= MEM_RANGE_FIRST && near - MEM_RANGE_FIRST < MEM_RANGE_SLOTS * MEM_RANGE_SIZE)
		first = (unsigned)((near - MEM_RANGE_FIRST) / MEM_RANGE_SIZE);
	for (unsigned k = 0; k < MEM_RANGE_SLOTS; k++) {
		uint64_t want = MEM_RANGE_FIRST + (uint64_t)((first + k) % MEM_RANGE_SLOTS) * MEM_RANGE_SIZE;
		int taken = 0;
		for (unsigned d = 0; d < RGPUD_MAX_GPUS; d++)
			taken |= m->range[d].base == want;
		if (taken)
			continue;
		CUdeviceptr got = 0;
		rc = D->cuMemAddressReserve(&got, MEM_RANGE_SIZE, MEM_CHUNK, want, 0);
		if (rc == CUDA_SUCCESS && got == want) {
			m->range[dev].base = got;
			return CUDA_SUCCESS;
		}
		if (rc == CUDA_SUCCESS)
			D->cuMemAddressFree(got, MEM_RANGE_SIZE);
	}
	/* a migrated session from a range outside the slots: the range from
	 * its lowest allocation on (restores come in address order) */
	if (near && (near < MEM_RANGE_FIRST ||
		     near - MEM_RANGE_FIRST >= MEM_RANGE_SLOTS * MEM_RANGE_SIZE)) {
		CUdeviceptr want = near & ~(MEM_CHUNK - 1), got = 0;
		rc = D->cuMemAddressReserve(&got, MEM_RANGE_SIZE, MEM_CHUNK, want, 0);
		if (rc == CUDA_SUCCESS && got == want) {
			m->range[dev].base = got;
			return CUDA_SUCCESS;
		}
		if (rc == CUDA_SUCCESS)
			D->cuMemAddressFree(got, MEM_RANGE_SIZE);
	}
	/* no fixed slot: anywhere (addresses still survive eviction, but a
	 * migration target must then find the same range free) */
	CUdeviceptr got = 0;
	rc = D->cuMemAddressReserve(&got, MEM_RANGE_SIZE, MEM_CHUNK, 0, 0);
	if (rc)
		return rc;
	/* (under ASan the fixed slots lie in its shadow memory) */
	log_info("%s: no fixed address range for device memory; using %#llx", s->name,
		 (unsigned long long)got);
	m->range[dev].base = got;
	return CUDA_SUCCESS;
}

uint64_t mem_range_base(struct session *s, unsigned dev, uint64_t *size)
{
	struct mem_state *m = s->mem;
	if (size)
		*size = MEM_RANGE_SIZE;
	return m && dev < RGPUD_MAX_GPUS ? m->range[dev].base : 0;
}

/* The first free span of len bytes in [from, end) of dev's range, or 0. */
static uint64_t span_find(struct mem_state *m, unsigned dev, uint64_t from, uint64_t len)
{
	uint64_t at = from, end = m->range[dev].base + MEM_RANGE_SIZE;
	for (size_t i = block_upper(m, from) ? block_upper(m, from) - 1 : 0; i < m->nblocks; i++) {
		const struct mem_block *b = m->blocks[i];
		if (b->plain || b->va + b->len <= at || b->va >= end)
			continue;
		if (b->va >= at + len)
			return at;
		at = b->va + b->len;
	}
	return at <= end && end - at >= len ? at : 0;
}

/* Next fit from where the last allocation ended: an address freed a moment
 * ago is not handed out again at once (the range is several times the
 * GPU's memory), so a stale pointer of the client's faults instead of
 * reaching another allocation. */
static uint64_t range_find(struct mem_state *m, unsigned dev, uint64_t len)
{
	uint64_t base = m->range[dev].base, from = m->range[dev].next;
	if (from < base || from >= base + MEM_RANGE_SIZE)
		from = base;
	uint64_t va = span_find(m, dev, from, len);
	if (!va && from != base)
		va = span_find(m, dev, base, len);
	if (va)
		m->range[dev].next = va + len;
	return va;
}

static int range_free(struct mem_state *m, unsigned dev, uint64_t va, uint64_t len)
{
	uint64_t base = m->range[dev].base;
	if (!base || va < base || va - base > MEM_RANGE_SIZE || len > MEM_RANGE_SIZE - (va - base))
		return 0;
	for (size_t i = 0; i < m->nblocks; i++) {
		const struct mem_block *b = m->blocks[i];
		if (!b->plain && b->va < va + len && va < b->va + b->len)
			return 0;
	}
	return 1;
}

/* ---- physical memory ---- */

/* Maps fresh physical memory under b (b->va, b->len), asking the parent for
 * room while the GPU has none (with ask).  A CUresult. */
/* Physical memory is made exportable (a POSIX file descriptor), so that a
 * move to another GPU of this server can hand it over (export.c); a driver
 * that refuses the handle type gets plain memory from then on. */
static int fd_handles_refused;

int mem_phys_map(struct session *s, struct mem_block *b, int ask)
{
	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				     .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE,
						   .id = (int)b->dev } };
	int asked = 0, rc;
	CUmemGenericAllocationHandle h = 0;
	for (;;) {
		prop.requestedHandleTypes = fd_handles_refused ? CU_MEM_HANDLE_TYPE_NONE
							       : CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
		rc = D->cuMemCreate(&h, b->len, &prop, 0);
		if ((rc == CUDA_ERROR_NOT_SUPPORTED || rc == CUDA_ERROR_INVALID_VALUE) &&
		    !fd_handles_refused) {
			fd_handles_refused = 1;
			continue;
		}
		if (rc != CUDA_ERROR_OUT_OF_MEMORY || !ask)
			break;
		if (!asked) {
			/* the parent weighs what each session holds: it must
			 * know ours exactly before it decides */
			mem_report_if(s, 1);
			asked = 1;
		}
		if (!mem_ask_room(s, b->dev, b->len))
			break;
	}
	if (asked)
		s->mem->room_asked |= 1u << b->dev; /* done once reported: room_finish */
	if (rc)
		return rc;
	rc = D->cuMemMap(b->va, b->len, 0, h, 0);
	if (!rc) {
		/* the owner, and the devices that enabled peer access to it */
		CUmemAccessDesc acc[RGPUD_MAX_GPUS];
		size_t n = 0;
		acc[n++] = (CUmemAccessDesc){ .location = prop.location,
					      .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
		for (unsigned d = 0; d < RGPUD_MAX_GPUS && n < RGPUD_MAX_GPUS; d++)
			if (d != b->dev && (s->mem->peers[b->dev] >> d & 1u))
				acc[n++] = (CUmemAccessDesc){
					.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = (int)d },
					.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
		rc = D->cuMemSetAccess(b->va, b->len, acc, n);
		if (rc)
			D->cuMemUnmap(b->va, b->len);
	}
	if (rc) {
		D->cuMemRelease(h);
		return rc;
	}
	b->h = h;
	b->resident = 1;
	return CUDA_SUCCESS;
}

_Static_assert(RGPUD_MAX_GPUS <= 64, "a peer mask has a bit per GPU");

int mem_peer_access(struct session *s, unsigned owner, unsigned from, int enable)
{
	if (owner >= RGPUD_MAX_GPUS || from >= RGPUD_MAX_GPUS || owner == from)
		return CUDA_SUCCESS;
	/* (made now if need be: access enabled before the first allocation
	 * holds for the allocations after it, simpleP2P) */
	struct mem_state *m = mem_state(s);
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (enable)
		m->peers[owner] |= 1ull << from;
	else
		m->peers[owner] &= ~(1ull << from);
	CUmemAccessDesc acc = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = (int)from },
				.flags = enable ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
						: CU_MEM_ACCESS_FLAGS_PROT_NONE };
	int rc = CUDA_SUCCESS;
	for (size_t i = 0; i < m->nblocks; i++) {
		struct mem_block *b = m->blocks[i];
		if (b->dev != owner || b->plain || b->resident != 1)
			continue;
		int r = D->cuMemSetAccess(b->va, b->len, &acc, 1);
		if (r && !rc)
			rc = r;
	}
	return rc;
}

void mem_phys_unmap(struct mem_block *b)
{
	mem_export_forget(b);
	if (!b->resident)
		return;
	D->cuMemUnmap(b->va, b->len);
	D->cuMemRelease(b->h);
	b->h = 0;
	b->resident = 0;
}

/* Plain cuMemAlloc (no VMM), asking for room the same way. */
static int plain_alloc(struct session *s, unsigned dev, uint64_t size, uint64_t *p)
{
	int asked = 0, rc;
	CUdeviceptr d = 0;
	for (;;) {
		rc = D->cuMemAlloc_v2(&d, size);
		if (rc != CUDA_ERROR_OUT_OF_MEMORY)
			break;
		asked = 1;
		if (!mem_ask_room(s, dev, size))
			break;
	}
	if (asked)
		s->mem->room_asked |= 1u << dev;
	*p = d;
	return rc;
}

static void block_free(struct mem_state *m, struct mem_block *b)
{
	if (b->plain)
		D->cuMemFree_v2(b->va);
	else
		mem_phys_unmap(b);
	mem_shadow_drop(m, b);
	block_remove(m, b);
	free(b->bitmap);
	free(b);
}

/* ---- small allocations: 256-byte units of a shared chunk ---- */

#define UNIT 256u
#define UNITS (MEM_CHUNK / UNIT)

static int bit(const uint64_t *bm, size_t i) { return (int)((bm[i / 64] >> (i % 64)) & 1); }

static void bits_set(uint64_t *bm, size_t i, size_t n, int v)
{
	for (size_t k = i; k < i + n; k++) {
		if (v)
			bm[k / 64] |= 1ull << (k % 64);
		else
			bm[k / 64] &= ~(1ull << (k % 64));
	}
}

/* First run of n free units: its index, or -1. */
static ssize_t bits_find(const uint64_t *bm, size_t n)
{
	size_t run = 0;
	for (size_t i = 0; i < UNITS; i++) {
		if (bm[i / 64] == ~0ull && i % 64 == 0) {
			run = 0;
			i += 63;
			continue;
		}
		run = bit(bm, i) ? 0 : run + 1;
		if (run == n)
			return (ssize_t)(i + 1 - n);
	}
	return -1;
}

/* Maps block b (filled in) and enters it, with its first allocation
 * [b->va, b->va + size), into m: 0, or a CUresult with none of it kept
 * (b itself is the caller's to free). */
static int block_enter(struct session *s, struct mem_state *m, struct mem_block *b, uint64_t size)
{
	int rc = mem_phys_map(s, b, 1);
	if (!rc && block_insert(m, b) < 0) {
		mem_phys_unmap(b);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (!rc && alloc_insert(m, b->va, size, b) < 0) {
		block_remove(m, b);
		mem_phys_unmap(b);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	}
	return rc;
}

static int small_alloc(struct session *s, struct mem_state *m, uint64_t ctx, unsigned dev,
		       uint64_t size, uint64_t *addr)
{
	size_t n = (size_t)((size + UNIT - 1) / UNIT);
	for (size_t i = 0; i < m->nblocks; i++) {
		struct mem_block *b = m->blocks[i];
		if (!b->small || b->dev != dev || b->ctx != ctx || b->free_units < n)
			continue;
		ssize_t at = bits_find(b->bitmap, n);
		if (at < 0)
			continue;
		if (alloc_insert(m, b->va + (uint64_t)at * UNIT, size, b) < 0)
			return CUDA_ERROR_OUT_OF_MEMORY;
		bits_set(b->bitmap, (size_t)at, n, 1);
		b->nused++;
		b->free_units -= (unsigned)n;
		*addr = b->va + (uint64_t)at * UNIT;
		return CUDA_SUCCESS;
	}
	struct mem_block *b = calloc(1, sizeof(*b));
	uint64_t *bm = calloc(UNITS / 64, sizeof(uint64_t));
	uint64_t va = range_find(m, dev, MEM_CHUNK);
	if (!b || !bm || !va) {
		free(b);
		free(bm);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*b = (struct mem_block){ .va = va, .len = MEM_CHUNK, .dev = dev, .ctx = ctx, .small = 1,
				 .bitmap = bm };
	int rc = block_enter(s, m, b, size);
	if (rc) {
		free(b);
		free(bm);
		return rc;
	}
	bits_set(bm, 0, n, 1);
	b->nused = 1;
	b->free_units = (unsigned)(UNITS - n);
	*addr = va;
	return CUDA_SUCCESS;
}

/* ---- the interface ---- */

static int block_alloc(struct session *s, struct mem_state *m, uint64_t ctx, unsigned dev,
		       uint64_t va, uint64_t size, uint64_t *addr)
{
	uint64_t len = (size + MEM_CHUNK - 1) / MEM_CHUNK * MEM_CHUNK;
	if (!va && !(va = range_find(m, dev, len)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct mem_block *b = calloc(1, sizeof(*b));
	if (!b)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*b = (struct mem_block){ .va = va, .len = len, .dev = dev, .ctx = ctx };
	int rc = block_enter(s, m, b, size);
	if (rc) {
		free(b);
		return rc;
	}
	*addr = va;
	return CUDA_SUCCESS;
}

/* An allocation that asked for room is over: the parent learns what the
 * session now holds, then that its request is done (until then the
 * request marks the session as one that is getting memory: arbiter.c). */
static void room_finish(struct session *s)
{
	struct mem_state *m = s->mem;
	if (!m || !m->room_asked)
		return;
	mem_report_if(s, 1);
	for (unsigned d = 0; d < RGPUD_MAX_GPUS && d < 32; d++)
		if (m->room_asked & (1u << d))
			mem_room_done(s, d);
	m->room_asked = 0;
}

static int alloc_in(struct session *s, uint64_t ctx, unsigned dev, uint64_t size, uint64_t *addr);

int mem_alloc(struct session *s, uint64_t ctx, unsigned dev, uint64_t size, uint64_t *addr)
{
	int rc = alloc_in(s, ctx, dev, size, addr);
	room_finish(s);
	return rc;
}

static int alloc_in(struct session *s, uint64_t ctx, unsigned dev, uint64_t size, uint64_t *addr)
{
	struct mem_state *m = mem_state(s);
	if (!m || !size || dev >= RGPUD_MAX_GPUS)
		return !m ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
	if (size > MEM_RANGE_SIZE)
		return CUDA_ERROR_OUT_OF_MEMORY;
	int rc;
	if (m->evicted && (rc = mem_restore(s)))
		return rc;
	if (!D->have_vmm) {
		uint64_t p = 0;
		struct mem_block *b = calloc(1, sizeof(*b));
		if (!b)
			return CUDA_ERROR_OUT_OF_MEMORY;
		rc = plain_alloc(s, dev, size, &p);
		if (!rc) {
			*b = (struct mem_block){ .va = p, .len = size, .dev = dev, .ctx = ctx,
						 .plain = 1, .resident = 1 };
			if (block_insert(m, b) < 0 || alloc_insert(m, p, size, b) < 0) {
				block_remove(m, b);
				D->cuMemFree_v2(p);
				rc = CUDA_ERROR_OUT_OF_MEMORY;
			}
		}
		if (rc) {
			free(b);
			return rc;
		}
		*addr = p;
	} else {
		if ((rc = range_reserve(s, m, dev)))
			return rc;
		uint64_t before = 0, swapped;
		mem_usage(s, &before, &swapped);
		rc = size <= MEM_SMALL_MAX ? small_alloc(s, m, ctx, dev, size, addr)
					   : block_alloc(s, m, ctx, dev, 0, size, addr);
		if (rc)
			return rc;
		if (!before)
			m->on_gpu_since_ns = rgpu_now_ns(); /* its first memory there */
	}
	mem_report(s);
	return CUDA_SUCCESS;
}

int mem_free(struct session *s, uint64_t addr)
{
	struct mem_state *m = s->mem;
	ssize_t i = m ? alloc_find(m, addr) : -1;
	if (i < 0)
		return CUDA_ERROR_INVALID_VALUE;
	struct mem_a a = m->allocs[i];
	memmove(&m->allocs[i], &m->allocs[i + 1], (m->nallocs - (size_t)i - 1) * sizeof(*m->allocs));
	m->nallocs--;
	struct mem_block *b = a.b;
	if (b->small) {
		size_t at = (size_t)((a.addr - b->va) / UNIT), n = (size_t)((a.size + UNIT - 1) / UNIT);
		bits_set(b->bitmap, at, n, 0);
		b->free_units += (unsigned)n;
		if (--b->nused)
			return CUDA_SUCCESS;
	}
	/* the GPU may still use it: wait, as cuMemFree does, before unmapping */
	if (b->resident && !b->plain && mem_enter_ctx(s, b->ctx) == 0)
		D->cuCtxSynchronize();
	if (!b->resident)
		m->evicted--;
	block_free(m, b);
	mem_report(s);
	return CUDA_SUCCESS;
}

int mem_foreach(struct session *s, int (*fn)(const struct mem_info *, void *), void *arg)
{
	struct mem_state *m = s->mem;
	for (size_t i = 0; m && i < m->nallocs; i++) {
		const struct mem_a *a = &m->allocs[i];
		struct mem_info mi = { a->addr, a->size, a->b->ctx, a->b->dev, a->b->resident,
				       !a->b->plain };
		int rc = fn(&mi, arg);
		if (rc)
			return rc;
	}
	return 0;
}

/* Migration (mem_restore_at): the small block of ctx at chunk va, made
 * when absent; NULL when that chunk is taken otherwise. */
static struct mem_block *small_block_at(struct session *s, struct mem_state *m, uint64_t ctx,
					unsigned dev, uint64_t va, int *rc)
{
	for (size_t i = 0; i < m->nblocks; i++) {
		struct mem_block *b = m->blocks[i];
		if (b->va == va && b->small && b->dev == dev)
			return b;
	}
	*rc = CUDA_ERROR_INVALID_VALUE;
	if (!range_free(m, dev, va, MEM_CHUNK))
		return NULL;
	struct mem_block *b = calloc(1, sizeof(*b));
	uint64_t *bm = calloc(UNITS / 64, sizeof(uint64_t));
	*rc = CUDA_ERROR_OUT_OF_MEMORY;
	if (!b || !bm) {
		free(b);
		free(bm);
		return NULL;
	}
	*b = (struct mem_block){ .va = va, .len = MEM_CHUNK, .dev = dev, .ctx = ctx, .small = 1,
				 .bitmap = bm };
	if ((*rc = mem_phys_map(s, b, 1)) == 0 && block_insert(m, b) < 0) {
		mem_phys_unmap(b);
		*rc = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (*rc) {
		free(b);
		free(bm);
		return NULL;
	}
	return b;
}

static int restore_at_in(struct session *s, uint64_t ctx, unsigned dev, uint64_t addr,
			 uint64_t size, const void *bytes);

int mem_restore_at(struct session *s, uint64_t ctx, unsigned dev, uint64_t addr, uint64_t size,
		   const void *bytes)
{
	int rc = restore_at_in(s, ctx, dev, addr, size, bytes);
	room_finish(s);
	return rc;
}

static int restore_at_in(struct session *s, uint64_t ctx, unsigned dev, uint64_t addr,
			 uint64_t size, const void *bytes)
{
	struct mem_state *m = mem_state(s);
	if (!m || !size || dev >= RGPUD_MAX_GPUS)
		return CUDA_ERROR_INVALID_VALUE;
	if (!D->have_vmm)
		return CUDA_ERROR_NOT_SUPPORTED;
	/* the range the source had, when this worker has none yet */
	int rc = range_reserve_at(s, m, dev, addr);
	if (rc)
		return rc;
	if (m->evicted && (rc = mem_restore(s)))
		return rc;
	uint64_t va = addr & ~(MEM_CHUNK - 1);
	if (size <= MEM_SMALL_MAX && addr + size <= va + MEM_CHUNK && addr % UNIT == 0) {
		/* a small allocation: its units of the shared chunk, as the
		 * source had them (its neighbours come the same way) */
		struct mem_block *b = small_block_at(s, m, ctx, dev, va, &rc);
		if (!b)
			return rc;
		size_t at = (size_t)((addr - va) / UNIT), n = (size_t)((size + UNIT - 1) / UNIT);
		for (size_t k = at; k < at + n; k++)
			if (bit(b->bitmap, k))
				return CUDA_ERROR_INVALID_VALUE;
		if (alloc_insert(m, addr, size, b) < 0)
			return CUDA_ERROR_OUT_OF_MEMORY;
		bits_set(b->bitmap, at, n, 1);
		b->nused++;
	} else {
		/* a whole chunk run of its own, at the very address */
		uint64_t len = (addr - va + size + MEM_CHUNK - 1) / MEM_CHUNK * MEM_CHUNK;
		if (!range_free(m, dev, va, len))
			return CUDA_ERROR_INVALID_VALUE;
		struct mem_block *b = calloc(1, sizeof(*b));
		if (!b)
			return CUDA_ERROR_OUT_OF_MEMORY;
		*b = (struct mem_block){ .va = va, .len = len, .dev = dev, .ctx = ctx };
		if ((rc = mem_phys_map(s, b, 1)) == 0 && (block_insert(m, b) < 0 ||
						       alloc_insert(m, addr, size, b) < 0)) {
			block_remove(m, b);
			mem_phys_unmap(b);
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		}
		if (rc) {
			free(b);
			return rc;
		}
	}
	if ((rc = mem_enter_ctx(s, ctx)) == 0) {
		rc = bytes ? D->cuMemcpyHtoD_v2(addr, bytes, size) : D->cuMemsetD8_v2(addr, 0, size);
	}
	if (rc) {
		mem_free(s, addr);
		return rc;
	}
	mem_report(s);
	return CUDA_SUCCESS;
}

/* Waits for the work of every context that has resident memory in m (or
 * only ctx): nothing may be unmapped under a running kernel. */
static void quiesce(struct session *s, struct mem_state *m, uint64_t only)
{
	uint64_t done[16];
	size_t nd = 0;
	for (size_t i = 0; i < m->nblocks; i++) {
		const struct mem_block *b = m->blocks[i];
		if (!b->resident || (only && b->ctx != only))
			continue;
		size_t k = 0;
		while (k < nd && done[k] != b->ctx)
			k++;
		if (k < nd)
			continue;
		if (nd < 16)
			done[nd++] = b->ctx;
		if (mem_enter_ctx(s, b->ctx) == 0)
			D->cuCtxSynchronize();
	}
}

void mem_forget_ctx(struct session *s, uint64_t ctx)
{
	struct mem_state *m = s->mem;
	if (!m)
		return;
	mem_prepare_stop(s); /* its thread may use the context */
	quiesce(s, m, ctx);
	size_t j = 0;
	for (size_t i = 0; i < m->nallocs; i++)
		if (m->allocs[i].b->ctx != ctx)
			m->allocs[j++] = m->allocs[i];
	m->nallocs = j;
	for (size_t i = 0; i < m->nblocks;) {
		struct mem_block *b = m->blocks[i];
		if (b->ctx == ctx) {
			if (!b->resident)
				m->evicted--;
			block_free(m, b);
		} else {
			i++;
		}
	}
	mem_report(s);
}

void mem_cleanup(struct session *s)
{
	struct mem_state *m = s->mem;
	if (!m)
		return;
	mem_prepare_stop(s);
	quiesce(s, m, 0);
	while (m->nblocks)
		block_free(m, m->blocks[m->nblocks - 1]);
	for (unsigned d = 0; d < RGPUD_MAX_GPUS; d++)
		if (m->range[d].base)
			D->cuMemAddressFree(m->range[d].base, MEM_RANGE_SIZE);
	free(m->blocks);
	free(m->allocs);
	free(m);
	s->mem = NULL;
}

int mem_enter_ctx(struct session *s, uint64_t ctx)
{
	return session_enter_ctx(s, ctx, NULL);
}
