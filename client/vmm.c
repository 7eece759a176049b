/*
 * The VMM API for applications: address reservations, physical memory,
 * mappings, access, shareable handles.
 *
 * Reservations are made here, with no round trip: each is a PROT_NONE
 * range of this process in the upper 8 TiB of the managed-memory range
 * (RGPU_VA_BASE + 8 TiB; coherence.c keeps to the lower half), so no host
 * allocation can take an
 * address the application uses for device memory.  rgpud reserves the
 * whole 16 TiB range once per session for both (daemon/ops_vmem.c,
 * daemon/ops_appvmm.c), and
 * maps physical memory at exactly the application's addresses.
 *
 * Physical memory lives on the server of its device; a mapping goes to
 * that server, and access can be given to GPUs of that server only.
 *
 * Shareable handles (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR): the server
 * keeps the driver's descriptor and gives the client a random token; the
 * client's "descriptor" is a sealed memfd holding the server's identity and
 * that token, so it travels between processes like the real one (over a
 * Unix socket, by fork).  An importing process presents the token to the
 * same server, which honours it only for sessions of the same job and uid.
 */
#include "client.h"
#include "log.h"
#include "settings.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define GRAIN (2ull << 20)
/* the upper half of the managed-memory range (RGPU_VA_BASE) */
#define WINDOW (8ull << 40)
#define RC_PHYS 0x52637068 /* "Rcph" */

struct rc_phys {
	uint32_t magic;
	struct rc_phys *next;
	struct rc_dev *dev;
	int ordinal;
	uint64_t h;
	size_t size;
	CUmemAllocationProp prop;
	int refs;     /* the handle and each cuMemRetainAllocationHandle */
	int maps;
};

struct resv {
	uint64_t base, size;
};

struct cmap {
	uint64_t addr, size;
	struct rc_phys *p;
	unsigned char acc[RGPU_MAX_DEVICES]; /* CUmemAccess_flags per device */
	int registered;                        /* in memory.c's device ranges */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct rc_phys *physs;
static struct resv *resvs; /* sorted by base */
static size_t nresv, capresv;
static struct cmap *maps;  /* sorted by addr */
static size_t nmaps, capmaps;
static uint64_t win_base;

static uint64_t window_base(void)
{
	if (!win_base) {
		uint64_t va = rc_setting(RS_VA_BASE);
		/* the driver honours a fixed reservation of that range
		 * (NOTES.md), which the session makes once for both */
		win_base = va + WINDOW;
	}
	return win_base;
}

struct rc_ctx *rc_ctx_on(struct rc_dev *d)
{
	struct rc_ctx *c = rc_current();
	if (c && c->dev->conn == d->conn)
		return c;
	return d->primary;
}

void rc_appmem_attrs(int *a)
{
	a[CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED] = 0;
	a[CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED] = 0;
	a[CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED] = 0;
	/* (pools export file descriptors: client/pool.c) */
	a[CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES] = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	/* registered host memory has a device address of its own */
	a[CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM] = 0;
	/* RDMA into VMM memory would bypass the server */
	a[CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED] = 0;
}

static struct rc_phys *phys_find(CUmemGenericAllocationHandle h)
{
	for (struct rc_phys *p = physs; p; p = p->next)
		if ((CUmemGenericAllocationHandle)(uintptr_t)p == h)
			return p;
	return NULL;
}

static ssize_t map_find(uint64_t a)
{
	for (size_t i = 0; i < nmaps; i++)
		if (a - maps[i].addr < maps[i].size)
			return (ssize_t)i;
	return -1;
}

static int whole_maps(uint64_t a, uint64_t n, size_t *first, size_t *count)
{
	ssize_t i = map_find(a);
	if (i < 0 || maps[i].addr != a || !n)
		return -1;
	uint64_t at = a, end = a + n;
	size_t k = (size_t)i;
	while (k < nmaps && maps[k].addr == at && at < end)
		at += maps[k++].size;
	if (at != end)
		return -1;
	*first = (size_t)i;
	*count = k - (size_t)i;
	return 0;
}

static void phys_unlink_free(struct rc_phys *p)
{
	for (struct rc_phys **pp = &physs; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	p->magic = 0;
	free(p);
}

/* Host memory through the VMM API (NCCL's host buffers, CUDA 12.2 on) */
static int host_location(const CUmemAllocationProp *prop)
{
	return prop && (prop->location.type == CU_MEM_LOCATION_TYPE_HOST ||
			prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
			prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT);
}

static CUresult check_prop(const CUmemAllocationProp *prop, struct rc_dev **d)
{
	if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	return rc_dev_get(prop->location.id, d);
}

RC_EXPORT CUresult cuMemGetAllocationGranularity(size_t *gran, const CUmemAllocationProp *prop,
						 CUmemAllocationGranularity_flags option)
{
	struct rc_dev *d;
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	/* host memory has a grain too, though rgpu does not create it
	 * (cuMemCreate): NCCL asks for it first, then falls back to shared
	 * memory of its own when the creation fails */
	if (host_location(prop) && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED)
		d = NULL;
	else if ((rc = check_prop(prop, &d)))
		return rc;
	if (!gran || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
		      option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
		return CUDA_ERROR_INVALID_VALUE;
	/* measured on the H100 and H200 (NOTES.md); rgpud maps at this grain */
	*gran = GRAIN;
	return CUDA_SUCCESS;
}

/* ---- reservations ---- */

/* A free aligned range of size bytes in the window at or after want
 * (lock held); 0 if none. */
static uint64_t gap(uint64_t want, uint64_t size, uint64_t align)
{
	uint64_t base = window_base(), end = base + WINDOW;
	uint64_t at = want >= base && want < end ? want : base;
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i <= nresv; i++) {
			at = (at + align - 1) / align * align;
			uint64_t lim = i < nresv ? resvs[i].base : end;
			if (i < nresv && resvs[i].base + resvs[i].size <= at)
				continue;
			if (at + size <= lim && at + size >= at)
				return at;
			if (i < nresv)
				at = resvs[i].base + resvs[i].size;
		}
		at = base; /* from the start once more */
	}
	return 0;
}

RC_EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
				       unsigned long long flags)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!ptr || !size || size % GRAIN || (align & (align - 1)) || size > WINDOW)
		return CUDA_ERROR_INVALID_VALUE;
	(void)flags;
	if (align < GRAIN)
		align = GRAIN;
	pthread_mutex_lock(&lock);
	if (nresv == capresv) {
		size_t cap = capresv ? capresv * 2 : 16;
		struct resv *r = realloc(resvs, cap * sizeof(*r));
		if (!r) {
			pthread_mutex_unlock(&lock);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		resvs = r;
		capresv = cap;
	}
	/* the hint is honoured when that range is free, as the driver does */
	uint64_t at = 0;
	for (int tries = 0; tries < 16; tries++) {
		at = gap(at ? at + GRAIN : (addr % align ? 0 : addr), size, align);
		if (!at)
			break;
		void *p = mmap((void *)at, size, PROT_NONE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
		if (p == (void *)at)
			break;
		if (p != MAP_FAILED)
			munmap(p, size); /* an old kernel ignored the flag */
		/* something of this process is there: look further on */
	}
	if (!at) {
		pthread_mutex_unlock(&lock);
		log_warn("cuMemAddressReserve: no room for %zu bytes in rgpu's VMM window at %#llx",
			 size, (unsigned long long)window_base());
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	size_t i = 0;
	while (i < nresv && resvs[i].base < at)
		i++;
	memmove(&resvs[i + 1], &resvs[i], (nresv - i) * sizeof(*resvs));
	resvs[i] = (struct resv){ at, size };
	nresv++;
	pthread_mutex_unlock(&lock);
	*ptr = at;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < nresv; i++) {
		if (resvs[i].base != ptr || resvs[i].size != size)
			continue;
		for (size_t k = 0; k < nmaps; k++)
			if (maps[k].addr >= ptr && maps[k].addr < ptr + size) {
				pthread_mutex_unlock(&lock);
				return CUDA_ERROR_INVALID_VALUE; /* still mapped */
			}
		munmap((void *)(uintptr_t)ptr, size);
		memmove(&resvs[i], &resvs[i + 1], (nresv - i - 1) * sizeof(*resvs));
		nresv--;
		pthread_mutex_unlock(&lock);
		return CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&lock);
	return CUDA_ERROR_INVALID_VALUE;
}

/* ---- physical memory ---- */

static CUresult phys_new(struct rc_dev *d, int ordinal, uint64_t h, size_t size,
			 const CUmemAllocationProp *prop, CUmemGenericAllocationHandle *out)
{
	struct rc_phys *p = calloc(1, sizeof(*p));
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*p = (struct rc_phys){ .magic = RC_PHYS, .dev = d, .ordinal = ordinal, .h = h,
			       .size = size, .prop = *prop, .refs = 1 };
	pthread_mutex_lock(&lock);
	p->next = physs;
	physs = p;
	pthread_mutex_unlock(&lock);
	*out = (CUmemGenericAllocationHandle)(uintptr_t)p;
	return CUDA_SUCCESS;
}

static void server_release(struct rc_dev *d, uint64_t h)
{
	struct wbuf *w = rc_req();
	put_u64(w, h);
	struct rd r;
	rc_call(d->conn, RGPU_OP_VMM_RELEASE, w, &r);
}

RC_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
			       const CUmemAllocationProp *prop, unsigned long long flags)
{
	struct rc_dev *d;
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (host_location(prop)) {
		/* the GPU is elsewhere: host memory it maps is not this host's */
		rc_unsupported("cuMemCreate of host memory (a CU_MEM_LOCATION_TYPE_HOST* location)");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if ((rc = check_prop(prop, &d)))
		return rc;
	if (!handle || !size || size % GRAIN || flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (prop->requestedHandleTypes & ~CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
		rc_unsupported("cuMemCreate with shareable handle types other than POSIX file descriptors");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	struct wbuf *w = rc_req();
	put_u32(w, d->gpu);
	put_u64(w, size);
	put_u32(w, prop->requestedHandleTypes);
	struct rd r;
	if ((rc = rc_call(d->conn, RGPU_OP_VMM_CREATE, w, &r)))
		return rc;
	uint64_t h = get_u64(&r);
	if (!rd_ok(&r))
		return CUDA_ERROR_UNKNOWN;
	if ((rc = phys_new(d, prop->location.id, h, size, prop, handle)))
		server_release(d, h);
	return rc;
}

RC_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	pthread_mutex_lock(&lock);
	struct rc_phys *p = phys_find(handle);
	if (!p || p->refs <= 0) {
		pthread_mutex_unlock(&lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (--p->refs > 0) {
		pthread_mutex_unlock(&lock);
		return CUDA_SUCCESS;
	}
	struct rc_dev *d = p->dev;
	uint64_t h = p->h;
	if (!p->maps)
		phys_unlink_free(p); /* else with its last mapping */
	pthread_mutex_unlock(&lock);
	server_release(d, h);
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
							  CUmemGenericAllocationHandle handle)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!prop)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	struct rc_phys *p = phys_find(handle);
	if (p && p->refs > 0)
		*prop = p->prop;
	pthread_mutex_unlock(&lock);
	return p && p->refs > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

RC_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	ssize_t i = map_find((uint64_t)(uintptr_t)addr);
	if (i >= 0) {
		struct rc_phys *p = maps[i].p;
		p->refs++;
		*handle = (CUmemGenericAllocationHandle)(uintptr_t)p;
	}
	pthread_mutex_unlock(&lock);
	return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- mappings ---- */

RC_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
			    unsigned long long flags)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!size || ptr % GRAIN || size % GRAIN || offset % GRAIN || flags || ptr + size < ptr)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	struct rc_phys *p = phys_find(handle);
	int inside = 0;
	for (size_t i = 0; i < nresv; i++)
		if (ptr >= resvs[i].base && ptr + size <= resvs[i].base + resvs[i].size)
			inside = 1;
	int overlap = 0;
	for (size_t i = 0; i < nmaps; i++)
		if (maps[i].addr < ptr + size && ptr < maps[i].addr + maps[i].size)
			overlap = 1;
	if (!p || p->refs <= 0) {
		pthread_mutex_unlock(&lock);
		return CUDA_ERROR_INVALID_HANDLE;
	}
	if (!inside || overlap || offset > p->size || size > p->size - offset) {
		pthread_mutex_unlock(&lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (nmaps == capmaps) {
		size_t cap = capmaps ? capmaps * 2 : 16;
		struct cmap *m = realloc(maps, cap * sizeof(*m));
		if (!m) {
			pthread_mutex_unlock(&lock);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		maps = m;
		capmaps = cap;
	}
	/* held across the call: the table must not change under it */
	struct wbuf *w = rc_req();
	put_u64(w, ptr);
	put_u64(w, size);
	put_u64(w, offset);
	put_u64(w, p->h);
	struct rd r;
	if ((rc = rc_call(p->dev->conn, RGPU_OP_VMM_MAP, w, &r))) {
		pthread_mutex_unlock(&lock);
		return rc;
	}
	size_t i = 0;
	while (i < nmaps && maps[i].addr < ptr)
		i++;
	memmove(&maps[i + 1], &maps[i], (nmaps - i) * sizeof(*maps));
	memset(&maps[i], 0, sizeof(maps[i]));
	maps[i].addr = ptr;
	maps[i].size = size;
	maps[i].p = p;
	nmaps++;
	p->maps++;
	pthread_mutex_unlock(&lock);
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	pthread_mutex_lock(&lock);
	size_t first, n;
	if (whole_maps(ptr, size, &first, &n) < 0) {
		pthread_mutex_unlock(&lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	CUresult first_rc = CUDA_SUCCESS;
	while (n--) {
		struct cmap m = maps[first];
		struct wbuf *w = rc_req();
		put_u64(w, m.addr);
		put_u64(w, m.size);
		struct rd r;
		rc = rc_call(m.p->dev->conn, RGPU_OP_VMM_UNMAP, w, &r);
		if (rc && !first_rc)
			first_rc = rc;
		if (m.registered)
			rc_devrange_del(m.p->dev->conn, m.addr);
		memmove(&maps[first], &maps[first + 1], (nmaps - first - 1) * sizeof(*maps));
		nmaps--;
		if (--m.p->maps == 0 && m.p->refs <= 0)
			phys_unlink_free(m.p);
	}
	pthread_mutex_unlock(&lock);
	return first_rc;
}

RC_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!desc || !count || count > RGPU_MAX_DEVICES)
		return CUDA_ERROR_INVALID_VALUE;
	struct rc_dev *devs[RGPU_MAX_DEVICES];
	for (size_t k = 0; k < count; k++) {
		if (desc[k].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
		    desc[k].flags > CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
			return CUDA_ERROR_INVALID_VALUE;
		if ((rc = rc_dev_get(desc[k].location.id, &devs[k])))
			return rc;
	}
	pthread_mutex_lock(&lock);
	size_t first, n;
	if (whole_maps(ptr, size, &first, &n) < 0) {
		pthread_mutex_unlock(&lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	struct rc_conn *conn = maps[first].p->dev->conn;
	for (size_t k = first; k < first + n; k++)
		if (maps[k].p->dev->conn != conn)
			conn = NULL;
	for (size_t k = 0; k < count && conn; k++)
		if (devs[k]->conn != conn)
			conn = NULL;
	if (!conn) {
		pthread_mutex_unlock(&lock);
		rc_unsupported("cuMemSetAccess across GPUs of different servers");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	struct wbuf *w = rc_req();
	put_u64(w, ptr);
	put_u64(w, size);
	put_u32(w, (uint32_t)count);
	for (size_t k = 0; k < count; k++) {
		put_u32(w, devs[k]->gpu);
		put_u32(w, desc[k].flags);
	}
	struct rd r;
	if ((rc = rc_call(conn, RGPU_OP_VMM_ACCESS, w, &r))) {
		pthread_mutex_unlock(&lock);
		return rc;
	}
	for (size_t k = first; k < first + n; k++) {
		struct cmap *m = &maps[k];
		int any = 0;
		for (size_t j = 0; j < count; j++)
			m->acc[desc[j].location.id] = (unsigned char)desc[j].flags;
		for (int j = 0; j < rc_ndev; j++)
			any |= m->acc[j] != 0;
		struct rc_ctx *owner = rc_ctx_on(m->p->dev);
		if (any && !m->registered && owner &&
		    rc_devrange_add(conn, m->addr, m->size, owner) == 0)
			m->registered = 1;
		else if (!any && m->registered) {
			rc_devrange_del(conn, m->addr);
			m->registered = 0;
		}
	}
	pthread_mutex_unlock(&lock);
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *loc, CUdeviceptr ptr)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!flags || !loc || loc->type != CU_MEM_LOCATION_TYPE_DEVICE || loc->id < 0 ||
	    loc->id >= rc_ndev)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	ssize_t i = map_find(ptr);
	if (i >= 0)
		*flags = maps[i].acc[loc->id];
	pthread_mutex_unlock(&lock);
	return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- shareable handles ---- */

#define SHARE_MAGIC "RGPUSHR1"

struct share_rec {
	char magic[8];
	char server_id[128];
	uint32_t port;
	uint8_t token[16];
	uint64_t size;
};

RC_EXPORT CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle handle,
						CUmemAllocationHandleType type, unsigned long long flags)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!out || flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
		rc_unsupported("shareable handles other than POSIX file descriptors");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	pthread_mutex_lock(&lock);
	struct rc_phys *p = phys_find(handle);
	struct rc_phys copy = { 0 };
	if (p && p->refs > 0)
		copy = *p;
	pthread_mutex_unlock(&lock);
	if (!p || copy.refs <= 0 || !copy.dev ||
	    !(copy.prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
		return CUDA_ERROR_INVALID_VALUE;
	struct wbuf *w = rc_req();
	put_u64(w, copy.h);
	struct rd r;
	if ((rc = rc_call(copy.dev->conn, RGPU_OP_VMM_EXPORT, w, &r)))
		return rc;
	const void *tok = get_raw(&r, 16);
	if (!rd_ok(&r))
		return CUDA_ERROR_UNKNOWN;
	struct share_rec rec;
	memset(&rec, 0, sizeof(rec));
	memcpy(rec.magic, SHARE_MAGIC, 8);
	snprintf(rec.server_id, sizeof(rec.server_id), "%s", copy.dev->conn->server_id);
	rec.port = copy.dev->conn->port;
	memcpy(rec.token, tok, 16);
	rec.size = copy.size;
	int fd = memfd_create("rgpu-shareable-memory", MFD_ALLOW_SEALING);
	if (fd < 0)
		return CUDA_ERROR_OPERATING_SYSTEM;
	if (pwrite(fd, &rec, sizeof(rec), 0) != (ssize_t)sizeof(rec) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0) {
		close(fd);
		return CUDA_ERROR_OPERATING_SYSTEM;
	}
	*(int *)out = fd;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *os,
						  CUmemAllocationHandleType type)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
		rc_unsupported("shareable handles other than POSIX file descriptors");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	struct share_rec rec;
	int fd = (int)(intptr_t)os;
	if (pread(fd, &rec, sizeof(rec), 0) != (ssize_t)sizeof(rec) || memcmp(rec.magic, SHARE_MAGIC, 8))
		return CUDA_ERROR_INVALID_VALUE;
	rec.server_id[sizeof(rec.server_id) - 1] = '\0';
	struct rc_conn *c = NULL;
	for (int i = 0; i < rc_nconn; i++)
		if (rc_conns[i].port == rec.port && !strcmp(rc_conns[i].server_id, rec.server_id))
			c = &rc_conns[i];
	if (!c) {
		log_warn("cuMemImportFromShareableHandle: the memory is on %s port %u, which is not "
			 "in RGPU_SERVERS", rec.server_id, rec.port);
		return CUDA_ERROR_INVALID_DEVICE;
	}
	return rc_vmm_import(c, rec.token, handle, NULL);
}

CUresult rc_vmm_import(struct rc_conn *c, const uint8_t token[16], CUmemGenericAllocationHandle *handle,
		       int *ordinal_out)
{
	CUresult rc;
	struct wbuf *w = rc_req();
	put_raw(w, token, 16);
	struct rd r;
	if ((rc = rc_call(c, RGPU_OP_VMM_IMPORT, w, &r)))
		return rc;
	uint64_t h = get_u64(&r), size = get_u64(&r);
	uint32_t gpu = get_u32(&r);
	if (!rd_ok(&r))
		return CUDA_ERROR_UNKNOWN;
	int ordinal = -1;
	for (int i = 0; i < rc_ndev && ordinal < 0; i++)
		if (rc_devs[i].conn == c && rc_devs[i].gpu == gpu)
			ordinal = i;
	if (ordinal < 0) {
		/* the GPU is not one of this process's devices */
		struct rc_dev tmp = { .conn = c };
		server_release(&tmp, h);
		return CUDA_ERROR_INVALID_DEVICE;
	}
	CUmemAllocationProp prop = {
		.type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = ordinal },
	};
	if ((rc = phys_new(&rc_devs[ordinal], ordinal, h, size, &prop, handle)))
		server_release(&rc_devs[ordinal], h);
	else if (ordinal_out)
		*ordinal_out = ordinal;
	return rc;
}
