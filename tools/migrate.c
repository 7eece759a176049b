/*
 * rgpu migrate and rgpu drain (rgpu(1)): move live sessions between GPUs
 * and servers.  Both ask the source rgpud (MIGRATE, proto.h) as root or
 * the SlurmUser; the source's workers stream their sessions to the target
 * themselves, so no session's memory passes through this command.
 */
#include "rgpu_cmds.h"
#include "cred.h"
#include "frame.h"
#include "proto.h"
#include "servers.h"
#include "transport.h"
#include "wire.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TIMEOUT_MS 10000

/* HOST:PORT[/GPU] into "host:port" and the GPU (-1 when absent). */
static int target(const char *spec, char *addr, size_t n, int32_t *gpu)
{
	struct rgpu_server_ent e;
	char err[256];
	if (rgpu_servers_parse(spec, &e, 1, err, sizeof(err)) != 1) {
		fprintf(stderr, "rgpu: '%s': %s\n", spec, err);
		return -1;
	}
	int h6 = strchr(e.host, ':') != NULL;
	snprintf(addr, n, "%s%s%s:%u", h6 ? "[" : "", e.host, h6 ? "]" : "", e.port);
	*gpu = strchr(spec, '/') ? (int32_t)e.gpu : -1;
	return 0;
}

/* One request, its one reply frame: the status, fields in *r (valid until
 * the next call).  -1 when the connection failed. */
static int call(struct rgpu_conn *c, uint16_t op, const struct wbuf *w, struct rd *r, int32_t *st)
{
	static uint64_t id;
	static uint8_t *buf;
	if (w->oom || rgpu_frame_send(c, op, 0, ++id, w->data, w->len, NULL, 0) < 0)
		return -1;
	struct rgpu_hdr h;
	do {
		if (rgpu_frame_recv_hdr(c, &h) != RGPU_HDR_OK || !(h.flags & RGPU_F_REPLY) ||
		    h.len < 4)
			return -1;
		free(buf);
		if (!(buf = malloc(h.len)) || rgpu_recv(c, buf, h.len) < 0)
			return -1;
	} while (h.op != op || h.id != id);
	rd_init(r, buf, h.len);
	*st = (int32_t)get_u32(r);
	return 0;
}

/* An admin session on the server: over its Unix socket when it runs on
 * this host (the kernel then vouches for root, no munge needed), else
 * TCP; a munge credential when munged answers. */
static struct rgpu_conn *admin_connect(const char *spec)
{
	struct rgpu_server_ent e;
	char err[512];
	if (rgpu_servers_parse(spec, &e, 1, err, sizeof(err)) != 1) {
		fprintf(stderr, "rgpu: '%s': %s\n", spec, err);
		return NULL;
	}
	struct rgpu_conn *c = rgpu_connect_local_first(e.host, e.port, TIMEOUT_MS, err, sizeof(err));
	if (!c) {
		fprintf(stderr, "rgpu: %s: %s\n", spec, err);
		return NULL;
	}
	void *cred = NULL;
	size_t clen = 0;
	if (rgpu_client_credential(&cred, &clen, err, sizeof(err)) < 0) {
		fprintf(stderr, "rgpu: cannot make a credential: %s\n", err);
		rgpu_conn_close(c);
		return NULL;
	}
	struct wbuf w;
	wbuf_init(&w);
	put_u32(&w, RGPU_PROTO_VERSION);
	put_str(&w, "rgpu migrate");
	put_bytes(&w, cred, clen);
	free(cred);
	struct rd r;
	int32_t st;
	(void)rgpu_conn_set_recv_timeout(c, TIMEOUT_MS);
	int rc = call(c, RGPU_OP_HELLO, &w, &r, &st);
	wbuf_free(&w);
	if (rc < 0 || st) {
		const char *m = rc < 0 ? NULL : get_str(&r, 1024);
		fprintf(stderr, "rgpu: %s: %s\n", spec, rc < 0 ? "no handshake (is it an rgpud?)"
							    : m ? m : "refused");
		rgpu_conn_close(c);
		return NULL;
	}
	(void)rgpu_conn_set_recv_timeout(c, 0); /* moving sessions takes its time */
	return c;
}

/* One MIGRATE; prints the server's report.  0 all moved, 1 some failed,
 * 2 refused or unreachable. */
static int order(struct rgpu_conn *c, const char *from, const char *to, uint64_t session,
		 uint64_t job, int drain, uint32_t *failed_out)
{
	char addr[300];
	int32_t gpu;
	if (target(to, addr, sizeof(addr), &gpu) < 0)
		return 2;
	struct wbuf w;
	wbuf_init(&w);
	put_str(&w, addr);
	put_u32(&w, (uint32_t)gpu);
	put_u64(&w, session);
	put_u64(&w, job);
	put_u32(&w, drain ? 1 : 0);
	struct rd r;
	int32_t st;
	int rc = call(c, RGPU_OP_MIGRATE, &w, &r, &st);
	wbuf_free(&w);
	if (rc < 0) {
		fprintf(stderr, "rgpu: %s: the connection failed\n", from);
		return 2;
	}
	if (st) {
		const char *m = get_str(&r, 1024);
		fprintf(stderr, "rgpu: %s refused: %s\n", from, m ? m : "no reason given");
		return 2;
	}
	uint32_t moved = get_u32(&r), failed = get_u32(&r);
	const char *report = get_str(&r, RGPU_MAX_PAYLOAD);
	if (!rd_ok(&r) || !report) {
		fprintf(stderr, "rgpu: %s: a malformed answer\n", from);
		return 2;
	}
	fputs(report, stdout);
	printf("%u moved, %u failed (%s -> %s%s)\n", moved, failed, from, addr,
	       gpu >= 0 ? ", that GPU" : "");
	if (failed_out)
		*failed_out = failed;
	return failed ? 1 : 0;
}

int rgpu_cmd_migrate(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "session", required_argument, NULL, 's' },
		{ "job", required_argument, NULL, 'j' },
		{ "from", required_argument, NULL, 'f' },
		{ "to", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *from = NULL, *to = NULL;
	uint64_t session = 0, job = 0;
	int o;
	optind = 1;
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		char *end;
		switch (o) {
		case 's':
		case 'j': {
			unsigned long long v = strtoull(optarg, &end, 10);
			if (*end || !v) {
				fprintf(stderr, "rgpu migrate: --%s: '%s' is not a positive number\n",
					o == 's' ? "session" : "job", optarg);
				return 2;
			}
			*(o == 's' ? &session : &job) = v;
			break;
		}
		case 'f': from = optarg; break;
		case 't': to = optarg; break;
		case 'h':
			printf("usage: rgpu migrate [--session ID | --job ID] --from HOST:PORT "
			       "--to HOST:PORT[/GPU]\n");
			return 0;
		default: return 2;
		}
	}
	if (!from || !to || optind < argc || (session && job)) {
		fprintf(stderr, "usage: rgpu migrate [--session ID | --job ID] --from HOST:PORT "
				"--to HOST:PORT[/GPU]\n");
		return 2;
	}
	struct rgpu_conn *c = admin_connect(from);
	if (!c)
		return 2;
	int rc = order(c, from, to, session, job, 0, NULL);
	rgpu_conn_close(c);
	return rc;
}

int rgpu_cmd_drain(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "to", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *to[16];
	int nto = 0, o;
	optind = 1;
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 't':
			if (nto == 16) {
				fprintf(stderr, "rgpu drain: at most 16 --to\n");
				return 2;
			}
			to[nto++] = optarg;
			break;
		case 'h':
			printf("usage: rgpu drain HOST:PORT --to HOST:PORT[/GPU] [--to ...]\n");
			return 0;
		default: return 2;
		}
	}
	if (optind != argc - 1 || !nto) {
		fprintf(stderr, "usage: rgpu drain HOST:PORT --to HOST:PORT[/GPU] [--to ...]\n");
		return 2;
	}
	const char *from = argv[optind];
	struct rgpu_conn *c = admin_connect(from);
	if (!c)
		return 2;
	/* the first order also stops new sessions; what one target could
	 * not take is tried on the next */
	int rc = 1;
	for (int i = 0; i < nto; i++) {
		uint32_t failed = 0;
		rc = order(c, from, to[i], 0, 0, 1, &failed);
		if (rc == 2 && i == 0)
			break;
		if (rc == 0)
			break;
	}
	rgpu_conn_close(c);
	if (rc == 0)
		printf("%s is drained: it takes no new sessions\n", from);
	return rc;
}
