/*
 * The CUDA driver as rgpud sees it: a table of entry points loaded with
 * dlopen() from the real libcuda.so.1, or from the emulated device
 * (librgpu-emu.so, `rgpud --emulated`).  Both export exactly these names with
 * cuda.h's prototypes; this list is the contract between them.
 *
 * Compiled with __CUDA_API_VERSION_INTERNAL so cuda.h declares every
 * versioned name (cuMemAlloc_v2 ...) and the prototypes type-check.
 */
#ifndef RGPUD_DRIVER_H
#define RGPUD_DRIVER_H

#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1
#endif
#include <cuda.h>
#include <cudaProfiler.h>

#define RGPUD_DRIVER_FUNCS(X)                    \
	X(cuGetErrorName)                        \
	X(cuGetErrorString)                      \
	X(cuInit)                                \
	X(cuDriverGetVersion)                    \
	X(cuDeviceGetCount)                      \
	X(cuDeviceGet)                           \
	X(cuDeviceGetName)                       \
	X(cuDeviceGetUuid_v2)                    \
	X(cuDeviceTotalMem_v2)                   \
	X(cuDeviceGetAttribute)                  \
	X(cuCtxCreate_v2)                        \
	X(cuDevicePrimaryCtxRetain)              \
	X(cuDevicePrimaryCtxRelease_v2)          \
	X(cuDevicePrimaryCtxSetFlags_v2)         \
	X(cuCtxDestroy_v2)                       \
	X(cuCtxSetCurrent)                       \
	X(cuCtxSynchronize)                      \
	X(cuCtxGetLimit)                         \
	X(cuCtxSetLimit)                         \
	X(cuMemGetInfo_v2)                       \
	X(cuMemAlloc_v2)                         \
	X(cuMemFree_v2)                          \
	X(cuMemHostAlloc)                        \
	X(cuMemFreeHost)                         \
	X(cuMemHostRegister_v2)                  \
	X(cuMemHostUnregister)                   \
	X(cuMemcpyHtoD_v2)                       \
	X(cuMemcpyDtoH_v2)                       \
	X(cuMemcpyDtoD_v2)                       \
	X(cuMemcpyHtoDAsync_v2)                  \
	X(cuMemcpyDtoHAsync_v2)                  \
	X(cuMemcpyDtoDAsync_v2)                  \
	X(cuMemsetD8_v2)                         \
	X(cuMemsetD16_v2)                        \
	X(cuMemsetD32_v2)                        \
	X(cuMemsetD8Async)                       \
	X(cuMemsetD16Async)                      \
	X(cuMemsetD32Async)                      \
	X(cuModuleLoadData)                      \
	X(cuModuleUnload)                        \
	X(cuModuleGetFunction)                   \
	X(cuModuleGetGlobal_v2)                  \
	X(cuLibraryLoadData)                     \
	X(cuLibraryUnload)                       \
	X(cuLibraryGetKernel)                    \
	X(cuLibraryGetGlobal)                    \
	X(cuLibraryGetKernelCount)               \
	X(cuKernelGetFunction)                   \
	X(cuKernelGetParamInfo)                  \
	X(cuFuncGetParamInfo)                    \
	X(cuFuncGetAttribute)                    \
	X(cuFuncSetAttribute)                    \
	X(cuFuncSetCacheConfig)                  \
	X(cuLaunchKernel)                        \
	X(cuLaunchKernelEx)                      \
	X(cuOccupancyAvailableDynamicSMemPerBlock) \
	X(cuOccupancyMaxActiveClusters)          \
	X(cuOccupancyMaxPotentialClusterSize)    \
	X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags) \
	X(cuStreamCreateWithPriority)            \
	X(cuStreamDestroy_v2)                    \
	X(cuStreamSynchronize)                   \
	X(cuStreamQuery)                         \
	X(cuStreamWaitEvent)                     \
	X(cuEventCreate)                         \
	X(cuEventDestroy_v2)                     \
	X(cuEventRecord)                         \
	X(cuEventSynchronize)                    \
	X(cuEventQuery)                          \
	X(cuEventElapsedTime)

/* Entry points used when present (NULL otherwise: the feature is then
 * refused with CUDA_ERROR_NOT_SUPPORTED): CUDA's virtual memory management,
 * which places managed and mapped memory at the client's addresses. */
#define RGPUD_DRIVER_OPTIONAL(X)                 \
	X(cuMemGetAllocationGranularity)         \
	X(cuMemAddressReserve)                   \
	X(cuMemAddressFree)                      \
	X(cuMemCreate)                           \
	X(cuMemRelease)                          \
	X(cuMemMap)                              \
	X(cuMemUnmap)                            \
	X(cuMemSetAccess)                        \
	X(cuMemHostGetDevicePointer_v2)

/* CUDA graphs by stream capture (optional too: not emulated). */
#define RGPUD_DRIVER_GRAPHS(X)                   \
	X(cuStreamBeginCapture_v2)               \
	X(cuStreamEndCapture)                    \
	X(cuStreamIsCapturing)                   \
	X(cuGraphInstantiateWithFlags)           \
	X(cuGraphLaunch)                         \
	X(cuGraphExecDestroy)                    \
	X(cuGraphDestroy)                        \
	X(cuGraphGetNodes)

/* Application memory (ops_appvmm.c, ops_pool.c, ops_peer.c): each optional
 * on its own; a missing one makes its call CUDA_ERROR_NOT_SUPPORTED. */
#define RGPUD_DRIVER_APPMEM(X)                   \
	X(cuMemExportToShareableHandle)          \
	X(cuMemImportFromShareableHandle)        \
	X(cuMemsetD2D8_v2)                       \
	X(cuArray3DCreate_v2)                    \
	X(cuArrayDestroy)                        \
	X(cuMemcpy3D_v2)                         \
	X(cuMemcpy3DAsync_v2)                    \
	X(cuTexObjectCreate)                     \
	X(cuTexObjectDestroy)                    \
	X(cuSurfObjectCreate)                    \
	X(cuSurfObjectDestroy)                   \
	X(cuMemsetD2D16_v2)                      \
	X(cuMemsetD2D32_v2)                      \
	X(cuMemsetD2D8Async)                     \
	X(cuMemsetD2D16Async)                    \
	X(cuMemsetD2D32Async)                    \
	X(cuDeviceCanAccessPeer)                 \
	X(cuDeviceGetP2PAttribute)               \
	X(cuCtxEnablePeerAccess)                 \
	X(cuCtxDisablePeerAccess)                \
	X(cuMemcpyPeer)                          \
	X(cuMemcpyPeerAsync)                     \
	X(cuDeviceGetDefaultMemPool)             \
	X(cuMemPoolCreate)                       \
	X(cuMemPoolDestroy)                      \
	X(cuMemPoolGetAttribute)                 \
	X(cuMemPoolSetAttribute)                 \
	X(cuMemPoolTrimTo)                       \
	X(cuMemPoolSetAccess)                    \
	X(cuMemAllocFromPoolAsync)               \
	X(cuMemFreeAsync)                        \
	X(cuDeviceGetPCIBusId)                   \
	X(cuIpcGetEventHandle)                   \
	X(cuIpcOpenEventHandle)

/* Listing a module's functions (CUDA 12.4+; optional). */
#define RGPUD_DRIVER_MODFUNCS(X)                 \
	X(cuModuleGetFunctionCount)              \
	X(cuModuleEnumerateFunctions)            \
	X(cuFuncGetName)

/* Entry points each used when present (NULL otherwise: the call that
 * needs one is answered CUDA_ERROR_NOT_SUPPORTED): host functions, stream
 * and launch attributes, explicit graphs, the JIT linker, the profiler,
 * whole-context events, a library's module and kernel list (ops_hostfn.c,
 * ops_graph.c, ops_attr.c, ops_stream.c, ops_module.c). */
#define RGPUD_DRIVER_MAYBE(X)                    \
	X(cuLaunchHostFunc)                      \
	X(cuStreamGetAttribute)                  \
	X(cuStreamSetAttribute)                  \
	X(cuProfilerStart)                       \
	X(cuProfilerStop)                        \
	X(cuLinkCreate_v2)                       \
	X(cuLinkAddData_v2)                      \
	X(cuLinkComplete)                        \
	X(cuLinkDestroy)                         \
	X(cuGraphCreate)                         \
	X(cuGraphClone)                          \
	X(cuGraphAddKernelNode_v2)               \
	X(cuGraphAddMemsetNode)                  \
	X(cuGraphAddMemcpyNode)                  \
	X(cuGraphAddHostNode)                    \
	X(cuGraphAddEmptyNode)                   \
	X(cuGraphAddEventRecordNode)             \
	X(cuGraphAddEventWaitNode)               \
	X(cuGraphAddChildGraphNode)              \
	X(cuGraphAddMemAllocNode)                \
	X(cuGraphAddMemFreeNode)                 \
	X(cuGraphAddNode_v2)                     \
	X(cuGraphAddBatchMemOpNode)              \
	X(cuGraphBatchMemOpNodeSetParams)        \
	X(cuGraphExecBatchMemOpNodeSetParams)    \
	X(cuGraphAddDependencies)                \
	X(cuGraphRemoveDependencies)             \
	X(cuGraphAddDependencies_v2)             \
	X(cuGraphRemoveDependencies_v2)          \
	X(cuGraphDestroyNode)                    \
	X(cuGraphGetEdges)                       \
	X(cuGraphGetEdges_v2)                    \
	X(cuGraphNodeFindInClone)                \
	X(cuGraphChildGraphNodeGetGraph)         \
	X(cuGraphKernelNodeGetParams_v2)         \
	X(cuGraphKernelNodeSetParams_v2)         \
	X(cuGraphMemsetNodeGetParams)            \
	X(cuGraphMemsetNodeSetParams)            \
	X(cuGraphMemcpyNodeGetParams)            \
	X(cuGraphMemcpyNodeSetParams)            \
	X(cuGraphExecKernelNodeSetParams_v2)     \
	X(cuGraphExecMemsetNodeSetParams)        \
	X(cuGraphExecChildGraphNodeSetParams)    \
	X(cuGraphExecMemcpyNodeSetParams)        \
	X(cuGraphExecUpdate_v2)                  \
	X(cuGraphHostNodeSetParams)              \
	X(cuGraphExecHostNodeSetParams)          \
	X(cuGraphEventRecordNodeSetEvent)        \
	X(cuGraphEventWaitNodeSetEvent)          \
	X(cuGraphExecEventRecordNodeSetEvent)    \
	X(cuGraphExecEventWaitNodeSetEvent)      \
	X(cuGraphNodeSetEnabled)                 \
	X(cuGraphNodeGetEnabled)                 \
	X(cuGraphExecGetFlags)                   \
	X(cuGraphKernelNodeGetAttribute)         \
	X(cuGraphKernelNodeSetAttribute)         \
	X(cuGraphKernelNodeCopyAttributes)       \
	X(cuGraphConditionalHandleCreate)        \
	X(cuGraphNodeGetType)                    \
	X(cuGraphUpload)                         \
	X(cuDeviceGraphMemTrim)                  \
	X(cuStreamGetCaptureInfo_v3)             \
	X(cuStreamUpdateCaptureDependencies_v2)  \
	X(cuThreadExchangeStreamCaptureMode)     \
	X(cuStreamBeginCaptureToGraph)           \
	X(cuCtxRecordEvent)                      \
	X(cuCtxWaitEvent)                        \
	X(cuLibraryGetModule)                    \
	X(cuLibraryEnumerateKernels)             \
	X(cuKernelGetName)                       \
	X(cuLibraryGetManaged)                   \
	X(cuMemGetAddressRange_v2)               \
	X(cuDeviceGetDevResource)                \
	X(cuCtxGetDevResource)                   \
	X(cuGreenCtxGetDevResource)              \
	X(cuDevSmResourceSplitByCount)           \
	X(cuDevResourceGenerateDesc)             \
	X(cuGreenCtxCreate)                      \
	X(cuGreenCtxDestroy)                     \
	X(cuCtxFromGreenCtx)                     \
	X(cuGreenCtxGetId)                       \
	X(cuPointerGetAttribute)

struct rgpud_driver {
	void *dl;
	char path[512];
#define RGPUD_DRV_FIELD(fn) __typeof__(&fn) fn;
	RGPUD_DRIVER_FUNCS(RGPUD_DRV_FIELD)
	RGPUD_DRIVER_OPTIONAL(RGPUD_DRV_FIELD)
	RGPUD_DRIVER_GRAPHS(RGPUD_DRV_FIELD)
	RGPUD_DRIVER_MODFUNCS(RGPUD_DRV_FIELD)
	RGPUD_DRIVER_APPMEM(RGPUD_DRV_FIELD)
	RGPUD_DRIVER_MAYBE(RGPUD_DRV_FIELD)
#undef RGPUD_DRV_FIELD
	int have_vmm;
	int have_graphs;
	int have_modfuncs;
};

/* Loads every entry point from path; on failure writes why into err. */
int rgpud_driver_load(struct rgpud_driver *d, const char *path, char *err, size_t errlen);
void rgpud_driver_unload(struct rgpud_driver *d);
/* Puts the calling thread in relaxed stream-capture mode, once; every
 * thread of a session worker that calls the driver does so first.  The
 * session's thread serves all of the client's threads and does rgpud's
 * own work besides (staging buffers' events, the device copy of managed
 * and registered memory), as do its helper threads: in the default global
 * mode the driver would take any of those for an unsafe call during a
 * capture and invalidate it. */
void rgpud_capture_relaxed(const struct rgpud_driver *d);
/* "CUDA_ERROR_X: description" for logs. */
const char *rgpud_cu_errname(const struct rgpud_driver *d, CUresult rc);

#endif
