/*
 * Talking to rgpud's lease opcodes (LEASE_GRANT/RELEASE/LIST, proto.h) as
 * root or SlurmUser: a session opened with a munge credential, one request
 * at a time.  Used by the SPANK plugin (grant, release, poll) and by the
 * `rgpu` tool (list).
 */
#ifndef RGPU_GRES_LEASE_RPC_H
#define RGPU_GRES_LEASE_RPC_H

#include <stddef.h>
#include <stdint.h>

struct rg_conn;

/* Connects and says HELLO with a munge credential naming job_id (0 for the
 * plugin itself).  NULL with err. */
struct rg_conn *rg_connect(const char *host, unsigned port, uint64_t job_id, int timeout_ms,
			   char *err, size_t errlen);
/* The same for a user's own tool (`rgpu status`): a credential when munge
 * can make one, none when munged is not reachable at its default socket (as
 * the client library does).  note says why no credential was sent ("" when
 * one was). */
struct rg_conn *rg_connect_user(const char *host, unsigned port, uint64_t job_id,
				int timeout_ms, char *note, size_t notelen, char *err,
				size_t errlen);
void rg_close(struct rg_conn *c);

/* Each returns the reply's status (0 = done; a CUresult or RGPU_ERR_* with
 * the server's sentence in why), or -1 when the connection failed. */
int rg_lease_grant(struct rg_conn *c, uint64_t job_id, uint32_t uid, uint32_t gpu,
		   uint64_t mem_limit, uint64_t expires, char *why, size_t whylen);
/* The same with a compute share (percent 1..100, 0: none; --rgpu-share). */
int rg_lease_grant_share(struct rg_conn *c, uint64_t job_id, uint32_t uid, uint32_t gpu,
			 uint64_t mem_limit, uint64_t expires, uint32_t share, char *why,
			 size_t whylen);
int rg_lease_release(struct rg_conn *c, uint64_t job_id, uint32_t *released, char *why,
		     size_t whylen);
/* Any request: 0 with the reply's status and fields in *reply (valid until
 * the next call on c), or -1 when the connection failed. */
struct wbuf;
struct rd;
int rg_call(struct rg_conn *c, unsigned op, struct wbuf *req, struct rd *reply, int32_t *status);

struct rg_list_gpu {
	uint32_t gpu;
	char name[64];
	uint64_t total, reserved;
	uint32_t exclusive;
};
struct rg_list_lease {
	uint64_t job_id;
	uint32_t uid, gpu;
	uint64_t mem_limit, used, expires;
};
struct rg_list {
	struct rg_list_gpu *gpus;
	size_t ngpu;
	struct rg_list_lease *leases;
	size_t nlease;
};
int rg_lease_list(struct rg_conn *c, struct rg_list *out, char *why, size_t whylen);
void rg_list_free(struct rg_list *l);

#endif
