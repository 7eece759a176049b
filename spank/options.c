/* The user's option (--rgpu-mem) and the administrator's arguments from
 * plugstack.conf:
 *
 *   required $spankdir/spank_rgpu.so \
 *       client_dir=$clientdir port=7420 state_dir=$localstatedir/lib/rgpu \
 *       policy=balanced ttl=30 timeout_ms=2000 parallel=64 grace=300 \
 *       [standby=host:port,...]
 */
#include "plugin.h"
#include "size.h"

#include <config.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <errno.h>
#include <sys/stat.h>

#ifndef RGPU_STATEDIR /* configure's $localstatedir/lib/rgpu */
#define RGPU_STATEDIR "/var/lib/rgpu"
#endif
#ifndef RGPU_CLIENTDIR
#define RGPU_CLIENTDIR "/usr/lib/rgpu"
#endif

struct rgpu_cfg rgpu_cfg;
char *rgpu_mem_arg;
static char state_dir_arg[1024];

/* state_dir may hold %n, the node's name (several slurmd on one host, as in
 * the test cluster); without one the short host name stands in. */
void rgpu_cfg_set_node(const char *node)
{
	char host[256] = "";
	if (!node || !*node) {
		gethostname(host, sizeof(host) - 1);
		char *dot = strchr(host, '.');
		if (dot)
			*dot = '\0';
		node = host;
	}
	char *o = rgpu_cfg.state_dir, *end = o + sizeof(rgpu_cfg.state_dir) - 1;
	for (const char *p = state_dir_arg; *p && o < end; p++) {
		if (p[0] == '%' && p[1] == 'n') {
			for (const char *q = node; *q && o < end; q++)
				*o++ = *q;
			p++;
		} else {
			*o++ = *p;
		}
	}
	*o = '\0';
}

int rgpu_state_dir_ensure(void)
{
	char p[sizeof(rgpu_cfg.state_dir)];
	snprintf(p, sizeof(p), "%s", rgpu_cfg.state_dir);
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		(void)mkdir(p, 0755);
		*s = '/';
	}
	return mkdir(p, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

int rgpu_mem_parse(const char *s, uint64_t *bytes, char *err, size_t errlen)
{
	char why[256];
	if (rgpu_parse_size(s, bytes, why, sizeof(why))) {
		snprintf(err, errlen, "--rgpu-mem=%s: %s", s ? s : "", why);
		return -1;
	}
	return 0;
}

/* Called as options are parsed (sbatch/srun) and again in slurmstepd. */
static int mem_cb(int val, const char *optarg, int remote)
{
	char err[512];
	uint64_t b;
	if (rgpu_mem_parse(optarg, &b, err, sizeof(err))) {
		slurm_error("rgpu: %s", err);
		return -1;
	}
	free(rgpu_mem_arg);
	rgpu_mem_arg = strdup(optarg);
	return rgpu_mem_arg ? 0 : -1;
}

struct spank_option rgpu_mem_option = {
	"rgpu-mem", "SIZE",
	"Each remote GPU is a slice of SIZE (e.g. 2G) of a possibly shared GPU; "
	"allocations past it fail and cuMemGetInfo reports it. Implies one GPU "
	"without --gres=rgpu:N.",
	1, 0, mem_cb
};

char *rgpu_share_arg;

int rgpu_share_parse(const char *s, uint32_t *pct, char *err, size_t errlen)
{
	char *end;
	errno = 0;
	long v = s && *s ? strtol(s, &end, 10) : -1;
	if (!s || !*s || errno || *end || v < 1 || v > 100) {
		snprintf(err, errlen, "--rgpu-share=%s: not a percentage of the GPU from 1 to 100",
			 s ? s : "");
		return -1;
	}
	*pct = (uint32_t)v;
	return 0;
}

static int share_cb(int val, const char *optarg, int remote)
{
	char err[512];
	uint32_t p;
	if (rgpu_share_parse(optarg, &p, err, sizeof(err))) {
		slurm_error("rgpu: %s", err);
		return -1;
	}
	free(rgpu_share_arg);
	rgpu_share_arg = strdup(optarg);
	return rgpu_share_arg ? 0 : -1;
}

struct spank_option rgpu_share_option = {
	"rgpu-share", "PERCENT",
	"With --rgpu-mem: the slice's compute share, a percentage (1-100) of the GPU. "
	"Sessions of one GPU get GPU time in proportion to their shares (and, where the "
	"server runs MPS, at most that part of its threads).",
	1, 0, share_cb
};

int rgpu_options_register(spank_t sp)
{
	/* Registered here, not through a static table: sbatch only sees
	 * options registered from slurm_spank_init. */
	if (spank_option_register(sp, &rgpu_mem_option) != ESPANK_SUCCESS) {
		slurm_error("rgpu: cannot register --rgpu-mem");
		return -1;
	}
	if (spank_option_register(sp, &rgpu_share_option) != ESPANK_SUCCESS) {
		slurm_error("rgpu: cannot register --rgpu-share");
		return -1;
	}
	return 0;
}

static int int_arg(const char *v, int lo, int hi, int *out, const char *name)
{
	char *end;
	long x = strtol(v, &end, 10);
	if (*v == '\0' || *end || x < lo || x > hi) {
		slurm_error("rgpu: plugstack.conf: %s=%s is not a number in %d..%d", name, v, lo, hi);
		return -1;
	}
	*out = (int)x;
	return 0;
}

int rgpu_cfg_parse(int ac, char **av)
{
	struct rgpu_cfg *c = &rgpu_cfg;
	snprintf(c->client_dir, sizeof(c->client_dir), "%s", RGPU_CLIENTDIR);
	snprintf(state_dir_arg, sizeof(state_dir_arg), "%s", RGPU_STATEDIR);
	c->port = 7420;
	c->policy = rg_policy_find(NULL);
	c->ttl = 30;
	c->timeout_ms = 2000;
	c->parallel = 64;
	c->grace = 300;
	for (int i = 0; i < ac; i++) {
		const char *a = av[i], *eq = strchr(a, '=');
		if (!eq) {
			slurm_error("rgpu: plugstack.conf: argument '%s' is not key=value", a);
			return -1;
		}
		size_t k = (size_t)(eq - a);
		const char *v = eq + 1;
		int port;
		if (k == 10 && !strncmp(a, "client_dir", k)) {
			snprintf(c->client_dir, sizeof(c->client_dir), "%s", v);
		} else if (k == 7 && !strncmp(a, "standby", k)) {
			if (strlen(v) >= sizeof(c->standby)) {
				slurm_error("rgpu: plugstack.conf: standby= is too long");
				return -1;
			}
			snprintf(c->standby, sizeof(c->standby), "%s", v);
		} else if (k == 9 && !strncmp(a, "state_dir", k)) {
			snprintf(state_dir_arg, sizeof(state_dir_arg), "%s", v);
		} else if (k == 4 && !strncmp(a, "port", k)) {
			if (int_arg(v, 1, 65535, &port, "port"))
				return -1;
			c->port = (unsigned)port;
		} else if (k == 6 && !strncmp(a, "policy", k)) {
			c->policy = rg_policy_find(v);
			if (!c->policy) {
				slurm_error("rgpu: plugstack.conf: unknown policy '%s' "
					    "(balanced, least-loaded or pack)", v);
				return -1;
			}
		} else if (k == 3 && !strncmp(a, "ttl", k)) {
			if (int_arg(v, 0, 86400, &c->ttl, "ttl"))
				return -1;
		} else if (k == 10 && !strncmp(a, "timeout_ms", k)) {
			if (int_arg(v, 10, 60000, &c->timeout_ms, "timeout_ms"))
				return -1;
		} else if (k == 8 && !strncmp(a, "parallel", k)) {
			if (int_arg(v, 1, 1024, &c->parallel, "parallel"))
				return -1;
		} else if (k == 5 && !strncmp(a, "grace", k)) {
			if (int_arg(v, 0, 86400 * 7, &c->grace, "grace"))
				return -1;
		} else {
			slurm_error("rgpu: plugstack.conf: unknown argument '%s'", a);
			return -1;
		}
	}
	rgpu_cfg_set_node(getenv("SLURMD_NODENAME"));
	return 0;
}
