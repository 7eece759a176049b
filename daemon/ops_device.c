/* Session opening and device properties. */
#include "config.h"
#include "log.h"
#include "gate.h"
#include "metrics.h"
#include "rgpud.h"
#include "session.h"
#include "migrate/migrate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int op_hello(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	char msg[256];
	if (h->version != RGPU_PROTO_VERSION) {
		snprintf(msg, sizeof(msg),
			 "protocol version mismatch: client speaks rgpu protocol %u, "
			 "server %s speaks %u", h->version, rgpud_server.hostname, RGPU_PROTO_VERSION);
		log_warn("%s: %s", s->name, msg);
		metrics_refused("version");
		put_str(out, msg);
		session_send_reply(s, h, 0, RGPU_ERR_VERSION, out->data, out->len);
		s->ended = 1;
		return OP_REPLIED;
	}
	uint32_t ver = get_u32(r);
	const char *client = get_str(r, 255);
	size_t clen;
	const void *cred = get_bytes(r, &clen);
	size_t tlen = 0;
	const void *token = r->left ? get_bytes(r, &tlen) : NULL; /* a moved session's */
	if (!rd_done(r) || ver != RGPU_PROTO_VERSION || (token && tlen != MIGRATE_TOKEN_LEN))
		return OP_DROP;
	char why[256] = "";
	if (rgpud_access_hello(cred, clen, s->conn->peer, &s->who, why, sizeof(why)) < 0) {
		log_warn("%s (%s): refused: %s", s->name, client, why);
		metrics_refused("auth");
		put_str(out, why);
		session_send_reply(s, h, 0, RGPU_ERR_AUTH, out->data, out->len);
		s->ended = 1;
		return OP_REPLIED;
	}
	/* the kernel vouches for a same-host peer: its root may move
	 * sessions without munge (migrate/parent.c) */
	int ppid;
	unsigned puid;
	if (rgpu_unix_peer(s->conn, &ppid, &puid) == 0 && puid == 0)
		s->who.local_root = 1;
	if (token && migrate_parent_attach_check(&s->who, token, why, sizeof(why)) < 0) {
		log_warn("%s (%s): refused: %s", s->name, client, why);
		put_str(out, why);
		session_send_reply(s, h, 0, RGPU_ERR_AUTH, out->data, out->len);
		s->ended = 1;
		return OP_REPLIED;
	}
	if (!token && rgpud_server.draining && !s->who.admin) {
		snprintf(why, sizeof(why), "rgpud on %s is draining: it takes no new sessions",
			 rgpud_server.hostname);
		log_info("%s (%s): refused: %s", s->name, client, why);
		put_str(out, why);
		session_send_reply(s, h, 0, RGPU_ERR_AUTH, out->data, out->len);
		s->ended = 1;
		return OP_REPLIED;
	}
	if (token) {
		s->attach = 1;
		memcpy(s->attach_token, token, MIGRATE_TOKEN_LEN);
	}
	if (s->who.authenticated)
		snprintf(s->name, sizeof(s->name), "client %s uid %u job %llu", s->conn->peer,
			 s->who.uid, (unsigned long long)s->who.job_id);
	log_info("%s: session opened by %s", s->name, client);
	s->hello_done = 1;
	snprintf(msg, sizeof(msg), "rgpud %s on %s", PACKAGE_VERSION, rgpud_server.hostname);
	put_str(out, msg);
	put_u32(out, (uint32_t)rgpud_server.ndev);
	put_u32(out, (uint32_t)rgpud_server.checkpoint_s);
	put_u64(out, rgpud_server.instance);
	return CUDA_SUCCESS;
}

/* Admits the session to a GPU once (lease check); returns a CUresult. */
static int admit(struct session *s, unsigned dev)
{
	if (dev >= (unsigned)rgpud_server.ndev || dev >= RGPUD_MAX_GPUS)
		return CUDA_ERROR_INVALID_DEVICE;
	if (s->dev_admitted & (1ull << dev))
		return CUDA_SUCCESS;
	char why[256] = "";
	uint64_t limit = 0;
	if (gate_device(dev, &limit, why, sizeof(why)) < 0) {
		log_warn("%s: GPU %u refused: %s", s->name, dev, why);
		return CUDA_ERROR_NOT_PERMITTED;
	}
	s->dev_admitted |= 1ull << dev;
	return CUDA_SUCCESS;
}

int session_admit(struct session *s, unsigned dev) { return admit(s, dev); }

int op_device_info(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	struct rgpud_driver *d = &rgpud_server.drv;
	uint32_t dev = get_u32(r);
	if (!rd_done(r))
		return OP_DROP;
	int rc = admit(s, dev);
	if (rc)
		return rc;
	CUdevice cd;
	char name[256];
	CUuuid uuid;
	size_t total;
	if ((rc = d->cuDeviceGet(&cd, (int)dev)) ||
	    (rc = d->cuDeviceGetName(name, sizeof(name), cd)) ||
	    (rc = d->cuDeviceGetUuid_v2(&uuid, cd)) ||
	    (rc = d->cuDeviceTotalMem_v2(&total, cd)))
		return rc;
	uint64_t limit, used;
	gate_usage(dev, &limit, &used);
	if (limit && limit < total)
		total = limit; /* a slice looks like a smaller GPU */
	name[sizeof(name) - 1] = '\0';
	put_str(out, name);
	put_raw(out, uuid.bytes, 16);
	put_u64(out, total);
	put_u32(out, CU_DEVICE_ATTRIBUTE_MAX);
	for (int a = 0; a < CU_DEVICE_ATTRIBUTE_MAX; a++) {
		int v = 0;
		if (a == 0 || d->cuDeviceGetAttribute(&v, (CUdevice_attribute)a, cd) != CUDA_SUCCESS)
			v = 0;
		put_i32(out, v);
	}
	return CUDA_SUCCESS;
}
