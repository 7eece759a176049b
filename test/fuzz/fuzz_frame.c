/* libFuzzer harness: the frame reader (lib/frame.c).  The input is a byte
 * stream as it would arrive on a connection.  Every frame read is sent
 * back through rgpu_frame_send and must read back the same; every header
 * must survive decode -> encode unchanged. */
#include "frame.h"
#include "memconn.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c) do { if (!(c)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct memconn in, out;
	memconn_init(&in, data, size, 0);
	for (int frames = 0; frames < 4096; frames++) {
		size_t at = in.in_off;
		struct rgpu_hdr h;
		int st = rgpu_frame_recv_hdr(&in.c, &h);
		if (st == RGPU_HDR_EOF)
			break;
		/* decode and encode are inverses on any 24 bytes */
		uint8_t again[RGPU_HDR_SIZE];
		rgpu_hdr_encode(&h, again);
		CHECK(memcmp(again, data + at, RGPU_HDR_SIZE) == 0);
		if (st == RGPU_HDR_BAD_MAGIC || st == RGPU_HDR_TOO_LONG) {
			CHECK(st != RGPU_HDR_TOO_LONG || h.len > RGPU_MAX_PAYLOAD);
			break; /* a server drops the connection here */
		}
		CHECK(st == RGPU_HDR_OK && h.magic == RGPU_PROTO_MAGIC && h.len <= RGPU_MAX_PAYLOAD);
		size_t left = in.in_len - in.in_off;
		if (h.len > left) {
			/* truncated: skipping must fail at EOF, not read past it */
			CHECK(rgpu_frame_skip(&in.c, h.len) < 0);
			break;
		}
		const uint8_t *payload = data + in.in_off;
		if (frames & 1) {
			CHECK(rgpu_frame_skip(&in.c, h.len) == 0);
		} else {
			uint8_t *buf = malloc(h.len ? h.len : 1);
			CHECK(buf);
			CHECK(rgpu_recv(&in.c, buf, h.len) == 0);
			CHECK(memcmp(buf, payload, h.len) == 0);
			free(buf);
		}
		/* round trip through the sender, payload split in two parts */
		memconn_init(&out, NULL, 0, 1);
		size_t a = h.len / 2;
		CHECK(rgpu_frame_send(&out.c, h.op, h.flags, h.id, payload, a, payload + a,
				      h.len - a) == 0);
		CHECK(out.out_len == RGPU_HDR_SIZE + h.len);
		struct memconn back;
		memconn_init(&back, out.out, out.out_len, 0);
		struct rgpu_hdr h2;
		CHECK(rgpu_frame_recv_hdr(&back.c, &h2) == RGPU_HDR_OK);
		CHECK(h2.op == h.op && h2.flags == h.flags && h2.len == h.len && h2.id == h.id &&
		      h2.version == RGPU_PROTO_VERSION);
		CHECK(memcmp(out.out + RGPU_HDR_SIZE, payload, h.len) == 0);
		memconn_fini(&out);
	}
	return 0;
}
