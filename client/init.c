/* cuInit: connect to every server named in RGPU_SERVERS and cache each
 * device's properties. */
#include "client.h"
#include "log.h"
#include "settings.h"
#include "replay.h"
#include "stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rc_ndev;
struct rc_dev rc_devs[RGPU_MAX_DEVICES];
int rc_nconn;
struct rc_conn rc_conns[RGPU_MAX_DEVICES];

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static CUresult init_result = CUDA_ERROR_NOT_INITIALIZED;
static int init_called;

/* The daemon refuses to load a library exporting this (it would serve
 * through itself). */
RC_EXPORT const char rgpu_client_version[] = PACKAGE_VERSION;


int rc_conn_index(const struct rc_conn *c) { return (int)(c - rc_conns); }

/* a session moved to another GPU of its server (replay.h) */
static void gpu_moved(struct rc_conn *c, unsigned gpu)
{
	for (int i = 0; i < RGPU_MAX_DEVICES; i++)
		if (rc_devs[i].conn == c)
			rc_devs[i].gpu = gpu;
}

static struct rc_conn *conn_for(const struct rgpu_server_ent *e)
{
	for (int i = 0; i < rc_nconn; i++)
		if (!strcmp(rc_conns[i].host, e->host) && rc_conns[i].port == e->port)
			return &rc_conns[i];
	struct rc_conn *c = &rc_conns[rc_nconn++];
	memset(c, 0, sizeof(*c));
	memcpy(c->host, e->host, sizeof(c->host));
	c->host[sizeof(c->host) - 1] = '\0';
	c->port = e->port;
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->rx_lock, NULL);
	pthread_cond_init(&c->cv, NULL);
	pthread_mutex_init(&c->ring_lock, NULL);
	return c;
}

static CUresult fetch_device(struct rc_dev *d)
{
	struct wbuf *w = rc_req();
	put_u32(w, d->gpu);
	struct rd r;
	CUresult rc = rc_call(d->conn, RGPU_OP_DEVICE_INFO, w, &r);
	if (rc)
		return rc;
	const char *name = get_str(&r, 255);
	const void *uuid = get_raw(&r, 16);
	d->total_mem = get_u64(&r);
	uint32_t n = get_u32(&r);
	for (uint32_t a = 0; a < n && rd_ok(&r); a++) {
		int32_t v = get_i32(&r);
		if (a < CU_DEVICE_ATTRIBUTE_MAX)
			d->attrs[a] = v;
	}
	if (!rd_ok(&r))
		return CUDA_ERROR_UNKNOWN;
	rc_appmem_attrs(d->attrs); /* vmm.c: handle types rgpu serves */
	snprintf(d->name, sizeof(d->name), "%s", name);
	memcpy(d->uuid.bytes, uuid, 16);
	return CUDA_SUCCESS;
}

/* InfiniBand verbs where a device is up (or demanded): asked of the
 * server first, then both ends upgrade; TCP stays otherwise. */
static CUresult verbs_upgrade(struct rc_conn *c, int required)
{
#ifdef HAVE_VERBS
	char why[256];
	if (!required && !rgpu_verbs_available(why, sizeof(why))) {
		log_debug("%s:%u: no verbs: %s", c->host, c->port, why);
		return CUDA_SUCCESS;
	}
	struct wbuf *w = rc_req();
	put_u32(w, 1);
	struct rd r;
	CUresult rc = rc_call(c, RGPU_OP_TRANSPORT, w, &r);
	if (rc) {
		const char *s = get_str(&r, 255);
		rgpu_log(required ? RGPU_LOG_ERR : RGPU_LOG_INFO, "%s:%u: no InfiniBand verbs: %s%s",
			 c->host, c->port, s ? s : "refused", required ? "" : "; using TCP");
		return required ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS;
	}
	struct rgpu_error e;
	/* verbs keeps using the TCP socket underneath: the handshake's
	 * receive bound must not stay on it (back on TCP, it does again) */
	(void)rgpu_conn_set_recv_timeout(c->c, 0);
	struct rgpu_conn *v = rgpu_verbs_upgrade(c->c, 0, &e);
	if (!v)
		(void)rgpu_conn_set_recv_timeout(c->c, (int)rc_setting(RS_HANDSHAKE_TIMEOUT_MS));
	if (v) {
		c->c = v;
		log_info("%s:%u: on InfiniBand verbs", c->host, c->port);
		return CUDA_SUCCESS;
	}
	int broken = e.code == RGPU_E_BROKEN;
	log_warn("%s:%u: verbs failed (%s)%s", c->host, c->port, e.text,
		 required || broken ? "" : "; using TCP");
	if (broken) {
		c->quiet = 1; /* said above */
		rc_conn_fail(c, e.code, e.text);
	}
	return required || broken ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS;
#else
	if (required) {
		log_err("%s:%u: RGPU_TRANSPORT=verbs, but rgpu was built without libibverbs", c->host, c->port);
		return CUDA_ERROR_NO_DEVICE;
	}
	(void)c;
	return CUDA_SUCCESS;
#endif
}

static void do_init(void)
{
	char err[512];
	/* every setting is checked before anything else happens: a typo
	 * fails here, naming the variable and what it accepts */
	int bad = rc_settings_load(err, sizeof(err));
	rgpu_log_open("rgpu", (int)rc_setting(RS_LOG_LEVEL), 0);
	if (bad) {
		log_err("%s", err);
		init_result = CUDA_ERROR_INVALID_VALUE;
		return;
	}
	rc_stats_init();
	const char *spec = getenv("RGPU_SERVERS");
	if (!spec || !*spec) {
		log_err("RGPU_SERVERS is not set: name the GPUs to use, e.g. RGPU_SERVERS=gpunode1:%d/0",
			RGPU_DEFAULT_PORT);
		init_result = CUDA_ERROR_NO_DEVICE;
		return;
	}
	struct rgpu_server_ent ents[RGPU_MAX_DEVICES];
	int n = rgpu_servers_parse(spec, ents, RGPU_MAX_DEVICES, err, sizeof(err));
	if (n < 0) {
		log_err("%s", err);
		init_result = CUDA_ERROR_INVALID_VALUE;
		return;
	}
	int timeout_ms = (int)rc_setting(RS_CONNECT_TIMEOUT_MS);
	for (int i = 0; i < n; i++) {
		struct rc_dev *d = &rc_devs[i];
		d->conn = conn_for(&ents[i]);
		d->gpu = ents[i].gpu;
		pthread_mutex_init(&d->pctx_lock, NULL);
	}
	/* RGPU_TRANSPORT: auto (default: same-host Unix socket and shared
	 * memory where the server is on this node, InfiniBand verbs where a
	 * device is up, else TCP), tcp, local, verbs */
	const int tp = (int)rc_setting(RS_TRANSPORT);
	for (int i = 0; i < rc_nconn; i++) {
		struct rc_conn *c = &rc_conns[i];
		c->c = NULL;
		if ((tp == RS_TP_AUTO || tp == RS_TP_LOCAL) && rgpu_host_is_local(c->host)) {
			c->c = rgpu_unix_connect(c->port, err, sizeof(err));
			if (c->c)
				c->local = 1;
			else
				log_info("%s:%u: %s; using TCP", c->host, c->port, err);
		}
		if (!c->c && tp == RS_TP_LOCAL) {
			log_err("rgpud at %s:%u: RGPU_TRANSPORT=local but the server is not on this node",
				c->host, c->port);
			init_result = CUDA_ERROR_NO_DEVICE;
			return;
		}
		if (!c->c) {
			c->c = rgpu_tcp_connect(c->host, c->port, timeout_ms, err, sizeof(err));
			if (c->c && rgpu_tcp_keepalive(c->c, (int)rc_setting(RS_KEEPALIVE_S)) < 0)
				log_warn("%s:%u: cannot set TCP keepalive: a lost server may go "
					 "unnoticed", c->host, c->port);
		}
		if (!c->c) {
			log_err("rgpud at %s:%u: %s", c->host, c->port, err);
			init_result = CUDA_ERROR_NO_DEVICE;
			return;
		}
		CUresult rc = rc_hello(c, err, sizeof(err));
		if (rc) {
			log_err("rgpud at %s:%u: %s", c->host, c->port, err);
			init_result = rc == CUDA_ERROR_NOT_PERMITTED ? rc : CUDA_ERROR_NO_DEVICE;
			return;
		}
		rc_replay_gpu_moved = gpu_moved;
		rc_replay_setup(c);
		if (c->local) {
			rc_shm_setup(c);
			rc_shmq_setup(c);
		}
		else if (tp == RS_TP_VERBS || tp == RS_TP_AUTO) {
			rc = verbs_upgrade(c, tp == RS_TP_VERBS);
			if (rc) {
				init_result = rc;
				return;
			}
		}
		log_info("connected to %s at %s:%u (%d GPUs, %s)", c->server_id, c->host, c->port,
			 c->ndev,
			 c->ring && c->shmq ? "same host, shared memory for calls and copies"
			 : c->ring	    ? "same host, shared memory for copies"
			 : c->shmq	    ? "same host, shared memory for calls"
			 : c->local	    ? "same host"
					    : "TCP");
	}
	for (int i = 0; i < n; i++) {
		struct rc_dev *d = &rc_devs[i];
		if ((int)d->gpu >= d->conn->ndev) {
			log_err("RGPU_SERVERS entry %d asks for GPU %u of %s:%u, which has %d GPU(s)",
				i + 1, d->gpu, d->conn->host, d->conn->port, d->conn->ndev);
			init_result = CUDA_ERROR_INVALID_DEVICE;
			return;
		}
		CUresult rc = fetch_device(d);
		if (rc) {
			log_err("GPU %u of %s:%u: %s%s%s", d->gpu, d->conn->host, d->conn->port,
				rc == CUDA_ERROR_NOT_PERMITTED ? "not permitted (no lease for this job?)"
							       : "cannot read its properties",
				d->conn->dead ? ": " : "", d->conn->dead ? d->conn->err.text : "");
			init_result = rc == CUDA_ERROR_NOT_PERMITTED ? rc : CUDA_ERROR_NO_DEVICE;
			return;
		}
	}
	/* cuInit's calls were bounded by the handshake timeout (rc_hello);
	 * from here on a reply may take as long as its work (a kernel may
	 * run for hours): liveness is TCP keepalive's */
	for (int i = 0; i < rc_nconn; i++) {
		(void)rgpu_conn_set_recv_timeout(rc_conns[i].c, 0);
		rc_rx_buffered(&rc_conns[i]);
	}
	rc_ndev = n;
	init_result = CUDA_SUCCESS;
}

RC_EXPORT CUresult cuInit(unsigned int flags)
{
	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_once(&init_once, do_init);
	__atomic_store_n(&init_called, 1, __ATOMIC_RELEASE);
	return init_result;
}

CUresult rc_initialized(void)
{
	if (!__atomic_load_n(&init_called, __ATOMIC_ACQUIRE))
		return CUDA_ERROR_NOT_INITIALIZED;
	return init_result;
}

RC_EXPORT CUresult cuDriverGetVersion(int *v)
{
	if (!v)
		return CUDA_ERROR_INVALID_VALUE;
	*v = CUDA_VERSION;
	return CUDA_SUCCESS;
}

CUresult rc_dev_get(CUdevice d, struct rc_dev **out)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (d < 0 || d >= rc_ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	*out = &rc_devs[d];
	return CUDA_SUCCESS;
}
