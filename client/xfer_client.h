/* The client's side of the transfer layer (lib/xfer.h): bulk copies between
 * the application's host memory and a server's GPU, through one of the
 * providers below, all driven by the same two loops (xfer_client.c).
 *
 *   socket-staged  data in the frames (TCP, or verbs under the same frames)
 *   shm-ring       same host: chunks through the shared staging ring (shm.c)
 *   shm-direct     same host: the GPU copies straight from or to host memory
 *                  the server has mapped (cuMemHostAlloc'd), one request
 *
 * The loops reach the connection only through rc_send_frame,
 * rc_reply_frame and rc_conn_fail (rpc.c).  Other threads' requests may go
 * out between a copy's frames; a copy through the ring holds the ring
 * (c->ring_lock) throughout. */
#ifndef RGPU_XFER_CLIENT_H
#define RGPU_XFER_CLIENT_H

#include "client.h"
#include "xfer.h"

/* What the transfer layer needs from rpc.c (declared in client.h):
 * rc_send_frame (with c->lock held), rc_reply_frame (without it; a sink
 * takes bulk data straight from the connection), rc_conn_fail. */

/* ---- providers ---- */

struct rc_xfer;

struct rc_xfer_provider {
	const char *name;
	uint16_t op_htod, op_dtoh;
	size_t chunk; /* host-to-device pieces, unless RGPU_CHUNK_KB says */
	int exclusive; /* one copy at a time per connection (c->ring_lock) */
	/* The whole copy as one request (shm-direct); NULL: chunked. */
	CUresult (*whole)(struct rc_xfer *x, int to_host);
	/* Host to device: readies chunk c, setting x->extra/x->data. */
	CUresult (*stage)(struct rc_xfer *x, struct xfer_chunk *c);
	/* gives back what stage took, when the chunk was not sent */
	void (*abandon)(struct rc_xfer *x, struct xfer_chunk *c);
	/* Device to host: reads one reply frame into f and places its data
	 * at x->host + x->got; *n: how many bytes that was. */
	CUresult (*take)(struct rc_xfer *x, struct rc_reply *f, size_t *n);
};

/* One copy in progress. */
struct rc_xfer {
	struct rc_ctx *ctx;
	struct rc_conn *c;
	const struct rc_xfer_provider *pv;
	uint64_t stream, dev;
	uint8_t *host;
	uint64_t n, got;
	int async;
	uint64_t id;              /* the request the replies answer */
	uint8_t extra[8];         /* provider fields after the common ones */
	size_t extra_len;
	const void *data;         /* bulk data sent in the frame */
	size_t dlen;
};

extern const struct rc_xfer_provider rc_xfer_socket, rc_xfer_direct;
extern const struct rc_xfer_provider rc_xfer_ring; /* shm.c */

/* Copies n bytes between host and device memory dev through pv: to_host
 * chooses the direction; async host-to-device copies return once the data
 * is handed over. */
CUresult rc_xfer_copy(const struct rc_xfer_provider *pv, struct rc_ctx *ctx, uint64_t stream,
		      CUdeviceptr dev, void *host, size_t n, int to_host, int async);

/* how host-to-device copies are cut (RGPU_CHUNK_KB) */
size_t rc_chunk_bytes(size_t dflt);

#endif
