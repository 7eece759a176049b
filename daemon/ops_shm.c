/* Same-host copies through shared memory (see shm.h and proto.h). */
#include "log.h"
#include "rgpud.h"
#include "session.h"
#include "shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define D (&rgpud_server.drv)
#define SLOT_STATE_PAGE 4096

static uint8_t *slot_ptr(struct shm_state *sh, uint32_t i)
{
	return sh->map[sh->ring].sbase + SLOT_STATE_PAGE + (size_t)i * RGPU_CHUNK_SIZE;
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
	struct shm_state *sh = s->shm;
	for (uint32_t i = 0; sh && i < sh->nslots; i++) {
		if (sh->slot_ev[i] && sh->slot_ctx[i] == ctx) {
			if (sh->slot_seq[i])
				D->cuEventSynchronize(sh->slot_ev[i]);
			D->cuEventDestroy_v2(sh->slot_ev[i]);
			sh->slot_ev[i] = NULL;
			if (sh->slot_seq[i]) {
				sh->slot_seq[i] = 0;
				__atomic_store_n(&sh->slot_state[i], 0, __ATOMIC_RELEASE);
			}
		}
	}
}

void shm_cleanup(struct session *s)
{
	struct shm_state *sh = s->shm;
	if (!sh)
		return;
	for (uint32_t i = 0; i < sh->nslots; i++) {
		if (sh->slot_ev[i]) {
			if (sh->slot_seq[i])
				D->cuEventSynchronize(sh->slot_ev[i]);
			D->cuEventDestroy_v2(sh->slot_ev[i]);
		}
	}
	for (int i = 0; i < sh->n; i++)
		if (sh->map[i].sbase)
			map_drop(&sh->map[i]);
	free(sh);
	s->shm = NULL;
}

int op_shm_attach(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint32_t kind = get_u32(r), fd = get_u32(r);
	uint64_t cbase = get_u64(r), size = get_u64(r);
	uint32_t nslots = get_u32(r);
	if (!rd_done(r))
		return OP_DROP;
	int pid;
	unsigned uid;
	if (rgpu_unix_peer(s->conn, &pid, &uid) < 0)
		return CUDA_ERROR_NOT_SUPPORTED; /* not on this host */
	if ((kind != 1 && kind != 2) || size == 0 || size > (1ull << 40) ||
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
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd/%u", pid, fd);
	int mfd = open(path, O_RDWR | O_CLOEXEC);
	struct stat st;
	if (mfd < 0 || fstat(mfd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != uid ||
	    (uint64_t)st.st_size < size) {
		log_warn("%s: cannot share the client's memory %s: %s", s->name, path,
			 mfd < 0 ? strerror(errno) : "not the client's memory file of that size");
		if (mfd >= 0)
			close(mfd);
		return CUDA_ERROR_INVALID_VALUE;
	}
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	close(mfd);
	if (p == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct shm_map *m = &sh->map[sh->n];
	*m = (struct shm_map){ .cbase = cbase, .sbase = p, .size = size, .kind = (int)kind };
	if (kind == 1) {
		sh->ring = sh->n;
		sh->nslots = nslots;
		sh->slot_state = p;
	}
	sh->n++;
	log_debug("%s: sharing %llu bytes of client memory (%s)", s->name,
		  (unsigned long long)size, kind == 1 ? "staging" : "host memory");
	return CUDA_SUCCESS;
}

int op_shm_detach(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t cbase = get_u64(r);
	if (!rd_done(r))
		return OP_DROP;
	struct shm_state *sh = s->shm;
	for (int i = 0; sh && i < sh->n; i++) {
		if (sh->map[i].kind == 2 && sh->map[i].sbase && sh->map[i].cbase == cbase) {
			map_drop(&sh->map[i]);
			sh->map[i] = sh->map[--sh->n];
			if (sh->ring == sh->n)
				sh->ring = i;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_INVALID_VALUE;
}

/* Hands back every slot the GPU has finished reading. */
static void slots_reap(struct shm_state *sh)
{
	for (uint32_t i = 0; i < sh->nslots; i++) {
		if (sh->slot_seq[i] && D->cuEventQuery(sh->slot_ev[i]) == CUDA_SUCCESS) {
			sh->slot_seq[i] = 0;
			__atomic_store_n(&sh->slot_state[i], 0, __ATOMIC_RELEASE);
		}
	}
}

static int slot_wait(struct shm_state *sh, uint32_t i)
{
	if (!sh->slot_seq[i])
		return CUDA_SUCCESS;
	int rc = D->cuEventSynchronize(sh->slot_ev[i]);
	sh->slot_seq[i] = 0;
	__atomic_store_n(&sh->slot_state[i], 0, __ATOMIC_RELEASE);
	return rc;
}

static int slot_event(struct shm_state *sh, uint32_t i, uint64_t ctx)
{
	if (sh->slot_ev[i] && sh->slot_ctx[i] != ctx) {
		D->cuEventDestroy_v2(sh->slot_ev[i]);
		sh->slot_ev[i] = NULL;
	}
	if (!sh->slot_ev[i]) {
		CUevent ev;
		int rc = D->cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING);
		if (rc)
			return rc;
		sh->slot_ev[i] = ev;
		sh->slot_ctx[i] = ctx;
	}
	return CUDA_SUCCESS;
}

int op_shm_htod(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r), sid = get_u64(r), dst = get_u64(r);
	uint64_t total = get_u64(r), off = get_u64(r);
	uint32_t slot = get_u32(r), len = get_u32(r);
	if (!rd_done(r))
		return OP_DROP;
	struct shm_state *sh = s->shm;
	if (!sh || sh->ring < 0 || slot >= sh->nslots || len > RGPU_CHUNK_SIZE || off > total ||
	    len > total - off)
		return OP_DROP;
	CUstream st;
	int rc = session_enter_ctx(s, ctx, NULL);
	if (!rc)
		rc = session_stream(s, sid, &st);
	if (!rc && !session_owns_range(s, dst + off, len))
		rc = CUDA_ERROR_INVALID_VALUE;
	if (!rc)
		rc = slot_event(sh, slot, ctx);
	if (rc) {
		__atomic_store_n(&sh->slot_state[slot], 0, __ATOMIC_RELEASE);
		return rc;
	}
	shm_register(s, &sh->map[sh->ring]);
	slots_reap(sh);
	rc = D->cuMemcpyHtoDAsync_v2(dst + off, slot_ptr(sh, slot), len, st);
	if (!rc)
		rc = D->cuEventRecord(sh->slot_ev[slot], st);
	if (rc) {
		__atomic_store_n(&sh->slot_state[slot], 0, __ATOMIC_RELEASE);
		return rc;
	}
	sh->slot_seq[slot] = ++sh->seq;
	if (off + len == total && !(h->flags & RGPU_F_NOREPLY))
		rc = slot_wait(sh, slot);
	return rc;
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
	slots_reap(sh);
	uint32_t oldest = UINT32_MAX;
	for (uint32_t i = 0; i < sh->nslots; i++) {
		if (!sh->slot_seq[i] && __atomic_load_n(&sh->slot_state[i], __ATOMIC_ACQUIRE) == 0)
			return CUDA_SUCCESS;
		if (sh->slot_seq[i] && (oldest == UINT32_MAX || sh->slot_seq[i] < sh->slot_seq[oldest]))
			oldest = i;
	}
	return oldest == UINT32_MAX ? CUDA_SUCCESS : slot_wait(sh, oldest);
}

/* A slot the client has handed back, waiting for it if need be: the client
 * is busy copying earlier chunks out. */
static int slot_take(struct session *s, struct shm_state *sh, uint32_t *next)
{
	for (int spins = 0; spins < 500000; spins++) {
		slots_reap(sh);
		for (uint32_t k = 0; k < sh->nslots; k++) {
			uint32_t i = (*next + k) % sh->nslots;
			if (!sh->slot_seq[i] && __atomic_load_n(&sh->slot_state[i], __ATOMIC_ACQUIRE) == 0) {
				__atomic_store_n(&sh->slot_state[i], 1, __ATOMIC_RELEASE);
				*next = (i + 1) % sh->nslots;
				return (int)i;
			}
		}
		struct timespec ts = { 0, 20 * 1000 };
		nanosleep(&ts, NULL);
	}
	log_warn("%s: the client hands back no staging slot", s->name);
	return -1;
}

int op_shm_dtoh(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r), sid = get_u64(r), src = get_u64(r), size = get_u64(r);
	if (!rd_done(r))
		return OP_DROP;
	struct shm_state *sh = s->shm;
	CUstream st;
	int rc = sh && sh->ring >= 0 ? session_enter_ctx(s, ctx, NULL) : CUDA_ERROR_INVALID_VALUE;
	if (!rc)
		rc = session_stream(s, sid, &st);
	if (!rc && !session_owns_range(s, src, size))
		rc = CUDA_ERROR_INVALID_VALUE;
	if (!rc && s->deferred) {
		rc = s->deferred;
		s->deferred = 0;
	}
	if (!rc)
		shm_register(s, &sh->map[sh->ring]);
	uint64_t nchunks = (size + RGPU_CHUNK_SIZE - 1) / RGPU_CHUNK_SIZE;
	uint32_t next = 0;
	int prev = -1;
	size_t prev_len = 0;
	/* queue chunk k, then finish and announce chunk k-1: GPU and client
	 * copies overlap */
	for (uint64_t k = 0; !rc && k <= nchunks; k++) {
		int cur = -1;
		size_t n = 0;
		if (k < nchunks) {
			uint64_t off = k * RGPU_CHUNK_SIZE;
			n = size - off < RGPU_CHUNK_SIZE ? size - off : RGPU_CHUNK_SIZE;
			cur = slot_take(s, sh, &next);
			if (cur < 0) {
				rc = CUDA_ERROR_UNKNOWN;
				break;
			}
			rc = slot_event(sh, (uint32_t)cur, ctx);
			if (!rc)
				rc = D->cuMemcpyDtoHAsync_v2(slot_ptr(sh, (uint32_t)cur), src + off, n, st);
			if (!rc)
				rc = D->cuEventRecord(sh->slot_ev[cur], st);
			if (rc) {
				__atomic_store_n(&sh->slot_state[cur], 0, __ATOMIC_RELEASE);
				break;
			}
		}
		if (prev >= 0) {
			rc = D->cuEventSynchronize(sh->slot_ev[prev]);
			if (rc)
				break;
			uint8_t f[8];
			for (int b = 0; b < 4; b++) {
				f[b] = (uint8_t)((uint32_t)prev >> (8 * b));
				f[4 + b] = (uint8_t)((uint32_t)prev_len >> (8 * b));
			}
			if (session_send_reply(s, h, k < nchunks ? RGPU_F_MORE : 0, 0, f, 8) < 0)
				return OP_DROP;
		}
		prev = cur;
		prev_len = n;
	}
	if (rc || size == 0) {
		if (rc)
			D->cuStreamSynchronize(st);
		if (prev >= 0 && rc)
			__atomic_store_n(&sh->slot_state[prev], 0, __ATOMIC_RELEASE);
		if (session_send_reply(s, h, 0, rc, NULL, 0) < 0)
			return OP_DROP;
	}
	return OP_REPLIED;
}

int op_shm_hostcopy(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r), sid = get_u64(r), dev = get_u64(r), host = get_u64(r);
	uint64_t size = get_u64(r);
	uint32_t dir = get_u32(r), sync = get_u32(r);
	if (!rd_done(r))
		return OP_DROP;
	CUstream st;
	int rc = session_enter_ctx(s, ctx, NULL);
	if (!rc)
		rc = session_stream(s, sid, &st);
	if (!rc && !session_owns_range(s, dev, size))
		rc = CUDA_ERROR_INVALID_VALUE;
	if (rc)
		return rc;
	struct shm_state *sh = s->shm;
	struct shm_map *m = NULL;
	for (int i = 0; sh && i < sh->n; i++) {
		struct shm_map *x = &sh->map[i];
		if (x->kind == 2 && host >= x->cbase && host - x->cbase <= x->size &&
		    size <= x->size - (host - x->cbase)) {
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
