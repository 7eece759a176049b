/* The transfer layer's chunk loop and buffer-plus-event pool (lib/xfer.h)
 * against a fake device whose events fire when the test says so. */
#include "tap.h"
#include "xfer.h"

#include <stdlib.h>

/* ---- a fake device: an event is a counter of work not yet done ---- */

struct fev {
	int pending;
	int fail_record;
};
static int nev, syncs, host_allocs, fail_alloc;

static int f_create(void **ev)
{
	struct fev *e = calloc(1, sizeof(*e));
	if (!e)
		return XFER_ERR_NOMEM;
	nev++;
	*ev = e;
	return 0;
}
static void f_destroy(void *ev)
{
	nev--;
	free(ev);
}
static int f_record(void *ev, void *stream)
{
	struct fev *e = ev;
	(void)stream;
	if (e->fail_record)
		return 700;
	e->pending = 1;
	return 0;
}
static int f_query(void *ev) { return ((struct fev *)ev)->pending ? 600 : 0; }
static int f_sync(void *ev)
{
	syncs++;
	((struct fev *)ev)->pending = 0;
	return 0;
}
static int f_alloc(void **p, size_t n)
{
	if (fail_alloc)
		return 2;
	host_allocs++;
	*p = malloc(n);
	return *p ? 0 : 2;
}
static void f_free(void *p) { free(p); }

static const struct xfer_dev fdev = { f_create, f_destroy, f_record, f_query, f_sync,
				      f_alloc, f_free };

static void fire(struct xfer_pool *p, int i) { ((struct fev *)p->b[i].ev)->pending = 0; }

/* ---- the chunk loop, traced ---- */

struct trace {
	char log[256];
	int fail_stage_at, fail_emit_at; /* chunk index, or -1 */
	int abandoned;
};

static void add(struct trace *t, char what, const struct xfer_chunk *c)
{
	size_t n = strlen(t->log);
	snprintf(t->log + n, sizeof(t->log) - n, "%c%d", what, (int)(c->off / 10));
}

static int t_stage(void *arg, struct xfer_chunk *c)
{
	struct trace *t = arg;
	add(t, 's', c);
	if ((int)(c->off / 10) == t->fail_stage_at)
		return 999;
	c->buf = (int)(c->off / 10);
	c->queued = 1;
	return 0;
}
static int t_emit(void *arg, struct xfer_chunk *c, int last)
{
	struct trace *t = arg;
	add(t, last ? 'E' : 'e', c);
	return (int)(c->off / 10) == t->fail_emit_at ? 998 : 0;
}
static void t_abandon(void *arg, struct xfer_chunk *c)
{
	struct trace *t = arg;
	add(t, 'a', c);
	t->abandoned++;
}
static const struct xfer_steps steps = { t_stage, t_emit, t_abandon };

static int run(struct trace *t, uint64_t total, int lookahead, int *queued)
{
	t->log[0] = 0;
	t->abandoned = 0;
	return xfer_run(total, 10, lookahead, &steps, t, queued);
}

static void test_loop(void)
{
	struct trace t = { .fail_stage_at = -1, .fail_emit_at = -1 };
	int q;
	is_u64(run(&t, 35, 1, &q), 0, "lookahead 1: a 4-chunk copy succeeds");
	ok(!strcmp(t.log, "s0s1e0s2e1s3e2E3"), "lookahead 1 stages k+1 before emitting k (%s)",
	   t.log);
	is_u64(run(&t, 35, 0, &q), 0, "lookahead 0 succeeds");
	ok(!strcmp(t.log, "s0e0s1e1s2e2s3E3"), "lookahead 0 emits each chunk once staged (%s)",
	   t.log);
	is_u64(run(&t, 0, 1, &q), 0, "an empty copy does nothing");
	ok(t.log[0] == 0 && q == 0, "nothing staged, nothing queued");

	/* an early failure: nothing reached the GPU, so a caller must not
	 * touch the stream (issue 15 item 3) */
	t.fail_stage_at = 0;
	is_u64(run(&t, 35, 1, &q), 999, "a failing first chunk ends the copy with its status");
	ok(q == 0, "no GPU work is reported queued after a first-chunk failure");
	t.fail_stage_at = 2;
	is_u64(run(&t, 35, 1, &q), 999, "a failing third chunk ends the copy");
	ok(q == 1, "GPU work is reported queued after a later failure");
	ok(!strcmp(t.log, "s0s1e0s2a2a1"), "the staged, unsent chunks are given back (%s)", t.log);
	t.fail_stage_at = -1;
	t.fail_emit_at = 1;
	is_u64(run(&t, 35, 1, &q), 998, "a failing emit ends the copy");
	ok(!strcmp(t.log, "s0s1e0s2e1a1a2"), "both chunks in flight are given back (%s)", t.log);
	is_u64(run(&t, 35, 0, &q), 998, "a failing emit without lookahead ends the copy");
	ok(t.abandoned == 1, "and gives back that one chunk");
}

/* ---- the pool ---- */

static void test_private_pool(void)
{
	struct xfer_pool p;
	int rc;
	xfer_pool_init(&p, &fdev, 2, 64);
	int a = xfer_pool_get(&p, 1, &rc);
	ok(a == 0 && rc == 0 && host_allocs == 1, "a private pool allocates on demand");
	is_u64(xfer_pool_put(&p, a, NULL, 0), 0, "work queued on buffer 0");
	int b = xfer_pool_get(&p, 1, &rc);
	ok(b == 1 && host_allocs == 2, "a busy buffer is not handed out: the pool grows");
	xfer_pool_put(&p, b, NULL, 0);
	fire(&p, b);
	int c = xfer_pool_get(&p, 1, &rc);
	ok(c == 1, "a buffer whose event fired is reused without waiting");
	xfer_pool_put(&p, c, NULL, 0);
	int s0 = syncs;
	int d = xfer_pool_get(&p, 1, &rc);
	ok(d == 0 && syncs == s0 + 1, "at the cap, the oldest work is waited for");
	int e = xfer_pool_get(&p, 2, &rc);
	ok(e >= 0 && p.b[e].ctx == 2, "a buffer of another context gets that context's event");
	xfer_pool_put(&p, e, NULL, 0);
	xfer_pool_forget_ctx(&p, 2);
	ok(!p.b[e].ev && !p.b[e].seq, "forgetting a context waits for and drops its events");
	int f = xfer_pool_get(&p, 1, &rc);
	ok(f >= 0, "a buffer again");
	((struct fev *)p.b[f].ev)->fail_record = 1;
	ok(xfer_pool_put(&p, f, NULL, 0) == 700 && !p.b[f].seq,
	   "a failed record leaves the buffer free");
	xfer_pool_free(&p);
	ok(nev == 0, "freeing the pool destroys every event");

	/* a device-to-host chunk is sent after the next one is staged: its
	 * buffer stays its own when the copy into it is done (a reuse sent
	 * the next chunk's data in its place: t_threads_helgrind) */
	xfer_pool_init(&p, &fdev, 3, 64);
	int k0 = xfer_pool_get(&p, 1, &rc);
	xfer_pool_keep(&p, k0);
	xfer_pool_put(&p, k0, NULL, 0);
	int busy = xfer_pool_get(&p, 1, &rc);
	xfer_pool_put(&p, busy, NULL, 0);
	fire(&p, k0);
	p.next = k0; /* the scan would come to it first */
	int k1 = xfer_pool_get(&p, 1, &rc);
	ok(k1 >= 0 && k1 != k0 && k1 != busy && host_allocs == 2 + 3,
	   "a kept buffer whose copy is done is not handed out: the pool grows");
	xfer_pool_put(&p, k1, NULL, 0);
	s0 = syncs;
	p.next = k0;
	int k2 = xfer_pool_get(&p, 1, &rc);
	ok(k2 == busy && syncs == s0 + 1,
	   "at the cap, the oldest work that is not kept is waited for (%d)", k2);
	xfer_pool_put(&p, k2, NULL, 0);
	xfer_pool_unkeep(&p, k0);
	p.next = k0;
	ok(xfer_pool_get(&p, 1, &rc) == k0, "once sent, the buffer is reused");
	xfer_pool_keep(&p, k0);
	xfer_pool_drop(&p, k0);
	p.next = k0;
	ok(xfer_pool_get(&p, 1, &rc) == k0, "a dropped buffer is no longer kept");
	xfer_pool_free(&p);
	xfer_pool_init(&p, &fdev, 1, 64);
	k0 = xfer_pool_get(&p, 1, &rc);
	xfer_pool_keep(&p, k0);
	ok(xfer_pool_get(&p, 1, &rc) < 0 && rc == XFER_ERR_NOMEM,
	   "every buffer kept: an error, not a buffer still in use");
	xfer_pool_free(&p);
	fail_alloc = 1;
	xfer_pool_init(&p, &fdev, 2, 64);
	ok(xfer_pool_get(&p, 1, &rc) == 0 && p.b[0].owned == 2,
	   "without pinned memory, plain memory serves");
	xfer_pool_free(&p);
	fail_alloc = 0;
}

static int idle_calls, idle_give_up;
static int idle(void *arg, unsigned ms)
{
	(void)arg;
	(void)ms;
	idle_calls++;
	return idle_calls >= idle_give_up ? XFER_LOST : 0;
}

static void test_shared_pool(void)
{
	struct xfer_pool p;
	uint8_t mem[4 * 16];
	uint32_t flags[4] = { 1, 0, 1, 0 }; /* 0 and 2 held by the peer */
	int rc;
	xfer_pool_init_shared(&p, &fdev, mem, 4, 16, flags, idle, NULL);
	int a = xfer_pool_get(&p, 1, &rc);
	ok(a == 1 && flags[1] == 1 && p.b[1].p == mem + 16,
	   "a shared pool hands out a buffer the peer does not hold, and marks it taken");
	/* the peer's own chunk in buffer 2: on the GPU, then back to the peer */
	is_u64(xfer_pool_claim(&p, 2, 1), 0, "the peer's buffer is readied");
	xfer_pool_put(&p, 2, NULL, 1);
	xfer_pool_reap(&p);
	ok(flags[2] == 1, "not handed back while the GPU reads it");
	fire(&p, 2);
	xfer_pool_reap(&p);
	ok(flags[2] == 0, "handed back once its event fired");
	/* everything held: the idle callback decides */
	flags[0] = flags[2] = flags[3] = 1;
	idle_calls = 0;
	idle_give_up = 3;
	ok(xfer_pool_get(&p, 1, &rc) < 0 && rc == XFER_LOST && idle_calls == 3,
	   "waiting for the peer asks the idle callback, and gives up when it says (issue 16 item 8)");
	xfer_pool_drop(&p, 3);
	ok(flags[3] == 0, "a dropped buffer goes back to the peer");
	ok(xfer_pool_wait_any(&p) == 0, "wait_any returns when a buffer is free");
	xfer_pool_free(&p);
	ok(nev == 0, "no event is left");
}

int main(void)
{
	test_loop();
	test_private_pool();
	test_shared_pool();
	return tap_done();
}
