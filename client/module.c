/* Modules and libraries.  Images travel whole; the client only works out
 * their size.  Kernel parameter layouts come back from the server. */
#include "client.h"
#include "log.h"

#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static CUresult library_module(struct rc_library *lib, struct rc_ctx *c, struct rc_module **out);

#define FATBIN_MAGIC 0xBA55ED50u
#define FATBIN_WRAPPER_MAGIC 0x466243b1u

struct fatbin_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t header_size;
	uint64_t fat_size;
};

struct fatbin_wrapper {
	int magic;
	int version;
	const void *data;
	void *filename_or_fatbins;
};

static size_t elf_size(const Elf64_Ehdr *e)
{
	size_t end = e->e_shoff + (size_t)e->e_shnum * e->e_shentsize;
	size_t ph = e->e_phoff + (size_t)e->e_phnum * e->e_phentsize;
	if (ph > end)
		end = ph;
	const Elf64_Shdr *sh = (const Elf64_Shdr *)((const char *)e + e->e_shoff);
	for (unsigned i = 0; e->e_shoff && i < e->e_shnum; i++)
		if (sh[i].sh_type != SHT_NOBITS && sh[i].sh_offset + sh[i].sh_size > end)
			end = sh[i].sh_offset + sh[i].sh_size;
	return end;
}

CUresult rc_image_size(const void *image, size_t *size, uint32_t *kind, const void **start)
{
	if (!image)
		return CUDA_ERROR_INVALID_VALUE;
	const struct fatbin_wrapper *w = image;
	if ((uint32_t)w->magic == FATBIN_WRAPPER_MAGIC)
		image = w->data;
	const struct fatbin_hdr *f = image;
	const unsigned char *b = image;
	*start = image;
	if (f->magic == FATBIN_MAGIC) {
		*size = f->header_size + f->fat_size;
		*kind = RGPU_IMAGE_FATBIN;
	} else if (!memcmp(b, ELFMAG, SELFMAG)) {
		if (b[EI_CLASS] != ELFCLASS64)
			return CUDA_ERROR_INVALID_IMAGE;
		*size = elf_size(image);
		*kind = RGPU_IMAGE_ELF;
	} else {
		*size = strlen(image) + 1; /* PTX text */
		*kind = RGPU_IMAGE_PTX;
	}
	if (*size > RGPU_MAX_PAYLOAD - 64) {
		log_err("module image of %zu bytes exceeds the protocol's %u-byte limit", *size,
			RGPU_MAX_PAYLOAD);
		return CUDA_ERROR_INVALID_IMAGE;
	}
	return CUDA_SUCCESS;
}

CUresult rc_layout_read(struct rd *r, struct rc_layout *l)
{
	uint32_t n = get_u32(r);
	if (!rd_ok(r) || n > 4096)
		return CUDA_ERROR_UNKNOWN;
	l->n = n;
	l->total = 0;
	l->off = calloc(n ? n : 1, sizeof(uint32_t));
	l->size = calloc(n ? n : 1, sizeof(uint32_t));
	if (!l->off || !l->size) {
		rc_layout_free(l);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	for (uint32_t i = 0; i < n; i++) {
		l->off[i] = get_u32(r);
		l->size[i] = get_u32(r);
		if (l->off[i] > 65536 || l->size[i] > 65536) {
			rc_layout_free(l);
			return CUDA_ERROR_UNKNOWN;
		}
		if (l->off[i] + l->size[i] > l->total)
			l->total = l->off[i] + l->size[i];
	}
	if (!rd_ok(r)) {
		rc_layout_free(l);
		return CUDA_ERROR_UNKNOWN;
	}
	return CUDA_SUCCESS;
}

int rc_launch_extra(void **extra, const void **buf, size_t *size)
{
	*buf = NULL;
	*size = 0;
	for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
		if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
			*buf = extra[i + 1];
		else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
			*size = *(size_t *)extra[i + 1];
		else
			return -1;
	}
	return *buf ? 0 : -1;
}

void rc_layout_free(struct rc_layout *l)
{
	free(l->off);
	free(l->size);
	l->off = l->size = NULL;
	l->n = 0;
}

/* ---- modules ---- */

static CUresult module_load(CUmodule *pm, const void *image)
{
	struct rc_ctx *c;
	CUresult rc = rc_need_ctx(&c);
	if (rc)
		return rc;
	if (!pm)
		return CUDA_ERROR_INVALID_VALUE;
	size_t n;
	uint32_t kind;
	const void *start;
	if ((rc = rc_image_size(image, &n, &kind, &start)))
		return rc;
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u32(w, kind);
	put_bytes(w, start, n);
	struct rd r;
	if ((rc = rc_call(c->dev->conn, RGPU_OP_MODULE_LOAD, w, &r)))
		return rc;
	struct rc_module *m = calloc(1, sizeof(*m));
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	m->magic = RC_MODULE;
	m->ctx = c;
	m->h = get_u64(&r);
	pthread_mutex_init(&m->lock, NULL);
	*pm = (CUmodule)m;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuModuleLoadData(CUmodule *pm, const void *image) { return module_load(pm, image); }
RC_EXPORT CUresult cuModuleLoadFatBinary(CUmodule *pm, const void *fatbin) { return module_load(pm, fatbin); }

RC_EXPORT CUresult cuModuleLoadDataEx(CUmodule *pm, const void *image, unsigned int nopt,
				      CUjit_option *opts, void **vals)
{
	/* PTX with JIT options: compiled by the server's linker with them,
	 * its logs in the caller's buffers (link.c); anything else loads */
	void *cubin;
	size_t n;
	CUresult rc = rc_jit_image(image, nopt, opts, vals, &cubin, &n);
	if (rc == CUDA_ERROR_NOT_SUPPORTED)
		return module_load(pm, image);
	if (rc == CUDA_ERROR_INVALID_PTX || rc == CUDA_ERROR_UNSUPPORTED_PTX_VERSION ||
	    rc == CUDA_ERROR_JIT_COMPILER_NOT_FOUND || rc == CUDA_ERROR_UNKNOWN) {
		/* PTX the linker takes no part of (old ISAs do not compile as
		 * relocatable code): the server's driver compiles it as a
		 * module, without the options */
		const char *name = NULL;
		if (cuGetErrorName(rc, &name) != CUDA_SUCCESS || !name)
			name = "?";
		log_warn("cuModuleLoadDataEx: the PTX did not link (%s); loaded without its JIT "
			 "options", name);
		return module_load(pm, image);
	}
	if (rc)
		return rc;
	rc = module_load(pm, cubin);
	free(cubin);
	return rc;
}

static void *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	char *buf = NULL;
	size_t cap = 0, n = 0;
	for (;;) {
		if (n + 65536 + 1 > cap) {
			cap = cap ? cap * 2 : 1 << 20;
			char *p = realloc(buf, cap);
			if (!p) {
				free(buf);
				fclose(f);
				return NULL;
			}
			buf = p;
		}
		size_t k = fread(buf + n, 1, 65536, f);
		n += k;
		if (k < 65536)
			break;
	}
	fclose(f);
	buf[n] = '\0'; /* PTX files are text */
	*len = n;
	return buf;
}

RC_EXPORT CUresult cuModuleLoad(CUmodule *pm, const char *path)
{
	size_t n;
	void *img = path ? read_file(path, &n) : NULL;
	if (!img)
		return CUDA_ERROR_FILE_NOT_FOUND;
	CUresult rc = module_load(pm, img);
	free(img);
	return rc;
}

/* Request op about module m, in its context, naming name (NULL: none). */
static CUresult module_call(struct rc_module *m, uint16_t op, const char *name, struct rd *r)
{
	struct wbuf *w = rc_req();
	put_u64(w, m->ctx->h);
	put_u64(w, m->h);
	if (name)
		put_str(w, name);
	return rc_call(m->ctx->dev->conn, op, w, r);
}

/* The managed memory [seg, seg+seglen) the server's driver made for a
 * module's or library's __managed__ variable [p, p+n), mapped here at the
 * same address (rc_managed_global) and listed in *list (under lock) to
 * be dropped with its owner: one address per span. */
static CUresult managed_map(struct rc_ctx *c, pthread_mutex_t *lock, uintptr_t **list, size_t *nlist,
			    uint64_t p, uint64_t n, uint64_t seg, uint64_t seglen)
{
	if (seg > p || p + n > seg + seglen || seglen > (1ull << 32))
		return CUDA_ERROR_UNKNOWN;
	pthread_mutex_lock(lock);
	int known = 0;
	for (size_t i = 0; i < *nlist && !known; i++)
		known = (*list)[i] >= (seg & ~4095ull) && (*list)[i] < seg + seglen;
	pthread_mutex_unlock(lock);
	/* one reference per owner and span (two threads racing both take
	 * one, and both are listed) */
	CUresult rc = rc_managed_global(c, seg, seglen, p, n, !known);
	if (rc || known)
		return rc;
	pthread_mutex_lock(lock);
	uintptr_t *nm = realloc(*list, (*nlist + 1) * sizeof(*nm));
	if (nm) {
		*list = nm;
		nm[(*nlist)++] = p;
	}
	pthread_mutex_unlock(lock);
	if (!nm) {
		rc_managed_global_drop(p);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

/* A global's reply ends with whether it is __managed__ (nothing from an
 * older server): then its memory is mapped here too. */
static CUresult global_managed(struct rc_ctx *c, struct rd *r, uint64_t p, uint64_t n, pthread_mutex_t *lock,
			       uintptr_t **list, size_t *nlist)
{
	if (rd_done(r))
		return CUDA_SUCCESS;
	uint32_t managed = get_u32(r);
	uint64_t seg = managed ? get_u64(r) : 0, seglen = managed ? get_u64(r) : 0;
	if (!rd_ok(r))
		return CUDA_ERROR_UNKNOWN;
	return managed ? managed_map(c, lock, list, nlist, p, n, seg, seglen) : CUDA_SUCCESS;
}

void rc_func_free(struct rc_func *f)
{
	rc_layout_free(&f->layout);
	free(f->name);
	free(f->legacy);
	f->magic = 0;
	free(f);
}

/* The module's client state and its functions' (the server's went). */
static void module_free(struct rc_module *m)
{
	for (size_t i = 0; i < m->nmanaged; i++)
		rc_managed_global_drop(m->managed[i]);
	free(m->managed);
	for (struct rc_func *f = m->funcs, *nf; f; f = nf) {
		nf = f->next;
		rc_func_free(f);
	}
	pthread_mutex_destroy(&m->lock);
	m->magic = 0;
	free(m);
}

RC_EXPORT CUresult cuModuleUnload(CUmodule mod)
{
	struct rc_module *m;
	CUresult rc = rc_obj(mod, RC_MODULE, &m);
	if (rc)
		return rc;
	if (m->lib)
		return CUDA_ERROR_NOT_PERMITTED; /* cuLibraryUnload unloads it */
	struct rd r;
	rc = module_call(m, RGPU_OP_MODULE_UNLOAD, NULL, &r);
	module_free(m);
	return rc;
}

static CUresult func_new(struct rc_ctx *c, uint64_t h, struct rd *r, struct rc_func **out)
{
	struct rc_func *f = calloc(1, sizeof(*f));
	if (!f)
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult rc = rc_layout_read(r, &f->layout);
	if (rc) {
		free(f);
		return rc;
	}
	f->magic = RC_FUNC;
	f->ctx = c;
	f->h = h;
	*out = f;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuModuleGetFunction(CUfunction *pf, CUmodule mod, const char *name)
{
	struct rc_module *m;
	CUresult rc = rc_obj(mod, RC_MODULE, &m);
	if (rc)
		return rc;
	if (!pf || !name)
		return CUDA_ERROR_INVALID_VALUE;
	/* one handle per name, as the driver gives, freed with the module; the
	 * lock spans the lookup so two threads asking for one name at once
	 * get the same handle */
	pthread_mutex_lock(&m->lock);
	struct rc_func *f;
	for (f = m->funcs; f && strcmp(f->name, name); f = f->next)
		;
	if (f) {
		pthread_mutex_unlock(&m->lock);
		*pf = (CUfunction)f;
		return CUDA_SUCCESS;
	}
	struct rd r;
	rc = module_call(m, RGPU_OP_MODULE_GET_FUNCTION, name, &r);
	uint64_t h = get_u64(&r);
	if (!rc)
		rc = func_new(m->ctx, h, &r, &f);
	if (!rc && !(f->name = strdup(name))) {
		rc_layout_free(&f->layout);
		free(f);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (!rc) {
		f->mod = m;
		f->next = m->funcs;
		m->funcs = f;
		*pf = (CUfunction)f;
	}
	pthread_mutex_unlock(&m->lock);
	return rc;
}

RC_EXPORT CUresult cuFuncGetModule(CUmodule *pmod, CUfunction fn)
{
	struct rc_func *f;
	CUresult rc = rc_func_resolve(fn, &f);
	if (rc)
		return rc;
	if (!pmod)
		return CUDA_ERROR_INVALID_VALUE;
	if (!f->mod) {
		/* a library kernel's function: the library's module in the
		 * function's context */
		if (!f->kern)
			return CUDA_ERROR_INVALID_HANDLE;
		struct rc_module *m;
		if ((rc = library_module(f->kern->lib, f->ctx, &m)))
			return rc;
		*pmod = (CUmodule)m;
		return CUDA_SUCCESS;
	}
	*pmod = (CUmodule)f->mod;
	return CUDA_SUCCESS;
}

/* Modules are loaded whole on the server (no lazy loading here): every
 * function is loaded once it has a handle. */
RC_EXPORT CUresult cuFuncIsLoaded(CUfunctionLoadingState *state, CUfunction fn)
{
	struct rc_func *f;
	CUresult rc = rc_func_resolve(fn, &f);
	if (rc)
		return rc;
	if (!state)
		return CUDA_ERROR_INVALID_VALUE;
	*state = CU_FUNCTION_LOADING_STATE_LOADED;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuFuncLoad(CUfunction fn)
{
	struct rc_func *f;
	return rc_func_resolve(fn, &f);
}

RC_EXPORT CUresult cuKernelGetLibrary(CUlibrary *plib, CUkernel kernel)
{
	struct rc_kernel *k;
	CUresult rc = rc_obj(kernel, RC_KERNEL, &k);
	if (rc)
		return rc;
	if (!plib)
		return CUDA_ERROR_INVALID_VALUE;
	*plib = (CUlibrary)k->lib;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule mod, const char *name)
{
	struct rc_module *m;
	CUresult rc = rc_obj(mod, RC_MODULE, &m);
	if (rc)
		return rc;
	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	struct rd r;
	if ((rc = module_call(m, RGPU_OP_MODULE_GET_GLOBAL, name, &r)))
		return rc;
	CUdeviceptr p = get_u64(&r);
	size_t sz = get_u64(&r);
	if ((rc = global_managed(m->ctx, &r, p, sz, &m->lock, &m->managed, &m->nmanaged)))
		return rc;
	if (dptr)
		*dptr = p;
	if (bytes)
		*bytes = sz;
	return CUDA_SUCCESS;
}

/* ---- libraries (context-independent loading) ---- */

/* the loaded libraries (rc_libraries_ctx_gone walks them); lock order:
 * live_lock, then a library's lock */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rc_library *live;

/* Where a library goes: the current context's server, or (before any
 * context exists, as the CUDA runtime does it) device 0's, context-free. */
static struct rc_conn *library_target(uint64_t *ctxh)
{
	struct rc_ctx *c = rc_current();
	*ctxh = c ? c->h : 0;
	return c ? c->dev->conn : rc_devs[0].conn;
}

/* The library's handle on connection conn, loading it there on first use. */
static CUresult library_on(struct rc_library *lib, struct rc_conn *conn, uint64_t ctxh, uint64_t *h)
{
	int ci = rc_conn_index(conn);
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&lib->lock);
	if (!lib->h[ci]) {
		struct wbuf *w = rc_req();
		put_u64(w, ctxh);
		put_u32(w, lib->kind);
		put_bytes(w, lib->image, lib->size);
		struct rd r;
		rc = rc_call(conn, RGPU_OP_LIBRARY_LOAD, w, &r);
		if (!rc)
			lib->h[ci] = get_u64(&r);
	}
	*h = lib->h[ci];
	pthread_mutex_unlock(&lib->lock);
	return rc;
}

/* The kernel's handle on conn, looked up (and its layout fetched) on
 * first use there. */
static CUresult kernel_on(struct rc_kernel *k, struct rc_conn *conn, uint64_t ctxh, uint64_t *h)
{
	uint64_t lh;
	CUresult rc = library_on(k->lib, conn, ctxh, &lh);
	if (rc)
		return rc;
	int ci = rc_conn_index(conn);
	pthread_mutex_lock(&k->lib->lock);
	if (!k->h[ci]) {
		struct wbuf *w = rc_req();
		put_u64(w, lh);
		put_str(w, k->name);
		struct rd r;
		rc = rc_call(conn, RGPU_OP_LIBRARY_GET_KERNEL, w, &r);
		if (!rc) {
			uint64_t kh = get_u64(&r);
			if (!k->layout.off)
				rc = rc_layout_read(&r, &k->layout);
			if (!rc)
				k->h[ci] = kh;
		}
	}
	*h = k->h[ci];
	pthread_mutex_unlock(&k->lib->lock);
	return rc;
}

RC_EXPORT CUresult cuLibraryLoadData(CUlibrary *pl, const void *code, CUjit_option *jo, void **jv,
				     unsigned int njo, CUlibraryOption *lo, void **lv, unsigned int nlo)
{
	(void)jo; (void)jv; (void)njo; (void)lo; (void)lv; (void)nlo;
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!pl)
		return CUDA_ERROR_INVALID_VALUE;
	size_t n;
	uint32_t kind;
	const void *start;
	if ((rc = rc_image_size(code, &n, &kind, &start)))
		return rc;
	struct rc_library *lib = calloc(1, sizeof(*lib));
	if (!lib || !(lib->image = malloc(n))) {
		free(lib);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	memcpy(lib->image, start, n);
	lib->size = n;
	lib->kind = kind;
	lib->magic = RC_LIBRARY;
	pthread_mutex_init(&lib->lock, NULL);
	/* load now, so a bad image fails here */
	uint64_t ctxh, h;
	struct rc_conn *conn = library_target(&ctxh);
	if ((rc = library_on(lib, conn, ctxh, &h))) {
		free(lib->image);
		free(lib);
		return rc;
	}
	pthread_mutex_lock(&live_lock);
	lib->next_live = live;
	live = lib;
	pthread_mutex_unlock(&live_lock);
	*pl = (CUlibrary)lib;
	return CUDA_SUCCESS;
}

void rc_libraries_ctx_gone(struct rc_ctx *c)
{
	pthread_mutex_lock(&live_lock);
	for (struct rc_library *lib = live; lib; lib = lib->next_live) {
		pthread_mutex_lock(&lib->lock);
		for (struct rc_kernel *k = lib->kernels; k; k = k->next)
			for (struct rc_func **pf = &k->funcs; *pf;) {
				struct rc_func *f = *pf;
				if (f->ctx != c) {
					pf = &f->next;
					continue;
				}
				*pf = f->next;
				rc_func_free(f);
			}
		for (struct rc_module **pm = &lib->modules; *pm;) {
			struct rc_module *m = *pm;
			if (m->ctx != c) {
				pm = &m->lib_next;
				continue;
			}
			*pm = m->lib_next;
			module_free(m);
		}
		pthread_mutex_unlock(&lib->lock);
	}
	pthread_mutex_unlock(&live_lock);
}

RC_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *pl, const char *path, CUjit_option *jo, void **jv,
					 unsigned int njo, CUlibraryOption *lo, void **lv, unsigned int nlo)
{
	size_t n;
	void *img = path ? read_file(path, &n) : NULL;
	if (!img)
		return CUDA_ERROR_FILE_NOT_FOUND;
	CUresult rc = cuLibraryLoadData(pl, img, jo, jv, njo, lo, lv, nlo);
	free(img);
	return rc;
}

RC_EXPORT CUresult cuLibraryUnload(CUlibrary l)
{
	struct rc_library *lib;
	CUresult rc = rc_obj(l, RC_LIBRARY, &lib);
	if (rc)
		return rc;
	pthread_mutex_lock(&live_lock);
	for (struct rc_library **pl = &live; *pl; pl = &(*pl)->next_live)
		if (*pl == lib) {
			*pl = lib->next_live;
			break;
		}
	pthread_mutex_unlock(&live_lock);
	for (int ci = 0; ci < rc_nconn; ci++) {
		if (!lib->h[ci])
			continue;
		struct wbuf *w = rc_req();
		put_u64(w, lib->h[ci]);
		struct rd r;
		CUresult r2 = rc_call(&rc_conns[ci], RGPU_OP_LIBRARY_UNLOAD, w, &r);
		if (r2 && !rc)
			rc = r2;
	}
	for (struct rc_kernel *k = lib->kernels, *nk; k; k = nk) {
		nk = k->next;
		for (struct rc_func *f = k->funcs, *nf; f; f = nf) {
			nf = f->next;
			rc_func_free(f);
		}
		rc_layout_free(&k->layout);
		free(k->name);
		k->magic = 0;
		free(k);
	}
	for (struct rc_module *m = lib->modules, *nm; m; m = nm) {
		nm = m->lib_next;
		module_free(m);
	}
	for (size_t i = 0; i < lib->nmanaged; i++)
		rc_managed_global_drop(lib->managed[i]);
	free(lib->managed);
	lib->magic = 0;
	free(lib->image);
	pthread_mutex_destroy(&lib->lock);
	free(lib);
	return rc;
}

RC_EXPORT CUresult cuLibraryGetKernel(CUkernel *pk, CUlibrary l, const char *name)
{
	struct rc_library *lib;
	CUresult rc = rc_obj(l, RC_LIBRARY, &lib);
	if (rc)
		return rc;
	if (!pk || !name)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lib->lock);
	struct rc_kernel *k;
	for (k = lib->kernels; k; k = k->next)
		if (!strcmp(k->name, name))
			break;
	if (!k && (k = calloc(1, sizeof(*k))) && !(k->name = strdup(name))) {
		free(k);
		k = NULL;
	}
	if (k && !k->magic) {
		k->magic = RC_KERNEL;
		k->lib = lib;
		k->next = lib->kernels;
		lib->kernels = k;
	}
	pthread_mutex_unlock(&lib->lock);
	if (!k)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* look it up now: an unknown name fails here */
	uint64_t ctxh, kh;
	struct rc_conn *conn = library_target(&ctxh);
	if ((rc = kernel_on(k, conn, ctxh, &kh)))
		return rc;
	*pk = (CUkernel)k;
	return CUDA_SUCCESS;
}

CUresult rc_func_resolve(CUfunction fn, struct rc_func **out)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	struct rc_func *f = (struct rc_func *)fn;
	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	if (f->magic == RC_FUNC) {
		*out = f;
		return CUDA_SUCCESS;
	}
	struct rc_kernel *k = (struct rc_kernel *)fn;
	if (k->magic != RC_KERNEL)
		return CUDA_ERROR_INVALID_HANDLE;
	struct rc_ctx *c;
	if ((rc = rc_need_ctx(&c)))
		return rc;
	/* fast path without the kernel's handle: already made in c */
	pthread_mutex_lock(&k->lib->lock);
	for (f = k->funcs; f && f->ctx != c; f = f->next)
		;
	pthread_mutex_unlock(&k->lib->lock);
	if (f) {
		*out = f;
		return CUDA_SUCCESS;
	}
	uint64_t kh;
	if ((rc = kernel_on(k, c->dev->conn, c->h, &kh)))
		return rc;
	/* again under the lock, held over the call: two threads making the
	 * function in one context at once get one handle */
	pthread_mutex_lock(&k->lib->lock);
	for (f = k->funcs; f && f->ctx != c; f = f->next)
		;
	if (f) {
		pthread_mutex_unlock(&k->lib->lock);
		*out = f;
		return CUDA_SUCCESS;
	}
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u64(w, kh);
	struct rd r;
	rc = rc_call(c->dev->conn, RGPU_OP_KERNEL_GET_FUNCTION, w, &r);
	if (!rc && !(f = calloc(1, sizeof(*f))))
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	if (!rc) {
		f->magic = RC_FUNC;
		f->ctx = c;
		f->kern = k;
		f->h = get_u64(&r);
		if ((rc = rc_layout_read(&r, &f->layout))) {
			free(f);
			f = NULL;
		}
	}
	if (!rc) {
		f->next = k->funcs;
		k->funcs = f;
		*out = f;
	}
	pthread_mutex_unlock(&k->lib->lock);
	return rc;
}

RC_EXPORT CUresult cuKernelGetFunction(CUfunction *pf, CUkernel k)
{
	struct rc_func *f;
	if (!pf)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = rc_func_resolve((CUfunction)k, &f);
	if (!rc)
		*pf = (CUfunction)f;
	return rc;
}

RC_EXPORT CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary l, const char *name)
{
	struct rc_library *lib;
	struct rc_ctx *c;
	CUresult rc = rc_obj(l, RC_LIBRARY, &lib);
	if (!rc)
		rc = rc_need_ctx(&c);
	if (rc)
		return rc;
	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t lh;
	if ((rc = library_on(lib, c->dev->conn, c->h, &lh)))
		return rc;
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u64(w, lh);
	put_str(w, name);
	struct rd r;
	if ((rc = rc_call(c->dev->conn, RGPU_OP_LIBRARY_GET_GLOBAL, w, &r)))
		return rc;
	CUdeviceptr p = get_u64(&r);
	size_t sz = get_u64(&r);
	if ((rc = global_managed(c, &r, p, sz, &lib->lock, &lib->managed, &lib->nmanaged)))
		return rc;
	if (dptr)
		*dptr = p;
	if (bytes)
		*bytes = sz;
	return CUDA_SUCCESS;
}

static CUresult param_info(const struct rc_layout *l, size_t i, size_t *off, size_t *size)
{
	if (i >= l->n)
		return CUDA_ERROR_INVALID_VALUE;
	if (off)
		*off = l->off[i];
	if (size)
		*size = l->size[i];
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuFuncGetParamInfo(CUfunction fn, size_t i, size_t *off, size_t *size)
{
	struct rc_func *f;
	CUresult rc = rc_func_resolve(fn, &f);
	return rc ? rc : param_info(&f->layout, i, off, size);
}

RC_EXPORT CUresult cuKernelGetParamInfo(CUkernel kn, size_t i, size_t *off, size_t *size)
{
	struct rc_func *f;
	CUresult rc = rc_func_resolve((CUfunction)kn, &f);
	return rc ? rc : param_info(&f->layout, i, off, size);
}

/* The library's module in context c (one handle per context, kept). */
static CUresult library_module(struct rc_library *lib, struct rc_ctx *c, struct rc_module **out)
{
	uint64_t lh;
	CUresult rc = library_on(lib, c->dev->conn, c->h, &lh);
	if (rc)
		return rc;
	pthread_mutex_lock(&lib->lock);
	struct rc_module *m;
	for (m = lib->modules; m && m->ctx != c; m = m->lib_next)
		;
	if (!m) {
		struct wbuf *w = rc_req();
		put_u64(w, c->h);
		put_u64(w, lh);
		struct rd r;
		rc = rc_call(c->dev->conn, RGPU_OP_LIBRARY_GET_MODULE, w, &r);
		uint64_t mh = get_u64(&r);
		if (!rc && !(m = calloc(1, sizeof(*m))))
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		if (!rc) {
			m->magic = RC_MODULE;
			m->ctx = c;
			m->h = mh;
			m->lib = lib;
			pthread_mutex_init(&m->lock, NULL);
			m->lib_next = lib->modules;
			lib->modules = m;
		}
	}
	pthread_mutex_unlock(&lib->lock);
	*out = m;
	return rc;
}

RC_EXPORT CUresult cuLibraryGetModule(CUmodule *pmod, CUlibrary l)
{
	struct rc_library *lib;
	CUresult rc = rc_obj(l, RC_LIBRARY, &lib);
	if (rc)
		return rc;
	if (!pmod)
		return CUDA_ERROR_INVALID_VALUE;
	struct rc_ctx *c;
	struct rc_module *m;
	if ((rc = rc_need_ctx(&c)) || (rc = library_module(lib, c, &m)))
		return rc;
	*pmod = (CUmodule)m;
	return CUDA_SUCCESS;
}

/* A __managed__ variable (cudart asks for each at its first call): the
 * server's driver made its memory; the host side is mapped at the same
 * address and kept coherent as managed memory. */
RC_EXPORT CUresult cuLibraryGetManaged(CUdeviceptr *dptr, size_t *bytes, CUlibrary l, const char *name)
{
	struct rc_library *lib;
	CUresult rc = rc_obj(l, RC_LIBRARY, &lib);
	if (rc)
		return rc;
	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	/* the current context's device, else device 0 (cudart asks before
	 * it has made its context; the library was loaded there): its
	 * primary context reaches the variables, as it outlives resets */
	struct rc_ctx *cur = rc_current(), *c;
	uint64_t lh;
	if ((rc = rc_primary_hidden(cur ? cur->ordinal : 0, &c)) ||
	    (rc = library_on(lib, c->dev->conn, c->h, &lh)))
		return rc;
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u64(w, lh);
	put_str(w, name);
	struct rd r;
	if ((rc = rc_call(c->dev->conn, RGPU_OP_LIBRARY_GET_MANAGED, w, &r)))
		return rc;
	uint64_t p = get_u64(&r), n = get_u64(&r), seg = get_u64(&r), seglen = get_u64(&r);
	if (!rd_ok(&r))
		return CUDA_ERROR_UNKNOWN;
	if ((rc = managed_map(c, &lib->lock, &lib->managed, &lib->nmanaged, p, n, seg, seglen)))
		return rc;
	if (dptr)
		*dptr = p;
	if (bytes)
		*bytes = n;
	return CUDA_SUCCESS;
}

/* The kernels by the names the server's driver gives (each looked up as
 * cuLibraryGetKernel does, so that a name has one handle). */
RC_EXPORT CUresult cuLibraryEnumerateKernels(CUkernel *kernels, unsigned int n, CUlibrary l)
{
	struct rc_library *lib;
	CUresult rc = rc_obj(l, RC_LIBRARY, &lib);
	if (rc)
		return rc;
	if (!kernels || !n)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t ctxh, lh;
	struct rc_conn *conn = library_target(&ctxh);
	if ((rc = library_on(lib, conn, ctxh, &lh)))
		return rc;
	struct wbuf *w = rc_req();
	put_u64(w, lh);
	struct rd r;
	if ((rc = rc_call(conn, RGPU_OP_LIBRARY_KERNELS, w, &r)))
		return rc;
	uint32_t count = get_u32(&r);
	if (!rd_ok(&r) || count > 65536)
		return CUDA_ERROR_UNKNOWN;
	/* the reply is this thread's until its next call: names copied */
	char **names = calloc(count ? count : 1, sizeof(*names));
	if (!names)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (uint32_t i = 0; i < count && !rc; i++) {
		const char *s = get_str(&r, 4096);
		if (!rd_ok(&r) || !s)
			rc = CUDA_ERROR_UNKNOWN;
		else if (!(names[i] = strdup(s)))
			rc = CUDA_ERROR_OUT_OF_MEMORY;
	}
	for (uint32_t i = 0; i < count && i < n && !rc; i++)
		rc = cuLibraryGetKernel(&kernels[i], l, names[i]);
	for (uint32_t i = 0; i < count; i++)
		free(names[i]);
	free(names);
	return rc;
}

RC_EXPORT CUresult cuLibraryGetKernelCount(unsigned int *count, CUlibrary l)
{
	struct rc_library *lib;
	CUresult rc = rc_obj(l, RC_LIBRARY, &lib);
	if (rc)
		return rc;
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t ctxh, lh;
	struct rc_conn *conn = library_target(&ctxh);
	if ((rc = library_on(lib, conn, ctxh, &lh)))
		return rc;
	struct wbuf *w = rc_req();
	put_u64(w, lh);
	struct rd r;
	if ((rc = rc_call(conn, RGPU_OP_LIBRARY_KERNEL_COUNT, w, &r)))
		return rc;
	*count = get_u32(&r);
	return CUDA_SUCCESS;
}

/* The module's functions, by name from the server, as client handles. */
static CUresult module_functions(struct rc_module *m, CUfunction *fs, unsigned max, unsigned *n)
{
	struct rd r;
	CUresult rc = module_call(m, RGPU_OP_MODULE_FUNCTIONS, NULL, &r);
	if (rc)
		return rc;
	uint32_t cnt = get_u32(&r);
	if (!rd_ok(&r) || cnt > 65536)
		return CUDA_ERROR_UNKNOWN;
	*n = cnt;
	if (!fs)
		return CUDA_SUCCESS;
	/* names first: the reply buffer is reused by the lookups */
	char **names = calloc(cnt ? cnt : 1, sizeof(*names));
	if (!names)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (uint32_t i = 0; i < cnt && rd_ok(&r); i++) {
		const char *nm = get_str(&r, 4096);
		names[i] = nm ? strdup(nm) : NULL;
	}
	for (uint32_t i = 0; i < cnt && i < max && !rc; i++)
		rc = names[i] ? cuModuleGetFunction(&fs[i], (CUmodule)m, names[i]) : CUDA_ERROR_UNKNOWN;
	for (uint32_t i = 0; i < cnt; i++)
		free(names[i]);
	free(names);
	return rc;
}

RC_EXPORT CUresult cuModuleGetFunctionCount(unsigned int *count, CUmodule mod)
{
	struct rc_module *m;
	CUresult rc = rc_obj(mod, RC_MODULE, &m);
	if (rc)
		return rc;
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	return module_functions(m, NULL, 0, count);
}

RC_EXPORT CUresult cuModuleEnumerateFunctions(CUfunction *fs, unsigned int max, CUmodule mod)
{
	struct rc_module *m;
	CUresult rc = rc_obj(mod, RC_MODULE, &m);
	if (rc)
		return rc;
	if (!fs)
		return CUDA_ERROR_INVALID_VALUE;
	unsigned n;
	return module_functions(m, fs, max, &n);
}
