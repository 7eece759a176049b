/*
 * Peer copies between GPUs of two rgpuds, server to server, as rCUDA made
 * them (proto.h: PEER_SEND, PEER_RECV, PEER_DATA).
 *
 * The client sends PEER_SEND to the source's session and PEER_RECV to the
 * destination's, with one random token.  The source's worker parks the
 * token with its parent, as a restored session waits for its client; the
 * destination's worker connects to the source's rgpud as the job's user
 * and says HELLO with the token; that parent checks that both belong to one
 * job and uid and hands the socket to the source's session.  The bytes go
 * in RGPU_CHUNK_SIZE frames through each side's pinned staging (stage.h):
 * the source reads chunk k+1 from its GPU while chunk k is on the wire, the
 * destination queues each chunk's copy to its GPU as it lands.
 *
 * Each session serves nothing else meanwhile: the copy comes after what
 * its client sent it before, and what comes after waits for it.  Both
 * sides meet even when their own checks fail, so a bad copy fails at once
 * on both; the side that answers for it (RGPU_PEER_ANSWERS) returns
 * either side's failure, the other only logs it (the client would see it
 * twice, the second time as a stray asynchronous error).
 */
#include "gate.h"
#include "log.h"
#include "outbound.h"
#include "rgpud.h"
#include "session.h"
#include "stage.h"
#include "migrate/migrate.h"
#include "clock.h"
#include "frame.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define D (&rgpud_server.drv)

/* how long either side waits for the other to come (its session may still
 * be serving what its client sent before the copy) */
#define PEER_MEET_S 60
/* how long a side waits for bytes or the answer once they met (the source
 * waits for its stream's work before the first chunk) */
#define PEER_IO_S 600
/* the status of a copy whose other side failed or went away */
#define PEER_LOST CUDA_ERROR_OPERATING_SYSTEM

static int send_status(struct rgpu_conn *c, int32_t rc, int more, const void *data, size_t n)
{
	uint8_t b[4] = { (uint8_t)rc, (uint8_t)(rc >> 8), (uint8_t)(rc >> 16),
			 (uint8_t)((uint32_t)rc >> 24) };
	return rgpu_frame_send(c, RGPU_OP_PEER_DATA, more ? RGPU_F_MORE : 0, 0, b, 4, data, n);
}

/* One PEER_DATA header and its status: 0 and *st, *len (the bytes that
 * follow), *more; or -1 (not a peer frame, or more than max bytes). */
static int recv_status(struct rgpu_conn *c, int32_t *st, size_t *len, int *more, size_t max)
{
	struct rgpu_hdr h;
	uint8_t b[4];
	if (rgpu_frame_recv_hdr(c, &h) != RGPU_HDR_OK || h.op != RGPU_OP_PEER_DATA ||
	    (h.flags & RGPU_F_REPLY) || h.len < 4 || h.len - 4 > max || rgpu_recv(c, b, 4) < 0)
		return -1;
	struct rd r;
	rd_init(&r, b, sizeof(b));
	*st = get_i32(&r);
	*len = h.len - 4;
	*more = (h.flags & RGPU_F_MORE) != 0;
	return 0;
}

/* this side's reply: the copy's status, or 0 where the other side answers */
static int answer(uint32_t flags, int rc)
{
	return (flags & RGPU_PEER_ANSWERS) ? rc : CUDA_SUCCESS;
}

static int emit_chunk(void *arg, struct xfer_pool *pool, int i, size_t n, int last)
{
	return send_status(arg, 0, !last, pool->b[i].p, n);
}

int op_peer_send(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r), sid = get_u64(r), src = get_u64(r), size = get_u64(r);
	uint32_t flags = get_u32(r);
	size_t tl = 0;
	const uint8_t *token = get_bytes(r, &tl);
	if (!rd_done(r) || tl != OUTBOUND_TOKEN_LEN || (flags & ~(RGPU_PEER_ANSWERS | RGPU_PEER_WHOLE)))
		return OP_DROP;
	if (rgpud_server.no_outbound)
		return CUDA_ERROR_NOT_SUPPORTED;
	void *st;
	/* (before the wait: nothing else may use the gate during it) */
	int rc = stage_check(s, ctx, sid, src, size, &st);
	if (gate_park_begin(token, PEER_MEET_S) < 0)
		return CUDA_ERROR_OPERATING_SYSTEM;
	int fd = gate_park_end();
	if (fd < 0) {
		log_warn("%s: a peer copy's destination did not come within %d s", s->name,
			 PEER_MEET_S);
		return answer(flags, rc ? rc : PEER_LOST);
	}
	struct rgpu_conn *c = rgpu_tcp_from_fd(fd);
	if (!c) {
		close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	rgpu_conn_set_recv_timeout(c, PEER_IO_S * 1000);
	uint64_t t0 = rgpu_now_ns();
	/* a stream of the destination's: the whole GPU's work first */
	if (!rc && (flags & RGPU_PEER_WHOLE))
		rc = D->cuCtxSynchronize();
	int queued = 0, lost = 0;
	if (!rc && size) {
		rc = stage_out(stage_pool(s), ctx, st, src, size, emit_chunk, c, &queued, NULL);
		if (rc == XFER_LOST) {
			lost = 1;
			rc = 0;
		}
		if (rc && queued)
			D->cuStreamSynchronize(st);
	}
	if (rc || (!size && !lost))
		lost = send_status(c, rc, 0, NULL, 0) < 0;
	/* the destination's answer (also after a failed send: it may have
	 * refused the copy and said why) */
	int32_t theirs = PEER_LOST;
	size_t len;
	int more;
	if (recv_status(c, &theirs, &len, &more, 0) < 0)
		theirs = PEER_LOST;
	rgpu_conn_close(c);
	if (!rc)
		rc = theirs;
	if (rc)
		log_info("%s: peer copy of %llu bytes from %#llx failed: %d%s", s->name,
			 (unsigned long long)size, (unsigned long long)src, rc,
			 lost ? " (the destination went away)" : "");
	else
		log_debug("%s: peer copy of %llu bytes from %#llx sent in %.2f ms", s->name,
			  (unsigned long long)size, (unsigned long long)src,
			  (double)(rgpu_now_ns() - t0) / 1e6);
	return answer(flags, rc);
}

/* Connects to the source's rgpud and meets its session: the connection,
 * or NULL (why logged). */
static struct rgpu_conn *meet_source(struct session *s, const char *host, unsigned port,
				     const uint8_t *token)
{
	uint64_t until = rgpu_now_ms() + PEER_MEET_S * 1000ull, instance;
	char why[700];
	for (;;) {
		int refused = 0;
		struct rgpu_conn *c = outbound_hello(s, host, port, "rgpud worker: a peer copy",
						     token, &instance, &refused, why, sizeof(why));
		if (c)
			return c;
		/* refused: its session has not reached the copy yet (each
		 * HELLO waits a few seconds for it there) */
		if (!refused || rgpu_now_ms() >= until)
			break;
		usleep(10000);
	}
	log_warn("%s: a peer copy's source: %s", s->name, why);
	return NULL;
}

int op_peer_recv(struct session *s, const struct rgpu_hdr *h, struct rd *r, struct wbuf *out)
{
	uint64_t ctx = get_u64(r), sid = get_u64(r), dst = get_u64(r), size = get_u64(r);
	uint32_t flags = get_u32(r);
	const char *host = get_str(r, 255);
	uint32_t port = get_u32(r);
	size_t tl = 0;
	const uint8_t *token = get_bytes(r, &tl);
	if (!rd_done(r) || tl != OUTBOUND_TOKEN_LEN || (flags & ~(RGPU_PEER_ANSWERS | RGPU_PEER_SYNC)) ||
	    !host || !host[0] || !port || port > 65535)
		return OP_DROP;
	int sync = (flags & RGPU_PEER_SYNC) != 0;
	if (rgpud_server.no_outbound)
		return CUDA_ERROR_NOT_SUPPORTED;
	void *st;
	int rc = stage_check(s, ctx, sid, dst, size, &st);
	struct rgpu_conn *c = meet_source(s, host, port, token);
	if (!c)
		return answer(flags, rc ? rc : PEER_LOST);
	rgpu_conn_set_recv_timeout(c, PEER_IO_S * 1000);
	struct xfer_pool *pool = stage_pool(s);
	uint64_t off = 0;
	int more = !rc, lost = 0;
	while (more) {
		int32_t theirs;
		size_t k;
		if (recv_status(c, &theirs, &k, &more, size - off < RGPU_CHUNK_SIZE ? size - off
										     : RGPU_CHUNK_SIZE) < 0) {
			lost = 1;
			rc = PEER_LOST;
			break;
		}
		if (theirs) {
			rc = theirs;
			break;
		}
		if (!k) {
			if (more) { /* (only the last frame may be empty) */
				lost = 1;
				rc = PEER_LOST;
			}
			continue;
		}
		int i = xfer_pool_get(pool, ctx, &rc);
		if (i < 0)
			break;
		if (rgpu_recv(c, pool->b[i].p, k) < 0) {
			xfer_pool_drop(pool, i);
			lost = 1;
			rc = PEER_LOST;
			break;
		}
		/* a synchronous copy: written before the answer */
		if ((rc = stage_htod(pool, i, dst + off, k, st, 0, sync && !more)))
			break;
		off += k;
	}
	if (!rc && off != size)
		rc = PEER_LOST; /* the source said it was done too soon */
	if (!lost)
		(void)send_status(c, rc, 0, NULL, 0);
	rgpu_conn_close(c);
	if (rc)
		log_info("%s: peer copy of %llu bytes to %#llx from %s:%u failed: %d", s->name,
			 (unsigned long long)size, (unsigned long long)dst, host, port, rc);
	return answer(flags, rc);
}
