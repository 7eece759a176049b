#include "driver.h"
#include "log.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int rgpud_driver_load(struct rgpud_driver *d, const char *path, char *err, size_t errlen)
{
	memset(d, 0, sizeof(*d));
	/* RTLD_LOCAL: the driver's symbols must not satisfy anything else's
	 * lookups in this process. */
	d->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!d->dl) {
		snprintf(err, errlen, "cannot load CUDA driver %s: %s", path, dlerror());
		return -1;
	}
	snprintf(d->path, sizeof(d->path), "%s", path);
	/* The rgpu client is also called libcuda.so.1: serving through it would
	 * loop back over the network. */
	if (dlsym(d->dl, "rgpu_client_version")) {
		snprintf(err, errlen, "%s is the rgpu client library, not a CUDA driver: "
			 "remove the rgpu client directory from LD_LIBRARY_PATH for rgpud", path);
		dlclose(d->dl);
		d->dl = NULL;
		return -1;
	}
#define RGPUD_DRV_LOAD(fn)                                                          \
	*(void **)(&d->fn) = dlsym(d->dl, #fn);                                     \
	if (!d->fn) {                                                               \
		snprintf(err, errlen, "CUDA driver %s lacks %s (driver too old?)", path, #fn); \
		dlclose(d->dl);                                                     \
		d->dl = NULL;                                                       \
		return -1;                                                          \
	}
	RGPUD_DRIVER_FUNCS(RGPUD_DRV_LOAD)
#undef RGPUD_DRV_LOAD
	d->have_vmm = 1;
#define RGPUD_DRV_OPT(fn)                                \
	*(void **)(&d->fn) = dlsym(d->dl, #fn);          \
	if (!d->fn)                                      \
		d->have_vmm = 0;
	RGPUD_DRIVER_OPTIONAL(RGPUD_DRV_OPT)
	d->have_graphs = 1;
#define RGPUD_DRV_OPT_G(fn)                              \
	*(void **)(&d->fn) = dlsym(d->dl, #fn);          \
	if (!d->fn)                                      \
		d->have_graphs = 0;
	RGPUD_DRIVER_GRAPHS(RGPUD_DRV_OPT_G)
#undef RGPUD_DRV_OPT_G
	d->have_modfuncs = 1;
#define RGPUD_DRV_OPT_M(fn)                              \
	*(void **)(&d->fn) = dlsym(d->dl, #fn);          \
	if (!d->fn)                                      \
		d->have_modfuncs = 0;
	RGPUD_DRIVER_MODFUNCS(RGPUD_DRV_OPT_M)
#undef RGPUD_DRV_OPT_M
#undef RGPUD_DRV_OPT
#define RGPUD_DRV_OPT_A(fn) *(void **)(&d->fn) = dlsym(d->dl, #fn);
	RGPUD_DRIVER_APPMEM(RGPUD_DRV_OPT_A)
#undef RGPUD_DRV_OPT_A
#define RGPUD_DRV_MAYBE(fn) *(void **)(&d->fn) = dlsym(d->dl, #fn);
	RGPUD_DRIVER_MAYBE(RGPUD_DRV_MAYBE)
#undef RGPUD_DRV_MAYBE
	/* Prefer the current elapsed-time entry point where the driver has it. */
	void *et = dlsym(d->dl, "cuEventElapsedTime_v2");
	if (et)
		*(void **)(&d->cuEventElapsedTime) = et;
	return 0;
}

void rgpud_driver_unload(struct rgpud_driver *d)
{
	if (d->dl)
		dlclose(d->dl);
	d->dl = NULL;
}

void rgpud_capture_relaxed(const struct rgpud_driver *d)
{
	static __thread int done;
	CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
	if (!done && d->cuThreadExchangeStreamCaptureMode &&
	    d->cuThreadExchangeStreamCaptureMode(&m) == CUDA_SUCCESS)
		done = 1;
}

const char *rgpud_cu_errname(const struct rgpud_driver *d, CUresult rc)
{
	const char *s = NULL;
	if (d->cuGetErrorName && d->cuGetErrorName(rc, &s) == CUDA_SUCCESS && s)
		return s;
	return "CUDA_ERROR_UNKNOWN_CODE";
}
