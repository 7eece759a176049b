/*
 * rgpu: what a job's remote GPUs are.
 *
 *   rgpu status [--json]     the job's GPUs (RGPU_SERVERS), where they are,
 *                            their quota and the memory in use (LEASE_LIST)
 *   rgpu servers [--json] [--state-dir DIR]
 *                            the cluster's GPU servers and their load, from
 *                            this node's snapshot (no server is contacted)
 *   rgpu top [--server HOST:PORT] [--json]
 *                            live sessions and their GPU time (top.c)
 */
#include "cluster.h"
#include "lease_rpc.h"
#include "servers.h"
#include "size.h"
#include "snapshot.h"
#include "top.h"
#include "rgpu_cmds.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef RGPU_STATEDIR /* configure's $localstatedir/lib/rgpu (tools/Makefile.am) */
#define RGPU_STATEDIR "/var/lib/rgpu"
#endif

struct dev {
	struct rgpu_server_ent ent;
	int found;    /* the server answered */
	int leased;   /* it holds a lease of this job on that GPU */
	char name[64];
	uint64_t total, quota, used, expires;
	char err[512];
	char node[64]; /* Slurm node (RGPU_NODES), "" if unknown */
};

/* `rgpu status --json` writes JSON whatever happens: a failure before any
 * server is asked is {"error": ..., "gpus": []}. */
static int status_error(int json, const char *msg)
{
	fprintf(stderr, "rgpu: %s\n", msg);
	if (json) {
		json_object *o = json_object_new_object();
		json_object_object_add(o, "error", json_object_new_string(msg));
		json_object_object_add(o, "gpus", json_object_new_array());
		printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
								 JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE));
		json_object_put(o);
	}
	return 1;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: rgpu status [--json]\n"
		   "       rgpu servers [--json] [--state-dir DIR]\n"
		   "       rgpu top [--server HOST[:PORT]]... [--json] [--interval SEC] [--count N]\n"
		   "       rgpu migrate [--session ID | --job ID] --from HOST:PORT --to HOST:PORT[/GPU]\n"
		   "       rgpu drain HOST:PORT --to HOST:PORT[/GPU] [--to ...]\n"
		   "\n"
		   "  status    the GPUs in RGPU_SERVERS (a job's remote GPUs): where they are,\n"
		   "            their memory and, in a Slurm job, the job's lease and quota\n"
		   "  servers   the cluster's GPU servers and their load, from this node's\n"
		   "            snapshot (DIR/snapshot.json; default DIR %s)\n"
		   "  top       live sessions of the job's servers (or of --server): job, uid,\n"
		   "            GPU, memory, compute share and attained GPU time\n"
		   "  migrate   move live sessions to another server or GPU (root or SlurmUser)\n"
		   "  drain     move all of a server's sessions away; it then takes no new ones\n"
		   "  --json    JSON instead of a table\n"
		   "\n"
		   "See rgpu(1).\n", RGPU_STATEDIR);
}

static void fmt_size(uint64_t b, char *buf, size_t len)
{
	rgpu_format_size(b, buf, len);
}

static void query(struct dev *d, int n, uint64_t job)
{
	for (int i = 0; i < n; i++) {
		if (d[i].found || d[i].err[0])
			continue;
		char err[sizeof(d[i].err)], note[160], why[256] = "";
		struct rg_conn *c = rg_connect_user(d[i].ent.host, d[i].ent.port, job, 3000, note,
						    sizeof(note), why, sizeof(why));
		struct rg_list l = { 0 };
		int st = c ? rg_lease_list(c, &l, why, sizeof(why)) : -1;
		rg_close(c);
		/* Refused without a credential: say that munge is why. */
		if (st && note[0])
			snprintf(err, sizeof(err), "%s (no credential sent: %s; start munged, or "
				 "use an rgpud started with --open)", why, note);
		else
			snprintf(err, sizeof(err), "%s", why);
		/* One LEASE_LIST answers for every device on that server. */
		for (int k = i; k < n; k++) {
			if (strcmp(d[k].ent.host, d[i].ent.host) || d[k].ent.port != d[i].ent.port)
				continue;
			if (st) {
				snprintf(d[k].err, sizeof(d[k].err), "%s", err);
				continue;
			}
			d[k].found = 1;
			for (size_t g = 0; g < l.ngpu; g++)
				if (l.gpus[g].gpu == d[k].ent.gpu) {
					snprintf(d[k].name, sizeof(d[k].name), "%s", l.gpus[g].name);
					d[k].total = l.gpus[g].total;
				}
			for (size_t m = 0; m < l.nlease; m++)
				if (l.leases[m].job_id == job && l.leases[m].gpu == d[k].ent.gpu) {
					d[k].leased = 1;
					d[k].quota = l.leases[m].mem_limit;
					d[k].used = l.leases[m].used;
					d[k].expires = l.leases[m].expires;
				}
		}
		rg_list_free(&l);
	}
}

static int status(int json)
{
	const char *spec = getenv("RGPU_SERVERS");
	const char *jid = getenv("RGPU_JOB_ID");
	if (!jid)
		jid = getenv("SLURM_JOB_ID");
	if (!spec || !*spec)
		return status_error(json, "RGPU_SERVERS is not set: not in a job with remote GPUs "
				    "(sbatch --gres=rgpu:N or --rgpu-mem=SIZE), and no servers named "
				    "(RGPU_SERVERS=host[:port][/gpu],...)");
	uint64_t job = 0;
	if (jid && *jid) {
		char *end;
		errno = 0;
		job = strtoull(jid, &end, 10);
		if (errno || *end || *jid < '0' || *jid > '9') {
			char msg[160];
			snprintf(msg, sizeof(msg), "job id \"%.60s\" (RGPU_JOB_ID or SLURM_JOB_ID) is "
				 "not a number", jid);
			return status_error(json, msg);
		}
	}
	/* Outside a job no lease applies: the GPUs are listed, with no quota. */
	int in_job = job != 0;
	struct rgpu_server_ent ents[RGPU_MAX_DEVICES];
	char err[256];
	int n = rgpu_servers_parse(spec, ents, RGPU_MAX_DEVICES, err, sizeof(err));
	if (n < 0) {
		char msg[320];
		snprintf(msg, sizeof(msg), "RGPU_SERVERS: %s", err);
		return status_error(json, msg);
	}
	struct dev d[RGPU_MAX_DEVICES];
	memset(d, 0, sizeof(d));
	for (int i = 0; i < n; i++)
		d[i].ent = ents[i];
	/* RGPU_NODES=node:gpu,... parallels RGPU_SERVERS (set by the plugin). */
	const char *nodes = getenv("RGPU_NODES");
	for (int i = 0; nodes && *nodes && i < n; i++) {
		size_t len = strcspn(nodes, ":,");
		snprintf(d[i].node, sizeof(d[i].node), "%.*s", (int)len, nodes);
		nodes = strchr(nodes, ',');
		if (!nodes)
			break;
		nodes++;
	}
	query(d, n, job);
	int bad = 0;
	if (json) {
		json_object *o = json_object_new_object(), *a = json_object_new_array();
		json_object_object_add(o, "job_id", json_object_new_int64((int64_t)job));
		json_object_object_add(o, "in_job", json_object_new_boolean(in_job));
		for (int i = 0; i < n; i++) {
			json_object *g = json_object_new_object();
			json_object_object_add(g, "device", json_object_new_int(i));
			json_object_object_add(g, "node", json_object_new_string(d[i].node));
			json_object_object_add(g, "host", json_object_new_string(d[i].ent.host));
			json_object_object_add(g, "port", json_object_new_int((int)d[i].ent.port));
			json_object_object_add(g, "gpu", json_object_new_int((int)d[i].ent.gpu));
			json_object_object_add(g, "reachable", json_object_new_boolean(d[i].found));
			json_object_object_add(g, "leased", json_object_new_boolean(d[i].leased));
			json_object_object_add(g, "name", json_object_new_string(d[i].name));
			json_object_object_add(g, "total", json_object_new_int64((int64_t)d[i].total));
			json_object_object_add(g, "whole", json_object_new_boolean(d[i].leased && !d[i].quota));
			json_object_object_add(g, "quota", json_object_new_int64((int64_t)(d[i].quota ? d[i].quota : d[i].total)));
			json_object_object_add(g, "used", json_object_new_int64((int64_t)d[i].used));
			json_object_object_add(g, "expires", json_object_new_int64((int64_t)d[i].expires));
			if (d[i].err[0])
				json_object_object_add(g, "error", json_object_new_string(d[i].err));
			json_object_array_add(a, g);
			bad |= !d[i].found || (in_job && !d[i].leased);
		}
		json_object_object_add(o, "gpus", a);
		printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
								 JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE));
		json_object_put(o);
		return bad;
	}
	if (in_job)
		printf("job %" PRIu64 ": %d remote GPU(s)\n", job, n);
	else
		printf("not in a Slurm job: %d GPU(s) from RGPU_SERVERS (no lease, no quota)\n", n);
	printf("%-4s %-10s %-22s %-4s %-31s %-10s %-10s %-10s %s\n", "DEV", "NODE", "SERVER",
	       "GPU", "NAME", "MEMORY", "QUOTA", "USED", "LEASE UNTIL");
	for (int i = 0; i < n; i++) {
		char where[300], tot[32], quo[32], used[32], until[32] = "-";
		snprintf(where, sizeof(where), "%s:%u", d[i].ent.host, d[i].ent.port);
		if (!d[i].found) {
			printf("%-4d %-10s %-22s %-4u error: %s\n", i, d[i].node[0] ? d[i].node : "-",
			       where, d[i].ent.gpu, d[i].err);
			bad = 1;
			continue;
		}
		fmt_size(d[i].total, tot, sizeof(tot));
		fmt_size(d[i].used, used, sizeof(used));
		if (!in_job)
			snprintf(quo, sizeof(quo), "-");
		else if (!d[i].leased)
			snprintf(quo, sizeof(quo), "no lease");
		else if (!d[i].quota)
			snprintf(quo, sizeof(quo), "whole");
		else
			fmt_size(d[i].quota, quo, sizeof(quo));
		if (d[i].expires) {
			time_t t = (time_t)d[i].expires;
			struct tm tm;
			strftime(until, sizeof(until), "%Y-%m-%d %H:%M", localtime_r(&t, &tm));
		}
		printf("%-4d %-10s %-22s %-4u %-31s %-10s %-10s %-10s %s\n", i,
		       d[i].node[0] ? d[i].node : "-", where, d[i].ent.gpu, d[i].name, tot, quo, used,
		       until);
		bad |= in_job && !d[i].leased;
	}
	return bad;
}

static int servers(int json, const char *state_dir)
{
	char path[1100];
	snprintf(path, sizeof(path), "%s/snapshot.json", state_dir);
	struct rg_cluster c;
	rg_cluster_init(&c);
	if (rg_snapshot_load(path, &c)) {
		fprintf(stderr, "rgpu: no snapshot at %s (written when a job starts on this "
				"node)\n", path);
		return 1;
	}
	if (json) {
		json_object *o = json_object_from_file(path);
		if (!o) {
			fprintf(stderr, "rgpu: cannot read %s: %s\n", path, json_util_get_last_err());
			rg_cluster_free(&c);
			return 1;
		}
		printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
								 JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE));
		json_object_put(o);
		rg_cluster_free(&c);
		return 0;
	}
	time_t t = c.taken;
	printf("snapshot of %zu server(s), polled %ld s ago\n", c.nsrv, (long)(time(NULL) - t));
	printf("%-16s %-22s %-4s %-20s %-10s %-10s %s\n", "NODE", "ADDRESS", "GPU", "NAME",
	       "MEMORY", "RESERVED", "USE");
	for (size_t i = 0; i < c.nsrv; i++) {
		const struct rg_server *s = &c.srv[i];
		char where[200];
		snprintf(where, sizeof(where), "%s:%u", s->host, s->port);
		if (!s->up) {
			printf("%-16s %-22s down\n", s->node, where);
			continue;
		}
		for (uint32_t k = 0; k < s->ngpu; k++) {
			const struct rg_gpu *g = &c.gpu[s->first + k];
			char tot[32], res[32], use[32];
			fmt_size(g->total, tot, sizeof(tot));
			fmt_size(g->reserved, res, sizeof(res));
			if (g->exclusive)
				snprintf(use, sizeof(use), "whole");
			else if (g->nslices)
				snprintf(use, sizeof(use), "%u slice(s)", g->nslices);
			else
				snprintf(use, sizeof(use), "idle");
			printf("%-16s %-22s %-4u %-20s %-10s %-10s %s\n", s->node, where, g->index,
			       g->name, tot, res, use);
		}
	}
	rg_cluster_free(&c);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	const char *cmd = argv[1];
	if (!strcmp(cmd, "top"))
		return rgpu_top(argc - 1, argv + 1);
	if (!strcmp(cmd, "migrate"))
		return rgpu_cmd_migrate(argc - 1, argv + 1);
	if (!strcmp(cmd, "drain"))
		return rgpu_cmd_drain(argc - 1, argv + 1);
	int json = 0;
	const char *state_dir = RGPU_STATEDIR;
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "state-dir", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int o;
	optind = 2;
	while ((o = getopt_long(argc, argv, "jh", opts, NULL)) != -1) {
		switch (o) {
		case 'j': json = 1; break;
		case 's': state_dir = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (!strcmp(cmd, "status"))
		return status(json);
	if (!strcmp(cmd, "servers"))
		return servers(json, state_dir);
	if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "rgpu: unknown command '%s'\n", cmd);
	usage(stderr);
	return 2;
}
