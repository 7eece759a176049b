/*
 * Modules and libraries (every image "contains" all the test kernels),
 * their globals, function handles, parameter info, attributes, occupancy
 * and kernel launches.
 *
 * A library (cuLibraryLoadData) is loaded into the calling thread's current
 * context and belongs to it, like a module: its kernels (CUkernel) are that
 * context's functions, and cuKernelGetFunction accepts them only there.
 */
#include "emu.h"

#include <stdlib.h>
#include <string.h>

#define GLOBALS_BYTES 8      /* g_scale (float) at 0, g_counter (int) at 4 */
#define SHARED_PER_BLOCK 49152
#define SHARED_OPTIN 232448

/* A CUDA fatbin, an ELF cubin, or PTX text.  Compared byte by byte so a
 * short NUL-terminated string is never read past its end. */
static int image_ok(const void *image)
{
	static const unsigned char fatbin[4] = { 0x50, 0xed, 0x55, 0xba };  /* 0xBA55ED50 LE */
	static const unsigned char elf[4] = { 0x7f, 'E', 'L', 'F' };
	const unsigned char *p = image;
	const char *s = image;
	int i;

	for (i = 0; i < 4 && p[i] == fatbin[i]; i++)
		;
	if (i == 4)
		return 1;
	for (i = 0; i < 4 && p[i] == elf[i]; i++)
		;
	if (i == 4)
		return 1;
	return strstr(s, ".version") != NULL || strstr(s, ".entry") != NULL;
}

/* Caller holds ctx->lock. */
static struct emu_module *module_find(struct emu_ctx *ctx, const void *h, int is_library)
{
	for (struct emu_module *m = ctx->modules; m; m = m->next)
		if ((const void *)m == h && m->is_library == is_library)
			return m;
	return NULL;
}

/* A function (or, for libraries, a kernel) of ctx.  Caller holds ctx->lock. */
static struct emu_func *func_find(struct emu_ctx *ctx, const void *h, int library_only)
{
	for (struct emu_module *m = ctx->modules; m; m = m->next) {
		if (library_only && !m->is_library)
			continue;
		for (int i = 0; i < EMU_NKERNELS; i++)
			if ((const void *)&m->funcs[i] == h)
				return &m->funcs[i];
	}
	return NULL;
}

static CUresult load(void **out, const void *image, int is_library)
{
	struct emu_module *m;
	struct emu_ctx *ctx;
	CUresult rc;

	if (!out || !image)
		return CUDA_ERROR_INVALID_VALUE;
	rc = emu_ctx_enter(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!image_ok(image)) {
		emu_ctx_leave(ctx);
		return CUDA_ERROR_INVALID_IMAGE;
	}
	m = calloc(1, sizeof *m);
	if (!m) {
		emu_ctx_leave(ctx);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	/* Globals live in device memory (zeroed pages, like __device__
	 * variables), not counted as allocations in cuMemGetInfo. */
	rc = emu_mem_alloc(ctx, GLOBALS_BYTES, 0, &m->globals);
	if (rc != CUDA_SUCCESS) {
		free(m);
		emu_ctx_leave(ctx);
		return rc;
	}
	m->is_library = is_library;
	for (int i = 0; i < EMU_NKERNELS; i++) {
		m->funcs[i].mod = m;
		m->funcs[i].kernel = &emu_kernels[i];
		m->funcs[i].max_dyn_shared = SHARED_PER_BLOCK - emu_kernels[i].shared_bytes;
		m->funcs[i].carveout = -1;
		m->funcs[i].cache_config = CU_FUNC_CACHE_PREFER_NONE;
	}
	emu_lock(&ctx->lock);
	m->next = ctx->modules;
	ctx->modules = m;
	emu_unlock(&ctx->lock);
	*out = m;
	emu_ctx_leave(ctx);
	return CUDA_SUCCESS;
}

static CUresult unload(const void *h, int is_library)
{
	struct emu_module *m = NULL;
	struct emu_ctx *ctx;
	CUresult rc = emu_ctx_enter(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	emu_lock(&ctx->lock);
	/* Queued launches may still use its globals. */
	emu_ctx_wait_idle(ctx);
	for (struct emu_module **pp = &ctx->modules; *pp; pp = &(*pp)->next)
		if ((const void *)*pp == h && (*pp)->is_library == is_library) {
			m = *pp;
			*pp = m->next;
			break;
		}
	emu_unlock(&ctx->lock);
	if (m) {
		emu_mem_free(ctx, m->globals);
		free(m);
	} else {
		rc = CUDA_ERROR_INVALID_HANDLE;
	}
	emu_ctx_leave(ctx);
	return rc;
}

void emu_modules_destroy_all(struct emu_ctx *ctx)
{
	struct emu_module *m, *next;

	/* Their globals go with the context's memory. */
	for (m = ctx->modules; m; m = next) {
		next = m->next;
		free(m);
	}
	ctx->modules = NULL;
}

static CUresult get_global(CUdeviceptr *dptr, size_t *bytes, const void *h, const char *name, int is_library)
{
	struct emu_module *m;
	struct emu_ctx *ctx;
	CUresult rc;

	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	rc = emu_ctx_enter(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	emu_lock(&ctx->lock);
	m = module_find(ctx, h, is_library);
	if (!m) {
		rc = CUDA_ERROR_INVALID_HANDLE;
	} else if (strcmp(name, "g_scale") == 0 || strcmp(name, "g_counter") == 0) {
		if (dptr)
			*dptr = m->globals + (name[2] == 'c' ? 4 : 0);
		if (bytes)
			*bytes = 4;
	} else {
		rc = CUDA_ERROR_NOT_FOUND;
	}
	emu_unlock(&ctx->lock);
	emu_ctx_leave(ctx);
	return rc;
}

static CUresult get_func(void **out, const void *h, const char *name, int is_library)
{
	struct emu_module *m;
	struct emu_ctx *ctx;
	int idx;
	CUresult rc;

	if (!out || !name)
		return CUDA_ERROR_INVALID_VALUE;
	rc = emu_ctx_enter(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	emu_lock(&ctx->lock);
	m = module_find(ctx, h, is_library);
	if (!m)
		rc = CUDA_ERROR_INVALID_HANDLE;
	else if (!emu_kernel_find(name, &idx))
		rc = CUDA_ERROR_NOT_FOUND;
	else
		*out = &m->funcs[idx];
	emu_unlock(&ctx->lock);
	emu_ctx_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
{
	return load((void **)module, image, 0);
}

EMU_API CUresult CUDAAPI cuModuleUnload(CUmodule hmod)
{
	return unload(hmod, 0);
}

EMU_API CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
	return get_func((void **)hfunc, hmod, name, 0);
}

EMU_API CUresult CUDAAPI cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name)
{
	return get_global(dptr, bytes, hmod, name, 0);
}

EMU_API CUresult CUDAAPI cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
					   void **jitOptionsValues, unsigned int numJitOptions,
					   CUlibraryOption *libraryOptions, void **libraryOptionValues,
					   unsigned int numLibraryOptions)
{
	/* JIT and library options change nothing for host kernels. */
	return load((void **)library, code, 1);
}

EMU_API CUresult CUDAAPI cuLibraryUnload(CUlibrary library)
{
	return unload(library, 1);
}

EMU_API CUresult CUDAAPI cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
	return get_func((void **)pKernel, library, name, 1);
}

EMU_API CUresult CUDAAPI cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name)
{
	return get_global(dptr, bytes, library, name, 1);
}

EMU_API CUresult CUDAAPI cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
	struct emu_ctx *ctx;
	CUresult rc;

	if (!pFunc)
		return CUDA_ERROR_INVALID_VALUE;
	rc = emu_ctx_enter(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	emu_lock(&ctx->lock);
	if (func_find(ctx, kernel, 1))
		*pFunc = (CUfunction)(void *)kernel;
	else
		rc = CUDA_ERROR_INVALID_HANDLE;
	emu_unlock(&ctx->lock);
	emu_ctx_leave(ctx);
	return rc;
}

static CUresult param_info(const void *h, int library_only, size_t index, size_t *offset, size_t *size)
{
	struct emu_func *f;
	struct emu_ctx *ctx;
	CUresult rc = emu_ctx_enter(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	emu_lock(&ctx->lock);
	f = func_find(ctx, h, library_only);
	if (!f) {
		rc = CUDA_ERROR_INVALID_HANDLE;
	} else if (index >= (size_t)f->kernel->nparams) {
		rc = CUDA_ERROR_INVALID_VALUE;
	} else {
		if (offset)
			*offset = f->kernel->params[index].offset;
		if (size)
			*size = f->kernel->params[index].size;
	}
	emu_unlock(&ctx->lock);
	emu_ctx_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t *paramOffset,
					      size_t *paramSize)
{
	return param_info(kernel, 1, paramIndex, paramOffset, paramSize);
}

EMU_API CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
					    size_t *paramSize)
{
	return param_info(func, 0, paramIndex, paramOffset, paramSize);
}

EMU_API CUresult CUDAAPI cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
	struct emu_func *f;
	struct emu_ctx *ctx;
	CUresult rc;

	if (!pi)
		return CUDA_ERROR_INVALID_VALUE;
	rc = emu_ctx_enter(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	emu_lock(&ctx->lock);
	f = func_find(ctx, hfunc, 0);
	if (!f) {
		rc = CUDA_ERROR_INVALID_HANDLE;
		goto out;
	}
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
out:
	emu_unlock(&ctx->lock);
	emu_ctx_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
	struct emu_func *f;
	struct emu_ctx *ctx;
	CUresult rc = emu_ctx_enter(&ctx);

	if (rc != CUDA_SUCCESS)
		return rc;
	emu_lock(&ctx->lock);
	f = func_find(ctx, hfunc, 0);
	if (!f) {
		rc = CUDA_ERROR_INVALID_HANDLE;
		goto out;
	}
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
out:
	emu_unlock(&ctx->lock);
	emu_ctx_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
	struct emu_func *f;
	struct emu_ctx *ctx;
	CUresult rc;

	if ((int)config < CU_FUNC_CACHE_PREFER_NONE || (int)config > CU_FUNC_CACHE_PREFER_EQUAL)
		return CUDA_ERROR_INVALID_VALUE;
	rc = emu_ctx_enter(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	emu_lock(&ctx->lock);
	f = func_find(ctx, hfunc, 0);
	if (f)
		f->cache_config = (int)config;
	else
		rc = CUDA_ERROR_INVALID_HANDLE;
	emu_unlock(&ctx->lock);
	emu_ctx_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, CUfunction func,
									      int blockSize, size_t dynamicSMemSize,
									      unsigned int flags)
{
	struct emu_ctx *ctx;
	CUresult rc;

	if (!numBlocks)
		return CUDA_ERROR_INVALID_VALUE;
	rc = emu_ctx_enter(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	emu_lock(&ctx->lock);
	if (!func_find(ctx, func, 0))
		rc = CUDA_ERROR_INVALID_HANDLE;
	else if (blockSize <= 0 || blockSize > 1024)
		*numBlocks = 0;
	else
		/* 2048 threads and 32 blocks per SM (compute capability 9.0). */
		*numBlocks = 2048 / blockSize < 32 ? 2048 / blockSize : 32;
	emu_unlock(&ctx->lock);
	emu_ctx_leave(ctx);
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
	emu_rdlock(&l->ctx->mem_rw);
	rc = l->kernel->run(l);
	emu_rwunlock(&l->ctx->mem_rw);
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
	rc = emu_ctx_enter(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	emu_lock(&ctx->lock);
	fn = func_find(ctx, f, 0);
	s = emu_stream_find(ctx, hStream);
	if (!fn || !s) {
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
	emu_unlock(&ctx->lock);
	emu_ctx_leave(ctx);
	return rc;
}
