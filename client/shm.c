/* Same-host fast path: when rgpud runs on this node the client talks to
 * it over a Unix socket and moves data through shared memory: a staging
 * ring for pageable buffers (one memcpy here, then the GPU reads the
 * registered ring directly), and memfd-backed pinned host memory that the
 * server registers, so the GPU copies straight from the application's
 * buffer.  No socket carries bulk data. */
#include "client.h"
#include "xfer_client.h"
#include "frame.h"
#include "log.h"
#include "settings.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SLOT_STATE_PAGE 4096
#define RING_SLOTS 8

/* ---- parallel memcpy ----
 * One core copies ~10 GB/s, below what the GPU takes from pinned memory
 * (~50 GB/s): large chunks are split over a few helper threads. */
#define COPY_THREADS 4
#define COPY_MIN (1u << 20)

struct copy_job {
	uint8_t *dst;
	const uint8_t *src;
	size_t part, n;
};

static struct {
	pthread_mutex_t use;  /* held by the one copy the helpers serve */
	pthread_mutex_t lock; /* guards what follows */
	pthread_cond_t go, done;
	struct copy_job job;
	unsigned gen, pending;
	int started;
} cp = { .use = PTHREAD_MUTEX_INITIALIZER, .lock = PTHREAD_MUTEX_INITIALIZER,
	 .go = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER };

static void copy_part(const struct copy_job *j, unsigned k)
{
	size_t off = (size_t)k * j->part;
	if (off < j->n)
		memcpy(j->dst + off, j->src + off, j->n - off < j->part ? j->n - off : j->part);
}

static void *copy_worker(void *arg)
{
	unsigned k = (unsigned)(uintptr_t)arg, seen = 0;
	pthread_mutex_lock(&cp.lock);
	for (;;) {
		while (cp.gen == seen)
			pthread_cond_wait(&cp.go, &cp.lock);
		seen = cp.gen;
		struct copy_job j = cp.job;
		pthread_mutex_unlock(&cp.lock);
		copy_part(&j, k);
		pthread_mutex_lock(&cp.lock);
		if (--cp.pending == 0)
			pthread_cond_signal(&cp.done);
	}
	return NULL;
}

static void pool_start(void)
{
	pthread_mutex_lock(&cp.lock);
	if (!cp.started) {
		cp.started = 1;
		for (unsigned k = 1; k < COPY_THREADS; k++)
			if (rc_thread_start(copy_worker, (void *)(uintptr_t)k))
				cp.started = -1;
	}
	pthread_mutex_unlock(&cp.lock);
}

/* The helpers serve one copy at a time: the job and its pending count are
 * that copy's until every part is done.  A copy that finds them busy
 * (another connection's) copies on its own thread instead. */
static void pmemcpy(void *dst, const void *src, size_t n)
{
	if (n >= COPY_MIN)
		pool_start();
	if (n < COPY_MIN || cp.started < 0 || pthread_mutex_trylock(&cp.use) != 0) {
		memcpy(dst, src, n);
		return;
	}
	pthread_mutex_lock(&cp.lock);
	cp.job = (struct copy_job){ dst, src, (n + COPY_THREADS - 1) / COPY_THREADS, n };
	cp.pending = COPY_THREADS - 1;
	cp.gen++;
	struct copy_job j = cp.job;
	pthread_cond_broadcast(&cp.go);
	pthread_mutex_unlock(&cp.lock);
	copy_part(&j, 0);
	pthread_mutex_lock(&cp.lock);
	while (cp.pending)
		pthread_cond_wait(&cp.done, &cp.lock);
	pthread_mutex_unlock(&cp.lock);
	pthread_mutex_unlock(&cp.use);
}

static uint8_t *slot_ptr(struct rc_conn *c, uint32_t i)
{
	return (uint8_t *)c->ring + SLOT_STATE_PAGE + (size_t)i * RGPU_CHUNK_SIZE;
}

/* SHM_ATTACH: 0 or a CUresult; *live (may be NULL): the server says the
 * memory is mapped for its device at base */
static CUresult attach(struct rc_conn *c, uint32_t kind, int fd, uint64_t base, size_t size,
		       uint32_t nslots, uint64_t off, int *live)
{
	struct wbuf *w = rc_req();
	put_u32(w, kind);
	put_u32(w, (uint32_t)fd);
	put_u64(w, base);
	put_u64(w, size);
	put_u32(w, nslots);
	if (kind == 3)
		put_u64(w, off);
	struct rd r;
	CUresult rc = rc_call(c, RGPU_OP_SHM_ATTACH, w, &r);
	if (live)
		*live = !rc && r.left >= 4 && get_u32(&r) == 1;
	return rc;
}

CUresult rc_shm_attach(struct rc_conn *c, uint32_t kind, int fd, void *base, size_t size,
		       uint32_t nslots, int *live)
{
	return attach(c, kind, fd, (uint64_t)(uintptr_t)base, size, nslots, 0, live);
}

CUresult rc_shm_attach_file(struct rc_conn *c, int fd, uint64_t off, uintptr_t dev, size_t size)
{
	int live = 0;
	CUresult rc = attach(c, 3, fd, (uint64_t)dev, size, 0, off, &live);
	return rc ? rc : live ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
}

CUresult rc_shm_detach(struct rc_conn *c, uintptr_t base)
{
	struct wbuf *w = rc_req();
	put_u64(w, (uint64_t)base);
	struct rd r;
	return rc_call(c, RGPU_OP_SHM_DETACH, w, &r);
}

void rc_shm_setup(struct rc_conn *c)
{
	size_t size = SLOT_STATE_PAGE + (size_t)RING_SLOTS * RGPU_CHUNK_SIZE;
	int fd = memfd_create("rgpu-staging", MFD_CLOEXEC);
	void *p = MAP_FAILED;
	if (fd >= 0 && ftruncate(fd, (off_t)size) == 0)
		p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		log_warn("no shared staging with the local rgpud: %s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return;
	}
	CUresult rc = rc_shm_attach(c, 1, fd, p, size, RING_SLOTS, NULL);
	close(fd); /* the server has its own mapping now */
	if (rc) {
		log_warn("the local rgpud did not take the shared staging ring (error %d): "
			 "copies go through the socket", (int)rc);
		munmap(p, size);
		return;
	}
	c->ring = p;
	c->ring_size = size;
	c->nslots = RING_SLOTS;
	c->slot_state = p;
}

/* Calls through shared memory: a 1 MiB queue each way is many small
 * calls deep; larger frames (module images) stream through it. */
#define SHMQ_RING (1u << 20)

void rc_shmq_setup(struct rc_conn *c)
{
	char err[256];
	int fd;
	void *mem;
	if (!rc_setting(RS_SHM_CALLS))
		return;
	if (rgpu_shmq_make(SHMQ_RING, &fd, &mem, err, sizeof(err)) < 0) {
		log_info("%s:%u: %s; calls go through the socket", c->host, c->port, err);
		return;
	}
	struct wbuf *w = rc_req();
	put_u32(w, 2);
	put_u32(w, (uint32_t)fd);
	put_u64(w, SHMQ_RING);
	struct rd r;
	CUresult rc = rc_call(c, RGPU_OP_TRANSPORT, w, &r);
	close(fd); /* the server has its own mapping now */
	if (rc) {
		const char *why = get_str(&r, 255);
		log_info("%s:%u: calls go through the socket: %s", c->host, c->port,
			 why ? why : "the server did not take the shared queues");
		munmap(mem, rgpu_shmq_size(SHMQ_RING));
		return;
	}
	/* the server moved on as it answered: so do we, with nothing in
	 * flight (cuInit's one thread) */
	struct rgpu_conn *q = rgpu_shmq_wrap(c->c, mem, SHMQ_RING, 0, (unsigned)rc_setting(RS_SPIN_US));
	if (!q) {
		munmap(mem, rgpu_shmq_size(SHMQ_RING));
		rc_conn_fail(c, RGPU_E_SYSTEM, "out of memory for the shared call queues");
		return;
	}
	/* cuInit's remaining calls stay bounded (do_init lifts it) */
	(void)rgpu_conn_set_recv_timeout(q, (int)rc_setting(RS_HANDSHAKE_TIMEOUT_MS));
	c->c = q;
	c->shmq = 1;
}

static int slot_free(struct rc_conn *c)
{
	for (uint32_t k = 0; k < c->nslots; k++) {
		uint32_t i = (c->next_slot + k) % c->nslots;
		if (__atomic_load_n(&c->slot_state[i], __ATOMIC_ACQUIRE) == 0) {
			c->next_slot = (i + 1) % c->nslots;
			return (int)i;
		}
	}
	return -1;
}

/* ---- the shm-ring provider ---- */

static CUresult ring_stage(struct rc_xfer *x, struct xfer_chunk *c)
{
	struct rc_conn *conn = x->c;
	CUresult rc = CUDA_SUCCESS;
	int slot;
	while ((slot = slot_free(conn)) < 0) {
		/* all slots are being read by the GPU: wait for one */
		struct wbuf *w = rc_req();
		put_u64(w, x->ctx->h);
		struct rd r;
		if ((rc = rc_call(conn, RGPU_OP_SHM_SLOT_WAIT, w, &r)))
			return rc;
	}
	c->buf = slot;
	pmemcpy(slot_ptr(conn, (uint32_t)slot), x->host + c->off, c->len);
	__atomic_store_n(&conn->slot_state[slot], 1, __ATOMIC_RELEASE);
	struct wbuf w = { .data = x->extra, .cap = sizeof(x->extra) };
	put_u32(&w, (uint32_t)slot);
	put_u32(&w, (uint32_t)c->len);
	x->extra_len = w.len;
	x->data = NULL;
	x->dlen = 0;
	return CUDA_SUCCESS;
}

static void ring_abandon(struct rc_xfer *x, struct xfer_chunk *c)
{
	if (c->buf >= 0)
		__atomic_store_n(&x->c->slot_state[c->buf], 0, __ATOMIC_RELEASE);
}

static CUresult ring_take(struct rc_xfer *x, struct rc_reply *f, size_t *n)
{
	struct rc_conn *c = x->c;
	*n = 0;
	CUresult rc = rc_reply_frame(c, x->id, RGPU_OP_SHM_DTOH, f, NULL, 0);
	if (rc || f->st || (f->len == 0 && !(f->flags & RGPU_F_MORE)))
		return rc;
	uint32_t slot = get_u32(&f->r), len = get_u32(&f->r);
	if (!rd_ok(&f->r) || slot >= c->nslots || len > RGPU_CHUNK_SIZE || len > x->n - x->got)
		return rc_conn_fail(c, RGPU_E_PROTO, "protocol error: bad staging reply");
	pmemcpy(x->host + x->got, slot_ptr(c, slot), len);
	__atomic_store_n(&c->slot_state[slot], 0, __ATOMIC_RELEASE);
	*n = len;
	return CUDA_SUCCESS;
}

const struct rc_xfer_provider rc_xfer_ring = {
	.name = "shm-ring",
	.op_htod = RGPU_OP_SHM_HTOD,
	.op_dtoh = RGPU_OP_SHM_DTOH,
	.chunk = RGPU_CHUNK_SIZE / 2,
	.exclusive = 1,
	.stage = ring_stage,
	.abandon = ring_abandon,
	.take = ring_take,
};
