/*
 * Streams and events.
 *
 * Every stream, and the NULL stream of each context, has a worker thread
 * that runs its queued operations in order.  Ordering between streams:
 *  - the legacy NULL stream: an operation queued on it waits for all work
 *    queued before it on the context's blocking streams, and an operation
 *    queued on a blocking stream waits for all work queued before it on the
 *    NULL stream (CUDA's legacy default-stream semantics);
 *  - CU_STREAM_NON_BLOCKING streams do not synchronise with the NULL stream;
 *  - cuStreamWaitEvent: the stream waits until the event's last recorded
 *    position (at the time of the call) has been reached.
 * CU_STREAM_PER_THREAD is treated as the legacy NULL stream.
 *
 * All state here is under ctx->lock; workers drop it while an operation
 * runs.  ctx->cond is broadcast on every change.
 */
#include "emu.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

void emu_event_unref(struct emu_ctx *ctx, struct emu_event *ev)
{
	if (--ev->refs == 0) {
		emu_ipc_free(ev);
		free(ev);
	}
}

void emu_op_free(struct emu_ctx *ctx, struct emu_op *op)
{
	if (!op)
		return;
	if (op->host_owned)
		free(op->host);
	if (op->launch)
		emu_launch_free(op->launch);
	if (op->event)
		emu_event_unref(ctx, op->event);
	free(op->deps);
	free(op);
}

/* Any stream of ctx by id, including ones being destroyed. */
static struct emu_stream *stream_by_id(struct emu_ctx *ctx, uint64_t id)
{
	if (ctx->null_stream && ctx->null_stream->id == id)
		return ctx->null_stream;
	for (struct emu_stream *s = ctx->streams; s; s = s->next)
		if (s->id == id)
			return s;
	return NULL;
}

static int op_ready(struct emu_ctx *ctx, const struct emu_op *op)
{
	for (int i = 0; i < op->ndeps; i++) {
		struct emu_stream *s = stream_by_id(ctx, op->deps[i].stream_id);

		/* A stream that is gone had finished all its work. */
		if (s && s->done_seq < op->deps[i].seq)
			return 0;
	}
	if (op->kind == EMU_OP_WAIT) {
		emu_ipc_pull(op->event);
		if (op->event->completed < op->gen)
			return 0;
	}
	return 1;
}

/* A stream made after a cuCtxWaitEvent waits for that event before
 * anything it runs (the streams there then got a wait op each). */
static int cwaits_passed(struct emu_ctx *ctx, const struct emu_stream *s)
{
	for (int i = 0; i < ctx->ncwaits; i++) {
		const struct emu_cwait *w = &ctx->cwaits[i];
		if (s->id >= w->first_stream) {
			emu_ipc_pull(w->ev);
			if (w->ev->completed < w->gen)
				return 0;
		}
	}
	return 1;
}

static void *worker(void *arg)
{
	struct emu_stream *s = arg;
	struct emu_ctx *ctx = s->ctx;
	struct emu_op *op;
	CUresult rc;

	emu_lock(&ctx->lock);
	for (;;) {
		op = s->head;
		if (!op) {
			if (s->quit)
				break;
			emu_wait(&ctx->cond, &ctx->lock);
			continue;
		}
		if (!op_ready(ctx, op) || !cwaits_passed(ctx, s)) {
			/* (another process completes an interprocess event) */
			if (op->kind == EMU_OP_WAIT && op->event->ipc)
				emu_ipc_nap(&ctx->lock);
			else
				emu_wait(&ctx->cond, &ctx->lock);
			continue;
		}
		if (op->kind == EMU_OP_RECORD) {
			struct emu_event *ev = op->event;

			if (op->gen > ev->completed)
				ev->completed = op->gen;
			emu_ipc_push(ev);
			/* An older record finishing late on another stream
			 * must not move the time of a newer one. */
			if (op->gen >= ev->ts_gen) {
				ev->ts_gen = op->gen;
				ev->ts_ns = emu_devclock_stamp(ctx->dev, s->after_kernel);
			}
		} else if (op->kind != EMU_OP_WAIT && !emu_ctx_sticky(ctx)) {
			/* A faulted context runs nothing more: its queue
			 * drains without effect, as on a GPU. */
			emu_unlock(&ctx->lock);
			rc = CUDA_SUCCESS;
			if (op->kind == EMU_OP_LAUNCH) {
				rc = emu_launch_exec(op->launch);
				/* its time on the device (devclock.c) */
				if (rc == CUDA_SUCCESS)
					emu_devclock_run(ctx->dev, emu_devclock_kernel_ns());
			} else if (op->kind == EMU_OP_HOST) {
				op->hostfn(op->hostdata);
			} else {
				rc = emu_mem_exec(ctx, op);
			}
			if (rc != CUDA_SUCCESS)
				emu_ctx_fault(ctx, rc);
			emu_lock(&ctx->lock);
		}
		s->after_kernel = op->kind == EMU_OP_LAUNCH;
		s->head = op->next;
		if (!s->head)
			s->tail = NULL;
		s->done_seq = op->seq;
		emu_op_free(ctx, op);
		emu_broadcast(&ctx->cond);
	}
	emu_unlock(&ctx->lock);
	return NULL;
}

CUresult emu_stream_start(struct emu_ctx *ctx, struct emu_stream *s)
{
	sigset_t all, old;
	int err;

	s->ctx = ctx;
	s->id = ctx->next_stream_id++;
	/* Workers take no signals: they belong to the host process. */
	sigfillset(&all);
	if (pthread_sigmask(SIG_SETMASK, &all, &old) != 0)
		return CUDA_ERROR_OPERATING_SYSTEM;
	err = pthread_create(&s->thread, NULL, worker, s);
	if (pthread_sigmask(SIG_SETMASK, &old, NULL) != 0)
		abort();
	return err == 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

struct emu_stream *emu_stream_find(struct emu_ctx *ctx, CUstream h)
{
	if (h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD)
		return ctx->null_stream;
	for (struct emu_stream *s = ctx->streams; s; s = s->next)
		if ((CUstream)s == h && !s->quit)
			return s;
	return NULL;
}

CUresult emu_stream_enter(CUstream h, struct emu_ctx **ctx, struct emu_stream **s)
{
	CUresult rc = emu_ctx_enter_locked(ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	*s = emu_stream_find(*ctx, h);
	return emu_ctx_found(*ctx, *s);
}

static int add_dep(struct emu_dep **deps, int *n, int *cap, const struct emu_stream *s)
{
	if (s->done_seq >= s->enq_seq)
		return 0;   /* nothing pending there */
	if (*n == *cap) {
		int c = *cap ? 2 * *cap : 4;
		struct emu_dep *d = realloc(*deps, (size_t)c * sizeof *d);

		if (!d)
			return -1;
		*deps = d;
		*cap = c;
	}
	(*deps)[(*n)++] = (struct emu_dep){ s->id, s->enq_seq };
	return 0;
}

static CUresult enqueue(struct emu_ctx *ctx, struct emu_stream *s, struct emu_op *op, int after_all);

CUresult emu_stream_enqueue(struct emu_ctx *ctx, struct emu_stream *s, struct emu_op *op)
{
	return enqueue(ctx, s, op, 0);
}

/* after_all: op waits for the work queued so far on every stream of ctx
 * (cuCtxRecordEvent), not by the legacy stream's rules */
static CUresult enqueue(struct emu_ctx *ctx, struct emu_stream *s, struct emu_op *op, int after_all)
{
	struct emu_dep *deps = NULL;
	int n = 0, cap = 0, bad = 0;
	CUresult taken;

	/* a capturing stream records its work instead (graph.c) */
	if (emu_capture_take(s, op, &taken))
		return taken;
	if (s->is_null && emu_capture_implicit(ctx)) {
		emu_op_free(ctx, op);
		return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
	}
	if (after_all) {
		if (add_dep(&deps, &n, &cap, ctx->null_stream) != 0)
			bad = 1;
		for (struct emu_stream *t = ctx->streams; t; t = t->next)
			if (t != s && add_dep(&deps, &n, &cap, t) != 0)
				bad = 1;
	} else if (s->is_null) {
		for (struct emu_stream *t = ctx->streams; t; t = t->next)
			if (!(t->flags & CU_STREAM_NON_BLOCKING) && add_dep(&deps, &n, &cap, t) != 0)
				bad = 1;
	} else if (!(s->flags & CU_STREAM_NON_BLOCKING)) {
		if (add_dep(&deps, &n, &cap, ctx->null_stream) != 0)
			bad = 1;
	}
	if (bad) {
		free(deps);
		emu_op_free(ctx, op);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	op->deps = deps;
	op->ndeps = n;
	op->seq = ++s->enq_seq;
	op->next = NULL;
	if (s->tail)
		s->tail->next = op;
	else
		s->head = op;
	s->tail = op;
	emu_broadcast(&ctx->cond);
	return CUDA_SUCCESS;
}

void emu_stream_wait_seq(struct emu_ctx *ctx, struct emu_stream *s, uint64_t seq)
{
	while (s->done_seq < seq)
		emu_wait(&ctx->cond, &ctx->lock);
}

static int ctx_busy(struct emu_ctx *ctx)
{
	if (ctx->null_stream->done_seq < ctx->null_stream->enq_seq)
		return 1;
	for (struct emu_stream *s = ctx->streams; s; s = s->next)
		if (s->done_seq < s->enq_seq)
			return 1;
	return 0;
}

void emu_ctx_wait_idle(struct emu_ctx *ctx)
{
	while (ctx_busy(ctx))
		emu_wait(&ctx->cond, &ctx->lock);
}

void emu_streams_destroy_all(struct emu_ctx *ctx)
{
	struct emu_stream *s, *next;
	struct emu_event *ev, *enext;

	/* Stop them all before joining any: a stream may wait for another. */
	emu_lock(&ctx->lock);
	ctx->null_stream->quit = 1;
	for (s = ctx->streams; s; s = s->next)
		s->quit = 1;
	emu_broadcast(&ctx->cond);
	emu_unlock(&ctx->lock);
	if (pthread_join(ctx->null_stream->thread, NULL) != 0)
		abort();
	for (s = ctx->streams; s; s = s->next)
		if (pthread_join(s->thread, NULL) != 0)
			abort();
	for (s = ctx->streams; s; s = next) {
		next = s->next;
		free(s);
	}
	ctx->streams = NULL;
	free(ctx->null_stream);
	ctx->null_stream = NULL;
	/* Queues are empty, so only the handles (and cuCtxWaitEvent's kept
	 * waits) hold events now. */
	for (int i = 0; i < ctx->ncwaits; i++)
		emu_event_unref(ctx, ctx->cwaits[i].ev);
	free(ctx->cwaits);
	ctx->cwaits = NULL;
	ctx->ncwaits = ctx->capcwaits = 0;
	ctx->ctx_stream = NULL;
	for (ev = ctx->events; ev; ev = enext) {
		enext = ev->next;
		free(ev);
	}
	ctx->events = NULL;
}

EMU_API CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
	struct emu_stream *s;
	struct emu_ctx *ctx;
	CUresult rc;

	if (!phStream || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
		return CUDA_ERROR_INVALID_VALUE;
	rc = emu_ctx_enter(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	s = calloc(1, sizeof *s);
	if (!s) {
		emu_ctx_leave(ctx);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	s->flags = flags;
	/* Priorities range over [-5, 0] (greatest first), clamped like
	 * CUDA; they do not change the emulator's scheduling. */
	s->priority = priority < -5 ? -5 : priority > 0 ? 0 : priority;
	emu_lock(&ctx->lock);
	rc = emu_stream_start(ctx, s);
	if (rc == CUDA_SUCCESS) {
		s->next = ctx->streams;
		ctx->streams = s;
	}
	emu_unlock(&ctx->lock);
	if (rc != CUDA_SUCCESS)
		free(s);
	else
		*phStream = (CUstream)s;
	emu_ctx_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream)
{
	struct emu_stream *s;
	struct emu_ctx *ctx;
	CUresult rc = emu_ctx_enter_locked(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	s = hStream && hStream != CU_STREAM_LEGACY && hStream != CU_STREAM_PER_THREAD
		? emu_stream_find(ctx, hStream) : NULL;
	if (!s) {
		emu_ctx_unlock_leave(ctx);
		return CUDA_ERROR_INVALID_HANDLE;
	}
	/* Marked quitting, it takes no new work but stays listed (so ops
	 * depending on it still see its progress) until its worker drained
	 * the queue.  Unlike CUDA, the call waits for that. */
	s->quit = 1;
	emu_broadcast(&ctx->cond);
	emu_unlock(&ctx->lock);
	if (pthread_join(s->thread, NULL) != 0)
		abort();
	emu_lock(&ctx->lock);
	for (struct emu_stream **pp = &ctx->streams; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	emu_broadcast(&ctx->cond);
	emu_unlock(&ctx->lock);
	free(s);
	emu_attr_forget(hStream);
	emu_ctx_leave(ctx);
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
{
	struct emu_stream *s;
	struct emu_ctx *ctx;
	CUresult rc = emu_stream_enter(hStream, &ctx, &s);

	if (rc != CUDA_SUCCESS)
		return rc;
	emu_stream_wait_seq(ctx, s, s->enq_seq);
	rc = (CUresult)emu_ctx_sticky(ctx);
	emu_ctx_unlock_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuStreamQuery(CUstream hStream)
{
	struct emu_stream *s;
	struct emu_ctx *ctx;
	CUresult rc = emu_stream_enter(hStream, &ctx, &s);

	if (rc != CUDA_SUCCESS)
		return rc;
	if (s->done_seq < s->enq_seq)
		rc = CUDA_ERROR_NOT_READY;
	emu_ctx_unlock_leave(ctx);
	return rc;
}

/* Caller holds ctx->lock. */
static struct emu_event *event_find(struct emu_ctx *ctx, CUevent h)
{
	for (struct emu_event *e = ctx->events; e; e = e->next)
		if ((CUevent)e == h)
			return e;
	return NULL;
}

/* Event h of the current context, entered and locked as by
 * emu_stream_enter. */
static CUresult event_enter(CUevent h, struct emu_ctx **ctx, struct emu_event **ev)
{
	CUresult rc = emu_ctx_enter_locked(ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	*ev = event_find(*ctx, h);
	return emu_ctx_found(*ctx, *ev);
}

CUresult emu_event_enter(CUevent h, struct emu_ctx **ctx, struct emu_event **ev)
{
	return event_enter(h, ctx, ev);
}

/* An event of another context (another device): waited for here, on the
 * host, as the emulated streams of two contexts share no queue; the
 * order CUDA promises holds. */
static CUresult wait_foreign(CUevent h)
{
	struct emu_ctx **all;
	size_t n;
	CUresult rc = emu_ctx_hold_all(&all, &n);
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = CUDA_ERROR_INVALID_HANDLE;
	for (size_t i = 0; i < n; i++) {
		struct emu_ctx *c = all[i];
		if (rc == CUDA_ERROR_INVALID_HANDLE) {
			pthread_mutex_lock(&c->lock);
			struct emu_event *ev = event_find(c, h);
			if (ev) {
				ev->refs++;
				emu_ipc_pull(ev);
				uint64_t gen = ev->recorded;
				while (emu_ipc_pull(ev), ev->completed < gen) {
					if (ev->ipc)
						emu_ipc_nap(&c->lock);
					else
						emu_wait(&c->cond, &c->lock);
				}
				emu_event_unref(c, ev);
				rc = CUDA_SUCCESS;
			}
			pthread_mutex_unlock(&c->lock);
		}
		emu_ctx_leave(c);
	}
	free(all);
	return rc;
}

EMU_API CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	struct emu_stream *s;
	struct emu_event *ev;
	struct emu_ctx *ctx;
	struct emu_op *op;
	CUresult rc;

	if (Flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
		return CUDA_ERROR_INVALID_VALUE;
	rc = emu_ctx_enter_locked(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	s = emu_stream_find(ctx, hStream);
	ev = event_find(ctx, hEvent);
	if (s && !ev && hEvent) {
		emu_ctx_unlock_leave(ctx);
		return wait_foreign(hEvent);
	}
	if (!s || !ev) {
		rc = CUDA_ERROR_INVALID_HANDLE;
	} else if (emu_capture_join(s, ev)) {
		/* s joined the capture the event was recorded in */
	} else if (emu_ipc_pull(ev), ev->recorded > 0) {
		/* Never recorded: nothing to wait for, as in CUDA. */
		op = calloc(1, sizeof *op);
		if (!op) {
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			op->kind = EMU_OP_WAIT;
			op->event = ev;
			op->gen = ev->recorded;
			ev->refs++;
			rc = emu_stream_enqueue(ctx, s, op);
		}
	}
	emu_ctx_unlock_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
	struct emu_event *ev;
	struct emu_ctx *ctx;
	CUresult rc;

	if (!phEvent ||
	    (Flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS)) ||
	    ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING)))
		return CUDA_ERROR_INVALID_VALUE;
	rc = emu_ctx_enter(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	ev = calloc(1, sizeof *ev);
	if (!ev) {
		emu_ctx_leave(ctx);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	ev->ctx = ctx;
	ev->flags = Flags;
	ev->refs = 1;
	emu_lock(&ctx->lock);
	ev->next = ctx->events;
	ctx->events = ev;
	emu_unlock(&ctx->lock);
	*phEvent = (CUevent)ev;
	emu_ctx_leave(ctx);
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent)
{
	struct emu_event *ev = NULL;
	struct emu_ctx *ctx;
	CUresult rc = emu_ctx_enter_locked(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	for (struct emu_event **pp = &ctx->events; *pp; pp = &(*pp)->next)
		if ((CUevent)*pp == hEvent) {
			ev = *pp;
			*pp = ev->next;
			break;
		}
	/* Queued records and waits keep it alive until they ran. */
	if (ev) {
		ev->destroyed = 1;
		emu_event_unref(ctx, ev);
	} else {
		rc = CUDA_ERROR_INVALID_HANDLE;
	}
	emu_ctx_unlock_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream)
{
	struct emu_stream *s;
	struct emu_event *ev;
	struct emu_ctx *ctx;
	struct emu_op *op;
	CUresult rc = emu_ctx_enter_locked(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	s = emu_stream_find(ctx, hStream);
	ev = event_find(ctx, hEvent);
	if (!s || !ev) {
		rc = CUDA_ERROR_INVALID_HANDLE;
	} else if (!(op = calloc(1, sizeof *op))) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	} else {
		op->kind = EMU_OP_RECORD;
		op->event = ev;
		emu_ipc_pull(ev);
		op->gen = ++ev->recorded;
		emu_ipc_push(ev);
		ev->refs++;
		ev->cap_id = 0; /* (set again if the record is captured) */
		rc = emu_stream_enqueue(ctx, s, op);
		if (rc != CUDA_SUCCESS)
			ev->recorded--;
	}
	emu_ctx_unlock_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuEventQuery(CUevent hEvent)
{
	struct emu_event *ev;
	struct emu_ctx *ctx;
	CUresult rc = emu_capture_unsafe(); /* (as CUDA: unsafe during a capture) */
	if (rc == CUDA_SUCCESS)
		rc = event_enter(hEvent, &ctx, &ev);

	if (rc != CUDA_SUCCESS)
		return rc;
	emu_ipc_pull(ev);
	if (ev->completed < ev->recorded)
		rc = CUDA_ERROR_NOT_READY;
	emu_ctx_unlock_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuEventSynchronize(CUevent hEvent)
{
	struct emu_event *ev;
	struct emu_ctx *ctx;
	CUresult rc = emu_capture_unsafe(); /* (as CUDA: unsafe during a capture) */
	if (rc == CUDA_SUCCESS)
		rc = event_enter(hEvent, &ctx, &ev);

	if (rc != CUDA_SUCCESS)
		return rc;
	/* Hold a reference: another thread may destroy it meanwhile. */
	ev->refs++;
	emu_ipc_pull(ev);
	uint64_t gen = ev->recorded;
	while (emu_ipc_pull(ev), ev->completed < gen) {
		if (ev->ipc)
			emu_ipc_nap(&ctx->lock);
		else
			emu_wait(&ctx->cond, &ctx->lock);
	}
	emu_event_unref(ctx, ev);
	rc = (CUresult)emu_ctx_sticky(ctx);
	emu_ctx_unlock_leave(ctx);
	return rc;
}

/* Shared by both exported names, called directly so neither can be
 * interposed by another library's symbol. */
static CUresult elapsed_time(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
	struct emu_event *a, *b;
	struct emu_ctx *ctx;
	CUresult rc;

	if (!pMilliseconds)
		return CUDA_ERROR_INVALID_VALUE;
	rc = emu_ctx_enter_locked(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	a = event_find(ctx, hStart);
	b = event_find(ctx, hEnd);
	if (!a || !b || (a->flags & CU_EVENT_DISABLE_TIMING) || (b->flags & CU_EVENT_DISABLE_TIMING) ||
	    a->recorded == 0 || b->recorded == 0)
		rc = CUDA_ERROR_INVALID_HANDLE;
	else if (a->ts_gen != a->recorded || b->ts_gen != b->recorded)
		rc = CUDA_ERROR_NOT_READY;
	else
		*pMilliseconds = (float)((double)(int64_t)(b->ts_ns - a->ts_ns) / 1e6);
	emu_ctx_unlock_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
	return elapsed_time(pMilliseconds, hStart, hEnd);
}

EMU_API CUresult CUDAAPI cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
	return elapsed_time(pMilliseconds, hStart, hEnd);
}

/* ---- a whole context: cuCtxRecordEvent, cuCtxWaitEvent ---- */

/* The context's own stream for its records (made on first use; non-blocking,
 * so no stream waits for it by the legacy rules).  Caller holds ctx->lock. */
static CUresult ctx_stream(struct emu_ctx *ctx, struct emu_stream **out)
{
	if (!ctx->ctx_stream) {
		struct emu_stream *s = calloc(1, sizeof *s);
		if (!s)
			return CUDA_ERROR_OUT_OF_MEMORY;
		s->flags = CU_STREAM_NON_BLOCKING;
		CUresult rc = emu_stream_start(ctx, s);
		if (rc != CUDA_SUCCESS) {
			free(s);
			return rc;
		}
		s->next = ctx->streams;
		ctx->streams = s;
		ctx->ctx_stream = s;
	}
	*out = ctx->ctx_stream;
	return CUDA_SUCCESS;
}

/* hCtx entered and locked (it must be the current context: rgpud makes
 * it so; another is refused with CUDA_ERROR_INVALID_CONTEXT). */
static CUresult ctx_enter_named(CUcontext hCtx, struct emu_ctx **ctx)
{
	CUresult rc = emu_ctx_enter_locked(ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (hCtx && hCtx != emu_ctx_current_handle()) {
		emu_ctx_unlock_leave(*ctx);
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuCtxRecordEvent(CUcontext hCtx, CUevent hEvent)
{
	struct emu_stream *s;
	struct emu_event *ev;
	struct emu_ctx *ctx;
	struct emu_op *op;
	CUresult rc = ctx_enter_named(hCtx, &ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	ev = event_find(ctx, hEvent);
	if (!ev) {
		rc = CUDA_ERROR_INVALID_HANDLE;
	} else if (emu_capture_in_ctx(ctx)) {
		rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	} else if ((rc = ctx_stream(ctx, &s)) != CUDA_SUCCESS) {
		/* (no stream for it) */
	} else if (!(op = calloc(1, sizeof *op))) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	} else {
		op->kind = EMU_OP_RECORD;
		op->event = ev;
		emu_ipc_pull(ev);
		op->gen = ++ev->recorded;
		emu_ipc_push(ev);
		ev->refs++;
		ev->cap_id = 0;
		rc = enqueue(ctx, s, op, 1);
		if (rc != CUDA_SUCCESS)
			ev->recorded--;
	}
	emu_ctx_unlock_leave(ctx);
	return rc;
}

static CUresult wait_on(struct emu_ctx *ctx, struct emu_stream *s, struct emu_event *ev)
{
	struct emu_op *op = calloc(1, sizeof *op);
	if (!op)
		return CUDA_ERROR_OUT_OF_MEMORY;
	op->kind = EMU_OP_WAIT;
	op->event = ev;
	op->gen = ev->recorded;
	ev->refs++;
	return emu_stream_enqueue(ctx, s, op);
}

EMU_API CUresult CUDAAPI cuCtxWaitEvent(CUcontext hCtx, CUevent hEvent)
{
	struct emu_event *ev;
	struct emu_ctx *ctx;
	CUresult rc = ctx_enter_named(hCtx, &ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	ev = event_find(ctx, hEvent);
	if (!ev && hEvent) {
		/* another context's event: waited for here, as a stream's
		 * wait for one is */
		emu_ctx_unlock_leave(ctx);
		return wait_foreign(hEvent);
	}
	if (!ev) {
		rc = CUDA_ERROR_INVALID_HANDLE;
	} else if (emu_capture_in_ctx(ctx)) {
		rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	} else if (emu_ipc_pull(ev), ev->recorded > 0 && ev->completed < ev->recorded) {
		/* the streams there wait in their queues; streams made later
		 * before their first work (kept while the event is pending) */
		int k = 0;
		for (int i = 0; i < ctx->ncwaits; i++) {
			emu_ipc_pull(ctx->cwaits[i].ev);
			if (ctx->cwaits[i].ev->completed >= ctx->cwaits[i].gen)
				emu_event_unref(ctx, ctx->cwaits[i].ev);
			else
				ctx->cwaits[k++] = ctx->cwaits[i];
		}
		ctx->ncwaits = k;
		if (ctx->ncwaits == ctx->capcwaits) {
			int cap = ctx->capcwaits ? 2 * ctx->capcwaits : 4;
			struct emu_cwait *w = realloc(ctx->cwaits, (size_t)cap * sizeof *w);
			if (!w) {
				emu_ctx_unlock_leave(ctx);
				return CUDA_ERROR_OUT_OF_MEMORY;
			}
			ctx->cwaits = w;
			ctx->capcwaits = cap;
		}
		rc = wait_on(ctx, ctx->null_stream, ev);
		for (struct emu_stream *s = ctx->streams; s && rc == CUDA_SUCCESS; s = s->next)
			if (!s->quit && s != ctx->ctx_stream)
				rc = wait_on(ctx, s, ev);
		if (rc == CUDA_SUCCESS) {
			ev->refs++;
			ctx->cwaits[ctx->ncwaits++] = (struct emu_cwait){ ev, ev->recorded, ctx->next_stream_id };
		}
	}
	emu_ctx_unlock_leave(ctx);
	return rc;
}
