/*
 * Stream-ordered memory pools (cuMemAllocAsync and friends), served by
 * rgpud's own pools (daemon/mem/pool.h: memory that migrates and is
 * replayed at the same addresses; the quota counts what each pool
 * reserves).  A CUmemoryPool is a client struct naming the
 * server's pool; each device's current pool (cuDeviceSetMemPool) is kept
 * here.  Frees are posted without waiting, as asynchronous copies are.
 */
#include "client.h"
#include "log.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define RC_POOL 0x5263706c /* "Rcpl" */

struct rc_pool {
	uint32_t magic;
	struct rc_dev *dev;
	int ordinal;
	uint64_t h;             /* the server's handle (an imported pool: the exporter's) */
	int is_default;
	int exportable;         /* made with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR */
	int imported;           /* cuMemPoolImportFromShareableHandle: pointers only */
	uint64_t instance;      /* (imported) the exporter's rgpud */
	unsigned char acc[RGPU_MAX_DEVICES];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct rc_pool *defaults[RGPU_MAX_DEVICES];
static struct rc_pool *current[RGPU_MAX_DEVICES];

/* allocations made from pools: where to free them */
struct pa {
	uint64_t addr;
	struct rc_conn *conn;
	struct rc_pool *pool;
};
static struct pa *pas;
static size_t npas, cappas;

static CUresult pool_of(CUmemoryPool p, struct rc_pool **out)
{
	return rc_obj(p, RC_POOL, out);
}

static CUresult default_pool(int ordinal, struct rc_pool **out)
{
	struct rc_dev *d;
	CUresult rc = rc_dev_get(ordinal, &d);
	if (rc)
		return rc;
	pthread_mutex_lock(&lock);
	if (defaults[ordinal]) {
		*out = defaults[ordinal];
		pthread_mutex_unlock(&lock);
		return CUDA_SUCCESS;
	}
	struct wbuf *w = rc_req();
	put_u32(w, d->gpu);
	struct rd r;
	if ((rc = rc_call(d->conn, RGPU_OP_POOL_DEFAULT, w, &r))) {
		pthread_mutex_unlock(&lock);
		return rc;
	}
	struct rc_pool *p = calloc(1, sizeof(*p));
	uint64_t h = get_u64(&r);
	if (!p || !rd_ok(&r)) {
		pthread_mutex_unlock(&lock);
		free(p);
		return p ? CUDA_ERROR_UNKNOWN : CUDA_ERROR_OUT_OF_MEMORY;
	}
	*p = (struct rc_pool){ .magic = RC_POOL, .dev = d, .ordinal = ordinal, .h = h, .is_default = 1 };
	p->acc[ordinal] = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	defaults[ordinal] = p;
	*out = p;
	pthread_mutex_unlock(&lock);
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *out, CUdevice dev)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	struct rc_pool *p;
	rc = default_pool(dev, &p);
	if (!rc)
		*out = (CUmemoryPool)p;
	return rc;
}

RC_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *out, CUdevice dev)
{
	struct rc_dev *d;
	CUresult rc = rc_dev_get(dev, &d);
	if (rc)
		return rc;
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	struct rc_pool *p = current[dev];
	pthread_mutex_unlock(&lock);
	if (p) {
		*out = (CUmemoryPool)p;
		return CUDA_SUCCESS;
	}
	return cuDeviceGetDefaultMemPool(out, dev);
}

RC_EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
	struct rc_dev *d;
	struct rc_pool *p;
	CUresult rc = rc_dev_get(dev, &d);
	if (!rc)
		rc = pool_of(pool, &p);
	if (rc)
		return rc;
	if (p->ordinal != dev)
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&lock);
	current[dev] = p;
	pthread_mutex_unlock(&lock);
	return CUDA_SUCCESS;
}

/* CUDA 13's pools by location and allocation type: a device's pinned
 * pools are the device's pools above; host-located and managed pools are
 * not served (CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED reads 0). */
static CUresult location_device(const CUmemLocation *loc, CUmemAllocationType type, CUdevice *dev)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!loc)
		return CUDA_ERROR_INVALID_VALUE;
	int host = loc->type == CU_MEM_LOCATION_TYPE_HOST || loc->type == CU_MEM_LOCATION_TYPE_HOST_NUMA;
	if (type == CU_MEM_ALLOCATION_TYPE_PINNED && loc->type == CU_MEM_LOCATION_TYPE_DEVICE) {
		*dev = loc->id;
		return CUDA_SUCCESS;
	}
	if ((type == CU_MEM_ALLOCATION_TYPE_PINNED && host) ||
	    (type == CU_MEM_ALLOCATION_TYPE_MANAGED &&
	     (host || loc->type == CU_MEM_LOCATION_TYPE_DEVICE || loc->type == CU_MEM_LOCATION_TYPE_NONE))) {
		rc_unsupported("memory pools of host or managed memory");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	return CUDA_ERROR_INVALID_VALUE;
}

RC_EXPORT CUresult cuMemGetDefaultMemPool(CUmemoryPool *out, CUmemLocation *loc, CUmemAllocationType type)
{
	CUdevice dev;
	CUresult rc = location_device(loc, type, &dev);
	return rc ? rc : cuDeviceGetDefaultMemPool(out, dev);
}

RC_EXPORT CUresult cuMemGetMemPool(CUmemoryPool *out, CUmemLocation *loc, CUmemAllocationType type)
{
	CUdevice dev;
	CUresult rc = location_device(loc, type, &dev);
	return rc ? rc : cuDeviceGetMemPool(out, dev);
}

RC_EXPORT CUresult cuMemSetMemPool(CUmemLocation *loc, CUmemAllocationType type, CUmemoryPool pool)
{
	CUdevice dev;
	CUresult rc = location_device(loc, type, &dev);
	if (rc)
		return rc;
	rc = cuDeviceSetMemPool(dev, pool);
	/* the pool must be of that location */
	return rc == CUDA_ERROR_INVALID_DEVICE ? CUDA_ERROR_INVALID_VALUE : rc;
}

RC_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *out, const CUmemPoolProps *props)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!out || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	if (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE &&
	    props->handleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
		rc_unsupported("memory pools with shareable handles other than file descriptors");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	struct rc_dev *d;
	if ((rc = rc_dev_get(props->location.id, &d)))
		return rc;
	struct wbuf *w = rc_req();
	put_u32(w, d->gpu);
	put_u64(w, 0);
	put_u64(w, props->maxSize);
	struct rd r;
	if ((rc = rc_call(d->conn, RGPU_OP_POOL_CREATE, w, &r)))
		return rc;
	uint64_t h = get_u64(&r);
	struct rc_pool *p = calloc(1, sizeof(*p));
	if (!p || !rd_ok(&r)) {
		free(p);
		w = rc_req();
		put_u64(w, h);
		rc_call(d->conn, RGPU_OP_POOL_DESTROY, w, &r);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*p = (struct rc_pool){ .magic = RC_POOL, .dev = d, .ordinal = props->location.id, .h = h,
			       .exportable = props->handleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR };
	p->acc[p->ordinal] = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	*out = (CUmemoryPool)p;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
	struct rc_pool *p;
	CUresult rc = pool_of(pool, &p);
	if (rc)
		return rc;
	if (p->is_default)
		return CUDA_ERROR_INVALID_VALUE;
	struct wbuf *w = rc_req();
	put_u64(w, p->h);
	struct rd r;
	if (!p->imported && (rc = rc_call(p->dev->conn, RGPU_OP_POOL_DESTROY, w, &r)))
		return rc;
	pthread_mutex_lock(&lock);
	if (current[p->ordinal] == p)
		current[p->ordinal] = NULL;
	pthread_mutex_unlock(&lock);
	p->magic = 0;
	free(p);
	return CUDA_SUCCESS;
}

static int int_attr(CUmemPool_attribute a)
{
	return a == CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES ||
	       a == CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC ||
	       a == CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES;
}

/* Gets (set 0) or sets (from *value) attribute attr of pool; a get's
 * answer is left in r for the caller to store in *value. */
static CUresult attr_call(CUmemoryPool pool, CUmemPool_attribute attr, void *value, int set, struct rd *r)
{
	struct rc_pool *p;
	CUresult rc = pool_of(pool, &p);
	if (rc)
		return rc;
	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	if (p->imported)
		return CUDA_ERROR_NOT_SUPPORTED; /* (its attributes are the exporter's) */
	struct wbuf *w = rc_req();
	put_u64(w, p->h);
	put_u32(w, (uint32_t)attr);
	if (set)
		put_u64(w, int_attr(attr) ? (uint64_t)(uint32_t)*(int *)value : *(cuuint64_t *)value);
	return rc_call(p->dev->conn, set ? RGPU_OP_POOL_SET_ATTR : RGPU_OP_POOL_GET_ATTR, w, r);
}

RC_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	struct rd r;
	CUresult rc = attr_call(pool, attr, value, 0, &r);
	if (rc)
		return rc;
	uint64_t v = get_u64(&r);
	if (!rd_ok(&r))
		return CUDA_ERROR_UNKNOWN;
	if (int_attr(attr))
		*(int *)value = (int)v;
	else
		*(cuuint64_t *)value = v;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	struct rd r;
	return attr_call(pool, attr, value, 1, &r);
}

RC_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep)
{
	struct rc_pool *p;
	CUresult rc = pool_of(pool, &p);
	if (rc)
		return rc;
	if (p->imported)
		return CUDA_SUCCESS; /* nothing of it is this process's to trim */
	struct wbuf *w = rc_req();
	put_u64(w, p->h);
	put_u64(w, keep);
	struct rd r;
	return rc_call(p->dev->conn, RGPU_OP_POOL_TRIM, w, &r);
}

RC_EXPORT CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
	struct rc_pool *p;
	CUresult rc = pool_of(pool, &p);
	if (rc)
		return rc;
	if (!map || !count || count > RGPU_MAX_DEVICES)
		return CUDA_ERROR_INVALID_VALUE;
	if (p->imported) {
		/* pointers imported from it are mapped for the current
		 * context's device (client/ipc.c): recorded only */
		for (size_t k = 0; k < count; k++) {
			if (map[k].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
			    map[k].location.id < 0 || map[k].location.id >= rc_ndev ||
			    map[k].flags > CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
				return CUDA_ERROR_INVALID_VALUE;
			p->acc[map[k].location.id] = (unsigned char)map[k].flags;
		}
		return CUDA_SUCCESS;
	}
	struct wbuf *w = rc_req();
	put_u64(w, p->h);
	put_u32(w, (uint32_t)count);
	for (size_t k = 0; k < count; k++) {
		struct rc_dev *d;
		if (map[k].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
		    map[k].flags > CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
			return CUDA_ERROR_INVALID_VALUE;
		if ((rc = rc_dev_get(map[k].location.id, &d)))
			return rc;
		if (d->conn != p->dev->conn) {
			rc_unsupported("pool access from a GPU of another server");
			return CUDA_ERROR_NOT_SUPPORTED;
		}
		put_u32(w, d->gpu);
		put_u32(w, map[k].flags);
	}
	struct rd r;
	if ((rc = rc_call(p->dev->conn, RGPU_OP_POOL_ACCESS, w, &r)))
		return rc;
	for (size_t k = 0; k < count; k++)
		p->acc[map[k].location.id] = (unsigned char)map[k].flags;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool pool, CUmemLocation *loc)
{
	struct rc_pool *p;
	CUresult rc = pool_of(pool, &p);
	if (rc)
		return rc;
	if (!flags || !loc || loc->type != CU_MEM_LOCATION_TYPE_DEVICE || loc->id < 0 ||
	    loc->id >= rc_ndev)
		return CUDA_ERROR_INVALID_VALUE;
	*flags = (CUmemAccess_flags)p->acc[loc->id];
	return CUDA_SUCCESS;
}

static CUresult alloc_from(struct rc_pool *p, CUdeviceptr *dptr, size_t size, CUstream s)
{
	struct rc_ctx *c;
	uint64_t sh;
	CUresult rc = rc_stream_resolve(s, &c, &sh);
	if (rc)
		return rc;
	if (!dptr || !size || p->imported)
		return CUDA_ERROR_INVALID_VALUE; /* (no allocations from an imported pool) */
	if (c->dev->conn != p->dev->conn) {
		rc_unsupported("allocations from a pool of another server's GPU");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	pthread_mutex_lock(&lock);
	if (npas == cappas) {
		size_t cap = cappas ? cappas * 2 : 64;
		struct pa *n = realloc(pas, cap * sizeof(*n));
		if (!n) {
			pthread_mutex_unlock(&lock);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		pas = n;
		cappas = cap;
	}
	pthread_mutex_unlock(&lock);
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u64(w, sh);
	put_u64(w, p->h);
	put_u64(w, size);
	struct rd r;
	if ((rc = rc_call(c->dev->conn, RGPU_OP_MEM_ALLOC_ASYNC, w, &r)))
		return rc;
	CUdeviceptr a = get_u64(&r);
	if (!rd_ok(&r))
		return CUDA_ERROR_UNKNOWN;
	rc_devrange_add(c->dev->conn, a, size, c);
	pthread_mutex_lock(&lock);
	pas[npas++] = (struct pa){ a, c->dev->conn, p };
	pthread_mutex_unlock(&lock);
	*dptr = a;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool, CUstream s)
{
	struct rc_pool *p;
	CUresult rc = pool_of(pool, &p);
	if (rc)
		return rc;
	return alloc_from(p, dptr, size, s);
}

RC_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream s)
{
	struct rc_ctx *c;
	uint64_t sh;
	CUresult rc = rc_stream_resolve(s, &c, &sh);
	if (rc)
		return rc;
	CUmemoryPool pool;
	rc = cuDeviceGetMemPool(&pool, c->ordinal);
	if (rc == CUDA_ERROR_NOT_SUPPORTED)
		/* a server without pools: memory at once, in order anyway */
		return cuMemAlloc_v2(dptr, size);
	if (rc)
		return rc;
	return alloc_from((struct rc_pool *)pool, dptr, size, s);
}

/* The stream-ordered allocation at dptr taken off the list: its
 * connection, or NULL when dptr is none. */
static struct rc_conn *pas_take(CUdeviceptr dptr)
{
	struct rc_conn *conn = NULL;
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < npas && !conn; i++)
		if (pas[i].addr == dptr) {
			conn = pas[i].conn;
			pas[i] = pas[--npas];
		}
	pthread_mutex_unlock(&lock);
	return conn;
}

int rc_pool_alloc_forget(CUdeviceptr dptr)
{
	return pas_take(dptr) != NULL;
}

RC_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
	struct rc_ctx *c;
	uint64_t sh;
	CUresult rc = rc_stream_resolve(s, &c, &sh);
	if (rc)
		return rc;
	if (!dptr)
		return CUDA_SUCCESS; /* nothing to free, as cuMemFree(0) */
	struct rc_conn *conn = pas_take(dptr);
	if (!conn && rc_graph_mem_conn(dptr, NULL) == c->dev->conn) {
		/* a graph's allocation, freed in stream order outside the
		 * graph (graphMemoryNodes) */
		struct wbuf *w = rc_req();
		put_u64(w, c->h);
		put_u64(w, sh);
		put_u64(w, dptr);
		return rc_post(c->dev->conn, RGPU_OP_MEM_FREE_ASYNC, w);
	}
	if (!conn) {
		/* a pointer imported from another process's pool: unmapped
		 * after the stream's earlier work */
		if (rc_pool_import_is(dptr)) {
			rc = cuStreamSynchronize(s);
			return rc ? rc : rc_ipc_unmap(dptr);
		}
		/* cuMemAllocAsync without pools on the server: after the
		 * stream's earlier work */
		if (rc_alloc_lookup(dptr, NULL, NULL, NULL) < 0)
			return CUDA_ERROR_INVALID_VALUE;
		rc = cuStreamSynchronize(s);
		return rc ? rc : cuMemFree_v2(dptr);
	}
	rc_devrange_del(conn, dptr);
	if (conn != c->dev->conn) {
		rc_unsupported("freeing pool memory on a stream of another server");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u64(w, sh);
	put_u64(w, dptr);
	return rc_post(conn, RGPU_OP_MEM_FREE_ASYNC, w);
}

/* ---- pools shared between the processes of a job (POSIX fds) ----
 *
 * An exportable pool's shareable handle is a small memory file naming it
 * (the rgpud, its GPU there, the pool's handle); the importing process
 * reads it back into a pool that can only import pointers.  A pointer's
 * export data is its allocation's IPC handle (IPC_EXPORT: the server's
 * share registry, honoured for the same job and uid only) and the pool's
 * handle; importing maps that memory as cuIpcOpenMemHandle does. */

#define POOL_FILE_TAG "rgpuPOOL"
struct pool_file {
	char tag[8];
	uint64_t instance;
	uint64_t h;
	uint32_t gpu, pad;
};

#define POOL_PTR_MAGIC "rgP1"
struct pool_ptr {
	char magic[4];
	uint32_t gpu;
	uint64_t instance;
	uint8_t token[16];
	uint64_t offset, len, size;
	uint64_t h; /* the pool's */
};
_Static_assert(sizeof(struct pool_ptr) <= sizeof(CUmemPoolPtrExportData), "export data holds it");

/* pointers this process imported from pools, freed by cuMemFree(Async) */
static CUdeviceptr *imports;
static size_t nimports, capimports;

int rc_pool_import_is(CUdeviceptr p)
{
	int found = 0;
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < nimports && !found; i++)
		if (imports[i] == p) {
			imports[i] = imports[--nimports];
			found = 1;
		}
	pthread_mutex_unlock(&lock);
	return found;
}

RC_EXPORT CUresult cuMemPoolExportToShareableHandle(void *handle_out, CUmemoryPool pool,
						    CUmemAllocationHandleType type,
						    unsigned long long flags)
{
	struct rc_pool *p;
	CUresult rc = pool_of(pool, &p);
	if (rc)
		return rc;
	if (!handle_out || flags || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
	    !p->exportable || p->imported)
		return CUDA_ERROR_INVALID_VALUE;
	struct pool_file f = { .instance = p->dev->conn->instance, .h = p->h,
			       .gpu = (uint32_t)p->dev->gpu };
	memcpy(f.tag, POOL_FILE_TAG, 8);
	int fd = memfd_create("rgpu-pool", MFD_CLOEXEC);
	if (fd < 0)
		return CUDA_ERROR_OPERATING_SYSTEM;
	if (write(fd, &f, sizeof(f)) != (ssize_t)sizeof(f)) {
		close(fd);
		return CUDA_ERROR_OPERATING_SYSTEM;
	}
	*(int *)handle_out = fd;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool *out, void *handle,
						      CUmemAllocationHandleType type,
						      unsigned long long flags)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!out || flags || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_INVALID_VALUE;
	struct pool_file f;
	int fd = (int)(intptr_t)handle;
	if (pread(fd, &f, sizeof(f), 0) != (ssize_t)sizeof(f) || memcmp(f.tag, POOL_FILE_TAG, 8))
		return CUDA_ERROR_INVALID_VALUE;
	/* the job's device that is that GPU of that rgpud */
	struct rc_dev *d = NULL;
	int ordinal = -1;
	for (int i = 0; i < rc_ndev && !d; i++) {
		struct rc_dev *x;
		if (!rc_dev_get(i, &x) && x->conn->instance == f.instance && x->gpu == f.gpu) {
			d = x;
			ordinal = i;
		}
	}
	if (!d) {
		log_warn("cuMemPoolImportFromShareableHandle: the pool is on a GPU this process "
			 "does not have (IPC reaches the processes of a job on one server)");
		return CUDA_ERROR_INVALID_VALUE;
	}
	struct rc_pool *p = calloc(1, sizeof(*p));
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*p = (struct rc_pool){ .magic = RC_POOL, .dev = d, .ordinal = ordinal, .h = f.h,
			       .imported = 1, .instance = f.instance };
	p->acc[ordinal] = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	*out = (CUmemoryPool)p;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData *out, CUdeviceptr ptr)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	struct rc_pool *p = NULL;
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < npas && !p; i++)
		if (pas[i].addr == ptr)
			p = pas[i].pool;
	pthread_mutex_unlock(&lock);
	if (!out || !p || !p->exportable)
		return CUDA_ERROR_INVALID_VALUE;
	struct wbuf *w = rc_req();
	put_u64(w, ptr);
	struct rd r;
	if ((rc = rc_call(p->dev->conn, RGPU_OP_IPC_EXPORT, w, &r)))
		return rc;
	struct pool_ptr e;
	memset(&e, 0, sizeof(e));
	memcpy(e.magic, POOL_PTR_MAGIC, 4);
	const void *tok = get_raw(&r, 16);
	e.offset = get_u64(&r);
	e.len = get_u64(&r);
	e.size = get_u64(&r);
	if (!rd_ok(&r) || !tok)
		return CUDA_ERROR_UNKNOWN;
	memcpy(e.token, tok, 16);
	e.gpu = (uint32_t)p->dev->gpu;
	e.instance = p->dev->conn->instance;
	e.h = p->h;
	memset(out, 0, sizeof(*out));
	memcpy(out->reserved, &e, sizeof(e));
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuMemPoolImportPointer(CUdeviceptr *out, CUmemoryPool pool,
					  CUmemPoolPtrExportData *data)
{
	struct rc_pool *p;
	CUresult rc = pool_of(pool, &p);
	if (rc)
		return rc;
	if (!out || !data || !p->imported)
		return CUDA_ERROR_INVALID_VALUE;
	struct pool_ptr e;
	memcpy(&e, data->reserved, sizeof(e));
	/* a pointer of another pool is refused (programs try each) */
	if (memcmp(e.magic, POOL_PTR_MAGIC, 4) || e.h != p->h || e.instance != p->instance ||
	    e.gpu != (uint32_t)p->dev->gpu)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	int room = nimports < capimports;
	if (!room) {
		size_t cap = capimports ? capimports * 2 : 16;
		CUdeviceptr *n = realloc(imports, cap * sizeof(*n));
		if (n) {
			imports = n;
			capimports = cap;
			room = 1;
		}
	}
	pthread_mutex_unlock(&lock);
	if (!room)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if ((rc = rc_ipc_map(e.instance, e.token, e.offset, e.len, e.size, out)))
		return rc;
	pthread_mutex_lock(&lock);
	imports[nimports++] = *out;
	pthread_mutex_unlock(&lock);
	return CUDA_SUCCESS;
}

/* per-thread default stream variants */
static CUstream pt(CUstream s)
{
	return s ? s : CU_STREAM_PER_THREAD;
}


RC_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *d, size_t n, CUmemoryPool p, CUstream s)
{
	return cuMemAllocFromPoolAsync(d, n, p, pt(s));
}
