/* A module's __managed__ variable through cuModuleGetGlobal (how CUDA 11's
 * runtime reaches __managed__ variables, and driver API programs):
 *  - it is managed memory, at the same address for host and device, and
 *    holds its initial value (TEST_MANAGED_INIT) for the host to read;
 *  - the host's write is seen by a kernel (inc_i32 on it), the kernel's by
 *    the host after a synchronisation and by a copy;
 *  - a second load of the module has its own variable, at its initial
 *    value; unloading one leaves the other as it was.
 * Exits non-zero on any mismatch. */
#include "common.h"

static int managed_get(CUmodule mod, int **v)
{
	CUdeviceptr p = 0;
	size_t n = 0;
	CK(cuModuleGetGlobal(&p, &n, mod, "g_managed"));
	CHECK(p != 0 && n == sizeof(int), "g_managed at %#llx, %zu bytes", (unsigned long long)p, n);
	unsigned managed = 0;
	CK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p));
	CHECK(managed == 1, "g_managed is not managed memory (%u)", managed);
	*v = (int *)(uintptr_t)p;
	return 0;
}

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	primary_ctx(0, NULL);
	CUmodule mod = load_test_module();
	CUfunction inc = get_func(mod, "inc_i32");
	int *v;
	managed_get(mod, &v);
	int seen[6];
	seen[0] = *v;
	CHECK(seen[0] == TEST_MANAGED_INIT, "the host reads %d, want the initial %d", seen[0], TEST_MANAGED_INIT);
	/* a second lookup: the same variable */
	int *again;
	managed_get(mod, &again);
	CHECK(again == v, "a second lookup gives %p, the first %p", (void *)again, (void *)v);
	say("g_managed at %p holds its initial value %d for the host", (void *)v, seen[0]);

	/* host -> kernel -> host */
	*v = 41;
	CUdeviceptr dv = (CUdeviceptr)(uintptr_t)v;
	int one = 1;
	void *args[] = { &dv, &one };
	launch1d(inc, 1, NULL, args);
	CK(cuCtxSynchronize());
	seen[1] = *v;
	CHECK(seen[1] == 42, "after the host wrote 41 and a kernel added 1 the host reads %d", seen[1]);
	CK(cuMemcpyDtoH(&seen[2], dv, sizeof(int)));
	CHECK(seen[2] == 42, "a copy of it reads %d", seen[2]);
	launch1d(inc, 1, NULL, args);
	launch1d(inc, 1, NULL, args);
	CK(cuCtxSynchronize());
	seen[3] = *v;
	CHECK(seen[3] == 44, "two more kernels: the host reads %d", seen[3]);
	say("host and kernels agree: 41, 42, 44");

	/* a second module: its own variable, at the initial value */
	CUmodule mod2 = load_test_module();
	int *v2;
	managed_get(mod2, &v2);
	CHECK(v2 != v, "two modules share g_managed at %p", (void *)v);
	seen[4] = *v2;
	CHECK(seen[4] == TEST_MANAGED_INIT, "the second module's g_managed is %d", seen[4]);
	*v2 = 100;
	CK(cuModuleUnload(mod2));
	seen[5] = *v;
	CHECK(seen[5] == 44, "unloading the second module left the first's at %d", seen[5]);
	say("a second module has its own; unloading it leaves the first");

	result("module_managed", seen, sizeof(seen));
	CK(cuModuleUnload(mod));
	say("PASS");
	return 0;
}
