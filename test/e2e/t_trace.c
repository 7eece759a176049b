/* RGPU_TRACE: the driver's entry points as the CUDA runtime gets them
 * (cuGetProcAddress), then a call that succeeds and one that fails.
 *
 * T_TRACED=1: tracing is on (RGPU_TRACE=errors or all), so the entry
 * points handed out are the client's reporting wrappers, not the functions
 * the library exports; run-e2e.sh then checks what stderr says.  Without
 * it they are the exported functions themselves.  Prints "FAILED name
 * address error" for the failing call, which the trace must name with its
 * argument.  Against
 * another libcuda.so.1: skipped. */
#include "common.h"

#include <dlfcn.h>

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);

static void *entry(const char *name)
{
	void *fn = NULL;
	CUdriverProcAddressQueryResult q;
	CK(cuGetProcAddress_v2(name, &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &q));
	CHECK(fn && q == CU_GET_PROC_ADDRESS_SUCCESS, "cuGetProcAddress(%s): no entry point", name);
	return fn;
}

int main(int argc, char **argv)
{
	(void)argc;
	e2e_init(argv[0]);
	if (!dlsym(RTLD_DEFAULT, "rgpu_stats_counter"))
		skip("not the rgpu client");
	int traced = env_long("T_TRACED", 0) != 0;
	/* a name cuGetProcAddress has not: no failure worth reporting */
	void *none = NULL;
	EXPECT_RC(cuGetProcAddress_v2("cuNoSuchCall", &none, 12000, CU_GET_PROC_ADDRESS_DEFAULT, NULL),
		  CUDA_ERROR_NOT_FOUND);
	primary_ctx(0, NULL);
	alloc_fn alloc = (alloc_fn)entry("cuMemAlloc");
	free_fn mfree = (free_fn)entry("cuMemFree");
	void *exported = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
	CHECK(exported, "cuMemAlloc_v2 not exported");
	if (traced)
		CHECK((void *)alloc != exported, "tracing on, but cuGetProcAddress gave the untraced entry point");
	else
		CHECK((void *)alloc == exported, "tracing off, but cuGetProcAddress gave another entry point");

	CUdeviceptr d = 0;
	CK(alloc(&d, 4096));
	/* an address inside the allocation is no allocation's start */
	CUresult rc = mfree(d + 8);
	CHECK(rc != CUDA_SUCCESS, "cuMemFree of an interior address succeeded");
	printf("FAILED cuMemFree_v2 %#llx %s\n", (unsigned long long)(d + 8), cu_name(rc));
	CK(mfree(d));
	printf("t_trace: OK\n");
	return 0;
}
