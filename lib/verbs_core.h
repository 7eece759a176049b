/* The device-independent half of the verbs transport: the setup messages
 * exchanged over TCP, the per-message headers, credit and ring-slot
 * accounting, the sender's split of a byte stream into messages and the
 * receiver's reassembly of messages back into a byte stream.  Nothing here
 * touches libibverbs, so all of it is unit-tested on machines without RDMA
 * hardware (test/unit/t_verbs.c); transport_verbs.c only adds the device
 * calls around it.  docs/transports.md describes the protocol. */
#ifndef RGPU_VERBS_CORE_H
#define RGPU_VERBS_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* ---- tuning (the thesis: 2 QPs per connection, 128-deep queues) ---- */
#define RGPU_VERBS_QDEPTH     128u          /* WRs per send and receive queue */
#define RGPU_VERBS_CTRL_MSG   8192u         /* bytes per control message */
#define RGPU_VERBS_SLOTS      32u           /* receive ring slots */
#define RGPU_VERBS_SLOT_SIZE  (1024u * 1024) /* bytes per ring slot */
#define RGPU_VERBS_BOUNCE     16u           /* registered send buffers for bulk */

/* ---- connection info: one fixed-layout message each way over TCP ----
 * All integers little-endian.  Layout (offset size field):
 *   0  4 magic "RGVI"       4  2 version (1)     6  2 length (128)
 *   8  4 status (0 = ready to connect; otherwise reason says why not)
 *  12  1 port   13  1 link layer (1 IB, 2 Ethernet)  14 1 path MTU (ibv_mtu)
 *  15  1 gid index   16  2 lid   18  2 zero
 *  20  4 ctrl qpn  24  4 ctrl psn  28  4 bulk qpn  32  4 bulk psn
 *  36  4 ctrl depth (receives posted = send credits granted to the peer)
 *  40  4 ctrl message size  44  4 ring slots  48  4 slot size
 *  52  4 ring rkey  56  8 ring address  64 16 gid
 *  80 48 reason (NUL-padded text, only meaningful when status != 0)  */
#define RGPU_VINFO_MAGIC   0x49564752u /* "RGVI" */
#define RGPU_VINFO_VERSION 1
#define RGPU_VINFO_SIZE    128
#define RGPU_VREASON_LEN   48

struct rgpu_vinfo {
	uint32_t status;
	uint8_t port, link_layer, mtu, gid_index;
	uint16_t lid;
	uint32_t ctrl_qpn, ctrl_psn, bulk_qpn, bulk_psn;
	uint32_t ctrl_depth, ctrl_msg_size, ring_slots, slot_size, ring_rkey;
	uint64_t ring_addr;
	uint8_t gid[16];
	char reason[RGPU_VREASON_LEN];
};

void rgpu_vinfo_encode(const struct rgpu_vinfo *in, uint8_t out[RGPU_VINFO_SIZE]);
/* 0, or -1 with a sentence in err: short, wrong magic/version/length, or a
 * status-0 message whose fields are out of range.  A refusal (status != 0)
 * only needs a valid envelope; its reason is NUL-terminated on decode. */
int rgpu_vinfo_decode(const uint8_t *in, size_t n, struct rgpu_vinfo *out,
		      char *err, size_t errlen);

/* Second phase: after moving its QPs to RTS each side says whether it is
 * ready.  Layout: 0 4 magic "RGVR", 4 2 version, 6 2 length (64),
 * 8 4 status, 12 4 zero, 16 48 reason. */
#define RGPU_VREADY_MAGIC 0x52564752u /* "RGVR" */
#define RGPU_VREADY_SIZE  64
void rgpu_vready_encode(uint32_t status, const char *reason, uint8_t out[RGPU_VREADY_SIZE]);
int rgpu_vready_decode(const uint8_t *in, size_t n, uint32_t *status,
		       char reason[RGPU_VREASON_LEN], char *err, size_t errlen);

/* ---- control message header (16 bytes, little-endian) ----
 *   0 1 type  1 1 zero  2 2 control credits returned  4 2 ring slots returned
 *   6 2 zero  8 4 stream sequence number  12 4 payload length
 * DATA carries stream bytes; CREDIT only returns credits (no sequence
 * number, no payload). */
#define RGPU_VHDR_SIZE 16
enum { RGPU_VMSG_DATA = 1, RGPU_VMSG_CREDIT = 2 };
struct rgpu_vhdr {
	uint8_t type;
	uint16_t ctrl_ret, slot_ret;
	uint32_t seq, len;
};
void rgpu_vhdr_encode(const struct rgpu_vhdr *h, uint8_t out[RGPU_VHDR_SIZE]);
/* Checks the header against the received byte count: 0 or -1. */
int rgpu_vhdr_decode(const uint8_t *in, size_t byte_len, struct rgpu_vhdr *h);

/* Immediate data of a bulk RDMA write: low 8 bits of the stream sequence
 * number and a 24-bit length (the slot is implied: writes fill the peer's
 * ring in order, and RC delivers them in order). */
#define RGPU_VIMM_MAXLEN 0xffffffu
uint32_t rgpu_vimm_encode(uint32_t seq, uint32_t len);
void rgpu_vimm_decode(uint32_t imm, uint32_t *seq8, uint32_t *len);

/* ---- send credits on the control QP ----
 * The receiver posts `depth` receives; the sender may have that many
 * messages unreturned.  The last credit is kept for CREDIT messages, so a
 * side that has used up its data credits can still return the peer's
 * credits (otherwise both could wait for each other).  Receivers count
 * re-posted buffers as `owed` and return them on every outgoing message,
 * or in an explicit CREDIT once `threshold` are owed. */
struct rgpu_vcredit {
	uint32_t depth, avail, owed, threshold;
};
void rgpu_vcredit_init(struct rgpu_vcredit *c, uint32_t depth);
int rgpu_vcredit_can_data(const struct rgpu_vcredit *c);
int rgpu_vcredit_can_credit(const struct rgpu_vcredit *c);
void rgpu_vcredit_use(struct rgpu_vcredit *c);
/* Credits returned by the peer: 0, or -1 if that would exceed depth. */
int rgpu_vcredit_grant(struct rgpu_vcredit *c, uint32_t n);
/* A receive buffer was re-posted. */
void rgpu_vcredit_reposted(struct rgpu_vcredit *c);
int rgpu_vcredit_need_explicit(const struct rgpu_vcredit *c);
/* The owed count to put in an outgoing header (at most 65535); resets it. */
uint16_t rgpu_vcredit_take(struct rgpu_vcredit *c);

/* ---- the receive ring, seen from both ends ----
 * Slots are used strictly in order: the sender's head, the receiver's
 * arrivals and frees all advance modulo nslots. */
struct rgpu_vring_tx {
	uint32_t nslots, head, inuse;
};
void rgpu_vring_tx_init(struct rgpu_vring_tx *r, uint32_t nslots);
/* The next slot to write, or -1 if all are in use (wait for returns). */
int rgpu_vring_tx_acquire(struct rgpu_vring_tx *r);
/* 0, or -1 if more slots are returned than are in use. */
int rgpu_vring_tx_release(struct rgpu_vring_tx *r, uint32_t n);

struct rgpu_vring_rx {
	uint32_t nslots, head, tail, filled, owed, threshold;
};
void rgpu_vring_rx_init(struct rgpu_vring_rx *r, uint32_t nslots);
/* A write landed: its slot, or -1 if the sender overran the ring. */
int rgpu_vring_rx_arrive(struct rgpu_vring_rx *r);
/* The reader finished slot `slot`: 0, or -1 if it is not the oldest. */
int rgpu_vring_rx_free(struct rgpu_vring_rx *r, uint32_t slot);
int rgpu_vring_rx_need_explicit(const struct rgpu_vring_rx *r);
uint16_t rgpu_vring_rx_take(struct rgpu_vring_rx *r);

/* ---- sender: split an iovec stream into messages ---- */
struct rgpu_viov {
	const struct iovec *iov;
	int cnt, i;
	size_t off;
};
void rgpu_viov_init(struct rgpu_viov *c, const struct iovec *iov, int cnt);
size_t rgpu_viov_left(const struct rgpu_viov *c);
/* Copies n bytes (n <= left) into dst and advances. */
void rgpu_viov_copy(struct rgpu_viov *c, void *dst, size_t n);
enum { RGPU_VSPLIT_NONE = 0, RGPU_VSPLIT_CTRL = 1, RGPU_VSPLIT_BULK = 2 };
/* The next message: a piece of at least bulk_min contiguous bytes goes as
 * a bulk write of up to bulk_max; smaller pieces are packed together into
 * a control message of up to ctrl_max (stopping before a bulk-sized one). */
int rgpu_vsplit_next(const struct rgpu_viov *c, size_t bulk_min, size_t ctrl_max,
		     size_t bulk_max, size_t *len);

/* ---- receiver: messages (in any order across the two QPs) back into a
 * byte stream, in sequence-number order ---- */
#define RGPU_VSTREAM_WINDOW 256 /* > control depth + ring slots in flight */
struct rgpu_vstream_ent {
	const uint8_t *data;
	uint32_t len, off;
	uint8_t present, kind;
	uint32_t tag;
};
struct rgpu_vstream {
	uint32_t next; /* sequence number the stream continues with */
	struct rgpu_vstream_ent ent[RGPU_VSTREAM_WINDOW];
};
void rgpu_vstream_init(struct rgpu_vstream *s);
/* Files message seq (only its low 8 bits matter): 0, or -1 for an empty
 * message or one whose place is already taken (a protocol error). */
int rgpu_vstream_put(struct rgpu_vstream *s, uint32_t seq, const void *data, uint32_t len,
		     uint8_t kind, uint32_t tag);
/* Whether the next stream byte is here. */
int rgpu_vstream_ready(const struct rgpu_vstream *s);
/* Copies up to n contiguous stream bytes; each message used up is handed
 * to release(kind, tag) (re-post its buffer, free its slot); a release
 * that fails stops the copy and makes this return -1. */
typedef int (*rgpu_vrelease_fn)(void *ctx, uint8_t kind, uint32_t tag);
long rgpu_vstream_read(struct rgpu_vstream *s, void *buf, size_t n, rgpu_vrelease_fn release,
		       void *ctx);

/* ---- run-time selection: RGPU_TRANSPORT=tcp|verbs|auto ---- */
enum rgpu_tmode { RGPU_TMODE_TCP = 0, RGPU_TMODE_VERBS = 1, RGPU_TMODE_AUTO = 2 };
/* NULL or "" is auto; 0 or -1 for an unknown name (err says so). */
int rgpu_transport_mode(const char *s, enum rgpu_tmode *mode, char *err, size_t errlen);

#endif
