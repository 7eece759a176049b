/* RGPU_TRACE: reports the driver calls a program makes through
 * cuGetProcAddress (every program built with the CUDA runtime, and the
 * libraries on it), so that a failing call is named even where the
 * program only prints "kernel execution error".  "errors": every call that
 * does not return CUDA_SUCCESS, but for the answers that are no failure
 * (CUDA_ERROR_NOT_READY from a query, a symbol cuGetProcAddress does not
 * have); "all": every call, with its time. */
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include "clock.h"
#include "settings.h"
#include "trace.h"

#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

enum rc_trace_mode rc_trace_mode(void)
{
	char err[512];
	/* cuGetProcAddress may come before cuInit; a bad value is reported
	 * by cuInit, tracing stays off */
	if (rc_settings_load(err, sizeof(err)) < 0)
		return RC_TRACE_OFF;
	return (enum rc_trace_mode)rc_setting(RS_TRACE);
}

uint64_t rc_trace_begin(void)
{
	return rc_setting(RS_TRACE) == RC_TRACE_ALL ? rgpu_now_ns() : 0;
}

static int no_failure(const char *name, int rc)
{
	if (rc == CUDA_ERROR_NOT_READY)
		return 1;
	return rc == CUDA_ERROR_NOT_FOUND && !strncmp(name, "cuGetProcAddress", 16);
}

int rc_trace_wants(const char *name, int rc)
{
	unsigned long long mode = rc_setting(RS_TRACE);
	if (mode == RC_TRACE_ALL)
		return 1;
	return mode == RC_TRACE_ERRORS && rc != CUDA_SUCCESS && !no_failure(name, rc);
}

void rc_trace_report(const char *name, int rc, uint64_t t0, const char *const *names,
		     const uint64_t *vals, int n)
{
	char line[1024];
	size_t k = 0;
	long tid = (long)syscall(SYS_gettid);
	k += (size_t)snprintf(line + k, sizeof(line) - k, "rgpu trace: [%ld] %s(", tid, name);
	for (int i = 0; i < n && k < sizeof(line); i++)
		k += (size_t)snprintf(line + k, sizeof(line) - k, "%s%s=%#llx", i ? ", " : "", names[i],
				      (unsigned long long)vals[i]);
	const char *en = NULL;
	if (cuGetErrorName((CUresult)rc, &en) != CUDA_SUCCESS || !en)
		en = "an unknown error";
	if (k < sizeof(line))
		k += (size_t)snprintf(line + k, sizeof(line) - k, ") -> %s (%d)", en, rc);
	if (k < sizeof(line) && rc_setting(RS_TRACE) == RC_TRACE_ALL)
		snprintf(line + k, sizeof(line) - k, " %.1f us", (double)(rgpu_now_ns() - t0) / 1e3);
	/* one write per line: threads' lines do not mix */
	fprintf(stderr, "%s\n", line);
}
