/*
 * A session: everything one client connection owns on this server (its
 * contexts, modules, memory, streams, events), served by one thread.  The
 * session is the unit that is freed when the client goes away, and later the
 * unit that is swapped, migrated or replayed.
 */
#ifndef RGPUD_SESSION_H
#define RGPUD_SESSION_H

#include "access.h"
#include "driver.h"
#include "frame.h"
#include "handles.h"
#include "shm.h"
#include "stage.h"
#include "waiter.h"
#include "wire.h"

#include <pthread.h>
#include <sys/types.h>
#include <stdint.h>

#define RGPUD_MAX_GPUS 64

struct rgpud;
struct vmem;
struct appmem;
struct mem_state;
struct journal;
struct move;
struct opstats;
struct memif_run;

/* Limits that are device memory (cuCtxSetLimit): their cost above the
 * value a new context has is charged to the quota. */
enum { LIM_HEAP, LIM_STACK, LIM_PRINTF, LIM_N };

/* extra data of an HK_CTX entry */
struct ctx_state {
	unsigned dev;
	uint64_t cost;              /* charged for the context (gate_ctx_cost) */
	uint64_t resident_threads;  /* SMs x threads per SM: stack copies */
	uint32_t sms;               /* the GPU's multiprocessors */
	uint64_t lim_base[LIM_N];   /* bytes at creation (in the context's cost) */
	uint64_t lim_charged[LIM_N]; /* bytes charged above lim_base */
	int primary;                /* the device's primary context (retained) */
	void *green;                /* CUgreenCtx whose conversion this is (cuGreenCtxDestroy ends it) */
};

/* extra data of an HK_FUNC / HK_KERNEL entry: the parameter layout */
struct param_layout {
	uint32_t n;
	uint32_t total; /* bytes spanned: max(offset + size) */
	/* the driver's occupancy for the last block shape launched (blocks
	 * per SM; the scheduler's demand under MPS, ops_exec.c) */
	uint32_t occ_tpb, occ_smem, occ_blocks;
	uint32_t off[];  /* n offsets, then n sizes */
};
#define LAYOUT_SIZE(l, i) ((l)->off[(l)->n + (i)])

struct alloc {
	uint64_t dptr, size;
	uint64_t ctx;
	uint64_t module; /* 0: cuMemAlloc'd (charged to the quota); else the
			  * module or library whose global this is */
	unsigned dev;
};

struct texobj {
	uint64_t v, ctx; /* the driver's value; its context's handle */
	int surf;
};

struct session {
	struct rgpud *srv;
	struct rgpu_conn *conn;
	struct rgpud_principal who;
	char name[160]; /* for logs: peer, uid, job */
	int hello_done;

	struct htable ht;
	uint64_t cur_ctx; /* context handle current on this thread */
	uint64_t primary_held; /* devices whose primary context a context is */

	struct alloc *allocs; /* sorted by dptr */
	size_t nalloc, capalloc;
	/* addresses graph alloc nodes gave: their graphs' launches allocate
	 * the memory, which cuMemFree may free after the graph is gone */
	uint64_t *gmem;
	size_t ngmem, capgmem;

	/* GPUs this session was admitted to, and their quota */
	uint64_t dev_admitted; /* bit mask */

	struct xfer_pool pool;  /* pinned staging for bulk copies (stage.c) */
	struct shm_state *shm;  /* same-host sessions: shared memory */
	struct vmem *vmem;      /* fixed-address device memory (ops_vmem.c) */
	struct mem_state *mem;  /* movable device memory (mem/mem.h) */
	uint64_t vmem_window;   /* its reserved address range, once reserved */
	uint32_t range_hint;    /* which of its client's servers this is (CTX_CREATE) */
	struct appmem *appmem;  /* application VMM and pools (appmem.h) */
	struct hostfn *hostfn;  /* client host functions (ops_hostfn.c) */
	struct texobj *tex;     /* texture and surface objects (ops_array.c) */
	size_t ntex, textcap;

	uint8_t *rx;    /* the current request's payload */
	size_t rxcap;
	uint8_t *in;    /* bytes received, not yet consumed */
	uint8_t *params; /* a launch's arguments, 128-byte aligned (ops_exec.c) */
	size_t in_off, in_len;
	struct wbuf tx;
	int32_t deferred; /* first failure of a no-reply request */
	int pools_sync_due; /* a sync the waiter answered: the pools release (mem/pool.h) */
	int ipc_events;     /* events exported to other processes (ops_ipc.c) */
	int out_fd;       /* worker: read end of its stdout (device printf), or -1 */
	struct devout *out; /* its reader (devout.h), once started */
	struct waiters *waiters; /* synchronising calls in progress (waiter.h) */
	pthread_mutex_t send_lock; /* one sender at a time: main loop or a waiter */
	int prepared;     /* session_prepare done */
	int mem_err;      /* the memory manager refused the current request */

	/* migration and recovery (daemon/migrate/) */
	struct journal *journal;       /* requests that made the live objects */
	/* stream captures begun and not ended; the capture (its driver id)
	 * the current request's stream is in, if any: graphs are made again
	 * by replaying what built them (journal.c) */
	unsigned captures;
	uint64_t req_capture;
	struct memif_run *memif_runs;  /* memory re-created at fixed addresses */
	int mig_fd;                    /* the migration channel (parent and worker ends); <= 0: none */
	struct move *move;             /* a move whose objects went ahead (migrate/out.c) */
	struct opstats *opstats;       /* RGPUD_OP_STATS (opstats.h), or NULL */
	unsigned spin_us;              /* RGPUD_SPIN_US (shared-memory queues; a socket after a sync) */
	unsigned burst_spin_us;        /* RGPUD_BURST_SPIN_US (a socket, within a burst) */
	int spin_next;                 /* a sync (1) or a call without reply (2) was just served */
	uint64_t last_id;              /* id of the last request served */
	int attach;                    /* parent: HELLO named a moved session */
	uint8_t attach_token[16];

	pthread_t thread;
	pid_t worker;   /* parent side: the worker process serving it */
	struct session *next, *prev;
	volatile int ended;
};

/* Handler result: a status to send, or one of these. */
#define OP_DROP    (-1) /* malformed: drop the connection */
#define OP_REPLIED (-2) /* the handler sent its own reply frames */

typedef int (*op_fn)(struct session *s, const struct rgpu_hdr *h, struct rd *r,
		     struct wbuf *out);

struct op_desc {
	op_fn fn;
	/* 0: the whole payload is read before the call.  Otherwise only this
	 * many bytes are; the handler reads the rest (bulk data) itself. */
	uint32_t prefix;
	int needs_hello;
	unsigned flags; /* OPF_* */
};

/* Success creates a resource: its reply is never replaced by a deferred
 * error (the client would not learn of the resource). */
#define OPF_CREATES 1u
/* Destroys or replaces what a pending wait may use: runs after every
 * pending synchronising call has been answered. */
#define OPF_DRAINS 2u
/* Answers when the GPU is done with queued work (a synchronize, a
 * device-to-host copy): over a socket the client's next launches usually
 * follow at once (session.c spins for them). */
#define OPF_WAITS_GPU 4u

/* The table lives in dispatch.c; ops_*.c define the handlers. */
const struct op_desc *rgpud_op(unsigned op);

/* Starts what a session needs besides its fields (send lock, output
 * reader); idempotent, called by session_run and session_serve_one. */
void session_prepare(struct session *s);
/* RGPUD_SPIN_US in microseconds (ops_transport.c; a bad value is logged
 * under name and the default used). */
unsigned server_spin_us(const char *name);
#define RGPUD_BURST_SPIN_DEFAULT 30
unsigned server_burst_spin_us(const char *name);
/* Reads and serves one request: 0, or -1 when the session is over. */
int session_serve_one(struct session *s);
/* Worker: serves the session until the client leaves, then frees all. */
void session_run(struct session *s);
/* Ends every session of a job (lease released or expired): their
 * connections are shut down and their threads free everything. */
void rgpud_sessions_end_job(uint64_t job_id);

/*
 * The one prologue of a request handler.  The handler reads the leading
 * handles with req_ids() and its other fields with the wire getters, then
 * calls req_enter(), which
 *   - drops a request that is incomplete or too long (OP_DROP),
 *   - makes the context current (CUDA_ERROR_INVALID_CONTEXT), and
 *   - with kind != HK_FREE, looks up the object the second handle names:
 *     a live one of that kind, owned by the context (libraries and their
 *     kernels belong to no context) (CUDA_ERROR_INVALID_HANDLE).
 * req_obj() looks up a further object of the same context; req_stream()
 * resolves a stream handle.
 */
struct req {
	uint64_t ctx, id;     /* the leading handles (id: 0 when not read) */
	struct ctx_state *cs; /* the context's state, after req_enter */
	struct hentry *e;     /* the object, after req_enter with a kind */
};
enum { REQ_CTX = 1, REQ_CTX_OBJ = 2, REQ_OBJ = 3 };
/* REQ_CTX: "handle ctx"; REQ_CTX_OBJ: "handle ctx, handle obj"; REQ_OBJ:
 * "handle obj" (context-free objects: libraries, kernels) */
void req_ids(struct rd *r, struct req *q, int shape);
int req_enter(struct session *s, struct rd *r, struct req *q, enum hkind kind);
struct hentry *req_obj(struct session *s, const struct req *q, uint64_t id, enum hkind kind);
int req_stream(struct session *s, uint64_t id, CUstream *out);
/* The driver's handle of the current context (after req_enter). */
void *session_ctx_obj(struct session *s);

/* helpers for handlers (session.c) */
/* Makes ctx current; fills *cs.  Returns a CUresult. */
int session_enter_ctx(struct session *s, uint64_t ctx, struct ctx_state **cs);
/* Answers synchronising request h from a waiter thread (waiter.h) once the
 * wait in driver context ctx is over; 0, or -1: wait here instead. */
int session_wait_elsewhere(struct session *s, const struct rgpu_hdr *h, enum wait_kind kind,
			   void *ctx, void *obj);
/* Resolves a stream handle (0 = NULL stream) in the current context. */
int session_stream(struct session *s, uint64_t id, CUstream *out);
/* The driver's id of the capture stream st is part of; 0: none (1 when
 * the driver says capturing but has no ids). */
uint64_t session_capture_id(CUstream st);
/* 1 when a stream of context ctx is being captured into a graph (or its
 * capture failed): its streams must not be queried. */
int session_capturing(struct session *s, uint64_t ctx);
/* Range [p, p+n) lies in one of this session's allocations or globals. */
int session_owns_range(struct session *s, uint64_t p, uint64_t n);
/* A graph alloc node's address (above): noted (0, or -1 out of memory);
 * known (1) or not (0).  Kept while the session lives: each launch of the
 * graph allocates at the same address again. */
int session_gmem_note(struct session *s, uint64_t dptr);
int session_gmem_has(const struct session *s, uint64_t dptr);
/* 1: added, 0: already there (a global looked up again), -1: no memory. */
int session_alloc_add(struct session *s, uint64_t dptr, uint64_t size, uint64_t ctx,
		      uint64_t module, unsigned dev);
/* What a context holds in the quota besides its allocations (its own
 * cost and its limits); refunded when it goes. */
uint64_t session_ctx_charged(const struct ctx_state *cs);
/* Lets go of a context: a primary one is released, another destroyed. */
int session_ctx_drop(struct session *s, CUcontext ctx, struct ctx_state *cs);
/* Forgets every range registered by a module (its globals), refunding
 * them. */
void session_alloc_drop_module(struct session *s, uint64_t module);
/* The allocation starting at dptr, or NULL. */
struct alloc *session_alloc_get(struct session *s, uint64_t dptr);
/* Removes and returns the allocation starting at dptr (size 0 if none). */
struct alloc session_alloc_del(struct session *s, uint64_t dptr);
/* ops_memory.c: size bytes of device memory on dev for context ctx, from
 * the memory manager, charged to the quota and registered as cuMemAlloc'd
 * (*addr); and the session's allocation at addr freed and refunded
 * (CUDA_ERROR_INVALID_VALUE: none, or a module's global).  CUresults. */
int session_mem_alloc(struct session *s, uint64_t ctx, unsigned dev, uint64_t size, uint64_t *addr);
int session_mem_free(struct session *s, uint64_t addr);
/* Admits the session to GPU dev (lease check, once). A CUresult. */
int session_admit(struct session *s, unsigned dev);
/* Payload bytes of the current frame that the handler reads itself. */
int session_recv(struct session *s, void *dst, size_t n);
int session_skip(struct session *s, size_t n);
/* Sends what kernels printed since the last call (before h's reply). */
void session_forward_output(struct session *s, const struct rgpu_hdr *h);
int session_send_reply(struct session *s, const struct rgpu_hdr *h, uint32_t flags,
		       int32_t status, const void *data, size_t len);
/* EVENT_DONE for the event handle's record seq (status 0: completed; else
 * not watched, the client asks); the send lock held */
int session_send_notice(struct session *s, int32_t status, uint64_t handle, uint64_t seq);

/* ops_vmem.c */
int vmem_owns(struct session *s, uint64_t addr);
void vmem_forget_ctx(struct session *s, uint64_t ctx);
void vmem_cleanup(struct session *s);

/* ops_exec.c: a kernel's n argument bytes copied to 128-byte alignment,
 * valid until the next call (the driver copies them at the launch or
 * when a node is added); NULL if more than a kernel takes or no memory. */
const uint8_t *launch_params(struct session *s, const uint8_t *p, size_t n);

/* ops_array.c: an array's quota charge back (its entry going with its
 * context); a context's texture and surface objects forgotten. */
void array_forget(struct hentry *e);
void tex_forget_ctx(struct session *s, uint64_t ctx);

/* ops_hostfn.c: host functions run on the client.  hostfn_node_arg: the
 * argument for hostfn_trampoline() standing for client host function
 * client_id (oneshot: freed once it ran; else kept for the session: graph
 * host nodes); NULL when out of memory.  hostfn_client_id: the client id
 * behind such an argument, 0 if p is none.  hostfn_cleanup releases every
 * held stream (session end, before contexts go); hostfn_free frees the
 * rest after the contexts are gone. */
void *hostfn_node_arg(struct session *s, uint64_t client_id, int oneshot);
CUhostFn hostfn_trampoline(void);
uint64_t hostfn_client_id(struct session *s, void *p);
void hostfn_cleanup(struct session *s);
/* Whether a host function is queued, reached or out on the client, or a
 * graph host node holds one (a session is captured only when none is). */
int hostfn_busy(struct session *s);
void hostfn_free(struct session *s);

/* ops (ops_*.c) */
#define DECL_OP(name) int op_##name(struct session *, const struct rgpu_hdr *, struct rd *, struct wbuf *);
DECL_OP(hello) DECL_OP(device_info)
DECL_OP(ctx_create) DECL_OP(ctx_destroy) DECL_OP(ctx_sync) DECL_OP(ctx_get_limit) DECL_OP(ctx_set_limit)
DECL_OP(mem_get_info) DECL_OP(mem_alloc) DECL_OP(mem_free) DECL_OP(memcpy_htod) DECL_OP(memcpy_dtoh)
DECL_OP(memcpy_dtod) DECL_OP(memset)
DECL_OP(module_load) DECL_OP(module_unload) DECL_OP(module_get_function) DECL_OP(module_get_global)
DECL_OP(library_load) DECL_OP(library_unload) DECL_OP(library_get_kernel) DECL_OP(kernel_get_function)
DECL_OP(library_get_global) DECL_OP(library_kernel_count) DECL_OP(module_functions)
DECL_OP(launch) DECL_OP(func_get_attrs) DECL_OP(func_set_attr) DECL_OP(func_set_cache) DECL_OP(occ_max_blocks) DECL_OP(occ_dyn_smem) DECL_OP(occ_max_clusters) DECL_OP(occ_cluster_size)
DECL_OP(stream_create) DECL_OP(stream_destroy) DECL_OP(stream_sync) DECL_OP(stream_query) DECL_OP(stream_wait_event)
DECL_OP(event_create) DECL_OP(event_destroy) DECL_OP(event_record) DECL_OP(event_sync) DECL_OP(event_query)
DECL_OP(event_elapsed) DECL_OP(admin)
DECL_OP(shm_attach) DECL_OP(shm_detach) DECL_OP(shm_htod) DECL_OP(shm_slot_wait) DECL_OP(shm_dtoh)
DECL_OP(shm_hostcopy) DECL_OP(vmem_map) DECL_OP(vmem_unmap) DECL_OP(transport)
DECL_OP(capture_begin) DECL_OP(capture_end) DECL_OP(capture_status) DECL_OP(graph_instantiate)
DECL_OP(graph_launch) DECL_OP(graph_destroy) DECL_OP(graph_nodes)
/* application memory, peers, NVML (ops_appvmm.c, ops_pool.c, ops_peer.c,
 * ops_gpustatus.c) */
DECL_OP(vmm_create) DECL_OP(vmm_release) DECL_OP(vmm_map) DECL_OP(vmm_unmap) DECL_OP(vmm_access)
DECL_OP(vmm_export) DECL_OP(vmm_import) DECL_OP(memset2d) DECL_OP(peer_query) DECL_OP(peer_access)
DECL_OP(memcpy_peer) DECL_OP(peer_send) DECL_OP(peer_recv) DECL_OP(pool_create) DECL_OP(pool_destroy) DECL_OP(pool_default)
DECL_OP(pool_get_attr) DECL_OP(pool_set_attr) DECL_OP(pool_trim) DECL_OP(pool_access)
DECL_OP(mem_alloc_async) DECL_OP(mem_free_async) DECL_OP(gpu_status) DECL_OP(pool_adopt)
/* arrays, 3D copies, texture and surface objects (ops_array.c) */
DECL_OP(array_create) DECL_OP(array_destroy) DECL_OP(memcpy3d) DECL_OP(texobj_create)
DECL_OP(texobj_destroy)
DECL_OP(ipc_export) DECL_OP(ipc_event_export) DECL_OP(ipc_event_open)
DECL_OP(mem_refused)
DECL_OP(hostfn_launch) DECL_OP(hostfn_wait) DECL_OP(hostfn_done) DECL_OP(call)
DECL_OP(graph_op) DECL_OP(link)
DECL_OP(event_record_watch)
DECL_OP(ctx_record_event) DECL_OP(ctx_wait_event) DECL_OP(green_op) DECL_OP(library_get_module) DECL_OP(library_kernels) DECL_OP(library_get_managed)
#undef DECL_OP

#endif
