/* Streams and events. */
#include "appmem.h"
#include "rgpud.h"
#include "session.h"
#include "waiter.h"
#include "mem/pool.h"

#include <string.h>

#define D (&rgpud_server.drv)

/* A new object of the session, or undone if it cannot be registered. */
static int add_obj(struct session *s, enum hkind kind, void *obj, uint64_t ctx, struct wbuf *out)
{
	uint64_t id = ht_add(&s->ht, kind, obj, ctx, NULL);
	if (!id) {
		if (kind == HK_STREAM)
			D->cuStreamDestroy_v2(obj);
		else
			D->cuEventDestroy_v2(obj);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	put_u64(out, id);
	return CUDA_SUCCESS;
}

static int destroy_obj(struct session *s, struct rd *r, enum hkind kind)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	int rc = req_enter(s, r, &q, kind);
	if (rc)
		return rc;
	rc = kind == HK_STREAM ? D->cuStreamDestroy_v2(q.e->obj) : D->cuEventDestroy_v2(q.e->obj);
	ht_del(&s->ht, q.id);
	return rc;
}

int op_stream_create(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX);
	uint32_t flags = get_u32(r);
	int32_t prio = get_i32(r);
	int rc = req_enter(s, r, &q, HK_FREE);
	if (rc)
		return rc;
	CUstream st;
	if ((rc = D->cuStreamCreateWithPriority(&st, flags, prio)))
		return rc;
	return add_obj(s, HK_STREAM, st, q.ctx, out);
}

int op_stream_destroy(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	return destroy_obj(s, r, HK_STREAM);
}

static int stream_call(struct session *s, struct rd *r, CUresult (*fn)(CUstream), CUstream *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	int rc = req_enter(s, r, &q, HK_FREE);
	CUstream st = NULL;
	if (!rc)
		rc = req_stream(s, q.id, &st);
	if (out)
		*out = st;
	return rc ? rc : (int)fn(st);
}

int op_stream_sync(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	/* done already (the query): answered here; else waited for off the
	 * main loop.  The per-thread stream is the main loop's own. */
	CUstream st;
	int rc = stream_call(s, r, D->cuStreamQuery, &st);
	if (rc == CUDA_ERROR_NOT_READY) {
		if (st != CU_STREAM_PER_THREAD &&
		    session_wait_elsewhere(s, h, WAIT_STREAM, session_ctx_obj(s), st) == 0)
			return OP_REPLIED;
		rc = D->cuStreamSynchronize(st);
	}
	/* a synchronisation, where stream-ordered pools give memory back
	 * (their release threshold) */
	if (rc == CUDA_SUCCESS)
		pb_synced(s);
	if (rc != OP_DROP)
		session_forward_output(s, h);
	return rc;
}

int op_stream_query(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	return stream_call(s, r, D->cuStreamQuery, NULL);
}

int op_stream_wait_event(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ); /* ctx, stream */
	uint64_t eid = get_u64(r);
	uint32_t flags = get_u32(r);
	int rc = req_enter(s, r, &q, HK_FREE);
	if (rc)
		return rc;
	/* the event may be another context's (another GPU's): CUDA orders
	 * streams across devices this way (PyTorch's copies between GPUs) */
	struct hentry *ev = ht_get(&s->ht, eid, HK_EVENT);
	if (!ev)
		return CUDA_ERROR_INVALID_HANDLE;
	CUstream st;
	if ((rc = req_stream(s, q.id, &st)))
		return rc;
	return D->cuStreamWaitEvent(st, ev->obj, flags);
}

/* CTX_RECORD_EVENT: the event captures all the context's work (the
 * server's own streams in it included: a superset, never less) */
int op_ctx_record_event(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ); /* ctx, event */
	int rc = req_enter(s, r, &q, HK_EVENT);
	if (rc)
		return rc;
	if (!D->cuCtxRecordEvent)
		return CUDA_ERROR_NOT_SUPPORTED;
	return D->cuCtxRecordEvent(session_ctx_obj(s), q.e->obj);
}

/* CTX_WAIT_EVENT: the event may be another context's, as for a stream */
int op_ctx_wait_event(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ); /* ctx, event */
	int rc = req_enter(s, r, &q, HK_FREE);
	if (rc)
		return rc;
	struct hentry *ev = ht_get(&s->ht, q.id, HK_EVENT);
	if (!ev)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!D->cuCtxWaitEvent)
		return CUDA_ERROR_NOT_SUPPORTED;
	return D->cuCtxWaitEvent(session_ctx_obj(s), ev->obj);
}

int op_event_create(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX);
	uint32_t flags = get_u32(r);
	int rc = req_enter(s, r, &q, HK_FREE);
	if (rc)
		return rc;
	/* (an interprocess event's handle goes through the parent's share
	 * registry: ops_ipc.c) */
	if ((flags & CU_EVENT_INTERPROCESS) && !D->cuIpcGetEventHandle)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUevent ev = NULL;
	if ((rc = D->cuEventCreate(&ev, flags)))
		return rc;
	return add_obj(s, HK_EVENT, ev, q.ctx, out);
}

int op_event_destroy(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	return destroy_obj(s, r, HK_EVENT);
}

int op_event_record(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	uint64_t sid = get_u64(r);
	int rc = req_enter(s, r, &q, HK_EVENT);
	if (rc)
		return rc;
	CUstream st;
	if ((rc = req_stream(s, sid, &st)))
		return rc;
	return D->cuEventRecord(q.e->obj, st);
}

/* EVENT_RECORD_WATCH: the record, then a waiter sends EVENT_DONE once it
 * has completed (the client then answers cuEventQuery itself) */
int op_event_record_watch(struct session *s, const struct rgpu_hdr *h, struct rd *r,
			  struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	uint64_t sid = get_u64(r);
	uint64_t seq = get_u64(r);
	int rc = req_enter(s, r, &q, HK_EVENT);
	if (rc == OP_DROP)
		return rc;
	CUstream st;
	if (!rc)
		rc = req_stream(s, sid, &st);
	if (!rc)
		rc = D->cuEventRecord(q.e->obj, st);
	/* the client counts the record as pending until told: it is told
	 * either way (a failure, or no thread to watch: "ask me"); the
	 * handler runs with the send lock held */
	if (rc || waiter_post_notice(s, session_ctx_obj(s), q.e->obj, q.id, seq) < 0)
		(void)session_send_notice(s, rc ? rc : CUDA_ERROR_NOT_READY, q.id, seq);
	return rc;
}

static int event_call(struct session *s, struct rd *r, CUresult (*fn)(CUevent), CUevent *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	int rc = req_enter(s, r, &q, HK_EVENT);
	if (rc)
		return rc;
	if (out)
		*out = q.e->obj;
	return fn(q.e->obj);
}

int op_event_sync(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	CUevent ev = NULL;
	int rc = event_call(s, r, D->cuEventQuery, &ev);
	if (rc == CUDA_ERROR_NOT_READY) {
		if (session_wait_elsewhere(s, h, WAIT_EVENT, session_ctx_obj(s), ev) == 0)
			return OP_REPLIED;
		rc = D->cuEventSynchronize(ev);
	}
	if (rc == CUDA_SUCCESS)
		pb_synced(s);
	if (rc != OP_DROP)
		session_forward_output(s, h);
	return rc;
}

int op_event_query(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	return event_call(s, r, D->cuEventQuery, NULL);
}

int op_event_elapsed(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	uint64_t b = get_u64(r);
	int rc = req_enter(s, r, &q, HK_EVENT);
	if (rc)
		return rc;
	struct hentry *ea = q.e, *eb = req_obj(s, &q, b, HK_EVENT);
	if (!eb)
		return CUDA_ERROR_INVALID_HANDLE;
	float ms = 0;
	rc = D->cuEventElapsedTime(&ms, ea->obj, eb->obj);
	put_f32(out, ms);
	return rc;
}
