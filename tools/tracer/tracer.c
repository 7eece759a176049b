/*
 * rgpu-tracer: a pass-through libcuda.so.1 that logs what a program asks of
 * the CUDA driver.  See README.md.
 *
 * Every exported driver entry point, every pointer handed out by
 * cuGetProcAddress and every entry of every export table goes through a
 * trampoline (gen-tracer.py) that calls rt_enter() with the register
 * arguments, calls the real function with the caller's stack intact, and
 * calls rt_exit() with the return value.
 */
#define _GNU_SOURCE
#include <cuda.h>

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "../../client/export_tables.h"

#define EXPORT __attribute__((visibility("default")))
#define HIDDEN __attribute__((visibility("hidden")))

extern const char *const rt_names[];
extern const int rt_nnamed, rt_npool;
extern char rt_pool[];

enum { K_NAMED, K_PROC, K_TABLE };

struct slot {
	void *real;
	int kind;
	int resolved;
	char label[96];
	unsigned char uuid[16]; /* K_TABLE */
	int entry;
};

static struct slot *slots;
static int nslots; /* named + used pool entries */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static void *realh;
static FILE *logf;
static int dump_ptrs = 1;
static uintptr_t xlo[16], xhi[16];
static int nx;

/* real entry points the hooks need */
static CUresult (*real_gpa)(const char *, void **, int, cuuint64_t);
static CUresult (*real_gpa2)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
static CUresult (*real_get)(const void **, const CUuuid *);

static CUresult hook_gpa(const char *, void **, int, cuuint64_t);
static CUresult hook_gpa2(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
static CUresult hook_get(const void **, const CUuuid *);

static void tlog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void tlog(const char *fmt, ...)
{
	char buf[4096];
	int n = snprintf(buf, sizeof(buf), "[%ld] ", (long)syscall(SYS_gettid));
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
	va_end(ap);
	flockfile(logf);
	fputs(buf, logf);
	fputc('\n', logf);
	funlockfile(logf);
	fflush(logf);
}

static CUresult missing(void)
{
	return CUDA_ERROR_NOT_FOUND;
}

static void exec_ranges(const char *path)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[1024], rp[4096];
	if (!f)
		return;
	if (!realpath(path, rp))
		snprintf(rp, sizeof(rp), "%s", path);
	while (fgets(line, sizeof(line), f) && nx < 16) {
		unsigned long lo, hi;
		char perms[8];
		int off = 0;
		if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %n", &lo, &hi, perms, &off) < 3)
			continue;
		char *p = line + off;
		p[strcspn(p, "\n")] = 0;
		if (perms[2] == 'x' && !strcmp(p, rp)) {
			xlo[nx] = lo;
			xhi[nx++] = hi;
		}
	}
	fclose(f);
}

static int is_code(const void *p)
{
	for (int i = 0; i < nx; i++)
		if ((uintptr_t)p >= xlo[i] && (uintptr_t)p < xhi[i])
			return 1;
	return 0;
}

static void setup(void)
{
	const char *lp = getenv("RGPU_TRACE_LOG");
	logf = lp ? fopen(lp, "a") : NULL;
	if (!logf)
		logf = stderr;
	if (getenv("RGPU_TRACE_NODUMP"))
		dump_ptrs = 0;
	const char *path = getenv("RGPU_TRACE_REAL");
	if (!path)
		path = "/usr/local/nvidia/lib64/libcuda.so.1";
	realh = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
	if (!realh) {
		fprintf(stderr, "rgpu-tracer: cannot load %s: %s\n", path, dlerror());
		abort();
	}
	exec_ranges(path);
	real_gpa = (CUresult(*)(const char *, void **, int, cuuint64_t))dlsym(realh, "cuGetProcAddress");
	real_gpa2 = (CUresult(*)(const char *, void **, int, cuuint64_t,
				 CUdriverProcAddressQueryResult *))dlsym(realh, "cuGetProcAddress_v2");
	real_get = (CUresult(*)(const void **, const CUuuid *))dlsym(realh, "cuGetExportTable");
	slots = calloc((size_t)(rt_nnamed + rt_npool), sizeof(*slots));
	for (int i = 0; i < rt_nnamed; i++) {
		slots[i].kind = K_NAMED;
		snprintf(slots[i].label, sizeof(slots[i].label), "%s", rt_names[i]);
	}
	nslots = rt_nnamed;
	tlog("rgpu-tracer: real driver %s, %d named entry points", path, rt_nnamed);
}

/* the hook that replaces a real function, if any */
static void *hooked(void *real)
{
	if (real && real == (void *)real_gpa)
		return (void *)hook_gpa;
	if (real && real == (void *)real_gpa2)
		return (void *)hook_gpa2;
	if (real && real == (void *)real_get)
		return (void *)hook_get;
	return real;
}

/* a pool trampoline that calls real; one per distinct real pointer */
static void *wrap(void *real, int kind, const char *label, const unsigned char *uuid, int entry)
{
	if (!real)
		return NULL;
	pthread_mutex_lock(&lock);
	int i;
	for (i = rt_nnamed; i < nslots; i++)
		if (slots[i].real == hooked(real) && slots[i].kind == kind &&
		    (kind != K_TABLE || (!memcmp(slots[i].uuid, uuid, 16) && slots[i].entry == entry)))
			break;
	if (i == nslots) {
		if (nslots == rt_nnamed + rt_npool) {
			pthread_mutex_unlock(&lock);
			tlog("rgpu-tracer: trampoline pool exhausted; %s not traced", label);
			return real;
		}
		struct slot *s = &slots[nslots];
		s->real = hooked(real);
		s->kind = kind;
		s->resolved = 1;
		s->entry = entry;
		if (uuid)
			memcpy(s->uuid, uuid, 16);
		snprintf(s->label, sizeof(s->label), "%s", label);
		__atomic_store_n(&nslots, nslots + 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&lock);
	return rt_pool + 16 * (i - rt_nnamed);
}

/* per-thread stack of calls in progress */
struct frame {
	int idx;
	uintptr_t ret;
	uint64_t a[6];
	struct timespec t0;
};
static __thread struct frame stack[256];
static __thread int depth;

static int readable(uint64_t p, void *buf, size_t n)
{
	if (p < 0x10000 || p >= (1ULL << 47))
		return 0;
	struct iovec l = { buf, n }, r = { (void *)(uintptr_t)p, n };
	return process_vm_readv(getpid(), &l, 1, &r, 1, 0) == (ssize_t)n;
}

/* "a0=0x.. a1=0x.. ... [*a0={w,w,w,w}]" */
static void fmt_args(char *out, size_t len, const uint64_t *a, int deref)
{
	size_t n = 0;
	for (int i = 0; i < 6 && n < len; i++)
		n += (size_t)snprintf(out + n, len - n, "%s%#" PRIx64, i ? "," : "", a[i]);
	for (int i = 0; deref && i < 6 && n < len; i++) {
		uint64_t w[4];
		if (readable(a[i], w, sizeof(w)))
			n += (size_t)snprintf(out + n, len - n, " *a%d={%#" PRIx64 ",%#" PRIx64 ",%#" PRIx64
					      ",%#" PRIx64 "}",
					      i, w[0], w[1], w[2], w[3]);
	}
}

HIDDEN void *rt_enter(int idx, const uint64_t *regs, uintptr_t ret);
HIDDEN void *rt_enter(int idx, const uint64_t *regs, uintptr_t ret)
{
	pthread_once(&once, setup);
	struct slot *s = &slots[idx];
	if (!s->resolved) {
		void *fn = dlsym(realh, rt_names[idx]);
		s->real = fn ? hooked(fn) : (void *)missing;
		__atomic_store_n(&s->resolved, 1, __ATOMIC_RELEASE);
	}
	if (depth >= 256)
		abort();
	struct frame *f = &stack[depth++];
	f->idx = idx;
	f->ret = ret;
	memcpy(f->a, regs, sizeof(f->a));
	clock_gettime(CLOCK_MONOTONIC, &f->t0);
	char args[1024];
	fmt_args(args, sizeof(args), f->a, dump_ptrs && s->kind == K_TABLE);
	tlog("%*s> %s(%s) ret=%#lx", 2 * (depth - 1), "", s->label, args, (unsigned long)ret);
	return s->real;
}

static const unsigned char UUID_INTEGRITY[16] = { 0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b,
						  0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2 };
static const unsigned char UUID_CUDART[16] = { 0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a,
					       0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9 };

/* copies of the tables handed out */
struct wtable {
	unsigned char uuid[16];
	const void *real;
	void **copy;
	int n;
};
static struct wtable wtables[64];
static int nwtables;

static struct wtable *wt_find(const unsigned char *uuid)
{
	for (int i = 0; i < nwtables; i++)
		if (!memcmp(wtables[i].uuid, uuid, 16))
			return &wtables[i];
	return NULL;
}

static void integrity_fixup(const struct frame *f, uint64_t rv)
{
	uint32_t version = (uint32_t)f->a[0];
	uint64_t secs = f->a[1];
	uint64_t *res = (uint64_t *)(uintptr_t)f->a[2];
	struct wtable *ti = wt_find(UUID_INTEGRITY), *tc = wt_find(UUID_CUDART);
	if (rv || !res || !ti || !tc) {
		tlog("integrity: rv %" PRIu64 ", tables %p %p: not checked", rv, (void *)ti, (void *)tc);
		return;
	}
	int drv = 0, ndev = 0;
	CUresult (*getver)(int *) = (CUresult(*)(int *))dlsym(realh, "cuDriverGetVersion");
	CUresult (*count)(int *) = (CUresult(*)(int *))dlsym(realh, "cuDeviceGetCount");
	CUresult (*uuidf)(CUuuid *, CUdevice) = (CUresult(*)(CUuuid *, CUdevice))dlsym(realh, "cuDeviceGetUuid");
	CUresult (*attr)(int *, CUdevice_attribute, CUdevice) =
		(CUresult(*)(int *, CUdevice_attribute, CUdevice))dlsym(realh, "cuDeviceGetAttribute");
	getver(&drv);
	count(&ndev);
	struct rgpu_hash_dev devs[16];
	if (ndev > 16)
		ndev = 16;
	for (int d = 0; d < ndev; d++) {
		uuidf((CUuuid *)devs[d].uuid, d);
		attr(&devs[d].pci_domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, d);
		attr(&devs[d].pci_bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d);
		attr(&devs[d].pci_device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, d);
	}
	uint32_t tids[3] = { (uint32_t)syscall(SYS_gettid), (uint32_t)pthread_self(),
			     (uint32_t)((uint64_t)pthread_self() >> 32) };
	int match = -1;
	for (int k = 0; k < 3 && match < 0; k++) {
		uint64_t h[2];
		rgpu_integrity_hash(version, secs, (uint32_t)drv, (uint32_t)getpid(), tids[k], tc->real, ti->real,
				    ((void *const *)ti->real)[1], (unsigned)ndev, devs, h);
		if (h[0] == res[0] && h[1] == res[1])
			match = k;
	}
	tlog("integrity: version %u secs %" PRIu64 " driver %d ndev %d real result %#" PRIx64 ",%#" PRIx64
	     ": own hash %s (tid variant %d)",
	     version, secs, drv, ndev, res[0], res[1], match >= 0 ? "MATCHES" : "differs", match);
	if (match >= 0 && !getenv("RGPU_TRACE_NOFIX")) {
		/* cudart checks against the tables it was given: the copies */
		rgpu_integrity_hash(version, secs, (uint32_t)drv, (uint32_t)getpid(), tids[match], tc->copy,
				    ti->copy, ti->copy[1], (unsigned)ndev, devs, res);
		tlog("integrity: result rewritten for the traced tables: %#" PRIx64 ",%#" PRIx64, res[0], res[1]);
	}
}

HIDDEN uintptr_t rt_exit(uint64_t rv);
HIDDEN uintptr_t rt_exit(uint64_t rv)
{
	struct frame *f = &stack[--depth];
	struct slot *s = &slots[f->idx];
	struct timespec t1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double us = (double)(t1.tv_sec - f->t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - f->t0.tv_nsec) / 1e3;
	if (s->kind == K_TABLE && !memcmp(s->uuid, UUID_INTEGRITY, 16) && s->entry == 1)
		integrity_fixup(f, rv);
	char args[1024] = "";
	if (dump_ptrs && s->kind == K_TABLE)
		fmt_args(args, sizeof(args), f->a, 1);
	tlog("%*s< %s = %" PRId64 " (%#" PRIx64 ") %.1fus%s%s", 2 * depth, "", s->label, (int64_t)rv, rv, us,
	     args[0] ? " after: " : "", args);
	return f->ret;
}

static void *wrap_proc(const char *symbol, void *fn, int version, cuuint64_t flags)
{
	char label[96];
	snprintf(label, sizeof(label), "%s@%d%s", symbol, version, (flags & 1) ? "" : "");
	if (flags)
		snprintf(label, sizeof(label), "%s@%d/f%llu", symbol, version, (unsigned long long)flags);
	return wrap(fn, K_PROC, label, NULL, 0);
}

static CUresult hook_gpa(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
	CUresult rc = real_gpa(symbol, pfn, version, flags);
	tlog("cuGetProcAddress %s version %d flags %llu -> %d %p", symbol ? symbol : "(null)", version,
	     (unsigned long long)flags, rc, pfn ? *pfn : NULL);
	if (rc == CUDA_SUCCESS && pfn && *pfn)
		*pfn = wrap_proc(symbol, *pfn, version, flags);
	return rc;
}

static CUresult hook_gpa2(const char *symbol, void **pfn, int version, cuuint64_t flags,
			  CUdriverProcAddressQueryResult *st)
{
	CUresult rc = real_gpa2(symbol, pfn, version, flags, st);
	tlog("cuGetProcAddress_v2 %s version %d flags %llu -> %d %p status %d", symbol ? symbol : "(null)",
	     version, (unsigned long long)flags, rc, pfn ? *pfn : NULL, st ? (int)*st : -1);
	if (rc == CUDA_SUCCESS && pfn && *pfn)
		*pfn = wrap_proc(symbol, *pfn, version, flags);
	return rc;
}

static CUresult hook_get(const void **table, const CUuuid *id)
{
	CUresult rc = real_get(table, id);
	char hex[33] = "(null)";
	for (int i = 0; id && i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", (unsigned char)id->bytes[i]);
	if (rc || !table || !*table || !id) {
		tlog("cuGetExportTable %s -> %d", hex, rc);
		return rc;
	}
	const unsigned char *u = (const unsigned char *)id->bytes;
	pthread_mutex_lock(&lock);
	struct wtable *w = wt_find(u);
	pthread_mutex_unlock(&lock);
	if (w && w->real == *table) {
		tlog("cuGetExportTable %s -> %p (again, copy %p)", hex, *table, (void *)w->copy);
		*table = w->copy;
		return rc;
	}
	void *const *t = *table;
	uintptr_t w0 = (uintptr_t)t[0];
	int n, sized = w0 < 0x10000 && w0 % 8 == 0 && w0 >= 8;
	if (sized) {
		n = (int)(w0 / 8);
	} else {
		/* no size word: as long as entries point into the driver's code */
		for (n = 0; n < 64 && is_code(t[n]); n++)
			;
		n++; /* and the terminator */
	}
	tlog("cuGetExportTable %s -> %p, first word %#lx, %d words%s", hex, (void *)t, (unsigned long)w0, n,
	     sized ? "" : " (no size word)");
	for (int i = 0; i < n; i++) {
		Dl_info di;
		const char *sym = "";
		if (is_code(t[i]) && dladdr(t[i], &di) && di.dli_sname)
			sym = di.dli_sname;
		tlog("  table %.8s [%d] = %p%s%s", hex, i, t[i], is_code(t[i]) ? " code " : "", sym);
	}
	/* an unsized table may be longer than its run of code pointers:
	 * copy some more words unchanged */
	int ncopy = sized ? n : n + 16;
	void **copy = calloc((size_t)ncopy + 1, sizeof(void *));
	for (int i = 0; i < ncopy; i++) {
		if (i < n && is_code(t[i]) && !(sized && i == 0)) {
			char label[96];
			snprintf(label, sizeof(label), "tbl_%.8s[%d]", hex, i);
			copy[i] = wrap(t[i], K_TABLE, label, u, i);
		} else {
			copy[i] = t[i];
		}
	}
	pthread_mutex_lock(&lock);
	if (nwtables < 64) {
		w = &wtables[nwtables++];
		memcpy(w->uuid, u, 16);
		w->real = t;
		w->copy = copy;
		w->n = n;
	}
	pthread_mutex_unlock(&lock);
	*table = copy;
	return rc;
}
