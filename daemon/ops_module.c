/* Modules, libraries, kernels, functions and globals.  Parameter layouts
 * come from the driver (cuFuncGetParamInfo) and travel with the function
 * handle, so the client never parses a module image. */
#include "gate.h"
#include "image.h"
#include "log.h"
#include "rgpud.h"
#include "session.h"

#include <stdlib.h>
#include <string.h>

#define D (&rgpud_server.drv)
#define MAX_PARAMS 4096

typedef CUresult (*param_info_fn)(void *obj, size_t i, size_t *off, size_t *size);

static CUresult func_param_info(void *f, size_t i, size_t *off, size_t *size)
{
	return D->cuFuncGetParamInfo((CUfunction)f, i, off, size);
}

static CUresult kernel_param_info(void *k, size_t i, size_t *off, size_t *size)
{
	return D->cuKernelGetParamInfo((CUkernel)k, i, off, size);
}

/* Builds the layout and writes it to the reply (u32 n, (u32 off, u32 size)*). */
static struct param_layout *layout_get(void *obj, param_info_fn info, struct wbuf *out)
{
	size_t offs[MAX_PARAMS], sizes[MAX_PARAMS];
	uint32_t n = 0;
	while (n < MAX_PARAMS && info(obj, n, &offs[n], &sizes[n]) == CUDA_SUCCESS)
		n++;
	struct param_layout *l = malloc(sizeof(*l) + 2 * n * sizeof(uint32_t));
	if (!l)
		return NULL;
	l->n = n;
	l->total = 0;
	l->occ_tpb = l->occ_smem = l->occ_blocks = 0;
	put_u32(out, n);
	for (uint32_t i = 0; i < n; i++) {
		l->off[i] = (uint32_t)offs[i];
		LAYOUT_SIZE(l, i) = (uint32_t)sizes[i];
		if (offs[i] + sizes[i] > l->total)
			l->total = (uint32_t)(offs[i] + sizes[i]);
		put_u32(out, (uint32_t)offs[i]);
		put_u32(out, (uint32_t)sizes[i]);
	}
	return l;
}

/* The id goes first in the reply but is known only after the layout. */
static void patch_id(struct wbuf *out, uint64_t id)
{
	if (out->len < 8)
		return;
	for (int i = 0; i < 8; i++)
		out->data[i] = (uint8_t)(id >> (8 * i));
}

/* Reads an image request (ctx, kind, bytes) and copies the image to an
 * aligned buffer (ELF and fatbin want it; in the receive buffer it sits
 * after 12 field bytes).  A status or OP_DROP; *img to free() on success. */
static int read_image(struct session *s, struct rd *r, int need_ctx, uint64_t *ctx, void **img)
{
	*ctx = get_u64(r);
	uint32_t kind = get_u32(r);
	size_t n;
	const uint8_t *p = get_bytes(r, &n);
	if (!rd_done(r) || n == 0)
		return OP_DROP;
	(void)kind; /* the driver goes by the content */
	const char *why = image_check(p, n);
	if (why) {
		log_info("%s: module image refused: %s", s->name, why);
		return CUDA_ERROR_INVALID_IMAGE;
	}
	int rc = need_ctx || *ctx ? session_enter_ctx(s, *ctx, NULL) : 0;
	if (rc)
		return rc;
	size_t cap = (n + 63) & ~(size_t)63;
	if (!(*img = aligned_alloc(64, cap)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	memcpy(*img, p, n);
	memset((char *)*img + n, 0, cap - n);
	return CUDA_SUCCESS;
}

int op_module_load(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx;
	void *img;
	int rc = read_image(s, r, 1, &ctx, &img);
	if (rc)
		return rc;
	CUmodule m;
	rc = D->cuModuleLoadData(&m, img);
	free(img);
	if (rc)
		return rc;
	uint64_t id = ht_add(&s->ht, HK_MODULE, m, ctx, NULL);
	if (!id) {
		D->cuModuleUnload(m);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	put_u64(out, id);
	return CUDA_SUCCESS;
}

int op_module_unload(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	int rc = req_enter(s, r, &q, HK_MODULE);
	if (rc)
		return rc;
	uint64_t mod = q.id;
	if (q.e->parent)
		return CUDA_ERROR_NOT_PERMITTED; /* a library's: it goes with it */
	rc = D->cuModuleUnload(q.e->obj);
	/* its functions and globals die with it: a stale id is refused here
	 * rather than handed to the driver as a dangling CUfunction */
	session_alloc_drop_module(s, mod);
	ht_del_children(&s->ht, mod);
	ht_del(&s->ht, mod);
	return rc;
}

int op_module_get_function(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	const char *name = get_str(r, 4096);
	int rc = req_enter(s, r, &q, HK_MODULE);
	if (rc)
		return rc;
	/* a library's module (LIBRARY_GET_MODULE): its functions go with the
	 * library, as the module does */
	uint64_t ctx = q.ctx, mod = q.e->parent ? q.e->parent : q.id;
	CUfunction f;
	if ((rc = D->cuModuleGetFunction(&f, q.e->obj, name)))
		return rc;
	put_u64(out, 0); /* placeholder for the id, patched below */
	struct param_layout *l = layout_get(f, func_param_info, out);
	uint64_t id = l ? ht_add(&s->ht, HK_FUNC, f, ctx, l) : 0;
	if (!id) {
		free(l);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	ht_get(&s->ht, id, HK_FUNC)->parent = mod;
	patch_id(out, id);
	return CUDA_SUCCESS;
}

static int global_reply(struct session *s, uint64_t ctx, uint64_t owner, CUdeviceptr p,
			size_t size, struct wbuf *out)
{
	/* a global is device memory of the session: charged the first time
	 * the client learns of it, refunded with its module or library */
	struct ctx_state *cs = ht_get(&s->ht, ctx, HK_CTX)->extra;
	int added = session_alloc_add(s, p, size, ctx, owner, cs->dev);
	if (added < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (added && size && gate_charge(cs->dev, (int64_t)size) < 0) {
		session_alloc_del(s, p);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	put_u64(out, p);
	put_u64(out, size);
	return CUDA_SUCCESS;
}

/* The managed memory a __managed__ variable [p, p+size) lies in becomes
 * the session's: charged once, refunded with owner (its module or
 * library; ctx 0 for a library's, which outlives a context's reset), so
 * that the client may keep its whole span coherent in one piece. */
static int managed_span(struct session *s, uint64_t ctx, uint64_t owner, unsigned dev, CUdeviceptr p,
			size_t size, CUdeviceptr *base, size_t *len)
{
	if (!D->cuMemGetAddressRange_v2 || D->cuMemGetAddressRange_v2(base, len, p) || *base > p ||
	    p + size > *base + *len) {
		*base = p; /* (the variable alone) */
		*len = size;
	}
	int added = session_alloc_add(s, *base, *len, ctx, owner, dev);
	if (added < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (added && *len && gate_charge(dev, (int64_t)*len) < 0) {
		session_alloc_del(s, *base);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

/* A global of a module or library, in a context of this session.  A
 * __managed__ one (CUDA 11's runtime asks for those with
 * cuModuleGetGlobal) says so, with the managed memory it lies in. */
static int get_global(struct session *s, struct rd *r, struct wbuf *out, enum hkind kind)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	const char *name = get_str(r, 4096);
	/* a library belongs to no context, but its global is looked up in one */
	int rc = req_enter(s, r, &q, kind == HK_LIBRARY ? HK_FREE : kind);
	if (rc)
		return rc;
	uint64_t ctx = q.ctx, owner = q.id;
	struct hentry *e = kind == HK_LIBRARY ? req_obj(s, &q, owner, kind) : q.e;
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	if (kind == HK_MODULE && e->parent)
		owner = e->parent; /* a library's module: the library's global */
	CUdeviceptr p;
	size_t size;
	rc = kind == HK_MODULE ? D->cuModuleGetGlobal_v2(&p, &size, e->obj, name)
			       : D->cuLibraryGetGlobal(&p, &size, e->obj, name);
	if (rc)
		return rc;
	unsigned managed = 0;
	if (!D->cuPointerGetAttribute ||
	    D->cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p) != CUDA_SUCCESS)
		managed = 0;
	if (!managed) {
		if ((rc = global_reply(s, ctx, owner, p, size, out)))
			return rc;
		put_u32(out, 0);
		return CUDA_SUCCESS;
	}
	CUdeviceptr base;
	size_t len;
	struct ctx_state *cs = ht_get(&s->ht, ctx, HK_CTX)->extra;
	if ((rc = managed_span(s, kind == HK_MODULE ? ctx : 0, owner, cs->dev, p, size, &base, &len)))
		return rc;
	put_u64(out, p);
	put_u64(out, size);
	put_u32(out, 1);
	put_u64(out, base);
	put_u64(out, len);
	return CUDA_SUCCESS;
}

int op_module_get_global(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	return get_global(s, r, out, HK_MODULE);
}

int op_library_load(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	/* context-independent to the driver, but owned by this session; with
	 * no context named it loads before any exists, as cudart does it */
	uint64_t ctx;
	void *img;
	int rc = read_image(s, r, 0, &ctx, &img);
	if (rc)
		return rc;
	CUlibrary lib;
	rc = D->cuLibraryLoadData(&lib, img, NULL, NULL, 0, NULL, NULL, 0);
	free(img);
	if (rc)
		return rc;
	uint64_t id = ht_add(&s->ht, HK_LIBRARY, lib, 0, NULL);
	if (!id) {
		D->cuLibraryUnload(lib);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	put_u64(out, id);
	return CUDA_SUCCESS;
}

int op_library_unload(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_OBJ);
	int rc = req_enter(s, r, &q, HK_LIBRARY);
	if (rc)
		return rc;
	uint64_t lib = q.id;
	rc = D->cuLibraryUnload(q.e->obj);
	session_alloc_drop_module(s, lib);
	/* kernels of the library, and their functions, die with it */
	ht_del_children(&s->ht, lib);
	ht_del(&s->ht, lib);
	return rc;
}

int op_library_get_kernel(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_OBJ);
	const char *name = get_str(r, 4096);
	int rc = req_enter(s, r, &q, HK_LIBRARY);
	if (rc)
		return rc;
	uint64_t lib = q.id;
	CUkernel k;
	rc = D->cuLibraryGetKernel(&k, q.e->obj, name);
	if (rc)
		return rc;
	put_u64(out, 0);
	struct param_layout *l = layout_get(k, kernel_param_info, out);
	/* a kernel's "ctx" field holds its library, for unloading */
	uint64_t id = l ? ht_add(&s->ht, HK_KERNEL, k, lib, l) : 0;
	if (!id) {
		free(l);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	ht_get(&s->ht, id, HK_KERNEL)->parent = lib;
	patch_id(out, id);
	return CUDA_SUCCESS;
}

int op_kernel_get_function(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	/* the kernel belongs to no context; its function to this one */
	int rc = req_enter(s, r, &q, HK_FREE);
	if (rc)
		return rc;
	uint64_t ctx = q.ctx;
	struct hentry *k = req_obj(s, &q, q.id, HK_KERNEL);
	if (!k)
		return CUDA_ERROR_INVALID_HANDLE;
	CUfunction f;
	uint64_t lib = k->parent; /* k moves if the table grows */
	if ((rc = D->cuKernelGetFunction(&f, k->obj)))
		return rc;
	/* the function's own layout: the kernel's may be empty until the
	 * library is loaded in a context */
	put_u64(out, 0);
	struct param_layout *l = layout_get(f, func_param_info, out);
	uint64_t id = l ? ht_add(&s->ht, HK_FUNC, f, ctx, l) : 0;
	if (!id) {
		free(l);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	/* of the kernel's library: dies with it */
	ht_get(&s->ht, id, HK_FUNC)->parent = lib;
	patch_id(out, id);
	return CUDA_SUCCESS;
}

int op_library_get_global(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	return get_global(s, r, out, HK_LIBRARY);
}

/* LIBRARY_GET_MANAGED: a __managed__ variable of the library (what cudart
 * asks for each one at its first call).  The whole managed memory it lies
 * in becomes the session's (charged once, refunded with the library), so
 * that the client may keep its span coherent in one piece. */
int op_library_get_managed(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ); /* ctx, library */
	const char *name = get_str(r, 4096);
	int rc = req_enter(s, r, &q, HK_FREE);
	if (rc)
		return rc;
	struct hentry *l = req_obj(s, &q, q.id, HK_LIBRARY);
	if (!l)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!D->cuLibraryGetManaged)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUdeviceptr p = 0, base = 0;
	size_t size = 0, len = 0;
	if ((rc = D->cuLibraryGetManaged(&p, &size, l->obj, name)))
		return rc;
	/* the library's, in no context (it outlives a context's reset) */
	if ((rc = managed_span(s, 0, q.id, q.cs->dev, p, size, &base, &len)))
		return rc;
	put_u64(out, p);
	put_u64(out, size);
	put_u64(out, base);
	put_u64(out, len);
	return CUDA_SUCCESS;
}

int op_library_kernel_count(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_OBJ);
	int rc = req_enter(s, r, &q, HK_LIBRARY);
	if (rc)
		return rc;
	unsigned n = 0;
	rc = D->cuLibraryGetKernelCount(&n, q.e->obj);
	put_u32(out, n);
	return rc;
}

/* LIBRARY_GET_MODULE: the library's module in the context, owned by the
 * library (unloaded with it; MODULE_UNLOAD refuses it) */
int op_library_get_module(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ); /* ctx, library */
	int rc = req_enter(s, r, &q, HK_FREE);
	if (rc)
		return rc;
	struct hentry *l = req_obj(s, &q, q.id, HK_LIBRARY);
	if (!l)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!D->cuLibraryGetModule)
		return CUDA_ERROR_NOT_SUPPORTED;
	uint64_t lib = q.id;
	CUmodule m;
	if ((rc = D->cuLibraryGetModule(&m, l->obj)))
		return rc;
	/* (the client asks once per context and keeps the handle) */
	uint64_t id = ht_add(&s->ht, HK_MODULE, m, q.ctx, NULL);
	if (!id)
		return CUDA_ERROR_OUT_OF_MEMORY;
	ht_get(&s->ht, id, HK_MODULE)->parent = lib;
	put_u64(out, id);
	return CUDA_SUCCESS;
}

/* LIBRARY_KERNELS: the names of a library's kernels */
int op_library_kernels(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_OBJ);
	int rc = req_enter(s, r, &q, HK_LIBRARY);
	if (rc)
		return rc;
	if (!D->cuLibraryEnumerateKernels || !D->cuKernelGetName)
		return CUDA_ERROR_NOT_SUPPORTED;
	unsigned n = 0;
	if ((rc = D->cuLibraryGetKernelCount(&n, q.e->obj)))
		return rc;
	if (n > 65536)
		return CUDA_ERROR_INVALID_VALUE;
	CUkernel *ks = calloc(n ? n : 1, sizeof(*ks));
	if (!ks)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = n ? D->cuLibraryEnumerateKernels(ks, n, q.e->obj) : CUDA_SUCCESS;
	put_u32(out, n);
	for (unsigned i = 0; !rc && i < n; i++) {
		const char *name = NULL;
		if (!(rc = D->cuKernelGetName(&name, ks[i])))
			put_str(out, name ? name : "");
	}
	free(ks);
	return rc;
}

int op_module_functions(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX_OBJ);
	int rc = req_enter(s, r, &q, HK_MODULE);
	if (rc)
		return rc;
	if (!D->have_modfuncs)
		return CUDA_ERROR_NOT_SUPPORTED;
	struct hentry *e = q.e;
	unsigned n = 0;
	if ((rc = D->cuModuleGetFunctionCount(&n, e->obj)))
		return rc;
	if (n > 65536)
		return CUDA_ERROR_INVALID_VALUE;
	CUfunction *fs = calloc(n ? n : 1, sizeof(*fs));
	if (!fs)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = D->cuModuleEnumerateFunctions(fs, n, e->obj);
	put_u32(out, n);
	for (unsigned i = 0; !rc && i < n; i++) {
		const char *name = NULL;
		rc = D->cuFuncGetName(&name, fs[i]);
		put_str(out, name ? name : "");
	}
	free(fs);
	return rc;
}
