#include "stage.h"
#include "log.h"
#include "rgpud.h"
#include "session.h"

#include <stdlib.h>

#define D (&rgpud_server.drv)

_Static_assert(XFER_ERR_NOMEM == CUDA_ERROR_OUT_OF_MEMORY, "xfer.h's status values are CUresults");

static int ev_create(void **ev) { return D->cuEventCreate((CUevent *)ev, CU_EVENT_DISABLE_TIMING); }
static void ev_destroy(void *ev) { D->cuEventDestroy_v2(ev); }
static int ev_record(void *ev, void *st) { return D->cuEventRecord(ev, st); }
static int ev_query(void *ev) { return D->cuEventQuery(ev); }
static int ev_sync(void *ev) { return D->cuEventSynchronize(ev); }
static int host_alloc(void **p, size_t n) { return D->cuMemHostAlloc(p, n, CU_MEMHOSTALLOC_PORTABLE); }
static void host_free(void *p) { D->cuMemFreeHost(p); }

const struct xfer_dev stage_dev = {
	.event_create = ev_create,
	.event_destroy = ev_destroy,
	.event_record = ev_record,
	.event_query = ev_query,
	.event_sync = ev_sync,
	.host_alloc = host_alloc,
	.host_free = host_free,
};

struct xfer_pool *stage_pool(struct session *s)
{
	if (!s->pool.dev)
		xfer_pool_init(&s->pool, &stage_dev, STAGE_MAX, RGPU_CHUNK_SIZE);
	return &s->pool;
}

int stage_check(struct session *s, uint64_t ctx, uint64_t sid, uint64_t dev, uint64_t n,
		void **st)
{
	CUstream cs = NULL;
	int rc = session_enter_ctx(s, ctx, NULL);
	if (!rc)
		rc = session_stream(s, sid, &cs);
	if (!rc && !session_owns_range(s, dev, n))
		rc = CUDA_ERROR_INVALID_VALUE;
	*st = cs;
	return rc;
}

int stage_htod(struct xfer_pool *pool, int i, uint64_t dst, size_t n, void *st, int release,
	       int sync)
{
	int rc = D->cuMemcpyHtoDAsync_v2(dst, pool->b[i].p, n, st);
	if (!rc)
		rc = xfer_pool_put(pool, i, st, release);
	if (rc) {
		xfer_pool_drop(pool, i);
		return rc;
	}
	/* copies on one stream finish in order: the last one done, all are */
	return sync ? xfer_pool_wait(pool, i) : CUDA_SUCCESS;
}

struct out_job {
	struct xfer_pool *pool;
	uint64_t ctx, src;
	void *st;
	stage_emit_fn emit;
	void *arg;
	uint64_t *at;
};

static int out_stage(void *arg, struct xfer_chunk *c)
{
	struct out_job *j = arg;
	int rc;
	*j->at = c->off;
	if ((c->buf = xfer_pool_get(j->pool, j->ctx, &rc)) < 0)
		return rc;
	/* read again when the chunk is handed on, after the next one is
	 * staged: not free for that one once its copy is done */
	xfer_pool_keep(j->pool, c->buf);
	rc = D->cuMemcpyDtoHAsync_v2(j->pool->b[c->buf].p, j->src + c->off, c->len, j->st);
	if (rc)
		return rc;
	c->queued = 1;
	return xfer_pool_put(j->pool, c->buf, j->st, 0);
}

static int out_emit(void *arg, struct xfer_chunk *c, int last)
{
	struct out_job *j = arg;
	*j->at = c->off;
	int rc = xfer_pool_wait(j->pool, c->buf);
	if (rc)
		return rc;
	if (j->emit(j->arg, j->pool, c->buf, c->len, last) < 0)
		return XFER_LOST;
	xfer_pool_unkeep(j->pool, c->buf);
	return 0;
}

static void out_abandon(void *arg, struct xfer_chunk *c)
{
	struct out_job *j = arg;
	xfer_pool_drop(j->pool, c->buf);
}

static const struct xfer_steps out_steps = { out_stage, out_emit, out_abandon };

int stage_out(struct xfer_pool *pool, uint64_t ctx, void *st, uint64_t src, uint64_t size,
	      stage_emit_fn emit, void *arg, int *queued, uint64_t *at)
{
	uint64_t where = 0;
	struct out_job j = { pool, ctx, src, st, emit, arg, at ? at : &where };
	return xfer_run(size, RGPU_CHUNK_SIZE, 1, &out_steps, &j, queued);
}

/* a client's copy: each chunk a data frame (MORE but for the last) */
struct send_job {
	struct session *s;
	const struct rgpu_hdr *h;
	stage_send_fn send;
};

static int send_chunk(void *arg, struct xfer_pool *pool, int i, size_t n, int last)
{
	struct send_job *j = arg;
	return j->send(j->s, j->h, pool, i, n, !last);
}

int stage_dtoh(struct session *s, const struct rgpu_hdr *h, struct xfer_pool *pool, uint64_t ctx,
	       void *st, uint64_t src, uint64_t size, stage_send_fn send, int rc)
{
	if (!rc && s->deferred) {
		rc = s->deferred;
		s->deferred = 0;
	}
	int queued = 0;
	if (!rc) {
		struct send_job j = { s, h, send };
		rc = stage_out(pool, ctx, st, src, size, send_chunk, &j, &queued, NULL);
		if (rc == XFER_LOST)
			return OP_DROP;
	}
	if (rc || size == 0) {
		/* a failure ends the reply: final frame, error status, no data;
		 * the stream is waited for only if this copy used it */
		if (rc && queued)
			D->cuStreamSynchronize(st);
		if (session_send_reply(s, h, 0, rc, NULL, 0) < 0)
			return OP_DROP;
	}
	return OP_REPLIED;
}

void stage_forget_ctx(struct session *s, uint64_t ctx)
{
	xfer_pool_forget_ctx(&s->pool, ctx);
}

void stage_free(struct session *s)
{
	xfer_pool_free(&s->pool);
}
