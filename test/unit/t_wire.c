/* lib/wire.c: field encoding round trips, byte layout, the sticky failure
 * of every getter on truncated input, and the string checks. */
#include "tap.h"
#include "wire.h"

#include <math.h>

static const uint8_t *build_all(struct wbuf *w)
{
	static const uint8_t blob[5] = { 1, 2, 0, 4, 5 };
	put_u32(w, 0xdeadbeefu);
	put_i32(w, -5);
	put_u64(w, 0x0123456789abcdefull);
	put_f32(w, 1.5f);
	put_bytes(w, blob, sizeof(blob));
	put_str(w, "hello");
	put_raw(w, "xyz", 3);
	return w->data;
}

static void test_round_trip(void)
{
	struct wbuf w;
	wbuf_init(&w);
	build_all(&w);
	ok(!w.oom, "no oom while writing");
	/* 4 + 4 + 8 + 4 + (4+5) + (4+6) + 3 */
	is_u64(w.len, 42, "encoded length of all field kinds");

	struct rd r;
	rd_init(&r, w.data, w.len);
	is_u64(get_u32(&r), 0xdeadbeefu, "u32 round trip");
	is_i64(get_i32(&r), -5, "i32 round trip (negative)");
	is_u64(get_u64(&r), 0x0123456789abcdefull, "u64 round trip");
	ok(get_f32(&r) == 1.5f, "f32 round trip");
	size_t n = 99;
	const uint8_t *b = get_bytes(&r, &n);
	is_u64(n, 5, "bytes length");
	ok(b && b[0] == 1 && b[1] == 2 && b[2] == 0 && b[3] == 4 && b[4] == 5,
	   "bytes content (with an embedded zero)");
	is_str(get_str(&r, 64), "hello", "str round trip");
	const char *raw = get_raw(&r, 3);
	ok(raw && memcmp(raw, "xyz", 3) == 0, "raw round trip");
	ok(rd_ok(&r), "reader ok after all fields");
	ok(rd_done(&r), "reader done: nothing left over");
	is_u64(r.left, 0, "left == 0");

	/* One byte more than written: done is false while ok stays true. */
	put_raw(&w, "!", 1);
	rd_init(&r, w.data, w.len);
	get_u32(&r); get_i32(&r); get_u64(&r); get_f32(&r);
	get_bytes(&r, &n); get_str(&r, 64); get_raw(&r, 3);
	ok(rd_ok(&r) && !rd_done(&r), "a trailing byte: ok but not done");
	wbuf_free(&w);
	ok(w.data == NULL && w.len == 0 && w.cap == 0, "wbuf_free clears the buffer");
}

static void test_layout(void)
{
	struct wbuf w;
	wbuf_init(&w);
	put_u32(&w, 0x11223344u);
	put_u64(&w, 0x0102030405060708ull);
	put_i32(&w, -2);
	put_f32(&w, 1.0f); /* 0x3f800000 */
	put_str(&w, "ab");
	static const uint8_t want[] = {
		0x44, 0x33, 0x22, 0x11,
		0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
		0xfe, 0xff, 0xff, 0xff,
		0x00, 0x00, 0x80, 0x3f,
		0x03, 0x00, 0x00, 0x00, 'a', 'b', 0x00,
	};
	is_u64(w.len, sizeof(want), "layout length");
	int same = w.len == sizeof(want) && memcmp(w.data, want, sizeof(want)) == 0;
	ok(same, "little-endian layout, length prefix includes the NUL");
	if (!same)
		for (size_t i = 0; i < w.len && i < sizeof(want); i++)
			if (w.data[i] != want[i])
				diag("byte %zu: got 0x%02x want 0x%02x", i, w.data[i], want[i]);

	/* NaN and -0.0 keep their bits. */
	wbuf_reset(&w);
	put_f32(&w, -0.0f);
	put_f32(&w, NAN);
	struct rd r;
	rd_init(&r, w.data, w.len);
	float z = get_f32(&r), nn = get_f32(&r);
	ok(z == 0.0f && signbit(z), "-0.0 keeps its sign");
	ok(isnan(nn), "NaN stays NaN");
	wbuf_free(&w);
}

/* Every getter, given fewer bytes than it needs, returns 0/NULL and sets
 * bad; bad is sticky. */
static void test_truncated(void)
{
	static const uint8_t buf[16] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 };
	struct rd r;

	for (size_t n = 0; n < 4; n++) {
		rd_init(&r, buf, n);
		uint32_t v = get_u32(&r);
		ok(v == 0 && r.bad, "get_u32 on %zu bytes: 0 and bad", n);
		rd_init(&r, buf, n);
		int32_t iv = get_i32(&r);
		ok(iv == 0 && r.bad, "get_i32 on %zu bytes: 0 and bad", n);
		rd_init(&r, buf, n);
		float f = get_f32(&r);
		ok(f == 0.0f && r.bad, "get_f32 on %zu bytes: 0 and bad", n);
	}
	for (size_t n = 0; n < 8; n++) {
		rd_init(&r, buf, n);
		uint64_t v = get_u64(&r);
		ok(v == 0 && r.bad, "get_u64 on %zu bytes: 0 and bad", n);
	}
	rd_init(&r, buf, 5);
	ok(get_raw(&r, 6) == NULL && r.bad, "get_raw(6) on 5 bytes: NULL and bad");
	rd_init(&r, buf, 5);
	ok(get_raw(&r, 5) != NULL && !r.bad && r.left == 0, "get_raw(5) on 5 bytes succeeds");
	rd_init(&r, buf, 5);
	ok(get_raw(&r, SIZE_MAX) == NULL && r.bad, "get_raw(SIZE_MAX): NULL and bad");

	/* bytes: the length prefix promises more than is there */
	struct wbuf w;
	wbuf_init(&w);
	put_bytes(&w, "0123456789", 10);
	for (size_t n = 0; n < w.len; n++) {
		size_t len = 77;
		rd_init(&r, w.data, n);
		const void *p = get_bytes(&r, &len);
		ok(p == NULL && len == 0 && r.bad, "get_bytes on %zu of %zu bytes: NULL, len 0, bad", n, w.len);
	}
	wbuf_reset(&w);
	put_str(&w, "truncate me");
	for (size_t n = 0; n < w.len; n++) {
		rd_init(&r, w.data, n);
		ok(get_str(&r, 100) == NULL && r.bad, "get_str on %zu of %zu bytes: NULL and bad", n, w.len);
	}
	/* A huge length prefix (0xffffffff) with a few bytes behind it. */
	wbuf_reset(&w);
	put_u32(&w, 0xffffffffu);
	put_raw(&w, "abc", 4);
	size_t len = 5;
	rd_init(&r, w.data, w.len);
	ok(get_bytes(&r, &len) == NULL && len == 0 && r.bad, "get_bytes with length 0xffffffff: NULL and bad");

	/* Sticky: after a failure even fields that would fit fail. */
	rd_init(&r, buf, sizeof(buf));
	get_raw(&r, 17);
	ok(r.bad, "overrun sets bad");
	ok(get_u32(&r) == 0 && get_u64(&r) == 0 && get_raw(&r, 1) == NULL && r.bad,
	   "bad is sticky: later getters return 0/NULL");
	size_t l2 = 3;
	ok(get_bytes(&r, &l2) == NULL && l2 == 0, "bad is sticky for get_bytes");
	ok(get_str(&r, 10) == NULL, "bad is sticky for get_str");
	ok(!rd_ok(&r) && !rd_done(&r), "rd_ok and rd_done false after a failure");
	wbuf_free(&w);
}

static void test_strings(void)
{
	struct wbuf w;
	struct rd r;
	wbuf_init(&w);

	/* missing NUL: "abc" sent as bytes of length 3 */
	put_bytes(&w, "abc", 3);
	rd_init(&r, w.data, w.len);
	ok(get_str(&r, 100) == NULL && r.bad, "get_str rejects a string without its NUL");

	/* embedded NUL: "a\0b" + NUL */
	wbuf_reset(&w);
	put_bytes(&w, "a\0b", 4);
	rd_init(&r, w.data, w.len);
	ok(get_str(&r, 100) == NULL && r.bad, "get_str rejects an embedded NUL");

	/* zero-length (not even a NUL) */
	wbuf_reset(&w);
	put_bytes(&w, "", 0);
	rd_init(&r, w.data, w.len);
	ok(get_str(&r, 100) == NULL && r.bad, "get_str rejects a zero-length field");

	/* over-long: 10 characters with maxlen 9; exactly maxlen passes */
	wbuf_reset(&w);
	put_str(&w, "0123456789");
	rd_init(&r, w.data, w.len);
	ok(get_str(&r, 9) == NULL && r.bad, "get_str rejects 10 chars with maxlen 9");
	rd_init(&r, w.data, w.len);
	is_str(get_str(&r, 10), "0123456789", "get_str accepts 10 chars with maxlen 10");
	ok(rd_done(&r), "and consumed it all");

	/* empty string and NULL */
	wbuf_reset(&w);
	put_str(&w, "");
	put_str(&w, NULL);
	is_u64(w.len, 10, "empty string and NULL each encode as length 1 + NUL");
	rd_init(&r, w.data, w.len);
	is_str(get_str(&r, 0), "", "empty string round trip (maxlen 0)");
	is_str(get_str(&r, 0), "", "NULL encodes as the empty string");
	ok(rd_done(&r), "done after two empty strings");
	wbuf_free(&w);
}

static void test_growth(void)
{
	struct wbuf w;
	wbuf_init(&w);
	const uint32_t N = 100000;
	for (uint32_t i = 0; i < N; i++)
		put_u32(&w, i * 2654435761u);
	ok(!w.oom, "no oom after %u u32s", N);
	is_u64(w.len, (uint64_t)N * 4, "length after %u u32s", N);
	ok(w.cap >= w.len, "cap >= len");
	struct rd r;
	rd_init(&r, w.data, w.len);
	int good = 1;
	for (uint32_t i = 0; i < N; i++)
		if (get_u32(&r) != i * 2654435761u)
			good = 0;
	ok(good && rd_done(&r), "all %u values read back in order", N);

	/* one big put_bytes after small fields: growth by more than doubling */
	size_t big = 3u * 1024 * 1024 + 7;
	uint8_t *src = malloc(big);
	if (!src)
		BAIL("malloc");
	for (size_t i = 0; i < big; i++)
		src[i] = (uint8_t)(i * 31 + 7);
	size_t cap_before = w.cap;
	put_bytes(&w, src, big);
	ok(w.cap > cap_before && w.cap >= w.len, "buffer grew for a %zu-byte field", big);
	rd_init(&r, w.data, w.len);
	get_raw(&r, (size_t)N * 4);
	size_t n = 0;
	const void *p = get_bytes(&r, &n);
	ok(p && n == big && memcmp(p, src, big) == 0 && rd_done(&r), "big bytes field intact");

	/* reset keeps the allocation */
	size_t cap = w.cap;
	uint8_t *data = w.data;
	wbuf_reset(&w);
	ok(w.len == 0 && w.cap == cap && w.data == data && !w.oom, "wbuf_reset keeps capacity");
	put_u32(&w, 7);
	ok(w.len == 4 && w.data == data, "writing after reset reuses the buffer");

	/* put_raw of zero bytes is a no-op */
	put_raw(&w, NULL, 0);
	is_u64(w.len, 4, "put_raw(NULL, 0) adds nothing");

	/* an oversized put_bytes marks oom (length does not fit a u32) */
	if (sizeof(size_t) > 4) {
		put_bytes(&w, src, (size_t)UINT32_MAX + 1);
		ok(w.oom, "put_bytes over 4 GiB sets oom");
		size_t l = w.len;
		put_u32(&w, 1);
		ok(w.len == l, "writes after oom are dropped");
		wbuf_reset(&w);
		ok(!w.oom, "wbuf_reset clears oom");
	}
	free(src);
	wbuf_free(&w);
}

int main(void)
{
	test_round_trip();
	test_layout();
	test_truncated();
	test_strings();
	test_growth();
	return tap_done();
}
