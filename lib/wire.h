/* Field encoding for frame payloads.  Writers grow a buffer; readers walk a
 * received payload and fail (sticky) on the first field that does not fit,
 * so a handler reads all its fields and checks rd_ok() once before acting. */
#ifndef RGPU_WIRE_H
#define RGPU_WIRE_H

#include <stddef.h>
#include <stdint.h>

struct wbuf {
	uint8_t *data;
	size_t len, cap;
	int oom;
};

void wbuf_init(struct wbuf *w);
void wbuf_free(struct wbuf *w);
void wbuf_reset(struct wbuf *w);
void put_u32(struct wbuf *w, uint32_t v);
void put_i32(struct wbuf *w, int32_t v);
void put_u64(struct wbuf *w, uint64_t v);
void put_f32(struct wbuf *w, float v);
/* u32 length + bytes */
void put_bytes(struct wbuf *w, const void *p, size_t n);
/* u32 length (including the NUL) + bytes + NUL */
void put_str(struct wbuf *w, const char *s);
/* raw bytes, no length prefix */
void put_raw(struct wbuf *w, const void *p, size_t n);

struct rd {
	const uint8_t *p;
	size_t left;
	int bad;
};

void rd_init(struct rd *r, const void *p, size_t n);
uint32_t get_u32(struct rd *r);
int32_t get_i32(struct rd *r);
uint64_t get_u64(struct rd *r);
float get_f32(struct rd *r);
/* Returns a pointer into the payload; *n receives the length. */
const void *get_bytes(struct rd *r, size_t *n);
/* A NUL-terminated string of at most maxlen bytes, or NULL (and bad). */
const char *get_str(struct rd *r, size_t maxlen);
const void *get_raw(struct rd *r, size_t n);
/* All fields fit. */
static inline int rd_ok(const struct rd *r) { return !r->bad; }
/* All fields fit and nothing is left over. */
static inline int rd_done(const struct rd *r) { return !r->bad && r->left == 0; }

#endif
