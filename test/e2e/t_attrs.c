/* Attributes:
 *  - device attributes rgpu cannot provide read as absent through rgpu
 *    (concurrent managed access, pageable memory access, host-native
 *    atomics; the emulated device reports the first two present, as an
 *    H100 with HMM does), while the others pass through unchanged;
 *  - stream attributes: a synchronisation policy set on a stream reads
 *    back and copies to another stream, the priority attribute is the
 *    stream's, a NULL value fails; stream ids are distinct and stable;
 *  - function attributes: max dynamic shared memory set reads back;
 *  - cuProfilerStart/Stop succeed (no profiler attached: a no-op);
 *  - cuThreadExchangeStreamCaptureMode swaps the thread's mode. */
#include "common.h"

#include <cudaProfiler.h>

int main(int argc, char **argv)
{
	(void)argc;
	e2e_init(argv[0]);
	CUdevice dev;
	primary_ctx(0, &dev);
	int v;
	if (via_rgpu()) {
		static const CUdevice_attribute absent[] = {
			CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS,
			CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS,
			CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED,
			CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES,
			CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED,
		};
		for (size_t i = 0; i < sizeof(absent) / sizeof(absent[0]); i++) {
			CK(cuDeviceGetAttribute(&v, absent[i], dev));
			CHECK(v == 0, "attribute %d reads %d through rgpu, want 0", (int)absent[i], v);
		}
	}
	CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
	CHECK(v > 0, "multiprocessor count %d", v);
	CK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
	CHECK(v >= 7, "compute capability major %d", v);
	say("device attributes: absent features read 0, the rest pass through");

	/* execution affinity: a context made without one has every SM */
	int sms = v, aff = -1;
	CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
	CK(cuDeviceGetExecAffinitySupport(&aff, CU_EXEC_AFFINITY_TYPE_SM_COUNT, dev));
	CUexecAffinityParam ap;
	memset(&ap, 0, sizeof(ap));
	CUresult arc = cuCtxGetExecAffinity(&ap, CU_EXEC_AFFINITY_TYPE_SM_COUNT);
	if (aff) {
		CK(arc);
		CHECK(ap.type == CU_EXEC_AFFINITY_TYPE_SM_COUNT && ap.param.smCount.val == (unsigned)sms,
		      "the context's affinity: type %d, %u SMs, want all %d", (int)ap.type, ap.param.smCount.val, sms);
	}
	say("execution affinity: supported %d, the context's %u SMs (rc %d)", aff, ap.param.smCount.val, (int)arc);
	int affres[2] = { aff, arc == CUDA_SUCCESS ? (int)ap.param.smCount.val : -(int)arc };
	result("exec-affinity", affres, sizeof(affres));

	CUstream s;
	CK(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, -1));
	CUstreamAttrValue a;
	memset(&a, 0, sizeof(a));
	CK(cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_PRIORITY, &a));
	CHECK(a.priority == -1, "stream priority attribute %d, want -1", a.priority);
	memset(&a, 0, sizeof(a));
	a.syncPolicy = CU_SYNC_POLICY_YIELD;
	CK(cuStreamSetAttribute(s, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &a));
	memset(&a, 0, sizeof(a));
	CK(cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &a));
	CHECK(a.syncPolicy == CU_SYNC_POLICY_YIELD, "sync policy reads %d, want %d", (int)a.syncPolicy,
	      (int)CU_SYNC_POLICY_YIELD);
	CUstream other;
	CK(cuStreamCreate(&other, 0));
	CK(cuStreamCopyAttributes(other, s));
	memset(&a, 0, sizeof(a));
	CK(cuStreamGetAttribute(other, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &a));
	CHECK(a.syncPolicy == CU_SYNC_POLICY_YIELD, "copied sync policy reads %d", (int)a.syncPolicy);
	/* stream ids: distinct, stable (a plain call: driver-api.calls) */
	unsigned long long id1 = 0, id2 = 0, id1b = 0;
	CK(cuStreamGetId(s, &id1));
	CK(cuStreamGetId(other, &id2));
	CK(cuStreamGetId(s, &id1b));
	CHECK(id1 != id2 && id1 == id1b, "stream ids %llu, %llu, %llu", id1, id2, id1b);
	CK(cuStreamDestroy(other));
	/* a NULL value: refused through rgpu (the H100's driver dereferences
	 * it: SIGSEGV, so not asked there) */
	if (via_rgpu()) {
		CUresult bad = cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, NULL);
		CHECK(bad == CUDA_ERROR_INVALID_VALUE, "a NULL attribute value gave %s", cu_name(bad));
	}
	say("stream attributes set, read back and copied; stream ids");

	CUmodule mod = load_test_module();
	CUfunction f = get_func(mod, "vec_add");
	CK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 8192));
	CK(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f));
	CHECK(v == 8192, "max dynamic shared memory reads %d, want 8192", v);
	say("function attribute set and read back");

	/* shared memory bank size (deprecated; accepted, the default kept) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
	CUsharedconfig sc = (CUsharedconfig)-1;
	CK(cuCtxSetSharedMemConfig(CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE));
	CK(cuCtxGetSharedMemConfig(&sc));
	CHECK(sc >= CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE && sc <= CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE,
	      "shared memory config reads %d", (int)sc);
	CK(cuFuncSetSharedMemConfig(f, CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE));
	CHECK(cuFuncSetSharedMemConfig(NULL, CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE) != CUDA_SUCCESS,
	      "a NULL function's shared memory config set");
#pragma GCC diagnostic pop
	int scv = (int)sc;
	result("shared-mem-config", &scv, sizeof(scv));
	say("shared memory bank size: %d", scv);

	CK(cuProfilerStart());
	CK(cuProfilerStop());
	CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
	CK(cuThreadExchangeStreamCaptureMode(&m));
	CHECK(m == CU_STREAM_CAPTURE_MODE_GLOBAL, "first exchange gave mode %d", (int)m);
	CK(cuThreadExchangeStreamCaptureMode(&m));
	CHECK(m == CU_STREAM_CAPTURE_MODE_RELAXED, "second exchange gave mode %d", (int)m);
	say("profiler start/stop and capture mode exchange");

	CK(cuStreamDestroy(s));
	CK(cuModuleUnload(mod));
	say("PASS");
	return 0;
}
