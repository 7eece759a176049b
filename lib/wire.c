#include "wire.h"

#include <endian.h>
#include <stdlib.h>
#include <string.h>

void wbuf_init(struct wbuf *w) { memset(w, 0, sizeof(*w)); }

void wbuf_free(struct wbuf *w)
{
	free(w->data);
	wbuf_init(w);
}

void wbuf_reset(struct wbuf *w)
{
	w->len = 0;
	w->oom = 0;
}

static uint8_t *wbuf_grow(struct wbuf *w, size_t n)
{
	if (w->oom)
		return NULL;
	if (n > SIZE_MAX - w->len) {
		w->oom = 1;
		return NULL;
	}
	if (w->len + n > w->cap) {
		size_t cap = w->cap ? w->cap : 256;
		while (cap < w->len + n)
			cap = cap > SIZE_MAX / 2 ? w->len + n : cap * 2;
		uint8_t *d = realloc(w->data, cap);
		if (!d) {
			w->oom = 1;
			return NULL;
		}
		w->data = d;
		w->cap = cap;
	}
	uint8_t *p = w->data + w->len;
	w->len += n;
	return p;
}

void put_raw_grow(struct wbuf *w, const void *p, size_t n)
{
	if (!n)
		return; /* nothing to add: no offset on a still-NULL buffer */
	uint8_t *d = wbuf_grow(w, n);
	if (d)
		memcpy(d, p, n);
}

void put_f32(struct wbuf *w, float v)
{
	uint32_t u;
	memcpy(&u, &v, 4);
	put_u32(w, u);
}

void put_bytes(struct wbuf *w, const void *p, size_t n)
{
	if (n > UINT32_MAX) {
		w->oom = 1;
		return;
	}
	put_u32(w, (uint32_t)n);
	put_raw(w, p, n);
}

void put_str(struct wbuf *w, const char *s)
{
	if (!s)
		s = "";
	put_bytes(w, s, strlen(s) + 1);
}

void rd_init(struct rd *r, const void *p, size_t n)
{
	r->p = p;
	r->left = n;
	r->bad = 0;
}

float get_f32(struct rd *r)
{
	uint32_t u = get_u32(r);
	float f;
	memcpy(&f, &u, 4);
	return f;
}

const void *get_bytes(struct rd *r, size_t *n)
{
	uint32_t len = get_u32(r);
	const void *p = get_raw(r, len);
	*n = p ? len : 0;
	return p;
}

const char *get_str(struct rd *r, size_t maxlen)
{
	size_t n;
	const char *s = get_bytes(r, &n);
	if (!s || n == 0 || n - 1 > maxlen || s[n - 1] != '\0' ||
	    memchr(s, '\0', n - 1)) {
		r->bad = 1;
		return NULL;
	}
	return s;
}
