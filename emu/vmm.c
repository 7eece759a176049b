/*
 * Virtual memory management (cuMemCreate, cuMemAddressReserve, cuMemMap,
 * cuMemSetAccess ...): physical memory is a memfd, a reservation is a
 * PROT_NONE anonymous mapping, and cuMemMap maps the memfd over part of a
 * reservation with MAP_FIXED.
 *
 * VMM memory belongs to no context, as in CUDA: the mappings live in one
 * process-wide table (under emu_vmm_rw), and the bounds check of every
 * context (emu_mem_map) also accepts a range that mapped memory covers and
 * that cuMemSetAccess made accessible to the context's device.
 */
#include "emu.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define GRAN EMU_VMM_GRANULARITY

pthread_rwlock_t emu_vmm_rw = PTHREAD_RWLOCK_INITIALIZER;

/* Physical memory from cuMemCreate. */
struct vmm_handle {
	struct vmm_handle *next;
	int fd;
	int dev;
	size_t size;
	int released;    /* cuMemRelease called: freed when maps drops to 0 */
	int maps;        /* live cuMemMap mappings of it */
	int imported;    /* cuMemImportFromShareableHandle: not counted here */
};

struct vmm_resv {
	struct vmm_resv *next;
	uintptr_t base;
	size_t size;
};

struct vmm_map {
	uintptr_t base;
	size_t size;
	struct vmm_handle *h;
	unsigned access;    /* bit d: accessible from device d */
};

/* All under emu_vmm_rw. */
static struct vmm_handle *handles;
static struct vmm_resv *resvs;
static struct vmm_map *maps;     /* sorted by base, never overlapping */
static size_t nmaps, cap_maps;

static int dev_valid(int id)
{
	int ok;

	emu_lock(&emu_glock);
	ok = id >= 0 && id < emu_ndevices;
	emu_unlock(&emu_glock);
	return ok;
}

/* Index of the first mapping with base > p. */
static size_t map_upper(uintptr_t p)
{
	size_t lo = 0, hi = nmaps;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (maps[mid].base <= p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Index of the mapping containing p, or nmaps. */
static size_t map_find(uintptr_t p)
{
	size_t i = map_upper(p);

	if (i == 0 || p - maps[i - 1].base >= maps[i - 1].size)
		return nmaps;
	return i - 1;
}

/* [p, p+len) is covered by consecutive mappings that start at p and end
 * at p+len exactly: *first and *count name them.  len > 0. */
static int whole_maps(uintptr_t p, size_t len, size_t *first, size_t *count)
{
	size_t i = map_find(p), n = 0;
	uintptr_t at = p;

	if (i == nmaps || maps[i].base != p || len > UINTPTR_MAX - p)
		return 0;
	*first = i;
	while (at < p + len) {
		if (i + n >= nmaps || maps[i + n].base != at)
			return 0;
		at += maps[i + n].size;
		n++;
	}
	if (at != p + len)
		return 0;
	*count = n;
	return 1;
}

int emu_vmm_ok(int dev, uintptr_t p, size_t len)
{
	size_t i = map_find(p);
	uintptr_t end;

	if (i == nmaps || len > UINTPTR_MAX - p)
		return 0;
	end = p + len;
	/* The range may span adjacent mappings, as contiguous VA does. */
	for (;;) {
		const struct vmm_map *m = &maps[i];

		if (!(m->access & (1u << dev)))
			return 0;
		if (end - m->base <= m->size)
			return 1;
		if (++i == nmaps || maps[i].base != m->base + m->size)
			return 0;
	}
}

static CUresult check_prop(const CUmemAllocationProp *prop)
{
	if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	return dev_valid(prop->location.id) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

EMU_API CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
						       CUmemAllocationGranularity_flags option)
{
	CUresult rc;

	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!granularity ||
	    (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
		return CUDA_ERROR_INVALID_VALUE;
	rc = check_prop(prop);
	if (rc == CUDA_SUCCESS)
		*granularity = GRAN;
	return rc;
}

EMU_API CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
					     unsigned long long flags)
{
	struct vmm_resv *r;
	size_t align = alignment > GRAN ? alignment : GRAN;
	void *p;

	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!ptr || size == 0 || size % GRAN != 0 || flags != 0 || (align & (align - 1)) != 0 ||
	    addr % align != 0 || size > SIZE_MAX - align || addr > UINTPTR_MAX - size)
		return CUDA_ERROR_INVALID_VALUE;
	r = malloc(sizeof *r);
	if (!r)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (addr != 0) {
		/* Exactly there or not at all. */
		p = mmap((void *)(uintptr_t)addr, size, PROT_NONE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
		if (p == MAP_FAILED) {
			free(r);
			return errno == ENOMEM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
		}
		if ((uintptr_t)p != addr) {
			/* A kernel that ignores MAP_FIXED_NOREPLACE. */
			munmap(p, size);
			free(r);
			return CUDA_ERROR_INVALID_VALUE;
		}
	} else {
		uintptr_t b, a;

		p = mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (p == MAP_FAILED) {
			free(r);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		b = (uintptr_t)p;
		a = (b + align - 1) & ~(uintptr_t)(align - 1);
		if (a > b)
			munmap(p, a - b);
		if (b + align > a)
			munmap((void *)(a + size), b + align - a);
		p = (void *)a;
	}
	r->base = (uintptr_t)p;
	r->size = size;
	emu_wrlock(&emu_vmm_rw);
	r->next = resvs;
	resvs = r;
	emu_rwunlock(&emu_vmm_rw);
	*ptr = (CUdeviceptr)r->base;
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	struct vmm_resv *r = NULL, **pp;
	size_t i;

	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	emu_wrlock(&emu_vmm_rw);
	for (pp = &resvs; *pp; pp = &(*pp)->next)
		if ((*pp)->base == ptr && (*pp)->size == size) {
			r = *pp;
			break;
		}
	if (!r) {
		emu_rwunlock(&emu_vmm_rw);
		return CUDA_ERROR_INVALID_VALUE;
	}
	/* Everything mapped in it must be unmapped first. */
	i = map_upper(r->base + r->size - 1);
	if (i > 0 && maps[i - 1].base + maps[i - 1].size > r->base) {
		emu_rwunlock(&emu_vmm_rw);
		return CUDA_ERROR_INVALID_VALUE;
	}
	*pp = r->next;
	emu_rwunlock(&emu_vmm_rw);
	munmap((void *)r->base, r->size);
	free(r);
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
				     const CUmemAllocationProp *prop, unsigned long long flags)
{
	struct vmm_handle *h;
	CUresult rc;

	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!handle || size == 0 || size % GRAN != 0 || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	rc = check_prop(prop);
	if (rc == CUDA_SUCCESS)
		rc = emu_capture_unsafe();
	if (rc != CUDA_SUCCESS)
		return rc;
	emu_lock(&emu_glock);
	if (emu_pool_take(prop->location.id, size) != 0) {
		emu_unlock(&emu_glock);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	emu_unlock(&emu_glock);

	h = calloc(1, sizeof *h);
	if (!h)
		goto fail;
	/* Sparse: pages cost host memory only once touched. */
	/* the name carries the device, for an importer (which may be another
	 * process: the descriptor is the shareable handle) */
	char name[32];
	snprintf(name, sizeof name, "rgpu-emu-vmm-dev%d", prop->location.id);
	h->fd = memfd_create(name, MFD_CLOEXEC);
	if (h->fd < 0) {
		free(h);
		goto fail;
	}
	if (ftruncate(h->fd, (off_t)size) != 0) {
		close(h->fd);
		free(h);
		goto fail;
	}
	h->dev = prop->location.id;
	h->size = size;
	emu_wrlock(&emu_vmm_rw);
	h->next = handles;
	handles = h;
	emu_rwunlock(&emu_vmm_rw);
	*handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
	return CUDA_SUCCESS;

fail:
	emu_lock(&emu_glock);
	emu_pool_give(prop->location.id, size);
	emu_unlock(&emu_glock);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

/* Caller write-holds emu_vmm_rw. */
static struct vmm_handle *handle_find(CUmemGenericAllocationHandle handle)
{
	for (struct vmm_handle *h = handles; h; h = h->next)
		if ((CUmemGenericAllocationHandle)(uintptr_t)h == handle)
			return h;
	return NULL;
}

/* Unlinks h (caller write-holds emu_vmm_rw); handle_free() then frees it. */
static void handle_unlink(struct vmm_handle *h)
{
	for (struct vmm_handle **pp = &handles; *pp; pp = &(*pp)->next)
		if (*pp == h) {
			*pp = h->next;
			return;
		}
}

/* No lock held. */
static void handle_free(struct vmm_handle *h)
{
	close(h->fd);
	if (!h->imported) {
		emu_lock(&emu_glock);
		emu_pool_give(h->dev, h->size);
		emu_unlock(&emu_glock);
	}
	free(h);
}

EMU_API CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
	struct vmm_handle *h;
	int now;

	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	emu_wrlock(&emu_vmm_rw);
	h = handle_find(handle);
	if (!h || h->released) {
		emu_rwunlock(&emu_vmm_rw);
		return CUDA_ERROR_INVALID_VALUE;
	}
	h->released = 1;
	now = h->maps == 0;
	if (now)
		handle_unlink(h);
	emu_rwunlock(&emu_vmm_rw);
	if (now)
		handle_free(h);
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
				  unsigned long long flags)
{
	struct vmm_handle *h;
	struct vmm_resv *r;
	size_t i;
	void *p;

	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (size == 0 || size % GRAN != 0 || offset % GRAN != 0 || ptr % GRAN != 0 || flags != 0 ||
	    ptr > UINTPTR_MAX - size)
		return CUDA_ERROR_INVALID_VALUE;
	emu_wrlock(&emu_vmm_rw);
	h = handle_find(handle);
	if (!h || h->released) {
		emu_rwunlock(&emu_vmm_rw);
		return CUDA_ERROR_INVALID_HANDLE;
	}
	if (offset > h->size || size > h->size - offset)
		goto inval;
	for (r = resvs; r; r = r->next)
		if (ptr >= r->base && ptr - r->base < r->size)
			break;
	if (!r || size > r->size - (ptr - r->base))
		goto inval;
	/* Nothing mapped in [ptr, ptr+size) yet. */
	i = map_upper(ptr + size - 1);
	if (i > 0 && maps[i - 1].base + maps[i - 1].size > ptr)
		goto inval;
	if (nmaps == cap_maps) {
		size_t cap = cap_maps ? 2 * cap_maps : 16;
		struct vmm_map *m = realloc(maps, cap * sizeof *m);

		if (!m) {
			emu_rwunlock(&emu_vmm_rw);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		maps = m;
		cap_maps = cap;
	}
	p = mmap((void *)(uintptr_t)ptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, h->fd, (off_t)offset);
	if (p == MAP_FAILED) {
		/* The reservation may be partly gone: put it back. */
		mmap((void *)(uintptr_t)ptr, size, PROT_NONE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
		emu_rwunlock(&emu_vmm_rw);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	i = map_upper(ptr);
	memmove(&maps[i + 1], &maps[i], (nmaps - i) * sizeof *maps);
	maps[i] = (struct vmm_map){ (uintptr_t)ptr, size, h, 0 };
	nmaps++;
	h->maps++;
	emu_rwunlock(&emu_vmm_rw);
	return CUDA_SUCCESS;

inval:
	emu_rwunlock(&emu_vmm_rw);
	return CUDA_ERROR_INVALID_VALUE;
}

EMU_API CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	unsigned set = 0, clear = 0;
	size_t first, n;

	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (size == 0 || !desc || count == 0)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t k = 0; k < count; k++) {
		unsigned bit;

		if (desc[k].location.type != CU_MEM_LOCATION_TYPE_DEVICE)
			return CUDA_ERROR_INVALID_VALUE;
		if (!dev_valid(desc[k].location.id))
			return CUDA_ERROR_INVALID_DEVICE;
		bit = 1u << desc[k].location.id;
		switch (desc[k].flags) {
		case CU_MEM_ACCESS_FLAGS_PROT_NONE:
			clear |= bit;
			set &= ~bit;
			break;
		case CU_MEM_ACCESS_FLAGS_PROT_READ:
		case CU_MEM_ACCESS_FLAGS_PROT_READWRITE:
			set |= bit;
			clear &= ~bit;
			break;
		default:
			return CUDA_ERROR_INVALID_VALUE;
		}
	}
	emu_wrlock(&emu_vmm_rw);
	if (!whole_maps(ptr, size, &first, &n)) {
		emu_rwunlock(&emu_vmm_rw);
		return CUDA_ERROR_INVALID_VALUE;
	}
	for (size_t k = first; k < first + n; k++)
		maps[k].access = (maps[k].access & ~clear) | set;
	emu_rwunlock(&emu_vmm_rw);
	return CUDA_SUCCESS;
}

/* Waits until every context is idle: queued work may use the memory. */
static void wait_all_idle(void)
{
	struct emu_ctx **v;
	size_t n;

	if (emu_ctx_hold_all(&v, &n) != CUDA_SUCCESS)
		return;
	for (size_t i = 0; i < n; i++) {
		emu_lock(&v[i]->lock);
		emu_ctx_wait_idle(v[i]);
		emu_unlock(&v[i]->lock);
		emu_ctx_leave(v[i]);
	}
	free(v);
}

EMU_API CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	struct vmm_handle *gone[16], **freeing = gone;
	size_t first, n, nfree = 0;

	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	wait_all_idle();
	emu_wrlock(&emu_vmm_rw);
	if (!whole_maps(ptr, size, &first, &n)) {
		emu_rwunlock(&emu_vmm_rw);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (n > sizeof gone / sizeof gone[0]) {
		freeing = malloc(n * sizeof *freeing);
		if (!freeing) {
			emu_rwunlock(&emu_vmm_rw);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	for (size_t k = first; k < first + n; k++) {
		struct vmm_handle *h = maps[k].h;

		/* Back to a PROT_NONE reservation. */
		mmap((void *)maps[k].base, maps[k].size, PROT_NONE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
		if (--h->maps == 0 && h->released) {
			handle_unlink(h);
			freeing[nfree++] = h;
		}
	}
	memmove(&maps[first], &maps[first + n], (nmaps - first - n) * sizeof *maps);
	nmaps -= n;
	if (nmaps == 0) {
		free(maps);
		maps = NULL;
		cap_maps = 0;
	}
	emu_rwunlock(&emu_vmm_rw);
	for (size_t k = 0; k < nfree; k++)
		handle_free(freeing[k]);
	if (freeing != gone)
		free(freeing);
	return CUDA_SUCCESS;
}

/* Shareable handles: the physical memory's memfd itself (a duplicate), which
 * another process may import. */
EMU_API CUresult CUDAAPI cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
						      CUmemAllocationHandleType handleType, unsigned long long flags)
{
	struct vmm_handle *h;
	int fd;

	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!shareableHandle || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	emu_wrlock(&emu_vmm_rw);
	h = handle_find(handle);
	fd = h && !h->released ? fcntl(h->fd, F_DUPFD_CLOEXEC, 3) : -2;
	emu_rwunlock(&emu_vmm_rw);
	if (fd == -2)
		return CUDA_ERROR_INVALID_VALUE;
	if (fd < 0)
		return CUDA_ERROR_OPERATING_SYSTEM;
	*(int *)shareableHandle = fd;
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
							CUmemAllocationHandleType shHandleType)
{
	int fd = (int)(intptr_t)osHandle, dev = -1;
	char link[64], target[256];
	struct stat st;
	struct vmm_handle *h;
	ssize_t n;

	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	n = readlink(link, target, sizeof target - 1);
	if (n <= 0 || fstat(fd, &st) != 0)
		return CUDA_ERROR_INVALID_VALUE;
	target[n] = '\0';
	if (sscanf(target, "/memfd:rgpu-emu-vmm-dev%d", &dev) != 1 || !dev_valid(dev) ||
	    st.st_size <= 0 || st.st_size % GRAN != 0)
		return CUDA_ERROR_INVALID_VALUE;
	h = calloc(1, sizeof *h);
	if (!h)
		return CUDA_ERROR_OUT_OF_MEMORY;
	h->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (h->fd < 0) {
		free(h);
		return CUDA_ERROR_OPERATING_SYSTEM;
	}
	h->dev = dev;
	h->size = (size_t)st.st_size;
	h->imported = 1;
	emu_wrlock(&emu_vmm_rw);
	h->next = handles;
	handles = h;
	emu_rwunlock(&emu_vmm_rw);
	*handle = (CUmemGenericAllocationHandle)(uintptr_t)h;
	return CUDA_SUCCESS;
}
