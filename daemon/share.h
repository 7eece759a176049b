/*
 * Shareable physical memory between the sessions of one job (the parent's
 * registry).  A worker exporting memory (cuMemExportToShareableHandle)
 * hands the driver's file descriptor to the parent with a fresh random
 * 16-byte token; the client gets only the token.  A worker importing it
 * presents the token and gets a duplicate of the descriptor, but only for
 * a session of the same job and uid.  An entry lives until its exporter
 * drops it (the memory is released) or the exporting worker ends.
 */
#ifndef RGPUD_SHARE_H
#define RGPUD_SHARE_H

#include "access.h"
#include "driver.h"

#include <stdint.h>

/* Parent side.  owner: a key of the exporting worker (its gate).  put
 * takes fd (closed on failure).  0, or -1. */
int share_put(const struct rgpud_principal *who, const void *owner, int fd, unsigned gpu,
	      uint64_t size, uint8_t token[16]);
/* 0 and a new descriptor in *fd; CUDA_ERROR_INVALID_VALUE (unknown token)
 * or CUDA_ERROR_NOT_PERMITTED (another job or user). */
int share_get(const struct rgpud_principal *who, const uint8_t token[16], int *fd,
	      unsigned *gpu, uint64_t *size);
void share_drop(const void *owner, const uint8_t token[16]);
void share_drop_owner(const void *owner);

/* Worker side (gate.c): the same through the parent. */
int gate_share_put(int fd, unsigned gpu, uint64_t size, uint8_t token[16]);
int gate_share_get(const uint8_t token[16], int *fd, unsigned *gpu, uint64_t *size);
void gate_share_drop(const uint8_t token[16]);
/* Exports physical memory h of size bytes on gpu (its POSIX file
 * descriptor) into the registry under a new token, unless *done says it
 * is already (then sets it): a CUresult. */
int gate_share_export(CUmemGenericAllocationHandle h, unsigned gpu, uint64_t size,
		      uint8_t token[16], int *done);

#endif
