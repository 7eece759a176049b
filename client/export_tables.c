/*
 * The driver's private export tables (cuGetExportTable) that NVIDIA's CUDA
 * runtime (cudart, also the copies linked into cuBLAS) asks for.
 *
 * What each entry does was established by tracing the real driver
 * (tools/tracer, on CUDA 13.0 / driver 580) and is written up in
 * docs/compat.md.  Entries the traces never saw called answer
 * CUDA_ERROR_NOT_SUPPORTED, logging their table and index once.  Tables the
 * client does not know are refused (cuGetExportTable returns
 * CUDA_ERROR_NOT_SUPPORTED), as before.
 */
#include "client.h"
#include "export_tables.h"
#include "log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- unknown entries ---- */

static CUresult unknown_entry(const char *table, int index)
{
	char what[96];
	snprintf(what, sizeof(what), "export table %s entry %d", table, index);
	rc_unsupported(what);
	return CUDA_ERROR_NOT_SUPPORTED;
}

/* One stub per (table, index), so the log names the entry.  They are
 * called with the entry's real arguments, which they ignore: fine for the
 * x86-64 calling convention, and every entry seen returns a CUresult. */
#define STUB(t, i) \
	__attribute__((unused)) static CUresult stub_##t##_##i(void) { return unknown_entry(#t, i); }
#define STUB10(t, d) \
	STUB(t, d##0) STUB(t, d##1) STUB(t, d##2) STUB(t, d##3) STUB(t, d##4) \
	STUB(t, d##5) STUB(t, d##6) STUB(t, d##7) STUB(t, d##8) STUB(t, d##9)
#define S(t, i) ((void *)stub_##t##_##i)

STUB(cudart, 1) STUB(cudart, 3) STUB(cudart, 4) STUB(cudart, 5) STUB(cudart, 6)
STUB(cudart, 7) STUB(cudart, 8) STUB(cudart, 9) STUB(cudart, 11) STUB(cudart, 12)
STUB(tools, 1) STUB(tools, 3) STUB(tools, 4) STUB(tools, 5)
STUB(ctxcheck, 1) STUB(ctxcheck, 4) STUB(ctxcheck, 5) STUB(ctxcheck, 6) STUB(ctxcheck, 7)
STUB(ctxcheck, 8) STUB(ctxcheck, 9) STUB(ctxcheck, 10) STUB(ctxcheck, 11) STUB(ctxcheck, 12)
STUB(ctxcheck, 13) STUB(ctxcheck, 14)
STUB(integrity, 2)
STUB(f8cff951, 1) STUB(f8cff951, 2)
STUB(ctxget, 1)
STUB(libctx, 1) STUB(libctx, 2) STUB(libctx, 3) STUB(libctx, 5) STUB(libctx, 6)
STUB(libctx, 7) STUB(libctx, 8) STUB(libctx, 9)
STUB10(libctx, 1) STUB10(libctx, 2) STUB10(libctx, 3) STUB10(libctx, 4) STUB10(libctx, 5)
STUB10(libctx, 6) STUB10(libctx, 7) STUB10(libctx, 8) STUB10(libctx, 9)

/* ---- 6bd5fb6c-5bf4-e74a-8987-d93912fd9df9: cudart interface ---- */

/* [2] (CUcontext *out, CUdevice dev): the device's primary context, asked
 * for while cudart enumerates devices; cudart then makes it current and
 * retains it, and expects the same handle from cuDevicePrimaryCtxRetain.
 * The client's primary context exists once retained, so this retains it
 * (one reference that is never given back). */
static CUresult cudart_primary_ctx(CUcontext *out, CUdevice dev)
{
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	return cuDevicePrimaryCtxRetain(out, dev);
}

/* ---- a094798c-2e74-2e74-93f2-0800200c0a66: tools callback hooks ---- */

/* [2], [6] (void **buf, size_t *size): buffers the runtime's profiler
 * hooks read; zero means no tool is attached.  The driver hands out 1024
 * and 14 (units unknown: the buffers here are 8-byte words). */
static uint64_t tools_buf1[1024], tools_buf2[64];

static CUresult tools_buffer1(void **buf, size_t *size)
{
	if (buf)
		*buf = tools_buf1;
	if (size)
		*size = 1024;
	return CUDA_SUCCESS;
}

static CUresult tools_buffer2(void **buf, size_t *size)
{
	if (buf)
		*buf = tools_buf2;
	if (size)
		*size = 14;
	return CUDA_SUCCESS;
}

/* ---- c693336e-1121-df11-a8c3-68f355d89593: context-local storage ---- */

typedef void (*cls_dtor)(CUcontext, void *, void *);

struct cls_entry {
	CUcontext ctx;
	void *key, *value;
	cls_dtor dtor;
	struct cls_entry *next;
};

static pthread_mutex_t cls_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cls_entry *cls_head;

static CUresult cls_ctx(CUcontext *ctx)
{
	if (*ctx)
		return CUDA_SUCCESS;
	CUresult rc = cuCtxGetCurrent(ctx);
	if (rc)
		return rc;
	return *ctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

/* [0] (ctx or NULL for the current one, key, value, destructor) */
static CUresult cls_put(CUcontext ctx, void *key, void *value, cls_dtor dtor)
{
	CUresult rc = cls_ctx(&ctx);
	if (rc)
		return rc;
	pthread_mutex_lock(&cls_lock);
	struct cls_entry *e;
	for (e = cls_head; e; e = e->next)
		if (e->ctx == ctx && e->key == key)
			break;
	if (!e) {
		e = calloc(1, sizeof(*e));
		if (!e) {
			pthread_mutex_unlock(&cls_lock);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		e->ctx = ctx;
		e->key = key;
		e->next = cls_head;
		cls_head = e;
	}
	e->value = value;
	e->dtor = dtor;
	pthread_mutex_unlock(&cls_lock);
	return CUDA_SUCCESS;
}

/* [1] (ctx, key): forget the entry (the destructor is not called) */
static CUresult cls_delete(CUcontext ctx, void *key)
{
	CUresult rc = cls_ctx(&ctx);
	if (rc)
		return rc;
	pthread_mutex_lock(&cls_lock);
	for (struct cls_entry **p = &cls_head; *p; p = &(*p)->next)
		if ((*p)->ctx == ctx && (*p)->key == key) {
			struct cls_entry *e = *p;
			*p = e->next;
			free(e);
			break;
		}
	pthread_mutex_unlock(&cls_lock);
	return CUDA_SUCCESS;
}

/* [2] (void **value, ctx or NULL, key): CUDA_ERROR_INVALID_CONTEXT without
 * a context, CUDA_ERROR_INVALID_HANDLE for a key never put (as the driver) */
static CUresult cls_get(void **value, CUcontext ctx, void *key)
{
	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = cls_ctx(&ctx);
	if (rc)
		return rc;
	rc = CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&cls_lock);
	for (struct cls_entry *e = cls_head; e; e = e->next)
		if (e->ctx == ctx && e->key == key) {
			*value = e->value;
			rc = CUDA_SUCCESS;
			break;
		}
	pthread_mutex_unlock(&cls_lock);
	return rc;
}

/* ---- 263e8860-7cd2-6143-92f6-bbd5006dfa7e: context checks ---- */

/* [2] (CUcontext, uint32_t *out, void **unused): *out = 0 */
static CUresult ctx_check(CUcontext ctx, uint32_t *out, void **unused)
{
	(void)ctx;
	(void)unused;
	if (out)
		*out = 0;
	return CUDA_SUCCESS;
}

/* [3]: called with pointers into cudart's own data, which the driver
 * leaves as they are; returns 0 */
static CUresult ctx_check3(void)
{
	return CUDA_SUCCESS;
}

/* ---- d4082055-bde6-704b-8d34-ba123c66e1f2: integrity check ---- */

static void *cudart_table[13], *integrity_table[3];

/* [1] (uint32_t version, uint64_t unix_seconds, uint64_t out[2]) */
static CUresult integrity_check(uint32_t version, uint64_t secs, uint64_t *out)
{
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	int drv = 0, ndev = 0;
	CUresult rc = cuDriverGetVersion(&drv);
	if (!rc)
		rc = cuDeviceGetCount(&ndev);
	if (rc)
		return rc;
	struct rgpu_hash_dev devs[RGPU_MAX_DEVICES];
	if (ndev > RGPU_MAX_DEVICES)
		ndev = RGPU_MAX_DEVICES;
	for (int d = 0; d < ndev && !rc; d++) {
		rc = cuDeviceGetUuid((CUuuid *)devs[d].uuid, d);
		if (!rc)
			rc = cuDeviceGetAttribute(&devs[d].pci_domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, d);
		if (!rc)
			rc = cuDeviceGetAttribute(&devs[d].pci_bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d);
		if (!rc)
			rc = cuDeviceGetAttribute(&devs[d].pci_device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, d);
	}
	if (rc)
		return rc;
	/* the thread id is the low half of pthread_self(), as the driver */
	rgpu_integrity_hash(version, secs, (uint32_t)drv, (uint32_t)getpid(), (uint32_t)(uintptr_t)pthread_self(),
			    cudart_table, integrity_table, integrity_table[1], (unsigned)ndev, devs, out);
	return CUDA_SUCCESS;
}

/* ---- 42d85a81-23f6-cb47-8298-f6e78a3aecdc ---- */

/* [2] (CUcontext *out, ...): the current context (cuBLAS asks) */
static CUresult ctx_get(CUcontext *out)
{
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = cuCtxGetCurrent(out);
	if (!rc && !*out)
		rc = CUDA_ERROR_INVALID_CONTEXT;
	return rc;
}

/* ---- 21318c60-9714-3248-8ca6-41ff7324c8f2: cuBLAS/cuBLASLt ---- */

/* [4] (CUcontext, uint64_t *out, ...): the driver stores 1 */
static CUresult libctx_4(CUcontext ctx, uint64_t *out)
{
	(void)ctx;
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	*out = 1;
	return CUDA_SUCCESS;
}

/* [51] (CUcontext, 0, void **out): the driver stores a pointer to an
 * object of its own, which is then only passed back to [39] */
static uint64_t libctx_object[16];

static CUresult libctx_51(CUcontext ctx, void *unused, void **out)
{
	(void)ctx;
	(void)unused;
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	*out = libctx_object;
	return CUDA_SUCCESS;
}

/* [39] (CUcontext, that object, uint32_t *out): the driver stores 7 */
static CUresult libctx_39(CUcontext ctx, void *obj, uint32_t *out)
{
	(void)ctx;
	(void)obj;
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	*out = 7;
	return CUDA_SUCCESS;
}

/* ---- 1734dc26-800d-4745-8726-c0f1e7dd8bca: asked for by PyTorch's
 * cuBLASLt path (17 words).  Traced on the driver: entries [4] and [13]
 * are called and return 0; nothing else is called.  The caller does not
 * check cuGetExportTable's result, so the table must exist. */
static CUresult ok_entry(void) { return CUDA_SUCCESS; }
/* an entry never seen called: says so once and refuses */
static CUresult unknown_stub(void) { return unknown_entry("1734dc26/6e163fbe", -1); }

/* ---- 6e163fbe-b958-444d-835c-e182aff1991e: asked for by cuFFT (99
 * words).  Traced: only [7] is called, once per plan. */
/* [7] (ctx, module, callback, arg, ...): the trace shows the callback
 * (`mov [rdi], rsi; ret`) receiving arg and a function of the module (the
 * function handle lands in *arg and cuFFT then asks its attributes), and
 * the driver returning CUDA_ERROR_INVALID_VALUE all the same.  So: call it
 * for each function of the module. */
static CUresult fft_functions(CUcontext ctx, CUmodule mod, void (*cb)(void *, CUfunction), void *arg)
{
	(void)ctx;
	unsigned n = 0;
	if (!cb || cuModuleGetFunctionCount(&n, mod) != CUDA_SUCCESS || n == 0 || n > 4096)
		return CUDA_ERROR_INVALID_VALUE;
	CUfunction *fs = calloc(n, sizeof(*fs));
	if (fs && cuModuleEnumerateFunctions(fs, n, mod) == CUDA_SUCCESS)
		for (unsigned i = 0; i < n; i++)
			cb(arg, fs[i]);
	free(fs);
	return CUDA_ERROR_INVALID_VALUE;
}

static void *pt_table[17], *fft_table[99];

static void fill_more(void)
{
	for (int i = 1; i < 17; i++)
		pt_table[i] = (void *)unknown_stub;
	pt_table[0] = (void *)sizeof(pt_table);
	pt_table[4] = (void *)ok_entry;
	pt_table[13] = (void *)ok_entry;
	for (int i = 1; i < 99; i++)
		fft_table[i] = (void *)unknown_stub;
	fft_table[0] = (void *)sizeof(fft_table);
	fft_table[7] = (void *)fft_functions;
}

/* ---- the tables ---- */

static void *tools_table[7], *cls_table[4], *ctxcheck_table[15], *f8cf_table[3], *ctxget_table[3];
static void *libctx_table[93];

static void fill(void)
{
	void **t = cudart_table;
	t[0] = (void *)sizeof(cudart_table);
	t[1] = S(cudart, 1);
	t[2] = (void *)cudart_primary_ctx;
	t[3] = S(cudart, 3);
	t[4] = S(cudart, 4);
	t[5] = S(cudart, 5);
	t[6] = S(cudart, 6);
	t[7] = S(cudart, 7);
	t[8] = S(cudart, 8);
	t[9] = S(cudart, 9);
	t[10] = NULL; /* as in the driver */
	t[11] = S(cudart, 11);
	t[12] = S(cudart, 12);

	t = tools_table;
	t[0] = (void *)sizeof(tools_table);
	t[1] = S(tools, 1);
	t[2] = (void *)tools_buffer1;
	t[3] = S(tools, 3);
	t[4] = S(tools, 4);
	t[5] = S(tools, 5);
	t[6] = (void *)tools_buffer2;

	/* no size word: three entries and a NULL */
	cls_table[0] = (void *)cls_put;
	cls_table[1] = (void *)cls_delete;
	cls_table[2] = (void *)cls_get;
	cls_table[3] = NULL;

	t = ctxcheck_table;
	void *cc[15] = { (void *)sizeof(ctxcheck_table), S(ctxcheck, 1), (void *)ctx_check, (void *)ctx_check3,
			 S(ctxcheck, 4), S(ctxcheck, 5), S(ctxcheck, 6), S(ctxcheck, 7), S(ctxcheck, 8),
			 S(ctxcheck, 9), S(ctxcheck, 10), S(ctxcheck, 11), S(ctxcheck, 12), S(ctxcheck, 13),
			 S(ctxcheck, 14) };
	memcpy(t, cc, sizeof(cc));

	integrity_table[0] = (void *)sizeof(integrity_table);
	integrity_table[1] = (void *)integrity_check;
	integrity_table[2] = S(integrity, 2);

	f8cf_table[0] = (void *)sizeof(f8cf_table);
	f8cf_table[1] = S(f8cff951, 1);
	f8cf_table[2] = S(f8cff951, 2);

	ctxget_table[0] = (void *)sizeof(ctxget_table);
	ctxget_table[1] = S(ctxget, 1);
	ctxget_table[2] = (void *)ctx_get;

	void *lc[93] = {
		(void *)sizeof(libctx_table), S(libctx, 1), S(libctx, 2), S(libctx, 3), (void *)libctx_4,
		S(libctx, 5), S(libctx, 6), S(libctx, 7), S(libctx, 8), S(libctx, 9),
		S(libctx, 10), S(libctx, 11), S(libctx, 12), S(libctx, 13), S(libctx, 14),
		S(libctx, 15), S(libctx, 16), S(libctx, 17), S(libctx, 18), S(libctx, 19),
		S(libctx, 20), S(libctx, 21), S(libctx, 22), S(libctx, 23), S(libctx, 24),
		S(libctx, 25), S(libctx, 26), S(libctx, 27), S(libctx, 28), S(libctx, 29),
		S(libctx, 30), S(libctx, 31), S(libctx, 32), S(libctx, 33), S(libctx, 34),
		S(libctx, 35), S(libctx, 36), S(libctx, 37), S(libctx, 38), (void *)libctx_39,
		S(libctx, 40), S(libctx, 41), S(libctx, 42), S(libctx, 43), S(libctx, 44),
		S(libctx, 45), S(libctx, 46), S(libctx, 47), S(libctx, 48), S(libctx, 49),
		S(libctx, 50), (void *)libctx_51, S(libctx, 52), S(libctx, 53), S(libctx, 54),
		S(libctx, 55), S(libctx, 56), S(libctx, 57), S(libctx, 58), S(libctx, 59),
		S(libctx, 60), S(libctx, 61), S(libctx, 62), S(libctx, 63), S(libctx, 64),
		S(libctx, 65), S(libctx, 66), S(libctx, 67), S(libctx, 68), S(libctx, 69),
		S(libctx, 70), S(libctx, 71), S(libctx, 72), S(libctx, 73), S(libctx, 74),
		S(libctx, 75), S(libctx, 76), S(libctx, 77), S(libctx, 78), S(libctx, 79),
		S(libctx, 80), S(libctx, 81), S(libctx, 82), S(libctx, 83), S(libctx, 84),
		S(libctx, 85), S(libctx, 86), S(libctx, 87), S(libctx, 88), S(libctx, 89),
		S(libctx, 90), NULL /* as in the driver */, S(libctx, 92),
	};
	memcpy(libctx_table, lc, sizeof(lc));
	fill_more();
}

static const struct {
	unsigned char uuid[16];
	void **table;
} tables[] = {
	{ { 0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9 },
	  cudart_table },
	{ { 0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66 },
	  tools_table },
	{ { 0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93 },
	  cls_table },
	{ { 0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e },
	  ctxcheck_table },
	{ { 0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2 },
	  integrity_table },
	{ { 0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e, 0xb9, 0xe2, 0xfb, 0x46, 0x9e, 0x7c, 0x0d, 0xd9 },
	  f8cf_table },
	{ { 0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc },
	  ctxget_table },
	{ { 0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2 },
	  libctx_table },
	{ { 0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45, 0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca },
	  pt_table },
	{ { 0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d, 0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e },
	  fft_table },
};

static pthread_once_t once = PTHREAD_ONCE_INIT;

CUresult rc_export_table(const void **table, const CUuuid *id)
{
	if (!table || !id)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_once(&once, fill);
	for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++)
		if (!memcmp(tables[i].uuid, id->bytes, 16)) {
			*table = tables[i].table;
			return CUDA_SUCCESS;
		}
	*table = NULL;
	return CUDA_ERROR_NOT_SUPPORTED;
}

/* ---- driver entry points cudart needs at start-up ---- */

/* cudart asks before it loads any module; with lazy loading (the driver's
 * default since CUDA 12.2) it loads kernels through cuLibraryLoadData.
 * CUDA_MODULE_LOADING=EAGER answers eager, as the driver does. */
RC_EXPORT CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
	if (!mode)
		return CUDA_ERROR_INVALID_VALUE;
	const char *e = getenv("CUDA_MODULE_LOADING");
	*mode = e && !strcmp(e, "EAGER") ? CU_MODULE_EAGER_LOADING : CU_MODULE_LAZY_LOADING;
	return rc_initialized();
}
