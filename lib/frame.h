/* Frames on a connection: header encoding and whole-frame send/receive.
 * Payloads can be sent from two separate buffers (fields + bulk data) so
 * bulk data is never copied into a message buffer. */
#ifndef RGPU_FRAME_H
#define RGPU_FRAME_H

#include "proto.h"
#include "transport.h"

#include <stddef.h>
#include <stdint.h>

void rgpu_hdr_encode(const struct rgpu_hdr *h, uint8_t out[RGPU_HDR_SIZE]);
void rgpu_hdr_decode(const uint8_t in[RGPU_HDR_SIZE], struct rgpu_hdr *h);

/* Sends header + a + b (either may be empty). 0 or -1. */
int rgpu_frame_send(struct rgpu_conn *c, uint16_t op, uint32_t flags, uint64_t id,
		    const void *a, size_t alen, const void *b, size_t blen);

enum rgpu_hdr_status {
	RGPU_HDR_OK = 0,
	RGPU_HDR_EOF = -1,       /* connection closed or failed */
	RGPU_HDR_BAD_MAGIC = -2, /* not an rgpu peer */
	RGPU_HDR_TOO_LONG = -3,  /* payload length over RGPU_MAX_PAYLOAD */
};
/* Receives and checks one header; the payload is left for the caller.  The
 * version is not checked here: HELLO must be able to answer a mismatch. */
int rgpu_frame_recv_hdr(struct rgpu_conn *c, struct rgpu_hdr *h);
/* Reads and discards n payload bytes. */
int rgpu_frame_skip(struct rgpu_conn *c, size_t n);

#endif
