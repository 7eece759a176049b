/*
 * A session's state as one stream: what migration sends from server to
 * server and what a checkpoint keeps for recovery.  This header is the one
 * place the stream's format is defined (docs/design.md, "Migration").
 *
 *   stream  := record*            (the first is HEADER, the last END)
 *   record  := u32 tag, u32 zero, u64 len, payload[len]   (little endian)
 *
 *   HEADER  bytes8 "RGPUSNAP", u32 version (1), u32 uid, u32 gid, u64 job,
 *           u64 last_id (the last request id the source served),
 *           u32 ngpu, then per GPU the session used: u32 gpu
 *   TABLE   the handle table's layout: u32 n, u32 gen[n], u32 nfree,
 *           u32 freel[nfree] (ids made after a restore are the source's)
 *   CREATE  one request that made or changed an object, in the order the
 *           source served them: u16 op, u16 zero, u32 plen, u64 id (the
 *           handle it made, 0 if none), u64 result (a global's address),
 *           u64 place (where the device placed that object's data, 0:
 *           unknown), payload[plen] (the request as the client sent it:
 *           module and library images included)
 *   IDS     u32 n, u64 id[n]: the handles the next CREATE record's request
 *           made, in the order it made them (a graph request: a graph, an
 *           executable, nodes; that CREATE's own id is 0).  CREATE records
 *           of graph requests come after every MEMORY record (journal.c),
 *           or, on a move within a server, after the PREP records ahead of
 *           the pause (with those made since in the pause)
 *   MEMORY  u64 dptr, u64 size, u64 ctx, u32 dev, u32 kind (MEMK_*),
 *           then the size bytes of device memory
 *   PEER    u64 dptr, u64 size, u64 ctx, u32 dev, u32 kind, u8 token[16],
 *           u64 va, u64 len: the same memory by reference, for a target
 *           worker of the same rgpud (a move between its GPUs): the token
 *           names, in the parent's share registry, the physical memory
 *           mapped at [va, va + len) in the source, which holds
 *           [dptr, dptr + size); kind MEMK_ALLOC (re-created at dptr) or
 *           MEMK_FIXED (an application VMM mapping, made again by the
 *           CREATE records before it); the target maps the source's
 *           physical memory and copies GPU to GPU
 *   PREP    the fields of a PEER record, sent ahead of a move's pause:
 *           the target re-creates that memory and maps the source's block
 *           now; a PEER record of the pause that names the same memory
 *           only copies, and prepared memory no PEER record names (freed
 *           meanwhile) is freed before anything else is re-created
 *   SYNC    (empty) the objects sent ahead of a move's pause end here: the
 *           reader answers once it has re-created them (a SESSION_RESTORE
 *           reply of status 0 whose fields are u32 SNAP_SYNC_ACK), and the
 *           rest of the stream follows when the source has paused
 *   LAST    u64 last_id: the last request the source served, when the
 *           HEADER went out before the pause (then it says 0)
 *   END     u64 records before it
 *
 * A reader refuses unknown tags, lengths that disagree with their fields,
 * and a stream without END: a truncated stream restores nothing.
 */
#ifndef RGPUD_MIGRATE_SNAPSHOT_H
#define RGPUD_MIGRATE_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#define SNAP_MAGIC "RGPUSNAP"
#define SNAP_VERSION 1
#define SNAP_REC_HDR 16
#define SNAP_MAX_GPUS 64

enum snap_tag {
	SNAP_HEADER = 1,
	SNAP_TABLE = 2,
	SNAP_CREATE = 3,
	SNAP_MEMORY = 4,
	SNAP_END = 5,
	SNAP_PEER = 6,
	SNAP_SYNC = 7,
	SNAP_LAST = 8,
	SNAP_PREP = 9,
	SNAP_IDS = 10,
};

#define SNAP_SYNC_ACK 0x434e5953u /* "SYNC" */

/* The stream's little-endian fields of n bytes: written, read. */
static inline void snap_le(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint64_t snap_gl(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* MEMORY kinds */
enum {
	MEMK_ALLOC = 0,  /* cuMemAlloc'd: re-created at dptr */
	MEMK_FIXED = 1,  /* at an address the client chose (VMEM_MAP): its
			  * CREATE record re-maps it, the bytes follow */
	MEMK_GLOBAL = 2, /* a module's or library's global */
};

struct session;

/* Where a stream goes or comes from. */
struct snap_io {
	int (*write)(void *arg, const void *p, size_t n); /* 0 or -1 */
	/* (optional) as write, for bytes that stay as they are until the
	 * journal thaws (a record's payload, frozen: journal_freeze), so they
	 * may be sent from where they lie, later */
	int (*write_ref)(void *arg, const void *p, size_t n);
	int (*read)(void *arg, void *p, size_t n);        /* all n bytes: 0, or -1 */
	void *arg;
	/* capture: the reader is a worker of this rgpud whose GPU can reach
	 * the session's GPUs (peer access), so movable device memory may go
	 * as PEER records; ref_bytes counts what went so */
	int by_ref;
	uint64_t ref_bytes;
	/* capture: how long the session's work took to drain */
	uint64_t drain_ns;
	/* restore: a SYNC record was read (NULL: SYNC is refused) */
	int (*sync)(void *arg);
};

/* What went ahead of a move's pause (snap_capture_ahead). */
struct snap_ahead {
	uint64_t seq;  /* the journal's records up to this one */
	uint64_t nrec; /* records written */
	/* the application's VMM memory went ahead too (its requests, made
	 * from the live state), as of this count of VMM requests */
	int vmm_sent;
	uint64_t vmm_gen;
	/* the graph records up to this one went too (0: none) */
	uint64_t graph_seq;
};

/* A move's first part, while the session runs on: HEADER, every CREATE
 * record (contexts first, as a capture orders them), with io->by_ref a
 * PREP record for each allocation that can go by reference, SYNC; the journal is
 * frozen (journal_freeze) so that the rest can say whether they still
 * hold.  0, or -1 with why[] set. */
int snap_capture_ahead(struct session *s, struct snap_io *io, struct snap_ahead *a, char *why,
		       size_t whylen);

/* The session's state after draining its work (capture.c): 0, or -1 with
 * why[] saying what cannot be moved or that the sink failed, -3 (nothing
 * written) when it cannot only while something under way lasts (a host
 * function, a stream capture).  ahead: what snap_capture_ahead sent
 * (NULL: nothing), then only the rest goes, and -2 (nothing written) when
 * an object sent ahead changed or went since. */
int snap_capture(struct session *s, uint64_t last_id, struct snap_io *io,
		 const struct snap_ahead *ahead, char *why, size_t whylen);

/* Drops what a capture exported for a move by reference (PEER, PREP
 * records: the move is over either way). */
void snap_exports_drop(struct session *s);

/* What a restore learnt from the header. */
struct snap_info {
	uint32_t uid, gid;
	uint64_t job, last_id;
	uint32_t ngpu;
	uint32_t gpus[SNAP_MAX_GPUS];
	/* where the restore's time went (the log says it): objects re-created
	 * (modules loaded again, contexts) and device memory copied in */
	uint64_t create_ns, mem_ns, mem_bytes;
	uint64_t peer_bytes; /* of them, copied GPU to GPU (PEER records) */
	/* memory made ready ahead of the pause (PREP records), and of it what
	 * the pause found unchanged */
	uint64_t prep_ns, prep_bytes, prep_used;
	uint64_t prep_vmm; /* application VMM memory whose source blocks were mapped ahead */
	/* mapping the source's blocks here (for PREP and PEER records), and
	 * the objects made in the pause (after the SYNC record) */
	uint64_t map_ns;
	uint32_t pause_creates;
	/* a move's pause here: from the SYNC record's answer to the next
	 * record (the source pausing and sending), to the answer; the end of
	 * the stream to the answer; GPU-to-GPU copies queued as their records
	 * came (the rest after the stream's end), and how long the copies
	 * took from the first queued to the last done */
	uint64_t pause_wait_ns, pause_ns, tail_ns;
	uint64_t copy_early, copy_ns;
	/* of the pause's records: PEER records and the time they took, of
	 * it queueing copies (calls, time), and the handle table's */
	uint64_t peer_recs, peer_ns, copy_calls, copy_queue_ns, table_ns;
	/* the kind of request whose re-creation took longest in all, and how
	 * long (where a move's pause goes) */
	uint16_t slow_op;
	uint32_t slow_n;
	uint64_t slow_ns;
	/* the graph records replayed (journal.c), and how long they took */
	uint64_t graph_recs, graph_ns, graph_pause; /* (of them in the pause) */
};

/* Rebuilds a captured session into s, a fresh one (restore.c).  gpu_to:
 * the GPU every context moves to, or -1 to keep each one's.  0, or a
 * CUresult (or -1 for a malformed stream) with why[] set. */
struct snap_defer;
int snap_restore(struct session *s, const struct snap_io *io, int gpu_to, struct snap_info *info,
		 char *why, size_t whylen, struct snap_defer **defer);
/* defer (may be NULL: all is done before snap_restore returns): the
 * GPU-to-GPU copies of memory, left to snap_restore_finish once the
 * restore is answered, so that they run while the client re-attaches;
 * *defer stays NULL when there are none.  finish: 0, or -1 with why[];
 * either way the source's memory is then the caller's to let go
 * (snap_restore_done).  cancel: the restore failed after all. */
uint64_t snap_defer_bytes(const struct snap_defer *d);
int snap_restore_finish(struct snap_defer *d, struct snap_info *info, char *why, size_t whylen);
void snap_restore_cancel(struct snap_defer *d);
/* After a successful restore has been answered: lets go of the source's
 * memory it mapped to copy from. */
void snap_restore_done(void);
/* The same on a thread of its own (a client waits to attach meanwhile). */
void snap_restore_release_later(void);

/* journal.c: the requests that made the session's live objects, kept for
 * capture.  Called after every request with its status (only successful
 * ones that create, change or destroy an object are kept or acted on). */
void journal_note(struct session *s, uint16_t op, const uint8_t *payload, size_t plen, int status,
		  const uint8_t *reply, size_t rlen);
void journal_free(struct session *s);
/* Visits the kept records in order; stops at a nonzero return. */
struct journal_rec {
	uint16_t op;
	uint64_t seq; /* 1, 2, ... in the order served */
	uint64_t id, ctx, parent, result, place;
	size_t plen;
	uint8_t *payload;
	/* a request that built a graph (a capture's, an explicit graph's, an
	 * instantiation, an update, a destruction): replayed after everything
	 * else, never ahead of a pause; ids: the handles it made, in order */
	int graph;
	uint64_t *ids;
	uint32_t nids;
};
/* Sending ahead (a move's objects before its pause): the records up to
 * seq are frozen; 0 while none changed or went since (a capture then sends
 * only what came after), -1 when one did.  journal_freeze(s, 0) ends it. */
void journal_freeze(struct session *s, uint64_t seq);
int journal_frozen_intact(struct session *s);
/* How many requests changed the application's VMM memory so far: what
 * went ahead of a pause is still so while it stays the same. */
uint64_t journal_vmm_gen(struct session *s);
int journal_each(struct session *s, int (*fn)(void *arg, const struct journal_rec *r), void *arg);
/* Whether the session holds state that cannot be captured; why. */
const char *journal_unmovable(struct session *s);
/* A request served in a capture could not be kept (why: a constant): the
 * session's graphs are not replayed, and a move refuses the session. */
void journal_graph_unreplayable(struct session *s, const char *why);

#endif
