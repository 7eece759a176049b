/*
 * Host functions (cuLaunchHostFunc, cuStreamAddCallback, graph host
 * nodes) run on the client, in stream order.  For each one the session
 * queues a host function of its own on the real stream (trampoline()).
 * When the stream reaches it, it runs in the driver's callback thread:
 * it hands (seq, client id) to the client, as the reply to the client's
 * pending HOSTFN_WAIT (or to its next one), and holds the stream until the
 * client's HOSTFN_DONE for that seq arrives.  So the stream does not pass
 * a host function before it has returned on the client, and work queued
 * after it waits, as on a local GPU.
 *
 * The client's part (client/hostfn.c) makes sure no request that could
 * block the session's main loop on device work is sent while a host
 * function is out: the main loop must stay free to read HOSTFN_DONE.
 */
#include "rgpud.h"
#include "session.h"
#include "log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define D (&rgpud_server.drv)

/* One host function the session queued: the argument of trampoline().
 * Graph host nodes keep theirs for the session's life (a graph may be
 * launched many times; its clones and executables share the pointer). */
struct hostcall {
	struct hostcall *next;  /* the session's list, for freeing */
	struct hostfn *hf;
	uint64_t client_id;
	int oneshot;            /* cuLaunchHostFunc: freed after it ran */
};

/* A reached host function waiting for the client. */
struct fire {
	struct fire *next;
	uint64_t seq, client_id;
	int sent, done;
};

struct hostfn {
	struct session *s;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct fire *fires;      /* reached, not yet done */
	uint64_t next_seq;
	int have_wait;           /* a HOSTFN_WAIT is pending: */
	struct rgpu_hdr wait_hdr; /* its header, for the reply */
	int closing;             /* session ending: release every stream */
	struct hostcall *calls;  /* graph host nodes and pending one-shots */
};

static struct hostfn *state(struct session *s)
{
	if (s->hostfn)
		return s->hostfn;
	struct hostfn *hf = calloc(1, sizeof(*hf));
	if (!hf)
		return NULL;
	hf->s = s;
	pthread_mutex_init(&hf->mu, NULL);
	pthread_cond_init(&hf->cv, NULL);
	s->hostfn = hf;
	return hf;
}

/* Fields of the reply to a HOSTFN_WAIT: every reached fire not yet sent
 * (hf->mu held). */
static void put_fires(struct hostfn *hf, struct wbuf *w)
{
	uint32_t n = 0;
	for (struct fire *f = hf->fires; f; f = f->next)
		n += !f->sent;
	put_u32(w, n);
	for (struct fire *f = hf->fires; f; f = f->next)
		if (!f->sent) {
			put_u64(w, f->seq);
			put_u64(w, f->client_id);
			f->sent = 1;
		}
}

static void unlink_call(struct hostfn *hf, struct hostcall *c)
{
	for (struct hostcall **pp = &hf->calls; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			return;
		}
}

/* Runs in the driver's callback thread when a stream reaches the host
 * function.  No CUDA call may be made here. */
static void CUDA_CB trampoline(void *arg)
{
	struct hostcall *c = arg;
	struct hostfn *hf = c->hf;
	struct fire f = { 0 };
	f.client_id = c->client_id;

	pthread_mutex_lock(&hf->mu);
	if (hf->closing)
		goto out;
	f.seq = ++hf->next_seq;
	f.next = hf->fires;
	hf->fires = &f;
	if (hf->have_wait) {
		struct wbuf w;
		wbuf_init(&w);
		put_fires(hf, &w);
		struct rgpu_hdr h = hf->wait_hdr;
		hf->have_wait = 0;
		pthread_mutex_unlock(&hf->mu);
		/* the main loop takes send_lock before hf->mu: never hold both */
		pthread_mutex_lock(&hf->s->send_lock);
		int bad = w.oom || session_send_reply(hf->s, &h, 0, 0, w.data, w.len) < 0;
		pthread_mutex_unlock(&hf->s->send_lock);
		wbuf_free(&w);
		if (bad) {
			log_info("%s: cannot tell the client a host function is due: %s",
				 hf->s->name, strerror(errno));
			rgpu_conn_shutdown(hf->s->conn);
		}
		pthread_mutex_lock(&hf->mu);
	}
	while (!f.done && !hf->closing)
		pthread_cond_wait(&hf->cv, &hf->mu);
	for (struct fire **pp = &hf->fires; *pp; pp = &(*pp)->next)
		if (*pp == &f) {
			*pp = f.next;
			break;
		}
out:
	if (c->oneshot) {
		unlink_call(hf, c);
		free(c);
	}
	pthread_cond_broadcast(&hf->cv);
	pthread_mutex_unlock(&hf->mu);
}

void *hostfn_node_arg(struct session *s, uint64_t client_id, int oneshot)
{
	struct hostfn *hf = state(s);
	struct hostcall *c = hf ? calloc(1, sizeof(*c)) : NULL;
	if (!c)
		return NULL;
	c->hf = hf;
	c->client_id = client_id;
	c->oneshot = oneshot;
	pthread_mutex_lock(&hf->mu);
	c->next = hf->calls;
	hf->calls = c;
	pthread_mutex_unlock(&hf->mu);
	return c;
}

CUhostFn hostfn_trampoline(void) { return trampoline; }

/* A graph host node's argument, recognised when the driver hands a node's
 * parameters back: its client id, or 0 when p is not one of ours. */
uint64_t hostfn_client_id(struct session *s, void *p)
{
	struct hostfn *hf = s->hostfn;
	uint64_t id = 0;
	if (!hf)
		return 0;
	pthread_mutex_lock(&hf->mu);
	for (struct hostcall *c = hf->calls; c; c = c->next)
		if (c == p)
			id = c->client_id;
	pthread_mutex_unlock(&hf->mu);
	return id;
}

int op_hostfn_launch(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	uint64_t client_id = get_u64(r);
	int rc = req_enter(s, r, &q, HK_FREE);
	if (rc)
		return rc;
	CUstream st;
	if ((rc = req_stream(s, q.id, &st)))
		return rc;
	if (!D->cuLaunchHostFunc)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (!client_id)
		return CUDA_ERROR_INVALID_VALUE;
	/* captured, it becomes a graph node that may run many times */
	CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
	if (D->cuStreamIsCapturing && D->cuStreamIsCapturing(st, &cs) != CUDA_SUCCESS)
		cs = CU_STREAM_CAPTURE_STATUS_NONE;
	struct hostcall *c = hostfn_node_arg(s, client_id, cs == CU_STREAM_CAPTURE_STATUS_NONE);
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct hostfn *hf = c->hf;
	rc = D->cuLaunchHostFunc(st, trampoline, c);
	/* captured (the stream may have joined a capture through an event
	 * the client does not know of): a graph node, not due now */
	if (!rc)
		put_u32(out, cs != CU_STREAM_CAPTURE_STATUS_NONE);
	if (rc) {
		pthread_mutex_lock(&hf->mu);
		unlink_call(hf, c);
		pthread_mutex_unlock(&hf->mu);
		free(c);
	}
	return rc;
}

int op_hostfn_wait(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	if (!rd_done(r))
		return OP_DROP;
	struct hostfn *hf = state(s);
	if (!hf)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (h->flags & RGPU_F_NOREPLY)
		return OP_DROP;
	pthread_mutex_lock(&hf->mu);
	if (hf->have_wait) {
		/* one long poll at a time: a second is a confused client */
		pthread_mutex_unlock(&hf->mu);
		return CUDA_ERROR_ILLEGAL_STATE;
	}
	int any = 0;
	for (struct fire *f = hf->fires; f; f = f->next)
		any |= !f->sent;
	if (any) {
		put_fires(hf, out);
		pthread_mutex_unlock(&hf->mu);
		return CUDA_SUCCESS;
	}
	hf->have_wait = 1;
	hf->wait_hdr = *h;
	pthread_mutex_unlock(&hf->mu);
	return OP_REPLIED;
}

int op_hostfn_done(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t seq = get_u64(r);
	if (!rd_done(r))
		return OP_DROP;
	struct hostfn *hf = s->hostfn;
	int found = 0;
	if (hf) {
		pthread_mutex_lock(&hf->mu);
		for (struct fire *f = hf->fires; f; f = f->next)
			if (f->seq == seq && f->sent) {
				f->done = 1;
				found = 1;
			}
		pthread_cond_broadcast(&hf->cv);
		pthread_mutex_unlock(&hf->mu);
	}
	/* a seq never handed out is the client's bug, reported at its next
	 * call like any failed request without a reply */
	return found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

int hostfn_busy(struct session *s)
{
	struct hostfn *hf = s->hostfn;
	if (!hf)
		return 0;
	pthread_mutex_lock(&hf->mu);
	/* reached or queued ones, graph host nodes, the client's poll */
	int busy = hf->fires || hf->calls || hf->have_wait;
	pthread_mutex_unlock(&hf->mu);
	return busy;
}

void hostfn_cleanup(struct session *s)
{
	struct hostfn *hf = s->hostfn;
	if (!hf)
		return;
	/* release every held stream, so the contexts can be destroyed */
	pthread_mutex_lock(&hf->mu);
	hf->closing = 1;
	pthread_cond_broadcast(&hf->cv);
	pthread_mutex_unlock(&hf->mu);
}

void hostfn_free(struct session *s)
{
	struct hostfn *hf = s->hostfn;
	if (!hf)
		return;
	/* the contexts are gone: no trampoline runs any more */
	while (hf->calls) {
		struct hostcall *c = hf->calls;
		hf->calls = c->next;
		free(c);
	}
	pthread_mutex_destroy(&hf->mu);
	pthread_cond_destroy(&hf->cv);
	free(hf);
	s->hostfn = NULL;
}
