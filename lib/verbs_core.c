#include "verbs_core.h"

#include <endian.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* ---- little-endian field helpers ---- */
static void p16(uint8_t *p, uint16_t v) { v = htole16(v); memcpy(p, &v, 2); }
static void p32(uint8_t *p, uint32_t v) { v = htole32(v); memcpy(p, &v, 4); }
static void p64(uint8_t *p, uint64_t v) { v = htole64(v); memcpy(p, &v, 8); }
static uint16_t g16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return le16toh(v); }
static uint32_t g32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return le32toh(v); }
static uint64_t g64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return le64toh(v); }

/* Copies a reason into a fixed field, always NUL-terminated. */
static void put_reason(uint8_t *dst, const char *s)
{
	memset(dst, 0, RGPU_VREASON_LEN);
	if (s)
		memcpy(dst, s, strnlen(s, RGPU_VREASON_LEN - 1));
}

static void get_reason(char *dst, const uint8_t *src)
{
	memcpy(dst, src, RGPU_VREASON_LEN);
	dst[RGPU_VREASON_LEN - 1] = '\0';
}

/* ---- connection info ---- */

void rgpu_vinfo_encode(const struct rgpu_vinfo *in, uint8_t out[RGPU_VINFO_SIZE])
{
	memset(out, 0, RGPU_VINFO_SIZE);
	p32(out + 0, RGPU_VINFO_MAGIC);
	p16(out + 4, RGPU_VINFO_VERSION);
	p16(out + 6, RGPU_VINFO_SIZE);
	p32(out + 8, in->status);
	out[12] = in->port;
	out[13] = in->link_layer;
	out[14] = in->mtu;
	out[15] = in->gid_index;
	p16(out + 16, in->lid);
	p32(out + 20, in->ctrl_qpn);
	p32(out + 24, in->ctrl_psn);
	p32(out + 28, in->bulk_qpn);
	p32(out + 32, in->bulk_psn);
	p32(out + 36, in->ctrl_depth);
	p32(out + 40, in->ctrl_msg_size);
	p32(out + 44, in->ring_slots);
	p32(out + 48, in->slot_size);
	p32(out + 52, in->ring_rkey);
	p64(out + 56, in->ring_addr);
	memcpy(out + 64, in->gid, 16);
	put_reason(out + 80, in->status ? in->reason : NULL);
}

static int bad(char *err, size_t errlen, const char *what)
{
	snprintf(err, errlen, "bad verbs connection info from the peer: %s", what);
	return -1;
}

int rgpu_vinfo_decode(const uint8_t *in, size_t n, struct rgpu_vinfo *o, char *err,
		      size_t errlen)
{
	if (n < RGPU_VINFO_SIZE)
		return bad(err, errlen, "truncated");
	if (g32(in) != RGPU_VINFO_MAGIC)
		return bad(err, errlen, "wrong magic");
	if (g16(in + 4) != RGPU_VINFO_VERSION)
		return bad(err, errlen, "unknown version");
	if (g16(in + 6) != RGPU_VINFO_SIZE || n != RGPU_VINFO_SIZE)
		return bad(err, errlen, "wrong length");
	memset(o, 0, sizeof(*o));
	o->status = g32(in + 8);
	o->port = in[12];
	o->link_layer = in[13];
	o->mtu = in[14];
	o->gid_index = in[15];
	o->lid = g16(in + 16);
	o->ctrl_qpn = g32(in + 20);
	o->ctrl_psn = g32(in + 24);
	o->bulk_qpn = g32(in + 28);
	o->bulk_psn = g32(in + 32);
	o->ctrl_depth = g32(in + 36);
	o->ctrl_msg_size = g32(in + 40);
	o->ring_slots = g32(in + 44);
	o->slot_size = g32(in + 48);
	o->ring_rkey = g32(in + 52);
	o->ring_addr = g64(in + 56);
	memcpy(o->gid, in + 64, 16);
	get_reason(o->reason, in + 80);
	if (o->status)
		return 0; /* a refusal: the other fields are not used */
	/* QP numbers and PSNs are 24-bit; the rest are sizes this side will
	 * index its buffers with, so they must be sane before use. */
	if (o->ctrl_qpn > 0xffffff || o->bulk_qpn > 0xffffff || !o->ctrl_qpn || !o->bulk_qpn)
		return bad(err, errlen, "QP number out of range");
	if (o->ctrl_psn > 0xffffff || o->bulk_psn > 0xffffff)
		return bad(err, errlen, "PSN out of range");
	if (!o->port || (o->link_layer != 1 && o->link_layer != 2) || o->mtu < 1 || o->mtu > 5)
		return bad(err, errlen, "port, link layer or MTU out of range");
	if (o->ctrl_depth < 2 || o->ctrl_depth > 4096)
		return bad(err, errlen, "control depth out of range");
	if (o->ctrl_msg_size <= RGPU_VHDR_SIZE || o->ctrl_msg_size > (1u << 20))
		return bad(err, errlen, "control message size out of range");
	if (o->ring_slots < 1 || o->ring_slots > 256)
		return bad(err, errlen, "ring slot count out of range");
	if (o->slot_size < 4096 || o->slot_size > RGPU_VIMM_MAXLEN)
		return bad(err, errlen, "ring slot size out of range");
	if (!o->ring_addr || o->ring_addr + (uint64_t)o->ring_slots * o->slot_size < o->ring_addr)
		return bad(err, errlen, "ring address out of range");
	return 0;
}

void rgpu_vready_encode(uint32_t status, const char *reason, uint8_t out[RGPU_VREADY_SIZE])
{
	memset(out, 0, RGPU_VREADY_SIZE);
	p32(out + 0, RGPU_VREADY_MAGIC);
	p16(out + 4, RGPU_VINFO_VERSION);
	p16(out + 6, RGPU_VREADY_SIZE);
	p32(out + 8, status);
	put_reason(out + 16, status ? reason : NULL);
}

int rgpu_vready_decode(const uint8_t *in, size_t n, uint32_t *status,
		       char reason[RGPU_VREASON_LEN], char *err, size_t errlen)
{
	if (n != RGPU_VREADY_SIZE || g32(in) != RGPU_VREADY_MAGIC ||
	    g16(in + 4) != RGPU_VINFO_VERSION || g16(in + 6) != RGPU_VREADY_SIZE) {
		snprintf(err, errlen, "bad verbs ready message from the peer");
		return -1;
	}
	*status = g32(in + 8);
	get_reason(reason, in + 16);
	return 0;
}

/* ---- headers and immediates ---- */

void rgpu_vhdr_encode(const struct rgpu_vhdr *h, uint8_t out[RGPU_VHDR_SIZE])
{
	memset(out, 0, RGPU_VHDR_SIZE);
	out[0] = h->type;
	p16(out + 2, h->ctrl_ret);
	p16(out + 4, h->slot_ret);
	p32(out + 8, h->seq);
	p32(out + 12, h->len);
}

int rgpu_vhdr_decode(const uint8_t *in, size_t byte_len, struct rgpu_vhdr *h)
{
	if (byte_len < RGPU_VHDR_SIZE)
		return -1;
	h->type = in[0];
	h->ctrl_ret = g16(in + 2);
	h->slot_ret = g16(in + 4);
	h->seq = g32(in + 8);
	h->len = g32(in + 12);
	if (h->type == RGPU_VMSG_DATA)
		return h->len >= 1 && h->len <= byte_len - RGPU_VHDR_SIZE ? 0 : -1;
	if (h->type == RGPU_VMSG_CREDIT)
		return h->len == 0 ? 0 : -1;
	return -1;
}

uint32_t rgpu_vimm_encode(uint32_t seq, uint32_t len)
{
	return (seq & 0xffu) << 24 | (len & RGPU_VIMM_MAXLEN);
}

void rgpu_vimm_decode(uint32_t imm, uint32_t *seq8, uint32_t *len)
{
	*seq8 = imm >> 24;
	*len = imm & RGPU_VIMM_MAXLEN;
}

/* ---- credits ---- */

void rgpu_vcredit_init(struct rgpu_vcredit *c, uint32_t depth)
{
	c->depth = c->avail = depth;
	c->owed = 0;
	/* A quarter: few explicit CREDIT messages, yet the sender never
	 * drains more than three quarters of the queue before hearing back. */
	c->threshold = depth / 4 ? depth / 4 : 1;
}

int rgpu_vcredit_can_data(const struct rgpu_vcredit *c) { return c->avail >= 2; }
int rgpu_vcredit_can_credit(const struct rgpu_vcredit *c) { return c->avail >= 1; }
void rgpu_vcredit_use(struct rgpu_vcredit *c) { c->avail--; }

int rgpu_vcredit_grant(struct rgpu_vcredit *c, uint32_t n)
{
	if (n > c->depth - c->avail)
		return -1;
	c->avail += n;
	return 0;
}

void rgpu_vcredit_reposted(struct rgpu_vcredit *c) { c->owed++; }
int rgpu_vcredit_need_explicit(const struct rgpu_vcredit *c) { return c->owed >= c->threshold; }

uint16_t rgpu_vcredit_take(struct rgpu_vcredit *c)
{
	uint32_t n = c->owed > 0xffff ? 0xffff : c->owed;
	c->owed -= n;
	return (uint16_t)n;
}

/* ---- ring slots ---- */

void rgpu_vring_tx_init(struct rgpu_vring_tx *r, uint32_t nslots)
{
	r->nslots = nslots;
	r->head = r->inuse = 0;
}

int rgpu_vring_tx_acquire(struct rgpu_vring_tx *r)
{
	if (r->inuse >= r->nslots)
		return -1;
	int s = (int)r->head;
	r->head = (r->head + 1) % r->nslots;
	r->inuse++;
	return s;
}

int rgpu_vring_tx_release(struct rgpu_vring_tx *r, uint32_t n)
{
	if (n > r->inuse)
		return -1;
	r->inuse -= n;
	return 0;
}

void rgpu_vring_rx_init(struct rgpu_vring_rx *r, uint32_t nslots)
{
	memset(r, 0, sizeof(*r));
	r->nslots = nslots;
	/* Slots are large: return them soon, but not one message each. */
	r->threshold = nslots / 8 ? nslots / 8 : 1;
}

int rgpu_vring_rx_arrive(struct rgpu_vring_rx *r)
{
	if (r->filled >= r->nslots)
		return -1;
	int s = (int)r->head;
	r->head = (r->head + 1) % r->nslots;
	r->filled++;
	return s;
}

int rgpu_vring_rx_free(struct rgpu_vring_rx *r, uint32_t slot)
{
	if (!r->filled || slot != r->tail)
		return -1;
	r->tail = (r->tail + 1) % r->nslots;
	r->filled--;
	r->owed++;
	return 0;
}

int rgpu_vring_rx_need_explicit(const struct rgpu_vring_rx *r) { return r->owed >= r->threshold; }

uint16_t rgpu_vring_rx_take(struct rgpu_vring_rx *r)
{
	uint32_t n = r->owed > 0xffff ? 0xffff : r->owed;
	r->owed -= n;
	return (uint16_t)n;
}

/* ---- sender split ---- */

void rgpu_viov_init(struct rgpu_viov *c, const struct iovec *iov, int cnt)
{
	c->iov = iov;
	c->cnt = cnt;
	c->i = 0;
	c->off = 0;
}

size_t rgpu_viov_left(const struct rgpu_viov *c)
{
	size_t n = 0;
	for (int i = c->i; i < c->cnt; i++)
		n += c->iov[i].iov_len - (i == c->i ? c->off : 0);
	return n;
}

void rgpu_viov_copy(struct rgpu_viov *c, void *dst, size_t n)
{
	uint8_t *d = dst;
	while (n && c->i < c->cnt) {
		size_t k = c->iov[c->i].iov_len - c->off;
		if (k > n)
			k = n;
		memcpy(d, (const uint8_t *)c->iov[c->i].iov_base + c->off, k);
		d += k;
		n -= k;
		c->off += k;
		if (c->off == c->iov[c->i].iov_len) {
			c->i++;
			c->off = 0;
		}
	}
}

int rgpu_vsplit_next(const struct rgpu_viov *c, size_t bulk_min, size_t ctrl_max,
		     size_t bulk_max, size_t *len)
{
	int i = c->i;
	size_t off = c->off;
	while (i < c->cnt && c->iov[i].iov_len == off) {
		i++;
		off = 0;
	}
	if (i >= c->cnt) {
		*len = 0;
		return RGPU_VSPLIT_NONE;
	}
	size_t rem = c->iov[i].iov_len - off;
	if (rem >= bulk_min) {
		*len = rem < bulk_max ? rem : bulk_max;
		return RGPU_VSPLIT_BULK;
	}
	size_t n = rem < ctrl_max ? rem : ctrl_max;
	for (i++; i < c->cnt && n < ctrl_max; i++) {
		size_t l = c->iov[i].iov_len;
		if (l >= bulk_min)
			break;
		n += l < ctrl_max - n ? l : ctrl_max - n;
	}
	*len = n;
	return RGPU_VSPLIT_CTRL;
}

/* ---- receiver reassembly ---- */

void rgpu_vstream_init(struct rgpu_vstream *s) { memset(s, 0, sizeof(*s)); }

int rgpu_vstream_put(struct rgpu_vstream *s, uint32_t seq, const void *data, uint32_t len,
		     uint8_t kind, uint32_t tag)
{
	struct rgpu_vstream_ent *e = &s->ent[seq % RGPU_VSTREAM_WINDOW];
	if (!len || e->present)
		return -1;
	*e = (struct rgpu_vstream_ent){ .data = data, .len = len, .present = 1, .kind = kind,
					.tag = tag };
	return 0;
}

int rgpu_vstream_ready(const struct rgpu_vstream *s)
{
	return s->ent[s->next % RGPU_VSTREAM_WINDOW].present;
}

long rgpu_vstream_read(struct rgpu_vstream *s, void *buf, size_t n, rgpu_vrelease_fn release,
		       void *ctx)
{
	uint8_t *d = buf;
	size_t got = 0;
	while (got < n) {
		struct rgpu_vstream_ent *e = &s->ent[s->next % RGPU_VSTREAM_WINDOW];
		if (!e->present)
			break;
		size_t k = e->len - e->off;
		if (k > n - got)
			k = n - got;
		memcpy(d + got, e->data + e->off, k);
		got += k;
		e->off += (uint32_t)k;
		if (e->off == e->len) {
			uint8_t kind = e->kind;
			uint32_t tag = e->tag;
			memset(e, 0, sizeof(*e));
			s->next++;
			if (release && release(ctx, kind, tag) < 0)
				return -1;
		}
	}
	return (long)got;
}

int rgpu_transport_mode(const char *s, enum rgpu_tmode *mode, char *err, size_t errlen)
{
	if (!s || !*s || !strcasecmp(s, "auto"))
		*mode = RGPU_TMODE_AUTO;
	else if (!strcasecmp(s, "tcp"))
		*mode = RGPU_TMODE_TCP;
	else if (!strcasecmp(s, "verbs") || !strcasecmp(s, "ib"))
		*mode = RGPU_TMODE_VERBS;
	else {
		snprintf(err, errlen, "RGPU_TRANSPORT='%s' is not tcp, verbs or auto", s);
		return -1;
	}
	return 0;
}
