/* Streams and events. */
#include "client.h"
#include "log.h"
#include "stats.h"

#include <stdlib.h>

/* ---- what the client knows has finished (client.h) ----
 *
 * Request ids count the requests sent on a connection.  A mark taken
 * before a call is at most that call's id; when the call proves a stream
 * idle (its synchronisation returned, or data copied from it came back),
 * the mark is stored with the stream.  If the connection's last id is
 * still the mark, nothing was sent since, so nothing can have been queued
 * since: a synchronisation or query of that stream is answered here.  An
 * event is done when a proof taken after its record (a mark above the
 * record's id) covers its stream.  Nothing sent since also means no
 * deferred error can have arisen from this client's work: the proving
 * reply reported any there was. */

uint64_t rc_idle_mark(struct rc_conn *c)
{
	return __atomic_load_n(&c->next_id, __ATOMIC_ACQUIRE) + 1;
}

int rc_idle_now(struct rc_conn *c, uint64_t mark)
{
	return mark && __atomic_load_n(&c->next_id, __ATOMIC_ACQUIRE) == mark;
}

static void store_max(uint64_t *p, uint64_t v)
{
	uint64_t cur = __atomic_load_n(p, __ATOMIC_RELAXED);
	while (cur < v &&
	       !__atomic_compare_exchange_n(p, &cur, v, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED))
		;
}

static int is_legacy(uint64_t sh)
{
	return sh == 0 || sh == (uint64_t)(uintptr_t)CU_STREAM_LEGACY;
}

void rc_stream_idle(struct rc_ctx *c, CUstream s, uint64_t sh, uint64_t mark)
{
	if (is_legacy(sh))
		store_max(&c->idle_legacy, mark);
	else if (s && s != CU_STREAM_PER_THREAD && ((struct rc_stream *)s)->magic == RC_STREAM)
		store_max(&((struct rc_stream *)s)->idle_at, mark);
}

/* Everything queued on stream s (sh) of c has finished: answered here. */
static int known_idle(struct rc_ctx *c, CUstream s, uint64_t sh)
{
	struct rc_conn *conn = c->dev->conn;
	if (rc_idle_now(conn, __atomic_load_n(&c->idle_all, __ATOMIC_ACQUIRE)))
		return 1;
	if (is_legacy(sh))
		return rc_idle_now(conn, __atomic_load_n(&c->idle_legacy, __ATOMIC_ACQUIRE));
	if (!s || s == CU_STREAM_PER_THREAD)
		return 0;
	return rc_idle_now(conn, __atomic_load_n(&((struct rc_stream *)s)->idle_at,
						  __ATOMIC_ACQUIRE));
}

/* An untracked event (recorded during a capture: the graph records it
 * later) is never known done here. */
#define REC_UNTRACKED UINT64_MAX

static int event_done(struct rc_event *ev)
{
	/* another process may record an interprocess event: only the
	 * server knows */
	if (ev->flags & CU_EVENT_INTERPROCESS)
		return 0;
	uint64_t rec = __atomic_load_n(&ev->rec_id, __ATOMIC_ACQUIRE);
	if (!rec)
		return 1; /* never recorded: CUDA counts it as done */
	if (rec == REC_UNTRACKED)
		return 0;
	struct rc_ctx *c = ev->ctx;
	if (__atomic_load_n(&ev->rec_watched, __ATOMIC_ACQUIRE) &&
	    __atomic_load_n(&ev->done_seq, __ATOMIC_ACQUIRE) >=
		    __atomic_load_n(&ev->rec_seq, __ATOMIC_ACQUIRE))
		return 1;
	return __atomic_load_n(&ev->done_at, __ATOMIC_ACQUIRE) > rec ||
	       __atomic_load_n(&c->idle_all, __ATOMIC_ACQUIRE) > rec ||
	       (__atomic_load_n(&ev->rec_legacy, __ATOMIC_ACQUIRE) &&
		__atomic_load_n(&c->idle_legacy, __ATOMIC_ACQUIRE) > rec);
}

/* ---- events whose completion the server pushes ----
 *
 * An event the application polls (a cuEventQuery that had to ask the
 * server) is watched from its next record on: the record goes as
 * EVENT_RECORD_WATCH with a number, and the server sends EVENT_DONE with
 * that number once the work before it has completed.  A query then reads
 * what has arrived (rc_poll, no waiting) and answers itself: done, or not
 * yet (the notice is at most one one-way trip behind).  The server says
 * so when it cannot watch a record; that record is asked about again. */

static pthread_mutex_t watch_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rc_event **watched;
static size_t nwatched, capwatched;

static void watch_add(struct rc_event *ev)
{
	pthread_mutex_lock(&watch_lock);
	if (nwatched == capwatched) {
		size_t cap = capwatched ? capwatched * 2 : 32;
		struct rc_event **p = realloc(watched, cap * sizeof(*p));
		if (!p) {
			pthread_mutex_unlock(&watch_lock);
			return; /* not watched: its queries ask the server */
		}
		watched = p;
		capwatched = cap;
	}
	watched[nwatched++] = ev;
	__atomic_store_n(&ev->want_watch, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&watch_lock);
}

static void watch_drop(struct rc_event *ev)
{
	if (!__atomic_load_n(&ev->want_watch, __ATOMIC_ACQUIRE))
		return;
	pthread_mutex_lock(&watch_lock);
	for (size_t i = 0; i < nwatched; i++)
		if (watched[i] == ev) {
			watched[i] = watched[--nwatched];
			break;
		}
	pthread_mutex_unlock(&watch_lock);
}

void rc_event_notice(struct rc_conn *c, int32_t status, uint64_t h, uint64_t seq)
{
	pthread_mutex_lock(&watch_lock);
	for (size_t i = 0; i < nwatched; i++) {
		struct rc_event *ev = watched[i];
		if (ev->h == h && ev->ctx->dev->conn == c) {
			store_max(status ? &ev->unwatched_seq : &ev->done_seq, seq);
			break;
		}
	}
	pthread_mutex_unlock(&watch_lock);
}

/* The last record is watched and the server has not said it gave up. */
static int watch_pending(struct rc_event *ev)
{
	return __atomic_load_n(&ev->rec_watched, __ATOMIC_ACQUIRE) &&
	       __atomic_load_n(&ev->unwatched_seq, __ATOMIC_ACQUIRE) <
		       __atomic_load_n(&ev->rec_seq, __ATOMIC_ACQUIRE);
}

CUresult rc_stream_resolve(CUstream s, struct rc_ctx **ctx, uint64_t *h)
{
	/* NULL and the special handles act in the current context */
	if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) {
		CUresult rc = rc_need_ctx(ctx);
		*h = (uint64_t)(uintptr_t)s;
		return rc;
	}
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	struct rc_stream *st = (struct rc_stream *)s;
	if (st->magic != RC_STREAM)
		return CUDA_ERROR_INVALID_HANDLE;
	*ctx = st->ctx;
	*h = st->h;
	return CUDA_SUCCESS;
}

static CUresult two_handles(struct rc_ctx *c, uint16_t op, uint64_t a)
{
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u64(w, a);
	struct rd r;
	return rc_call(c->dev->conn, op, w, &r);
}

/* A stream of c on the server: its handle in *h. */
static CUresult stream_make(struct rc_ctx *c, unsigned flags, int prio, uint64_t *h)
{
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u32(w, flags);
	put_i32(w, prio);
	struct rd r;
	CUresult rc = rc_call(c->dev->conn, RGPU_OP_STREAM_CREATE, w, &r);
	if (!rc)
		*h = get_u64(&r);
	return rc;
}

RC_EXPORT CUresult cuStreamCreateWithPriority(CUstream *ps, unsigned int flags, int prio)
{
	struct rc_ctx *c;
	CUresult rc = rc_need_ctx(&c);
	if (rc)
		return rc;
	if (!ps)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t h;
	uint64_t mark = rc_idle_mark(c->dev->conn); /* a new stream is idle */
	if ((rc = stream_make(c, flags, prio, &h)))
		return rc;
	struct rc_stream *st = calloc(1, sizeof(*st));
	if (!st)
		return CUDA_ERROR_OUT_OF_MEMORY;
	st->magic = RC_STREAM;
	st->ctx = c;
	st->h = h;
	st->flags = flags;
	st->priority = prio;
	st->idle_at = mark;
	*ps = (CUstream)st;
	return CUDA_SUCCESS;
}

CUresult rc_stream_internal(struct rc_ctx *c, uint64_t *h)
{
	uint64_t have = __atomic_load_n(&c->own_stream, __ATOMIC_ACQUIRE);
	if (have) {
		*h = have;
		return CUDA_SUCCESS;
	}
	uint64_t made;
	CUresult rc = stream_make(c, CU_STREAM_NON_BLOCKING, 0, &made);
	if (rc)
		return rc;
	/* two threads at once: the first stays, the other's is destroyed */
	uint64_t expect = 0;
	if (!__atomic_compare_exchange_n(&c->own_stream, &expect, made, 0, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE)) {
		(void)two_handles(c, RGPU_OP_STREAM_DESTROY, made);
		made = expect;
	}
	*h = made;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuStreamCreate(CUstream *ps, unsigned int flags)
{
	return cuStreamCreateWithPriority(ps, flags, 0);
}

RC_EXPORT CUresult cuStreamDestroy_v2(CUstream s)
{
	struct rc_stream *st;
	CUresult rc = rc_obj(s, RC_STREAM, &st);
	if (rc)
		return rc;
	rc = two_handles(st->ctx, RGPU_OP_STREAM_DESTROY, st->h);
	rc_stream_capture_gone(s);
	st->magic = 0;
	free(st);
	return rc;
}

RC_EXPORT CUresult cuStreamDestroy(CUstream s) { return cuStreamDestroy_v2(s); }

RC_EXPORT CUresult cuStreamSynchronize(CUstream s)
{
	struct rc_ctx *c;
	uint64_t h;
	uint64_t e = rc_coh_epoch();
	CUresult rc = rc_stream_resolve(s, &c, &h);
	if (rc)
		return rc;
	if (known_idle(c, s, h)) {
		rc_stats_local(RGPU_OP_STREAM_SYNC);
	} else {
		uint64_t mark = rc_idle_mark(c->dev->conn);
		rc = rc_coh_sync_release(c->dev->conn);
		if (!rc)
			rc = two_handles(c, RGPU_OP_STREAM_SYNC, h);
		if (!rc)
			rc_stream_idle(c, s, h, mark);
	}
	/* an acquire (coherence.c); the legacy NULL stream waits for every
	 * blocking stream, so it counts as the whole context */
	int legacy = h == 0 || h == (uint64_t)(uintptr_t)CU_STREAM_LEGACY;
	return rc ? rc : rc_coh_acquire(c->dev->conn, legacy ? RC_COH_ALL : h, e);
}

RC_EXPORT CUresult cuStreamQuery(CUstream s)
{
	struct rc_ctx *c;
	uint64_t h;
	CUresult rc = rc_stream_resolve(s, &c, &h);
	if (rc)
		return rc;
	if (known_idle(c, s, h)) {
		rc_stats_local(RGPU_OP_STREAM_QUERY);
		return CUDA_SUCCESS;
	}
	uint64_t mark = rc_idle_mark(c->dev->conn);
	rc = two_handles(c, RGPU_OP_STREAM_QUERY, h);
	if (!rc)
		rc_stream_idle(c, s, h, mark);
	return rc;
}

/* The priority and flags a stream was made with: the NULL, legacy and
 * per-thread streams have no object here and both are 0 (set even when
 * the library is not initialised, as before). */
static CUresult stream_made(CUstream s, int *prio, unsigned int *flags)
{
	if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) {
		*prio = 0;
		*flags = 0;
		return rc_initialized();
	}
	struct rc_stream *st;
	CUresult rc = rc_obj(s, RC_STREAM, &st);
	if (!rc) {
		*prio = st->priority;
		*flags = st->flags;
	}
	return rc;
}

RC_EXPORT CUresult cuStreamGetPriority(CUstream s, int *prio)
{
	unsigned int flags;
	return prio ? stream_made(s, prio, &flags) : CUDA_ERROR_INVALID_VALUE;
}

RC_EXPORT CUresult cuStreamGetFlags(CUstream s, unsigned int *flags)
{
	int prio;
	return flags ? stream_made(s, &prio, flags) : CUDA_ERROR_INVALID_VALUE;
}

RC_EXPORT CUresult cuStreamGetCtx(CUstream s, CUcontext *pctx)
{
	struct rc_ctx *c;
	uint64_t h;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = rc_stream_resolve(s, &c, &h);
	if (!rc)
		*pctx = (CUcontext)c;
	return rc;
}

/* CUDA 12.5: a stream of a green context names it, and the device's
 * primary context as its context */
RC_EXPORT CUresult cuStreamGetCtx_v2(CUstream s, CUcontext *pctx, CUgreenCtx *pgreen)
{
	if (!pctx || !pgreen)
		return CUDA_ERROR_INVALID_VALUE;
	struct rc_ctx *c;
	uint64_t h;
	CUresult rc = rc_stream_resolve(s, &c, &h);
	if (rc)
		return rc;
	if (c->green && s == CU_STREAM_PER_THREAD)
		return CUDA_ERROR_INVALID_HANDLE;
	*pgreen = (CUgreenCtx)c->green;
	*pctx = (CUcontext)c;
	if (c->green && c->mem_owner)
		*pctx = (CUcontext)c->mem_owner;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuStreamGetGreenCtx(CUstream s, CUgreenCtx *pgreen)
{
	if (!pgreen)
		return CUDA_ERROR_INVALID_VALUE;
	struct rc_ctx *c;
	uint64_t h;
	CUresult rc = rc_stream_resolve(s, &c, &h);
	if (!rc)
		*pgreen = (CUgreenCtx)c->green;
	return rc;
}

RC_EXPORT CUresult cuStreamGetCtx_v2_ptsz(CUstream s, CUcontext *pctx, CUgreenCtx *pgreen)
{
	return cuStreamGetCtx_v2(s ? s : CU_STREAM_PER_THREAD, pctx, pgreen);
}

RC_EXPORT CUresult cuStreamGetDevice(CUstream s, CUdevice *dev)
{
	struct rc_ctx *c;
	uint64_t h;
	if (!dev)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = rc_stream_resolve(s, &c, &h);
	if (!rc)
		*dev = c->ordinal;
	return rc;
}

RC_EXPORT CUresult cuStreamGetDevice_ptsz(CUstream s, CUdevice *dev)
{
	return cuStreamGetDevice(s ? s : CU_STREAM_PER_THREAD, dev);
}

/* ---- events ---- */

RC_EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags)
{
	struct rc_ctx *c;
	uint64_t h;
	struct rc_event *ev;
	CUresult rc = rc_stream_resolve(s, &c, &h);
	if (!rc)
		rc = rc_obj(e, RC_EVENT, &ev);
	if (rc)
		return rc;
	if (ev->ctx->dev->conn != c->dev->conn) {
		rc_unsupported("cuStreamWaitEvent across two servers");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	/* waiting for an event recorded in a capture, s joins the capture
	 * (its work is captured too: nothing may then run through a
	 * staging buffer, graph.c) */
	rc_stream_join_capture(s, __atomic_load_n(&ev->rec_capture, __ATOMIC_ACQUIRE));
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u64(w, h);
	put_u64(w, ev->h);
	put_u32(w, flags);
	return rc_post(c->dev->conn, RGPU_OP_STREAM_WAIT_EVENT, w);
}

/* ---- a whole context: cuCtxRecordEvent, cuCtxWaitEvent ----
 * The server's driver knows every stream of the context (the client keeps
 * no list of them): both go there, in order with the work before them. */

static CUresult ctx_named(CUcontext hctx, struct rc_ctx **c)
{
	if (!hctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	CUresult rc = rc_obj(hctx, RC_CTX, c);
	return rc == CUDA_ERROR_INVALID_HANDLE ? CUDA_ERROR_INVALID_CONTEXT : rc;
}

RC_EXPORT CUresult cuCtxRecordEvent(CUcontext hctx, CUevent e)
{
	struct rc_ctx *c;
	struct rc_event *ev;
	CUresult rc = ctx_named(hctx, &c);
	if (!rc)
		rc = rc_obj(e, RC_EVENT, &ev);
	if (rc)
		return rc;
	if (ev->ctx != c)
		return CUDA_ERROR_INVALID_HANDLE;
	struct rc_conn *conn = c->dev->conn;
	/* a record no query is told about (its queries ask the server), and
	 * not known done here until it has gone */
	__atomic_store_n(&ev->rec_capture, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&ev->rec_watched, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&ev->rec_id, REC_UNTRACKED, __ATOMIC_RELEASE);
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u64(w, ev->h);
	struct rd r;
	rc = rc_call(conn, RGPU_OP_CTX_RECORD_EVENT, w, &r);
	if (!rc) {
		/* covers the legacy stream's work as well as every other's */
		__atomic_store_n(&ev->rec_legacy, 0, __ATOMIC_RELEASE);
		__atomic_store_n(&ev->rec_id, rc_idle_mark(conn) - 1, __ATOMIC_RELEASE);
	}
	return rc;
}

RC_EXPORT CUresult cuCtxWaitEvent(CUcontext hctx, CUevent e)
{
	struct rc_ctx *c;
	struct rc_event *ev;
	CUresult rc = ctx_named(hctx, &c);
	if (!rc)
		rc = rc_obj(e, RC_EVENT, &ev);
	if (rc)
		return rc;
	if (ev->ctx->dev->conn != c->dev->conn) {
		rc_unsupported("cuCtxWaitEvent across two servers");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u64(w, ev->h);
	struct rd r;
	return rc_call(c->dev->conn, RGPU_OP_CTX_WAIT_EVENT, w, &r);
}

RC_EXPORT CUresult cuEventCreate(CUevent *pe, unsigned int flags)
{
	struct rc_ctx *c;
	CUresult rc = rc_need_ctx(&c);
	if (rc)
		return rc;
	if (!pe)
		return CUDA_ERROR_INVALID_VALUE;
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u32(w, flags);
	struct rd r;
	if ((rc = rc_call(c->dev->conn, RGPU_OP_EVENT_CREATE, w, &r)))
		return rc;
	struct rc_event *ev = rc_event_new(c, get_u64(&r), flags);
	if (!ev)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*pe = (CUevent)ev;
	return CUDA_SUCCESS;
}

struct rc_event *rc_event_new(struct rc_ctx *c, uint64_t h, unsigned flags)
{
	struct rc_event *ev = calloc(1, sizeof(*ev));
	if (ev) {
		ev->magic = RC_EVENT;
		ev->ctx = c;
		ev->h = h;
		ev->flags = flags;
	}
	return ev;
}

RC_EXPORT CUresult cuEventDestroy_v2(CUevent e)
{
	struct rc_event *ev;
	CUresult rc = rc_obj(e, RC_EVENT, &ev);
	if (rc)
		return rc;
	rc = two_handles(ev->ctx, RGPU_OP_EVENT_DESTROY, ev->h);
	watch_drop(ev);
	ev->magic = 0;
	free(ev);
	return rc;
}

RC_EXPORT CUresult cuEventDestroy(CUevent e) { return cuEventDestroy_v2(e); }

RC_EXPORT CUresult cuEventRecord(CUevent e, CUstream s)
{
	struct rc_event *ev;
	struct rc_ctx *c;
	uint64_t h;
	CUresult rc = rc_obj(e, RC_EVENT, &ev);
	if (!rc)
		rc = rc_stream_resolve(s, &c, &h);
	if (rc)
		return rc;
	if (c != ev->ctx)
		return CUDA_ERROR_INVALID_HANDLE;
	struct rc_conn *conn = c->dev->conn;
	uint64_t cap = rc_stream_capture_id(s);
	int capturing = cap != 0;
	__atomic_store_n(&ev->rec_capture, cap, __ATOMIC_RELEASE);
	int watch = !capturing && __atomic_load_n(&ev->want_watch, __ATOMIC_ACQUIRE) &&
		    rgpu_conn_fd(conn->c) >= 0;
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u64(w, ev->h);
	put_u64(w, h);
	if (watch) {
		uint64_t seq = __atomic_add_fetch(&ev->seq, 1, __ATOMIC_RELAXED);
		put_u64(w, seq);
		__atomic_store_n(&ev->rec_seq, seq, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&ev->rec_watched, watch, __ATOMIC_RELEASE);
	rc = rc_post(conn, watch ? RGPU_OP_EVENT_RECORD_WATCH : RGPU_OP_EVENT_RECORD, w);
	/* after the send: the last id is then no lower than the record's */
	__atomic_store_n(&ev->rec_legacy, is_legacy(h), __ATOMIC_RELEASE);
	__atomic_store_n(&ev->rec_id,
			 capturing ? REC_UNTRACKED : rc_idle_mark(conn) - 1,
			 __ATOMIC_RELEASE);
	return rc;
}

RC_EXPORT CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned int flags)
{
	if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL)
		return CUDA_ERROR_INVALID_VALUE;
	return cuEventRecord(e, s);
}

RC_EXPORT CUresult cuEventSynchronize(CUevent e)
{
	struct rc_event *ev;
	uint64_t ep = rc_coh_epoch();
	CUresult rc = rc_obj(e, RC_EVENT, &ev);
	if (rc)
		return rc;
	if (event_done(ev)) {
		rc_stats_local(RGPU_OP_EVENT_SYNC);
	} else {
		uint64_t mark = rc_idle_mark(ev->ctx->dev->conn);
		rc = rc_coh_sync_release(ev->ctx->dev->conn);
		if (!rc)
			rc = two_handles(ev->ctx, RGPU_OP_EVENT_SYNC, ev->h);
		if (!rc)
			store_max(&ev->done_at, mark);
	}
	/* the event's stream is not known here: counted as everything so far
	 * (host writes after an event synchronisation must not be fetched
	 * over) */
	return rc ? rc : rc_coh_acquire(ev->ctx->dev->conn, RC_COH_ALL, ep);
}

RC_EXPORT CUresult cuEventQuery(CUevent e)
{
	struct rc_event *ev;
	CUresult rc = rc_obj(e, RC_EVENT, &ev);
	if (rc)
		return rc;
	if (event_done(ev)) {
		rc_stats_local(RGPU_OP_EVENT_QUERY);
		return CUDA_SUCCESS;
	}
	struct rc_conn *conn = ev->ctx->dev->conn;
	if (watch_pending(ev) && rc_poll(conn) == 0) {
		/* the server says when it completes: what it said so far */
		int done = event_done(ev);
		if (done || watch_pending(ev)) {
			rc_stats_local(RGPU_OP_EVENT_QUERY);
			return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
		}
	}
	uint64_t mark = rc_idle_mark(conn);
	rc = two_handles(ev->ctx, RGPU_OP_EVENT_QUERY, ev->h);
	if (!rc)
		store_max(&ev->done_at, mark);
	/* polled: its next records are watched */
	if ((rc == CUDA_SUCCESS || rc == CUDA_ERROR_NOT_READY) &&
	    !(ev->flags & CU_EVENT_INTERPROCESS) &&
	    !__atomic_load_n(&ev->want_watch, __ATOMIC_ACQUIRE))
		watch_add(ev);
	return rc;
}

static CUresult elapsed(float *ms, CUevent a, CUevent b)
{
	struct rc_event *ea, *eb;
	CUresult rc = rc_obj(a, RC_EVENT, &ea);
	if (!rc)
		rc = rc_obj(b, RC_EVENT, &eb);
	if (rc)
		return rc;
	if (!ms)
		return CUDA_ERROR_INVALID_VALUE;
	if (ea->ctx != eb->ctx)
		return CUDA_ERROR_INVALID_HANDLE;
	struct wbuf *w = rc_req();
	put_u64(w, ea->ctx->h);
	put_u64(w, ea->h);
	put_u64(w, eb->h);
	struct rd r;
	rc = rc_call(ea->ctx->dev->conn, RGPU_OP_EVENT_ELAPSED, w, &r);
	if (!rc)
		*ms = get_f32(&r);
	return rc;
}

RC_EXPORT CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) { return elapsed(ms, a, b); }
RC_EXPORT CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b) { return elapsed(ms, a, b); }

/* Capture state is known here: the client begins and ends every capture
 * (graph.c). */
static CUresult not_capturing(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id)
{
	struct rc_ctx *c;
	uint64_t h;
	CUresult rc = rc_stream_resolve(s, &c, &h);
	if (rc)
		return rc;
	if (!st)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t cid = rc_stream_capture_id(s);
	*st = cid ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
	if (id)
		*id = cid;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *st)
{
	return not_capturing(s, st, NULL);
}

RC_EXPORT CUresult cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id)
{
	return not_capturing(s, st, id);
}

RC_EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id,
					     CUgraph *graph, const CUgraphNode **deps, size_t *ndeps)
{
	if (graph)
		*graph = NULL;
	if (deps)
		*deps = NULL;
	if (ndeps)
		*ndeps = 0;
	CUresult rc = not_capturing(s, st, id);
	/* the graph being built and its ends live on the server (gnode.c) */
	if (!rc && *st == CU_STREAM_CAPTURE_STATUS_ACTIVE && (graph || deps || ndeps)) {
		struct rc_ctx *c;
		uint64_t h;
		if (!(rc = rc_stream_resolve(s, &c, &h)))
			rc = rc_capture_info(s, c, h, graph, deps, ndeps);
	}
	return rc;
}

RC_EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id,
					     CUgraph *graph, const CUgraphNode **deps,
					     const CUgraphEdgeData **edges, size_t *ndeps)
{
	if (edges)
		*edges = NULL;
	return cuStreamGetCaptureInfo_v2(s, st, id, graph, deps, ndeps);
}
