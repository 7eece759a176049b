/*
 * What kernels print (device printf).  The driver writes it to the worker's
 * stdout, a pipe; a reader thread drains the pipe into a large buffer as it
 * arrives, so the driver never meets a full pipe (a full non-blocking pipe
 * dropped everything past 64 KiB), and synchronising calls forward the
 * buffer to the client.
 */
#ifndef RGPUD_DEVOUT_H
#define RGPUD_DEVOUT_H

#include <stddef.h>

struct devout;

/* Up to this much output is kept between two synchronising calls; more is
 * dropped and the loss is reported in the output itself. */
#define DEVOUT_MAX (64u * 1024 * 1024)

/* Takes over fd (the pipe's read end) and starts the reader; NULL when
 * out of memory or threads. */
struct devout *devout_start(int fd);
/* Moves everything printed so far (up to now) into a malloc'd buffer; *len
 * 0 and NULL when there is nothing. */
char *devout_take(struct devout *o, size_t *len);
void devout_stop(struct devout *o);

#endif
