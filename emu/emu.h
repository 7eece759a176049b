/*
 * Internal header of the emulated CUDA device (librgpu-emu).
 *
 * A test and demo device: device memory is host RAM, kernels are the host
 * implementations in kernels.c of the test kernels in test/kernels/.
 *
 * Locking (always taken in this order, never the reverse):
 *   emu_glock      init state, device table (bytes in use), context list and
 *                  context references
 *   emu_lib_lock   the global list of libraries (module.c); held while an
 *                  instance of a library is added to a context, so it is
 *                  taken before ctx->lock and never together with emu_glock
 *   ctx->lock      streams, queued operations, events, modules (and library
 *                  instances) of a context
 *                  (ctx->cond is broadcast on every change of that state)
 *   ctx->mem_rw    the context's allocation table; read-held while a copy,
 *                  memset or kernel touches device memory, write-held while
 *                  the table changes
 *   emu_vmm_rw     the VMM tables of vmm.c (handles, reservations, mappings);
 *                  read-held with ctx->mem_rw (emu_mem_rdlock) by every
 *                  access to device memory; never held with emu_glock
 */
#ifndef RGPU_EMU_H
#define RGPU_EMU_H

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define EMU_API __attribute__((visibility("default")))

/* Test hook (memory.c): the next device or globals mapping this thread
 * makes goes exactly at addr, or fails.  rgpud's migration uses it to
 * re-create a session's memory and module globals at their addresses. */
EMU_API CUresult CUDAAPI cuRgpuEmuPlaceNext(CUdeviceptr addr);

struct emu_ctx;
struct emu_module;
struct emu_kernel;
struct emu_op;

#define EMU_DEFAULT_DEVICES 2
#define EMU_MAX_DEVICES 16
#define EMU_DEFAULT_MEM (16ULL << 30)
/* Device memory a context costs on creation (a real context costs about
 * this much for its heaps and stacks); keeps cuMemGetInfo honest. */
#define EMU_CTX_OVERHEAD (64ULL << 20)

/* ---- device.c */
struct emu_device {
	size_t total;
	size_t used;     /* allocations + per-context overhead, all contexts of
			  * this process (the device's pool: pool.c) */
};

extern pthread_mutex_t emu_glock;
extern int emu_ndevices;                   /* 0 until cuInit succeeded */
extern struct emu_device emu_devices[EMU_MAX_DEVICES];

int emu_initialized(void);
/* Locking wrappers: a failing pthread call on a valid object is a bug, so
 * they abort rather than let the caller run unprotected. */
void emu_lock(pthread_mutex_t *m);
void emu_unlock(pthread_mutex_t *m);
void emu_wait(pthread_cond_t *c, pthread_mutex_t *m);
void emu_broadcast(pthread_cond_t *c);
void emu_rdlock(pthread_rwlock_t *l);
void emu_wrlock(pthread_rwlock_t *l);
void emu_rwunlock(pthread_rwlock_t *l);
uint64_t emu_now_ns(void);

/* Time on the device (devclock.c): RGPU_EMU_KERNEL_NS, RGPU_EMU_CLOCK. */
int emu_devclock_check(void);          /* 0, or -1: a bad setting */
int emu_devclock_shared(void);         /* a clock shared between processes */
uint64_t emu_devclock_kernel_ns(void); /* what every kernel takes */
/* Occupies device dev for ns (waiting for it first when shared). */
void emu_devclock_run(int dev, uint64_t ns);
/* The time an event recorded now is stamped with (after_kernel: it
 * follows a kernel of its stream directly). */
uint64_t emu_devclock_stamp(int dev, int after_kernel);
/* ---- pool.c: the device's memory shared by every process using it.
 * Callers hold emu_glock.  take: 0, or -1 when n does not fit. */
int emu_pool_init(int ndev, size_t total);
int emu_pool_take(int dev, size_t n);
void emu_pool_give(int dev, size_t n);
size_t emu_pool_used(int dev);

/* ---- memory.c */
struct emu_alloc {
	uintptr_t base;
	size_t size;     /* bytes the caller asked for: the bounds */
	size_t maplen;   /* bytes mapped */
	int counted;     /* counts towards the device's used memory */
	int graph;       /* a graph alloc node's: the context's until it goes */
};

/* Allocates device memory in ctx (takes mem_rw for writing). */
CUresult emu_mem_alloc(struct emu_ctx *ctx, size_t size, int counted, CUdeviceptr *out);
CUresult emu_mem_free(struct emu_ctx *ctx, CUdeviceptr p);
/* Marks the allocation at p a graph's (emu_mem_free then keeps it: graph
 * memory freed outside its graph comes back at the graph's next launch,
 * at the same address); whether p is such memory. */
void emu_mem_set_graph(struct emu_ctx *ctx, CUdeviceptr p);
/* appmem.c: a pool's block at p, in use, back to its pool: 0, or -1 when
 * p is none (cuMemFree of stream-ordered memory). */
int emu_pool_block_free(CUdeviceptr p);
int emu_mem_is_graph(struct emu_ctx *ctx, CUdeviceptr p);
void emu_mem_free_all(struct emu_ctx *ctx);
/* array.c: a context's CUDA arrays go with it, as the driver's do */
void emu_arrays_destroy_all(struct emu_ctx *ctx);
/* [p, p+n) lies in host memory registered with a device mapping. */
int emu_host_mapped(uintptr_t p, size_t n);
/* memory.c: len bytes of zeroed pages where device memory goes (NULL:
 * none), for memory of no context; munmap() frees them */
void *emu_pages(size_t len);
/* module.c: [p, p+n) lies in a library's or a module's managed variables
 * (a page each: every context's kernels and copies reach it) */
int emu_lib_managed(uintptr_t p, size_t n);
/* Host address of [p, p+len) if it lies inside one allocation of ctx, in
 * VMM memory accessible from ctx's device, or in host memory registered
 * with a device mapping, else NULL.  Caller holds
 * emu_mem_rdlock(ctx).  len 0 is always valid. */
void *emu_mem_map(struct emu_ctx *ctx, CUdeviceptr p, size_t len);
/* Read-holds ctx->mem_rw and emu_vmm_rw: what emu_mem_map needs. */
void emu_mem_rdlock(struct emu_ctx *ctx);
void emu_mem_rdunlock(struct emu_ctx *ctx);
/* Runs a queued copy or memset (stream worker, no lock held). */
CUresult emu_mem_exec(struct emu_ctx *ctx, struct emu_op *op);
/* Queues op, whose dptr must reach len bytes, on hStream; op is taken
 * (freed on failure). */
CUresult emu_mem_queue(CUstream hStream, struct emu_op *op, size_t len);
/* memops.c: a queued write or wait on a device word (as emu_mem_exec) */
CUresult emu_memop_exec(struct emu_ctx *ctx, struct emu_op *op);
/* a batch (cuStreamBatchMemOp, graph batch nodes): checked, then queued */
CUresult emu_memop_batch_check(const CUstreamBatchMemOpParams *ops, unsigned count, unsigned flags);
CUresult emu_memop_batch(CUstream s, unsigned count, const CUstreamBatchMemOpParams *ops, unsigned flags);

/* ---- vmm.c */
#define EMU_VMM_GRANULARITY (2ULL << 20)
extern pthread_rwlock_t emu_vmm_rw;
/* [p, p+len) is mapped VMM memory accessible from device dev (caller
 * read-holds emu_vmm_rw). */
int emu_vmm_ok(int dev, uintptr_t p, size_t len);

/* ---- stream.c */
enum emu_op_kind {
	EMU_OP_HTOD,        /* host bytes -> device (src owned or borrowed) */
	EMU_OP_DTOH,
	EMU_OP_DTOD,
	EMU_OP_MEMSET,
	EMU_OP_LAUNCH,
	EMU_OP_RECORD,
	EMU_OP_WAIT,
	EMU_OP_HOST,        /* a host function (graph.c) */
	EMU_OP_WRITE_VALUE, /* stream memory operations (memops.c) */
	EMU_OP_WAIT_VALUE,
};

struct emu_dep {
	uint64_t stream_id;
	uint64_t seq;
};

struct emu_event;
struct emu_launch;

struct emu_op {
	struct emu_op *next;
	enum emu_op_kind kind;
	uint64_t seq;
	/* ops this one must wait for (legacy NULL stream semantics) */
	struct emu_dep *deps;
	int ndeps;
	/* copies and memsets */
	CUdeviceptr dptr, dsrc;
	void *host;
	int host_owned;
	size_t bytes;
	unsigned elem;       /* memset element size: 1, 2 or 4 */
	uint32_t value;
	size_t count;        /* memset elements */
	uint64_t value64;    /* memops: the value, its flags (elem: 4 or 8) */
	unsigned memop_flags;
	/* launches */
	struct emu_launch *launch;
	/* events */
	struct emu_event *event;
	uint64_t gen;
	/* host functions: run by the worker, no lock held */
	CUhostFn hostfn;
	void *hostdata;
};

struct emu_stream {
	struct emu_stream *next;
	struct emu_ctx *ctx;
	uint64_t id;          /* unique, never reused: deps name streams by id */
	unsigned flags;
	int priority;
	int is_null;
	struct emu_op *head, *tail;
	uint64_t enq_seq, done_seq;
	int quit;
	int after_kernel;     /* the last op it ran was a kernel (devclock.c) */
	pthread_t thread;
};

struct emu_event {
	struct emu_event *next;
	struct emu_ctx *ctx;
	unsigned flags;
	int refs;             /* the handle + queued ops naming it */
	int destroyed;
	uint64_t recorded;    /* generation of the latest cuEventRecord */
	uint64_t completed;   /* highest generation the stream reached */
	uint64_t ts_ns;       /* CLOCK_MONOTONIC time of `recorded` */
	uint64_t ts_gen;      /* generation ts_ns belongs to */
	uint64_t cap_id;      /* its last record went into this capture (0: none) */
	void *cap_last;       /* ... after this node of its graph */
	struct emu_ipc_ev *ipc; /* exported or opened: shared generations (ipcevent.c) */
	int ipc_opened;
	char ipc_name[48];
};

/* ipcevent.c: an interprocess event's generations to and from the shared
 * object (no-ops for other events; caller holds the context's lock), a
 * short sleep with the lock released (waits on such events poll), and the
 * object let go when the event is freed. */
void emu_ipc_push(struct emu_event *ev);
void emu_ipc_pull(struct emu_event *ev);
void emu_ipc_nap(pthread_mutex_t *m);
void emu_ipc_free(struct emu_event *ev);
/* Event h of the current context, its context entered and locked. */
CUresult emu_event_enter(CUevent h, struct emu_ctx **ctx, struct emu_event **ev);

CUresult emu_stream_start(struct emu_ctx *ctx, struct emu_stream *s);
/* Finds a stream of ctx (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD = the
 * NULL stream).  Caller holds ctx->lock. */
struct emu_stream *emu_stream_find(struct emu_ctx *ctx, CUstream h);
/* Stream h of the current context, which is entered and locked as by
 * emu_ctx_enter_locked; CUDA_ERROR_INVALID_HANDLE, and nothing held, if
 * the context has no such stream. */
CUresult emu_stream_enter(CUstream h, struct emu_ctx **ctx, struct emu_stream **s);
/* Queues op on s (caller holds ctx->lock); takes ownership of op. */
CUresult emu_stream_enqueue(struct emu_ctx *ctx, struct emu_stream *s, struct emu_op *op);
/* Waits (ctx->lock held) until s has completed seq. */
void emu_stream_wait_seq(struct emu_ctx *ctx, struct emu_stream *s, uint64_t seq);
/* Waits (ctx->lock held) until every stream of ctx is idle. */
void emu_ctx_wait_idle(struct emu_ctx *ctx);
/* Stops and frees every stream and event of ctx (ctx->lock not held). */
void emu_streams_destroy_all(struct emu_ctx *ctx);
void emu_op_free(struct emu_ctx *ctx, struct emu_op *op);
void emu_event_unref(struct emu_ctx *ctx, struct emu_event *ev);

/* ---- graph.c: while s is capturing, op becomes a node of the capture's
 * graph (taken, *rc the result) and 1 is returned; else 0.  Caller holds
 * ctx->lock (graph.c's lock comes after it). */
int emu_capture_take(struct emu_stream *s, struct emu_op *op, CUresult *rc);
/* cuStreamWaitEvent(s, ev): if ev's last record went into a capture that
 * goes on and s captures nothing, s joins it (its work becomes nodes of
 * the same graph, after the record) and 1 is returned; caller holds
 * ctx->lock. */
int emu_capture_join(struct emu_stream *s, struct emu_event *ev);
/* Work on the legacy stream of ctx, which synchronises with its blocking
 * streams: 1 if one of those is capturing (as in CUDA, the captures are
 * invalidated and the work refused with CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
 * caller holds ctx->lock. */
int emu_capture_implicit(struct emu_ctx *ctx);
/* A call on the whole of ctx (cuCtxRecordEvent, cuCtxWaitEvent): 1 if a
 * stream of ctx is capturing (those captures are invalidated, as in CUDA);
 * caller holds ctx->lock. */
int emu_capture_in_ctx(struct emu_ctx *ctx);
/* A potentially unsafe call (an allocation) is about to run: its status
 * under the captures going on (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, the
 * captures it disturbs invalidated, or CUDA_SUCCESS). */
CUresult emu_capture_unsafe(void);
/* cuMemAllocAsync (bytes > 0: *dptr gets the address) or cuMemFreeAsync
 * (bytes 0, *dptr the address) on stream h: while h captures, a memory
 * alloc or free node of the capture's graph; returns 1 then (*rc the
 * result), else 0.  No lock held by the caller. */
int emu_capture_mem(CUstream h, size_t bytes, CUdeviceptr *dptr, CUresult *rc);

/* ---- attr.c: a destroyed stream's attributes go */
void emu_attr_forget(CUstream h);

/* ---- kernels.c */
struct emu_kparam {
	size_t offset, size;
};

struct emu_launch {
	struct emu_ctx *ctx;
	unsigned grid[3], block[3];
	CUdeviceptr globals;        /* the module's g_scale (+0), g_counter (+4) */
	unsigned char *args;        /* the parameter buffer, kernel ABI layout */
	const struct emu_kernel *kernel;
};

struct emu_kernel {
	const char *name;
	int nparams;
	struct emu_kparam params[4];
	size_t argsize;             /* end of the last parameter */
	int shared_bytes;           /* static shared memory */
	int touches_memory;         /* 0: runs without mem_rw held */
	CUresult (*run)(const struct emu_launch *l);
};

extern const struct emu_kernel emu_kernels[];
extern const int emu_nkernels;
#define EMU_NKERNELS 11
const struct emu_kernel *emu_kernel_find(const char *name, int *index);

/* ---- module.c */
struct emu_func {
	struct emu_module *mod;
	const struct emu_kernel *kernel;
	int max_dyn_shared;
	int carveout;
	int cache_config;
	int attr_cluster[6];        /* cluster attributes 10..15, remembered */
};

/* A module (cuModuleLoadData), or the instance of a library in one
 * context (lib != NULL).  Both live in ctx->modules. */
struct emu_library;
struct emu_module {
	struct emu_module *next;
	const struct emu_library *lib;  /* the library it instantiates, or NULL */
	CUdeviceptr globals;        /* 8 bytes: g_scale, g_counter */
	/* g_managed, a __managed__ int (TEST_MANAGED_INIT at load): a slot of
	 * a page shared with other modules' (module.c), which every context
	 * reaches, as the library's */
	void *managed;
	struct emu_func funcs[EMU_NKERNELS];
};

/* Runs a queued launch (stream worker, no lock held). */
CUresult emu_launch_exec(struct emu_launch *l);
void emu_launch_free(struct emu_launch *l);
/* Frees every module of ctx (ctx->lock not held; ctx is being destroyed). */
void emu_modules_destroy_all(struct emu_ctx *ctx);

/* ---- context.c */
struct emu_ctx {
	struct emu_ctx *next;       /* emu_glock: list of live contexts */
	uint64_t id;
	int dev;
	int refs;                   /* emu_glock: callers inside an API call */
	int dying;
	int sticky;                 /* atomic: CUresult every call now returns */
	size_t limits[CU_LIMIT_MAX];

	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct emu_stream *null_stream;
	struct emu_stream *streams; /* created streams (not the NULL one) */
	struct emu_event *events;
	struct emu_module *modules;
	uint64_t next_stream_id;
	/* cuCtxRecordEvent's records run on a stream of their own (made on
	 * first use, non-blocking, after every stream's work); cuCtxWaitEvent's
	 * waits are kept for streams made later (stream.c) */
	struct emu_stream *ctx_stream;
	struct emu_cwait {
		struct emu_event *ev;
		uint64_t gen;
		uint64_t first_stream; /* streams from this id on wait */
	} *cwaits;
	int ncwaits, capcwaits;

	/* a green context (green.c): its SMs, its handle, and the device's
	 * primary context, retained, whose memory it uses (memory.c) */
	unsigned green_sms;
	void *green;
	struct emu_ctx *mem_ctx;

	pthread_rwlock_t mem_rw;
	struct emu_alloc *allocs;   /* sorted by base */
	size_t nallocs, cap_allocs;
	size_t alloc_bytes;         /* counted bytes */
};

/* Acquires the calling thread's current context: checks cuInit, a current
 * context, and its sticky error.  On success the context stays alive until
 * emu_ctx_leave(). */
CUresult emu_ctx_enter(struct emu_ctx **out);
void emu_ctx_leave(struct emu_ctx *ctx);
/* emu_ctx_enter, then the context's lock, which most calls look their
 * objects up under; emu_ctx_unlock_leave undoes both. */
CUresult emu_ctx_enter_locked(struct emu_ctx **out);
void emu_ctx_unlock_leave(struct emu_ctx *ctx);
/* For lookups after emu_ctx_enter_locked: CUDA_SUCCESS with obj found,
 * else CUDA_ERROR_INVALID_HANDLE with the context left. */
CUresult emu_ctx_found(struct emu_ctx *ctx, const void *obj);
/* Holds every live context, faulted or not, as emu_ctx_enter does (release
 * each with emu_ctx_leave): a malloc()ed array in *out, *n entries. */
CUresult emu_ctx_hold_all(struct emu_ctx ***out, size_t *n);
int emu_ctx_sticky(struct emu_ctx *ctx);
/* The calling thread's current context as set (not checked for liveness). */
CUcontext emu_ctx_current_handle(void);
/* green.c: a context of device dev for green context g (sms SMs), made
 * without becoming current, using the primary context's memory (retained
 * until emu_ctx_end_green) */
CUresult emu_ctx_make_green(CUdevice dev, unsigned sms, void *g, struct emu_ctx **out);
CUresult emu_ctx_end_green(struct emu_ctx *ctx);
/* A live context's device and SMs (its green partition's, else all). */
CUresult emu_ctx_sms(CUcontext h, int *dev, unsigned *sms);
void emu_ctx_fault(struct emu_ctx *ctx, CUresult err);

/* Exported under cuda.h's old name too; declared here as cuda.h only
 * declares it through a macro that __CUDA_API_VERSION_INTERNAL removes. */
CUresult CUDAAPI cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd);

#endif
