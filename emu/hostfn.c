/* Host functions (cuLaunchHostFunc): run by the stream's worker when the
 * stream reaches them, holding the stream until they return, as CUDA
 * does.  A faulted context skips them, as it skips all queued work. */
#include "emu.h"

#include <stdlib.h>

EMU_API CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
	struct emu_stream *s;
	struct emu_ctx *ctx;
	struct emu_op *op;
	CUresult rc;

	if (!fn)
		return CUDA_ERROR_INVALID_VALUE;
	rc = emu_stream_enter(hStream, &ctx, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!(op = calloc(1, sizeof *op))) {
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	} else {
		op->kind = EMU_OP_HOST;
		op->hostfn = fn;
		op->hostdata = userData;
		rc = emu_stream_enqueue(ctx, s, op);
	}
	emu_ctx_unlock_leave(ctx);
	return rc;
}
