#include "stage.h"
#include "log.h"
#include "rgpud.h"
#include "session.h"

#include <stdlib.h>

#define D (&rgpud_server.drv)

static int buf_done(struct stage_buf *b)
{
	if (!b->busy)
		return 1;
	if (D->cuEventQuery(b->ev) == CUDA_SUCCESS) {
		b->busy = 0;
		return 1;
	}
	return 0;
}

int stage_wait(struct session *s, int i)
{
	struct stage_buf *b = &s->pool.b[i];
	if (!b->busy)
		return CUDA_SUCCESS;
	b->busy = 0;
	return D->cuEventSynchronize(b->ev);
}

static int stage_add(struct session *s, int *rc)
{
	struct stage_pool *pl = &s->pool;
	void *p = NULL;
	int pinned = D->cuMemHostAlloc(&p, RGPU_CHUNK_SIZE, CU_MEMHOSTALLOC_PORTABLE) == CUDA_SUCCESS;
	if (!pinned) {
		if (pl->n == 0)
			log_warn("%s: pinned staging unavailable, copies use pageable memory", s->name);
		if (!(p = malloc(RGPU_CHUNK_SIZE))) {
			*rc = CUDA_ERROR_OUT_OF_MEMORY;
			return -1;
		}
	}
	pl->b[pl->n] = (struct stage_buf){ .p = p, .pinned = pinned };
	return pl->n++;
}

int stage_get(struct session *s, uint64_t ctx, int *rc)
{
	struct stage_pool *pl = &s->pool;
	int i = -1;
	for (int k = 0; k < pl->n; k++) {
		int j = (pl->next + k) % pl->n;
		if (buf_done(&pl->b[j])) {
			i = j;
			break;
		}
	}
	if (i < 0 && pl->n < STAGE_MAX)
		i = stage_add(s, rc);
	if (i < 0 && pl->n == STAGE_MAX) {
		/* all in flight: wait for the oldest */
		i = pl->next % pl->n;
		if ((*rc = stage_wait(s, i)))
			return -1;
	}
	if (i < 0)
		return -1;
	struct stage_buf *b = &pl->b[i];
	if (b->ev && b->ctx != ctx) {
		D->cuEventDestroy_v2(b->ev);
		b->ev = NULL;
	}
	if (!b->ev) {
		CUevent ev;
		if ((*rc = D->cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING)))
			return -1;
		b->ev = ev;
		b->ctx = ctx;
	}
	pl->next = (i + 1) % (pl->n ? pl->n : 1);
	return i;
}

int stage_put(struct session *s, int i, void *st)
{
	struct stage_buf *b = &s->pool.b[i];
	int rc = D->cuEventRecord(b->ev, (CUstream)st);
	if (rc)
		return rc; /* b stays free: nothing was queued after the failure */
	b->busy = 1;
	return CUDA_SUCCESS;
}

void stage_forget_ctx(struct session *s, uint64_t ctx)
{
	for (int i = 0; i < s->pool.n; i++) {
		struct stage_buf *b = &s->pool.b[i];
		if (b->ev && b->ctx == ctx) {
			if (b->busy)
				D->cuEventSynchronize(b->ev);
			D->cuEventDestroy_v2(b->ev);
			b->ev = NULL;
			b->busy = 0;
		}
	}
}

void stage_free(struct session *s)
{
	for (int i = 0; i < s->pool.n; i++) {
		struct stage_buf *b = &s->pool.b[i];
		if (b->busy)
			D->cuEventSynchronize(b->ev);
		if (b->ev)
			D->cuEventDestroy_v2(b->ev);
		if (b->pinned)
			D->cuMemFreeHost(b->p);
		else
			free(b->p);
	}
	s->pool.n = 0;
}
