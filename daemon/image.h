/*
 * Checks a module image from a client before the driver sees it.  The
 * driver's loaders take no length: they find an image's extent in its own
 * headers (a fatbin's header and entries, an ELF's header, program and
 * section tables, PTX's terminating NUL).  A client could describe more
 * bytes than it sent, and the driver would read past the buffer; so every
 * extent the driver will follow must lie within the n bytes received.
 */
#ifndef RGPUD_IMAGE_H
#define RGPUD_IMAGE_H

#include <stddef.h>

/* 0 when the image's self-described extent fits in n bytes; else a static
 * reason, for the log. */
const char *image_check(const void *p, size_t n);

#endif
