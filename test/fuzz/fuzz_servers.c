/* libFuzzer harness: the RGPU_SERVERS parser (lib/servers.c).  The input is
 * the variable's value; the first byte picks how many entries fit. */
#include "servers.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c) do { if (!(c)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	int max = 1 + data[0] % RGPU_MAX_DEVICES;
	char *spec = malloc(size);
	CHECK(spec);
	memcpy(spec, data + 1, size - 1);
	spec[size - 1] = '\0';
	/* exactly max entries: one past the end is a redzone for ASan */
	struct rgpu_server_ent *ents = malloc((size_t)max * sizeof(*ents));
	CHECK(ents);
	char err[256];
	err[0] = '\0';
	int n = rgpu_servers_parse(spec, ents, max, err, sizeof(err));
	if (n < 0) {
		CHECK(n == -1 && err[0] && memchr(err, '\0', sizeof(err)));
	} else {
		CHECK(n >= 1 && n <= max);
		for (int i = 0; i < n; i++) {
			size_t hl = strnlen(ents[i].host, sizeof(ents[i].host));
			CHECK(hl >= 1 && hl < sizeof(ents[i].host));
			CHECK(ents[i].port >= 1 && ents[i].port <= 65535);
			CHECK(ents[i].gpu <= 1023);
			CHECK(strstr(spec, ents[i].host)); /* the host comes from the value */
		}
	}
	free(ents);
	free(spec);
	return 0;
}
