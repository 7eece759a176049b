/*
 * Managed and mapped host memory over the network: the GMAC seed's release
 * consistency on a shared address space.
 *
 * Such memory lives on the client at an address from a range reserved for
 * it (RC_VA_BASE...), and its device copy lives on the server at the SAME
 * address (VMEM_MAP), so pointers stored in data or passed to kernels mean
 * the same on both sides and are never translated.
 *
 * Coherence points:
 *  - release, before a kernel launch (or a device-side copy/memset touching
 *    the region): the client's changes since the last release are sent;
 *  - acquire, at a synchronisation (cuCtx/Stream/EventSynchronize, a
 *    synchronous copy) after a launch: the device copy is fetched.
 * Host writes are tracked by page protection: after a release the region is
 * read-only; the first write faults, marks the region dirty and opens it
 * again.  What is coherent: memory reached from kernels of the context that
 * allocated it (managed), or mapped host memory whose address is passed as
 * a kernel argument.  What is not: concurrent host and device access to
 * mapped memory between coherence points, and device pointers to mapped
 * memory stored inside other data.
 *
 * Managed memory a launch may write is guarded until the next acquire:
 * no access at all (PROT_NONE).  A host thread that touches it meanwhile
 * waits until the device is done and the device copy is back (the fault
 * is handed to a thread that synchronises the context and fetches), then
 * goes on: host access while kernels run is serialised after them, never
 * stale, and what the host then writes is kept (systemWideAtomics: the
 * host's and a kernel's atomics on the same words both count).  A thread
 * running host functions is not held (its stream waits for it): it reads
 * what the host copy has, as before.
 */
#include "client.h"
#include "log.h"
#include "settings.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* The shared range: honoured by the driver at 0x600000000000 (NOTES.md);
 * RGPU_VA_BASE (hex, 16 TiB aligned) moves it, e.g. where AddressSanitizer
 * keeps its heap there. */
#define RC_VA_SPAN (16ull << 40)
/* Pinned host memory that same-host servers map for their GPUs at the same
 * address (rc_va_alloc_live): the 1 TiB after the window, which no server
 * reserves with its driver (it reserves the window whole, NOTES.md) */
#define RC_LIVE_SPAN (1ull << 40)
#define RC_USER_END (1ull << 47)
#define GRAIN (2ull << 20)
#define REGIONS_MAX 4096

/* R_REGISTERED: cuMemHostRegister'd memory with a device mapping: the
 * device copy lives at dev, a window address, not at the host address
 * (CUDA lets cuMemHostGetDevicePointer differ); for the others dev == base */
enum { R_MANAGED = 1, R_MAPPED = 2, R_REGISTERED = 3 };

struct region {
	volatile int used;
	uintptr_t base;
	size_t size;             /* rounded to GRAIN (registered: to pages) */
	uintptr_t dev;           /* the device copy's address */
	size_t xoff, xlen;       /* the bytes coherence moves: all but for
				  * registered memory, whose pages around
				  * the application's range are not its own */
	int kind;
	struct rc_ctx *mirror;   /* context whose server holds the device copy */
	volatile int host_dirty; /* written on the host since the last release */
	int dev_dirty;           /* a launch since the last acquire may have written */
	uint64_t dev_stream;     /* the stream of those launches (RC_COH_NONE: several) */
	uint64_t dev_epoch;      /* epoch of the latest of them */
	int ro;                  /* write-protected */
	volatile int guard;      /* (managed) not accessible: a launch may be
				  * writing its device copy */
	uint64_t live;           /* (mapped) connections whose server maps these
				  * very pages for its device: no copy there */
	int auto_refs;           /* (registered by rgpu for graphs' copies of
				  * host memory) the graphs and executables
				  * holding it; 0: the program's own.  Such a
				  * region is its bytes [xoff, xoff+xlen) (two
				  * may share a page), is never write-protected,
				  * goes to the device at every launch naming it
				  * and comes back after one only when a copy
				  * writes it (auto_dst) */
	int auto_dst;
	/* (mapped or registered, up to TWIN_MAX bytes) the bytes as the
	 * device copy was last given or gave them: at a synchronisation the
	 * host's changes since go to a device copy a running kernel may be
	 * reading (a flag it spins on), and only they, as the kernel may be
	 * writing the rest */
	uint8_t *twin;
	int borrowed;            /* (managed) a library's __managed__ variables:
				  * the device copy is the server driver's,
				  * at the address it chose (rc_managed_global) */
	int borrows;             /* (borrowed) the modules and libraries whose
				  * variables lie here: the driver packs those
				  * of several into one managed segment */
};

#define TWIN_MAX (4u << 20) /* (a pinned buffer's region is 2 MiB at least) */

static struct region regions[REGIONS_MAX];
static volatile int regions_hw; /* one past the highest slot ever used */
/* Regions with a device copy: only they need work at copies and
 * synchronisations, so with none (the common case: pinned buffers used for
 * copies only) those paths skip the scan. */
static int mirrored;
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
/* One coherence action at a time (publish, fetch, the release scan of a
 * launch, giving a mapped region its device copy, forgetting a region):
 * two threads syncing or launching at once would otherwise fetch into a
 * region while the other protects it, or map one region twice.  Taken
 * before reg_lock. */
static pthread_mutex_t coh_lock = PTHREAD_MUTEX_INITIALIZER;
/* Counts launches that may write a region (under coh_lock): an acquire
 * clears a region's dev_dirty only if no launch touched it after its
 * synchronisation began, and only if that synchronisation covered the
 * stream those launches ran on.  Otherwise a thread synchronising one
 * stream would fetch a region while another thread's kernel still writes
 * it, and that thread's own acquire would then skip the fetch. */
static uint64_t epoch;
static uint64_t va_base, va_next, live_next;
static struct sigaction old_segv;
static int handler_set;

static struct region *find(uintptr_t p)
{
	int hw = regions_hw;
	for (int i = 0; i < hw; i++) {
		struct region *r = &regions[i];
		if (r->used && p >= r->base && p - r->base < r->size &&
		    (!r->auto_refs || (p - r->base >= r->xoff && p - r->base - r->xoff < r->xlen)))
			return r;
	}
	return NULL;
}

/* The region that begins at base (rgpu's own registrations may share a
 * page with another region, so an address inside names the bytes). */
static struct region *find_base(uintptr_t base)
{
	int hw = regions_hw;
	for (int i = 0; i < hw; i++)
		if (regions[i].used && regions[i].base == base)
			return &regions[i];
	return NULL;
}

/* The region whose device copy holds p (the same as find() but for
 * registered memory). */
static struct region *find_dev(uintptr_t p)
{
	int hw = regions_hw;
	for (int i = 0; i < hw; i++) {
		struct region *r = &regions[i];
		if (r->used && p >= r->dev && p - r->dev < r->size)
			return r;
	}
	return NULL;
}

/* First write after a release: note it and open the region again.  Only
 * async-signal-safe work here (a scan and mprotect). */
static int guard_wait(struct region *r);

static void on_segv(int sig, siginfo_t *si, void *uc)
{
	struct region *r = find((uintptr_t)si->si_addr);
	if (r && r->guard && guard_wait(r) == 0)
		return; /* the access runs again, on the device's data */
	if (r && r->ro) {
		r->host_dirty = 1;
		r->ro = 0;
		if (mprotect((void *)r->base, r->size, PROT_READ | PROT_WRITE) == 0)
			return;
	}
	/* A protection fault whose address we cannot place (valgrind reports
	 * a wrong one; or it lies in one of rgpu's own registrations, never
	 * protected, on a page another region's protection covers): open
	 * every protected region and count them all as written.  Safe: it
	 * only costs an extra publish.  If the fault was not ours it recurs
	 * with nothing protected and goes on below. */
	if (!r || !r->ro) {
		int opened = 0;
		int hw = regions_hw;
		for (int i = 0; i < hw; i++) {
			struct region *x = &regions[i];
			if (x->used && (x->ro || x->guard) &&
			    mprotect((void *)x->base, x->size, PROT_READ | PROT_WRITE) == 0) {
				x->host_dirty = 1;
				x->ro = 0;
				x->guard = 0;
				opened = 1;
			}
		}
		if (opened)
			return;
	}
	/* not ours: as if we were not here */
	if (old_segv.sa_flags & SA_SIGINFO) {
		old_segv.sa_sigaction(sig, si, uc);
	} else if (old_segv.sa_handler == SIG_DFL || old_segv.sa_handler == SIG_IGN) {
		signal(SIGSEGV, SIG_DFL);
		raise(SIGSEGV);
	} else {
		old_segv.sa_handler(sig);
	}
}

static void handler_install(void)
{
	if (handler_set)
		return;
	struct sigaction sa = { .sa_sigaction = on_segv, .sa_flags = SA_SIGINFO | SA_NODEFER };
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGSEGV, &sa, &old_segv) == 0)
		handler_set = 1;
}

/* Write tracking by page protection; off (every region counts as written
 * at each release: correct, slower) with RGPU_WRITE_TRACKING=0 and under
 * valgrind, which does not hand such faults to the program's handler. */
static int tracking(void)
{
	static int on = -1; /* computed once; racing threads compute the same */
	int v = __atomic_load_n(&on, __ATOMIC_RELAXED);
	if (v < 0) {
		const char *pre = getenv("LD_PRELOAD");
		v = rc_setting(RS_WRITE_TRACKING) && !(pre && strstr(pre, "vgpreload"));
		__atomic_store_n(&on, v, __ATOMIC_RELAXED);
	}
	return v;
}

static void protect(struct region *r)
{
	if (!tracking() || r->auto_refs) {
		r->host_dirty = 1;
		return;
	}
	if (!r->ro && mprotect((void *)r->base, r->size, PROT_READ) == 0)
		r->ro = 1;
}

static void unprotect(struct region *r)
{
	if ((r->ro || r->guard) && mprotect((void *)r->base, r->size, PROT_READ | PROT_WRITE) == 0) {
		r->ro = 0;
		r->guard = 0;
	}
}

/* ---- guarded managed memory: a fault waits for the device ---- */

static int guard_pipe[2] = { -1, -1 };
static pthread_once_t guard_once = PTHREAD_ONCE_INIT;

struct guard_req {
	struct region *r;
	volatile int *done;
};

static void futex_wake(volatile int *w)
{
	syscall(SYS_futex, w, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/* Serves faults on guarded regions: the context that holds the device
 * copy is synchronised (its acquire fetches the copy and leaves the
 * region read-only), then the faulting thread goes on. */
static void *guard_thread(void *arg)
{
	(void)arg;
	for (;;) {
		struct guard_req q;
		ssize_t n = read(guard_pipe[0], &q, sizeof(q));
		if (n != (ssize_t)sizeof(q)) {
			if (n < 0 && errno == EINTR)
				continue;
			return NULL;
		}
		struct region *r = q.r;
		struct rc_ctx *m = r->used ? r->mirror : NULL;
		if (r->guard && m) {
			CUcontext popped;
			if (!cuCtxPushCurrent((CUcontext)m)) {
				CUresult rc = cuCtxSynchronize();
				if (rc)
					log_warn("managed memory touched while a kernel ran: waiting for the "
						 "device failed (%d); the host reads its own copy", (int)rc);
				cuCtxPopCurrent(&popped);
			}
		}
		pthread_mutex_lock(&coh_lock);
		if (r->guard) { /* not fetched (failed, or written again since) */
			if (mprotect((void *)r->base, r->size, PROT_READ) == 0) {
				r->guard = 0;
				r->ro = 1;
			}
		}
		pthread_mutex_unlock(&coh_lock);
		__atomic_store_n(q.done, 1, __ATOMIC_RELEASE);
		futex_wake(q.done);
	}
}

/* A forked child has no guard thread: its faults open regions read-only,
 * as without the guard. */
static void guard_forked(void)
{
	if (guard_pipe[0] >= 0)
		close(guard_pipe[0]);
	if (guard_pipe[1] >= 0)
		close(guard_pipe[1]);
	guard_pipe[0] = guard_pipe[1] = -1;
}

static void guard_start(void)
{
	if (pipe2(guard_pipe, O_CLOEXEC))
		return;
	if (pthread_atfork(NULL, NULL, guard_forked)) {
		close(guard_pipe[0]);
		close(guard_pipe[1]);
		guard_pipe[0] = guard_pipe[1] = -1;
		return;
	}
	if (rc_thread_start(guard_thread, NULL)) {
		close(guard_pipe[0]);
		close(guard_pipe[1]);
		guard_pipe[0] = guard_pipe[1] = -1;
	}
}

/* Called in the fault handler: async-signal-safe work only (a write, a
 * futex wait).  -1: not waited for (no guard thread, or a host-function
 * thread, which its stream waits for): the caller opens the region
 * read-only as before. */
static int guard_wait(struct region *r)
{
	if (guard_pipe[1] < 0 || rc_hostfn_thread()) {
		if (mprotect((void *)r->base, r->size, PROT_READ) == 0) {
			r->guard = 0;
			r->ro = 1;
		}
		return -1;
	}
	volatile int done = 0;
	struct guard_req q = { r, &done };
	int e = errno;
	if (write(guard_pipe[1], &q, sizeof(q)) != (ssize_t)sizeof(q)) {
		errno = e;
		return -1;
	}
	while (!__atomic_load_n(&done, __ATOMIC_ACQUIRE))
		syscall(SYS_futex, &done, FUTEX_WAIT, 0, NULL, NULL, 0);
	errno = e;
	return 0;
}

/* A launch may write r's device copy: the host keeps off it until the
 * next acquire (coh_lock held). */
static void guard(struct region *r)
{
	if (r->kind != R_MANAGED || r->guard || !tracking())
		return;
	pthread_once(&guard_once, guard_start);
	if (guard_pipe[1] < 0)
		return;
	if (mprotect((void *)r->base, r->size, PROT_NONE) == 0) {
		r->guard = 1;
		r->ro = 0;
	}
}

/* Host memory at a fresh address of the shared range (memfd-backed if fd
 * >= 0, so a same-host server can map it too). */
/* Maps size bytes (fd's, or anonymous) at the next free place of
 * [*next, end); reg_lock held. */
static void *bump_map(uint64_t *next, uint64_t end, size_t size, int fd)
{
	void *p = MAP_FAILED;
	for (int tries = 0; tries < 64 && p == MAP_FAILED; tries++) {
		uint64_t at = *next;
		if (at + size > end)
			break;
		*next += size + GRAIN; /* a guard gap */
		p = mmap((void *)at, size, PROT_READ | PROT_WRITE,
			 (fd >= 0 ? MAP_SHARED : MAP_PRIVATE | MAP_ANONYMOUS) | MAP_FIXED_NOREPLACE, fd,
			 0);
		if (p != MAP_FAILED && p != (void *)at) {
			munmap(p, size); /* an old kernel ignored the flag */
			p = MAP_FAILED;
		}
	}
	return p == MAP_FAILED ? NULL : p;
}

static void va_init(void)
{
	if (!va_base) {
		/* checked by cuInit (settings.c): 16 TiB aligned */
		va_base = rc_setting(RS_VA_BASE);
		va_next = va_base;
		live_next = va_base + RC_VA_SPAN;
	}
}

/* size bytes (rounded to the grain; fd's, or anonymous) in the shared
 * range, or with live in the terabyte after it */
static void *va_alloc(size_t *size, int fd, int live)
{
	*size = (*size + GRAIN - 1) / GRAIN * GRAIN;
	if (fd >= 0 && ftruncate(fd, (off_t)*size) < 0)
		return NULL;
	pthread_mutex_lock(&reg_lock);
	va_init();
	/* the shared range's upper half is the VMM API's (vmm.c) */
	uint64_t end = live ? va_base + RC_VA_SPAN + RC_LIVE_SPAN : va_base + RC_VA_SPAN / 2;
	void *p = end <= RC_USER_END ? bump_map(live ? &live_next : &va_next, end, *size, fd) : NULL;
	pthread_mutex_unlock(&reg_lock);
	return p;
}

void *rc_va_alloc(size_t *size, int fd) { return va_alloc(size, fd, 0); }

void *rc_va_alloc_live(size_t *size, int fd) { return va_alloc(size, fd, 1); }

static struct region *region_add(void *p, size_t size, int kind, struct rc_ctx *mirror)
{
	pthread_mutex_lock(&reg_lock);
	handler_install();
	struct region *r = NULL;
	for (int i = 0; i < REGIONS_MAX && !r; i++)
		if (!regions[i].used)
			r = &regions[i];
	if (r) {
		r->base = (uintptr_t)p;
		r->size = size;
		r->dev = (uintptr_t)p;
		r->xoff = 0;
		r->xlen = size;
		r->kind = kind;
		r->mirror = mirror;
		r->host_dirty = 1; /* the device copy starts undefined */
		if (mirror)
			__atomic_fetch_add(&mirrored, 1, __ATOMIC_RELAXED);
		r->dev_dirty = 0;
		r->ro = 0;
		r->guard = 0;
		r->live = 0;
		r->auto_refs = 0;
		r->auto_dst = 0;
		r->twin = NULL;
		r->borrowed = 0;
		r->borrows = 0;
		__atomic_store_n(&r->used, 1, __ATOMIC_RELEASE);
		if (r - regions + 1 > regions_hw)
			regions_hw = (int)(r - regions + 1);
	}
	pthread_mutex_unlock(&reg_lock);
	return r;
}

static CUresult mirror_map(struct rc_ctx *c, uintptr_t base, size_t size)
{
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u64(w, base);
	put_u64(w, (size + GRAIN - 1) / GRAIN * GRAIN);
	struct rd r;
	return rc_call(c->dev->conn, RGPU_OP_VMEM_MAP, w, &r);
}

/* Region r (mapped or registered) gets its device copy on c's server;
 * coh_lock held. */
static CUresult give_mirror(struct region *r, struct rc_ctx *c)
{
	CUresult rc = mirror_map(c, r->dev, r->size);
	if (!rc) {
		r->mirror = c;
		__atomic_fetch_add(&mirrored, 1, __ATOMIC_RELAXED);
	}
	return rc;
}

static void mirror_unmap(struct rc_ctx *c, uintptr_t base)
{
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u64(w, base);
	struct rd r;
	rc_call(c->dev->conn, RGPU_OP_VMEM_UNMAP, w, &r);
}

CUresult rc_managed_alloc(struct rc_ctx *c, size_t bytes, void **out)
{
	size_t size = bytes;
	void *p = rc_va_alloc(&size, -1);
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult rc = mirror_map(c, (uintptr_t)p, size);
	if (rc) {
		if (rc == CUDA_ERROR_NOT_SUPPORTED)
			rc_unsupported("managed memory on a server without virtual memory management");
		munmap(p, size);
		return rc;
	}
	if (!region_add(p, size, R_MANAGED, c)) {
		mirror_unmap(c, (uintptr_t)p);
		munmap(p, size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*out = p;
	return CUDA_SUCCESS;
}

CUresult rc_managed_global(struct rc_ctx *c, uintptr_t seg, size_t seglen, uintptr_t a, size_t n, int ref)
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t base = seg & ~(pg - 1);
	size_t size = ((seg + seglen + pg - 1) & ~(pg - 1)) - base;
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&coh_lock);
	struct region *r = find(a);
	if (r && (!r->borrowed || r->mirror != c || r->base != base)) {
		/* the address is another region's here: cannot be both */
		pthread_mutex_unlock(&coh_lock);
		log_err("a managed variable at %#lx lies in memory this process already uses", (unsigned long)a);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (!r) {
		void *p = mmap((void *)base, size, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
		if (p != (void *)base) {
			if (p != MAP_FAILED)
				munmap(p, size);
			pthread_mutex_unlock(&coh_lock);
			log_err("cannot map a library's managed variables at %#lx (%zu bytes) as the server "
				"has them: that address is taken in this process",
				(unsigned long)base, size);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		/* the device copy holds the variables' initial values */
		if ((rc = rc_dtoh_any(c, 0, (void *)a, a, n, 0)) || !(r = region_add(p, size, R_MANAGED, c))) {
			munmap(p, size);
			pthread_mutex_unlock(&coh_lock);
			return rc ? rc : CUDA_ERROR_OUT_OF_MEMORY;
		}
		pthread_mutex_lock(&reg_lock);
		r->borrowed = 1;
		r->borrows = ref != 0;
		r->xoff = a - base;
		r->xlen = n;
		pthread_mutex_unlock(&reg_lock);
	} else {
		/* another variable of the same memory: its bytes fetched, the
		 * span coherence moves widened to cover it */
		unprotect(r);
		rc = rc_dtoh_any(c, 0, (void *)a, a, n, 0);
		size_t lo = a - base < r->xoff ? a - base : r->xoff;
		size_t hi = a - base + n > r->xoff + r->xlen ? a - base + n : r->xoff + r->xlen;
		pthread_mutex_lock(&reg_lock);
		r->xoff = lo;
		r->xlen = hi - lo;
		r->borrows += ref != 0;
		pthread_mutex_unlock(&reg_lock);
	}
	r->host_dirty = 0;
	protect(r);
	if (r->dev_dirty)
		guard(r);
	pthread_mutex_unlock(&coh_lock);
	return rc;
}

void rc_managed_global_drop(uintptr_t a)
{
	pthread_mutex_lock(&coh_lock);
	pthread_mutex_lock(&reg_lock);
	struct region *r = find(a);
	uintptr_t base = 0;
	size_t size = 0;
	/* (the last owner's drop unmaps it) */
	if (r && r->borrowed && --r->borrows <= 0) {
		base = r->base;
		size = r->size;
		free(r->twin);
		r->twin = NULL;
		__atomic_store_n(&r->used, 0, __ATOMIC_RELEASE);
		__atomic_fetch_sub(&mirrored, 1, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&reg_lock);
	pthread_mutex_unlock(&coh_lock);
	if (size)
		munmap((void *)base, size);
}

void rc_coh_ctx_gone(struct rc_ctx *c)
{
	int hw = __atomic_load_n(&regions_hw, __ATOMIC_ACQUIRE);
	for (int i = 0; i < hw; i++) {
		struct region *r = &regions[i];
		/* (a library's managed variables are the library's: their
		 * device copy is reached through a primary context, which a
		 * reset leaves valid) */
		if (!__atomic_load_n(&r->used, __ATOMIC_ACQUIRE) || r->mirror != c || r->borrowed)
			continue;
		if (r->kind == R_MANAGED) {
			/* its device copy went with the context: so does it */
			uintptr_t base = r->base;
			size_t size = 0;
			pthread_mutex_lock(&coh_lock);
			pthread_mutex_lock(&reg_lock);
			if (r->used && r->mirror == c) {
				unprotect(r);
				size = r->size;
				free(r->twin);
				r->twin = NULL;
				__atomic_store_n(&r->used, 0, __ATOMIC_RELEASE);
				__atomic_fetch_sub(&mirrored, 1, __ATOMIC_RELAXED);
			}
			pthread_mutex_unlock(&reg_lock);
			pthread_mutex_unlock(&coh_lock);
			if (size)
				munmap((void *)base, size);
		} else {
			/* the application's host memory: a device copy again
			 * when a launch next names it */
			pthread_mutex_lock(&coh_lock);
			pthread_mutex_lock(&reg_lock);
			if (r->used && r->mirror == c) {
				r->mirror = NULL;
				r->host_dirty = 1;
				r->dev_dirty = 0;
				unprotect(r);
				__atomic_fetch_sub(&mirrored, 1, __ATOMIC_RELAXED);
			}
			pthread_mutex_unlock(&reg_lock);
			pthread_mutex_unlock(&coh_lock);
		}
	}
}

int rc_mapped_add(void *p, size_t size)
{
	return region_add(p, size, R_MAPPED, NULL) ? 0 : -1;
}

void rc_mapped_live(void *p, const struct rc_conn *conn)
{
	int ci = rc_conn_index(conn);
	pthread_mutex_lock(&coh_lock);
	struct region *r = find((uintptr_t)p);
	if (r && (r->kind == R_MAPPED || r->kind == R_REGISTERED) && ci >= 0 && ci < 64)
		r->live |= 1ull << ci;
	pthread_mutex_unlock(&coh_lock);
}

int rc_registered_add(void *p, size_t size, uintptr_t dev, size_t xoff, size_t xlen)
{
	struct region *r = region_add(p, size, R_REGISTERED, NULL);
	if (!r)
		return -1;
	pthread_mutex_lock(&reg_lock);
	r->dev = dev;
	r->xoff = xoff;
	r->xlen = xlen;
	pthread_mutex_unlock(&reg_lock);
	return 0;
}

uintptr_t rc_registered_dev(const void *p)
{
	struct region *r = find((uintptr_t)p);
	return r && r->kind == R_REGISTERED ? r->dev + ((uintptr_t)p - r->base) : 0;
}

/* ---- rgpu's own registrations: host memory a graph's copy names ----
 * (memory.c rc_graph_host).  A graph's copy of pageable host memory names
 * a device copy of it, kept coherent at the graph's launches and the
 * synchronisations after them, as for registered memory; the bytes it
 * moves grow to cover every copy that names its pages. */

void rc_region_auto_init(const void *base, int dst)
{
	pthread_mutex_lock(&reg_lock);
	struct region *r = find_base((uintptr_t)base);
	if (r && r->kind == R_REGISTERED) {
		r->auto_refs = 1;
		r->auto_dst = dst;
	}
	pthread_mutex_unlock(&reg_lock);
}

int rc_region_auto_use(const void *p, size_t n, int dst, uintptr_t *base, uint64_t *dev)
{
	int ret = 0;
	pthread_mutex_lock(&coh_lock);
	pthread_mutex_lock(&reg_lock);
	struct region *r = find((uintptr_t)p);
	if (r && r->kind == R_REGISTERED && r->auto_refs > 0) {
		uintptr_t a = (uintptr_t)p, hi = r->base + r->xoff + r->xlen;
		if (a + n < a || a + n > hi) {
			ret = -1; /* more than the copy that registered it named */
		} else {
			r->auto_refs++;
			r->auto_dst |= dst;
			*base = r->base;
			*dev = r->dev + (a - r->base);
			ret = 1;
		}
	}
	pthread_mutex_unlock(&reg_lock);
	pthread_mutex_unlock(&coh_lock);
	return ret;
}

CUresult rc_region_mirror(struct rc_ctx *c, const void *p)
{
	CUresult rc = CUDA_SUCCESS;
	int ci = rc_conn_index(c->dev->conn);
	pthread_mutex_lock(&coh_lock);
	struct region *r = find((uintptr_t)p);
	if (r && (r->kind == R_REGISTERED || r->kind == R_MAPPED) && !r->mirror &&
	    !(ci >= 0 && ci < 64 && (r->live & (1ull << ci)))) {
		rc = give_mirror(r, c);
	} else if (r && r->mirror && r->mirror->dev->conn != c->dev->conn) {
		rc = CUDA_ERROR_INVALID_VALUE; /* its copy is on another server */
	}
	pthread_mutex_unlock(&coh_lock);
	return rc;
}

void rc_region_auto_ref(uintptr_t base)
{
	pthread_mutex_lock(&reg_lock);
	struct region *r = find_base(base);
	if (r && r->auto_refs > 0)
		r->auto_refs++;
	pthread_mutex_unlock(&reg_lock);
}

size_t rc_region_auto_unref(uintptr_t base, uintptr_t *dev)
{
	size_t size = 0;
	pthread_mutex_lock(&reg_lock);
	struct region *r = find_base(base);
	if (r && r->auto_refs > 0 && --r->auto_refs == 0) {
		size = r->size;
		*dev = r->dev;
	}
	pthread_mutex_unlock(&reg_lock);
	return size;
}

int rc_va_ours(uint64_t a)
{
	uint64_t base = rc_setting(RS_VA_BASE);
	return a >= base && a - base < RC_VA_SPAN + RC_LIVE_SPAN;
}

uintptr_t rc_host_alias(uintptr_t p)
{
	if (!regions_hw)
		return p;
	struct region *r = find_dev(p);
	return r && r->kind == R_REGISTERED ? r->base + (p - r->dev) : p;
}

/* Forgets a region (cuMemFree of managed memory, cuMemFreeHost); the
 * caller unmaps the host side.  0 if p was one. */
int rc_region_free(void *p, size_t *size)
{
	pthread_mutex_lock(&coh_lock);
	pthread_mutex_lock(&reg_lock);
	struct region *r = find_base((uintptr_t)p);
	if (!r || r->borrowed) { /* (a library's: it goes with it) */
		pthread_mutex_unlock(&reg_lock);
		pthread_mutex_unlock(&coh_lock);
		return -1;
	}
	struct rc_ctx *m = r->mirror;
	uintptr_t dev = r->dev;
	*size = r->size;
	unprotect(r); /* registered memory stays the application's */
	free(r->twin);
	r->twin = NULL;
	__atomic_store_n(&r->used, 0, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&reg_lock);
	pthread_mutex_unlock(&coh_lock);
	if (m) {
		__atomic_fetch_sub(&mirrored, 1, __ATOMIC_RELAXED);
		mirror_unmap(m, dev);
	}
	return 0;
}

int rc_managed(const void *p)
{
	/* managed memory always has a device copy */
	if (!__atomic_load_n(&mirrored, __ATOMIC_RELAXED))
		return 0;
	struct region *r = find((uintptr_t)p);
	return r && r->kind == R_MANAGED;
}

int rc_managed_span(uintptr_t p, uintptr_t *base, size_t *size, struct rc_ctx **ctx)
{
	if (!__atomic_load_n(&mirrored, __ATOMIC_RELAXED))
		return -1;
	pthread_mutex_lock(&reg_lock);
	struct region *r = find(p);
	int ok = r && r->kind == R_MANAGED;
	if (ok) {
		*base = r->base;
		*size = r->size;
		*ctx = r->mirror;
	}
	pthread_mutex_unlock(&reg_lock);
	return ok ? 0 : -1;
}

int rc_region_live(const void *p)
{
	struct region *r = find((uintptr_t)p);
	return r && r->live;
}

int rc_region_kind(const void *p)
{
	struct region *r = find((uintptr_t)p);
	return r ? r->kind : 0;
}

/* The region's bytes are now the device copy's too (a publish or a
 * fetch): kept as its twin, for mapped and registered regions small
 * enough (coh_lock held). */
static void twin_take(struct region *r)
{
	if ((r->kind != R_MAPPED && r->kind != R_REGISTERED) || r->auto_refs || r->xlen > TWIN_MAX)
		return;
	if (!r->twin && !(r->twin = malloc(r->xlen)))
		return;
	memcpy(r->twin, (const void *)(r->base + r->xoff), r->xlen);
}

static CUresult publish(struct region *r, uint64_t stream, int async)
{
	/* While a launch may have written the device copy and no acquire has
	 * fetched it, the host has no business writing (not allowed without
	 * concurrent managed access), so the device copy is the newer: sending
	 * the host's would undo another thread's kernel.  Matters most without
	 * write tracking, where every region counts as written. */
	if (!r->host_dirty || r->dev_dirty)
		return CUDA_SUCCESS;
	/* clear first: a write racing with the copy faults and re-marks */
	r->host_dirty = 0;
	protect(r);
	twin_take(r);
	return rc_htod_any(r->mirror, async ? stream : 0, r->dev + r->xoff, (void *)(r->base + r->xoff),
			   r->xlen, async);
}

/* done: the device is known to have finished writing it (else the copy is
 * fetched and stays marked, to be fetched again at the next acquire);
 * stream: the one the copy goes on (0: the legacy stream) */
static CUresult fetch(struct region *r, uint64_t stream, int done)
{
	if (!r->dev_dirty)
		return CUDA_SUCCESS;
	unprotect(r);
	CUresult rc = rc_dtoh_any(r->mirror, stream, (void *)(r->base + r->xoff), r->dev + r->xoff,
				  r->xlen, 0);
	if (!rc)
		twin_take(r);
	if (done && !rc)
		r->dev_dirty = 0;
	r->host_dirty = 0;
	protect(r);
	if (r->dev_dirty)
		guard(r); /* a launch may still write it: fetched again when done */
	return rc;
}

/* Release before a launch in context c: managed memory of c's server, and
 * mapped memory whose address is among the kernel's arguments. */
CUresult rc_coh_launch(struct rc_ctx *c, uint64_t stream, const uint8_t *params, size_t len)
{
	CUresult rc = CUDA_SUCCESS;
	int ci = rc_conn_index(c->dev->conn);
	uint64_t live_bit = ci >= 0 && ci < 64 ? 1ull << ci : 0;
	pthread_mutex_lock(&coh_lock);
	int hw = regions_hw;
	for (int i = 0; i < hw && !rc; i++) {
		struct region *r = &regions[i];
		if (!__atomic_load_n(&r->used, __ATOMIC_ACQUIRE))
			continue;
		if (r->kind == R_MAPPED || r->kind == R_REGISTERED) {
			int hit = 0;
			for (size_t o = 0; !hit && o + 8 <= len; o += 8) {
				uint64_t v;
				memcpy(&v, params + o, 8);
				hit = v >= r->dev && v - r->dev < r->size;
			}
			if (!hit)
				continue;
			if (live_bit && (r->live & live_bit))
				continue; /* the kernel reaches the pages themselves */
			if (!r->mirror && (rc = give_mirror(r, c)))
				break;
		}
		if (!r->mirror || r->mirror->dev->conn != c->dev->conn)
			continue;
		/* on the launch's stream when the copy is in its context; a
		 * copy held by another context (another GPU of the server:
		 * p2pBandwidthLatencyTest) goes before the launch, at once */
		rc = r->mirror == c ? publish(r, stream, 1) : publish(r, 0, 0);
		if (r->auto_refs && !r->auto_dst)
			continue; /* a graph's copy only reads it */
		if (!r->dev_dirty)
			r->dev_stream = stream;
		else if (r->dev_stream != stream)
			r->dev_stream = RC_COH_NONE;
		r->dev_dirty = 1;
		r->dev_epoch = ++epoch;
		guard(r);
	}
	pthread_mutex_unlock(&coh_lock);
	return rc;
}

uint64_t rc_coh_epoch(void)
{
	pthread_mutex_lock(&coh_lock);
	uint64_t e = epoch;
	pthread_mutex_unlock(&coh_lock);
	return e;
}

/* Acquire at a synchronisation on conn. */
CUresult rc_coh_acquire(struct rc_conn *conn, uint64_t stream, uint64_t since)
{
	CUresult rc = CUDA_SUCCESS;
	if (!__atomic_load_n(&mirrored, __ATOMIC_RELAXED))
		return rc;
	pthread_mutex_lock(&coh_lock);
	int hw = regions_hw;
	for (int i = 0; i < hw; i++) {
		struct region *r = &regions[i];
		if (__atomic_load_n(&r->used, __ATOMIC_ACQUIRE) && r->dev_dirty && r->mirror &&
		    r->mirror->dev->conn == conn) {
			int done = r->dev_epoch <= since &&
				   (stream == RC_COH_ALL || (stream != RC_COH_NONE && r->dev_stream == stream));
			CUresult x = fetch(r, 0, done);
			if (x && !rc)
				rc = x;
		}
	}
	pthread_mutex_unlock(&coh_lock);
	return rc;
}

CUresult rc_coh_sync_release(struct rc_conn *conn)
{
	CUresult rc = CUDA_SUCCESS;
	if (!__atomic_load_n(&mirrored, __ATOMIC_RELAXED))
		return rc;
	pthread_mutex_lock(&coh_lock);
	int hw = regions_hw;
	for (int i = 0; i < hw && !rc; i++) {
		struct region *r = &regions[i];
		if (!__atomic_load_n(&r->used, __ATOMIC_ACQUIRE) || !r->twin || !r->host_dirty ||
		    !r->dev_dirty || !r->mirror || r->mirror->dev->conn != conn)
			continue;
		const uint8_t *h = (const uint8_t *)(r->base + r->xoff);
		uint64_t own = 0;
		for (size_t o = 0; o < r->xlen && !rc;) {
			/* (unchanged 4 KiB at a time, then byte by byte) */
			size_t k = r->xlen - o < 4096 ? r->xlen - o : 4096;
			if ((o % 4096) == 0 && !memcmp(h + o, r->twin + o, k)) {
				o += k;
				continue;
			}
			if (h[o] == r->twin[o]) {
				o++;
				continue;
			}
			/* a run of changed bytes (gaps under 64 bytes joined) */
			size_t e = o + 1, same = 0;
			for (; e < r->xlen && same < 64; e++)
				same = h[e] == r->twin[e] ? same + 1 : 0;
			e -= same;
			if (!own)
				rc = rc_stream_internal(r->mirror, &own);
			/* (on the context's own non-blocking stream: the kernel
			 * the application waits for may be spinning on it) */
			if (!rc)
				rc = rc_htod_any(r->mirror, own, r->dev + r->xoff + o, h + o, e - o, 1);
			if (!rc)
				memcpy(r->twin + o, h + o, e - o);
			o = e;
		}
	}
	pthread_mutex_unlock(&coh_lock);
	return rc;
}

/* Before a host function queued on stream at epoch since: a region that
 * only launches on that stream wrote holds, on the device, what they
 * wrote (those before the host function are done: the stream reached it;
 * those after it wait for it).  It is fetched on the context's own
 * non-blocking stream: the legacy stream would wait for the stream the
 * host function holds, which waits for this.  A region written on several
 * streams is left to the next synchronisation. */
CUresult rc_coh_hostfn(struct rc_conn *conn, uint64_t stream, uint64_t since)
{
	CUresult rc = CUDA_SUCCESS;
	if (!__atomic_load_n(&mirrored, __ATOMIC_RELAXED))
		return rc;
	/* Another thread's acquire may hold the lock while its copy waits, in
	 * hostfn.c's gate, for this very host function to return: then the
	 * fetch is given up (after a millisecond), not waited for. */
	int tries = 0;
	while (pthread_mutex_trylock(&coh_lock)) {
		if (++tries == 20)
			return CUDA_ERROR_NOT_READY;
		struct timespec ts = { 0, 50 * 1000 };
		nanosleep(&ts, NULL);
	}
	int hw = regions_hw;
	for (int i = 0; i < hw; i++) {
		struct region *r = &regions[i];
		if (!__atomic_load_n(&r->used, __ATOMIC_ACQUIRE) || !r->dev_dirty || !r->mirror ||
		    r->mirror->dev->conn != conn || r->dev_stream != stream)
			continue;
		uint64_t own;
		CUresult x = rc_stream_internal(r->mirror, &own);
		/* (a launch after the host function writes it again) */
		if (!x)
			x = fetch(r, own, r->dev_epoch <= since);
		if (x && !rc)
			rc = x;
	}
	pthread_mutex_unlock(&coh_lock);
	return rc;
}

/* Before the client itself reads or writes [p, p+n) of a region (copies
 * from or into managed memory): fetch if the device may have written. */
void rc_coh_host_use(const void *p, size_t n, int write)
{
	(void)n;
	if (!__atomic_load_n(&mirrored, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&coh_lock);
	struct region *r = find((uintptr_t)p);
	if (r && r->mirror) {
		/* a copy out of or into managed memory: as before, a stream
		 * ordering the application asked for */
		fetch(r, 0, 1);
		if (write) {
			unprotect(r);
			r->host_dirty = 1;
		}
	}
	pthread_mutex_unlock(&coh_lock);
}

/* Before a device-side operation on a managed address (memset, device
 * copy): publish, and note the device copy may change. */
void rc_coh_device_use(uint64_t p)
{
	if (!__atomic_load_n(&mirrored, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&coh_lock);
	struct region *r = find_dev((uintptr_t)p);
	if (r && r->mirror) {
		publish(r, 0, 0);
		if (r->auto_refs && !r->auto_dst) {
			/* a graph's copy only reads it: the host's stays the newer */
			pthread_mutex_unlock(&coh_lock);
			return;
		}
		if (r->dev_dirty && r->dev_stream != 0)
			r->dev_stream = RC_COH_NONE;
		else
			r->dev_stream = 0;
		r->dev_dirty = 1;
		r->dev_epoch = ++epoch;
	}
	pthread_mutex_unlock(&coh_lock);
}

/* Attaching managed memory to a stream tells a device without concurrent
 * managed access which stream's work may touch it, so that the host may
 * use it while other streams run.  Here the host and the device copies
 * meet only at coherence points (a launch releases, a synchronisation
 * acquires), whatever the attachment, and work that does not touch the
 * memory never holds the host up: there is nothing to change.  The call
 * checks what CUDA checks and succeeds. */
RC_EXPORT CUresult cuStreamAttachMemAsync(CUstream s, CUdeviceptr dptr, size_t length,
					  unsigned int flags)
{
	struct rc_ctx *c;
	uint64_t h;
	CUresult rc = rc_stream_resolve(s, &c, &h);
	if (rc)
		return rc;
	if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST &&
	    flags != CU_MEM_ATTACH_SINGLE)
		return CUDA_ERROR_INVALID_VALUE;
	/* one stream's own memory needs a stream of its own */
	if (flags == CU_MEM_ATTACH_SINGLE &&
	    (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD))
		return CUDA_ERROR_INVALID_VALUE;
	if (!rc_managed((const void *)(uintptr_t)dptr))
		return CUDA_ERROR_INVALID_VALUE;
	(void)length; /* 0 or the allocation: either way all of it */
	return CUDA_SUCCESS;
}
