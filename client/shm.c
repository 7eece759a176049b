/* Same-host fast path: when rgpud runs on this node the client talks to
 * it over a Unix socket and moves data through shared memory: a staging
 * ring for pageable buffers (one memcpy here, then the GPU reads the
 * registered ring directly), and memfd-backed pinned host memory that the
 * server registers, so the GPU copies straight from the application's
 * buffer.  No socket carries bulk data. */
#include "client.h"
#include "frame.h"
#include "log.h"

#include <errno.h>
#include <signal.h>
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
	pthread_mutex_t lock;
	pthread_cond_t go, done;
	struct copy_job job;
	unsigned gen, pending;
	int started;
} cp = { .lock = PTHREAD_MUTEX_INITIALIZER, .go = PTHREAD_COND_INITIALIZER,
	 .done = PTHREAD_COND_INITIALIZER };

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

/* Called with the connection lock held, so one copy at a time per
 * connection; the pool's own lock serialises connections. */
static void pmemcpy(void *dst, const void *src, size_t n)
{
	pthread_mutex_lock(&cp.lock);
	if (!cp.started) {
		cp.started = 1;
		for (unsigned k = 1; k < COPY_THREADS; k++) {
			pthread_t t;
			sigset_t all, old;
			/* helpers take no signals meant for the application */
			sigfillset(&all);
			pthread_sigmask(SIG_SETMASK, &all, &old);
			if (pthread_create(&t, NULL, copy_worker, (void *)(uintptr_t)k) == 0)
				pthread_detach(t);
			else
				cp.started = -1;
			pthread_sigmask(SIG_SETMASK, &old, NULL);
		}
	}
	if (n < COPY_MIN || cp.started < 0) {
		pthread_mutex_unlock(&cp.lock);
		memcpy(dst, src, n);
		return;
	}
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
}

static uint8_t *slot_ptr(struct rc_conn *c, uint32_t i)
{
	return (uint8_t *)c->ring + SLOT_STATE_PAGE + (size_t)i * RGPU_CHUNK_SIZE;
}

CUresult rc_shm_attach(struct rc_conn *c, uint32_t kind, int fd, void *base, size_t size,
		       uint32_t nslots)
{
	struct wbuf *w = rc_req();
	put_u32(w, kind);
	put_u32(w, (uint32_t)fd);
	put_u64(w, (uint64_t)(uintptr_t)base);
	put_u64(w, size);
	put_u32(w, nslots);
	struct rd r;
	return rc_call(c, RGPU_OP_SHM_ATTACH, w, &r);
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
	CUresult rc = rc_shm_attach(c, 1, fd, p, size, RING_SLOTS);
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

/* The ring's slots serve one copy at a time (ring_lock); other threads'
 * requests may go out between its frames. */
CUresult rc_shm_htod(struct rc_ctx *ctx, uint64_t stream, CUdeviceptr dst, const void *src,
		     size_t n, int async)
{
	struct rc_conn *c = ctx->dev->conn;
	if (n == 0)
		return CUDA_SUCCESS;
	pthread_mutex_lock(&c->ring_lock);
	CUresult rc = CUDA_SUCCESS;
	uint64_t id = 0;
	const size_t chunk = rc_chunk_bytes(RGPU_CHUNK_SIZE / 2);
	for (size_t off = 0; !rc && off < n; off += chunk) {
		size_t k = n - off < chunk ? n - off : chunk;
		int last = off + k == n;
		int slot;
		while (!rc && (slot = slot_free(c)) < 0) {
			/* all slots are being read by the GPU: wait for one */
			struct wbuf *w = rc_req();
			put_u64(w, ctx->h);
			struct rd r;
			rc = rc_call(c, RGPU_OP_SHM_SLOT_WAIT, w, &r);
		}
		if (rc)
			break;
		pmemcpy(slot_ptr(c, (uint32_t)slot), (const uint8_t *)src + off, k);
		__atomic_store_n(&c->slot_state[slot], 1, __ATOMIC_RELEASE);
		uint8_t f[48];
		struct wbuf w = { .data = f, .cap = sizeof(f) };
		put_u64(&w, ctx->h);
		put_u64(&w, stream);
		put_u64(&w, dst);
		put_u64(&w, n);
		put_u64(&w, off);
		put_u32(&w, (uint32_t)slot);
		put_u32(&w, (uint32_t)k);
		pthread_mutex_lock(&c->lock);
		rc = rc_send_frame(c, RGPU_OP_SHM_HTOD, last && !async ? 0 : RGPU_F_NOREPLY, &id, f,
				   w.len, NULL, 0);
		pthread_mutex_unlock(&c->lock);
	}
	if (!rc && !async) {
		struct rc_reply r;
		rc = rc_reply_frame(c, id, RGPU_OP_SHM_HTOD, &r, NULL, 0);
		if (!rc)
			rc = rc_status(r.st);
	}
	pthread_mutex_unlock(&c->ring_lock);
	return rc;
}

CUresult rc_shm_dtoh(struct rc_ctx *ctx, uint64_t stream, void *dst, CUdeviceptr src, size_t n)
{
	struct rc_conn *c = ctx->dev->conn;
	if (n == 0)
		return CUDA_SUCCESS;
	uint8_t f[32];
	struct wbuf w = { .data = f, .cap = sizeof(f) };
	put_u64(&w, ctx->h);
	put_u64(&w, stream);
	put_u64(&w, src);
	put_u64(&w, n);
	uint64_t id;
	pthread_mutex_lock(&c->ring_lock);
	pthread_mutex_lock(&c->lock);
	CUresult rc = rc_send_frame(c, RGPU_OP_SHM_DTOH, 0, &id, f, w.len, NULL, 0);
	pthread_mutex_unlock(&c->lock);
	size_t got = 0;
	for (int more = 1; !rc && more;) {
		struct rc_reply r;
		rc = rc_reply_frame(c, id, RGPU_OP_SHM_DTOH, &r, NULL, 0);
		if (rc)
			break;
		more = (r.flags & RGPU_F_MORE) != 0;
		if (r.st) {
			rc = rc_status(r.st);
			break;
		}
		if (r.len == 0 && !more)
			break;
		uint32_t slot = get_u32(&r.r), len = get_u32(&r.r);
		if (!rd_ok(&r.r) || slot >= c->nslots || len > RGPU_CHUNK_SIZE || len > n - got) {
			rc = rc_conn_fail(c, RGPU_E_PROTO, "protocol error: bad staging reply");
			break;
		}
		pmemcpy((uint8_t *)dst + got, slot_ptr(c, slot), len);
		__atomic_store_n(&c->slot_state[slot], 0, __ATOMIC_RELEASE);
		got += len;
		if (!more && got != n)
			rc = rc_conn_fail(c, RGPU_E_PROTO, "protocol error: short data");
	}
	pthread_mutex_unlock(&c->ring_lock);
	return rc;
}

CUresult rc_shm_hostcopy(struct rc_ctx *ctx, uint64_t stream, CUdeviceptr dev, void *host,
			 size_t n, int to_host, int async)
{
	struct wbuf *w = rc_req();
	put_u64(w, ctx->h);
	put_u64(w, stream);
	put_u64(w, dev);
	put_u64(w, (uint64_t)(uintptr_t)host);
	put_u64(w, n);
	put_u32(w, (uint32_t)to_host);
	put_u32(w, !async);
	struct rd r;
	/* the memory is shared: even device-to-host data lands in the
	 * caller's buffer when the stream gets there, as with local CUDA */
	if (async)
		return rc_post(ctx->dev->conn, RGPU_OP_SHM_HOSTCOPY, w);
	return rc_call(ctx->dev->conn, RGPU_OP_SHM_HOSTCOPY, w, &r);
}
