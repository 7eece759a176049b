/* The verbs transport without a device (lib/verbs_core.c and the fallback
 * paths of lib/transport_verbs.c): the setup messages with truncated,
 * garbage and out-of-range input; control headers and immediates; credit
 * and ring-slot accounting, including a two-sided simulation of the credit
 * protocol; the sender's split and the receiver's reassembly of a byte
 * stream from messages delivered in a random order across the two QPs;
 * RGPU_TRANSPORT parsing; rgpu_verbs_available() on a machine without RDMA
 * devices; and rgpu_verbs_upgrade() falling back to TCP in step on both
 * ends, or shutting TCP down when the exchange is garbage. */
#include "tap.h"
#include "transport.h"
#include "verbs_core.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

static struct rgpu_vinfo good_info(void)
{
	struct rgpu_vinfo i = {
		.port = 1, .link_layer = 1, .mtu = 5, .gid_index = 3, .lid = 0x1234,
		.ctrl_qpn = 0xabcdef, .ctrl_psn = 0x123456, .bulk_qpn = 0x42, .bulk_psn = 0xffffff,
		.ctrl_depth = 128, .ctrl_msg_size = 8192, .ring_slots = 32,
		.slot_size = 1 << 20, .ring_rkey = 0xdeadbeef, .ring_addr = 0x7f0012345000ull,
	};
	for (int k = 0; k < 16; k++)
		i.gid[k] = (uint8_t)(0xf0 + k);
	return i;
}

/* Decodes from a heap copy of exactly n bytes, so ASan/valgrind catch any
 * read past the end. */
static int decode_n(const uint8_t *src, size_t n, struct rgpu_vinfo *o, char *err, size_t el)
{
	uint8_t *p = malloc(n ? n : 1);
	memcpy(p, src, n);
	int rc = rgpu_vinfo_decode(p, n, o, err, el);
	free(p);
	return rc;
}

static void test_info(void)
{
	char err[160];
	uint8_t b[RGPU_VINFO_SIZE];
	struct rgpu_vinfo in = good_info(), out;
	rgpu_vinfo_encode(&in, b);
	is_u64(b[0] | b[1] << 8 | b[2] << 16 | (uint32_t)b[3] << 24, RGPU_VINFO_MAGIC,
	       "info: magic first, little-endian");
	is_i64(decode_n(b, sizeof(b), &out, err, sizeof(err)), 0, "info: round trip decodes");
	ok(out.status == 0 && out.port == 1 && out.link_layer == 1 && out.mtu == 5 &&
		   out.gid_index == 3 && out.lid == 0x1234 && out.ctrl_qpn == 0xabcdef &&
		   out.ctrl_psn == 0x123456 && out.bulk_qpn == 0x42 && out.bulk_psn == 0xffffff &&
		   out.ctrl_depth == 128 && out.ctrl_msg_size == 8192 && out.ring_slots == 32 &&
		   out.slot_size == 1u << 20 && out.ring_rkey == 0xdeadbeef &&
		   out.ring_addr == 0x7f0012345000ull && !memcmp(out.gid, in.gid, 16) &&
		   out.reason[0] == 0,
	   "info: every field survives the round trip");
	int all = 1;
	for (size_t n = 0; n < RGPU_VINFO_SIZE; n++)
		if (decode_n(b, n, &out, err, sizeof(err)) == 0)
			all = 0;
	ok(all, "info: every truncation (0..127 bytes) is rejected");
	like(err, "truncated", "info: truncation names itself (%s)", err);
	uint8_t longer[RGPU_VINFO_SIZE + 1];
	memcpy(longer, b, sizeof(b));
	longer[RGPU_VINFO_SIZE] = 0;
	ok(decode_n(longer, sizeof(longer), &out, err, sizeof(err)) < 0, "info: trailing byte rejected");

	struct { int off; uint8_t val; const char *what; } env[] = {
		{ 0, 0x00, "magic" }, { 4, 2, "version" }, { 6, 127, "length" },
	};
	for (size_t k = 0; k < sizeof(env) / sizeof(env[0]); k++) {
		uint8_t c[RGPU_VINFO_SIZE];
		memcpy(c, b, sizeof(c));
		c[env[k].off] = env[k].val;
		ok(decode_n(c, sizeof(c), &out, err, sizeof(err)) < 0, "info: wrong %s rejected (%s)",
		   env[k].what, err);
	}

	/* each range check, one field at a time */
	static const char *const what[] = {
		"ctrl qpn > 24 bits", "bulk qpn 0", "psn > 24 bits", "port 0", "link layer 3",
		"mtu 0", "mtu 6", "ctrl depth 1", "ctrl depth 5000", "ctrl msg size 16",
		"ctrl msg size 2 MiB", "ring slots 0", "ring slots 257", "slot size 100",
		"slot size 16 MiB", "ring addr 0", "ring addr wraps",
	};
	for (int k = 0; k < (int)(sizeof(what) / sizeof(what[0])); k++) {
		struct rgpu_vinfo i = good_info();
		switch (k) {
		case 0: i.ctrl_qpn = 1u << 24; break;
		case 1: i.bulk_qpn = 0; break;
		case 2: i.bulk_psn = 1u << 24; break;
		case 3: i.port = 0; break;
		case 4: i.link_layer = 3; break;
		case 5: i.mtu = 0; break;
		case 6: i.mtu = 6; break;
		case 7: i.ctrl_depth = 1; break;
		case 8: i.ctrl_depth = 5000; break;
		case 9: i.ctrl_msg_size = 16; break;
		case 10: i.ctrl_msg_size = 2u << 20; break;
		case 11: i.ring_slots = 0; break;
		case 12: i.ring_slots = 257; break;
		case 13: i.slot_size = 100; break;
		case 14: i.slot_size = 16u << 20; break;
		case 15: i.ring_addr = 0; break;
		default: i.ring_addr = ~0ull - 4096; break;
		}
		uint8_t c[RGPU_VINFO_SIZE];
		rgpu_vinfo_encode(&i, c);
		ok(decode_n(c, sizeof(c), &out, err, sizeof(err)) < 0, "info: %s rejected (%s)",
		   what[k], err);
	}

	/* a refusal needs only the envelope; its reason is clipped and
	 * terminated whatever the sender put there */
	struct rgpu_vinfo no = { .status = 1 };
	memset(no.reason, 'x', sizeof(no.reason));
	rgpu_vinfo_encode(&no, b);
	ok(decode_n(b, sizeof(b), &out, err, sizeof(err)) == 0 && out.status == 1 &&
		   strlen(out.reason) == RGPU_VREASON_LEN - 1,
	   "info: refusal decodes, unterminated reason clipped to %d", RGPU_VREASON_LEN - 1);
	memset(b + 80, 'y', RGPU_VREASON_LEN); /* raw unterminated bytes on the wire */
	ok(decode_n(b, sizeof(b), &out, err, sizeof(err)) == 0 &&
		   strlen(out.reason) == RGPU_VREASON_LEN - 1,
	   "info: unterminated reason from the wire is terminated");

	/* garbage: with random envelopes nothing decodes; with a valid
	 * envelope, whatever decodes as status 0 is within range */
	int garbage_ok = 1, fields_ok = 1, accepted = 0;
	for (int t = 0; t < 20000; t++) {
		uint8_t g[RGPU_VINFO_SIZE];
		for (size_t k = 0; k < sizeof(g); k++)
			g[k] = (uint8_t)rnd();
		if (t & 1) {
			memcpy(g, b, 8); /* valid magic, version, length */
			memset(g + 8, 0, 4); /* status 0: the fields count */
			if (t % 4 == 1) { /* mostly plausible, to get some accepted */
				struct rgpu_vinfo i = good_info();
				i.ctrl_depth = 2 + rnd() % 4095;
				i.ring_slots = 1 + rnd() % 256;
				i.slot_size = 4096 + rnd() % (RGPU_VIMM_MAXLEN - 4095);
				i.ring_addr = rnd() % 2 ? rnd() : 0;
				rgpu_vinfo_encode(&i, g);
			}
		} else if (g[0] == 0x52) {
			g[0] = 0; /* keep the envelope wrong */
		}
		if (decode_n(g, sizeof(g), &out, err, sizeof(err)) == 0) {
			if (!(t & 1))
				garbage_ok = 0;
			if (!out.status) {
				accepted++;
				if (out.ctrl_qpn > 0xffffff || out.ctrl_depth < 2 || out.ctrl_depth > 4096 ||
				    !out.ring_slots || out.ring_slots > 256 || out.slot_size < 4096 ||
				    out.slot_size > RGPU_VIMM_MAXLEN || !out.ring_addr)
					fields_ok = 0;
			}
		}
	}
	ok(garbage_ok, "info: 10000 garbage messages rejected");
	ok(fields_ok && accepted > 100, "info: %d accepted random messages all in range", accepted);

	/* ready */
	uint8_t r[RGPU_VREADY_SIZE];
	uint32_t st = 99;
	char reason[RGPU_VREASON_LEN];
	rgpu_vready_encode(0, "ignored", r);
	ok(rgpu_vready_decode(r, sizeof(r), &st, reason, err, sizeof(err)) == 0 && st == 0 &&
		   reason[0] == 0,
	   "ready: status 0 round trip");
	rgpu_vready_encode(7, "ibv_modify_qp(RTR): Invalid argument", r);
	ok(rgpu_vready_decode(r, sizeof(r), &st, reason, err, sizeof(err)) == 0 && st == 7,
	   "ready: failure round trip");
	is_str(reason, "ibv_modify_qp(RTR): Invalid argument", "ready: reason carried");
	ok(rgpu_vready_decode(r, sizeof(r) - 1, &st, reason, err, sizeof(err)) < 0,
	   "ready: short rejected");
	r[0] ^= 1;
	ok(rgpu_vready_decode(r, sizeof(r), &st, reason, err, sizeof(err)) < 0,
	   "ready: wrong magic rejected");
	rgpu_vinfo_encode(&in, b);
	ok(rgpu_vready_decode(b, RGPU_VREADY_SIZE, &st, reason, err, sizeof(err)) < 0,
	   "ready: an info message is not a ready message");
}

static void test_hdr_imm(void)
{
	uint8_t m[64];
	struct rgpu_vhdr h = { .type = RGPU_VMSG_DATA, .ctrl_ret = 65535, .slot_ret = 7,
			       .seq = 0x89abcdef, .len = 48 }, o;
	rgpu_vhdr_encode(&h, m);
	ok(rgpu_vhdr_decode(m, 64, &o) == 0 && o.type == h.type && o.ctrl_ret == 65535 &&
		   o.slot_ret == 7 && o.seq == 0x89abcdef && o.len == 48,
	   "hdr: DATA round trip");
	ok(rgpu_vhdr_decode(m, 63, &o) < 0, "hdr: DATA longer than the received bytes rejected");
	ok(rgpu_vhdr_decode(m, 15, &o) < 0, "hdr: fewer than 16 bytes rejected");
	h.len = 0;
	rgpu_vhdr_encode(&h, m);
	ok(rgpu_vhdr_decode(m, 64, &o) < 0, "hdr: empty DATA rejected");
	h.len = 0xffffffff;
	rgpu_vhdr_encode(&h, m);
	ok(rgpu_vhdr_decode(m, 64, &o) < 0, "hdr: huge DATA length rejected");
	h = (struct rgpu_vhdr){ .type = RGPU_VMSG_CREDIT, .ctrl_ret = 32 };
	rgpu_vhdr_encode(&h, m);
	ok(rgpu_vhdr_decode(m, 16, &o) == 0 && o.type == RGPU_VMSG_CREDIT && o.ctrl_ret == 32,
	   "hdr: CREDIT round trip");
	h.len = 1;
	rgpu_vhdr_encode(&h, m);
	ok(rgpu_vhdr_decode(m, 17, &o) < 0, "hdr: CREDIT with payload rejected");
	h.type = 9;
	h.len = 0;
	rgpu_vhdr_encode(&h, m);
	ok(rgpu_vhdr_decode(m, 16, &o) < 0, "hdr: unknown type rejected");

	uint32_t s8, len;
	rgpu_vimm_decode(rgpu_vimm_encode(0x12345, RGPU_VIMM_MAXLEN), &s8, &len);
	ok(s8 == 0x45 && len == RGPU_VIMM_MAXLEN, "imm: seq low byte and 24-bit length");
	rgpu_vimm_decode(rgpu_vimm_encode(0xff, 1u << 20), &s8, &len);
	ok(s8 == 0xff && len == 1u << 20, "imm: a full 1 MiB slot");
}

static void test_credit(void)
{
	struct rgpu_vcredit c;
	rgpu_vcredit_init(&c, 128);
	is_u64(c.threshold, 32, "credit: explicit return after a quarter of the depth");
	for (int k = 0; k < 127; k++) {
		if (!rgpu_vcredit_can_data(&c))
			break;
		rgpu_vcredit_use(&c);
	}
	is_u64(c.avail, 1, "credit: data stops with one credit left");
	ok(!rgpu_vcredit_can_data(&c) && rgpu_vcredit_can_credit(&c),
	   "credit: the last credit is for CREDIT messages");
	rgpu_vcredit_use(&c);
	ok(!rgpu_vcredit_can_credit(&c), "credit: none left");
	ok(rgpu_vcredit_grant(&c, 129) < 0 && c.avail == 0, "credit: granting more than depth rejected");
	ok(rgpu_vcredit_grant(&c, 128) == 0 && c.avail == 128, "credit: full grant accepted");
	ok(rgpu_vcredit_grant(&c, 1) < 0, "credit: grant above depth rejected");
	for (int k = 0; k < 31; k++)
		rgpu_vcredit_reposted(&c);
	ok(!rgpu_vcredit_need_explicit(&c), "credit: 31 owed is piggyback-only");
	rgpu_vcredit_reposted(&c);
	ok(rgpu_vcredit_need_explicit(&c), "credit: 32 owed wants a CREDIT");
	is_u64(rgpu_vcredit_take(&c), 32, "credit: take returns the owed");
	is_u64(c.owed, 0, "credit: and resets it");
	c.owed = 70000;
	is_u64(rgpu_vcredit_take(&c), 65535, "credit: take caps at the 16-bit field");
	is_u64(c.owed, 70000 - 65535, "credit: the rest stays owed");
	rgpu_vcredit_init(&c, 2);
	is_u64(c.threshold, 1, "credit: tiny depth still returns");
}

/* Two endpoints exchanging messages under the credit rules of
 * transport_verbs.c, with readers that lag at random: no side ever has
 * more messages unreturned than the peer posted, credits are conserved,
 * and everything sent is eventually read (no credit deadlock). */
#define SIMQ 4096
struct simside {
	struct rgpu_vcredit cred;
	uint32_t inbox[SIMQ]; /* messages delivered, each with its credit returns */
	uint8_t inbox_data[SIMQ];
	unsigned in_head, in_tail, unread; /* unread = DATA waiting for the app */
	unsigned sent_data, read_data, want_send;
};

static void sim_send(struct simside *from, struct simside *to, int data)
{
	uint16_t ret = rgpu_vcredit_take(&from->cred);
	rgpu_vcredit_use(&from->cred);
	to->inbox[to->in_tail % SIMQ] = ret;
	to->inbox_data[to->in_tail % SIMQ] = (uint8_t)data;
	to->in_tail++;
	if (data)
		from->sent_data++;
}

/* The completion handler: grants; CREDITs are re-posted at once. */
static int sim_deliver(struct simside *s)
{
	int bad = 0;
	while (s->in_head != s->in_tail) {
		uint32_t ret = s->inbox[s->in_head % SIMQ];
		if (rgpu_vcredit_grant(&s->cred, ret) < 0)
			bad = 1;
		if (s->inbox_data[s->in_head % SIMQ])
			s->unread++;
		else
			rgpu_vcredit_reposted(&s->cred);
		s->in_head++;
	}
	return bad;
}

static void test_credit_sim(void)
{
	struct simside s[2];
	memset(s, 0, sizeof(s));
	for (int k = 0; k < 2; k++) {
		rgpu_vcredit_init(&s[k].cred, 128);
		s[k].want_send = 20000;
	}
	int bad = 0, steps = 0, stuck = 0;
	while ((s[0].read_data < s[1].want_send || s[1].read_data < s[0].want_send) && steps < 2000000) {
		steps++;
		int k = (int)(rnd() & 1);
		struct simside *me = &s[k], *peer = &s[!k];
		bad |= sim_deliver(me);
		switch (rnd() % 3) {
		case 0: /* the app sends a burst */
			for (unsigned b = rnd() % 40; b && me->sent_data < me->want_send &&
						      rgpu_vcredit_can_data(&me->cred); b--)
				sim_send(me, peer, 1);
			break;
		case 1: /* the app reads some; buffers re-posted */
			for (unsigned b = rnd() % 40; b && me->unread; b--) {
				me->unread--;
				me->read_data++;
				rgpu_vcredit_reposted(&me->cred);
			}
			break;
		default:
			break;
		}
		if (rgpu_vcredit_need_explicit(&me->cred) && rgpu_vcredit_can_credit(&me->cred))
			sim_send(me, peer, 0);
		if (me->cred.avail > me->cred.depth)
			bad = 1;
	}
	if (s[0].read_data < s[1].want_send || s[1].read_data < s[0].want_send)
		stuck = 1;
	ok(!bad, "credit sim: no over-grant, never more outstanding than the depth");
	ok(!stuck, "credit sim: 2 x 20000 messages both ways all read (%d steps)", steps);
}

static void test_ring(void)
{
	struct rgpu_vring_tx t;
	rgpu_vring_tx_init(&t, 4);
	int seq[5];
	for (int k = 0; k < 5; k++)
		seq[k] = rgpu_vring_tx_acquire(&t);
	ok(seq[0] == 0 && seq[1] == 1 && seq[2] == 2 && seq[3] == 3 && seq[4] == -1,
	   "ring tx: slots in order, none past the ring");
	ok(rgpu_vring_tx_release(&t, 5) < 0, "ring tx: releasing more than in use rejected");
	ok(rgpu_vring_tx_release(&t, 2) == 0 && t.inuse == 2, "ring tx: release two");
	ok(rgpu_vring_tx_acquire(&t) == 0 && rgpu_vring_tx_acquire(&t) == 1 &&
		   rgpu_vring_tx_acquire(&t) == -1,
	   "ring tx: wraps around to slot 0");

	struct rgpu_vring_rx r;
	rgpu_vring_rx_init(&r, 4);
	is_u64(r.threshold, 1, "ring rx: small ring returns every slot");
	ok(rgpu_vring_rx_free(&r, 0) < 0, "ring rx: freeing an empty ring rejected");
	int a[5];
	for (int k = 0; k < 5; k++)
		a[k] = rgpu_vring_rx_arrive(&r);
	ok(a[0] == 0 && a[3] == 3 && a[4] == -1, "ring rx: arrivals in order, overrun detected");
	ok(rgpu_vring_rx_free(&r, 1) < 0, "ring rx: freeing out of order rejected");
	ok(rgpu_vring_rx_free(&r, 0) == 0 && rgpu_vring_rx_free(&r, 1) == 0 && r.owed == 2,
	   "ring rx: frees in order become owed");
	ok(rgpu_vring_rx_arrive(&r) == 0, "ring rx: a freed slot is reused");
	is_u64(rgpu_vring_rx_take(&r), 2, "ring rx: take the owed");
	ok(rgpu_vring_tx_release(&t, 2) == 0, "ring tx: the peer's returns free our slots");
	rgpu_vring_rx_init(&r, 32);
	is_u64(r.threshold, 4, "ring rx: 32 slots returned in fours");
}

/* ---- split + reassembly ---- */

struct msg {
	int bulk;
	uint32_t seq, len;
	uint8_t *data;
};

struct relctx {
	struct rgpu_vring_rx ring;
	int order_ok;
	unsigned released, fail_at;
};

static int rel(void *arg, uint8_t kind, uint32_t tag)
{
	struct relctx *r = arg;
	if (++r->released == r->fail_at)
		return -1;
	if (kind == 2 && rgpu_vring_rx_free(&r->ring, tag) < 0)
		r->order_ok = 0;
	return 0;
}

static void test_stream(void)
{
	struct rgpu_vstream *s = malloc(sizeof(*s));
	uint8_t out[64];
	struct relctx rc = { .order_ok = 1 };
	rgpu_vstream_init(s);
	ok(rgpu_vstream_read(s, out, sizeof(out), rel, &rc) == 0 && !rgpu_vstream_ready(s),
	   "stream: nothing to read at first");
	ok(rgpu_vstream_put(s, 1, "world", 5, 1, 1) == 0, "stream: a later message is held");
	ok(!rgpu_vstream_ready(s) && rgpu_vstream_read(s, out, sizeof(out), rel, &rc) == 0,
	   "stream: not readable before its predecessor");
	ok(rgpu_vstream_put(s, 1 + RGPU_VSTREAM_WINDOW, "x", 1, 1, 9) < 0,
	   "stream: a sequence number whose place is taken rejected");
	ok(rgpu_vstream_put(s, 2, "", 0, 1, 2) < 0, "stream: empty message rejected");
	ok(rgpu_vstream_put(s, 0, "hello ", 6, 1, 0) == 0 && rgpu_vstream_ready(s),
	   "stream: the missing message arrives");
	long n = rgpu_vstream_read(s, out, 4, rel, &rc);
	ok(n == 4 && !memcmp(out, "hell", 4) && rc.released == 0, "stream: partial read keeps the message");
	n = rgpu_vstream_read(s, out, sizeof(out), rel, &rc);
	ok(n == 7 && !memcmp(out, "o world", 7) && rc.released == 2,
	   "stream: the rest across both messages, each released once");
	rc.fail_at = 3;
	rgpu_vstream_put(s, 2, "ab", 2, 1, 0);
	rgpu_vstream_put(s, 3, "cd", 2, 1, 0);
	ok(rgpu_vstream_read(s, out, sizeof(out), rel, &rc) == -1, "stream: a failed release fails the read");

	/* Random iovec lists through the split, delivered through two
	 * "QPs" (each in order, interleaved at random), with the window
	 * bounded as credits bound it (128 ctrl + 32 slots), read back in
	 * random amounts: the bytes must match. */
	const size_t ctrl_max = RGPU_VERBS_CTRL_MSG - RGPU_VHDR_SIZE, slot = 1u << 20;
	int match = 1, ring_ok = 1, sizes_ok = 1;
	unsigned nmsg = 0, nbulk = 0, rounds = 60;
	size_t maxm = 0;
	for (unsigned round = 0; round < rounds; round++) {
		rgpu_vstream_init(s);
		struct relctx rr = { .order_ok = 1 };
		rgpu_vring_rx_init(&rr.ring, 32);
		/* every third round is long enough for the sequence numbers
		 * (8 bits in the immediate) to wrap several times */
		int cnt = round % 3 ? 1 + (int)(rnd() % 8) : 1024;
		struct iovec iov[1024];
		size_t total = 0;
		for (int k = 0; k < cnt; k++) {
			size_t l;
			switch (rnd() % 5) {
			case 0: l = 0; break;
			case 1: l = rnd() % 64; break;
			case 2: l = rnd() % (3 * ctrl_max); break;
			case 3: l = ctrl_max - 1 + rnd() % 3; break;
			default: l = rnd() % (cnt > 8 ? 64u << 10 : 5u << 20); break;
			}
			uint8_t *p = malloc(l ? l : 1);
			for (size_t q = 0; q < l; q++)
				p[q] = (uint8_t)(total + q + round);
			iov[k] = (struct iovec){ .iov_base = p, .iov_len = l };
			total += l;
		}
		/* split into messages */
		struct rgpu_viov cur;
		rgpu_viov_init(&cur, iov, cnt);
		size_t cap = 64, m = 0;
		struct msg *ms = malloc(cap * sizeof(*ms));
		for (;;) {
			size_t len;
			int k = rgpu_vsplit_next(&cur, ctrl_max, ctrl_max, slot, &len);
			if (k == RGPU_VSPLIT_NONE)
				break;
			if (!len || (k == RGPU_VSPLIT_CTRL && len > ctrl_max) ||
			    (k == RGPU_VSPLIT_BULK && (len > slot || len < ctrl_max)))
				sizes_ok = 0;
			if (m == cap)
				ms = realloc(ms, (cap *= 2) * sizeof(*ms));
			ms[m] = (struct msg){ .bulk = k == RGPU_VSPLIT_BULK, .seq = (uint32_t)m,
					      .len = (uint32_t)len, .data = malloc(len) };
			rgpu_viov_copy(&cur, ms[m].data, len);
			m++;
		}
		if (rgpu_viov_left(&cur))
			sizes_ok = 0;
		nmsg += (unsigned)m;
		if (m > maxm)
			maxm = m;
		/* The sender posts in sequence order as credits allow (127
		 * control messages, 32 slots unreleased); each QP delivers in
		 * order, the two interleaved at random. */
		size_t sp = 0, dq[2] = { 0, 0 };
		uint8_t *got = malloc(total ? total : 1);
		size_t have = 0, next_read = 0;
		unsigned sent_ctrl = 0, sent_bulk = 0;
		unsigned idle = 0;
		while (have < total) {
			if (++idle > 100000) {
				diag("round %u: the stream stalled at byte %zu of %zu", round, have, total);
				match = 0;
				break;
			}
			for (unsigned b = rnd() % 4; b && sp < m; b--) {
				if (ms[sp].bulk ? sent_bulk >= 32 : sent_ctrl >= 127)
					break;
				if (ms[sp].bulk)
					sent_bulk++;
				else
					sent_ctrl++;
				sp++;
			}
			int pick = (int)(rnd() & 1);
			for (int tries = 0; tries < 2; tries++, pick = !pick) {
				while (dq[pick] < sp && ms[dq[pick]].bulk != pick)
					dq[pick]++;
				if (dq[pick] >= sp)
					continue;
				struct msg *x = &ms[dq[pick]];
				int slotno = 0;
				if (pick) {
					slotno = rgpu_vring_rx_arrive(&rr.ring);
					if (slotno < 0)
						ring_ok = 0;
					nbulk++;
				}
				/* the low 8 bits are all the imm carries */
				uint32_t sq = pick ? x->seq & 0xff : x->seq;
				if (rgpu_vstream_put(s, sq, x->data, x->len, pick ? 2 : 1,
						     (uint32_t)slotno) < 0)
					match = 0;
				dq[pick]++;
				break;
			}
			size_t want = 1 + rnd() % (2u << 20);
			if (want > total - have)
				want = total - have;
			unsigned before = rr.released;
			long r = rgpu_vstream_read(s, got + have, want, rel, &rr);
			if (r < 0 || !match) {
				match = 0;
				break;
			}
			/* released messages hand their credit back */
			for (unsigned q = before; q < rr.released; q++, next_read++) {
				if (ms[next_read].bulk)
					sent_bulk--;
				else
					sent_ctrl--;
			}
			if (r > 0)
				idle = 0;
			have += (size_t)r;
		}
		if (!rr.order_ok)
			ring_ok = 0;
		size_t pos = 0;
		for (int k = 0; k < cnt; k++) {
			if (match && memcmp(got + pos, iov[k].iov_base, iov[k].iov_len))
				match = 0;
			pos += iov[k].iov_len;
			free(iov[k].iov_base);
		}
		free(got);
		for (size_t k = 0; k < m; k++)
			free(ms[k].data);
		free(ms);
		if (!match) {
			diag("round %u: %zu bytes, %zu messages", round, total, m);
			break;
		}
	}
	ok(sizes_ok, "split: control messages <= %zu bytes, bulk writes %zu..%zu bytes, all bytes taken",
	   ctrl_max, ctrl_max, slot);
	ok(match, "stream: %u rounds, %u messages (%u bulk), reordered across QPs, bytes intact",
	   rounds, nmsg, nbulk);
	ok(maxm > 2 * RGPU_VSTREAM_WINDOW, "stream: a round of %zu messages wrapped the window", maxm);
	ok(ring_ok, "stream: ring slots filled and freed strictly in order");

	/* split details */
	uint8_t small[10] = { 0 };
	const size_t bigsz = 3u << 20;
	uint8_t *big = calloc(1, bigsz);
	struct iovec v3[] = { { small, 10 }, { small, 0 }, { small, 10 }, { big, bigsz },
			      { small, 5 } };
	struct rgpu_viov c;
	size_t len;
	rgpu_viov_init(&c, v3, 5);
	ok(rgpu_vsplit_next(&c, ctrl_max, ctrl_max, slot, &len) == RGPU_VSPLIT_CTRL && len == 20,
	   "split: small pieces packed, stopping before a bulk piece");
	uint8_t tmp[20];
	rgpu_viov_copy(&c, tmp, 20);
	ok(rgpu_vsplit_next(&c, ctrl_max, ctrl_max, slot, &len) == RGPU_VSPLIT_BULK && len == slot,
	   "split: a large piece goes in slot-sized bulk writes");
	is_u64(rgpu_viov_left(&c), bigsz + 5, "split: left counts every remaining byte");
	free(big);
	struct iovec none[] = { { small, 0 } };
	rgpu_viov_init(&c, none, 1);
	ok(rgpu_vsplit_next(&c, ctrl_max, ctrl_max, slot, &len) == RGPU_VSPLIT_NONE && !len,
	   "split: empty iovecs give nothing");
	free(s);
}

static void test_mode(void)
{
	enum rgpu_tmode m;
	char err[128];
	ok(rgpu_transport_mode(NULL, &m, err, sizeof(err)) == 0 && m == RGPU_TMODE_AUTO, "mode: unset is auto");
	ok(rgpu_transport_mode("", &m, err, sizeof(err)) == 0 && m == RGPU_TMODE_AUTO, "mode: empty is auto");
	ok(rgpu_transport_mode("TCP", &m, err, sizeof(err)) == 0 && m == RGPU_TMODE_TCP, "mode: tcp");
	ok(rgpu_transport_mode("verbs", &m, err, sizeof(err)) == 0 && m == RGPU_TMODE_VERBS, "mode: verbs");
	ok(rgpu_transport_mode("auto", &m, err, sizeof(err)) == 0 && m == RGPU_TMODE_AUTO, "mode: auto");
	ok(rgpu_transport_mode("rdma!", &m, err, sizeof(err)) < 0, "mode: unknown rejected");
	like(err, "RGPU_TRANSPORT='rdma!'", "mode: the message quotes the value");
}

/* ---- against libibverbs on this machine, and the TCP fallback ---- */

static int have_rdma_sysfs(void)
{
	DIR *d = opendir("/sys/class/infiniband");
	if (!d)
		return 0;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

struct pair {
	struct rgpu_conn *a, *b;
};

static void tcp_pair(struct pair *p)
{
	char err[256];
	int lfd = rgpu_tcp_listen("127.0.0.1:0", err, sizeof(err));
	if (lfd < 0)
		BAIL("listen: %s", err);
	struct sockaddr_in sa;
	socklen_t sl = sizeof(sa);
	getsockname(lfd, (struct sockaddr *)&sa, &sl);
	p->a = rgpu_tcp_connect("127.0.0.1", ntohs(sa.sin_port), 2000, err, sizeof(err));
	p->b = rgpu_tcp_accept(lfd);
	close(lfd);
	if (!p->a || !p->b)
		BAIL("tcp pair: %s", err);
}

struct up {
	struct rgpu_conn *tcp, *res;
	int server;
	struct rgpu_error e;
};

static void *upgrade_thread(void *arg)
{
	struct up *u = arg;
	u->res = rgpu_verbs_upgrade(u->tcp, u->server, &u->e);
	return NULL;
}

static void test_device(void)
{
	char why[256] = "";
	int avail = rgpu_verbs_available(why, sizeof(why));
	diag("rgpu_verbs_available: %d (%s)", avail, why);
	if (have_rdma_sysfs()) {
		ok(1, "RDMA devices in /sys/class/infiniband: availability not asserted (%s)", why);
	} else {
		is_i64(avail, 0, "no RDMA devices here: rgpu_verbs_available says no");
		like(why, "no RDMA devices", "and says why");
	}

	/* both ends upgrade: without devices both refuse, in step, and the
	 * TCP connection carries on */
	struct pair p;
	tcp_pair(&p);
	struct up ua = { .tcp = p.a }, ub = { .tcp = p.b, .server = 1 };
	pthread_t th;
	pthread_create(&th, NULL, upgrade_thread, &ub);
	upgrade_thread(&ua);
	pthread_join(th, NULL);
	if (!avail) {
		ok(!ua.res && !ub.res, "upgrade without devices: both ends fall back");
		like(ua.e.text, "verbs unavailable here: no RDMA devices", "client's reason (%s)", ua.e.text);
		like(ub.e.text, "verbs unavailable here", "server's reason (%s)", ub.e.text);
		struct iovec iov = { "after", 6 };
		char buf[6] = "";
		ok(rgpu_sendv(p.a, &iov, 1) == 0 && rgpu_recv(p.b, buf, 6) == 0 && !strcmp(buf, "after"),
		   "TCP still in step after the fallback (a->b)");
		memset(buf, 0, sizeof(buf));
		ok(rgpu_sendv(p.b, &iov, 1) == 0 && rgpu_recv(p.a, buf, 6) == 0 && !strcmp(buf, "after"),
		   "TCP still in step after the fallback (b->a)");
	}
	rgpu_conn_close(ua.res ? ua.res : p.a);
	rgpu_conn_close(ub.res ? ub.res : p.b);

	/* a raw peer sees a well-formed refusal, naming the reason */
	tcp_pair(&p);
	struct up u = { .tcp = p.a };
	pthread_create(&th, NULL, upgrade_thread, &u);
	uint8_t b[RGPU_VINFO_SIZE];
	struct rgpu_vinfo mine, theirs;
	char err[160];
	int rcv = rgpu_recv(p.b, b, sizeof(b));
	ok(rcv == 0 && rgpu_vinfo_decode(b, sizeof(b), &theirs, err, sizeof(err)) == 0,
	   "the info on the wire decodes");
	if (!avail) {
		ok(theirs.status != 0, "and is a refusal");
		like(theirs.reason, "no RDMA devices", "with the reason (%s)", theirs.reason);
	}
	/* answer with a refusal of our own: no ready phase follows */
	mine = (struct rgpu_vinfo){ .status = 1 };
	snprintf(mine.reason, sizeof(mine.reason), "test peer says no");
	rgpu_vinfo_encode(&mine, b);
	struct iovec iov = { b, sizeof(b) };
	rgpu_sendv(p.b, &iov, 1);
	pthread_join(th, NULL);
	ok(!u.res, "a refusing peer: fallback (%s)", u.e.text);
	is_i64(u.e.code, RGPU_E_UNAVAILABLE, "a refusal leaves TCP usable (code)");
	if (avail)
		like(u.e.text, "test peer says no", "the peer's reason is reported");
	struct iovec iov2 = { "x", 1 };
	char c1 = 0;
	ok(rgpu_sendv(p.a, &iov2, 1) == 0 && rgpu_recv(p.b, &c1, 1) == 0 && c1 == 'x',
	   "TCP in step after a refused upgrade");
	rgpu_conn_close(p.a);
	rgpu_conn_close(p.b);

	/* garbage from the peer: fallback, and TCP is shut down because the
	 * stream can no longer be trusted */
	tcp_pair(&p);
	u = (struct up){ .tcp = p.a };
	pthread_create(&th, NULL, upgrade_thread, &u);
	rgpu_recv(p.b, b, sizeof(b));
	memset(b, 0x5a, sizeof(b));
	rgpu_sendv(p.b, &iov, 1);
	pthread_join(th, NULL);
	ok(!u.res, "garbage info: no verbs connection");
	like(u.e.text, "bad verbs connection info", "garbage named (%s)", u.e.text);
	is_i64(u.e.code, RGPU_E_BROKEN, "garbage: the connection is broken (code)");
	ok(rgpu_recv(p.a, &c1, 1) < 0, "garbage info: TCP shut down, the next read fails");
	rgpu_conn_close(p.a);
	rgpu_conn_close(p.b);

	/* the peer hangs up mid-exchange */
	tcp_pair(&p);
	u = (struct up){ .tcp = p.a };
	pthread_create(&th, NULL, upgrade_thread, &u);
	rgpu_recv(p.b, b, 10);
	rgpu_conn_close(p.b);
	pthread_join(th, NULL);
	ok(!u.res, "peer gone mid-exchange: no verbs connection");
	like(u.e.text, "exchange over TCP failed", "and says so (%s)", u.e.text);
	is_i64(u.e.code, RGPU_E_BROKEN, "peer gone: the connection is broken (code)");
	rgpu_conn_close(p.a);
}

int main(void)
{
	test_info();
	test_hdr_imm();
	test_credit();
	test_credit_sim();
	test_ring();
	test_stream();
	test_mode();
	test_device();
	return tap_done();
}
