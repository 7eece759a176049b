/* libFuzzer harness: the field decoder (lib/wire.c).  The first bytes are
 * a script (which field to read next), the rest the payload.  Every field
 * read is written again with the matching put_*: the writer must reproduce
 * exactly the bytes the reader consumed, and a reader that failed once
 * must stay failed. */
#include "wire.h"

#include <stdint.h>
#include <string.h>

#define CHECK(c) do { if (!(c)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t nscript = data[0] % 32;
	if (size < 1 + nscript)
		return 0;
	const uint8_t *script = data + 1, *payload = data + 1 + nscript;
	size_t plen = size - 1 - nscript;
	struct rd r;
	rd_init(&r, payload, plen);
	struct wbuf w;
	wbuf_init(&w);
	size_t good = 0; /* bytes consumed by the fields read successfully */
	for (size_t i = 0; i < nscript || (!nscript && !r.bad && r.left); i++) {
		uint8_t op = nscript ? script[i] : 0;
		size_t before = r.left;
		int was_bad = r.bad;
		switch (op % 8) {
		case 0: { uint32_t v = get_u32(&r); if (!r.bad) put_u32(&w, v); break; }
		case 1: { int32_t v = get_i32(&r); if (!r.bad) put_i32(&w, v); break; }
		case 2: { uint64_t v = get_u64(&r); if (!r.bad) put_u64(&w, v); break; }
		case 3: {
			float v = get_f32(&r);
			/* floats compare by bits: NaN payloads must survive */
			if (!r.bad) { uint32_t u; memcpy(&u, &v, 4); put_u32(&w, u); }
			break;
		}
		case 4: {
			size_t n;
			const void *p = get_bytes(&r, &n);
			if (!r.bad) { CHECK(p); put_bytes(&w, p, n); }
			break;
		}
		case 5: {
			const char *s = get_str(&r, op >> 3 ? (size_t)(op >> 3) * 8 : 4096);
			if (!r.bad) { CHECK(s && strlen(s) <= 4096); put_str(&w, s); }
			else CHECK(!s);
			break;
		}
		default: {
			size_t n = op >> 3;
			const void *p = get_raw(&r, n);
			if (!r.bad) { CHECK(p); put_raw(&w, p, n); }
			break;
		}
		}
		if (was_bad)
			CHECK(r.bad && r.left == before); /* sticky, and reads nothing */
		CHECK(r.left <= before);
		if (!r.bad)
			good = plen - r.left;
		if (!nscript && r.bad)
			break;
	}
	CHECK(!w.oom);
	CHECK(w.len == good);
	CHECK(good == 0 || memcmp(w.data, payload, good) == 0);
	CHECK(rd_done(&r) == (!r.bad && r.left == 0));
	wbuf_free(&w);
	return 0;
}
