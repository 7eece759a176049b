/*
 * The VMM API for applications (cuMemCreate, cuMemMap, cuMemSetAccess, ...)
 * and shareable handles between sessions of one job.
 *
 * Addresses: the client reserves address ranges itself, inside a 16 TiB
 * window of its own address space; the session reserves the same window
 * here on its first map (ops_vmem.c does the same for managed memory), so
 * every address the application maps is the same on both sides and
 * reservations cost no round trip.  Physical memory is charged to the quota
 * when created, refunded when released and unmapped.  Exported memory is
 * handed to the parent's registry (share.h); an importing session of the
 * same job and uid maps the same physical memory and is not charged again.
 */
#include "appmem.h"
#include "gate.h"
#include "log.h"
#include "rgpud.h"
#include "session.h"
#include "share.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define D (&rgpud_server.drv)
#define GRAIN (2ull << 20)
#define WINDOW (16ull << 40)

struct appmem *appmem_of(struct session *s)
{
	if (!s->appmem)
		s->appmem = calloc(1, sizeof(*s->appmem));
	return s->appmem;
}

/* index of the map holding p, or -1 */
static ssize_t map_find(const struct appmem *a, uint64_t p)
{
	size_t lo = 0, hi = a->nmaps;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (a->maps[mid].addr <= p)
			lo = mid + 1;
		else
			hi = mid;
	}
	ssize_t i = (ssize_t)lo - 1;
	if (i >= 0 && p - a->maps[i].addr < a->maps[i].size)
		return i;
	return -1;
}

/* [p, p+n) is whole adjacent maps: first index and count, or -1 */
static int whole_maps(const struct appmem *a, uint64_t p, uint64_t n, size_t *first, size_t *count)
{
	ssize_t i = map_find(a, p);
	if (i < 0 || a->maps[i].addr != p || !n)
		return -1;
	uint64_t end = p + n, at = p;
	size_t k = (size_t)i;
	while (k < a->nmaps && a->maps[k].addr == at && at < end) {
		at += a->maps[k].size;
		k++;
	}
	if (at != end)
		return -1;
	*first = (size_t)i;
	*count = k - (size_t)i;
	return 0;
}

int appmem_owns_range(struct session *s, uint64_t p, uint64_t n)
{
	struct appmem *a = s->appmem;
	if (!a)
		return 0;
	int k = appmem_palloc_find(a, p);
	if (k >= 0) {
		const struct palloc *pa = &a->pallocs[k];
		return n <= pa->size - (p - pa->addr);
	}
	ssize_t i = map_find(a, p);
	if (i < 0)
		return 0;
	/* across adjacent accessible mappings */
	uint64_t at = p, end = p + n;
	if (end < p)
		return 0;
	for (size_t j = (size_t)i; j < a->nmaps; j++) {
		const struct amap *m = &a->maps[j];
		if (m->addr > at || !m->access)
			return 0;
		at = m->addr + m->size;
		if (at >= end)
			return 1;
	}
	return n == 0;
}

static void phys_free(struct session *s, struct phys *p)
{
	struct appmem *a = s->appmem;
	for (struct phys **pp = &a->phys; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	if (p->charged)
		gate_refund_bytes(p->gpu, p->size);
	if (p->move_exported)
		gate_share_drop(p->move_token);
	free(p);
}

static struct phys *phys_get(struct session *s, uint64_t id)
{
	struct hentry *e = ht_get(&s->ht, id, HK_VMM);
	return e ? e->obj : NULL;
}

int op_vmm_create(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint32_t gpu = get_u32(r);
	uint64_t size = get_u64(r);
	uint32_t types = get_u32(r);
	if (!rd_done(r))
		return OP_DROP;
	if (!D->have_vmm)
		return CUDA_ERROR_NOT_SUPPORTED;
	int rc = session_admit(s, gpu);
	if (rc)
		return rc;
	if (!size || size % GRAIN)
		return CUDA_ERROR_INVALID_VALUE;
	struct appmem *a = appmem_of(s);
	struct phys *p = a ? calloc(1, sizeof(*p)) : NULL;
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (gate_charge_bytes(gpu, size) < 0) {
		free(p);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	/* exportable whether asked or not, where the driver can: a move to
	 * another GPU of this server then hands it over by reference
	 * (migrate/vmmstate.c); the client answers for what was asked */
	uint32_t want = types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	CUmemAllocationProp prop = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.requestedHandleTypes = want | (D->cuMemExportToShareableHandle
							? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : 0),
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = (int)gpu },
	};
	rc = D->cuMemCreate(&p->h, size, &prop, 0);
	if ((rc == CUDA_ERROR_NOT_SUPPORTED || rc == CUDA_ERROR_INVALID_VALUE) && !want &&
	    prop.requestedHandleTypes) {
		prop.requestedHandleTypes = 0;
		rc = D->cuMemCreate(&p->h, size, &prop, 0);
	}
	if (!rc && !(p->id = ht_add(&s->ht, HK_VMM, p, 0, NULL))) {
		D->cuMemRelease(p->h);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (rc) {
		gate_refund_bytes(gpu, size);
		free(p);
		return rc;
	}
	p->size = size;
	p->gpu = gpu;
	p->types = want;
	p->fd_ok = (prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0;
	p->charged = 1;
	p->next = a->phys;
	a->phys = p;
	put_u64(out, p->id);
	return CUDA_SUCCESS;
}

static void phys_release(struct session *s, struct phys *p)
{
	if (p->exported)
		gate_share_drop(p->token);
	p->exported = 0;
	D->cuMemRelease(p->h);
	p->released = 1;
	ht_del(&s->ht, p->id);
	if (!p->maps)
		phys_free(s, p);
}

int op_vmm_release(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t id = get_u64(r);
	if (!rd_done(r))
		return OP_DROP;
	struct phys *p = phys_get(s, id);
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	phys_release(s, p);
	return CUDA_SUCCESS;
}

/* The window holding [addr, addr+size): the session's managed-memory range
 * (the client keeps its upper half for the VMM API), reserved on first use
 * by whichever needs it first (ops_vmem.c frees it at the end). */
static int window(struct session *s, struct appmem *a, uint64_t addr, uint64_t size)
{
	uint64_t base = addr & ~(WINDOW - 1);
	if (!base || addr + size < addr || addr + size > base + WINDOW ||
	    (s->vmem_window && base != s->vmem_window))
		return CUDA_ERROR_INVALID_VALUE;
	if (s->vmem_window)
		return CUDA_SUCCESS;
	CUdeviceptr got = 0;
	int rc = D->cuMemAddressReserve(&got, WINDOW, GRAIN, base, 0);
	if (!rc && got != base) {
		log_warn("%s: the driver placed the application VMM window at %#llx, not %#llx",
			 s->name, (unsigned long long)got, (unsigned long long)base);
		D->cuMemAddressFree(got, WINDOW);
		rc = CUDA_ERROR_INVALID_VALUE;
	}
	if (!rc)
		s->vmem_window = a->window = base;
	return rc;
}

int op_vmm_map(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t addr = get_u64(r), size = get_u64(r), off = get_u64(r), id = get_u64(r);
	if (!rd_done(r))
		return OP_DROP;
	struct phys *p = phys_get(s, id);
	struct appmem *a = s->appmem;
	if (!p || !a || !size || addr % GRAIN || size % GRAIN || off % GRAIN || off > p->size ||
	    size > p->size - off)
		return CUDA_ERROR_INVALID_VALUE;
	int rc = window(s, a, addr, size);
	if (rc)
		return rc;
	/* no overlap with a mapping */
	ssize_t i = map_find(a, addr + size - 1);
	if (map_find(a, addr) >= 0 || i >= 0)
		return CUDA_ERROR_INVALID_VALUE;
	size_t at = 0;
	while (at < a->nmaps && a->maps[at].addr < addr)
		at++;
	if (at < a->nmaps && a->maps[at].addr < addr + size)
		return CUDA_ERROR_INVALID_VALUE;
	if (a->nmaps == a->capmaps) {
		size_t cap = a->capmaps ? a->capmaps * 2 : 16;
		struct amap *m = realloc(a->maps, cap * sizeof(*m));
		if (!m)
			return CUDA_ERROR_OUT_OF_MEMORY;
		a->maps = m;
		a->capmaps = cap;
	}
	if ((rc = D->cuMemMap(addr, size, off, p->h, 0)))
		return rc;
	memmove(&a->maps[at + 1], &a->maps[at], (a->nmaps - at) * sizeof(*a->maps));
	a->maps[at] = (struct amap){ .addr = addr, .size = size, .p = p, .off = off };
	a->nmaps++;
	p->maps++;
	return CUDA_SUCCESS;
}

static void unmap_at(struct session *s, struct appmem *a, size_t i)
{
	struct amap m = a->maps[i];
	D->cuMemUnmap(m.addr, m.size);
	memmove(&a->maps[i], &a->maps[i + 1], (a->nmaps - i - 1) * sizeof(*a->maps));
	a->nmaps--;
	if (--m.p->maps == 0 && m.p->released)
		phys_free(s, m.p);
}

int op_vmm_unmap(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t addr = get_u64(r), size = get_u64(r);
	if (!rd_done(r))
		return OP_DROP;
	struct appmem *a = s->appmem;
	size_t first, n;
	if (!a || whole_maps(a, addr, size, &first, &n) < 0)
		return CUDA_ERROR_INVALID_VALUE;
	while (n--)
		unmap_at(s, a, first);
	return CUDA_SUCCESS;
}

int appmem_read_access(struct session *s, struct rd *r, CUmemAccessDesc *desc, uint32_t *n)
{
	*n = get_u32(r);
	if (!rd_ok(r) || *n > RGPUD_MAX_GPUS || r->left != (size_t)*n * 8)
		return OP_DROP;
	for (uint32_t k = 0; k < *n; k++) {
		uint32_t gpu = get_u32(r), flags = get_u32(r);
		if (gpu >= RGPUD_MAX_GPUS || flags > CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
			return CUDA_ERROR_INVALID_VALUE;
		int rc = session_admit(s, gpu);
		if (rc)
			return rc;
		desc[k] = (CUmemAccessDesc){ .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE,
							   .id = (int)gpu },
					     .flags = (CUmemAccess_flags)flags };
	}
	return 0;
}

int op_vmm_access(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t addr = get_u64(r), size = get_u64(r);
	CUmemAccessDesc desc[RGPUD_MAX_GPUS];
	uint32_t n;
	int rc = appmem_read_access(s, r, desc, &n);
	if (rc)
		return rc;
	uint64_t grant = 0, deny = 0;
	for (uint32_t k = 0; k < n; k++) {
		if (desc[k].flags)
			grant |= 1ull << desc[k].location.id;
		else
			deny |= 1ull << desc[k].location.id;
	}
	if (!rd_done(r))
		return OP_DROP;
	struct appmem *a = s->appmem;
	size_t first, cnt;
	if (!a || !n || whole_maps(a, addr, size, &first, &cnt) < 0)
		return CUDA_ERROR_INVALID_VALUE;
	if ((rc = D->cuMemSetAccess(addr, size, desc, n)))
		return rc;
	for (size_t k = first; k < first + cnt; k++)
		a->maps[k].access = (a->maps[k].access | grant) & ~deny;
	return CUDA_SUCCESS;
}

int op_vmm_export(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t id = get_u64(r);
	if (!rd_done(r))
		return OP_DROP;
	struct phys *p = phys_get(s, id);
	/* (as the driver: only a handle type asked for at creation) */
	if (!p || !(p->types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
		return CUDA_ERROR_INVALID_VALUE;
	int rc = gate_share_export(p->h, p->gpu, p->size, p->token, &p->exported);
	if (rc)
		return rc;
	put_raw(out, p->token, 16);
	return CUDA_SUCCESS;
}

int op_vmm_import(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	const uint8_t *token = get_raw(r, 16);
	if (!rd_done(r))
		return OP_DROP;
	if (!D->cuMemImportFromShareableHandle)
		return CUDA_ERROR_NOT_SUPPORTED;
	struct appmem *a = appmem_of(s);
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	int fd = -1;
	unsigned gpu = 0;
	uint64_t size = 0;
	uint8_t tok[16];
	memcpy(tok, token, 16);
	int rc = gate_share_get(tok, &fd, &gpu, &size);
	if (rc)
		return rc < 0 ? CUDA_ERROR_INVALID_VALUE : rc;
	rc = session_admit(s, gpu);
	struct phys *p = rc ? NULL : calloc(1, sizeof(*p));
	if (!rc && !p)
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	if (!rc)
		rc = D->cuMemImportFromShareableHandle(&p->h, (void *)(intptr_t)fd,
						       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	close(fd);
	if (!rc && !(p->id = ht_add(&s->ht, HK_VMM, p, 0, NULL))) {
		D->cuMemRelease(p->h);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (rc) {
		free(p);
		return rc;
	}
	p->size = size;
	p->gpu = gpu;
	p->next = a->phys;
	a->phys = p;
	put_u64(out, p->id);
	put_u64(out, size);
	put_u32(out, gpu);
	return CUDA_SUCCESS;
}

void appmem_cleanup(struct session *s)
{
	struct appmem *a = s->appmem;
	if (!a)
		return;
	pool_cleanup(s, a);
	while (a->nmaps)
		unmap_at(s, a, a->nmaps - 1);
	while (a->phys) {
		struct phys *p = a->phys;
		if (!p->released)
			phys_release(s, p); /* frees it: it has no mapping left */
		else
			phys_free(s, p);
	}
	/* the window is the managed-memory range's: vmem_cleanup frees it */
	free(a->maps);
	free(a->pallocs);
	free(a);
	s->appmem = NULL;
}
