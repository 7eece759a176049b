/* Plain driver calls (client/driver-api.calls): the generated table
 * (gen-calls.c) and its entries' invokers. */
#ifndef RGPUD_OPS_CALL_H
#define RGPUD_OPS_CALL_H

#include "driver.h"
#include "proto.h"

#include <stdint.h>

struct call_desc {
	const char *name;
	int nargs;
	int kind[RGPU_CALL_MAX_ARGS];
	uint64_t size[RGPU_CALL_MAX_ARGS];
	uint32_t upto; /* bit i: argument i is at most size[i] bytes (an array
			* whose length another argument gives) */
	/* calls fn with the arguments a[i] points to: a u64 (VAL, DEVICE), a
	 * driver handle (STREAM, EVENT, FUNC) or the buffer (IN, OUT, INOUT) */
	CUresult (*invoke)(void *fn, void **a);
	void *fn;      /* the driver's entry point, looked up on first use */
	int looked;
};

extern struct call_desc call_descs[];
extern const int ncall_descs;

#endif
