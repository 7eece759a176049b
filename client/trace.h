/* RGPU_TRACE: the driver calls a program makes, with their results
 * (trace.c; the wrappers are generated from cuda.h by gen-driver-api.py
 * --trace and handed out by cuGetProcAddress). */
#ifndef RGPU_CLIENT_TRACE_H
#define RGPU_CLIENT_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum rc_trace_mode { RC_TRACE_OFF, RC_TRACE_ERRORS, RC_TRACE_ALL };

/* The mode RGPU_TRACE asks for (the settings are read on first use). */
enum rc_trace_mode rc_trace_mode(void);
/* A wrapper's clock at the call (0 unless every call is traced). */
uint64_t rc_trace_begin(void);
/* Whether the call name returning rc (a CUresult) is to be reported. */
int rc_trace_wants(const char *name, int rc);
/* Reports it: its n arguments' names and values (RC_TRACE_V), its result
 * and, when every call is traced, its time since t0. */
void rc_trace_report(const char *name, int rc, uint64_t t0, const char *const *names,
		     const uint64_t *vals, int n);

/* An argument as a number: the integer its first 8 bytes hold (a value, a
 * handle, an address; a structure passed by value shows its start). */
static inline uint64_t rc_trace_v(const void *p, size_t n)
{
	uint64_t v = 0;
	memcpy(&v, p, n < sizeof(v) ? n : sizeof(v));
	return v;
}
#define RC_TRACE_V(x) rc_trace_v(&(x), sizeof(x))

/* Parallel to rc_syms (procaddr.h): each entry point's wrapper, or NULL. */
#include "procaddr.h"
extern const struct rc_sym rc_trace_syms[];

#endif
