/* The JIT linker (cuLinkCreate ... cuLinkComplete), run here: the client
 * collects the options and inputs and sends them in one request; the
 * linked cubin comes back, which the client then loads as any image. */
#include "rgpud.h"
#include "session.h"
#include "jit.h"

#include <stdlib.h>
#include <string.h>

#define D (&rgpud_server.drv)

#define LINK_MAX_OPTS 64
#define LINK_MAX_INPUTS 4096
#define LINK_LOG_MAX (1u << 20)

/* Options whose value is a number (passed in the pointer-sized slot). */
int op_link(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct req q;
	req_ids(r, &q, REQ_CTX);
	uint32_t nopts = get_u32(r);
	if (!rd_ok(r) || nopts > LINK_MAX_OPTS)
		return OP_DROP;
	CUjit_option opts[LINK_MAX_OPTS + 4];
	void *vals[LINK_MAX_OPTS + 4];
	unsigned n = 0;
	for (uint32_t i = 0; i < nopts; i++) {
		uint32_t o = get_u32(r);
		uint64_t v = get_u64(r);
		if (!rgpu_jit_option_numeric(o))
			return rd_ok(r) ? CUDA_ERROR_INVALID_VALUE : OP_DROP;
		opts[n] = (CUjit_option)o;
		vals[n++] = (void *)(uintptr_t)v;
	}
	uint32_t ninputs = get_u32(r);
	if (!rd_ok(r) || ninputs > LINK_MAX_INPUTS)
		return OP_DROP;
	/* the inputs are read as the linker takes them, after the checks */
	struct rd inputs = *r;
	for (uint32_t i = 0; i < ninputs; i++) {
		size_t k;
		(void)get_u32(r);
		(void)get_str(r, 4096);
		(void)get_bytes(r, &k);
	}
	int rc = req_enter(s, r, &q, HK_FREE);
	if (rc)
		return rc;
	if (!D->cuLinkCreate_v2 || !D->cuLinkAddData_v2 || !D->cuLinkComplete || !D->cuLinkDestroy)
		return CUDA_ERROR_NOT_SUPPORTED;
	static char info[LINK_LOG_MAX], err[LINK_LOG_MAX];
	info[0] = err[0] = '\0';
	opts[n] = CU_JIT_INFO_LOG_BUFFER;
	vals[n++] = info;
	opts[n] = CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES;
	vals[n++] = (void *)(uintptr_t)sizeof(info);
	opts[n] = CU_JIT_ERROR_LOG_BUFFER;
	vals[n++] = err;
	opts[n] = CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES;
	vals[n++] = (void *)(uintptr_t)sizeof(err);
	CUlinkState ls;
	if ((rc = D->cuLinkCreate_v2(n, opts, vals, &ls)))
		return rc;
	for (uint32_t i = 0; i < ninputs && !rc; i++) {
		uint32_t type = get_u32(&inputs);
		const char *name = get_str(&inputs, 4096);
		size_t k;
		const void *data = get_bytes(&inputs, &k);
		/* a NUL after the data: PTX text is read up to it */
		char *copy = calloc(1, k + 1);
		if (!copy) {
			rc = CUDA_ERROR_OUT_OF_MEMORY;
			break;
		}
		memcpy(copy, data, k);
		rc = D->cuLinkAddData_v2(ls, (CUjitInputType)type, copy, k, name, 0, NULL, NULL);
		free(copy);
	}
	void *cubin = NULL;
	size_t size = 0;
	if (!rc)
		rc = D->cuLinkComplete(ls, &cubin, &size);
	if (!rc)
		put_bytes(out, cubin, size);
	put_str(out, info);
	put_str(out, err);
	D->cuLinkDestroy(ls);
	return rc;
}
