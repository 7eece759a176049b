/* libFuzzer harness: the size parser and formatter (lib/size.c), as used by
 * --rgpu-mem and rgpu's lease commands. */
#include "size.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c) do { if (!(c)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	CHECK(s);
	memcpy(s, data, size);
	s[size] = '\0';
	uint64_t b = 0;
	char err[128];
	err[0] = '\0';
	if (rgpu_parse_size(s, &b, err, sizeof(err)) == 0) {
		CHECK(b >= 1);
	} else {
		CHECK(err[0] && memchr(err, '\0', sizeof(err)));
		b = size >= 8 ? *(const uint64_t *)(const void *)data : size;
	}
	/* any value, into buffers too small and just big enough */
	for (size_t len = 1; len <= 24; len += 7) {
		char *out = malloc(len);
		CHECK(out);
		rgpu_format_size(b, out, len);
		CHECK(memchr(out, '\0', len));
		free(out);
	}
	free(s);
	return 0;
}
