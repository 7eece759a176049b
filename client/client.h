/*
 * Internals of the rgpu client, the drop-in libcuda.so.1.
 *
 * Every CUDA handle the application sees (CUcontext, CUmodule, ...) points
 * to one of the structs below.  Each records the server connection and the
 * server's handle id, plus what the client caches (parameter layouts,
 * function attributes), so calls route to the right server and immutable
 * queries need no round trip.
 */
#ifndef RGPU_CLIENT_H
#define RGPU_CLIENT_H

#include "config.h"

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>
#include <cudaProfiler.h>

#include "error.h"
#include "proto.h"
#include "servers.h"
#include "transport.h"
#include "wire.h"

#include <pthread.h>
#include <stdint.h>

#define RC_EXPORT __attribute__((visibility("default")))

enum rc_magic {
	RC_CTX = 0x52637478,
	RC_MODULE = 0x52636d64,
	RC_FUNC = 0x5263666e,
	RC_LIBRARY = 0x52636c62,
	RC_KERNEL = 0x52636b6e,
	RC_STREAM = 0x52637374,
	RC_EVENT = 0x52636576,
	RC_GRAPH = 0x52636772,
	RC_GEXEC = 0x52636778,
	RC_GREEN = 0x52636763, /* green.c */
	RC_RESDESC = 0x52636464,
};

/* one per distinct host:port in RGPU_SERVERS.  Several threads share it:
 * see rpc.c for how requests go out and replies find their caller. */
struct rc_waiter;
struct rc_conn {
	char host[256];
	unsigned port;
	struct rgpu_conn *c;
	pthread_mutex_t lock;     /* sending: one request's frames go out together; next_id */
	uint64_t next_id;
	pthread_mutex_t rx_lock;  /* receiving: everything below up to server_id */
	pthread_cond_t cv;        /* a reply delivered, the read side free, or dead */
	struct rc_waiter *waiters; /* requests waiting for a reply */
	int reading;              /* a waiter is reading frames for everyone */
	/* requests without a reply waiting to go out in one write with the
	 * next request (rpc.c; under lock): frames, encoded */
	struct wbuf txq;
	unsigned txq_n;
	/* frames the queue may gather before it goes (rpc.c: 0 = the next
	 * request starts a burst and goes at once; then 2, 4, ... up to
	 * TXQ_MAX_FRAMES) */
	unsigned txq_burst;
	uint64_t txq_last_ns; /* when the last request was queued or sent */
	/* the reader's receive buffer (rpc.c; NULL until cuInit is done):
	 * one system call takes a whole small reply */
	uint8_t *rxbuf;
	size_t rx_off, rx_len;
	int dead;
	int quiet;                /* during cuInit's handshake: cuInit says why */
	struct rgpu_error err;    /* why the connection failed */
	char server_id[128];
	int ndev;
	/* migration and recovery (replay.h) */
	struct rc_replay *replay; /* the request log; NULL: not movable */
	unsigned ckpt_interval;   /* HELLO: the server's checkpoint interval */
	uint64_t instance;        /* HELLO: the rgpud's instance (IPC handles name it) */
	/* same host (Unix socket): the shared staging ring */
	pthread_mutex_t ring_lock; /* one copy through the ring at a time */
	int local;
	void *ring;
	size_t ring_size;
	uint32_t nslots, next_slot;
	uint32_t *slot_state;
	int shmq;                 /* calls go through shared-memory queues (shm.c) */
	int loopback;             /* peer_remote.c: host is a loopback address (1), not (2) */
};

struct rc_ctx;

struct rc_dev {
	struct rc_conn *conn;
	unsigned gpu; /* index on the server */
	char name[256];
	CUuuid uuid;
	uint64_t total_mem;
	int attrs[CU_DEVICE_ATTRIBUTE_MAX];
	/* primary context */
	pthread_mutex_t pctx_lock;
	struct rc_ctx *primary;
	int primary_refs;
	unsigned primary_flags;
};

struct rc_green;

struct rc_ctx {
	uint32_t magic;
	struct rc_dev *dev;
	int ordinal;
	uint64_t h;
	unsigned flags;
	int is_primary;
	/* round trips saved (context.c, stream.c; atomics): limits read
	 * from the server (bit per CUlimit), and where the context or its
	 * legacy NULL stream was last seen idle (rc_idle_mark) */
	uint32_t lim_known;
	uint64_t lim_val[CU_LIMIT_MAX];
	uint64_t idle_all, idle_legacy;
	uint64_t own_stream; /* rc_stream_internal's (0: not made yet) */
	/* a green context's conversion (green.c): its CUgreenCtx, and the
	 * device's primary context, which owns the memory allocated in it */
	struct rc_green *green;
	struct rc_ctx *mem_owner;
};

struct rc_layout {
	uint32_t n, total;
	uint32_t *off, *size;
};

struct rc_func;

struct rc_library;

struct rc_module {
	uint32_t magic;
	struct rc_ctx *ctx;
	uint64_t h;
	pthread_mutex_t lock;
	struct rc_func *funcs; /* looked up so far: one handle per name */
	struct rc_library *lib;   /* cuLibraryGetModule's: the library owns it */
	struct rc_module *lib_next; /* in that library's list */
	uintptr_t *managed;  /* its managed memory mapped here (an address in each; lock) */
	size_t nmanaged;
};

struct rc_func {
	uint32_t magic;
	struct rc_ctx *ctx;
	uint64_t h;
	struct rc_layout layout;
	int attrs_valid;  /* attrs, attrs_valid, attrs_gen: launch.c's attrs_lock */
	unsigned attrs_gen; /* moves when an attribute is set */
	int attrs[CU_FUNC_ATTRIBUTE_MAX];
	char *name;           /* module functions */
	struct rc_module *mod; /* module functions: theirs */
	struct rc_kernel *kern; /* a library kernel's function in a context */
	struct rc_func *next; /* in its module's or kernel's list */
	struct rc_legacy *legacy; /* launch_legacy.c: block shape, parameter bytes */
	/* round trips saved (launch.c, under attrs_lock): the value of each
	 * attribute this client set successfully (setting it again to the
	 * same value changes nothing), and recent occupancy answers */
	uint32_t set_known;
	int set_val[CU_FUNC_ATTRIBUTE_MAX];
	struct rc_occ {
		int bs, n;
		unsigned flags, gen;
		size_t smem;
		int valid;
	} occ[8];
	unsigned occ_next;
};

/* Context-independent: loaded on a server the first time a context of that
 * server needs it; the image is kept for that. */
struct rc_library {
	uint32_t magic;
	void *image;
	size_t size;
	uint32_t kind;
	pthread_mutex_t lock;
	uint64_t h[RGPU_MAX_DEVICES]; /* per connection index */
	struct rc_kernel *kernels;
	struct rc_module *modules; /* cuLibraryGetModule's, one per context */
	struct rc_library *next_live; /* module.c's list of loaded libraries */
	uintptr_t *managed;  /* its managed memory mapped here (an address in each) */
	size_t nmanaged;
};

/* module.c: context c is going: the libraries' functions and modules in
 * it go too (a later context at the same address must not find them) */
void rc_libraries_ctx_gone(struct rc_ctx *c);

struct rc_kernel {
	uint32_t magic;
	struct rc_library *lib;
	char *name;
	struct rc_kernel *next;
	uint64_t h[RGPU_MAX_DEVICES]; /* per connection index */
	struct rc_layout layout;
	struct rc_func *funcs; /* one per context it ran in */
};

struct rc_stream {
	uint32_t magic;
	struct rc_ctx *ctx;
	uint64_t h;
	unsigned flags;
	int priority;
	uint64_t capture_id; /* non-zero while capturing (graph.c) */
	int capture_joined;  /* capture_id is another stream's capture, joined
			      * by waiting for an event recorded in it */
	uint64_t capture_hosts; /* host functions captured so far */
	void *capture_graph;    /* cuStreamBeginCaptureToGraph's graph, or NULL */
	void *capture_acc;      /* host memory its captured copies name (graph.c) */
	uint64_t idle_at;    /* stream.c: seen idle (rc_idle_mark), atomic */
};

/* graph.c: capture id of a stream (0 when not capturing) */
uint64_t rc_stream_capture_id(CUstream s);
/* graph.c: stream s waits for an event recorded in capture id: s joins
 * that capture (its work goes into the same graph), as in CUDA. */
void rc_stream_join_capture(CUstream s, uint64_t id);
/* graph.c: stream s (one of rc_stream) is being destroyed: a capture it
 * began and never ended goes with it. */
void rc_stream_capture_gone(CUstream s);
/* graph.c: a copy captured on s names host memory at device-side address
 * dev (and device memory at other): the graph made of the capture
 * publishes and fetches it at its launches, and holds registration held */
CUresult rc_capture_host(CUstream s, struct rc_ctx *c, uint64_t dev, uint64_t other, uintptr_t held);
/* Work captured from stream s names these words (a kernel's arguments, a
 * copy's or memset's device address): nothing is made coherent now (a
 * copy on the legacy stream would invalidate the capture); the graph's
 * launches publish the managed and mapped memory they name. */
CUresult rc_capture_words(CUstream s, struct rc_ctx *c, const void *words, size_t n);
/* memory.c: graph alloc node n of context c gave address p (cuMemFree
 * may free it) */
void rc_graph_mem_note(struct rc_ctx *c, uint64_t p);
/* pool.c: forgets a stream-ordered allocation at p that cuMemFree frees;
 * 1 if it was one */
int rc_pool_alloc_forget(CUdeviceptr p);
/* the connection (and server context handle) of graph memory at p; NULL
 * when p is no graph alloc node's address */
struct rc_conn *rc_graph_mem_conn(uint64_t p, uint64_t *ctx_h);

struct rc_event {
	uint32_t magic;
	struct rc_ctx *ctx;
	uint64_t h;
	unsigned flags;
	/* stream.c, atomics: the last record (a request id no lower than
	 * its own; 0: never recorded), whether it went to the legacy NULL
	 * stream, and the latest id below which the event was seen done */
	uint64_t rec_id;
	int rec_legacy;
	uint64_t rec_capture; /* the capture its last record went into, or 0 */
	uint64_t done_at;
	/* completion pushed by the server (EVENT_RECORD_WATCH / EVENT_DONE)
	 * for events the application polls: records are numbered; the
	 * server says which have completed, or which it does not watch */
	int want_watch, rec_watched;
	uint64_t seq, rec_seq, done_seq, unwatched_seq;
};

/* global state (init.c) */
extern int rc_ndev;
extern struct rc_dev rc_devs[RGPU_MAX_DEVICES];
extern int rc_nconn;
extern struct rc_conn rc_conns[RGPU_MAX_DEVICES];

CUresult rc_initialized(void);

/* A handle the application passed, checked: every client object starts
 * with its magic.  CUDA_ERROR_INVALID_HANDLE for anything else. */
static inline CUresult rc_obj(const void *p, uint32_t magic, void *out)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	/* the special stream values are not pointers */
	if ((uintptr_t)p < 4096 || *(const uint32_t *)p != magic)
		return CUDA_ERROR_INVALID_HANDLE;
	*(const void **)out = p;
	return CUDA_SUCCESS;
}

/* init.c */
CUresult rc_initialized(void);       /* CUDA_ERROR_NOT_INITIALIZED before cuInit */
/* device.c: a device attribute as programs see it (what rgpu cannot
 * provide reads as absent) */
int rc_dev_attr(const struct rc_dev *d, CUdevice_attribute a);
CUresult rc_dev_get(CUdevice d, struct rc_dev **out);
int rc_conn_index(const struct rc_conn *c);

/* array.c: a 3D copy (arrays, pitched device memory, host) */
CUresult rc_memcpy3d(const CUDA_MEMCPY3D *p, CUstream s, int async);
/* memcpy2d.c: one side of a copy as it names memory: its kind, UNIFIED
 * resolved to where the address lives (*kind), and its address (with
 * UNIFIED in the device field, host memory too; cudaMemcpyDefault leaves
 * the host field NULL) */
uintptr_t rc_copy_side(CUmemorytype t, CUdeviceptr d, const void *h, CUmemorytype *kind);

/* log.c: once-per-name notice for unimplemented entry points */
void rc_unsupported(const char *name);

/* rpc.c: calls */
/* Sends req (op) and waits for the reply; the reply's fields are in *r,
 * valid until this thread's next call.  Returns the status.  On any
 * failure *r is empty (reading it fails), so a caller may read an error
 * message field without checking how the call failed. */
CUresult rc_call(struct rc_conn *c, uint16_t op, const struct wbuf *req, struct rd *r);
/* The same with c->lock held (a call between the frames of a copy). */
CUresult rc_call_locked(struct rc_conn *c, uint16_t op, const struct wbuf *req, struct rd *r);
/* the calling thread's request buffer, reset */
struct wbuf *rc_req(void);
/* Sends a request that gets no reply (launches, async copies, event
 * records): its failure surfaces at the next call that waits, as CUDA
 * reports asynchronous errors.  Requests on one connection run in order.
 * Such requests are coalesced: they go out together with the next request
 * that is sent at once, when many are queued, or within
 * RGPU_COALESCE_US (a flusher thread), whichever comes first. */
CUresult rc_post(struct rc_conn *c, uint16_t op, const struct wbuf *req);
/* Sends what rc_post queued on c now. */
void rc_flush(struct rc_conn *c);
/* a reply status as the application sees it (protocol codes mapped) */
CUresult rc_status(int32_t st);
/* Reads what the server has sent already (notices, replies to others),
 * without waiting; nothing when another thread is reading.  0, or -1
 * when the connection cannot be polled (no socket) or is dead. */
int rc_poll(struct rc_conn *c);
/* From now on replies are read through a buffer (cuInit, once the
 * connection's transport is settled: nothing may be read ahead of a
 * transport switch). */
void rc_rx_buffered(struct rc_conn *c);
/* stream.c: an EVENT_DONE notice (status 0: record seq of the event with
 * server handle h has completed; else it is not watched) */
void rc_event_notice(struct rc_conn *c, int32_t status, uint64_t h, uint64_t seq);
/* The client's event for the server's handle h of context c (made with
 * flags, or opened by IPC_EVENT_OPEN); NULL: out of memory. */
struct rc_event *rc_event_new(struct rc_ctx *c, uint64_t h, unsigned flags);
/* ipc.c: memory of another process of the job exported under token in
 * the share registry of rgpud instance (physical memory of len bytes, the
 * allocation at offset in it, size bytes), mapped at a fresh address of
 * this process's window for the current context: *pdptr.  rc_ipc_unmap
 * undoes it (CUDA_ERROR_INVALID_VALUE: dptr was not so mapped). */
CUresult rc_ipc_map(uint64_t instance, const uint8_t token[16], uint64_t offset, uint64_t len,
		    uint64_t size, CUdeviceptr *pdptr);
CUresult rc_ipc_unmap(CUdeviceptr dptr);
/* pool.c: whether p is a pointer imported from another process's pool
 * (cuMemPoolImportPointer); if so it is taken off the list, for the
 * caller to unmap. */
int rc_pool_import_is(CUdeviceptr p);

/* rpc.c: frames, for the transfer layer (requests of several frames,
 * replies of several frames).  The frames of one request go out with the
 * connection's lock held, so no other request comes between them; replies
 * are read meanwhile by whichever thread waits. */
/* One reply frame: its status, flags and the payload after the status. */
struct rc_reply {
	int32_t st;
	uint32_t flags;
	size_t len;  /* payload bytes after the status */
	struct rd r; /* those bytes, when no sink was given */
};
/* With c->lock held: sends one frame (fields a, then bulk data b) as a new
 * request, its id in *id.  Unless flags has RGPU_F_NOREPLY, the request is
 * registered for its reply before it leaves; its caller must then take
 * the reply frames with rc_reply_frame until one lacks RGPU_F_MORE or has
 * a non-zero status.  borrow: the request log keeps a pointer to b, not a
 * copy, until rc_replay_settle (replay.h). */
CUresult rc_send_frame(struct rc_conn *c, uint16_t op, uint32_t flags, uint64_t *id,
		       const void *a, size_t alen, const void *b, size_t blen, int borrow);
/* Waits for the next reply frame of request id (without c->lock).  With a
 * sink the payload (at most sinkcap bytes, else the connection fails) lands
 * in it, straight from the connection when it arrives during the wait;
 * without, f->r reads it until this thread's next call. */
CUresult rc_reply_frame(struct rc_conn *c, uint64_t id, uint16_t op, struct rc_reply *f,
			void *sink, size_t sinkcap);
/* Marks the connection failed (idempotent; logs once, wakes every waiter):
 * code its category, why the reason in words.  Returns
 * CUDA_ERROR_DEVICE_UNAVAILABLE. */
CUresult rc_conn_fail(struct rc_conn *c, enum rgpu_errcode code, const char *why);
/* The same, right after a transport call failed: what it was doing (its
 * errno says why; 0: the server closed the connection). */
CUresult rc_conn_failed(struct rc_conn *c, const char *what);

/* shm.c: the same-host data path (copies: xfer_client.h) */
void rc_shm_setup(struct rc_conn *c);
/* Moves c's calls onto shared-memory queues with a doorbell (RGPU_SHM_CALLS;
 * transport_shmq.c); they stay on the socket if that cannot be done. */
void rc_shmq_setup(struct rc_conn *c);
/* kind 1 (staging ring): nslots slots; kind 2 (host memory): nslots 1 asks
 * the server to map it at base for its device too (base lies outside the
 * window it reserves: rc_va_alloc_live), and *live (may be NULL) says
 * whether it did, so that kernels there reach these very pages */
CUresult rc_shm_attach(struct rc_conn *c, uint32_t kind, int fd, void *base, size_t size,
		       uint32_t nslots, int *live);
/* Registered host memory that is the pages of a shared file (fd, at file
 * offset off): the server maps them at dev, the device address, live. */
CUresult rc_shm_attach_file(struct rc_conn *c, int fd, uint64_t off, uintptr_t dev, size_t size);
CUresult rc_shm_detach(struct rc_conn *c, uintptr_t base);
CUresult rc_hello(struct rc_conn *c, char *err, size_t errlen);

/* context.c */
struct rc_ctx *rc_current(void);
/* The current context, or an error (CUDA_ERROR_INVALID_CONTEXT). */
CUresult rc_need_ctx(struct rc_ctx **out);
/* Makes context c on its server if it is not yet (a primary context is
 * made when first used: named as a peer, it is used). */
CUresult rc_ctx_activate(struct rc_ctx *c);
/* context.c: device dev's primary context, no retain counted (for work
 * before the application has a context) */
CUresult rc_primary_hidden(CUdevice dev, struct rc_ctx **out);
/* The context new device memory of c belongs to: c, or for a green
 * context's conversion the device's primary context (made live), as in
 * CUDA; *c is replaced */
CUresult rc_mem_ctx(struct rc_ctx **c);
/* green.c: a context's server side and handle go (a green context's) */
CUresult rc_ctx_free(struct rc_ctx *c);

/* stream.c: resolves a CUstream to (context, server id). */
CUresult rc_stream_resolve(CUstream s, struct rc_ctx **ctx, uint64_t *h);
/* peer_remote.c: n bytes from src (owned by sc) to dst (owned by d) on
 * GPUs of different servers, from one rgpud to the other (or through this
 * process); on stream s of context stream_ctx (NULL, NULL: a synchronous
 * copy) */
CUresult rc_peer_remote(CUdeviceptr dst, struct rc_ctx *d, CUdeviceptr src, struct rc_ctx *sc,
			size_t n, CUstream s, struct rc_ctx *stream_ctx);
/* stream.c: what the client knows has finished, so that a
 * synchronisation or query about it needs no round trip.  A mark is taken
 * before a call that proves something idle (a synchronisation, a copy to
 * the host whose data came back); it is no higher than that call's
 * request id.  Nothing sent on the connection since (rc_idle_now): nothing
 * can have been queued since. */
uint64_t rc_idle_mark(struct rc_conn *c);
int rc_idle_now(struct rc_conn *c, uint64_t mark);
/* the stream sh (server handle; 0/CU_STREAM_LEGACY: the legacy stream) of
 * c finished everything sent before mark */
void rc_stream_idle(struct rc_ctx *c, CUstream s, uint64_t sh, uint64_t mark);

/* module.c */
CUresult rc_image_size(const void *image, size_t *size, uint32_t *kind, const void **start);
CUresult rc_layout_read(struct rd *r, struct rc_layout *l);
void rc_layout_free(struct rc_layout *l);
/* The argument buffer that a launch's extra (CU_LAUNCH_PARAM_BUFFER_POINTER,
 * _SIZE, _END) names: 0, or -1 for another key or no buffer. */
int rc_launch_extra(void **extra, const void **buf, size_t *size);
/* the function behind a CUfunction or a CUkernel (in the current context) */
CUresult rc_func_resolve(CUfunction f, struct rc_func **out);
/* module.c: a function's client state freed (its handle dead) */
void rc_func_free(struct rc_func *f);

/* coherence.c: managed and mapped host memory (see there) */
void *rc_va_alloc(size_t *size, int fd);
/* Host memory of fd (size rounded up) where same-host servers can map it
 * at the same address for their GPUs (outside the window they reserve);
 * NULL when that range is full or beyond the address space. */
void *rc_va_alloc_live(size_t *size, int fd);
CUresult rc_managed_alloc(struct rc_ctx *c, size_t bytes, void **out);
int rc_mapped_add(void *p, size_t size); /* -1: the region table is full */
/* Mapped or registered memory p is live on conn's server (rc_shm_attach):
 * launches there need no coherence for it. */
void rc_mapped_live(void *p, const struct rc_conn *conn);
/* p's region is live on some server */
int rc_region_live(const void *p);
/* Registered host memory: pages [p, p+size) whose device copy lives at
 * dev; the application's bytes are [p+xoff, p+xoff+xlen), the only ones
 * coherence moves.  -1: the table is full. */
int rc_registered_add(void *p, size_t size, uintptr_t dev, size_t xoff, size_t xlen);
/* The device address of registered host memory p (0: not registered with
 * a device mapping). */
uintptr_t rc_registered_dev(const void *p);
/* A device address of registered memory as its host address (else p). */
uintptr_t rc_host_alias(uintptr_t p);
int rc_region_free(void *p, size_t *size);
int rc_region_kind(const void *p); /* 0 none, 1 managed, 2 mapped, 3 registered */
/* rgpu's registrations for graphs' copies of host memory (coherence.c):
 * marked as such (one holder; dst: a copy writes it); [p, p+n) in one,
 * its holders one more (1, with its base and p's device address; 0: not
 * in one; -1: beyond its bytes); holders one more, one fewer (the
 * region's size and its device copy's address when none is left: the
 * caller lets it go). */
void rc_region_auto_init(const void *base, int dst);
int rc_region_auto_use(const void *p, size_t n, int dst, uintptr_t *base, uint64_t *dev);
void rc_region_auto_ref(uintptr_t base);
/* registered memory holding p gets its device copy on c's server now (a
 * graph's copy names it before any launch does) */
CUresult rc_region_mirror(struct rc_ctx *c, const void *p);
size_t rc_region_auto_unref(uintptr_t base, uintptr_t *dev);
/* memory.c: the device-side address of host memory [p, p+n) that a
 * graph's copy names: rgpu's managed and mapped memory as it is,
 * registered memory's device copy, pageable memory registered for it
 * (*held: that registration's base, for the graph to let go with
 * rc_graph_host_drop; 0 when nothing is held). */
CUresult rc_graph_host(struct rc_ctx *c, const void *p, size_t n, int dst, uint64_t *dev,
		       uintptr_t *held);
void rc_graph_host_drop(uintptr_t held);
/* a lies in rgpu's own address ranges (managed and mapped memory, the
 * application's VMM reservations, pinned memory shared live) */
int rc_va_ours(uint64_t a);
/* whether p is the program's host memory, not the device's (an address
 * a unified-addressing copy names) */
int rc_is_host_memory(const void *p);
int rc_managed(const void *p);      /* cheap when there is no managed memory */
/* the managed allocation holding p: its base, size and the context that
 * made it (0; -1: p is not managed memory) */
int rc_managed_span(uintptr_t p, uintptr_t *base, size_t *size, struct rc_ctx **ctx);
/* umhint.c: a managed allocation's prefetches and advice go with it */
void rc_umhint_forget(uintptr_t base, size_t size);
CUresult rc_coh_launch(struct rc_ctx *c, uint64_t stream, const uint8_t *params, size_t len);
/* A synchronisation is an acquire: take rc_coh_epoch() before the
 * synchronising call, then rc_coh_acquire with the stream it waited for
 * (server handle; RC_COH_ALL: the whole context, RC_COH_NONE: unknown). */
#define RC_COH_ALL (~0ull)
#define RC_COH_NONE (~0ull - 1)
uint64_t rc_coh_epoch(void);
CUresult rc_coh_acquire(struct rc_conn *conn, uint64_t stream, uint64_t since);
/* Before a synchronisation on conn waits: what the host changed in mapped
 * or registered memory that a kernel still running may use goes to its
 * device copy, unordered with the application's streams (a kernel that
 * spins on a host flag ends; over TCP the device sees host memory only at
 * launches and synchronisations). */
CUresult rc_coh_sync_release(struct rc_conn *conn);
/* Before a host function queued on stream (at epoch since) runs: what
 * launches before it on that stream wrote is fetched, on a stream that
 * does not wait for the one the host function holds (coherence.c). */
CUresult rc_coh_hostfn(struct rc_conn *conn, uint64_t stream, uint64_t since);
/* A non-blocking stream of c's own, made on first use (its handle), for
 * copies that must not wait for the application's streams. */
CUresult rc_stream_internal(struct rc_ctx *c, uint64_t *h);
void rc_coh_host_use(const void *p, size_t n, int write);
void rc_coh_device_use(uint64_t p);
CUresult rc_htod_any(struct rc_ctx *c, uint64_t sh, CUdeviceptr dst, const void *src, size_t n,
		     int async);
CUresult rc_dtoh_any(struct rc_ctx *c, uint64_t sh, void *dst, CUdeviceptr src, size_t n, int async);
/* coherence.c: a library's or module's __managed__ variable [a, a+n), in
 * the managed memory [seg, seg+seglen) the server's driver made: the host
 * sees it at the same address, coherent as managed memory of c (its
 * initial values fetched).  ref: a new owner of that memory, whose
 * rc_managed_global_drop gives its reference back (the last unmaps it) */
CUresult rc_managed_global(struct rc_ctx *c, uintptr_t seg, size_t seglen, uintptr_t a, size_t n, int ref);
void rc_managed_global_drop(uintptr_t a);
/* coherence.c: context c is going (destroyed, or a primary context
 * reset): managed memory whose device copy it held goes with it (the host
 * side unmapped, as CUDA frees it), mapped and registered host memory
 * gets a device copy again when next used */
void rc_coh_ctx_gone(struct rc_ctx *c);

/* thread.c: a detached thread of the client's, taking no signals (0 or
 * pthread_create's error) */
int rc_thread_start(void *(*fn)(void *), void *arg);
/* hostfn.c: the calling thread runs host functions (async-signal-safe) */
int rc_hostfn_thread(void);
/* hostfn.c: host functions run here in stream order.  rc_hostfn_gate
 * holds back a request that may make the server wait for device work
 * while host functions are out on c (called before c->lock is taken);
 * rc_hostfn_out / rc_hostfn_back count host functions that will come (a
 * launch of a graph with host nodes) or will not after all;
 * rc_hostfn_register gives a graph host node its client id. */
void rc_hostfn_gate(struct rc_conn *c, uint16_t op);
CUresult rc_hostfn_out(struct rc_conn *c, uint64_t n);
void rc_hostfn_back(struct rc_conn *c, uint64_t n);
uint64_t rc_hostfn_register(CUhostFn fn, void *data);
void rc_hostfn_forget(uint64_t id);
/* graph.c: a host function was captured on stream s */
void rc_capture_host_node(CUstream s);
/* gnode.c: the graph a capturing stream builds and its current ends */
CUresult rc_capture_info(CUstream s, struct rc_ctx *c, uint64_t sh, CUgraph *graph,
			 const CUgraphNode **deps, size_t *ndeps);

/* link.c: PTX compiled with JIT options by the server's linker: the cubin
 * (malloc'ed) and the logs in the options' buffers; NOT_SUPPORTED when the
 * image is not PTX or no option asks for anything (load it as it is) */
CUresult rc_jit_image(const void *image, unsigned nopt, CUjit_option *opts, void **vals,
		      void **cubin, size_t *size);

/* vmm.c: physical memory exported on c's server under token, imported as
 * a handle of this process (cuMemImportFromShareableHandle, IPC); the
 * device ordinal it lies on in *ordinal (if not NULL). */
CUresult rc_vmm_import(struct rc_conn *c, const uint8_t token[16],
		       CUmemGenericAllocationHandle *handle, int *ordinal);

/* memory.c: device allocations of this process, for cuMemcpy's direction
 * and for pointer queries */
int rc_alloc_lookup(CUdeviceptr p, struct rc_ctx **ctx, CUdeviceptr *base, size_t *size);
/* Device memory not from cuMemAlloc (VMM mappings, pool allocations):
 * owner is the context copies of it run in (never NULL). */
int rc_devrange_add(struct rc_conn *conn, CUdeviceptr base, size_t size, struct rc_ctx *owner);
void rc_devrange_del(struct rc_conn *conn, CUdeviceptr base);
/* A destroyed context's memory went with it: its ranges go too (a range
 * naming a freed context would be used after free). */
void rc_devranges_drop_owner(struct rc_conn *conn, struct rc_ctx *owner);

/* vmm.c, pool.c, peer.c */
/* A context on the device's server to run copies of its memory in: the
 * current one when it is there, else the device's primary context (NULL
 * when neither exists). */
struct rc_ctx *rc_ctx_on(struct rc_dev *d);
/* Device attributes of application memory as rgpu serves it: shareable
 * handles are POSIX file descriptors only (no fabric, no Win32 handles),
 * pools are not exportable, IPC events are not served, registered host
 * memory's device address differs from its host address. */
void rc_appmem_attrs(int *attrs);

#endif
