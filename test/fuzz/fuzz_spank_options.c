/* libFuzzer harness: the SPANK plugin's option parser (spank/options.c):
 * the plugstack.conf arguments, --rgpu-mem and the %n expansion of
 * state_dir.  The input is split at NUL bytes: the first piece is the node
 * name, the second the --rgpu-mem value, the rest the arguments.  The few
 * Slurm functions options.c calls are stubbed here. */
#include "plugin.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c) do { if (!(c)) __builtin_trap(); } while (0)

void slurm_error(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
}

spank_err_t spank_option_register(spank_t sp, struct spank_option *opt)
{
	return ESPANK_SUCCESS;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size + 1);
	CHECK(buf);
	memcpy(buf, data, size);
	buf[size] = '\0';
	char *piece[66];
	int np = 0;
	for (char *p = buf; np < 66;) {
		piece[np++] = p;
		char *z = memchr(p, '\0', (size_t)(buf + size - p));
		if (!z || z == buf + size)
			break;
		p = z + 1;
	}
	const char *node = piece[0];
	const char *mem = np > 1 ? piece[1] : NULL;
	int ac = np > 2 ? np - 2 : 0;
	char **av = ac ? &piece[2] : NULL;

	if (rgpu_cfg_parse(ac, av) == 0) {
		CHECK(rgpu_cfg.port >= 1 && rgpu_cfg.port <= 65535 && rgpu_cfg.policy);
		CHECK(memchr(rgpu_cfg.client_dir, '\0', sizeof(rgpu_cfg.client_dir)));
		rgpu_cfg_set_node(node);
		CHECK(memchr(rgpu_cfg.state_dir, '\0', sizeof(rgpu_cfg.state_dir)));
	}
	uint64_t b;
	char err[512];
	if (mem) {
		if (rgpu_mem_parse(mem, &b, err, sizeof(err)) == 0)
			CHECK(b >= 1);
		if (rgpu_mem_option.cb(0, mem, 0) == 0)
			CHECK(rgpu_mem_arg && !strcmp(rgpu_mem_arg, mem));
	}
	free(buf);
	return 0;
}
