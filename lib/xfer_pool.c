/* The one buffer-plus-event pool (see xfer.h). */
#include "xfer.h"
#include "clock.h"
#include "log.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

void xfer_pool_init(struct xfer_pool *p, const struct xfer_dev *dev, int max, size_t size)
{
	memset(p, 0, sizeof(*p));
	p->dev = dev;
	p->max = max < XFER_POOL_MAX ? max : XFER_POOL_MAX;
	p->size = size;
}

void xfer_pool_init_shared(struct xfer_pool *p, const struct xfer_dev *dev, uint8_t *base,
			   int n, size_t size, uint32_t *flags, xfer_idle_fn idle, void *arg)
{
	xfer_pool_init(p, dev, n, size);
	p->n = p->max;
	p->shared = flags;
	p->idle = idle;
	p->idle_arg = arg;
	for (int i = 0; i < p->n; i++)
		p->b[i].p = base + (size_t)i * size;
}

/* Buffer i's work is done: it is free, or back with the peer. */
static void done(struct xfer_pool *p, int i)
{
	struct xfer_buf *b = &p->b[i];
	b->seq = 0;
	if (b->release && p->shared)
		__atomic_store_n(&p->shared[i], 0, __ATOMIC_RELEASE);
	b->release = 0;
}

static int is_free(struct xfer_pool *p, int i)
{
	struct xfer_buf *b = &p->b[i];
	if (b->seq && p->dev->event_query(b->ev) == 0)
		done(p, i);
	return !b->seq && !b->kept &&
	       (!p->shared || __atomic_load_n(&p->shared[i], __ATOMIC_ACQUIRE) == 0);
}

static int oldest(const struct xfer_pool *p)
{
	int o = -1;
	for (int i = 0; i < p->n; i++)
		if (p->b[i].seq && !p->b[i].kept && (o < 0 || p->b[i].seq < p->b[o].seq))
			o = i;
	return o;
}

static int grow(struct xfer_pool *p, int *rc)
{
	struct xfer_buf *b = &p->b[p->n];
	void *m = NULL;
	*b = (struct xfer_buf){ .owned = 1 };
	if (p->dev->host_alloc(&m, p->size) != 0) {
		if (!p->warned++)
			log_warn("pinned staging unavailable, copies use pageable memory");
		b->owned = 2;
		if (!(m = malloc(p->size))) {
			*rc = XFER_ERR_NOMEM;
			return -1;
		}
	}
	b->p = m;
	return p->n++;
}

/* A shared pool waits for the peer to hand a buffer back, asking the idle
 * callback between looks whether to go on. */
static int pick(struct xfer_pool *p, int *rc)
{
	uint64_t t0 = rgpu_now_ms();
	for (;;) {
		for (int k = 0; k < p->n; k++) {
			int j = (p->next + k) % p->n;
			if (is_free(p, j))
				return j;
		}
		if (!p->shared) {
			if (p->n < p->max)
				return grow(p, rc);
			/* all in flight: wait for the oldest (kept ones are
			 * their owner's until it lets go) */
			int o = oldest(p);
			if (o < 0) {
				*rc = XFER_ERR_NOMEM;
				return -1;
			}
			if ((*rc = xfer_pool_wait(p, o)))
				return -1;
			return o;
		}
		int st = p->idle ? p->idle(p->idle_arg, (unsigned)(rgpu_now_ms() - t0)) : XFER_LOST;
		if (st) {
			*rc = st;
			return -1;
		}
	}
}

int xfer_pool_get(struct xfer_pool *p, uint64_t ctx, int *rc)
{
	*rc = 0;
	int i = pick(p, rc);
	if (i < 0)
		return -1;
	if ((*rc = xfer_pool_claim(p, i, ctx)))
		return -1;
	if (p->shared)
		__atomic_store_n(&p->shared[i], 1, __ATOMIC_RELEASE);
	p->next = (i + 1) % p->n;
	return i;
}

int xfer_pool_claim(struct xfer_pool *p, int i, uint64_t ctx)
{
	struct xfer_buf *b = &p->b[i];
	int rc = xfer_pool_wait(p, i); /* a peer handing back a busy buffer */
	if (rc)
		return rc;
	if (b->ev && b->ctx != ctx) {
		p->dev->event_destroy(b->ev);
		b->ev = NULL;
	}
	if (!b->ev) {
		void *ev;
		if ((rc = p->dev->event_create(&ev)))
			return rc;
		b->ev = ev;
		b->ctx = ctx;
	}
	return 0;
}

int xfer_pool_put(struct xfer_pool *p, int i, void *stream, int release)
{
	struct xfer_buf *b = &p->b[i];
	int rc = p->dev->event_record(b->ev, stream);
	if (rc)
		return rc; /* nothing to wait for: the caller drops the buffer */
	b->seq = ++p->seq;
	b->release = release;
	return 0;
}

void xfer_pool_keep(struct xfer_pool *p, int i) { p->b[i].kept = 1; }

void xfer_pool_unkeep(struct xfer_pool *p, int i) { p->b[i].kept = 0; }

int xfer_pool_wait(struct xfer_pool *p, int i)
{
	struct xfer_buf *b = &p->b[i];
	if (!b->seq)
		return 0;
	int rc = p->dev->event_sync(b->ev);
	done(p, i);
	return rc;
}

void xfer_pool_reap(struct xfer_pool *p)
{
	for (int i = 0; i < p->n; i++)
		(void)is_free(p, i);
}

int xfer_pool_wait_any(struct xfer_pool *p)
{
	for (int i = 0; i < p->n; i++)
		if (is_free(p, i))
			return 0;
	int o = oldest(p);
	return o < 0 ? 0 : xfer_pool_wait(p, o);
}

void xfer_pool_drop(struct xfer_pool *p, int i)
{
	if (i < 0 || i >= p->n)
		return;
	(void)xfer_pool_wait(p, i);
	p->b[i].kept = 0;
	if (p->shared)
		__atomic_store_n(&p->shared[i], 0, __ATOMIC_RELEASE);
}

void xfer_pool_forget_ctx(struct xfer_pool *p, uint64_t ctx)
{
	for (int i = 0; i < p->n; i++) {
		struct xfer_buf *b = &p->b[i];
		if (b->ev && b->ctx == ctx) {
			(void)xfer_pool_wait(p, i);
			p->dev->event_destroy(b->ev);
			b->ev = NULL;
		}
	}
}

void xfer_pool_free(struct xfer_pool *p)
{
	for (int i = 0; i < p->n; i++) {
		struct xfer_buf *b = &p->b[i];
		(void)xfer_pool_wait(p, i);
		if (b->ev)
			p->dev->event_destroy(b->ev);
		b->ev = NULL;
		if (b->owned == 1)
			p->dev->host_free(b->p);
		else if (b->owned == 2)
			free(b->p);
	}
	p->n = 0;
}
