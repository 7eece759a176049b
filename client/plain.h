/* Plain driver calls (driver-api.calls): the generated entry points
 * describe their arguments and rc_plain_call serves them. */
#ifndef RGPU_CLIENT_PLAIN_H
#define RGPU_CLIENT_PLAIN_H

#include "client.h"

struct rc_parg {
	enum rgpu_arg kind;
	void *p;       /* handle (STREAM, EVENT, FUNC) or buffer (IN, OUT, INOUT) */
	uint64_t v;    /* VAL, DEVICE */
	size_t size;   /* IN, OUT, INOUT */
};

CUresult rc_plain_call(const char *name, const struct rc_parg *a, int n);

#endif
