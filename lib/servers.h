/* The RGPU_SERVERS list: which remote GPUs a client presents as its devices.
 *   RGPU_SERVERS=host[:port][/gpu][,host[:port][/gpu]...]
 * IPv6 hosts go in brackets: [::1]:7420/0.  Port defaults to
 * RGPU_DEFAULT_PORT, gpu to 0.  Entry i becomes the client's device i. */
#ifndef RGPU_SERVERS_H
#define RGPU_SERVERS_H

#include <stddef.h>

#define RGPU_MAX_DEVICES 64

struct rgpu_server_ent {
	char host[256];
	unsigned port;
	unsigned gpu;
};

/* Returns the number of entries (>0), or -1 with a message in err. */
int rgpu_servers_parse(const char *spec, struct rgpu_server_ent *out, int max,
		       char *err, size_t errlen);

#endif
