/* An error as a category the code can act on and a sentence for people:
 * callers branch on code, never on the words of text. */
#ifndef RGPU_ERROR_H
#define RGPU_ERROR_H

#include <stddef.h>

enum rgpu_errcode {
	RGPU_E_NONE = 0,
	RGPU_E_CLOSED,      /* the peer closed the connection */
	RGPU_E_TIMEOUT,     /* the peer did not answer in time */
	RGPU_E_FOREIGN,     /* the peer does not speak the rgpu protocol */
	RGPU_E_PROTO,       /* an rgpu peer broke the protocol */
	RGPU_E_SYSTEM,      /* a system call failed (text names errno) */
	RGPU_E_UNAVAILABLE, /* not available; the connection is still usable */
	RGPU_E_BROKEN,      /* failed midway; the connection is unusable */
};

struct rgpu_error {
	enum rgpu_errcode code;
	char text[256];
};

/* Sets both fields (printf-style text). */
void rgpu_error_set(struct rgpu_error *e, enum rgpu_errcode code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
