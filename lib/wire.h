/* Field encoding for frame payloads.  Writers grow a buffer; readers walk a
 * received payload and fail (sticky) on the first field that does not fit,
 * so a handler reads all its fields and checks rd_ok() once before acting.
 * The fixed-size fields are inline: every launch decodes a dozen of them
 * on rgpud's side (function calls were a fifth of its own work per
 * launch). */
#ifndef RGPU_WIRE_H
#define RGPU_WIRE_H

#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct wbuf {
	uint8_t *data;
	size_t len, cap;
	int oom;
};

void wbuf_init(struct wbuf *w);
void wbuf_free(struct wbuf *w);
void wbuf_reset(struct wbuf *w);
/* put_raw when the buffer must grow (or has failed) */
void put_raw_grow(struct wbuf *w, const void *p, size_t n);
/* raw bytes, no length prefix */
static inline void put_raw(struct wbuf *w, const void *p, size_t n)
{
	if (n && !w->oom && w->cap - w->len >= n) {
		memcpy(w->data + w->len, p, n);
		w->len += n;
	} else if (n) {
		put_raw_grow(w, p, n);
	}
}
static inline void put_u32(struct wbuf *w, uint32_t v)
{
	v = htole32(v);
	put_raw(w, &v, 4);
}
static inline void put_i32(struct wbuf *w, int32_t v) { put_u32(w, (uint32_t)v); }
static inline void put_u64(struct wbuf *w, uint64_t v)
{
	v = htole64(v);
	put_raw(w, &v, 8);
}
void put_f32(struct wbuf *w, float v);
/* u32 length + bytes */
void put_bytes(struct wbuf *w, const void *p, size_t n);
/* u32 length (including the NUL) + bytes + NUL */
void put_str(struct wbuf *w, const char *s);

struct rd {
	const uint8_t *p;
	size_t left;
	int bad;
};

void rd_init(struct rd *r, const void *p, size_t n);
/* n bytes of the payload (a pointer into it), or NULL (and bad) */
static inline const void *get_raw(struct rd *r, size_t n)
{
	if (r->bad || n > r->left) {
		r->bad = 1;
		return NULL;
	}
	const void *p = r->p;
	r->p += n;
	r->left -= n;
	return p;
}
static inline uint32_t get_u32(struct rd *r)
{
	uint32_t v = 0;
	const void *p = get_raw(r, 4);
	if (p)
		memcpy(&v, p, 4);
	return le32toh(v);
}
static inline int32_t get_i32(struct rd *r) { return (int32_t)get_u32(r); }
static inline uint64_t get_u64(struct rd *r)
{
	uint64_t v = 0;
	const void *p = get_raw(r, 8);
	if (p)
		memcpy(&v, p, 8);
	return le64toh(v);
}
float get_f32(struct rd *r);
/* Returns a pointer into the payload; *n receives the length. */
const void *get_bytes(struct rd *r, size_t *n);
/* A NUL-terminated string of at most maxlen bytes, or NULL (and bad). */
const char *get_str(struct rd *r, size_t maxlen);
/* All fields fit. */
static inline int rd_ok(const struct rd *r) { return !r->bad; }
/* All fields fit and nothing is left over. */
static inline int rd_done(const struct rd *r) { return !r->bad && r->left == 0; }

#endif
