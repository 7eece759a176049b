/* Waiter threads for synchronising calls: see waiter.h. */
#include "waiter.h"
#include "log.h"
#include "rgpud.h"
#include "session.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Enough for one blocked sync per client thread of a typical program;
 * beyond it waits queue (they are still answered, in turn). */
#define WAITERS_MAX 8

struct wait_job {
	struct wait_job *next;
	struct rgpu_hdr h;
	enum wait_kind kind;
	CUcontext ctx;
	void *obj;
	int32_t deferred;
	int notice;           /* EVENT_DONE (handle, seq) instead of a reply */
	uint64_t handle, seq;
};

struct waiters {
	pthread_mutex_t lock;
	pthread_cond_t work, done;
	struct wait_job *head, *tail;
	unsigned busy;  /* queued or running */
	unsigned queued;
	unsigned idle;  /* threads waiting for work */
	unsigned nthreads;
	int stop;
	pthread_t tids[WAITERS_MAX];
};

static int run_wait(const struct wait_job *j)
{
	struct rgpud_driver *d = &rgpud_server.drv;
	int rc = d->cuCtxSetCurrent(j->ctx);
	if (rc)
		return rc;
	switch (j->kind) {
	case WAIT_CTX:
		return d->cuCtxSynchronize();
	case WAIT_STREAM:
		return d->cuStreamSynchronize((CUstream)j->obj);
	case WAIT_EVENT:
		return d->cuEventSynchronize((CUevent)j->obj);
	}
	return CUDA_ERROR_INVALID_VALUE;
}

static void *waiter_main(void *arg)
{
	struct session *s = arg;
	rgpud_capture_relaxed(&rgpud_server.drv);
	struct waiters *w = s->waiters;
	pthread_mutex_lock(&w->lock);
	for (;;) {
		while (!w->head && !w->stop) {
			w->idle++;
			pthread_cond_wait(&w->work, &w->lock);
			w->idle--;
		}
		if (!w->head)
			break;
		struct wait_job *j = w->head;
		w->head = j->next;
		w->queued--;
		if (!w->head)
			w->tail = NULL;
		pthread_mutex_unlock(&w->lock);

		/* the deferred error came first: CUDA reports the first */
		int rc = run_wait(j);
		if (j->deferred)
			rc = j->deferred;
		pthread_mutex_lock(&s->send_lock);
		int sent;
		if (j->notice) {
			/* a failed wait is said too: the client then asks */
			sent = session_send_notice(s, rc, j->handle, j->seq);
		} else {
			session_forward_output(s, &j->h);
			sent = session_send_reply(s, &j->h, 0, rc, NULL, 0);
		}
		if (sent < 0) {
			/* the main loop notices at its next receive */
			log_info("%s: cannot send reply: %s", s->name, strerror(errno));
			rgpu_conn_shutdown(s->conn);
		}
		pthread_mutex_unlock(&s->send_lock);
		free(j);

		pthread_mutex_lock(&w->lock);
		if (--w->busy == 0)
			pthread_cond_broadcast(&w->done);
	}
	pthread_mutex_unlock(&w->lock);
	rgpud_server.drv.cuCtxSetCurrent(NULL);
	return NULL;
}

static struct waiters *waiters_get(struct session *s)
{
	if (s->waiters)
		return s->waiters;
	struct waiters *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->work, NULL);
	pthread_cond_init(&w->done, NULL);
	s->waiters = w;
	return w;
}

static int post(struct session *s, struct wait_job *j);

int waiter_post(struct session *s, const struct rgpu_hdr *h, enum wait_kind kind,
		CUcontext ctx, void *obj, int32_t deferred)
{
	struct wait_job *j = calloc(1, sizeof(*j));
	if (!j)
		return -1;
	*j = (struct wait_job){ .h = *h, .kind = kind, .ctx = ctx, .obj = obj, .deferred = deferred };
	return post(s, j);
}

int waiter_post_notice(struct session *s, CUcontext ctx, void *obj, uint64_t handle,
		       uint64_t seq)
{
	struct wait_job *j = calloc(1, sizeof(*j));
	if (!j)
		return -1;
	*j = (struct wait_job){ .kind = WAIT_EVENT, .ctx = ctx, .obj = obj, .notice = 1,
				.handle = handle, .seq = seq };
	j->h.op = RGPU_OP_EVENT_DONE; /* id 0: no request's */
	return post(s, j);
}

static int post(struct session *s, struct wait_job *j)
{
	struct waiters *w = waiters_get(s);
	if (!w) {
		free(j);
		return -1;
	}
	pthread_mutex_lock(&w->lock);
	if (w->idle <= w->queued && w->nthreads < WAITERS_MAX) {
		if (pthread_create(&w->tids[w->nthreads], NULL, waiter_main, s) == 0)
			w->nthreads++;
		else if (!w->nthreads) {
			pthread_mutex_unlock(&w->lock);
			free(j);
			return -1;
		}
	}
	if (w->tail)
		w->tail->next = j;
	else
		w->head = j;
	w->tail = j;
	w->queued++;
	w->busy++;
	pthread_cond_signal(&w->work);
	pthread_mutex_unlock(&w->lock);
	return 0;
}

unsigned waiter_busy(struct session *s)
{
	struct waiters *w = s->waiters;
	if (!w)
		return 0;
	pthread_mutex_lock(&w->lock);
	unsigned n = w->busy;
	pthread_mutex_unlock(&w->lock);
	return n;
}

void waiter_drain(struct session *s)
{
	struct waiters *w = s->waiters;
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	while (w->busy)
		pthread_cond_wait(&w->done, &w->lock);
	pthread_mutex_unlock(&w->lock);
}

void waiter_stop(struct session *s)
{
	struct waiters *w = s->waiters;
	if (!w)
		return;
	waiter_drain(s);
	pthread_mutex_lock(&w->lock);
	w->stop = 1;
	pthread_cond_broadcast(&w->work);
	pthread_mutex_unlock(&w->lock);
	for (unsigned i = 0; i < w->nthreads; i++)
		pthread_join(w->tids[i], NULL);
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->work);
	pthread_cond_destroy(&w->done);
	free(w);
	s->waiters = NULL;
}
