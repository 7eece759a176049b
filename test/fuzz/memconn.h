/* An in-memory rgpu connection for the fuzz harnesses: reads come from a
 * fixed buffer (then EOF), writes are counted and, if asked, kept.  No
 * sockets and no threads, so one input is one deterministic run. */
#ifndef RGPU_FUZZ_MEMCONN_H
#define RGPU_FUZZ_MEMCONN_H

#include "transport.h"

#include <stddef.h>
#include <stdint.h>

struct memconn {
	struct rgpu_conn c; /* first: the transport casts back */
	const uint8_t *in;
	size_t in_len, in_off;
	uint8_t *out; /* kept output (keep_out), else NULL */
	size_t out_len, out_cap;
	int keep_out;
	uint64_t sent; /* bytes written */
};

void memconn_init(struct memconn *m, const void *in, size_t len, int keep_out);
void memconn_fini(struct memconn *m);

#endif
