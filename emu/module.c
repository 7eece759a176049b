/*
 * Modules and libraries (every image "contains" all the test kernels),
 * their globals, function handles, parameter info, attributes, occupancy
 * and kernel launches.
 *
 * A module (cuModuleLoadData) belongs to the context current at load time.
 * A library (cuLibraryLoadData) belongs to no context, as in CUDA: it is in
 * a global list, and its kernels (CUkernel) are context-independent handles.
 * Its per-context state (globals g_scale/g_counter in that context's device
 * memory, function attributes) is an instance, an emu_module in
 * ctx->modules with lib set, created on first use in a context
 * (cuKernelGetFunction, cuLibraryGetGlobal, a CUkernel passed as a
 * CUfunction).  cuCtxDestroy drops the context's instances with its other
 * modules; cuLibraryUnload drops the library's instance in every context.
 */
#include "emu.h"
#include "test_kernels.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define GLOBALS_BYTES 8      /* g_scale (float) at 0, g_counter (int) at 4 */

/* the libraries (their managed pages too) and the modules' managed slots */
struct emu_library;
static pthread_mutex_t emu_lib_lock = PTHREAD_MUTEX_INITIALIZER;
static struct emu_library *libraries;   /* emu_lib_lock */

/* Modules' managed variables share pages, a slot each, as a driver packs
 * those of several modules into one managed segment. */
#define MSLOT 64
struct mslot_page {
	struct mslot_page *next;
	uint8_t *page;
	uint64_t used; /* a bit per slot (a page holds 64 at most) */
};
static struct mslot_page *mslot_pages; /* emu_lib_lock */

static void *mslot_get(void)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	unsigned nslots = pg / MSLOT < 64 ? (unsigned)(pg / MSLOT) : 64;
	uint64_t all = nslots == 64 ? ~0ull : (1ull << nslots) - 1;
	void *got = NULL;
	emu_lock(&emu_lib_lock);
	struct mslot_page *p = mslot_pages;
	while (p && p->used == all)
		p = p->next;
	if (!p) {
		p = calloc(1, sizeof(*p));
		if (p && !(p->page = emu_pages(pg))) {
			free(p);
			p = NULL;
		}
		if (p) {
			p->next = mslot_pages;
			mslot_pages = p;
		}
	}
	if (p) {
		unsigned i = (unsigned)__builtin_ctzll(~p->used);
		p->used |= 1ull << i;
		got = p->page + (size_t)i * MSLOT;
	}
	emu_unlock(&emu_lib_lock);
	return got;
}

static void mslot_put(void *v)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	uint8_t *a = v;
	if (!a)
		return;
	emu_lock(&emu_lib_lock);
	for (struct mslot_page **pp = &mslot_pages; *pp; pp = &(*pp)->next) {
		struct mslot_page *p = *pp;
		if (a < p->page || a >= p->page + pg)
			continue;
		p->used &= ~(1ull << ((size_t)(a - p->page) / MSLOT));
		if (!p->used) {
			*pp = p->next;
			munmap(p->page, pg);
			free(p);
		}
		break;
	}
	emu_unlock(&emu_lib_lock);
}

#define SHARED_PER_BLOCK 49152
#define SHARED_OPTIN 232448

/*
 * A CUDA fatbin, an ELF cubin, or PTX text.  The API passes no length, so,
 * as the driver does, the loader learns the extent from the image itself
 * and reads nothing beyond what the image claims: the magic is compared
 * byte by byte (a short NUL-terminated string stops the compare), and a
 * fatbin's or ELF's header fields must agree with each other before any
 * byte they point to is read.  PTX is text up to its NUL.
 */
#define FATBIN_HDR 16           /* u32 magic, u16 version, u16 header size, u64 size */
#define FATBIN_ENTRY_HDR 16     /* u16 kind, u16, u32 header size, u64 size */
#define FATBIN_MAX (1ull << 32) /* larger is corrupt: no GPU code is 4 GiB */

static int prefix_is(const unsigned char *p, const unsigned char *magic, int n)
{
	int i;

	for (i = 0; i < n && p[i] == magic[i]; i++)
		;
	return i == n;
}

static uint64_t le(const unsigned char *p, int n)
{
	uint64_t v = 0;

	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static int fatbin_ok(const unsigned char *p)
{
	uint64_t hsize = le(p + 6, 2), size = le(p + 8, 8);
	const unsigned char *e = p + hsize;

	if (le(p + 4, 2) != 1 || hsize < FATBIN_HDR || size < FATBIN_ENTRY_HDR || size > FATBIN_MAX)
		return 0;
	/* entries back to back, each inside the size the header gives */
	for (uint64_t off = 0; off < size;) {
		uint64_t eh, es;

		if (size - off < FATBIN_ENTRY_HDR)
			return 0;
		eh = le(e + off + 4, 4);
		es = le(e + off + 8, 8);
		if (eh < FATBIN_ENTRY_HDR || eh > size - off || es > size - off - eh)
			return 0;
		off += eh + es;
	}
	return 1;
}

static int elf_ok(const unsigned char *p)
{
	/* e_ident (class 2: 64-bit, data 1: little-endian) before reading
	 * the rest of the 64-byte header */
	if (p[4] != 2 || p[5] != 1)
		return 0;
	uint64_t phoff = le(p + 32, 8), shoff = le(p + 40, 8);
	unsigned ehsize = (unsigned)le(p + 52, 2), phentsize = (unsigned)le(p + 54, 2);
	unsigned phnum = (unsigned)le(p + 56, 2), shentsize = (unsigned)le(p + 58, 2);
	unsigned shnum = (unsigned)le(p + 60, 2), shstrndx = (unsigned)le(p + 62, 2);

	if (ehsize != 64)
		return 0;
	if (phnum && (phentsize != 56 || phoff < 64 || phoff > FATBIN_MAX))
		return 0;
	if (shnum && (shentsize != 64 || shoff < 64 || shoff > FATBIN_MAX || shstrndx >= shnum))
		return 0;
	return 1;
}

static int image_ok(const void *image)
{
	static const unsigned char fatbin[4] = { 0x50, 0xed, 0x55, 0xba };  /* 0xBA55ED50 LE */
	static const unsigned char elf[4] = { 0x7f, 'E', 'L', 'F' };
	const unsigned char *p = image;
	const char *s = image;

	if (prefix_is(p, fatbin, 4))
		return fatbin_ok(p);
	if (prefix_is(p, elf, 4))
		return elf_ok(p);
	return strstr(s, ".version") != NULL || strstr(s, ".entry") != NULL;
}

/* Caller holds ctx->lock. */
/* A module of ctx, or a library's instance there (cuLibraryGetModule's
 * handle: its functions and globals are the library's in ctx). */
static struct emu_module *module_find(struct emu_ctx *ctx, const void *h)
{
	for (struct emu_module *m = ctx->modules; m; m = m->next)
		if ((const void *)m == h)
			return m;
	return NULL;
}

/* Module h of the current context, which is entered and locked as by
 * emu_ctx_enter_locked; CUDA_ERROR_INVALID_HANDLE, and nothing held, if
 * the context has no such module. */
static CUresult module_enter(CUmodule h, struct emu_ctx **ctx, struct emu_module **m)
{
	CUresult rc = emu_ctx_enter_locked(ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	*m = module_find(*ctx, h);
	return emu_ctx_found(*ctx, *m);
}

/* A function of ctx: of a module or of a library instance.  Caller holds
 * ctx->lock. */
static struct emu_func *func_find(struct emu_ctx *ctx, const void *h)
{
	for (struct emu_module *m = ctx->modules; m; m = m->next)
		for (int i = 0; i < EMU_NKERNELS; i++)
			if ((const void *)&m->funcs[i] == h)
				return &m->funcs[i];
	return NULL;
}

/* A module, or a library's instance in one context (instance: it has the
 * library's g_managed), with fresh globals in ctx (zeroed pages, like
 * __device__ variables; not counted as allocations in cuMemGetInfo).  No
 * lock held. */
static CUresult module_new(struct emu_ctx *ctx, int instance, struct emu_module **out)
{
	struct emu_module *m = calloc(1, sizeof *m);
	CUresult rc;

	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = emu_mem_alloc(ctx, GLOBALS_BYTES, 0, &m->globals);
	if (rc != CUDA_SUCCESS) {
		free(m);
		return rc;
	}
	if (!instance && !(m->managed = mslot_get())) {
		emu_mem_free(ctx, m->globals);
		free(m);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (m->managed)
		*(int *)m->managed = TEST_MANAGED_INIT;

	for (int i = 0; i < EMU_NKERNELS; i++) {
		m->funcs[i].mod = m;
		m->funcs[i].kernel = &emu_kernels[i];
		m->funcs[i].max_dyn_shared = SHARED_PER_BLOCK - emu_kernels[i].shared_bytes;
		m->funcs[i].carveout = -1;
		m->funcs[i].cache_config = CU_FUNC_CACHE_PREFER_NONE;
	}
	*out = m;
	return CUDA_SUCCESS;
}

/* Frees a module no longer linked into ctx (no lock held). */
static void module_free(struct emu_ctx *ctx, struct emu_module *m)
{
	emu_mem_free(ctx, m->globals);
	mslot_put(m->managed);
	free(m);
}

/* ---- libraries: context-independent, instantiated per context on use */

/* A CUkernel: one kernel of a library, in no context. */
struct emu_lkernel {
	struct emu_library *lib;
	int index;                  /* into emu_kernels */
};

struct emu_library {
	struct emu_library *next;
	struct emu_lkernel kernels[EMU_NKERNELS];
	/* g_managed, a __managed__ int: the library's, in no context (as a
	 * driver's managed memory is), a page of its own */
	void *managed;
};

/* Caller holds emu_lib_lock. */
static struct emu_library *lib_find(const void *h)
{
	for (struct emu_library *l = libraries; l; l = l->next)
		if ((const void *)l == h)
			return l;
	return NULL;
}

/* Caller holds emu_lib_lock. */
static struct emu_lkernel *lkernel_find(const void *h)
{
	for (struct emu_library *l = libraries; l; l = l->next)
		for (int i = 0; i < EMU_NKERNELS; i++)
			if ((const void *)&l->kernels[i] == h)
				return &l->kernels[i];
	return NULL;
}

/* Caller holds ctx->lock. */
static struct emu_module *instance_find(struct emu_ctx *ctx, const struct emu_library *lib)
{
	for (struct emu_module *m = ctx->modules; m; m = m->next)
		if (m->lib == lib)
			return m;
	return NULL;
}

/*
 * The instance in ctx of the library h (a CUlibrary, or with is_kernel a
 * CUkernel of it), created on first use.  Gives its globals and, for a
 * kernel, the kernel's function in ctx.  CUDA_ERROR_INVALID_HANDLE when h
 * is no live library (kernel).  The caller is inside ctx (emu_ctx_enter),
 * no lock held.
 */
static CUresult instance_get(struct emu_ctx *ctx, const void *h, int is_kernel, CUdeviceptr *globals,
			     struct emu_func **func, struct emu_module **mod)
{
	struct emu_module *fresh = NULL;
	CUresult rc;

	for (;;) {
		struct emu_library *lib = NULL;
		struct emu_lkernel *k = NULL;
		struct emu_module *m = NULL;

		emu_lock(&emu_lib_lock);
		if (is_kernel) {
			k = lkernel_find(h);
			lib = k ? k->lib : NULL;
		} else {
			lib = lib_find(h);
		}
		if (lib) {
			emu_lock(&ctx->lock);
			m = instance_find(ctx, lib);
			if (!m && fresh) {
				/* Linked while the library is known alive:
				 * cuLibraryUnload's sweep will see it. */
				fresh->lib = lib;
				fresh->next = ctx->modules;
				ctx->modules = fresh;
				m = fresh;
				fresh = NULL;
			}
			if (m) {
				if (globals)
					*globals = m->globals;
				if (func)
					*func = k ? &m->funcs[k->index] : NULL;
				if (mod)
					*mod = m;
			}
			emu_unlock(&ctx->lock);
		}
		emu_unlock(&emu_lib_lock);
		if (fresh)
			/* Unloaded meanwhile, or another thread was first. */
			module_free(ctx, fresh);
		if (!lib)
			return CUDA_ERROR_INVALID_HANDLE;
		if (m)
			return CUDA_SUCCESS;
		/* Allocate outside the locks, then link (or drop) it. */
		rc = module_new(ctx, 1, &fresh);
		if (rc != CUDA_SUCCESS)
			return rc;
	}
}

/* A CUfunction, or a CUkernel cast to one (its function in ctx).  Caller
 * is inside ctx, no lock held; the result is checked with func_find. */
static CUresult as_function(struct emu_ctx *ctx, const void *h, const void **out)
{
	struct emu_func *f;
	int is_kernel;
	CUresult rc;

	emu_lock(&emu_lib_lock);
	is_kernel = lkernel_find(h) != NULL;
	emu_unlock(&emu_lib_lock);
	*out = h;
	if (!is_kernel)
		return CUDA_SUCCESS;
	rc = instance_get(ctx, h, 1, NULL, &f, NULL);
	if (rc == CUDA_SUCCESS)
		*out = f;
	/* Unloaded meanwhile: func_find reports the stale handle. */
	return rc == CUDA_ERROR_INVALID_HANDLE ? CUDA_SUCCESS : rc;
}

/* Drops lib's instance in every context (lib is no longer listed). */
static CUresult instances_drop(const struct emu_library *lib)
{
	struct emu_ctx **ctxs;
	size_t n;
	CUresult rc = emu_ctx_hold_all(&ctxs, &n);

	if (rc != CUDA_SUCCESS)
		return rc;
	for (size_t i = 0; i < n; i++) {
		struct emu_ctx *ctx = ctxs[i];
		struct emu_module *m = NULL;

		emu_lock(&ctx->lock);
		if (instance_find(ctx, lib)) {
			/* Queued launches may still use its globals. */
			emu_ctx_wait_idle(ctx);
			for (struct emu_module **pp = &ctx->modules; *pp; pp = &(*pp)->next)
				if ((*pp)->lib == lib) {
					m = *pp;
					*pp = m->next;
					break;
				}
		}
		emu_unlock(&ctx->lock);
		if (m)
			module_free(ctx, m);
		emu_ctx_leave(ctx);
	}
	free(ctxs);
	return CUDA_SUCCESS;
}

/* ---- modules: per context */

EMU_API CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
{
	struct emu_module *m;
	struct emu_ctx *ctx;
	CUresult rc;

	if (!module || !image)
		return CUDA_ERROR_INVALID_VALUE;
	rc = emu_ctx_enter(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!image_ok(image)) {
		emu_ctx_leave(ctx);
		return CUDA_ERROR_INVALID_IMAGE;
	}
	rc = module_new(ctx, 0, &m);
	if (rc == CUDA_SUCCESS) {
		emu_lock(&ctx->lock);
		m->next = ctx->modules;
		ctx->modules = m;
		emu_unlock(&ctx->lock);
		*module = (CUmodule)m;
	}
	emu_ctx_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuModuleUnload(CUmodule hmod)
{
	struct emu_module *m = NULL;
	struct emu_ctx *ctx;
	CUresult rc = emu_ctx_enter_locked(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	/* Queued launches may still use its globals. */
	emu_ctx_wait_idle(ctx);
	for (struct emu_module **pp = &ctx->modules; *pp; pp = &(*pp)->next)
		if ((const void *)*pp == (const void *)hmod && !(*pp)->lib) {
			m = *pp;
			*pp = m->next;
			break;
		}
	emu_unlock(&ctx->lock);
	if (m)
		module_free(ctx, m);
	else
		rc = CUDA_ERROR_INVALID_HANDLE;
	emu_ctx_leave(ctx);
	return rc;
}

void emu_modules_destroy_all(struct emu_ctx *ctx)
{
	struct emu_module *m, *next;

	/* Modules and library instances; their globals go with the
	 * context's memory. */
	for (m = ctx->modules; m; m = next) {
		next = m->next;
		mslot_put(m->managed);
		free(m);
	}
	ctx->modules = NULL;
}

static CUresult global_of(const struct emu_module *m, const char *name, CUdeviceptr *dptr, size_t *bytes)
{
	CUdeviceptr globals = m->globals;
	if (!strcmp(name, "g_managed")) {
		/* a library's instance: the library's own */
		void *pg = m->lib ? m->lib->managed : m->managed;
		if (dptr)
			*dptr = (CUdeviceptr)(uintptr_t)pg;
		if (bytes)
			*bytes = sizeof(int);
		return CUDA_SUCCESS;
	}
	if (strcmp(name, "g_scale") != 0 && strcmp(name, "g_counter") != 0)
		return CUDA_ERROR_NOT_FOUND;
	if (dptr)
		*dptr = globals + (name[2] == 'c' ? 4 : 0);
	if (bytes)
		*bytes = 4;
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name)
{
	struct emu_module *m;
	struct emu_ctx *ctx;
	CUresult rc;

	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	rc = module_enter(hmod, &ctx, &m);
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = global_of(m, name, dptr, bytes);
	emu_ctx_unlock_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
	struct emu_module *m;
	struct emu_ctx *ctx;
	int idx;
	CUresult rc;

	if (!hfunc || !name)
		return CUDA_ERROR_INVALID_VALUE;
	rc = module_enter(hmod, &ctx, &m);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!emu_kernel_find(name, &idx))
		rc = CUDA_ERROR_NOT_FOUND;
	else
		*hfunc = (CUfunction)&m->funcs[idx];
	emu_ctx_unlock_leave(ctx);
	return rc;
}

/* Listing a module's functions (CUDA 12.4): every module has all the test
 * kernels, in emu_kernels order. */
EMU_API CUresult CUDAAPI cuModuleGetFunctionCount(unsigned int *count, CUmodule hmod)
{
	struct emu_module *m;
	struct emu_ctx *ctx;
	CUresult rc;

	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	rc = module_enter(hmod, &ctx, &m);
	if (rc != CUDA_SUCCESS)
		return rc;
	*count = EMU_NKERNELS;
	emu_ctx_unlock_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuModuleEnumerateFunctions(CUfunction *functions, unsigned int numFunctions,
						    CUmodule hmod)
{
	struct emu_module *m;
	struct emu_ctx *ctx;
	CUresult rc;

	if (!functions)
		return CUDA_ERROR_INVALID_VALUE;
	rc = module_enter(hmod, &ctx, &m);
	if (rc != CUDA_SUCCESS)
		return rc;
	for (unsigned i = 0; i < numFunctions && i < EMU_NKERNELS; i++)
		functions[i] = (CUfunction)&m->funcs[i];
	emu_ctx_unlock_leave(ctx);
	return rc;
}

/* ---- library entry points */

EMU_API CUresult CUDAAPI cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
					   void **jitOptionsValues, unsigned int numJitOptions,
					   CUlibraryOption *libraryOptions, void **libraryOptionValues,
					   unsigned int numLibraryOptions)
{
	struct emu_library *lib;

	/* JIT and library options change nothing for host kernels.  No
	 * context is needed: a library belongs to no context. */
	if (!library || !code)
		return CUDA_ERROR_INVALID_VALUE;
	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!image_ok(code))
		return CUDA_ERROR_INVALID_IMAGE;
	lib = calloc(1, sizeof *lib);
	if (!lib)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (int i = 0; i < EMU_NKERNELS; i++) {
		lib->kernels[i].lib = lib;
		lib->kernels[i].index = i;
	}
	lib->managed = emu_pages((size_t)sysconf(_SC_PAGESIZE));
	if (!lib->managed) {
		free(lib);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	emu_lock(&emu_lib_lock);
	lib->next = libraries;
	libraries = lib;
	emu_unlock(&emu_lib_lock);
	*library = (CUlibrary)lib;
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuLibraryUnload(CUlibrary library)
{
	struct emu_library *lib = NULL;
	CUresult rc;

	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	emu_lock(&emu_lib_lock);
	for (struct emu_library **pp = &libraries; *pp; pp = &(*pp)->next)
		if ((const void *)*pp == (const void *)library) {
			lib = *pp;
			*pp = lib->next;
			break;
		}
	emu_unlock(&emu_lib_lock);
	if (!lib)
		return CUDA_ERROR_INVALID_HANDLE;
	/* Unlisted, it gets no new instance; drop those it has.  Its address
	 * may be reused only once no live context names it. */
	rc = instances_drop(lib);
	if (rc != CUDA_SUCCESS) {
		emu_lock(&emu_lib_lock);
		lib->next = libraries;
		libraries = lib;
		emu_unlock(&emu_lib_lock);
		return rc;
	}
	munmap(lib->managed, (size_t)sysconf(_SC_PAGESIZE));
	free(lib);
	return CUDA_SUCCESS;
}

int emu_lib_managed(uintptr_t p, size_t n)
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	int hit = 0;
	emu_lock(&emu_lib_lock);
	for (struct emu_library *l = libraries; l && !hit; l = l->next)
		hit = p >= (uintptr_t)l->managed && n <= pg && p - (uintptr_t)l->managed <= pg - n;
	for (struct mslot_page *m = mslot_pages; m && !hit; m = m->next)
		hit = p >= (uintptr_t)m->page && n <= pg && p - (uintptr_t)m->page <= pg - n;
	emu_unlock(&emu_lib_lock);
	return hit;
}

/* Of a pointer's attributes, whether it is managed memory: what rgpud asks
 * of each global it hands out (the module and library variables). */
EMU_API CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr)
{
	if (!data)
		return CUDA_ERROR_INVALID_VALUE;
	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (attr != CU_POINTER_ATTRIBUTE_IS_MANAGED)
		return CUDA_ERROR_NOT_SUPPORTED;
	*(unsigned *)data = emu_lib_managed((uintptr_t)ptr, 1) != 0;
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuLibraryGetKernelCount(unsigned int *count, CUlibrary lib)
{
	CUresult rc = CUDA_SUCCESS;

	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	emu_lock(&emu_lib_lock);
	if (lib_find(lib))
		*count = EMU_NKERNELS;
	else
		rc = CUDA_ERROR_INVALID_HANDLE;
	emu_unlock(&emu_lib_lock);
	return rc;
}

EMU_API CUresult CUDAAPI cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
	struct emu_library *lib;
	CUresult rc = CUDA_SUCCESS;
	int idx;

	if (!pKernel || !name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	emu_lock(&emu_lib_lock);
	lib = lib_find(library);
	if (!lib)
		rc = CUDA_ERROR_INVALID_HANDLE;
	else if (!emu_kernel_find(name, &idx))
		rc = CUDA_ERROR_NOT_FOUND;
	else
		*pKernel = (CUkernel)&lib->kernels[idx];
	emu_unlock(&emu_lib_lock);
	return rc;
}

EMU_API CUresult CUDAAPI cuLibraryEnumerateKernels(CUkernel *kernels, unsigned int numKernels, CUlibrary library)
{
	struct emu_library *lib;
	CUresult rc = CUDA_SUCCESS;

	if (!kernels || numKernels == 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	emu_lock(&emu_lib_lock);
	lib = lib_find(library);
	if (!lib)
		rc = CUDA_ERROR_INVALID_HANDLE;
	for (unsigned i = 0; lib && i < numKernels && i < EMU_NKERNELS; i++)
		kernels[i] = (CUkernel)&lib->kernels[i];
	emu_unlock(&emu_lib_lock);
	return rc;
}

EMU_API CUresult CUDAAPI cuKernelGetName(const char **name, CUkernel kernel)
{
	struct emu_lkernel *k;
	CUresult rc = CUDA_SUCCESS;

	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	emu_lock(&emu_lib_lock);
	k = lkernel_find(kernel);
	if (k)
		*name = emu_kernels[k->index].name;
	else
		rc = CUDA_ERROR_INVALID_HANDLE;
	emu_unlock(&emu_lib_lock);
	return rc;
}

/* The library's instance in the current context (made on first use, as a
 * kernel's function or a global would make it). */
EMU_API CUresult CUDAAPI cuLibraryGetModule(CUmodule *pMod, CUlibrary library)
{
	struct emu_module *m = NULL;
	struct emu_ctx *ctx;
	CUresult rc;

	if (!pMod)
		return CUDA_ERROR_INVALID_VALUE;
	rc = emu_ctx_enter(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = instance_get(ctx, library, 0, NULL, NULL, &m);
	if (rc == CUDA_SUCCESS)
		*pMod = (CUmodule)m;
	emu_ctx_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name)
{
	struct emu_module *m = NULL;
	struct emu_ctx *ctx;
	CUresult rc;

	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	rc = emu_ctx_enter(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = instance_get(ctx, library, 0, NULL, NULL, &m);
	if (rc == CUDA_SUCCESS)
		rc = global_of(m, name, dptr, bytes);
	emu_ctx_leave(ctx);
	return rc;
}

/* The library's managed variable (g_managed): no context needed, as cudart
 * asks for it before it has one. */
EMU_API CUresult CUDAAPI cuLibraryGetManaged(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name)
{
	struct emu_library *lib;
	CUresult rc = CUDA_SUCCESS;

	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	emu_lock(&emu_lib_lock);
	lib = lib_find(library);
	if (!lib)
		rc = CUDA_ERROR_INVALID_HANDLE;
	else if (strcmp(name, "g_managed") != 0)
		rc = CUDA_ERROR_NOT_FOUND;
	if (rc == CUDA_SUCCESS) {
		if (dptr)
			*dptr = (CUdeviceptr)(uintptr_t)lib->managed;
		if (bytes)
			*bytes = sizeof(int);
	}
	emu_unlock(&emu_lib_lock);
	return rc;
}

EMU_API CUresult CUDAAPI cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
	struct emu_func *f = NULL;
	struct emu_ctx *ctx;
	CUresult rc;

	if (!pFunc)
		return CUDA_ERROR_INVALID_VALUE;
	rc = emu_ctx_enter(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = instance_get(ctx, kernel, 1, NULL, &f, NULL);
	if (rc == CUDA_SUCCESS)
		*pFunc = (CUfunction)f;
	emu_ctx_leave(ctx);
	return rc;
}

static CUresult param_of(const struct emu_kernel *k, size_t index, size_t *offset, size_t *size)
{
	if (index >= (size_t)k->nparams)
		return CUDA_ERROR_INVALID_VALUE;
	if (offset)
		*offset = k->params[index].offset;
	if (size)
		*size = k->params[index].size;
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t *paramOffset,
					      size_t *paramSize)
{
	struct emu_lkernel *k;
	CUresult rc;

	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	emu_lock(&emu_lib_lock);
	k = lkernel_find(kernel);
	rc = k ? param_of(&emu_kernels[k->index], paramIndex, paramOffset, paramSize)
	       : CUDA_ERROR_INVALID_HANDLE;
	emu_unlock(&emu_lib_lock);
	return rc;
}

/* ---- functions (CUfunction, or a CUkernel cast to one) */

/* Enters the current context, resolves h and locks ctx->lock.  On success
 * *fn is h's function; the caller unlocks and leaves. */
static CUresult func_enter(const void *h, struct emu_ctx **pctx, struct emu_func **fn)
{
	struct emu_ctx *ctx;
	const void *fh;
	CUresult rc = emu_ctx_enter(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	rc = as_function(ctx, h, &fh);
	if (rc != CUDA_SUCCESS) {
		emu_ctx_leave(ctx);
		return rc;
	}
	emu_lock(&ctx->lock);
	*fn = func_find(ctx, fh);
	if (!*fn) {
		emu_ctx_unlock_leave(ctx);
		return CUDA_ERROR_INVALID_HANDLE;
	}
	*pctx = ctx;
	return CUDA_SUCCESS;
}

static void func_leave(struct emu_ctx *ctx)
{
	emu_ctx_unlock_leave(ctx);
}

EMU_API CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
					    size_t *paramSize)
{
	struct emu_func *f;
	struct emu_ctx *ctx;
	CUresult rc = func_enter(func, &ctx, &f);

	if (rc != CUDA_SUCCESS)
		return rc;
	rc = param_of(f->kernel, paramIndex, paramOffset, paramSize);
	func_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuFuncGetName(const char **name, CUfunction hfunc)
{
	struct emu_func *f;
	struct emu_ctx *ctx;
	CUresult rc;

	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	rc = func_enter(hfunc, &ctx, &f);
	if (rc != CUDA_SUCCESS)
		return rc;
	*name = f->kernel->name;
	func_leave(ctx);
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
	struct emu_func *f;
	struct emu_ctx *ctx;
	CUresult rc;

	if (!pi)
		return CUDA_ERROR_INVALID_VALUE;
	rc = func_enter(hfunc, &ctx, &f);
	if (rc != CUDA_SUCCESS)
		return rc;
	switch ((int)attrib) {
	case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
	case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *pi = f->kernel->shared_bytes; break;
	case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *pi = 0; break;
	case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *pi = 0; break;
	case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = 32; break;
	case CU_FUNC_ATTRIBUTE_PTX_VERSION: *pi = 90; break;
	case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = 90; break;
	case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: *pi = 0; break;
	case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = f->max_dyn_shared; break;
	case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = f->carveout; break;
	case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
	case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
	case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
		*pi = f->attr_cluster[attrib - CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET];
		break;
	default: rc = CUDA_ERROR_INVALID_VALUE; break;
	}
	func_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
	struct emu_func *f;
	struct emu_ctx *ctx;
	CUresult rc = func_enter(hfunc, &ctx, &f);

	if (rc != CUDA_SUCCESS)
		return rc;
	switch ((int)attrib) {
	case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
		if (value < 0 || value > SHARED_OPTIN - f->kernel->shared_bytes)
			rc = CUDA_ERROR_INVALID_VALUE;
		else
			f->max_dyn_shared = value;
		break;
	case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
		if (value < -1 || value > 100)
			rc = CUDA_ERROR_INVALID_VALUE;
		else
			f->carveout = value;
		break;
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
	case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
	case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
		f->attr_cluster[attrib - CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET] = value;
		break;
	default:
		/* The rest are read-only. */
		rc = CUDA_ERROR_INVALID_VALUE;
		break;
	}
	func_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuFuncSetSharedMemConfig(CUfunction hfunc, CUsharedconfig config)
{
	struct emu_func *f;
	struct emu_ctx *ctx;
	if ((int)config < CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE ||
	    (int)config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = func_enter(hfunc, &ctx, &f);
	if (rc == CUDA_SUCCESS)
		func_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
	struct emu_func *f;
	struct emu_ctx *ctx;
	CUresult rc;

	if ((int)config < CU_FUNC_CACHE_PREFER_NONE || (int)config > CU_FUNC_CACHE_PREFER_EQUAL)
		return CUDA_ERROR_INVALID_VALUE;
	rc = func_enter(hfunc, &ctx, &f);
	if (rc != CUDA_SUCCESS)
		return rc;
	f->cache_config = (int)config;
	func_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, CUfunction func,
									      int blockSize, size_t dynamicSMemSize,
									      unsigned int flags)
{
	struct emu_func *f;
	struct emu_ctx *ctx;
	CUresult rc;

	if (!numBlocks)
		return CUDA_ERROR_INVALID_VALUE;
	rc = func_enter(func, &ctx, &f);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (blockSize <= 0 || blockSize > 1024)
		*numBlocks = 0;
	else
		/* 2048 threads and 32 blocks per SM (compute capability 9.0). */
		*numBlocks = 2048 / blockSize < 32 ? 2048 / blockSize : 32;
	func_leave(ctx);
	return rc;
}

void emu_launch_free(struct emu_launch *l)
{
	if (l) {
		free(l->args);
		free(l);
	}
}

CUresult emu_launch_exec(struct emu_launch *l)
{
	CUresult rc;

	if (!l->kernel->touches_memory)
		return l->kernel->run(l);
	emu_mem_rdlock(l->ctx);
	rc = l->kernel->run(l);
	emu_mem_rdunlock(l->ctx);
	return rc;
}

/* Copies the parameters into l->args in the kernel's ABI layout. */
static CUresult pack_args(struct emu_launch *l, void **kernelParams, void **extra)
{
	const struct emu_kernel *k = l->kernel;
	void *buf = NULL;
	size_t *bufsize = NULL;

	if (kernelParams && extra)
		return CUDA_ERROR_INVALID_VALUE;
	if (kernelParams) {
		for (int i = 0; i < k->nparams; i++) {
			if (!kernelParams[i])
				return CUDA_ERROR_INVALID_VALUE;
			memcpy(l->args + k->params[i].offset, kernelParams[i], k->params[i].size);
		}
		return CUDA_SUCCESS;
	}
	if (!extra)
		return k->nparams == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
		if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
			buf = extra[i + 1];
		else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
			bufsize = extra[i + 1];
		else
			return CUDA_ERROR_INVALID_VALUE;
	}
	if (!buf || !bufsize || *bufsize < k->argsize)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(l->args, buf, k->argsize);
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
					unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
					unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
					void **kernelParams, void **extra)
{
	struct emu_stream *s;
	struct emu_launch *l = NULL;
	struct emu_func *fn;
	struct emu_ctx *ctx;
	struct emu_op *op;
	CUresult rc;

	if (!gridDimX || !gridDimY || !gridDimZ || !blockDimX || !blockDimY || !blockDimZ ||
	    blockDimX > 1024 || blockDimY > 1024 || blockDimZ > 64 ||
	    (uint64_t)blockDimX * blockDimY * blockDimZ > 1024 ||
	    gridDimX > 2147483647u || gridDimY > 65535 || gridDimZ > 65535)
		return CUDA_ERROR_INVALID_VALUE;
	rc = func_enter(f, &ctx, &fn);
	if (rc != CUDA_SUCCESS)
		return rc;
	s = emu_stream_find(ctx, hStream);
	if (!s) {
		rc = CUDA_ERROR_INVALID_HANDLE;
		goto out;
	}
	if ((int64_t)sharedMemBytes > fn->max_dyn_shared) {
		rc = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	l = calloc(1, sizeof *l);
	if (!l || !(l->args = calloc(1, fn->kernel->argsize))) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	l->ctx = ctx;
	l->kernel = fn->kernel;
	l->globals = fn->mod->globals;
	l->grid[0] = gridDimX;
	l->grid[1] = gridDimY;
	l->grid[2] = gridDimZ;
	l->block[0] = blockDimX;
	l->block[1] = blockDimY;
	l->block[2] = blockDimZ;
	rc = pack_args(l, kernelParams, extra);
	if (rc != CUDA_SUCCESS)
		goto out;
	op = calloc(1, sizeof *op);
	if (!op) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	op->kind = EMU_OP_LAUNCH;
	op->launch = l;
	l = NULL;
	rc = emu_stream_enqueue(ctx, s, op);
out:
	emu_launch_free(l);
	func_leave(ctx);
	return rc;
}

/* cuBLAS sizes its kernels with these; the emulated SM has 228 KiB of
 * shared memory and a cluster is at most 8 blocks. */
EMU_API CUresult CUDAAPI cuOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, CUfunction func,
								 int numBlocks, int blockSize)
{
	struct emu_func *f;
	struct emu_ctx *ctx;
	if (!dynamicSmemSize || numBlocks <= 0 || blockSize <= 0 || blockSize > 1024)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = func_enter(func, &ctx, &f);
	if (rc != CUDA_SUCCESS)
		return rc;
	size_t per = 233472 / (size_t)numBlocks;
	*dynamicSmemSize = per > 232448 ? 232448 : per;
	func_leave(ctx);
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func,
						      const CUlaunchConfig *config)
{
	struct emu_func *f;
	struct emu_ctx *ctx;
	if (!numClusters || !config)
		return CUDA_ERROR_INVALID_VALUE;
	unsigned size = 1;
	for (unsigned i = 0; i < config->numAttrs; i++)
		if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
			size = config->attrs[i].value.clusterDim.x * config->attrs[i].value.clusterDim.y *
			       config->attrs[i].value.clusterDim.z;
	if (size == 0 || size > 8)
		return CUDA_ERROR_INVALID_CLUSTER_SIZE;
	CUresult rc = func_enter(func, &ctx, &f);
	if (rc != CUDA_SUCCESS)
		return rc;
	*numClusters = (int)(132 / size);
	func_leave(ctx);
	return CUDA_SUCCESS;
}

/* The portable limit; functions allowed non-portable sizes get Hopper's 16. */
EMU_API CUresult CUDAAPI cuOccupancyMaxPotentialClusterSize(int *clusterSize, CUfunction func,
							     const CUlaunchConfig *config)
{
	struct emu_func *f;
	struct emu_ctx *ctx;
	if (!clusterSize || !config || (config->numAttrs && !config->attrs))
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = func_enter(func, &ctx, &f);
	if (rc != CUDA_SUCCESS)
		return rc;
	*clusterSize = f->attr_cluster[CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED -
				       CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET] ? 16 : 8;
	func_leave(ctx);
	return CUDA_SUCCESS;
}

/* Launch attributes change scheduling, not results, on the host. */
EMU_API CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
					  void **extra)
{
	if (!config)
		return CUDA_ERROR_INVALID_VALUE;
	return cuLaunchKernel(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
			      config->blockDimY, config->blockDimZ, config->sharedMemBytes, config->hStream,
			      kernelParams, extra);
}
