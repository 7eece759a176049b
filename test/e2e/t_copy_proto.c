/*
 * The copy requests' failure paths over raw frames on the same-host
 * (Unix) socket, where the client library's own checks cannot stand in
 * front of rgpud (issue 15 items 3 and 9):
 *   - a device-to-host copy (socket and shared-memory pipelines) that fails
 *     its checks before any work is queued answers with the error in one
 *     final frame, and the session goes on (the handlers used to hand the
 *     driver an uninitialised stream on that path: the real driver
 *     dereferences it, and a strict emulated device refuses it);
 *   - a good shared-memory device-to-host copy still delivers its data;
 *   - sharing client memory beyond the per-session cap (RGPUD_MAX_PINNED,
 *     also given to this program) is refused with CUDA_ERROR_OUT_OF_MEMORY,
 *     and memory below it is still shared.
 *
 * usage: t_copy_proto PORT  (with RGPUD_MAX_PINNED as rgpud has it)
 */
#include "frame.h"
#include "proto.h"
#include "size.h"
#include "transport.h"
#include "wire.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define CU_INVALID_VALUE 1
#define CU_OUT_OF_MEMORY 2
#define CU_INVALID_HANDLE 400
#define SLOT (4u << 20)
#define NSLOTS 2
#define MIB (1u << 20)

static struct rgpu_conn *conn;
static uint64_t next_id = 1;
static int failures;

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("t_copy_proto: %s: ", ok ? "ok" : "FAIL");
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
	fflush(stdout);
	if (!ok)
		failures++;
}

static void die(const char *what)
{
	fprintf(stderr, "t_copy_proto: FAIL: %s\n", what);
	exit(1);
}

/* One reply frame of request id: its status, flags and payload. */
struct reply {
	int32_t st;
	uint32_t flags;
	uint8_t data[64];
	size_t len;
};

static void get_reply(uint64_t id, uint16_t op, struct reply *r)
{
	struct rgpu_hdr h;
	if (rgpu_frame_recv_hdr(conn, &h) != RGPU_HDR_OK)
		die("the connection was dropped");
	if (!(h.flags & RGPU_F_REPLY) || h.id != id || h.op != op || h.len < 4 ||
	    h.len - 4 > sizeof(r->data))
		die("an unexpected reply frame");
	uint8_t st[4];
	if (rgpu_recv(conn, st, 4) < 0 || (h.len > 4 && rgpu_recv(conn, r->data, h.len - 4) < 0))
		die("a short reply");
	r->st = (int32_t)((uint32_t)st[0] | (uint32_t)st[1] << 8 | (uint32_t)st[2] << 16 |
			  (uint32_t)st[3] << 24);
	r->flags = h.flags;
	r->len = h.len - 4;
}

static uint64_t send_req(uint16_t op, struct wbuf *w)
{
	uint64_t id = next_id++;
	if (w->oom || rgpu_frame_send(conn, op, 0, id, w->data, w->len, NULL, 0) < 0)
		die("cannot send a request");
	wbuf_reset(w);
	return id;
}

static int32_t call(uint16_t op, struct wbuf *w, struct reply *r)
{
	uint64_t id = send_req(op, w);
	get_reply(id, op, r);
	return r->st;
}

static uint64_t u64_of(const struct reply *r)
{
	struct rd d;
	rd_init(&d, r->data, r->len);
	uint64_t v = get_u64(&d);
	return rd_ok(&d) ? v : 0;
}

/* memory of this process the server maps through /proc/PID/fd/FD */
static int memfd_of(size_t size, void **map)
{
	int fd = memfd_create("t_copy_proto", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)size) < 0)
		die("memfd");
	*map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (*map == MAP_FAILED)
		die("mmap");
	return fd;
}

static int32_t attach(struct wbuf *w, uint32_t kind, int fd, void *base, uint64_t size,
		      uint32_t nslots)
{
	struct reply r;
	put_u32(w, kind);
	put_u32(w, (uint32_t)fd);
	put_u64(w, (uint64_t)(uintptr_t)base);
	put_u64(w, size);
	put_u32(w, nslots);
	return call(RGPU_OP_SHM_ATTACH, w, &r);
}

/* A device-to-host copy whose checks fail: one final frame with want. */
static void dtoh_refused(struct wbuf *w, uint16_t op, uint64_t ctx, uint64_t stream,
			 uint64_t src, uint64_t n, int32_t want, const char *what)
{
	struct reply r;
	put_u64(w, ctx);
	put_u64(w, stream);
	put_u64(w, src);
	put_u64(w, n);
	call(op, w, &r);
	check(r.st == want && !(r.flags & RGPU_F_MORE) && r.len == 0,
	      "%s: %s answers status %d in one final frame (got %d, flags %#x, %zu bytes)",
	      rgpu_op_name(op), what, want, r.st, r.flags, r.len);
}

int main(int argc, char **argv)
{
	if (argc != 2)
		die("usage: t_copy_proto PORT");
	setvbuf(stdout, NULL, _IOLBF, 0);
	uint64_t cap = 0;
	char err[256];
	const char *e = getenv("RGPUD_MAX_PINNED");
	if (!e || rgpu_parse_size(e, &cap, err, sizeof(err)) < 0 || cap < 64 * MIB) {
		printf("t_copy_proto: SKIP: needs RGPUD_MAX_PINNED (at least 64M) as rgpud has it\n");
		return 77;
	}
	if (!(conn = rgpu_unix_connect((unsigned)atoi(argv[1]), err, sizeof(err)))) {
		printf("t_copy_proto: SKIP: %s\n", err);
		return 77;
	}
	struct wbuf w;
	struct reply r;
	wbuf_init(&w);
	put_u32(&w, RGPU_PROTO_VERSION);
	put_str(&w, "t_copy_proto");
	put_bytes(&w, NULL, 0);
	if (call(RGPU_OP_HELLO, &w, &r))
		die("HELLO refused (is rgpud running with --open?)");
	put_u32(&w, 0);
	put_u32(&w, 0);
	if (call(RGPU_OP_CTX_CREATE, &w, &r))
		die("CTX_CREATE failed");
	uint64_t ctx = u64_of(&r);
	put_u64(&w, ctx);
	put_u64(&w, 8 * MIB);
	if (call(RGPU_OP_MEM_ALLOC, &w, &r))
		die("MEM_ALLOC failed");
	uint64_t dev = u64_of(&r);
	const uint64_t bogus = 0x5eed0000dead0001ull;

	/* the socket pipeline */
	dtoh_refused(&w, RGPU_OP_MEMCPY_DTOH, ctx, bogus, dev, MIB, CU_INVALID_HANDLE,
		     "an unknown stream");
	dtoh_refused(&w, RGPU_OP_MEMCPY_DTOH, ctx, 0, dev + 8 * MIB, MIB, CU_INVALID_VALUE,
		     "memory not the session's");
	/* the shared-memory pipeline: first without a ring, then with one */
	dtoh_refused(&w, RGPU_OP_SHM_DTOH, ctx, 0, dev, MIB, CU_INVALID_VALUE, "no staging ring");
	void *ring;
	size_t ring_size = 4096 + (size_t)NSLOTS * SLOT;
	int fd = memfd_of(ring_size, &ring);
	check(attach(&w, 1, fd, ring, ring_size, NSLOTS) == 0, "a staging ring is shared");
	close(fd);
	dtoh_refused(&w, RGPU_OP_SHM_DTOH, ctx, bogus, dev, MIB, CU_INVALID_HANDLE,
		     "an unknown stream");
	dtoh_refused(&w, RGPU_OP_SHM_DTOH, ctx, 0, dev + 4 * MIB, 8 * MIB, CU_INVALID_VALUE,
		     "memory not the session's");

	/* a good copy through the ring: 8 MiB of 0x3c in 4 MiB slots */
	put_u64(&w, ctx);
	put_u64(&w, 0);
	put_u64(&w, dev);
	put_u32(&w, 0x3c);
	put_u32(&w, 1);
	put_u64(&w, 8 * MIB);
	put_u32(&w, 1);
	check(call(RGPU_OP_MEMSET, &w, &r) == 0, "memset");
	put_u64(&w, ctx);
	put_u64(&w, 0);
	put_u64(&w, dev);
	put_u64(&w, 8 * MIB);
	uint64_t id = send_req(RGPU_OP_SHM_DTOH, &w);
	size_t got = 0;
	int bad = 0;
	uint32_t *flags = ring;
	for (int more = 1; more;) {
		get_reply(id, RGPU_OP_SHM_DTOH, &r);
		more = (r.flags & RGPU_F_MORE) != 0;
		if (r.st || r.len != 8) {
			bad = 1;
			break;
		}
		struct rd d;
		rd_init(&d, r.data, r.len);
		uint32_t slot = get_u32(&d), len = get_u32(&d);
		if (slot >= NSLOTS || len > SLOT) {
			bad = 1;
			break;
		}
		const uint8_t *p = (const uint8_t *)ring + 4096 + (size_t)slot * SLOT;
		for (uint32_t i = 0; i < len; i++)
			bad |= p[i] != 0x3c;
		got += len;
		__atomic_store_n(&flags[slot], 0, __ATOMIC_RELEASE); /* hand it back */
	}
	check(!bad && got == 8 * MIB, "a good copy through the ring delivers its 8 MiB intact");

	/* the per-session cap on shared client memory */
	void *big;
	fd = memfd_of(cap, &big); /* sparse: costs nothing here */
	check(attach(&w, 2, fd, big, cap, 0) == CU_OUT_OF_MEMORY,
	      "sharing %llu bytes on top of the ring is refused (cap %s)",
	      (unsigned long long)cap, e);
	close(fd);
	munmap(big, cap);
	fd = memfd_of((size_t)2 << 40 >> 0, &big);
	check(attach(&w, 2, fd, big, (uint64_t)2 << 40, 0) != 0, "sharing 2 TiB is refused");
	close(fd);
	munmap(big, (size_t)2 << 40);
	void *small;
	fd = memfd_of(MIB, &small);
	check(attach(&w, 2, fd, small, MIB, 0) == 0, "1 MiB under the cap is still shared");
	close(fd);
	put_u64(&w, (uint64_t)(uintptr_t)small);
	check(call(RGPU_OP_SHM_DETACH, &w, &r) == 0, "and unshared");

	put_u64(&w, ctx);
	check(call(RGPU_OP_CTX_SYNC, &w, &r) == 0, "the session still answers");
	wbuf_free(&w);
	rgpu_conn_close(conn);
	return failures ? 1 : 0;
}
