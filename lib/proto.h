/*
 * rgpu wire protocol: the single place that defines what crosses the wire.
 *
 * Every message is a frame: a fixed 24-byte header followed by `len` payload
 * bytes.  All integers are little-endian.  Payloads are sequences of fields
 * written with lib/wire.h (fixed-width integers, length-prefixed byte strings);
 * each opcode below documents its request and reply fields in order.
 *
 * Replies carry the request's id and RGPU_F_REPLY.  A reply payload always
 * starts with an i32 status: a CUresult (0 = success) or, for
 * protocol-level failures, RGPU_ERR_*.  A request flagged RGPU_F_NOREPLY
 * gets no reply; a failure is remembered by the session and reported by the
 * next request that asks for one and creates nothing (CUDA's "error at the
 * next synchronising call" rule; a request that allocates, loads or creates
 * an object returns it, and the error stays pending).  A reply may be split over several frames flagged
 * RGPU_F_MORE (bulk device-to-host data); the last one lacks the flag.
 * Replies to synchronising requests (CTX_SYNC, STREAM_SYNC, EVENT_SYNC) may
 * overtake: the server answers later requests while such a wait goes on,
 * so a client matches replies to requests by id, not by order.
 *
 * Compatibility: magic and version are the first 6 bytes of every frame in
 * every protocol version, so a peer can always name the other's version.
 */
#ifndef RGPU_PROTO_H
#define RGPU_PROTO_H

#include <stdint.h>

#define RGPU_PROTO_MAGIC   0x55504752u /* "RGPU" on the wire */
#define RGPU_PROTO_VERSION 1
#define RGPU_DEFAULT_PORT  7420

#define RGPU_HDR_SIZE 24
/* Largest payload accepted.  Bulk copies larger than this are split into
 * RGPU_CHUNK_SIZE pieces by the sender. */
#define RGPU_MAX_PAYLOAD (64u * 1024 * 1024 + 4096)
/* the packed host bytes of one MEMCPY3D request or reply */
#define RGPU_COPY3D_MAX (16u * 1024 * 1024)
#define RGPU_CHUNK_SIZE  (4u * 1024 * 1024)

enum rgpu_flags {
	RGPU_F_REPLY   = 1u << 0,
	RGPU_F_NOREPLY = 1u << 1,
	RGPU_F_MORE    = 1u << 2,
};

struct rgpu_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t op;
	uint32_t flags;
	uint32_t len;
	uint64_t id;
};

/* Protocol-level status codes, outside CUresult's range. */
enum rgpu_err {
	RGPU_ERR_PROTO    = 100000, /* malformed request */
	RGPU_ERR_VERSION  = 100001, /* protocol version mismatch */
	RGPU_ERR_AUTH     = 100002, /* no valid credential or lease */
	RGPU_ERR_BADOP    = 100003, /* unknown opcode */
	RGPU_ERR_HANDLE   = 100004, /* unknown handle for this session */
};

/* Handles: the server never hands out its own pointers.  Every object a
 * session creates gets a session-local 64-bit id; 0 means "none" (e.g. the
 * NULL stream).  Device addresses (CUdeviceptr) are the exception: they are
 * the server driver's real addresses, identical on both sides. */
typedef uint64_t rgpu_handle;

/*
 * Opcodes.  X(name, number, summary).  Request fields -> reply fields
 * (after the leading i32 status).  "ctx" is a context handle; every call that
 * runs in a context names it, so calls are replayable on their own.
 */
#define RGPU_OPS(X)                                                            \
	/* u32 proto, str client-name, bytes credential [, bytes token: attach \
	 * to a migrated session, see MOVED] -> str server-id, u32 ndev,      \
	 * u32 checkpoint interval (seconds, 0: none; see SESSION_SAVE).  The reply to a version mismatch is status               \
	 * RGPU_ERR_VERSION with str message naming both versions.            \
	 * credential: empty, or a munge credential (its text, no NUL) whose  \
	 * payload is "rgpu-job=<decimal Slurm job id, 0 if none>"            \
	 * (client/cred.c, daemon/auth.c). */                                 \
	X(HELLO, 1, "open a session")                                          \
	/* u32 dev -> str name, bytes16 uuid, u64 totalmem, u32 nattr,        \
	 * i32 attr[nattr] (index = CUdevice_attribute) */                     \
	X(DEVICE_INFO, 2, "device properties (cached by the client)")          \
	/* u32 dev, u32 flags[, u32 primary[, u32 server: which of the        \
	 * client's servers this is, 1.. (0: unknown), so that their device   \
	 * memory lies in distinct ranges]] -> handle ctx */                   \
	X(CTX_CREATE, 10, "create a context")                                  \
	X(CTX_DESTROY, 11, "handle ctx ->")                                    \
	X(CTX_SYNC, 12, "handle ctx ->")                                       \
	/* handle ctx, u32 limit -> u64 value */                               \
	X(CTX_GET_LIMIT, 13, "context limit")                                  \
	/* handle ctx, u32 limit, u64 value -> */                              \
	X(CTX_SET_LIMIT, 14, "set context limit")                              \
	/* handle ctx, handle event -> : the event captures all the context's \
	 * work so far (cuCtxRecordEvent) */                                   \
	X(CTX_RECORD_EVENT, 15, "record an event of a whole context")         \
	/* handle ctx, handle event (of any context of the session) -> : all  \
	 * later work of the context waits for it (cuCtxWaitEvent) */          \
	X(CTX_WAIT_EVENT, 16, "a whole context waits for an event")           \
	/* Green contexts and device resources: handle ctx (0: none), u32 sub \
	 * (enum rgpu_green_sub), its arguments -> per sub. */                \
	X(GREEN_OP, 17, "green contexts and device resources")                \
	/* handle ctx -> u64 free, u64 total (quota-aware) */                  \
	X(MEM_GET_INFO, 20, "free and total memory")                           \
	/* handle ctx, u64 size -> u64 dptr */                                 \
	X(MEM_ALLOC, 21, "allocate device memory")                             \
	/* handle ctx, u64 dptr -> */                                          \
	X(MEM_FREE, 22, "free device memory")                                  \
	/* handle ctx, handle stream, u64 dst, u64 total, u64 offset, then    \
	 * raw data to the end of the frame (at most RGPU_CHUNK_SIZE).         \
	 * Chunks in order; all but the last flagged NOREPLY -> */             \
	X(MEMCPY_HTOD, 23, "host to device copy chunk")                        \
	/* handle ctx, handle stream, u64 src, u64 size -> reply data frames   \
	 * (RGPU_F_MORE on all but the last); each: raw data */               \
	X(MEMCPY_DTOH, 24, "device to host copy")                              \
	/* handle ctx, handle stream, u64 dst, u64 src, u64 size,           \
	 * u32 sync (1: synchronous cuMemcpyDtoD) -> */                        \
	X(MEMCPY_DTOD, 25, "device to device copy")                            \
	/* handle ctx, handle stream, u64 dst, u32 value, u32 elemsize,        \
	 * u64 count, u32 sync -> */                                           \
	X(MEMSET, 26, "memset 8/16/32")                                        \
	/* handle ctx, u32 kind, bytes image -> handle module */               \
	X(MODULE_LOAD, 30, "load a module image (cubin, fatbin, PTX)")         \
	X(MODULE_UNLOAD, 31, "handle ctx, handle module ->")                   \
	/* handle ctx, handle module, str name -> handle func, u32 nparams,   \
	 * (u32 offset, u32 size)[nparams] */                                  \
	X(MODULE_GET_FUNCTION, 32, "look up a kernel")                         \
	/* handle ctx, handle module, str name -> u64 dptr, u64 size, u32     \
	 * managed (1: a __managed__ variable, then u64 base, u64 len: the    \
	 * managed memory it lies in, as for LIBRARY_GET_MANAGED; a client    \
	 * reads on without the field, from an older server) */               \
	X(MODULE_GET_GLOBAL, 33, "look up a global")                           \
	/* handle ctx (0 = none), bytes image -> handle library */             \
	X(LIBRARY_LOAD, 34, "load a context-independent library")             \
	X(LIBRARY_UNLOAD, 35, "handle library ->")                             \
	/* handle library, str name -> handle kernel, u32 nparams, layout */  \
	X(LIBRARY_GET_KERNEL, 36, "look up a library kernel")                  \
	/* handle ctx, handle kernel -> handle func, u32 nparams, layout */                         \
	X(KERNEL_GET_FUNCTION, 37, "kernel's function in a context")           \
	/* handle ctx, handle library, str name -> as MODULE_GET_GLOBAL */    \
	X(LIBRARY_GET_GLOBAL, 38, "library global in a context")               \
	/* handle ctx, handle module -> u32 n, str name[n] */                 \
	X(MODULE_FUNCTIONS, 48, "names of a module's functions")              \
	/* handle ctx, handle library -> handle module (the library's module \
	 * in that context: owned by the library, not unloaded on its own) */  \
	X(LIBRARY_GET_MODULE, 49, "a library's module in a context")          \
	/* handle library -> u32 n, str name[n] */                            \
	X(LIBRARY_KERNELS, 55, "names of a library's kernels")                \
	/* handle ctx, handle library, str name -> u64 dptr, u64 size,       \
	 * u64 base, u64 len: a __managed__ variable, in the managed memory    \
	 * [base, base+len) the server's driver made for the library there    \
	 * (the client maps its host side at the same addresses) */            \
	X(LIBRARY_GET_MANAGED, 56, "a library's managed variable")            \
	/* handle library -> u32 count */                                     \
	X(LIBRARY_KERNEL_COUNT, 39, "number of kernels in a library")               \
	/* handle ctx, handle func, u32 grid[3], u32 block[3], u32 shmem,      \
	 * handle stream, bytes params (packed at the layout's offsets)        \
	 * [, u32 nattrs, (u32 id, 64 bytes value)[nattrs]: launch attributes  \
	 * whose values hold no handle] -> */                                  \
	X(LAUNCH, 40, "launch a kernel")                                       \
	/* handle ctx, handle func -> u32 n, i32 attr[n] */                    \
	X(FUNC_GET_ATTRS, 41, "all function attributes")                       \
	/* handle ctx, handle func, u32 attr, i32 value -> */                  \
	X(FUNC_SET_ATTR, 42, "set a function attribute")                       \
	/* handle ctx, handle func, u32 config -> */                           \
	X(FUNC_SET_CACHE, 43, "set cache preference")                          \
	/* handle ctx, handle func, i32 block, u64 smem, u32 flags -> i32 n */ \
	X(OCC_MAX_BLOCKS, 44, "occupancy: max active blocks per SM")           \
	/* handle ctx, handle func, i32 nblocks, i32 blocksize -> u64 bytes */ \
	X(OCC_DYN_SMEM, 45, "occupancy: dynamic shared memory per block")     \
	/* handle ctx, handle func, u32 grid[3], u32 block[3], u32 shmem,      \
	 * u32 nattrs, (u32 id, 64 bytes value)[nattrs] -> i32 clusters */     \
	X(OCC_MAX_CLUSTERS, 46, "occupancy: max active clusters")             \
	/* as OCC_MAX_CLUSTERS -> i32 the largest cluster size */              \
	X(OCC_CLUSTER_SIZE, 47, "occupancy: max potential cluster size")      \
	/* handle ctx, u32 flags, i32 priority -> handle stream */             \
	X(STREAM_CREATE, 50, "create a stream")                                \
	X(STREAM_DESTROY, 51, "handle ctx, handle stream ->")                  \
	X(STREAM_SYNC, 52, "handle ctx, handle stream ->")                     \
	/* handle ctx, handle stream -> (status CUDA_ERROR_NOT_READY if busy) */ \
	X(STREAM_QUERY, 53, "stream idle?")                                    \
	/* handle ctx, handle stream, handle event, u32 flags -> */            \
	X(STREAM_WAIT_EVENT, 54, "stream waits for an event")                  \
	/* handle ctx, u32 flags -> handle event */                            \
	X(EVENT_CREATE, 60, "create an event")                                 \
	X(EVENT_DESTROY, 61, "handle ctx, handle event ->")                    \
	/* handle ctx, handle event, handle stream -> */                       \
	X(EVENT_RECORD, 62, "record an event")                                 \
	X(EVENT_SYNC, 63, "handle ctx, handle event ->")                       \
	X(EVENT_QUERY, 64, "handle ctx, handle event ->")                      \
	/* handle ctx, handle start, handle end -> f32 ms (as u32 bits) */     \
	X(EVENT_ELAPSED, 65, "elapsed time between events")                 \
	/* Same host only (sessions over the Unix socket): shared memory.      \
	 * u32 kind (1: staging ring of u32 nslots chunks after a 4 KiB page  \
	 * of u32 slot states; 2: client host memory), u32 fd (the client's   \
	 * memfd: the server opens /proc/<peer pid>/fd/<fd>), u64 client base  \
	 * address, u64 size, u32 nslots -> */                                 \
	X(SHM_ATTACH, 70, "share memory with a same-host client")             \
	/* u64 client base -> */                                               \
	X(SHM_DETACH, 71, "stop sharing host memory")                          \
	/* handle ctx, handle stream, u64 dst, u64 total, u64 offset, u32     \
	 * slot, u32 len -> (answered only for the last chunk of a            \
	 * synchronous copy).  Slot states: 0 client's, 1 server's; the       \
	 * server hands a slot back once the GPU has read it. */               \
	X(SHM_HTOD, 72, "host to device through a staging slot")              \
	/* handle ctx -> : returns once a staging slot is free again */        \
	X(SHM_SLOT_WAIT, 73, "wait for a free staging slot")                  \
	/* handle ctx, handle stream, u64 src, u64 size -> reply frames        \
	 * (MORE on all but the last): u32 slot, u32 len; the client copies   \
	 * the slot out and hands it back */                                   \
	X(SHM_DTOH, 74, "device to host through staging slots")               \
	/* handle ctx, handle stream, u64 device address, u64 client host      \
	 * address (inside an attached host region), u64 size, u32 dir        \
	 * (0: to the device, 1: to the host), u32 sync -> */                  \
	X(SHM_HOSTCOPY, 75, "copy straight from/to shared host memory")       \
	/* Device memory at an address the client chose (managed and mapped   \
	 * host memory: the same address on both sides).                       \
	 * handle ctx, u64 addr (2 MiB aligned), u64 size (2 MiB multiple) ->  \
	 * (CUDA_ERROR_INVALID_VALUE if the address is taken here) */          \
	X(VMEM_MAP, 76, "device memory at a fixed address")                   \
	/* handle ctx, u64 addr -> */                                          \
	X(VMEM_UNMAP, 77, "release fixed-address device memory")             \
	/* u32 kind (1: InfiniBand verbs; 2: same-host shared-memory call      \
	 * queues, then u32 the client's memfd number, u64 queue bytes) ->     \
	 * (on failure: str why); on success both ends switch the connection  \
	 * to that transport right after this reply (nothing else may be in   \
	 * flight) */                                                          \
	X(TRANSPORT, 78, "switch the connection to another transport")        \
	/* CUDA graphs, captured on the server from the stream's work.         \
	 * handle ctx, handle stream, u32 mode -> */                          \
	X(CAPTURE_BEGIN, 90, "begin capturing a stream")                       \
	/* handle ctx, handle stream -> handle graph */                        \
	X(CAPTURE_END, 91, "end a capture: the graph")                         \
	/* handle ctx, handle graph, u64 flags -> handle exec */               \
	X(GRAPH_INSTANTIATE, 92, "instantiate a graph")                        \
	/* handle ctx, handle exec, handle stream -> (no reply) */             \
	X(GRAPH_LAUNCH, 93, "launch a graph")                                  \
	/* handle ctx, handle graph or exec, u32 is_exec -> */                 \
	X(GRAPH_DESTROY, 94, "destroy a graph or an executable graph")         \
	/* handle ctx, handle graph -> u64 nodes */                            \
	X(GRAPH_NODES, 95, "number of nodes in a graph")                       \
	/* handle ctx, handle stream -> u32 status */                          \
	X(CAPTURE_STATUS, 96, "is a stream capturing")                         \
	/* Server to client only: text the GPU printed (device printf), sent   \
	 * with the id and RGPU_F_REPLY of the synchronising call that flushed \
	 * it, before that call's reply.  Payload: the raw bytes. */           \
	X(OUTPUT, 97, "device printf output")                                  \
	/* Between two rgpuds only, after the HELLO of a peer copy (PEER_SEND \
	 * and PEER_RECV; numbered here, their range being full): the source  \
	 * sends i32 status then at most RGPU_CHUNK_SIZE of the bytes, each   \
	 * frame but the last with RGPU_F_MORE (a nonzero status ends the     \
	 * copy); the destination answers with one frame, i32 status. */      \
	X(PEER_DATA, 98, "a peer copy's bytes between two rgpuds")            \
	/* Lease management (see daemon/lease.h).  GRANT and RELEASE need an   \
	 * admin credential (root or the SlurmUser), LIST any valid one.  On  \
	 * failure the reply carries str message after the status:            \
	 * RGPU_ERR_AUTH (not admin), RGPU_ERR_PROTO, CUDA_ERROR_NOT_SUPPORTED \
	 * (rgpud without leases), CUDA_ERROR_INVALID_DEVICE (no such GPU),    \
	 * CUDA_ERROR_DEVICE_UNAVAILABLE (exclusive conflict),                \
	 * CUDA_ERROR_OUT_OF_MEMORY (no room for the slice),                  \
	 * CUDA_ERROR_ALREADY_ACQUIRED (job holds another lease on the GPU),   \
	 * CUDA_ERROR_OPERATING_SYSTEM (could not persist),                   \
	 * CUDA_ERROR_INVALID_VALUE (job 0, expiry in the past).               \
	 * u64 job_id, u32 uid, u32 gpu, u64 mem_limit (0 = whole GPU,         \
	 * exclusive), u64 expires (unix seconds, 0 = never) [, u32 share    \
	 * (compute share, percent 1..100; absent or 0 = none)] -> .  Granting \
	 * an identical lease again succeeds; one differing only in expires   \
	 * renews it. */                                                      \
	X(LEASE_GRANT, 80, "reserve a GPU (or a slice) for a job")             \
	/* u64 job_id -> u32 released (ends the job's sessions, frees memory) */ \
	X(LEASE_RELEASE, 81, "end a job's leases")                             \
	/* -> u32 ngpu, per GPU: (u32 gpu, str name, u64 total, u64 reserved   \
	 * (slices + per-slice context reserve; total when exclusive),        \
	 * u32 exclusive), u32 nlease, per lease: (u64 job_id, u32 uid,        \
	 * u32 gpu, u64 mem_limit, u64 used, u64 expires), then u32 nlease    \
	 * again and u32 share[nlease] (appended: older readers stop before), \
	 * then u64 ctx_reserve (the per-slice context reserve; absent from   \
	 * older servers: readers ignore what follows what they know) */       \
	X(LEASE_LIST, 82, "leases and GPU load")                               \
	/* Scheduling (daemon/sched/).  -> u32 n, per session: (u64 job,      \
	 * u32 uid, u32 gpu, u32 pid, u64 mem (bytes charged), u32 share      \
	 * (percent, 0 = none), u32 weight, u64 gpu_time_ns (attained, charged \
	 * by the scheduler), u64 busy_ns (its kernels' run time), u64        \
	 * resident, u64 swapped (bytes; 0 until the memory manager reports   \
	 * them), u64 age_ms), then str policy.  root and the SlurmUser see   \
	 * every session, anyone else only those of their own uid. */         \
	X(SESSION_LIST, 200, "live sessions and their attained GPU time")      \
	/* u32 share (percent 1..100) -> .  Lowers this session's compute     \
	 * share below its lease's (or 100 without one); never raises it. */  \
	X(SESSION_SHARE, 201, "lower this session's compute share") \
	/* Migration and recovery (daemon/migrate/, docs/design.md).  A        \
	 * session's state travels as the stream that                         \
	 * daemon/migrate/snapshot.h defines.                                 \
	 * -> reply frames (MORE on all but the last): the state stream; a     \
	 * last frame with a failure status carries str message instead. */    \
	X(SESSION_SAVE, 208, "capture the session's state (a checkpoint)")    \
	/* u32 mode (0: this connection goes on with the restored session;    \
	 * 1: the session waits for a client that attaches with the token),  \
	 * i32 gpu (-1: each context on its own GPU), then state bytes to the \
	 * end of the frame.  A longer stream goes on in further frames of     \
	 * the same shape, all but the last flagged NOREPLY; only a fresh      \
	 * session may be restored -> bytes token (16), u64 last_id (the last \
	 * request the source served); on failure str message */             \
	X(SESSION_RESTORE, 209, "restore a captured session")                 \
	/* Admin (root or the SlurmUser), to rgpud: str target "host:port",   \
	 * i32 gpu (-1: the same index), u64 session (a worker's pid, 0: every \
	 * one), u64 job (0: any), u32 drain (1: refuse new sessions from now) \
	 * -> u32 moved, u32 failed, str report (one line per session) */      \
	X(MIGRATE, 210, "move sessions to another server or GPU")             \
	/* Server to client only, unasked, id 0 (as OUTPUT): the session has   \
	 * moved.  str address "host:port", u32 gpu (the server's index there),\
	 * bytes token (16), u64 last_id; the connection then closes.  The     \
	 * client connects there, sends HELLO with the token, and sends again  \
	 * every request after last_id with its id. */                        \
	X(MOVED, 211, "the session moved: reconnect")                         \
	/* handle ctx, u64 dptr, u64 size -> : device memory at exactly dptr   \
	 * (recovery replays a cuMemAlloc whose address the client has seen)  \
	 * CUDA_ERROR_INVALID_VALUE if the address cannot be had here */       \
	X(MEM_ALLOC_AT, 212, "allocate device memory at an address") \
	/* Round trips saved (issue 13).  handle ctx, handle event, handle    \
	 * stream, u64 seq -> (sent with RGPU_F_NOREPLY) records the event as \
	 * EVENT_RECORD does; once that work has completed the server sends  \
	 * EVENT_DONE, so that the client answers cuEventQuery itself. */     \
	X(EVENT_RECORD_WATCH, 224, "record an event, say when it completes")  \
	/* Server to client only, id 0, RGPU_F_REPLY: i32 status (0), handle  \
	 * event, u64 seq of an EVENT_RECORD_WATCH whose work has completed   \
	 * (and so has every earlier record of that event). */                \
	X(EVENT_DONE, 225, "a watched event record has completed") \
	/* Admission and accounting (232-239).  u64 job_id -> u32 n, per lease \
	 * of the job: (u32 gpu, u64 mem_limit, u64 used, u64 peak (most       \
	 * device memory charged at once, contexts included), u64 held_ms     \
	 * (milliseconds the job's sessions held the GPU, summed over          \
	 * sessions), u64 attained_ns (their kernels' GPU time as the          \
	 * scheduler charges it)).  Root, the SlurmUser, or the job's uid. */  \
	X(LEASE_STATS, 232, "a job's peak memory and GPU time, per lease")                       \
	/* u64 job_id, u32 gpu, u64 mem_limit (0 = whole GPU), u32 ttl_s (0:  \
	 * drop the job's claim) -> .  Admin only.  A job waiting for room    \
	 * claims one GPU: other jobs' grants there count the claim as taken  \
	 * until it expires or the job's own grant converts it (lease.h).     \
	 * CUDA_ERROR_DEVICE_UNAVAILABLE: another job's claim holds the GPU. */ \
	X(LEASE_CLAIM, 233, "hold a GPU's room for a job waiting for it")

/* Application memory (apimem, 160-191): the VMM API, stream-ordered pools,
 * shareable handles, 2D memsets, peers, GPU status for NVML.  Device
 * numbers here are the server's GPU indices.  VMM addresses are the
 * client's choice, inside a 16 TiB window the session reserves on its
 * first map (the client reserves the same window in its address space). */
#define RGPU_OPS_APPMEM(X)                                                     \
	/* u32 gpu, u64 size (2 MiB multiple), u32 handle types               \
	 * (CUmemAllocationHandleType bits) -> handle phys */                  \
	X(VMM_CREATE, 160, "physical memory (cuMemCreate)")                    \
	X(VMM_RELEASE, 161, "handle phys -> (cuMemRelease)")                   \
	/* u64 addr, u64 size, u64 offset, handle phys -> */                   \
	X(VMM_MAP, 162, "map physical memory at an address")                  \
	/* u64 addr, u64 size -> */                                            \
	X(VMM_UNMAP, 163, "unmap a range")                                     \
	/* u64 addr, u64 size, u32 n, (u32 gpu, u32 flags)[n] -> */            \
	X(VMM_ACCESS, 164, "set access to a mapped range")                    \
	/* handle phys -> bytes16 token (importable by sessions of the same    \
	 * job and uid on this server) */                                      \
	X(VMM_EXPORT, 165, "export physical memory")                           \
	/* bytes16 token -> handle phys, u64 size, u32 gpu */                  \
	X(VMM_IMPORT, 166, "import exported physical memory")                 \
	/* handle ctx, handle stream, u64 dst, u64 pitch, u32 value,          \
	 * u32 elemsize, u64 width (elements), u64 height, u32 sync -> */      \
	X(MEMSET2D, 167, "2D memset 8/16/32")                                  \
	/* u32 gpu, u32 peer -> u32 can access, i32 performance rank,          \
	 * u32 native atomics */                                               \
	X(PEER_QUERY, 168, "can a GPU access a peer")                          \
	/* handle ctx, handle peer ctx, u32 enable -> */                       \
	X(PEER_ACCESS, 169, "enable or disable peer access")                   \
	/* handle ctx (the stream's, or the destination's), handle stream,   \
	 * u64 dst, handle dst ctx, u64 src, handle src ctx, u64 size,        \
	 * u32 sync -> */                                                      \
	X(MEMCPY_PEER, 170, "copy between GPUs of this server")              \
	/* u32 gpu, u64 release threshold, u64 max size -> handle pool */     \
	X(POOL_CREATE, 171, "create a memory pool")                            \
	X(POOL_DESTROY, 172, "handle pool ->")                                 \
	/* u32 gpu -> handle pool (the device's default pool) */              \
	X(POOL_DEFAULT, 173, "a GPU's default memory pool")                    \
	/* handle pool, u32 attr -> u64 value */                               \
	X(POOL_GET_ATTR, 174, "memory pool attribute")                         \
	/* handle pool, u32 attr, u64 value -> */                              \
	X(POOL_SET_ATTR, 175, "set a memory pool attribute")                  \
	/* handle pool, u64 keep -> */                                         \
	X(POOL_TRIM, 176, "trim a memory pool")                                \
	/* handle ctx, handle stream, handle pool (0: the context device's     \
	 * current pool), u64 size -> u64 dptr */                              \
	X(MEM_ALLOC_ASYNC, 177, "stream-ordered allocation")                  \
	/* handle ctx, handle stream, u64 dptr -> */                           \
	X(MEM_FREE_ASYNC, 178, "stream-ordered free")                          \
	/* u32 gpu -> str PCI bus id, u64 total, u64 used, u32 util gpu,       \
	 * u32 util memory (percent; 101: unknown), u32 n,                    \
	 * (u32 peer gpu, u32 p2p)[n], str kernel driver version, u32 nlinks, \
	 * (u32 link, str remote bus id, u32 remote type, u32 p2p)[nlinks],   \
	 * u32 PCI class code (0: unknown), u32 n, u32 sensor[n] (enum       \
	 * rgpu_sensor order; RGPU_SENSOR_UNKNOWN where the server cannot     \
	 * read one); a client reads on without the fields after the peers    \
	 * (older servers) */                                                 \
	X(GPU_STATUS, 179, "GPU status for NVML")                              \
	/* handle pool, u32 n, (u32 gpu, u32 flags)[n] -> */                   \
	X(POOL_ACCESS, 180, "set access to a memory pool")                   \
	/* CUDA arrays and texture and surface objects (daemon/ops_array.c).  \
	 * handle ctx, u64 width, u64 height, u64 depth, u32 format,           \
	 * u32 channels, u32 flags -> handle array (charged to the quota at   \
	 * width x height x depth x element size) */                          \
	X(ARRAY_CREATE, 181, "create a CUDA array")                           \
	X(ARRAY_DESTROY, 182, "handle array ->")                              \
	/* handle ctx, handle stream, u32 sync, then the source and the       \
	 * destination, each: u32 memory type (HOST, DEVICE, ARRAY), u64 x in  \
	 * bytes, u64 y, u64 z, u64 device address, handle array, u64 pitch,  \
	 * u64 height; then u64 width in bytes, u64 height, u64 depth, then a  \
	 * host source's bytes, packed (width x height x depth) -> a host      \
	 * destination's bytes, packed.  At most RGPU_COPY3D_MAX bytes. */    \
	X(MEMCPY3D, 183, "a 3D copy: arrays, pitched device memory, host")    \
	/* handle ctx, u32 surface (0: texture), bytes CUDA_RESOURCE_DESC     \
	 * (an array's handle in place of the CUarray), bytes                 \
	 * CUDA_TEXTURE_DESC, bytes CUDA_RESOURCE_VIEW_DESC (empty: none) ->  \
	 * u64 object (the driver's value, passed to kernels as it is) */     \
	X(TEXOBJ_CREATE, 184, "create a texture or surface object")          \
	/* handle ctx, u32 surface, u64 object -> */                          \
	X(TEXOBJ_DESTROY, 185, "destroy a texture or surface object")         \
	/* CUDA IPC (daemon/ops_ipc.c).  u64 dptr (the start of a cuMemAlloc  \
	 * allocation) -> bytes16 token of the physical memory under it (as   \
	 * VMM_EXPORT's: VMM_IMPORT takes it), u64 offset of dptr in that     \
	 * memory, u64 its size, u64 the allocation's size */                \
	X(IPC_EXPORT, 186, "export an allocation for cuIpcGetMemHandle")     \
	/* A restore (daemon/migrate/poolstate.c): handle pool (0: a pool    \
	 * destroyed since), u64 dptr, u64 size, u32 in use -> ; the session's \
	 * own allocation of exactly [dptr, dptr + size) becomes a block of   \
	 * that pool, in use or cached */                                     \
	X(POOL_ADOPT, 187, "make an allocation a pool's block (a restore)")   \
	/* CUDA IPC of events (daemon/ops_ipc.c).  handle ctx, handle event \
	 * (made CU_EVENT_INTERPROCESS) -> bytes16 token of the share        \
	 * registry, honoured for sessions of the same job and uid */         \
	X(IPC_EVENT_EXPORT, 188, "export an event for cuIpcGetEventHandle")   \
	/* handle ctx, bytes16 token -> handle event */                       \
	X(IPC_EVENT_OPEN, 189, "open an event for cuIpcOpenEventHandle")    \
	/* A copy between GPUs of two rgpuds, server to server               \
	 * (daemon/ops_peer_remote.c): the client sends PEER_SEND to the      \
	 * source's session and PEER_RECV to the destination's, with one     \
	 * random token; the destination's worker connects to the source's   \
	 * rgpud as the job's user (HELLO with the token), whose parent hands \
	 * the connection to the source's session, waiting for it; the bytes \
	 * go as PEER_DATA frames.                                            \
	 * One side answers for the copy (RGPU_PEER_ANSWERS: the one the      \
	 * client waits for, or whose stream it is), with either side's       \
	 * failure; the other answers 0 (its failure went to the first).      \
	 * handle ctx, handle stream (0: none), u64 src, u64 size, u32 flags  \
	 * (RGPU_PEER_*), bytes16 token -> (once the destination has the      \
	 * bytes) */                                                          \
	X(PEER_SEND, 190, "send a peer copy's bytes to another rgpud")        \
	/* handle ctx, handle stream (0: none), u64 dst, u64 size, u32 flags  \
	 * (RGPU_PEER_*), str source host, u32 source port, bytes16 token -> */ \
	X(PEER_RECV, 191, "fetch a peer copy's bytes from another rgpud")

/* Graphs, host functions, attributes, the linker (graphs, 128-159). */
#define RGPU_OPS_GRAPHS(X)                                                     \
	/* Host functions (cuLaunchHostFunc, cuStreamAddCallback, graph host  \
	 * nodes) run on the client in stream order: the server queues a host \
	 * function of its own that tells the client (a reply to its pending  \
	 * HOSTFN_WAIT) and holds the stream until HOSTFN_DONE.                \
	 * handle ctx, handle stream, u64 client id -> u32 captured (1: it  \
	 * became a node of a graph being captured, not due now) */           \
	X(HOSTFN_LAUNCH, 128, "queue a client host function on a stream")     \
	/* -> u32 n, (u64 seq, u64 client id)[n]: host functions the streams  \
	 * have reached; answered only once there is at least one (a long    \
	 * poll; the client keeps one pending while host functions are out). */ \
	X(HOSTFN_WAIT, 129, "wait for reached host functions")                \
	/* u64 seq -> (sent without a reply) */                               \
	X(HOSTFN_DONE, 130, "a host function returned: the stream goes on")   \
	/* Explicit graphs: one opcode, a sub-operation and its arguments     \
	 * (daemon/ops_graph.c documents each).  handle ctx, u32 sub, ... ->  \
	 * per sub. */                                                         \
	X(GRAPH_OP, 133, "explicit graph construction, update and queries")   \
	/* handle ctx, u32 nopts, (u32 opt, u64 value)[nopts] (options whose  \
	 * values are numbers), u32 ninputs, (u32 type, str name, bytes       \
	 * data)[ninputs] -> bytes cubin, str info log, str error log (the   \
	 * logs also on failure, after the status) */                         \
	X(LINK, 134, "link images with the JIT linker: the linked cubin")     \
	/* A plain driver call (client/driver-api.calls): handle ctx, str     \
	 * name, u32 nargs, per argument u32 kind (enum rgpu_arg) then: VAL,  \
	 * DEVICE u64; STREAM, EVENT, FUNC handle; IN, INOUT bytes; OUT u64   \
	 * size -> per OUT and INOUT argument, in order: bytes.  The server    \
	 * refuses a call it does not list or whose kinds or sizes differ     \
	 * from its own table (CUDA_ERROR_NOT_SUPPORTED, INVALID_VALUE). */    \
	X(CALL, 135, "a plain driver call, described by a table")

/* Opcode ranges reserved per area (append inside your range; never renumber):
 *   98-127 general, 128-159 graphs, host functions, attributes, linker,
 *   160-191 pools, VMM for applications, IPC, peers, registered memory,
 *   192-199 memory manager (swap, wait), 200-207 scheduling and session
 *   listing, 208-223 migration and recovery, 224-231 call statistics and
 *   round-trip savings, 232-239 admission and accounting. */
enum rgpu_op {
#define RGPU_OP_ENUM(name, num, doc) RGPU_OP_##name = num,
	RGPU_OPS(RGPU_OP_ENUM)
	RGPU_OPS_APPMEM(RGPU_OP_ENUM)
	RGPU_OPS_GRAPHS(RGPU_OP_ENUM)
#undef RGPU_OP_ENUM
	RGPU_OP_MAX = 256,
};

/* PEER_SEND and PEER_RECV flags. */
enum rgpu_peer_flag {
	RGPU_PEER_ANSWERS = 1, /* this side's reply is the copy's status */
	RGPU_PEER_WHOLE = 2,   /* PEER_SEND: all the context's work first (the
				* copy's stream is the destination's) */
	RGPU_PEER_SYNC = 4,    /* PEER_RECV: written before the reply */
};

/* Argument kinds of CALL. */
enum rgpu_arg {
	RGPU_ARG_VAL = 1,   /* an integer or enum, by value */
	RGPU_ARG_STREAM,    /* handles: the session's ids */
	RGPU_ARG_EVENT,
	RGPU_ARG_FUNC,
	RGPU_ARG_DEVICE,    /* a GPU index on the server */
	RGPU_ARG_IN,        /* bytes sent */
	RGPU_ARG_OUT,       /* bytes returned */
	RGPU_ARG_INOUT,     /* both */
};
#define RGPU_CALL_MAX_ARGS 16

/* GRAPH_OP sub-operations.  Every one starts "handle ctx, u32 sub".
 * Node parameters ("params" below, by node type):
 *   KERNEL: handle func, u32 grid[3], u32 block[3], u32 shmem, bytes
 *           params (packed at the function's layout offsets)
 *   MEMCPY: u64 src, u64 dst (device addresses), u64 srcPitch, u64
 *           dstPitch, u64 srcHeight, u64 dstHeight, u64 widthBytes,
 *           u64 height, u64 depth
 *   MEMSET: u64 dst, u64 pitch, u32 value, u32 elemsize, u64 width,
 *           u64 height
 *   HOST: u64 client id (a host function, HOSTFN_WAIT names it)
 *   WAIT_EVENT, EVENT_RECORD: handle event;  GRAPH: handle child graph
 *   MEM_ALLOC: u64 bytes (on the context's device) -> u64 dptr
 *   MEM_FREE: u64 dptr;  EMPTY: nothing
 *   BATCH_MEM_OP: u32 count (1..RGPU_G_MEMOPS_MAX), u32 flags, bytes
 *           CUstreamBatchMemOpParams[count] (raw; their addresses are
 *           device addresses)
 *   CONDITIONAL: u64 cond handle, u32 cond type, u32 size -> u32 n,
 *           handle body graph[n]
 * Graphs a graph owns (child graphs, conditional bodies) get handles that
 * cannot be destroyed on their own. */
#define RGPU_G_DEPS_EDGE_DATA 2u
#define RGPU_G_MEMOPS_MAX 256u

/* A graph edge's data (CUgraphEdgeData's from_port, to_port and type) as
 * RGPU_G_DEPS and RGPU_G_EDGES carry it: a byte each from the lowest */
static inline uint32_t rgpu_edge_word(unsigned char from_port, unsigned char to_port,
				      unsigned char type)
{
	return (uint32_t)from_port | (uint32_t)to_port << 8 | (uint32_t)type << 16;
}

static inline void rgpu_edge_fields(uint32_t w, unsigned char *from_port, unsigned char *to_port,
				    unsigned char *type)
{
	*from_port = (unsigned char)w;
	*to_port = (unsigned char)(w >> 8);
	*type = (unsigned char)(w >> 16);
}

enum rgpu_graph_sub {
	RGPU_G_CREATE = 1,      /* u32 flags -> handle graph */
	/* handle graph, u32 ndeps, handle dep[ndeps], u32 type, params ->
	 * handle node, then what the type returns */
	RGPU_G_ADD = 2,
	/* handle graph, u32 flags (1 remove, RGPU_G_DEPS_EDGE_DATA), u32 n,
	 * (handle from, handle to)[n], with EDGE_DATA then u32 edge[n] (from
	 * port, to port, type: a byte each from the lowest) -> */
	RGPU_G_DEPS = 3,
	/* handle graph -> u32 n, (handle node, u32 type)[n] */
	RGPU_G_NODES = 4,
	/* handle graph -> u32 n, (handle from, handle to)[n], then where the
	 * server has it each edge's data (u32, as RGPU_G_DEPS sends it)[n] */
	RGPU_G_EDGES = 5,
	RGPU_G_DESTROY_NODE = 6, /* handle node -> */
	/* handle node, u32 type, params -> (KERNEL, MEMCPY, MEMSET, HOST,
	 * EVENT_RECORD, WAIT_EVENT, BATCH_MEM_OP) */
	RGPU_G_SET = 7,
	/* handle exec, handle node, u32 type, params -> (those and GRAPH) */
	RGPU_G_EXEC_SET = 8,
	/* handle exec, handle graph -> u32 result, handle error node */
	RGPU_G_EXEC_UPDATE = 9,
	/* handle graph -> handle clone, u32 n, (handle node, handle its
	 * clone)[n] */
	RGPU_G_CLONE = 10,
	/* handle graph, u32 default value, u32 flags -> u64 cond handle */
	RGPU_G_COND_HANDLE = 11,
	/* handle stream -> u32 status, u64 capture id, handle graph, u32 n,
	 * handle dep[n] (the graph being captured and its current ends) */
	RGPU_G_CAPTURE_INFO = 12,
	/* handle stream, u32 flags, u32 n, handle dep[n] -> */
	RGPU_G_CAPTURE_DEPS = 13,
	RGPU_G_MEM_TRIM = 14,    /* -> (the context's device) */
	/* handle stream, handle graph, u32 mode, u32 n, handle dep[n] -> :
	 * the capture adds to that graph after those nodes */
	RGPU_G_CAPTURE_TO_GRAPH = 15,
	/* handle exec, handle node, u32 enabled (0 or 1) -> */
	RGPU_G_SET_ENABLED = 16,
	/* handle exec, handle node -> u32 enabled */
	RGPU_G_GET_ENABLED = 17,
	/* handle node -> handle graph: the child graph the node owns (a
	 * child of the node's graph: not destroyable on its own) */
	RGPU_G_CHILD_GRAPH = 18,
	/* handle node, u32 attr (CUlaunchAttributeID) -> the value's bytes
	 * (RGPU_G_KATTR_BYTES, raw) */
	RGPU_G_KATTR_GET = 19,
	/* handle node, u32 attr, value (RGPU_G_KATTR_BYTES, raw) -> */
	RGPU_G_KATTR_SET = 20,
	/* handle dst node, handle src node -> */
	RGPU_G_KATTR_COPY = 21,
	/* handle exec -> u64 flags (as the server's driver reports them) */
	RGPU_G_EXEC_FLAGS = 22,
};

/* GREEN_OP sub-operations.  A device resource (CUdevResource) travels as
 * the server's driver made it: bytes, RGPU_GREEN_RES_BYTES of them (its
 * internal part means something to that driver only). */
enum rgpu_green_sub {
	RGPU_GR_DEV_RESOURCE = 1, /* u32 dev, u32 type -> bytes resource */
	/* (ctx) u32 type, u32 of the green context (cuGreenCtxGetDevResource)
	 * -> bytes resource */
	RGPU_GR_CTX_RESOURCE = 2,
	/* u32 groups (0: count them only), u32 flags, u32 min count, u32
	 * want remaining, bytes input -> u32 groups, bytes result[groups]
	 * (none when counting), with want remaining bytes remaining */
	RGPU_GR_SPLIT = 3,
	/* u32 n (1..RGPU_GREEN_DESC_MAX), bytes resource[n] -> handle desc */
	RGPU_GR_DESC = 4,
	/* handle desc, u32 dev, u32 flags -> handle ctx (the green context as
	 * a context: CTX_DESTROY destroys it), u64 the driver's green id */
	RGPU_GR_CREATE = 5,
};
#define RGPU_GREEN_RES_BYTES 144u
#define RGPU_GREEN_DESC_MAX 64u

/* GPU_STATUS's sensors, as the server's NVML reads them (for rgpu's NVML:
 * nvidia-smi's temperature, power and clock fields). */
enum rgpu_sensor {
	RGPU_SENSOR_TEMP_C,         /* GPU temperature, degrees C */
	RGPU_SENSOR_POWER_MW,       /* power draw, milliwatts */
	RGPU_SENSOR_POWER_LIMIT_MW, /* enforced power limit, milliwatts */
	RGPU_SENSOR_CLOCK_SM_MHZ,   /* SM clock */
	RGPU_SENSOR_CLOCK_MEM_MHZ,  /* memory clock */
	RGPU_SENSOR_PSTATE,         /* performance state, 0 (P0) to 15 */
	RGPU_SENSORS
};
#define RGPU_SENSOR_UNKNOWN 0xffffffffu

/* A kernel node attribute's value on the wire: CUlaunchAttributeValue
 * (CUkernelNodeAttrValue) as it lies in memory; the values that hold a
 * handle (events) are not sent. */
#define RGPU_G_KATTR_BYTES 64

/* Module image kinds in MODULE_LOAD, from what the client could size. */
enum rgpu_image_kind {
	RGPU_IMAGE_FATBIN = 1,
	RGPU_IMAGE_ELF = 2,
	RGPU_IMAGE_PTX = 3,
};

const char *rgpu_op_name(unsigned op);

#endif
