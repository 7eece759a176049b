/*
 * The JIT linker.  cuLinkCreate / cuLinkAddData / cuLinkAddFile collect
 * options and inputs here (files are read here, where they are);
 * cuLinkComplete sends them to the current context's server in one
 * request (LINK), which links with the real driver and returns the cubin
 * and the logs.  The cubin stays owned by the link state, as in CUDA.
 */
#include "client.h"
#include "log.h"
#include "jit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LINK_MAGIC 0x52636c6b

struct input {
	uint32_t type;
	char *name;
	void *data;
	size_t size;
};

struct link {
	uint32_t magic;
	uint32_t nopts;
	uint32_t opt[64];
	uint64_t val[64];
	char *info, *err;        /* the application's log buffers */
	size_t info_size, err_size;
	struct input *in;
	size_t nin, capin;
	void *cubin;
};

static void link_free(struct link *l)
{
	for (size_t i = 0; i < l->nin; i++) {
		free(l->in[i].name);
		free(l->in[i].data);
	}
	free(l->in);
	free(l->cubin);
	l->magic = 0;
	free(l);
}

RC_EXPORT CUresult cuLinkCreate_v2(unsigned int n, CUjit_option *opts, void **vals, CUlinkState *out)
{
	struct rc_ctx *c;
	CUresult rc = rc_need_ctx(&c);
	if (rc)
		return rc;
	if (!out || (n && (!opts || !vals)))
		return CUDA_ERROR_INVALID_VALUE;
	struct link *l = calloc(1, sizeof(*l));
	if (!l)
		return CUDA_ERROR_OUT_OF_MEMORY;
	l->magic = LINK_MAGIC;
	for (unsigned i = 0; i < n; i++) {
		switch (opts[i]) {
		case CU_JIT_INFO_LOG_BUFFER: l->info = vals[i]; break;
		case CU_JIT_ERROR_LOG_BUFFER: l->err = vals[i]; break;
		case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES: l->info_size = (uintptr_t)vals[i]; break;
		case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: l->err_size = (uintptr_t)vals[i]; break;
		case CU_JIT_WALL_TIME: break; /* an output: not measured here */
		default:
			if (!rgpu_jit_option_numeric(opts[i]) || l->nopts == 64) {
				log_warn("cuLinkCreate: JIT option %d is not passed to the server",
					 (int)opts[i]);
				break;
			}
			l->opt[l->nopts] = (uint32_t)opts[i];
			l->val[l->nopts++] = (uint64_t)(uintptr_t)vals[i];
		}
	}
	if (l->info && l->info_size)
		l->info[0] = '\0';
	if (l->err && l->err_size)
		l->err[0] = '\0';
	*out = (CUlinkState)l;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuLinkCreate(unsigned int n, CUjit_option *opts, void **vals, CUlinkState *out)
{
	return cuLinkCreate_v2(n, opts, vals, out);
}

static CUresult get_link(CUlinkState s, struct link **out)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!s || ((struct link *)s)->magic != LINK_MAGIC)
		return CUDA_ERROR_INVALID_HANDLE;
	*out = (struct link *)s;
	return CUDA_SUCCESS;
}

/* takes data (malloc'ed) */
static CUresult add(struct link *l, CUjitInputType type, void *data, size_t size, const char *name)
{
	if (l->nin == l->capin) {
		size_t cap = l->capin ? l->capin * 2 : 8;
		struct input *in = realloc(l->in, cap * sizeof(*in));
		if (!in) {
			free(data);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		l->in = in;
		l->capin = cap;
	}
	char *nm = strdup(name ? name : "");
	if (!nm) {
		free(data);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	l->in[l->nin++] = (struct input){ (uint32_t)type, nm, data, size };
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuLinkAddData_v2(CUlinkState s, CUjitInputType type, void *data, size_t size,
				    const char *name, unsigned int n, CUjit_option *opts, void **vals)
{
	struct link *l;
	CUresult rc = get_link(s, &l);
	if (rc)
		return rc;
	(void)n; (void)opts; (void)vals; /* per-input options: none apply to linking */
	if (!data || !size || (int)type < 0 || type >= CU_JIT_NUM_INPUT_TYPES)
		return CUDA_ERROR_INVALID_VALUE;
	void *copy = malloc(size);
	if (!copy)
		return CUDA_ERROR_OUT_OF_MEMORY;
	memcpy(copy, data, size);
	return add(l, type, copy, size, name);
}

RC_EXPORT CUresult cuLinkAddData(CUlinkState s, CUjitInputType type, void *data, size_t size,
				 const char *name, unsigned int n, CUjit_option *opts, void **vals)
{
	return cuLinkAddData_v2(s, type, data, size, name, n, opts, vals);
}

RC_EXPORT CUresult cuLinkAddFile_v2(CUlinkState s, CUjitInputType type, const char *path,
				    unsigned int n, CUjit_option *opts, void **vals)
{
	struct link *l;
	CUresult rc = get_link(s, &l);
	if (rc)
		return rc;
	(void)n; (void)opts; (void)vals;
	if (!path || (int)type < 0 || type >= CU_JIT_NUM_INPUT_TYPES)
		return CUDA_ERROR_INVALID_VALUE;
	FILE *f = fopen(path, "rb");
	if (!f)
		return CUDA_ERROR_FILE_NOT_FOUND;
	char *buf = NULL;
	size_t len = 0, cap = 0;
	for (;;) {
		if (len == cap) {
			cap = cap ? cap * 2 : 1 << 16;
			char *p = cap <= RGPU_MAX_PAYLOAD ? realloc(buf, cap) : NULL;
			if (!p) {
				free(buf);
				fclose(f);
				return CUDA_ERROR_OUT_OF_MEMORY;
			}
			buf = p;
		}
		size_t k = fread(buf + len, 1, cap - len, f);
		len += k;
		if (k == 0)
			break;
	}
	int bad = ferror(f);
	fclose(f);
	if (bad || !len) {
		free(buf);
		return CUDA_ERROR_FILE_NOT_FOUND;
	}
	const char *base = strrchr(path, '/');
	return add(l, type, buf, len, base ? base + 1 : path);
}

RC_EXPORT CUresult cuLinkAddFile(CUlinkState s, CUjitInputType type, const char *path,
				 unsigned int n, CUjit_option *opts, void **vals)
{
	return cuLinkAddFile_v2(s, type, path, n, opts, vals);
}

static void copy_log(char *dst, size_t cap, const char *src)
{
	if (!dst || !cap || !src)
		return;
	snprintf(dst, cap, "%s", src);
}

RC_EXPORT CUresult cuLinkComplete(CUlinkState s, void **cubin, size_t *size)
{
	struct link *l;
	CUresult rc = get_link(s, &l);
	if (rc)
		return rc;
	struct rc_ctx *c;
	if ((rc = rc_need_ctx(&c)))
		return rc;
	if (!cubin || !size)
		return CUDA_ERROR_INVALID_VALUE;
	struct wbuf *w = rc_req();
	put_u64(w, c->h);
	put_u32(w, l->nopts);
	for (uint32_t i = 0; i < l->nopts; i++) {
		put_u32(w, l->opt[i]);
		put_u64(w, l->val[i]);
	}
	put_u32(w, (uint32_t)l->nin);
	for (size_t i = 0; i < l->nin; i++) {
		put_u32(w, l->in[i].type);
		put_str(w, l->in[i].name);
		put_bytes(w, l->in[i].data, l->in[i].size);
	}
	if (w->len > RGPU_MAX_PAYLOAD)
		return CUDA_ERROR_INVALID_VALUE;
	struct rd r;
	rc = rc_call(c->dev->conn, RGPU_OP_LINK, w, &r);
	size_t n = 0;
	const void *p = NULL;
	if (!rc)
		p = get_bytes(&r, &n);
	const char *info = get_str(&r, 1u << 20), *err = get_str(&r, 1u << 20);
	copy_log(l->info, l->info_size, info);
	copy_log(l->err, l->err_size, err);
	if (rc)
		return rc;
	if (!rd_ok(&r) || !n)
		return CUDA_ERROR_UNKNOWN;
	free(l->cubin);
	if (!(l->cubin = malloc(n)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	memcpy(l->cubin, p, n);
	*cubin = l->cubin;
	*size = n;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuLinkDestroy(CUlinkState s)
{
	struct link *l;
	CUresult rc = get_link(s, &l);
	if (rc)
		return rc;
	link_free(l);
	return CUDA_SUCCESS;
}

CUresult rc_jit_image(const void *image, unsigned nopt, CUjit_option *opts, void **vals,
		      void **cubin, size_t *size)
{
	size_t n;
	uint32_t kind;
	const void *start;
	CUresult rc = rc_image_size(image, &n, &kind, &start);
	if (rc)
		return rc;
	if (kind != RGPU_IMAGE_PTX || !nopt || !opts || !vals)
		return CUDA_ERROR_NOT_SUPPORTED;
	CUlinkState ls;
	if ((rc = cuLinkCreate_v2(nopt, opts, vals, &ls)))
		return rc;
	void *out = NULL;
	size_t k = 0;
	rc = cuLinkAddData_v2(ls, CU_JIT_INPUT_PTX, (void *)start, n, "module", 0, NULL, NULL);
	if (!rc)
		rc = cuLinkComplete(ls, &out, &k);
	if (!rc && !(*cubin = malloc(k)))
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	if (!rc) {
		memcpy(*cubin, out, k);
		*size = k;
	}
	cuLinkDestroy(ls);
	return rc;
}
