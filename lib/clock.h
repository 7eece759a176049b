/* Time on the monotonic clock, for intervals, deadlines and rates: wall
 * time jumps (NTP, an operator), this does not.  One definition for the
 * client, rgpud and the tools, which each had a copy. */
#ifndef RGPU_CLOCK_H
#define RGPU_CLOCK_H

#include <stdint.h>

/* Nanoseconds since an arbitrary point (boot). */
uint64_t rgpu_now_ns(void);

static inline uint64_t rgpu_now_ms(void)
{
	return rgpu_now_ns() / 1000000u;
}

static inline double rgpu_now_s(void)
{
	return (double)rgpu_now_ns() / 1e9;
}

#endif
