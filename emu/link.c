/* The JIT linker, emulated: every image the emulated device loads holds
 * all its test kernels (module.c), so linking keeps the first input that
 * is an image the loader accepts (PTX must at least have a .version
 * directive) and returns it; the info log says how many inputs were
 * given.  Enough to carry a program's linker calls end
 * to end; no code is generated. */
#include "emu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct emu_link {
	uint32_t magic;
	char *info;
	size_t info_size;
	void *image;
	size_t size;
	int ninputs;
};
#define LINK_MAGIC 0x456c6e6bu

EMU_API CUresult CUDAAPI cuLinkCreate_v2(unsigned int n, CUjit_option *opts, void **vals, CUlinkState *out)
{
	if (!out || (n && (!opts || !vals)))
		return CUDA_ERROR_INVALID_VALUE;
	if (!emu_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	struct emu_link *l = calloc(1, sizeof(*l));
	if (!l)
		return CUDA_ERROR_OUT_OF_MEMORY;
	l->magic = LINK_MAGIC;
	for (unsigned i = 0; i < n; i++) {
		if (opts[i] == CU_JIT_INFO_LOG_BUFFER)
			l->info = vals[i];
		else if (opts[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES)
			l->info_size = (uintptr_t)vals[i];
	}
	*out = (CUlinkState)l;
	return CUDA_SUCCESS;
}

static struct emu_link *get(CUlinkState s)
{
	struct emu_link *l = (struct emu_link *)s;
	return l && l->magic == LINK_MAGIC ? l : NULL;
}

EMU_API CUresult CUDAAPI cuLinkAddData_v2(CUlinkState s, CUjitInputType type, void *data, size_t size,
					  const char *name, unsigned int n, CUjit_option *opts, void **vals)
{
	struct emu_link *l = get(s);
	(void)name; (void)n; (void)opts; (void)vals;
	if (!l || !data || !size || type >= CU_JIT_NUM_INPUT_TYPES)
		return CUDA_ERROR_INVALID_VALUE;
	/* the loader's test: what it would take (module.c's checks) */
	const unsigned char *p = data;
	int image = (size >= 4 && (p[0] == 0x50 && p[1] == 0xed && p[2] == 0x55 && p[3] == 0xba)) ||
		    (size >= 4 && !memcmp(p, "\177ELF", 4)) ||
		    (type == CU_JIT_INPUT_PTX && memchr(p, 0, size) && strstr((const char *)p, ".version"));
	if (!image)
		return CUDA_ERROR_INVALID_IMAGE;
	l->ninputs++;
	if (!l->image) {
		if (!(l->image = malloc(size)))
			return CUDA_ERROR_OUT_OF_MEMORY;
		memcpy(l->image, data, size);
		l->size = size;
	}
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuLinkComplete(CUlinkState s, void **cubin, size_t *size)
{
	struct emu_link *l = get(s);
	if (!l || !cubin || !size)
		return CUDA_ERROR_INVALID_VALUE;
	if (!l->image)
		return CUDA_ERROR_INVALID_IMAGE;
	if (l->info && l->info_size)
		snprintf(l->info, l->info_size, "emulated link of %d input(s)", l->ninputs);
	*cubin = l->image;
	*size = l->size;
	return CUDA_SUCCESS;
}

EMU_API CUresult CUDAAPI cuLinkDestroy(CUlinkState s)
{
	struct emu_link *l = get(s);
	if (!l)
		return CUDA_ERROR_INVALID_HANDLE;
	free(l->image);
	l->magic = 0;
	free(l);
	return CUDA_SUCCESS;
}
