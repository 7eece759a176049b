/*
 * Copies between GPUs of two servers (cuMemcpyPeer and friends, and
 * cuMemcpyDtoD between their memory).
 *
 * Server to server, as rCUDA made them: this process sends PEER_SEND to
 * the source's rgpud and PEER_RECV to the destination's with one random
 * token, and the destination's rgpud fetches the bytes from the source's
 * (daemon/ops_peer_remote.c); nothing passes through here.  Through this
 * process instead (in pieces, read from one server and written to the
 * other) where the servers may not reach each other at the address this
 * process knows (a loopback address of another host), where a standby
 * keeps requests for a replay (each must carry its bytes), or with
 * RGPU_PEER_PATH=client.
 */
#include "client.h"
#include "replay.h"
#include "settings.h"
#include "stats.h"
#include "log.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>

/* a relayed copy goes in pieces of this size: its buffer stays bounded */
#define RELAY_PIECE (64u << 20)

/* A peer copy between GPUs of different servers, relayed through this
 * process in pieces: each read from the source's server, then written to
 * the destination's.  Ordered as CUDA orders it: a copy on a stream comes
 * after that stream's work (the stream of either context; the other GPU's
 * work is waited for whole), a synchronous one after both legacy
 * streams'; the bytes of an asynchronous write are taken before it
 * returns (pageable memory), so the piece buffer is free again at once. */
static CUresult relay(CUdeviceptr dst, struct rc_ctx *d, CUdeviceptr src, struct rc_ctx *sc,
		      size_t n, CUstream s, struct rc_ctx *stream_ctx)
{
	rc_stats_peer(1, n);
	CUcontext cur = NULL;
	CUresult rc = cuCtxGetCurrent(&cur);
	if (rc)
		return rc;
	int on_src = stream_ctx == sc, on_dst = stream_ctx == d;
	/* a stream of neither context: its work first, then as a
	 * synchronous copy */
	if (stream_ctx && !on_src && !on_dst && (rc = cuStreamSynchronize(s)))
		return rc;
	size_t piece = n < RELAY_PIECE ? n : RELAY_PIECE;
	uint8_t *buf = malloc(piece);
	if (!buf)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t off = 0; off < n && !rc;) {
		size_t k = n - off < piece ? n - off : piece;
		if (!(rc = cuCtxSetCurrent((CUcontext)sc))) {
			if (on_src) {
				if (!(rc = cuMemcpyDtoHAsync_v2(buf, src + off, k, s)))
					rc = cuStreamSynchronize(s);
			} else {
				/* the source GPU's work, all of it, before the
				 * first read (a stream of the destination
				 * names no work of the source's) */
				if (!off && on_dst)
					rc = cuCtxSynchronize();
				if (!rc)
					rc = cuMemcpyDtoH_v2(buf, src + off, k);
			}
		}
		if (!rc && !(rc = cuCtxSetCurrent((CUcontext)d)))
			rc = on_dst ? cuMemcpyHtoDAsync_v2(dst + off, buf, k, s)
				    : cuMemcpyHtoD_v2(dst + off, buf, k);
		off += k;
	}
	free(buf);
	CUresult back = cuCtxSetCurrent(cur);
	return rc ? rc : back;
}


/* Whether every address host names is a loopback one (another host's
 * rgpud cannot reach it there). */
static int host_is_loopback_uncached(const char *host)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res = NULL;
	if (getaddrinfo(host, NULL, &hints, &res) || !res)
		return 0;
	int lo = 1;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		if (ai->ai_family == AF_INET) {
			uint32_t a = ntohl(((struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr);
			lo &= (a >> 24) == 127;
		} else if (ai->ai_family == AF_INET6) {
			const struct in6_addr *a = &((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr;
			lo &= IN6_IS_ADDR_LOOPBACK(a) ||
			      (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
		} else {
			lo = 0;
		}
	}
	freeaddrinfo(res);
	return lo;
}

static int host_is_loopback(struct rc_conn *c)
{
	int v = __atomic_load_n(&c->loopback, __ATOMIC_RELAXED);
	if (!v) {
		v = host_is_loopback_uncached(c->host) ? 1 : 2;
		__atomic_store_n(&c->loopback, v, __ATOMIC_RELAXED);
	}
	return v == 1;
}

/* Why a copy between these two servers goes through this process, or
 * NULL: it goes server to server. */
static const char *relay_reason(struct rc_conn *src, struct rc_conn *dst)
{
	if (rc_setting(RS_PEER_PATH) == RS_PEER_CLIENT)
		return "RGPU_PEER_PATH=client";
	if (rc_replay_keeps(src) || rc_replay_keeps(dst))
		return "a standby replays requests on their own (RGPU_STANDBY)";
	/* (a name of this host, or an address of another: both reach it) */
	if (host_is_loopback(src) && !host_is_loopback(dst))
		return "the source's address is a loopback one, which the destination's host "
		       "cannot reach";
	return NULL;
}

/* one pair at a time: two threads' pairs, each half queued behind the
 * other's on one server, would wait for each other */
static pthread_mutex_t pair_lock = PTHREAD_MUTEX_INITIALIZER;

static CUresult direct(CUdeviceptr dst, struct rc_ctx *d, CUdeviceptr src, struct rc_ctx *sc,
		       size_t n, CUstream s, struct rc_ctx *stream_ctx)
{
	int on_src = stream_ctx && stream_ctx == sc, on_dst = stream_ctx && stream_ctx == d;
	uint64_t sh = 0;
	CUresult rc;
	if (stream_ctx) {
		struct rc_ctx *c;
		if ((rc = rc_stream_resolve(s, &c, &sh)))
			return rc;
		/* a stream of neither context: its work first, then as a
		 * synchronous copy */
		if (!on_src && !on_dst && (rc = cuStreamSynchronize(s)))
			return rc;
	}
	uint8_t token[16];
	if (getrandom(token, sizeof(token), 0) != (ssize_t)sizeof(token))
		return CUDA_ERROR_OPERATING_SYSTEM;
	rc_coh_device_use(dst);
	rc_coh_device_use(src);
	rc_stats_peer(0, n);
	struct rc_conn *from = sc->dev->conn, *to = d->dev->conn;
	pthread_mutex_lock(&pair_lock);
	struct wbuf *w = rc_req();
	put_u64(w, sc->h);
	put_u64(w, on_src ? sh : 0);
	put_u64(w, src);
	put_u64(w, n);
	/* the side answering for the copy: the one whose stream it is, or
	 * the destination, which this thread waits for */
	put_u32(w, (on_dst ? RGPU_PEER_WHOLE : 0) | (on_src ? RGPU_PEER_ANSWERS : 0));
	put_bytes(w, token, sizeof(token));
	rc = rc_post(from, RGPU_OP_PEER_SEND, w);
	if (!rc) {
		/* the source meets the destination as soon as it gets there */
		rc_flush(from);
		w = rc_req();
		put_u64(w, d->h);
		put_u64(w, on_dst ? sh : 0);
		put_u64(w, dst);
		put_u64(w, n);
		/* (written before the source is done, unless on its stream) */
		put_u32(w, (on_dst ? 0 : RGPU_PEER_SYNC) | (on_src ? 0 : RGPU_PEER_ANSWERS));
		put_str(w, from->host);
		put_u32(w, from->port);
		put_bytes(w, token, sizeof(token));
		struct rd r;
		/* on a stream, later work there (either server) comes after
		 * it: each session serves nothing else meanwhile */
		rc = on_src || on_dst ? rc_post(to, RGPU_OP_PEER_RECV, w)
				      : rc_call(to, RGPU_OP_PEER_RECV, w, &r);
	}
	pthread_mutex_unlock(&pair_lock);
	return rc;
}

CUresult rc_peer_remote(CUdeviceptr dst, struct rc_ctx *d, CUdeviceptr src, struct rc_ctx *sc,
			size_t n, CUstream s, struct rc_ctx *stream_ctx)
{
	if (s && rc_stream_capture_id(s)) {
		/* (bytes between two servers are no node of a graph) */
		rc_unsupported("capturing a copy between GPUs of two servers");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	const char *why = relay_reason(sc->dev->conn, d->dev->conn);
	if (!why)
		return direct(dst, d, src, sc, n, s, stream_ctx);
	static int warned;
	if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
		log_info("copies between GPUs of %s:%u and %s:%u go through this process: %s",
			 sc->dev->conn->host, sc->dev->conn->port, d->dev->conn->host,
			 d->dev->conn->port, why);
	return relay(dst, d, src, sc, n, s, stream_ctx);
}
