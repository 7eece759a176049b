/* Same-host copies through shared memory (see shm.h and proto.h). */
#include "log.h"
#include "rgpud.h"
#include "session.h"
#include "shm.h"
#include "size.h"
#include "stage.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define D (&rgpud_server.drv)
#define SLOT_STATE_PAGE 4096

/* A client that holds every slot this long while rgpud waits is stuck. */
#define SHM_GIVEBACK_MS 30000

uint64_t shm_pin_cap(void)
{
	static uint64_t cap;
	if (!cap) {
		const char *e = getenv("RGPUD_MAX_PINNED");
		char err[200];
		long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
		uint64_t quarter = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz / 4 : 1ull << 30;
		uint64_t v = quarter;
		if (e && *e && rgpu_parse_size(e, &v, err, sizeof(err)) < 0) {
			log_warn("RGPUD_MAX_PINNED=%s: %s; using a quarter of memory", e, err);
			v = quarter;
		}
		cap = v ? v : 1;
	}
	return cap;
}

/* Pins a region with the driver on first use (needs a current context);
 * unpinned, copies still work, through the driver's own staging. */
static void shm_register(struct session *s, struct shm_map *m)
{
	if (m->registered)
		return;
	int rc = D->cuMemHostRegister_v2(m->sbase, m->size, CU_MEMHOSTREGISTER_PORTABLE);
	m->registered = rc == CUDA_SUCCESS ? 1 : -1;
	if (rc)
		log_warn("%s: cannot pin %zu bytes of shared memory: %s", s->name, m->size,
			 rgpud_cu_errname(D, rc));
}

static void map_drop(struct shm_map *m)
{
	if (m->registered == 1)
		D->cuMemHostUnregister(m->sbase);
	munmap(m->sbase, m->size);
	m->sbase = NULL;
}

void shm_forget_ctx(struct session *s, uint64_t ctx)
{
	if (s->shm)
		xfer_pool_forget_ctx(&s->shm->pool, ctx);
}

void shm_cleanup(struct session *s)
{
	struct shm_state *sh = s->shm;
	if (!sh)
		return;
	xfer_pool_free(&sh->pool);
	for (int i = 0; i < sh->n; i++)
		if (sh->map[i].sbase)
			map_drop(&sh->map[i]);
	free(sh);
	s->shm = NULL;
}

/* While the ring waits for the client to hand a slot back: a client that
 * is gone (killed mid-copy) ends the session at once, not after the wait. */
static int shm_idle(void *arg, unsigned waited_ms)
{
	struct session *s = arg;
	struct pollfd p = { .fd = rgpu_conn_fd(s->conn), .events = POLLRDHUP };
	if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) {
		log_info("%s: the client went away during a copy", s->name);
		return XFER_LOST;
	}
	if (waited_ms > SHM_GIVEBACK_MS) {
		log_warn("%s: the client hands back no staging slot", s->name);
		return CUDA_ERROR_UNKNOWN;
	}
	struct timespec ts = { 0, 20 * 1000 };
	nanosleep(&ts, NULL);
	return 0;
}

int shm_client_fd(struct session *s, uint32_t fd, uint64_t size)
{
	int pid;
	unsigned uid;
	if (rgpu_unix_peer(s->conn, &pid, &uid) < 0)
		return -1;
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd/%u", pid, fd);
	int mfd = open(path, O_RDWR | O_CLOEXEC);
	struct stat st;
	/* whole pages: a file may end inside the last page of its mapping
	 * (NCCL's /dev/shm buffers do), whose tail is then the client's too */
	uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
	if (mfd < 0 || fstat(mfd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != uid ||
	    st.st_size < 0 || ((uint64_t)st.st_size + pg - 1) / pg * pg < size) {
		log_warn("%s: cannot share the client's memory %s: %s", s->name, path,
			 mfd < 0 ? strerror(errno) : "not the client's memory file of that size");
		if (mfd >= 0)
			close(mfd);
		return -1;
	}
	return mfd;
}

/* [p, p + n) lies in m, at the client's addresses */
static int map_holds(const struct shm_map *m, uint64_t p, uint64_t n)
{
	return p >= m->cbase && p - m->cbase <= m->size && n <= m->size - (p - m->cbase);
}

int shm_owns_live(const struct session *s, uint64_t p, uint64_t n)
{
	const struct shm_state *sh = s->shm;
	for (int i = 0; sh && i < sh->n; i++)
		if (sh->map[i].live && map_holds(&sh->map[i], p, n))
			return 1;
	return 0;
}

/* Makes a context of the session current for a call that needs one (any:
 * the pinning below is PORTABLE); 0 when the session has none. */
static int any_ctx(struct session *s)
{
	if (s->cur_ctx)
		return 1;
	for (uint32_t i = 0; i < s->ht.n; i++)
		if (s->ht.e[i].kind == HK_CTX && session_enter_ctx(s, ht_id_at(&s->ht, i), NULL) == 0)
			return 1;
	return 0;
}

/* Host memory the client allocated pinned (cuMemHostAlloc, in its shared
 * address range): mapped at the client's own address when that is free
 * here, and pinned with a device mapping, so that the device address is
 * the host address as under CUDA's unified addressing.  Then kernels,
 * memsets and copies given that address reach the client's pages while
 * they run, as NCCL's proxy flags and XLA's host buffers need (a copy kept
 * coherent at launches and synchronisations is not enough for them).
 * Otherwise it is mapped anywhere and serves copies only.  1 when live. */
static int map_live(struct session *s, int mfd, uint64_t cbase, uint64_t size, uint64_t off,
		    void **out)
{
	long pg = sysconf(_SC_PAGESIZE);
	*out = MAP_FAILED;
	if (!D->cuMemHostGetDevicePointer_v2 || pg <= 0 || cbase % (uint64_t)pg ||
	    off % (uint64_t)pg || off > INT64_MAX || cbase + size < cbase ||
	    cbase + size > (1ull << 47) || !any_ctx(s))
		return 0;
	void *p = mmap((void *)(uintptr_t)cbase, size, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_FIXED_NOREPLACE, mfd, (off_t)off);
	if (p == MAP_FAILED)
		return 0;
	if (p != (void *)(uintptr_t)cbase) { /* a kernel without the flag */
		munmap(p, size);
		return 0;
	}
	*out = p;
	int rc = D->cuMemHostRegister_v2(p, size,
					 CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
	CUdeviceptr d = 0;
	if (rc == CUDA_SUCCESS && (D->cuMemHostGetDevicePointer_v2(&d, p, 0) != CUDA_SUCCESS ||
				   d != (CUdeviceptr)cbase)) {
		D->cuMemHostUnregister(p);
		rc = CUDA_ERROR_NOT_SUPPORTED;
	}
	if (rc) {
		log_debug("%s: host memory at %#llx is shared for copies only: %s", s->name,
			  (unsigned long long)cbase, rgpud_cu_errname(D, rc));
		return 0;
	}
	return 1;
}

int op_shm_attach(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint32_t kind = get_u32(r), fd = get_u32(r);
	uint64_t cbase = get_u64(r), size = get_u64(r);
	uint32_t nslots = get_u32(r);
	/* kind 3: registered host memory that is a shared file's pages (NCCL's
	 * /dev/shm buffers): the file offset follows, and cbase is the device
	 * address the client gave it, where it is mapped here, live */
	uint64_t off = kind == 3 ? get_u64(r) : 0;
	if (!rd_done(r))
		return OP_DROP;
	int pid;
	unsigned uid;
	if (rgpu_unix_peer(s->conn, &pid, &uid) < 0)
		return CUDA_ERROR_NOT_SUPPORTED; /* not on this host */
	if (kind < 1 || kind > 3 || size == 0 || size > (1ull << 40) || off > (1ull << 48) ||
	    (kind == 1 && (nslots == 0 || nslots > SHM_SLOTS_MAX ||
			   size != SLOT_STATE_PAGE + (uint64_t)nslots * RGPU_CHUNK_SIZE)))
		return CUDA_ERROR_INVALID_VALUE;
	if (!s->shm) {
		if (!(s->shm = calloc(1, sizeof(*s->shm))))
			return CUDA_ERROR_OUT_OF_MEMORY;
		s->shm->ring = -1;
	}
	struct shm_state *sh = s->shm;
	if (sh->n == SHM_MAPS_MAX || (kind == 1 && sh->ring >= 0))
		return CUDA_ERROR_INVALID_VALUE;
	if (size > shm_pin_cap() - sh->mapped || sh->mapped > shm_pin_cap()) {
		char a[32], b[32], c[32];
		rgpu_format_size(size, a, sizeof(a));
		rgpu_format_size(sh->mapped, b, sizeof(b));
		rgpu_format_size(shm_pin_cap(), c, sizeof(c));
		log_warn("%s: refused to share %s more of the client's memory: the session has %s, "
			 "the cap is %s (RGPUD_MAX_PINNED)", s->name, a, b, c);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	int mfd = shm_client_fd(s, fd, size + off);
	if (mfd < 0)
		return CUDA_ERROR_INVALID_VALUE;
	void *p = MAP_FAILED;
	/* (kind 2: nslots is 1 when the client placed it outside the window
	 * it shares with this server's driver, so it can be mapped here at
	 * its own address) */
	int live = ((kind == 2 && nslots == 1) || kind == 3) && map_live(s, mfd, cbase, size, off, &p);
	if (kind == 3 && !live) {
		close(mfd);
		if (p != MAP_FAILED)
			munmap(p, size);
		return CUDA_ERROR_NOT_SUPPORTED; /* the client keeps a device copy */
	}
	if (p == MAP_FAILED)
		p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	close(mfd);
	if (p == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct shm_map *m = &sh->map[sh->n];
	*m = (struct shm_map){ .cbase = cbase, .sbase = p, .size = size, .kind = (int)kind,
			       .registered = live, .live = live };
	if (kind == 1) {
		sh->ring = sh->n;
		xfer_pool_init_shared(&sh->pool, &stage_dev, (uint8_t *)p + SLOT_STATE_PAGE,
				      (int)nslots, RGPU_CHUNK_SIZE, p, shm_idle, s);
	}
	sh->mapped += size;
	sh->n++;
	log_debug("%s: sharing %llu bytes of client memory (%s)", s->name,
		  (unsigned long long)size,
		  kind == 1 ? "staging"
		  : kind == 3 ? "registered host memory, mapped for the device at its device address"
		  : live ? "host memory, mapped for the device at its address"
			 : "host memory");
	put_u32(out, (uint32_t)live);
	return CUDA_SUCCESS;
}

int op_shm_detach(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t cbase = get_u64(r);
	if (!rd_done(r))
		return OP_DROP;
	struct shm_state *sh = s->shm;
	for (int i = 0; sh && i < sh->n; i++) {
		if (sh->map[i].kind >= 2 && sh->map[i].sbase && sh->map[i].cbase == cbase) {
			sh->mapped -= sh->map[i].size;
			map_drop(&sh->map[i]);
			sh->map[i] = sh->map[--sh->n];
			if (sh->ring == sh->n)
				sh->ring = i;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_INVALID_VALUE;
}

int op_shm_htod(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r), sid = get_u64(r), dst = get_u64(r);
	uint64_t total = get_u64(r), off = get_u64(r);
	uint32_t slot = get_u32(r), len = get_u32(r);
	if (!rd_done(r))
		return OP_DROP;
	struct shm_state *sh = s->shm;
	if (!sh || sh->ring < 0 || slot >= (uint32_t)sh->pool.n || len > RGPU_CHUNK_SIZE ||
	    off > total || len > total - off)
		return OP_DROP;
	void *st;
	int rc = stage_check(s, ctx, sid, dst + off, len, &st);
	if (!rc)
		rc = xfer_pool_claim(&sh->pool, (int)slot, ctx);
	if (rc) {
		xfer_pool_drop(&sh->pool, (int)slot);
		return rc;
	}
	shm_register(s, &sh->map[sh->ring]);
	xfer_pool_reap(&sh->pool);
	return stage_htod(&sh->pool, (int)slot, dst + off, len, st, 1,
			  off + len == total && !(h->flags & RGPU_F_NOREPLY));
}

int op_shm_slot_wait(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r);
	if (!rd_done(r))
		return OP_DROP;
	(void)ctx;
	struct shm_state *sh = s->shm;
	if (!sh || sh->ring < 0)
		return CUDA_ERROR_INVALID_VALUE;
	return xfer_pool_wait_any(&sh->pool);
}

/* data frames: status, then (slot, length) of the chunk in the ring */
static int send_slot(struct session *s, const struct rgpu_hdr *h, struct xfer_pool *pool, int i,
		     size_t n, int more)
{
	uint8_t f[8];
	for (int b = 0; b < 4; b++) {
		f[b] = (uint8_t)((uint32_t)i >> (8 * b));
		f[4 + b] = (uint8_t)((uint32_t)n >> (8 * b));
	}
	return session_send_reply(s, h, more ? RGPU_F_MORE : 0, 0, f, 8);
}

int op_shm_dtoh(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r), sid = get_u64(r), src = get_u64(r), size = get_u64(r);
	if (!rd_done(r))
		return OP_DROP;
	struct shm_state *sh = s->shm;
	void *st = NULL;
	int rc = sh && sh->ring >= 0 ? stage_check(s, ctx, sid, src, size, &st)
				     : CUDA_ERROR_INVALID_VALUE;
	if (!rc)
		shm_register(s, &sh->map[sh->ring]);
	return stage_dtoh(s, h, rc ? NULL : &sh->pool, ctx, st, src, size, send_slot, rc);
}

int op_shm_hostcopy(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r), sid = get_u64(r), dev = get_u64(r), host = get_u64(r);
	uint64_t size = get_u64(r);
	uint32_t dir = get_u32(r), sync = get_u32(r);
	if (!rd_done(r))
		return OP_DROP;
	void *st;
	int rc = stage_check(s, ctx, sid, dev, size, &st);
	if (rc)
		return rc;
	struct shm_state *sh = s->shm;
	struct shm_map *m = NULL;
	for (int i = 0; sh && i < sh->n; i++) {
		struct shm_map *x = &sh->map[i];
		if (x->kind == 2 && map_holds(x, host, size)) {
			m = x;
			break;
		}
	}
	if (!m)
		return CUDA_ERROR_INVALID_VALUE;
	shm_register(s, m);
	uint8_t *hp = m->sbase + (host - m->cbase);
	if (dir == 0)
		return sync ? (int)D->cuMemcpyHtoD_v2(dev, hp, size) : (int)D->cuMemcpyHtoDAsync_v2(dev, hp, size, st);
	return sync ? (int)D->cuMemcpyDtoH_v2(hp, dev, size) : (int)D->cuMemcpyDtoHAsync_v2(hp, dev, size, st);
}
