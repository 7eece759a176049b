/* plugstack.conf arguments and --rgpu-mem parsing, without Slurm: the few
 * Slurm symbols options.c uses are stubbed here.  TAP. */
#include "plugin.h"
#include "tap.h"

#include <stdarg.h>

static char last_error[512];

void slurm_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
}

spank_err_t spank_option_register(spank_t sp, struct spank_option *opt)
{
	return ESPANK_SUCCESS;
}

static int parse(const char *line)
{
	char buf[512], *av[16];
	int ac = 0;
	snprintf(buf, sizeof(buf), "%s", line);
	for (char *t = strtok(buf, " "); t && ac < 16; t = strtok(NULL, " "))
		av[ac++] = t;
	last_error[0] = '\0';
	return rgpu_cfg_parse(ac, av);
}

int main(void)
{
	uint64_t b;
	char err[512];

	ok(parse("") == 0, "no arguments");
	is_u64(rgpu_cfg.port, 7420, "default port");
	ok(!strcmp(rgpu_cfg.policy->name, "balanced"), "default policy");
	is_u64(rgpu_cfg.ttl, 30, "default ttl");

	ok(parse("client_dir=/opt/rgpu/lib port=7500 policy=pack ttl=5 grace=60 "
		 "timeout_ms=300 parallel=8 state_dir=/tmp/x/%n") == 0, "all arguments");
	ok(!strcmp(rgpu_cfg.client_dir, "/opt/rgpu/lib"), "client_dir");
	is_u64(rgpu_cfg.port, 7500, "port");
	ok(!strcmp(rgpu_cfg.policy->name, "pack"), "policy");
	is_u64(rgpu_cfg.ttl, 5, "ttl");
	is_u64(rgpu_cfg.grace, 60, "grace");
	is_u64(rgpu_cfg.timeout_ms, 300, "timeout_ms");
	is_u64(rgpu_cfg.parallel, 8, "parallel");
	rgpu_cfg_set_node("gpu7");
	ok(!strcmp(rgpu_cfg.state_dir, "/tmp/x/gpu7"), "%%n expanded: %s", rgpu_cfg.state_dir);
	ok(!rgpu_cfg.standby[0], "no standby pool unless configured");
	ok(parse("standby=gpu7:7420,gpu8:7421/1") == 0 &&
	   !strcmp(rgpu_cfg.standby, "gpu7:7420,gpu8:7421/1"), "standby pool");

	ok(parse("port=0") < 0 && strstr(last_error, "port=0"), "port 0 refused: %s", last_error);
	ok(parse("port=http") < 0, "non-numeric port refused");
	ok(parse("policy=random") < 0 && strstr(last_error, "unknown policy"), "unknown policy: %s",
	   last_error);
	ok(parse("colour=blue") < 0 && strstr(last_error, "unknown argument"), "unknown argument");
	ok(parse("client_dir") < 0 && strstr(last_error, "key=value"), "bare word refused");

	ok(rgpu_mem_parse("2G", &b, err, sizeof(err)) == 0 && b == 2ull << 30, "2G");
	ok(rgpu_mem_parse("512M", &b, err, sizeof(err)) == 0 && b == 512ull << 20, "512M");
	ok(rgpu_mem_parse("1.5GiB", &b, err, sizeof(err)) == 0 && b == 3ull << 29, "1.5GiB");
	ok(rgpu_mem_parse("abc", &b, err, sizeof(err)) < 0 && strstr(err, "--rgpu-mem=abc") &&
	   strstr(err, "not a size"), "abc refused: %s", err);
	ok(rgpu_mem_parse("0", &b, err, sizeof(err)) < 0, "zero refused: %s", err);
	ok(rgpu_mem_parse("2X", &b, err, sizeof(err)) < 0 && strstr(err, "unit"), "bad unit: %s", err);
	ok(rgpu_mem_parse("", &b, err, sizeof(err)) < 0, "empty refused");

	/* The option callback: what sbatch runs while parsing --rgpu-mem. */
	ok(rgpu_mem_option.cb(0, "abc", 0) < 0 && strstr(last_error, "not a size"),
	   "callback refuses abc: %s", last_error);
	ok(rgpu_mem_option.cb(0, "1G", 0) == 0 && rgpu_mem_arg && !strcmp(rgpu_mem_arg, "1G"),
	   "callback keeps 1G");
	free(rgpu_mem_arg);

	/* --rgpu-share */
	uint32_t pct = 0;
	ok(rgpu_share_parse("25", &pct, err, sizeof(err)) == 0 && pct == 25, "share 25");
	ok(rgpu_share_parse("100", &pct, err, sizeof(err)) == 0 && pct == 100, "share 100");
	ok(rgpu_share_parse("0", &pct, err, sizeof(err)) < 0 && strstr(err, "--rgpu-share=0"),
	   "share 0 refused, naming the option: %s", err);
	ok(rgpu_share_parse("101", &pct, err, sizeof(err)) < 0, "share 101 refused");
	ok(rgpu_share_parse("25%", &pct, err, sizeof(err)) < 0, "share 25%% refused: %s", err);
	ok(rgpu_share_parse("", &pct, err, sizeof(err)) < 0, "empty share refused");
	ok(rgpu_share_option.cb(0, "abc", 0) < 0 && strstr(last_error, "--rgpu-share=abc"),
	   "the option callback refuses --rgpu-share=abc: %s", last_error);
	ok(rgpu_share_option.cb(0, "30", 0) == 0 && rgpu_share_arg && !strcmp(rgpu_share_arg, "30"),
	   "the option callback keeps --rgpu-share=30");
	free(rgpu_share_arg);
	return tap_done();
}
