#include "frame.h"

#include <endian.h>
#include <string.h>

void rgpu_hdr_encode(const struct rgpu_hdr *h, uint8_t out[RGPU_HDR_SIZE])
{
	uint32_t u32;
	uint16_t u16;
	uint64_t u64;
	u32 = htole32(h->magic);   memcpy(out + 0, &u32, 4);
	u16 = htole16(h->version); memcpy(out + 4, &u16, 2);
	u16 = htole16(h->op);      memcpy(out + 6, &u16, 2);
	u32 = htole32(h->flags);   memcpy(out + 8, &u32, 4);
	u32 = htole32(h->len);     memcpy(out + 12, &u32, 4);
	u64 = htole64(h->id);      memcpy(out + 16, &u64, 8);
}

void rgpu_hdr_decode(const uint8_t in[RGPU_HDR_SIZE], struct rgpu_hdr *h)
{
	uint32_t u32;
	uint16_t u16;
	uint64_t u64;
	memcpy(&u32, in + 0, 4);  h->magic = le32toh(u32);
	memcpy(&u16, in + 4, 2);  h->version = le16toh(u16);
	memcpy(&u16, in + 6, 2);  h->op = le16toh(u16);
	memcpy(&u32, in + 8, 4);  h->flags = le32toh(u32);
	memcpy(&u32, in + 12, 4); h->len = le32toh(u32);
	memcpy(&u64, in + 16, 8); h->id = le64toh(u64);
}

int rgpu_frame_send(struct rgpu_conn *c, uint16_t op, uint32_t flags, uint64_t id,
		    const void *a, size_t alen, const void *b, size_t blen)
{
	if (alen + blen > RGPU_MAX_PAYLOAD || alen + blen < alen)
		return -1;
	struct rgpu_hdr h = { .magic = RGPU_PROTO_MAGIC, .version = RGPU_PROTO_VERSION,
			      .op = op, .flags = flags, .len = (uint32_t)(alen + blen), .id = id };
	uint8_t hb[RGPU_HDR_SIZE];
	rgpu_hdr_encode(&h, hb);
	struct iovec iov[3] = { { hb, sizeof(hb) } };
	int n = 1;
	if (alen)
		iov[n++] = (struct iovec){ (void *)a, alen };
	if (blen)
		iov[n++] = (struct iovec){ (void *)b, blen };
	return rgpu_sendv(c, iov, n);
}

int rgpu_frame_recv_hdr(struct rgpu_conn *c, struct rgpu_hdr *h)
{
	uint8_t hb[RGPU_HDR_SIZE];
	if (rgpu_recv(c, hb, sizeof(hb)) < 0)
		return RGPU_HDR_EOF;
	rgpu_hdr_decode(hb, h);
	if (h->magic != RGPU_PROTO_MAGIC)
		return RGPU_HDR_BAD_MAGIC;
	if (h->len > RGPU_MAX_PAYLOAD)
		return RGPU_HDR_TOO_LONG;
	return RGPU_HDR_OK;
}

int rgpu_frame_skip(struct rgpu_conn *c, size_t n)
{
	char buf[4096];
	while (n) {
		size_t k = n < sizeof(buf) ? n : sizeof(buf);
		if (rgpu_recv(c, buf, k) < 0)
			return -1;
		n -= k;
	}
	return 0;
}
