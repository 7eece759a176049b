/*
 * Device memory: host pages handed out as device addresses, the per-context
 * allocation table every access is checked against, copies, memsets, and
 * page-locked host memory (plain aligned host memory here).
 */
#include "emu.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Device allocations are placed from here up where the kernel lets us, so
 * device pointers are easy to tell from host pointers in a debugger; the
 * address is only a hint. */
#define VA_START 0x7e0000000000ULL
#define VA_END 0x7f0000000000ULL
#define VA_GAP (1ULL << 20)
static uint64_t next_va = VA_START;

static size_t page_size(void)
{
	long p = sysconf(_SC_PAGESIZE);

	return p > 0 ? (size_t)p : 4096;
}

/* cuRgpuEmuPlaceNext: where this thread's next mapping must go (0: none) */
static __thread uint64_t place_next;

EMU_API CUresult CUDAAPI cuRgpuEmuPlaceNext(CUdeviceptr addr)
{
	place_next = addr;
	return CUDA_SUCCESS;
}

static void *map_pages(size_t len)
{
	void *p;

	if (place_next) {
		/* exactly there or not at all: rgpud re-creates a migrated
		 * session's memory at its addresses (daemon/migrate/memif.c) */
		p = mmap((void *)(uintptr_t)place_next, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
		place_next = 0;
		return p == MAP_FAILED ? NULL : p;
	}
	uint64_t hint = __atomic_fetch_add(&next_va, len + VA_GAP, __ATOMIC_RELAXED);

	if (hint >= VA_END || VA_END - hint < len)
		hint = 0;
	/* NORESERVE: a large, mostly untouched buffer costs no host memory. */
	p = mmap((void *)(uintptr_t)hint, len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

void *emu_pages(size_t len)
{
	return map_pages(len);
}

/* A green context's memory is its primary context's. */
#define OWNER(ctx) ((ctx)->mem_ctx ? (ctx)->mem_ctx : (ctx))

/* Index of the first allocation with base > p.  Caller holds mem_rw. */
static size_t upper_bound(const struct emu_ctx *ctx, uintptr_t p)
{
	size_t lo = 0, hi = ctx->nallocs;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (ctx->allocs[mid].base <= p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

void *emu_mem_map(struct emu_ctx *ctx, CUdeviceptr p, size_t len)
{
	ctx = OWNER(ctx);
	const struct emu_alloc *a;
	size_t i;

	if (len == 0)
		return (void *)(uintptr_t)p;
	i = upper_bound(ctx, (uintptr_t)p);
	if (i > 0) {
		a = &ctx->allocs[i - 1];
		if (p - a->base < a->size && len <= a->size - (p - a->base))
			return (void *)(uintptr_t)p;
	}
	return emu_vmm_ok(ctx->dev, (uintptr_t)p, len) || emu_host_mapped((uintptr_t)p, len) ||
			       emu_lib_managed((uintptr_t)p, len)
		       ? (void *)(uintptr_t)p
		       : NULL;
}

void emu_mem_rdlock(struct emu_ctx *ctx)
{
	ctx = OWNER(ctx);
	emu_rdlock(&ctx->mem_rw);
	emu_rdlock(&emu_vmm_rw);
}

void emu_mem_rdunlock(struct emu_ctx *ctx)
{
	ctx = OWNER(ctx);
	emu_rwunlock(&emu_vmm_rw);
	emu_rwunlock(&ctx->mem_rw);
}

CUresult emu_mem_alloc(struct emu_ctx *ctx, size_t size, int counted, CUdeviceptr *out)
{
	size_t ps = page_size(), maplen;
	struct emu_alloc *a;
	void *p;
	size_t i;

	ctx = OWNER(ctx);
	if (size == 0 || size > SIZE_MAX - ps)
		return size == 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
	maplen = (size + ps - 1) / ps * ps;
	if (counted) {
		emu_lock(&emu_glock);
		if (emu_pool_take(ctx->dev, size) != 0) {
			emu_unlock(&emu_glock);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		emu_unlock(&emu_glock);
	}
	p = map_pages(maplen);
	if (!p)
		goto fail;
	emu_wrlock(&ctx->mem_rw);
	if (ctx->nallocs == ctx->cap_allocs) {
		size_t cap = ctx->cap_allocs ? 2 * ctx->cap_allocs : 64;

		a = realloc(ctx->allocs, cap * sizeof *a);
		if (!a) {
			emu_rwunlock(&ctx->mem_rw);
			munmap(p, maplen);
			goto fail;
		}
		ctx->allocs = a;
		ctx->cap_allocs = cap;
	}
	i = upper_bound(ctx, (uintptr_t)p);
	memmove(&ctx->allocs[i + 1], &ctx->allocs[i], (ctx->nallocs - i) * sizeof *a);
	ctx->allocs[i] = (struct emu_alloc){ (uintptr_t)p, size, maplen, counted, 0 };
	ctx->nallocs++;
	if (counted)
		ctx->alloc_bytes += size;
	emu_rwunlock(&ctx->mem_rw);
	*out = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;

fail:
	if (counted) {
		emu_lock(&emu_glock);
		emu_pool_give(ctx->dev, size);
		emu_unlock(&emu_glock);
	}
	return CUDA_ERROR_OUT_OF_MEMORY;
}

static struct emu_alloc *alloc_at(struct emu_ctx *ctx, CUdeviceptr p)
{
	size_t i = upper_bound(ctx, (uintptr_t)p);
	return i && ctx->allocs[i - 1].base == p ? &ctx->allocs[i - 1] : NULL;
}

void emu_mem_set_graph(struct emu_ctx *ctx, CUdeviceptr p)
{
	ctx = OWNER(ctx);
	emu_wrlock(&ctx->mem_rw);
	struct emu_alloc *a = alloc_at(ctx, p);
	if (a)
		a->graph = 1;
	emu_rwunlock(&ctx->mem_rw);
}

int emu_mem_is_graph(struct emu_ctx *ctx, CUdeviceptr p)
{
	ctx = OWNER(ctx);
	emu_rdlock(&ctx->mem_rw);
	struct emu_alloc *a = alloc_at(ctx, p);
	int g = a && a->graph;
	emu_rwunlock(&ctx->mem_rw);
	return g;
}

CUresult emu_mem_free(struct emu_ctx *ctx, CUdeviceptr p)
{
	struct emu_alloc a;
	size_t i;

	ctx = OWNER(ctx);
	emu_wrlock(&ctx->mem_rw);
	i = upper_bound(ctx, (uintptr_t)p);
	if (i == 0 || ctx->allocs[i - 1].base != p) {
		emu_rwunlock(&ctx->mem_rw);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (ctx->allocs[i - 1].graph) {
		emu_rwunlock(&ctx->mem_rw);
		return CUDA_SUCCESS; /* (kept: see emu_mem_set_graph) */
	}
	a = ctx->allocs[i - 1];
	memmove(&ctx->allocs[i - 1], &ctx->allocs[i], (ctx->nallocs - i) * sizeof a);
	ctx->nallocs--;
	if (a.counted)
		ctx->alloc_bytes -= a.size;
	emu_rwunlock(&ctx->mem_rw);
	munmap((void *)a.base, a.maplen);
	if (a.counted) {
		emu_lock(&emu_glock);
		emu_pool_give(ctx->dev, a.size);
		emu_unlock(&emu_glock);
	}
	return CUDA_SUCCESS;
}

void emu_mem_free_all(struct emu_ctx *ctx)
{
	size_t counted = 0;

	if (ctx->mem_ctx)
		return; /* (the primary context's, freed with it) */
	emu_wrlock(&ctx->mem_rw);
	for (size_t i = 0; i < ctx->nallocs; i++) {
		munmap((void *)ctx->allocs[i].base, ctx->allocs[i].maplen);
		if (ctx->allocs[i].counted)
			counted += ctx->allocs[i].size;
	}
	ctx->nallocs = 0;
	ctx->alloc_bytes = 0;
	emu_rwunlock(&ctx->mem_rw);
	emu_lock(&emu_glock);
	emu_pool_give(ctx->dev, counted);
	emu_unlock(&emu_glock);
}

EMU_API CUresult CUDAAPI cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
	struct emu_ctx *ctx;
	size_t used;
	CUresult rc;

	if (!free_bytes || !total)
		return CUDA_ERROR_INVALID_VALUE;
	rc = emu_ctx_enter(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	emu_lock(&emu_glock);
	*total = emu_devices[ctx->dev].total;
	/* the whole device's pool: every process using it (pool.c) */
	used = emu_pool_used(ctx->dev);
	*free_bytes = used < *total ? *total - used : 0;
	emu_unlock(&emu_glock);
	emu_ctx_leave(ctx);
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	struct emu_ctx *ctx;
	CUresult rc;

	if (!dptr)
		return CUDA_ERROR_INVALID_VALUE;
	rc = emu_ctx_enter(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = emu_capture_unsafe();
	if (rc == CUDA_SUCCESS)
		rc = emu_mem_alloc(ctx, bytesize, 1, dptr);
	emu_ctx_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
	struct emu_ctx *ctx;
	CUresult rc = emu_ctx_enter(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (dptr == 0) {
		emu_ctx_leave(ctx);
		return CUDA_SUCCESS;
	}
	/* Like cuMemFree on a GPU, wait for queued work that may use it. */
	emu_lock(&ctx->lock);
	emu_ctx_wait_idle(ctx);
	emu_unlock(&ctx->lock);
	rc = emu_mem_free(ctx, dptr);
	emu_ctx_leave(ctx);
	/* a pool's block (cuMemAllocAsync) goes back to its pool, as in CUDA */
	if (rc == CUDA_ERROR_INVALID_VALUE && emu_pool_block_free(dptr) == 0)
		rc = CUDA_SUCCESS;
	return rc;
}

/* ---- page-locked host memory: plain page-aligned memory, tracked so a
 * bad pointer is an error and not a crash of the caller. */
struct host_range {
	struct host_range *next;
	void *p;
	size_t len;
	unsigned flags; /* registered: CU_MEMHOSTREGISTER_* */
};

static pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;
static struct host_range *host_blocks;

/* Takes the range at p out of list (host_blocks or host_regs): NULL if
 * none is there. */
static struct host_range *host_unlink(struct host_range **list, const void *p)
{
	struct host_range *r = NULL;

	emu_lock(&host_lock);
	for (struct host_range **pp = list; *pp; pp = &(*pp)->next)
		if ((*pp)->p == p) {
			r = *pp;
			*pp = r->next;
			break;
		}
	emu_unlock(&host_lock);
	return r;
}

EMU_API CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
	struct host_range *b;
	void *p;

	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pp || bytesize == 0 ||
	    (Flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
				 CU_MEMHOSTALLOC_WRITECOMBINED)))
		return CUDA_ERROR_INVALID_VALUE;
	if (emu_capture_unsafe() != CUDA_SUCCESS)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	b = malloc(sizeof *b);
	if (!b)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (posix_memalign(&p, page_size(), bytesize) != 0) {
		free(b);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	b->p = p;
	b->len = bytesize;
	emu_lock(&host_lock);
	b->next = host_blocks;
	host_blocks = b;
	emu_unlock(&host_lock);
	*pp = p;
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuMemFreeHost(void *p)
{
	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	struct host_range *b = host_unlink(&host_blocks, p);
	if (!b)
		return CUDA_ERROR_INVALID_VALUE;
	free(b->p);
	free(b);
	return CUDA_SUCCESS;
}

/* Registration pins nothing here: host memory is already what the
 * emulated device copies from.  Tracked so unregistering checks, and so
 * an asynchronous copy from registered memory reads it when it runs, as
 * a GPU's does (no staging copy: rgpud's swap restores copy gigabytes
 * from registered memory, and staging them doubled the work). */
static struct host_range *host_regs;

/* [p, p+n) lies in one registered range. */
static int host_registered(const void *p, size_t n)
{
	int in = 0;
	uintptr_t a = (uintptr_t)p;

	emu_lock(&host_lock);
	for (struct host_range *r = host_regs; r && !in; r = r->next)
		in = a >= (uintptr_t)r->p && n <= r->len && a - (uintptr_t)r->p <= r->len - n;
	emu_unlock(&host_lock);
	return in;
}

EMU_API CUresult CUDAAPI cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
	(void)Flags;
	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!p || !bytesize)
		return CUDA_ERROR_INVALID_VALUE;
	struct host_range *r = malloc(sizeof *r);
	if (!r)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r->p = p;
	r->len = bytesize;
	r->flags = Flags;
	emu_lock(&host_lock);
	for (struct host_range *x = host_regs; x; x = x->next)
		if (x->p == p) {
			emu_unlock(&host_lock);
			free(r);
			return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
		}
	r->next = host_regs;
	host_regs = r;
	emu_unlock(&host_lock);
	return CUDA_SUCCESS;
}

/* [p, p+n) lies in one range registered with a device mapping: under
 * unified addressing a kernel or memset reaches it at its host address. */
int emu_host_mapped(uintptr_t p, size_t n)
{
	int in = 0;
	emu_lock(&host_lock);
	for (struct host_range *r = host_regs; r && !in; r = r->next)
		in = (r->flags & CU_MEMHOSTREGISTER_DEVICEMAP) && p >= (uintptr_t)r->p &&
		     n <= r->len && p - (uintptr_t)r->p <= r->len - n;
	emu_unlock(&host_lock);
	return in;
}

EMU_API CUresult CUDAAPI cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pdptr || !p || Flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (!emu_host_mapped((uintptr_t)p, 1))
		return CUDA_ERROR_INVALID_VALUE;
	*pdptr = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuMemHostUnregister(void *p)
{
	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	struct host_range *r = host_unlink(&host_regs, p);
	if (!r)
		return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	free(r);
	return CUDA_SUCCESS;
}

/* ---- copies and memsets: checked when called, queued on a stream,
 * checked again when they run (the memory may have gone meanwhile). */

static int range_ok(struct emu_ctx *ctx, CUdeviceptr p, size_t len)
{
	int ok;

	emu_mem_rdlock(ctx);
	ok = emu_mem_map(ctx, p, len) != NULL;
	emu_mem_rdunlock(ctx);
	return ok;
}

CUresult emu_mem_exec(struct emu_ctx *ctx, struct emu_op *op)
{
	CUresult rc = CUDA_SUCCESS;
	unsigned char *d, *s;

	if (op->kind == EMU_OP_WRITE_VALUE || op->kind == EMU_OP_WAIT_VALUE)
		return emu_memop_exec(ctx, op);
	if (op->bytes == 0)
		return CUDA_SUCCESS;
	emu_mem_rdlock(ctx);
	switch (op->kind) {
	case EMU_OP_HTOD:
		d = emu_mem_map(ctx, op->dptr, op->bytes);
		if (d)
			memcpy(d, op->host, op->bytes);
		else
			rc = CUDA_ERROR_ILLEGAL_ADDRESS;
		break;
	case EMU_OP_DTOH:
		s = emu_mem_map(ctx, op->dsrc, op->bytes);
		if (s)
			memcpy(op->host, s, op->bytes);
		else
			rc = CUDA_ERROR_ILLEGAL_ADDRESS;
		break;
	case EMU_OP_DTOD:
		d = emu_mem_map(ctx, op->dptr, op->bytes);
		s = emu_mem_map(ctx, op->dsrc, op->bytes);
		if (d && s)
			memmove(d, s, op->bytes);
		else
			rc = CUDA_ERROR_ILLEGAL_ADDRESS;
		break;
	case EMU_OP_MEMSET:
		d = emu_mem_map(ctx, op->dptr, op->bytes);
		if (!d)
			rc = CUDA_ERROR_ILLEGAL_ADDRESS;
		else if (op->elem == 1)
			memset(d, (int)op->value, op->count);
		else if (op->elem == 2)
			for (size_t i = 0; i < op->count; i++)
				((uint16_t *)(void *)d)[i] = (uint16_t)op->value;
		else
			for (size_t i = 0; i < op->count; i++)
				((uint32_t *)(void *)d)[i] = op->value;
		break;
	default:
		rc = CUDA_ERROR_UNKNOWN;
		break;
	}
	emu_mem_rdunlock(ctx);
	return rc;
}

/* Queues op on hStream (sync: on the NULL stream, then waits for it). */
static CUresult submit(struct emu_ctx *ctx, CUstream hStream, struct emu_op *op, int sync)
{
	struct emu_stream *s;
	uint64_t seq;
	CUresult rc;

	emu_lock(&ctx->lock);
	s = emu_stream_find(ctx, sync ? NULL : hStream);
	if (!s) {
		emu_unlock(&ctx->lock);
		emu_op_free(ctx, op);
		return CUDA_ERROR_INVALID_HANDLE;
	}
	rc = emu_stream_enqueue(ctx, s, op);
	if (rc == CUDA_SUCCESS && sync) {
		seq = s->enq_seq;
		emu_stream_wait_seq(ctx, s, seq);
		rc = (CUresult)emu_ctx_sticky(ctx);
	}
	emu_unlock(&ctx->lock);
	return rc;
}

/* The stream is one ctx handed out (checked first, even for an empty
 * operation: the driver looks at the stream before the sizes). */
static int stream_valid(struct emu_ctx *ctx, CUstream hStream)
{
	int ok;

	emu_lock(&ctx->lock);
	ok = emu_stream_find(ctx, hStream) != NULL;
	emu_unlock(&ctx->lock);
	return ok;
}

static CUresult copy(CUdeviceptr dst, CUdeviceptr src, void *host, const void *chost,
		     size_t n, enum emu_op_kind kind, CUstream hStream, int sync)
{
	struct emu_ctx *ctx;
	struct emu_op *op;
	CUresult rc = emu_ctx_enter(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!sync && !stream_valid(ctx, hStream)) {
		emu_ctx_leave(ctx);
		return CUDA_ERROR_INVALID_HANDLE;
	}
	if (n == 0) {
		emu_ctx_leave(ctx);
		return CUDA_SUCCESS;
	}
	if ((kind != EMU_OP_DTOH && !range_ok(ctx, dst, n)) ||
	    (kind != EMU_OP_HTOD && !range_ok(ctx, src, n)) ||
	    (kind == EMU_OP_HTOD && !chost) || (kind == EMU_OP_DTOH && !host)) {
		emu_ctx_leave(ctx);
		return CUDA_ERROR_INVALID_VALUE;
	}
	op = calloc(1, sizeof *op);
	if (!op) {
		emu_ctx_leave(ctx);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	op->kind = kind;
	op->dptr = dst;
	op->dsrc = src;
	op->bytes = n;
	if (kind == EMU_OP_HTOD && !sync && !host_registered(chost, n)) {
		/* Pageable-memory semantics: the caller may reuse its buffer
		 * as soon as we return. */
		op->host = malloc(n);
		if (!op->host) {
			free(op);
			emu_ctx_leave(ctx);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		memcpy(op->host, chost, n);
		op->host_owned = 1;
	} else {
		op->host = kind == EMU_OP_HTOD ? (void *)(uintptr_t)chost : host;
	}
	rc = submit(ctx, hStream, op, sync);
	emu_ctx_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
	return copy(dstDevice, 0, NULL, srcHost, ByteCount, EMU_OP_HTOD, NULL, 1);
}

EMU_API CUresult CUDAAPI cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
	return copy(0, srcDevice, dstHost, NULL, ByteCount, EMU_OP_DTOH, NULL, 1);
}

EMU_API CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
	return copy(dstDevice, srcDevice, NULL, NULL, ByteCount, EMU_OP_DTOD, NULL, 1);
}

EMU_API CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
					      CUstream hStream)
{
	return copy(dstDevice, 0, NULL, srcHost, ByteCount, EMU_OP_HTOD, hStream, 0);
}

EMU_API CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
					      CUstream hStream)
{
	return copy(0, srcDevice, dstHost, NULL, ByteCount, EMU_OP_DTOH, hStream, 0);
}

EMU_API CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
					      CUstream hStream)
{
	return copy(dstDevice, srcDevice, NULL, NULL, ByteCount, EMU_OP_DTOD, hStream, 0);
}

static CUresult memset_n(CUdeviceptr dst, uint32_t value, unsigned elem, size_t count, CUstream hStream, int sync)
{
	struct emu_ctx *ctx;
	struct emu_op *op;
	CUresult rc = emu_ctx_enter(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (!sync && !stream_valid(ctx, hStream)) {
		emu_ctx_leave(ctx);
		return CUDA_ERROR_INVALID_HANDLE;
	}
	if (count == 0) {
		emu_ctx_leave(ctx);
		return CUDA_SUCCESS;
	}
	if (dst % elem != 0 || count > SIZE_MAX / elem || !range_ok(ctx, dst, count * elem)) {
		emu_ctx_leave(ctx);
		return CUDA_ERROR_INVALID_VALUE;
	}
	op = calloc(1, sizeof *op);
	if (!op) {
		emu_ctx_leave(ctx);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	op->kind = EMU_OP_MEMSET;
	op->dptr = dst;
	op->elem = elem;
	op->value = value;
	op->count = count;
	op->bytes = count * elem;
	rc = submit(ctx, hStream, op, sync);
	emu_ctx_leave(ctx);
	return rc;
}

CUresult emu_mem_queue(CUstream hStream, struct emu_op *op, size_t len)
{
	struct emu_ctx *ctx;
	CUresult rc = emu_ctx_enter(&ctx);

	if (rc != CUDA_SUCCESS) {
		free(op);
		return rc;
	}
	if (!stream_valid(ctx, hStream))
		rc = CUDA_ERROR_INVALID_HANDLE;
	else if (!range_ok(ctx, op->dptr, len))
		rc = CUDA_ERROR_INVALID_VALUE;
	if (rc != CUDA_SUCCESS) {
		free(op);
		emu_ctx_leave(ctx);
		return rc;
	}
	rc = submit(ctx, hStream, op, 0);
	emu_ctx_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
	return memset_n(dstDevice, uc, 1, N, NULL, 1);
}

EMU_API CUresult CUDAAPI cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
	return memset_n(dstDevice, us, 2, N, NULL, 1);
}

EMU_API CUresult CUDAAPI cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
	return memset_n(dstDevice, ui, 4, N, NULL, 1);
}

EMU_API CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
	return memset_n(dstDevice, uc, 1, N, hStream, 0);
}

EMU_API CUresult CUDAAPI cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream)
{
	return memset_n(dstDevice, us, 2, N, hStream, 0);
}

EMU_API CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
	return memset_n(dstDevice, ui, 4, N, hStream, 0);
}
