/*
 * rgpu top [--server HOST[:PORT]]... [--json] [--interval SEC] [--count N]
 *
 * The live sessions of GPU servers (SESSION_LIST, lib/proto.h): each with
 * its job, uid, GPU, memory, compute share and the GPU time the scheduler
 * charged it.  Without --server, the servers of the job (RGPU_SERVERS).
 * A user sees their own sessions; root and the SlurmUser all of them.
 * Without --json the table is redrawn every --interval seconds (2) until
 * interrupted, or --count times.
 */
#include "top.h"

#include "clock.h"
#include "lease_rpc.h"
#include "proto.h"
#include "servers.h"
#include "size.h"
#include "wire.h"

#include <errno.h>
#include <getopt.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct srv {
	char host[256];
	unsigned port;
};

struct sess {
	int srv;
	uint64_t job;
	uint32_t uid, gpu, pid;
	uint64_t mem;
	uint32_t share, weight;
	uint64_t gpu_ns, busy_ns, resident, swapped, age_ms;
};

struct answer {
	char err[512];
	char policy[16];
};

static volatile sig_atomic_t stop;

static void on_int(int sig)
{
	(void)sig;
	stop = 1;
}

/* Asks one server; appends its sessions.  0, or -1 with a->err. */
static int ask(const struct srv *s, int si, uint64_t job, struct sess **v, size_t *n, size_t *cap,
	       struct answer *a)
{
	char note[160] = "", why[256] = "";
	struct rg_conn *c = rg_connect_user(s->host, s->port, job, 3000, note, sizeof(note), why,
					    sizeof(why));
	if (!c) {
		snprintf(a->err, sizeof(a->err), "%s", why);
		return -1;
	}
	struct wbuf w;
	wbuf_init(&w);
	struct rd r;
	int32_t st = 0;
	int rc = rg_call(c, RGPU_OP_SESSION_LIST, &w, &r, &st);
	wbuf_free(&w);
	if (rc) {
		snprintf(a->err, sizeof(a->err), "connection lost");
		rg_close(c);
		return -1;
	}
	if (st) {
		const char *m = get_str(&r, 1024);
		snprintf(a->err, sizeof(a->err), "%s%s%s", m ? m : "refused",
			 note[0] ? " (no credential sent: " : "", note[0] ? note : "");
		if (note[0])
			strncat(a->err, ")", sizeof(a->err) - strlen(a->err) - 1);
		rg_close(c);
		return -1;
	}
	uint32_t k = get_u32(&r);
	if (!rd_ok(&r) || k > 1u << 20) {
		snprintf(a->err, sizeof(a->err), "malformed SESSION_LIST reply");
		rg_close(c);
		return -1;
	}
	for (uint32_t i = 0; i < k; i++) {
		if (*n == *cap) {
			size_t nc = *cap ? *cap * 2 : 16;
			struct sess *t = realloc(*v, nc * sizeof(*t));
			if (!t) {
				snprintf(a->err, sizeof(a->err), "out of memory");
				rg_close(c);
				return -1;
			}
			*v = t;
			*cap = nc;
		}
		struct sess *x = &(*v)[*n];
		x->srv = si;
		x->job = get_u64(&r);
		x->uid = get_u32(&r);
		x->gpu = get_u32(&r);
		x->pid = get_u32(&r);
		x->mem = get_u64(&r);
		x->share = get_u32(&r);
		x->weight = get_u32(&r);
		x->gpu_ns = get_u64(&r);
		x->busy_ns = get_u64(&r);
		x->resident = get_u64(&r);
		x->swapped = get_u64(&r);
		x->age_ms = get_u64(&r);
		if (!rd_ok(&r)) {
			snprintf(a->err, sizeof(a->err), "malformed SESSION_LIST reply");
			rg_close(c);
			return -1;
		}
		(*n)++;
	}
	const char *pol = get_str(&r, 64);
	snprintf(a->policy, sizeof(a->policy), "%s", pol ? pol : "?");
	rg_close(c);
	return 0;
}

static int parse_server(const char *arg, struct srv *s)
{
	struct rgpu_server_ent e;
	char err[256];
	if (rgpu_servers_parse(arg, &e, 1, err, sizeof(err)) != 1) {
		fprintf(stderr, "rgpu top: --server %s: %s\n", arg, err);
		return -1;
	}
	snprintf(s->host, sizeof(s->host), "%s", e.host);
	s->port = e.port;
	return 0;
}

static int add_server(struct srv *v, int n, int max, const struct srv *s)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(v[i].host, s->host) && v[i].port == s->port)
			return n;
	if (n < max)
		v[n++] = *s;
	return n;
}

static json_object *to_json(const struct srv *sv, int ns, const struct answer *a,
			    const struct sess *v, size_t n)
{
	json_object *o = json_object_new_object(), *servers = json_object_new_array(),
		    *sessions = json_object_new_array();
	for (int i = 0; i < ns; i++) {
		json_object *s = json_object_new_object();
		char name[300];
		snprintf(name, sizeof(name), "%s:%u", sv[i].host, sv[i].port);
		json_object_object_add(s, "server", json_object_new_string(name));
		if (a[i].err[0])
			json_object_object_add(s, "error", json_object_new_string(a[i].err));
		else
			json_object_object_add(s, "policy", json_object_new_string(a[i].policy));
		json_object_array_add(servers, s);
	}
	for (size_t i = 0; i < n; i++) {
		json_object *s = json_object_new_object();
		char name[300];
		snprintf(name, sizeof(name), "%s:%u", sv[v[i].srv].host, sv[v[i].srv].port);
		json_object_object_add(s, "server", json_object_new_string(name));
		json_object_object_add(s, "job", json_object_new_uint64(v[i].job));
		json_object_object_add(s, "uid", json_object_new_int64(v[i].uid));
		json_object_object_add(s, "gpu", json_object_new_int64(v[i].gpu));
		json_object_object_add(s, "pid", json_object_new_int64(v[i].pid));
		json_object_object_add(s, "memory_bytes", json_object_new_uint64(v[i].mem));
		json_object_object_add(s, "share", json_object_new_int64(v[i].share));
		json_object_object_add(s, "weight", json_object_new_int64(v[i].weight));
		json_object_object_add(s, "gpu_time_ms", json_object_new_double(v[i].gpu_ns / 1e6));
		json_object_object_add(s, "busy_ms", json_object_new_double(v[i].busy_ns / 1e6));
		json_object_object_add(s, "resident_bytes", json_object_new_uint64(v[i].resident));
		json_object_object_add(s, "swapped_bytes", json_object_new_uint64(v[i].swapped));
		json_object_object_add(s, "age_s", json_object_new_double(v[i].age_ms / 1e3));
		json_object_array_add(sessions, s);
	}
	json_object_object_add(o, "servers", servers);
	json_object_object_add(o, "sessions", sessions);
	return o;
}

static void table(const struct srv *sv, int ns, const struct answer *a, const struct sess *v,
		  size_t n, uint64_t *prev_ns, double dt)
{
	for (int i = 0; i < ns; i++) {
		if (a[i].err[0])
			printf("%s:%u: %s\n", sv[i].host, sv[i].port, a[i].err);
		else
			printf("%s:%u: scheduler %s\n", sv[i].host, sv[i].port, a[i].policy);
	}
	printf("%-22s %8s %6s %3s %8s %10s %5s %10s %6s %10s %10s\n", "SERVER", "JOB", "UID", "GPU",
	       "PID", "MEMORY", "SHARE", "GPU-TIME", "GPU%", "RESIDENT", "SWAPPED");
	for (size_t i = 0; i < n; i++) {
		char srv[300], mem[32], res[32], sw[32], share[8], gt[32], pct[16];
		snprintf(srv, sizeof(srv), "%s:%u", sv[v[i].srv].host, sv[v[i].srv].port);
		rgpu_format_size(v[i].mem, mem, sizeof(mem));
		rgpu_format_size(v[i].resident, res, sizeof(res));
		rgpu_format_size(v[i].swapped, sw, sizeof(sw));
		if (v[i].share)
			snprintf(share, sizeof(share), "%u%%", v[i].share);
		else
			snprintf(share, sizeof(share), "-");
		snprintf(gt, sizeof(gt), "%.1fs", v[i].gpu_ns / 1e9);
		/* GPU%: attained since the last refresh, over the refresh */
		if (prev_ns && dt > 0 && prev_ns[i] != UINT64_MAX && v[i].gpu_ns >= prev_ns[i])
			snprintf(pct, sizeof(pct), "%.0f", (v[i].gpu_ns - prev_ns[i]) / 1e7 / dt);
		else
			snprintf(pct, sizeof(pct), "-");
		printf("%-22.22s %8llu %6u %3u %8u %10s %5s %10s %6s %10s %10s\n", srv,
		       (unsigned long long)v[i].job, v[i].uid, v[i].gpu, v[i].pid, mem, share, gt, pct,
		       res, sw);
	}
	if (!n)
		printf("(no sessions)\n");
	fflush(stdout);
}

int rgpu_top(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "server", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "interval", required_argument, NULL, 'i' },
		{ "count", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct srv sv[64];
	int ns = 0, json = 0, o;
	double interval = 2;
	long count = 0;
	optind = 1;
	while ((o = getopt_long(argc, argv, "s:ji:n:h", opts, NULL)) != -1) {
		char *end;
		switch (o) {
		case 's': {
			struct srv s;
			if (parse_server(optarg, &s))
				return 2;
			ns = add_server(sv, ns, 64, &s);
			break;
		}
		case 'j': json = 1; break;
		case 'i':
			interval = strtod(optarg, &end);
			if (*end || !(interval >= 0.1 && interval <= 3600)) {
				fprintf(stderr, "rgpu top: --interval: '%s' is not a number of seconds "
					"from 0.1 to 3600\n", optarg);
				return 2;
			}
			break;
		case 'n':
			errno = 0;
			count = strtol(optarg, &end, 10);
			if (errno || *end || count < 1) {
				fprintf(stderr, "rgpu top: --count: '%s' is not a positive number\n", optarg);
				return 2;
			}
			break;
		case 'h':
			printf("usage: rgpu top [--server HOST[:PORT]]... [--json] [--interval SEC] "
			       "[--count N]\n");
			return 0;
		default:
			fprintf(stderr, "usage: rgpu top [--server HOST[:PORT]]... [--json] "
				"[--interval SEC] [--count N]\n");
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "rgpu top: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	uint64_t job = 0;
	const char *jid = getenv("RGPU_JOB_ID");
	if (!jid)
		jid = getenv("SLURM_JOB_ID");
	if (jid && *jid)
		job = strtoull(jid, NULL, 10);
	if (!ns) {
		const char *spec = getenv("RGPU_SERVERS");
		struct rgpu_server_ent ents[RGPU_MAX_DEVICES];
		char err[256];
		int k = spec && *spec ? rgpu_servers_parse(spec, ents, RGPU_MAX_DEVICES, err, sizeof(err))
				      : -1;
		if (k <= 0) {
			fprintf(stderr, "rgpu top: no --server and %s\n",
				spec && *spec ? "RGPU_SERVERS cannot be read" : "RGPU_SERVERS is not set");
			return 2;
		}
		for (int i = 0; i < k; i++) {
			struct srv s;
			snprintf(s.host, sizeof(s.host), "%s", ents[i].host);
			s.port = ents[i].port;
			ns = add_server(sv, ns, 64, &s);
		}
	}
	if (!json) {
		struct sigaction sa = { .sa_handler = on_int };
		sigemptyset(&sa.sa_mask);
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
	}
	struct sess *prev = NULL;
	size_t nprev = 0;
	double tprev = 0;
	int failed = 0;
	for (long round = 0; !stop; round++) {
		struct answer a[64];
		struct sess *v = NULL;
		size_t n = 0, cap = 0;
		failed = 0;
		for (int i = 0; i < ns; i++) {
			memset(&a[i], 0, sizeof(a[i]));
			failed += ask(&sv[i], i, job, &v, &n, &cap, &a[i]) < 0;
		}
		if (json) {
			json_object *j = to_json(sv, ns, a, v, n);
			printf("%s\n", json_object_to_json_string_ext(j, JSON_C_TO_STRING_PRETTY |
									 JSON_C_TO_STRING_SPACED |
									 JSON_C_TO_STRING_NOSLASHESCAPE));
			json_object_put(j);
			free(v);
			break;
		}
		double t = rgpu_now_s();
		double dt = round ? t - tprev : 0;
		uint64_t *pns = malloc((n ? n : 1) * sizeof(*pns));
		for (size_t i = 0; pns && i < n; i++) {
			pns[i] = UINT64_MAX;
			for (size_t k = 0; k < nprev; k++)
				if (prev[k].srv == v[i].srv && prev[k].pid == v[i].pid &&
				    prev[k].gpu == v[i].gpu)
					pns[i] = prev[k].gpu_ns;
		}
		if (isatty(1))
			printf("\033[H\033[2J");
		table(sv, ns, a, v, n, pns, dt);
		free(pns);
		free(prev);
		prev = v;
		nprev = n;
		tprev = t;
		if (count && round + 1 >= count)
			break;
		struct timespec sl = { (time_t)interval, (long)((interval - (double)(time_t)interval) * 1e9) };
		while (!stop && nanosleep(&sl, &sl) < 0 && errno == EINTR)
			;
		if (!isatty(1))
			printf("\n");
	}
	free(prev);
	return failed == ns ? 1 : 0;
}
