/* A kernel fault: illegal_write to address 0x10.  The launch or the next
 * synchronisation must report CUDA_ERROR_ILLEGAL_ADDRESS (or
 * CUDA_ERROR_LAUNCH_FAILED).  run-e2e.sh / run-gpu.sh then check that the
 * server still serves another client. */
#include "common.h"

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	primary_ctx(0, NULL);
	CUmodule mod = load_test_module();
	CUfunction f = get_func(mod, "illegal_write");
	CUdeviceptr bad = 0x10;
	void *args[] = { &bad };
	CUresult lrc = cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL);
	CUresult src = cuCtxSynchronize();
	say("launch: %s, synchronize: %s", cu_name(lrc), cu_name(src));
	CUresult got = lrc != CUDA_SUCCESS ? lrc : src;
	if (got != CUDA_ERROR_ILLEGAL_ADDRESS && got != CUDA_ERROR_LAUNCH_FAILED)
		fail("illegal_write(0x10): launch %s, synchronize %s; expected "
		     "CUDA_ERROR_ILLEGAL_ADDRESS or CUDA_ERROR_LAUNCH_FAILED",
		     cu_name(lrc), cu_name(src));
	/* the error is sticky: the context is unusable from here on */
	CUdeviceptr p;
	CUresult arc = cuMemAlloc(&p, 16);
	say("cuMemAlloc after the fault: %s", cu_name(arc));
	CHECK(arc != CUDA_SUCCESS || cuCtxSynchronize() != CUDA_SUCCESS,
	      "the context works normally after a kernel fault");
	/* cleanup may report the sticky error; it must not crash */
	CUresult urc = cuModuleUnload(mod);
	say("cuModuleUnload after the fault: %s", cu_name(urc));
	say("PASS");
	return 0;
}
