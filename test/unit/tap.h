/* A tiny TAP producer for the unit tests.  Each check prints "ok N - what"
 * or "not ok N - what" with the file, line and the values involved;
 * tap_done() prints the plan and returns the exit status (1 if anything
 * failed), so each unit program ends with `return tap_done();`. */
#ifndef RGPU_TEST_TAP_H
#define RGPU_TEST_TAP_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap_n, tap_failed;

static inline int tap_check(int cond, const char *file, int line, const char *expr,
			    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static inline int tap_check(int cond, const char *file, int line, const char *expr,
			    const char *fmt, ...)
{
	va_list ap;
	printf("%s %d - ", cond ? "ok" : "not ok", ++tap_n);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	if (!cond) {
		tap_failed++;
		printf("#   failed at %s:%d: %s\n", file, line, expr);
	}
	fflush(stdout);
	return cond;
}

/* ok(cond, "description %d", ...) */
#define ok(cond, ...) tap_check(!!(cond), __FILE__, __LINE__, #cond, __VA_ARGS__)

/* Integer equality, printing both values on failure. */
#define is_u64(got, want, ...)                                                  \
	do {                                                                    \
		unsigned long long g_ = (unsigned long long)(got);              \
		unsigned long long w_ = (unsigned long long)(want);             \
		if (!tap_check(g_ == w_, __FILE__, __LINE__, #got " == " #want, \
			       __VA_ARGS__))                                    \
			printf("#   got %llu (0x%llx), want %llu (0x%llx)\n", g_, \
			       g_, w_, w_);                                     \
	} while (0)

#define is_i64(got, want, ...)                                                  \
	do {                                                                    \
		long long g_ = (long long)(got);                                \
		long long w_ = (long long)(want);                               \
		if (!tap_check(g_ == w_, __FILE__, __LINE__, #got " == " #want, \
			       __VA_ARGS__))                                    \
			printf("#   got %lld, want %lld\n", g_, w_);             \
	} while (0)

/* String equality (NULL-safe). */
#define is_str(got, want, ...)                                                  \
	do {                                                                    \
		const char *g_ = (got), *w_ = (want);                           \
		int eq_ = (g_ && w_) ? strcmp(g_, w_) == 0 : g_ == w_;          \
		if (!tap_check(eq_, __FILE__, __LINE__, #got " eq " #want,      \
			       __VA_ARGS__))                                    \
			printf("#   got \"%s\", want \"%s\"\n", g_ ? g_ : "(null)", \
			       w_ ? w_ : "(null)");                             \
	} while (0)

/* Substring test, for error messages. */
#define like(got, needle, ...)                                                  \
	do {                                                                    \
		const char *g_ = (got), *n_ = (needle);                         \
		if (!tap_check(g_ && strstr(g_, n_) != NULL, __FILE__, __LINE__, \
			       #got " contains " #needle, __VA_ARGS__))         \
			printf("#   \"%s\" does not contain \"%s\"\n",           \
			       g_ ? g_ : "(null)", n_);                         \
	} while (0)

#define diag(...)                         \
	do {                              \
		printf("# ");             \
		printf(__VA_ARGS__);      \
		printf("\n");             \
	} while (0)

/* Fatal: stop the program (a later check would crash). */
#define BAIL(...)                                  \
	do {                                       \
		printf("Bail out! ");              \
		printf(__VA_ARGS__);               \
		printf("\n");                      \
		exit(1);                           \
	} while (0)

static inline int tap_done(void)
{
	printf("1..%d\n", tap_n);
	if (tap_failed)
		printf("# %d of %d checks failed\n", tap_failed, tap_n);
	return tap_failed ? 1 : 0;
}

#endif
