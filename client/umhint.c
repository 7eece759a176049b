/*
 * Prefetches and advice on managed memory, and the range attributes that
 * report them (cuMemPrefetchAsync, cuMemAdvise, cuMemRangeGetAttribute(s)).
 *
 * rgpu's managed memory has no pages to migrate: the host copy and the
 * device copy meet at launches and synchronisations (coherence.c), so
 * where the data "is" never decides what a program reads.  A prefetch or
 * an advice therefore changes no data here, as CUDA promises it changes
 * none ("not required for functionality").  Each is checked as the driver
 * checks it and recorded per page range, so that the range attributes
 * answer what the program asked for, page for page as the driver does
 * (a range whose pages disagree reads as "invalid").
 */
#include "client.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ACC_HOST 63 /* the accessed-by bit of the host (devices: their ordinal) */

struct hint {
	int read_mostly;
	CUmemLocation pref;      /* type CU_MEM_LOCATION_TYPE_INVALID: none */
	CUmemLocation prefetch;  /* the last prefetch's target, or none */
	uint64_t accessed_by;    /* a bit per device ordinal, ACC_HOST */
};

/* Pages that were advised or prefetched, sorted, disjoint; others have
 * no hint (all zero). */
struct seg {
	uintptr_t start, end;
	struct hint h;
};

static struct seg *segs;
static size_t nsegs, capsegs;
static pthread_mutex_t hint_lock = PTHREAD_MUTEX_INITIALIZER;

static const struct hint none; /* CU_MEM_LOCATION_TYPE_INVALID is 0 */

static uintptr_t page_size(void)
{
	long p = sysconf(_SC_PAGESIZE);
	return p > 0 ? (uintptr_t)p : 4096;
}

static int loc_eq(const CUmemLocation *a, const CUmemLocation *b)
{
	if (a->type != b->type)
		return 0;
	/* the id means something for devices and NUMA nodes only */
	return (a->type != CU_MEM_LOCATION_TYPE_DEVICE && a->type != CU_MEM_LOCATION_TYPE_HOST_NUMA) ||
	       a->id == b->id;
}

static int hint_eq(const struct hint *a, const struct hint *b)
{
	return a->read_mostly == b->read_mostly && loc_eq(&a->pref, &b->pref) &&
	       loc_eq(&a->prefetch, &b->prefetch) && a->accessed_by == b->accessed_by;
}

static int seg_insert(size_t at, uintptr_t start, uintptr_t end, const struct hint *h)
{
	if (nsegs == capsegs) {
		size_t cap = capsegs ? 2 * capsegs : 16;
		struct seg *n = realloc(segs, cap * sizeof(*n));
		if (!n)
			return -1;
		segs = n;
		capsegs = cap;
	}
	memmove(&segs[at + 1], &segs[at], (nsegs - at) * sizeof(*segs));
	segs[at] = (struct seg){ start, end, *h };
	nsegs++;
	return 0;
}

static void seg_remove(size_t at)
{
	memmove(&segs[at], &segs[at + 1], (nsegs - at - 1) * sizeof(*segs));
	nsegs--;
}

/* After this, segments cover [a, b) exactly, split at a and b (hint_lock
 * held).  -1: out of memory, nothing lost but the split. */
static int cover(uintptr_t a, uintptr_t b)
{
	uintptr_t at = a;
	size_t i = 0;
	while (i < nsegs && segs[i].end <= a)
		i++;
	while (at < b) {
		if (i == nsegs || segs[i].start >= b) {
			return seg_insert(i, at, b, &none);
		}
		struct seg *s = &segs[i];
		if (s->start > at) { /* a gap before s */
			if (seg_insert(i, at, s->start, &none))
				return -1;
			at = segs[i].end;
			i++;
			continue;
		}
		if (s->start < at) { /* s begins before a: split it there */
			if (seg_insert(i + 1, at, s->end, &s->h))
				return -1;
			segs[i].end = at;
			i++;
			continue;
		}
		if (s->end > b) { /* s ends past b: split it there */
			if (seg_insert(i + 1, b, s->end, &s->h))
				return -1;
			segs[i].end = b;
		}
		at = segs[i].end;
		i++;
	}
	return 0;
}

/* Drops segments without a hint and joins equal neighbours (hint_lock held). */
static void tidy(void)
{
	for (size_t i = 0; i < nsegs;) {
		if (hint_eq(&segs[i].h, &none)) {
			seg_remove(i);
			continue;
		}
		if (i > 0 && segs[i - 1].end == segs[i].start && hint_eq(&segs[i - 1].h, &segs[i].h)) {
			segs[i - 1].end = segs[i].end;
			seg_remove(i);
			continue;
		}
		i++;
	}
}

enum op { OP_ADVISE, OP_PREFETCH };

static CUresult apply(uintptr_t a, uintptr_t b, enum op op, int advice, const CUmemLocation *loc)
{
	pthread_mutex_lock(&hint_lock);
	if (cover(a, b)) {
		tidy();
		pthread_mutex_unlock(&hint_lock);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	uint64_t bit = loc->type == CU_MEM_LOCATION_TYPE_DEVICE ? 1ull << loc->id : 1ull << ACC_HOST;
	for (size_t i = 0; i < nsegs; i++) {
		struct hint *h = &segs[i].h;
		if (segs[i].start < a || segs[i].end > b)
			continue;
		if (op == OP_PREFETCH) {
			h->prefetch = *loc;
			continue;
		}
		switch (advice) {
		case CU_MEM_ADVISE_SET_READ_MOSTLY: h->read_mostly = 1; break;
		case CU_MEM_ADVISE_UNSET_READ_MOSTLY: h->read_mostly = 0; break;
		case CU_MEM_ADVISE_SET_PREFERRED_LOCATION: h->pref = *loc; break;
		case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION: h->pref = none.pref; break;
		case CU_MEM_ADVISE_SET_ACCESSED_BY: h->accessed_by |= bit; break;
		case CU_MEM_ADVISE_UNSET_ACCESSED_BY: h->accessed_by &= ~bit; break;
		}
	}
	tidy();
	pthread_mutex_unlock(&hint_lock);
	return CUDA_SUCCESS;
}

void rc_umhint_forget(uintptr_t base, size_t size)
{
	pthread_mutex_lock(&hint_lock);
	if (!cover(base, base + size))
		for (size_t i = 0; i < nsegs; i++)
			if (segs[i].start >= base && segs[i].end <= base + size)
				segs[i].h = none;
	tidy();
	pthread_mutex_unlock(&hint_lock);
}

/* [p, p+n) rounded out to pages, all of it managed memory of one
 * allocation, as the driver requires */
static CUresult managed_range(CUdeviceptr p, size_t n, uintptr_t *a, uintptr_t *b)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	uintptr_t base;
	size_t size;
	struct rc_ctx *owner;
	if (!n || rc_managed_span((uintptr_t)p, &base, &size, &owner) || n > size - ((uintptr_t)p - base))
		return CUDA_ERROR_INVALID_VALUE;
	uintptr_t pg = page_size();
	*a = (uintptr_t)p / pg * pg;
	*b = ((uintptr_t)p + n + pg - 1) / pg * pg;
	if (*a < base)
		*a = base;
	if (*b > base + size)
		*b = base + size;
	return CUDA_SUCCESS;
}

static CUresult check_loc(const CUmemLocation *loc, int host_numa_ok)
{
	switch (loc->type) {
	case CU_MEM_LOCATION_TYPE_DEVICE:
		/* ACC_HOST's bit is the host's */
		return loc->id >= 0 && loc->id < rc_ndev && loc->id < ACC_HOST ? CUDA_SUCCESS
									    : CUDA_ERROR_INVALID_DEVICE;
	case CU_MEM_LOCATION_TYPE_HOST:
		return CUDA_SUCCESS;
	case CU_MEM_LOCATION_TYPE_HOST_NUMA:
		return host_numa_ok && loc->id >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
		return host_numa_ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

static CUmemLocation loc_of_device(CUdevice d)
{
	CUmemLocation l = { .type = d == CU_DEVICE_CPU ? CU_MEM_LOCATION_TYPE_HOST
						       : CU_MEM_LOCATION_TYPE_DEVICE,
			    .id = d == CU_DEVICE_CPU ? 0 : d };
	return l;
}

/* ---- prefetch ---- */

static CUresult prefetch(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned flags, CUstream s)
{
	uintptr_t a, b;
	CUresult rc = managed_range(p, n, &a, &b);
	if (rc)
		return rc;
	struct rc_ctx *c;
	uint64_t sh;
	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	if ((rc = rc_stream_resolve(s, &c, &sh)) || (rc = check_loc(&loc, 1)))
		return rc;
	if (loc.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT)
		loc.type = CU_MEM_LOCATION_TYPE_HOST; /* the node is not ours to know */
	return apply(a, b, OP_PREFETCH, 0, &loc);
}

RC_EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags,
					 CUstream s)
{
	return prefetch(p, n, loc, flags, s);
}

RC_EXPORT CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr p, size_t n, CUmemLocation loc,
					      unsigned int flags, CUstream s)
{
	return prefetch(p, n, loc, flags, s ? s : CU_STREAM_PER_THREAD);
}

/* before CUDA 12.2: a device ordinal or CU_DEVICE_CPU */
RC_EXPORT CUresult cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice dst, CUstream s)
{
	return prefetch(p, n, loc_of_device(dst), 0, s);
}

RC_EXPORT CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr p, size_t n, CUdevice dst, CUstream s)
{
	return prefetch(p, n, loc_of_device(dst), 0, s ? s : CU_STREAM_PER_THREAD);
}

/* Copies i use prefetchLocs[j] for prefetchLocIdxs[j] <= i < the next
 * index; the first index is 0 and they rise (as cuMemcpyBatchAsync's). */
static CUresult prefetch_batch(CUdeviceptr *dptrs, size_t *sizes, size_t count, CUmemLocation *locs,
			       size_t *idxs, size_t nlocs, unsigned long long flags, CUstream s)
{
	if (!count || !dptrs || !sizes || !locs || !idxs || !nlocs || nlocs > count || idxs[0] || flags)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t j = 1; j < nlocs; j++)
		if (idxs[j] <= idxs[j - 1] || idxs[j] >= count)
			return CUDA_ERROR_INVALID_VALUE;
	/* all checked before any is recorded */
	for (size_t i = 0, j = 0; i < count; i++) {
		uintptr_t a, b;
		while (j + 1 < nlocs && idxs[j + 1] <= i)
			j++;
		CUresult rc = managed_range(dptrs[i], sizes[i], &a, &b);
		if (!rc)
			rc = check_loc(&locs[j], 1);
		if (rc)
			return rc;
	}
	for (size_t i = 0, j = 0; i < count; i++) {
		while (j + 1 < nlocs && idxs[j + 1] <= i)
			j++;
		CUresult rc = prefetch(dptrs[i], sizes[i], locs[j], 0, s);
		if (rc)
			return rc;
	}
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuMemPrefetchBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count,
					   CUmemLocation *locs, size_t *idxs, size_t nlocs,
					   unsigned long long flags, CUstream s)
{
	return prefetch_batch(dptrs, sizes, count, locs, idxs, nlocs, flags, s);
}

RC_EXPORT CUresult cuMemPrefetchBatchAsync_ptsz(CUdeviceptr *dptrs, size_t *sizes, size_t count,
						CUmemLocation *locs, size_t *idxs, size_t nlocs,
						unsigned long long flags, CUstream s)
{
	return prefetch_batch(dptrs, sizes, count, locs, idxs, nlocs, flags, s ? s : CU_STREAM_PER_THREAD);
}

/* ---- advice ---- */

static CUresult advise(CUdeviceptr p, size_t n, CUmem_advise advice, CUmemLocation loc)
{
	uintptr_t a, b;
	CUresult rc = managed_range(p, n, &a, &b);
	if (rc)
		return rc;
	switch (advice) {
	case CU_MEM_ADVISE_SET_READ_MOSTLY:
	case CU_MEM_ADVISE_UNSET_READ_MOSTLY:
		break; /* the location is ignored */
	case CU_MEM_ADVISE_SET_PREFERRED_LOCATION:
	case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION:
		if ((rc = check_loc(&loc, 1)))
			return rc;
		if (loc.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT)
			loc.type = CU_MEM_LOCATION_TYPE_HOST;
		break;
	case CU_MEM_ADVISE_SET_ACCESSED_BY:
	case CU_MEM_ADVISE_UNSET_ACCESSED_BY:
		/* a processor: a device or the host */
		if (loc.type != CU_MEM_LOCATION_TYPE_DEVICE && loc.type != CU_MEM_LOCATION_TYPE_HOST)
			return CUDA_ERROR_INVALID_VALUE;
		if ((rc = check_loc(&loc, 0)))
			return rc;
		break;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	return apply(a, b, OP_ADVISE, advice, &loc);
}

RC_EXPORT CUresult cuMemAdvise_v2(CUdeviceptr p, size_t n, CUmem_advise advice, CUmemLocation loc)
{
	return advise(p, n, advice, loc);
}

/* before CUDA 12.2: a device ordinal or CU_DEVICE_CPU */
RC_EXPORT CUresult cuMemAdvise(CUdeviceptr p, size_t n, CUmem_advise advice, CUdevice dev)
{
	return advise(p, n, advice, loc_of_device(dev));
}

/* ---- range attributes ---- */

/* What every page of [a, b) has: the same preferred and last prefetch
 * location (else none), read-mostly, the devices all name accessed-by
 * (hint_lock held) */
static void agree(uintptr_t a, uintptr_t b, struct hint *h)
{
	uintptr_t at = a;
	int first = 1, gap = 0;
	*h = none;
	h->read_mostly = 1;
	h->accessed_by = ~0ull;
	for (size_t i = 0; i < nsegs && at < b; i++) {
		const struct seg *s = &segs[i];
		if (s->end <= at)
			continue;
		if (s->start >= b)
			break;
		if (s->start > at)
			gap = 1; /* pages without hints */
		if (first) {
			h->pref = s->h.pref;
			h->prefetch = s->h.prefetch;
			first = 0;
		}
		if (!loc_eq(&h->pref, &s->h.pref))
			h->pref = none.pref;
		if (!loc_eq(&h->prefetch, &s->h.prefetch))
			h->prefetch = none.prefetch;
		h->read_mostly &= s->h.read_mostly;
		h->accessed_by &= s->h.accessed_by;
		at = s->end;
	}
	if (first || gap || at < b)
		*h = none;
}

/* a location as the pre-12.2 attributes give it: a device, CU_DEVICE_CPU
 * or CU_DEVICE_INVALID */
static int as_device(const CUmemLocation *l)
{
	if (l->type == CU_MEM_LOCATION_TYPE_DEVICE)
		return l->id;
	return l->type == CU_MEM_LOCATION_TYPE_HOST ? CU_DEVICE_CPU : CU_DEVICE_INVALID;
}

static CUresult range_attr(void *data, size_t size, CUmem_range_attribute attr, uintptr_t a, uintptr_t b)
{
	if (!data)
		return CUDA_ERROR_INVALID_VALUE;
	struct hint h;
	pthread_mutex_lock(&hint_lock);
	agree(a, b, &h);
	pthread_mutex_unlock(&hint_lock);
	int32_t v;
	switch (attr) {
	case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY:
		v = h.read_mostly;
		break;
	case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION:
		v = as_device(&h.pref);
		break;
	case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION:
		v = as_device(&h.prefetch);
		break;
	case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE:
		v = (int32_t)h.pref.type;
		break;
	case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID:
		v = h.pref.id;
		break;
	case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE:
		v = (int32_t)h.prefetch.type;
		break;
	case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID:
		v = h.prefetch.id;
		break;
	case CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY: {
		if (!size || size % 4)
			return CUDA_ERROR_INVALID_VALUE;
		int32_t *out = data;
		size_t k = 0, max = size / 4;
		uint64_t m = h.accessed_by;
		for (int d = 0; d < rc_ndev && d < ACC_HOST && k < max; d++)
			if (m & 1ull << d)
				out[k++] = d;
		if (k < max && m & 1ull << ACC_HOST)
			out[k++] = CU_DEVICE_CPU;
		while (k < max)
			out[k++] = CU_DEVICE_INVALID;
		return CUDA_SUCCESS;
	}
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (size != 4)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(data, &v, 4);
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuMemRangeGetAttribute(void *data, size_t size, CUmem_range_attribute attr,
					  CUdeviceptr p, size_t n)
{
	uintptr_t a, b;
	CUresult rc = managed_range(p, n, &a, &b);
	return rc ? rc : range_attr(data, size, attr, a, b);
}

RC_EXPORT CUresult cuMemRangeGetAttributes(void **data, size_t *sizes, CUmem_range_attribute *attrs,
					   size_t nattrs, CUdeviceptr p, size_t n)
{
	uintptr_t a, b;
	CUresult rc = managed_range(p, n, &a, &b);
	if (rc)
		return rc;
	if (!data || !sizes || !attrs || !nattrs)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < nattrs; i++)
		if ((rc = range_attr(data[i], sizes[i], attrs[i], a, b)))
			return rc;
	return CUDA_SUCCESS;
}
