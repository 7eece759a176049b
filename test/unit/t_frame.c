/* lib/frame.c: header encoding, byte layout, whole-frame send, and the
 * checks rgpu_frame_recv_hdr makes, over an in-memory transport and over a
 * socketpair. */
#include "tap.h"
#include "frame.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- an in-memory transport: sendv appends, recv consumes ---- */
struct mem_conn {
	struct rgpu_conn base;
	uint8_t *buf;
	size_t len, cap, pos;
	int sends;
};

static int mem_sendv(struct rgpu_conn *c, const struct iovec *iov, int n)
{
	struct mem_conn *m = (struct mem_conn *)c;
	m->sends++;
	for (int i = 0; i < n; i++) {
		if (m->len + iov[i].iov_len > m->cap) {
			size_t cap = (m->len + iov[i].iov_len) * 2;
			uint8_t *b = realloc(m->buf, cap);
			if (!b)
				return -1;
			m->buf = b;
			m->cap = cap;
		}
		memcpy(m->buf + m->len, iov[i].iov_base, iov[i].iov_len);
		m->len += iov[i].iov_len;
	}
	return 0;
}

static int mem_recv(struct rgpu_conn *c, void *out, size_t n)
{
	struct mem_conn *m = (struct mem_conn *)c;
	if (m->len - m->pos < n) {
		m->pos = m->len;
		errno = 0;
		return -1;
	}
	memcpy(out, m->buf + m->pos, n);
	m->pos += n;
	return 0;
}

static void mem_close(struct rgpu_conn *c)
{
	struct mem_conn *m = (struct mem_conn *)c;
	free(m->buf);
	m->buf = NULL;
}

static const struct rgpu_transport mem_tp = { .name = "mem", .sendv = mem_sendv, .recv = mem_recv, .close = mem_close };

static void mem_init(struct mem_conn *m)
{
	memset(m, 0, sizeof(*m));
	m->base.tp = &mem_tp;
	snprintf(m->base.peer, sizeof(m->base.peer), "mem");
}

static void mem_put(struct mem_conn *m, const void *p, size_t n)
{
	struct iovec iov = { (void *)p, n };
	mem_sendv(&m->base, &iov, 1);
}

/* ---- a socketpair transport ---- */
struct sp_conn {
	struct rgpu_conn base;
	int fd;
};

static int sp_sendv(struct rgpu_conn *c, const struct iovec *iov, int n)
{
	struct sp_conn *s = (struct sp_conn *)c;
	for (int i = 0; i < n; i++) {
		const char *p = iov[i].iov_base;
		size_t left = iov[i].iov_len;
		while (left) {
			ssize_t w = write(s->fd, p, left);
			if (w <= 0)
				return -1;
			p += w;
			left -= (size_t)w;
		}
	}
	return 0;
}

static int sp_recv(struct rgpu_conn *c, void *out, size_t n)
{
	struct sp_conn *s = (struct sp_conn *)c;
	char *p = out;
	while (n) {
		ssize_t r = read(s->fd, p, n);
		if (r == 0) {
			errno = 0;
			return -1;
		}
		if (r < 0)
			return -1;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

static void sp_close(struct rgpu_conn *c) { close(((struct sp_conn *)c)->fd); }

static const struct rgpu_transport sp_tp = { .name = "socketpair", .sendv = sp_sendv, .recv = sp_recv, .close = sp_close };

static void test_encode_decode(void)
{
	struct rgpu_hdr h = { .magic = RGPU_PROTO_MAGIC, .version = 0x0a0b, .op = 0x0102,
			      .flags = 0x11223344u, .len = 0x55667788u,
			      .id = 0x99aabbccddeeff00ull };
	uint8_t b[RGPU_HDR_SIZE];
	memset(b, 0xcc, sizeof(b));
	rgpu_hdr_encode(&h, b);
	static const uint8_t want[RGPU_HDR_SIZE] = {
		'R', 'G', 'P', 'U',             /* magic 0x55504752 LE */
		0x0b, 0x0a,                     /* version */
		0x02, 0x01,                     /* op */
		0x44, 0x33, 0x22, 0x11,         /* flags */
		0x88, 0x77, 0x66, 0x55,         /* len */
		0x00, 0xff, 0xee, 0xdd, 0xcc, 0xbb, 0xaa, 0x99, /* id */
	};
	for (int i = 0; i < RGPU_HDR_SIZE; i++)
		if (b[i] != want[i])
			diag("byte %d: got 0x%02x want 0x%02x", i, b[i], want[i]);
	ok(memcmp(b, want, sizeof(want)) == 0, "header layout byte by byte (magic reads \"RGPU\")");

	struct rgpu_hdr d;
	memset(&d, 0, sizeof(d));
	rgpu_hdr_decode(b, &d);
	ok(d.magic == h.magic && d.version == h.version && d.op == h.op &&
	   d.flags == h.flags && d.len == h.len && d.id == h.id,
	   "decode(encode(h)) == h");
	is_u64(RGPU_HDR_SIZE, 24, "header is 24 bytes");
}

static void test_send_recv_mem(void)
{
	struct mem_conn m;
	mem_init(&m);
	const char a[] = "fields", bb[] = "bulk-data!";
	ok(rgpu_frame_send(&m.base, RGPU_OP_MEMCPY_HTOD, RGPU_F_NOREPLY, 42,
			   a, 6, bb, 10) == 0, "frame_send with two parts");
	is_u64(m.len, RGPU_HDR_SIZE + 16, "bytes on the wire: header + both parts");
	is_u64(m.sends, 1, "one sendv call for the whole frame");
	ok(rgpu_frame_send(&m.base, RGPU_OP_CTX_SYNC, 0, 43, NULL, 0, NULL, 0) == 0,
	   "frame_send without payload");
	ok(rgpu_frame_send(&m.base, RGPU_OP_MEM_ALLOC, RGPU_F_REPLY, 44, NULL, 0, "b", 1) == 0,
	   "frame_send with only the second part");

	struct rgpu_hdr h;
	int rc = rgpu_frame_recv_hdr(&m.base, &h);
	is_i64(rc, RGPU_HDR_OK, "recv_hdr OK");
	ok(h.magic == RGPU_PROTO_MAGIC && h.version == RGPU_PROTO_VERSION &&
	   h.op == RGPU_OP_MEMCPY_HTOD && h.flags == RGPU_F_NOREPLY && h.len == 16 && h.id == 42,
	   "header fields as sent (version %u op %u flags %u len %u id %llu)",
	   h.version, h.op, h.flags, h.len, (unsigned long long)h.id);
	char p[16];
	ok(rgpu_recv(&m.base, p, 16) == 0 && memcmp(p, "fieldsbulk-data!", 16) == 0,
	   "payload is part a then part b");
	rc = rgpu_frame_recv_hdr(&m.base, &h);
	ok(rc == RGPU_HDR_OK && h.op == RGPU_OP_CTX_SYNC && h.len == 0 && h.id == 43,
	   "empty frame");
	rc = rgpu_frame_recv_hdr(&m.base, &h);
	ok(rc == RGPU_HDR_OK && h.op == RGPU_OP_MEM_ALLOC && h.len == 1 && h.flags == RGPU_F_REPLY,
	   "frame with only part b");
	ok(rgpu_frame_skip(&m.base, 1) == 0, "skip its payload");
	rc = rgpu_frame_recv_hdr(&m.base, &h);
	is_i64(rc, RGPU_HDR_EOF, "recv_hdr at end of stream: EOF");

	/* over the payload limit: refused, nothing sent */
	size_t before = m.len;
	ok(rgpu_frame_send(&m.base, 1, 0, 1, a, RGPU_MAX_PAYLOAD, bb, 1) == -1,
	   "frame_send refuses a payload of RGPU_MAX_PAYLOAD + 1");
	ok(rgpu_frame_send(&m.base, 1, 0, 1, a, SIZE_MAX, bb, 2) == -1,
	   "frame_send refuses a length that overflows");
	is_u64(m.len, before, "nothing was sent for refused frames");
	mem_close(&m.base);
}

static void put_hdr(struct mem_conn *m, uint32_t magic, uint16_t version, uint32_t len)
{
	struct rgpu_hdr h = { .magic = magic, .version = version, .op = RGPU_OP_HELLO,
			      .len = len, .id = 1 };
	uint8_t b[RGPU_HDR_SIZE];
	rgpu_hdr_encode(&h, b);
	mem_put(m, b, sizeof(b));
}

static void test_recv_checks(void)
{
	struct mem_conn m;
	struct rgpu_hdr h;

	mem_init(&m);
	put_hdr(&m, 0x50545448u /* "HTTP" */, 1, 0);
	is_i64(rgpu_frame_recv_hdr(&m.base, &h), RGPU_HDR_BAD_MAGIC, "bad magic rejected");
	mem_close(&m.base);

	mem_init(&m);
	put_hdr(&m, RGPU_PROTO_MAGIC, 1, RGPU_MAX_PAYLOAD + 1);
	is_i64(rgpu_frame_recv_hdr(&m.base, &h), RGPU_HDR_TOO_LONG, "length RGPU_MAX_PAYLOAD + 1 rejected");
	mem_close(&m.base);

	mem_init(&m);
	put_hdr(&m, RGPU_PROTO_MAGIC, 1, 0xffffffffu);
	is_i64(rgpu_frame_recv_hdr(&m.base, &h), RGPU_HDR_TOO_LONG, "length 0xffffffff rejected");
	mem_close(&m.base);

	mem_init(&m);
	put_hdr(&m, RGPU_PROTO_MAGIC, 1, RGPU_MAX_PAYLOAD);
	ok(rgpu_frame_recv_hdr(&m.base, &h) == RGPU_HDR_OK && h.len == RGPU_MAX_PAYLOAD,
	   "length exactly RGPU_MAX_PAYLOAD accepted");
	mem_close(&m.base);

	mem_init(&m);
	put_hdr(&m, RGPU_PROTO_MAGIC, 99, 0);
	ok(rgpu_frame_recv_hdr(&m.base, &h) == RGPU_HDR_OK && h.version == 99,
	   "another version passes recv_hdr (HELLO answers the mismatch)");
	mem_close(&m.base);

	/* a header cut short */
	mem_init(&m);
	put_hdr(&m, RGPU_PROTO_MAGIC, 1, 0);
	m.len = 10;
	is_i64(rgpu_frame_recv_hdr(&m.base, &h), RGPU_HDR_EOF, "truncated header: EOF");
	mem_close(&m.base);

	/* skip past the end */
	mem_init(&m);
	mem_put(&m, "0123456789", 10);
	ok(rgpu_frame_skip(&m.base, 5000) == -1, "skip beyond the stream fails");
	mem_close(&m.base);

	/* skip more than its internal buffer */
	mem_init(&m);
	{
		size_t n = 10000;
		uint8_t *z = calloc(1, n);
		mem_put(&m, z, n);
		free(z);
		put_hdr(&m, RGPU_PROTO_MAGIC, 1, 3);
	}
	ok(rgpu_frame_skip(&m.base, 10000) == 0, "skip 10000 bytes");
	ok(rgpu_frame_recv_hdr(&m.base, &h) == RGPU_HDR_OK && h.len == 3,
	   "next header is intact after the skip");
	mem_close(&m.base);
}

static void test_socketpair(void)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		BAIL("socketpair: %s", strerror(errno));
	struct sp_conn a = { .base = { .tp = &sp_tp }, .fd = sv[0] };
	struct sp_conn b = { .base = { .tp = &sp_tp }, .fd = sv[1] };
	uint8_t payload[300];
	for (size_t i = 0; i < sizeof(payload); i++)
		payload[i] = (uint8_t)i;
	ok(rgpu_frame_send(&a.base, RGPU_OP_LAUNCH, 0, 7, payload, 100, payload + 100, 200) == 0,
	   "send over a socketpair");
	struct rgpu_hdr h;
	ok(rgpu_frame_recv_hdr(&b.base, &h) == RGPU_HDR_OK && h.op == RGPU_OP_LAUNCH &&
	   h.len == 300 && h.id == 7, "header received over a socketpair");
	uint8_t got[300];
	ok(rgpu_recv(&b.base, got, 300) == 0 && memcmp(got, payload, 300) == 0, "payload intact");

	/* raw bad magic on the socket */
	uint8_t junk[RGPU_HDR_SIZE];
	memset(junk, 'x', sizeof(junk));
	struct iovec iov = { junk, sizeof(junk) };
	rgpu_sendv(&a.base, &iov, 1);
	is_i64(rgpu_frame_recv_hdr(&b.base, &h), RGPU_HDR_BAD_MAGIC, "garbage bytes: bad magic");

	/* over-long length */
	struct rgpu_hdr big = { .magic = RGPU_PROTO_MAGIC, .version = 1, .op = 1,
				.len = RGPU_MAX_PAYLOAD + 4096, .id = 1 };
	rgpu_hdr_encode(&big, junk);
	rgpu_sendv(&a.base, &iov, 1);
	is_i64(rgpu_frame_recv_hdr(&b.base, &h), RGPU_HDR_TOO_LONG, "over-long length over a socketpair");

	/* half a header then close */
	rgpu_sendv(&a.base, &(struct iovec){ junk, 7 }, 1);
	sp_close(&a.base);
	is_i64(rgpu_frame_recv_hdr(&b.base, &h), RGPU_HDR_EOF, "peer closes mid-header: EOF");
	sp_close(&b.base);
}

int main(void)
{
	test_encode_decode();
	test_send_recv_mem();
	test_recv_checks();
	test_socketpair();
	return tap_done();
}
