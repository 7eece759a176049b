/* RGPU_TRACE: the driver calls a program makes, with their results
 * (trace.c; the wrappers are generated from cuda.h by gen-driver-api.py
 * --trace and handed out by cuGetProcAddress). */
#ifndef RGPU_CLIENT_TRACE_H
#define RGPU_CLIENT_TRACE_H

#include <stdint.h>

enum rc_trace_mode { RC_TRACE_OFF, RC_TRACE_ERRORS, RC_TRACE_ALL };

/* The mode RGPU_TRACE asks for (the settings are read on first use). */
enum rc_trace_mode rc_trace_mode(void);
/* A wrapper's clock at the call (0 unless every call is traced). */
uint64_t rc_trace_begin(void);
/* Reports the call name returning rc (an int: CUresult). */
void rc_trace_end(const char *name, int rc, uint64_t t0);

/* Parallel to rc_syms (procaddr.h): each entry point's wrapper, or NULL. */
#include "procaddr.h"
extern const struct rc_sym rc_trace_syms[];

#endif
