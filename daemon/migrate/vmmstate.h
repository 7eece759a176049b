/*
 * Application VMM memory in a session's captured state (vmmstate.c).
 */
#ifndef RGPUD_MIGRATE_VMMSTATE_H
#define RGPUD_MIGRATE_VMMSTATE_H

#include <stddef.h>
#include <stdint.h>

struct session;
struct memif_alloc;
struct wbuf;

/* Hands the request built in w (op, the handle id it makes) to fn and
 * empties w: fn's answer, or -1 when w ran out of memory.  (The state
 * written as requests: here and poolstate.c.) */
int state_req_emit(struct wbuf *w, uint16_t op, uint64_t id,
		   int (*fn)(void *arg, uint16_t op, uint64_t id, const uint8_t *p, size_t n),
		   void *arg);

/* Why the session's application memory cannot be captured (stream-ordered
 * allocations, memory shared with another process, physical memory not
 * mapped whole), or NULL. */
const char *vmm_unmovable(struct session *s);
/* The requests that make the session's VMM memory again, in order
 * (VMM_CREATE with the handle's id, VMM_MAP, VMM_ACCESS; then for each
 * handle released while mapped VMM_CREATE with id 0, its VMM_MAPs and
 * VMM_RELEASE naming handle 0: "the physical memory made last", which the
 * restore puts in), each payload as the client sends it; stops at a
 * nonzero return of fn and returns it. */
int vmm_each_request(struct session *s,
		     int (*fn)(void *arg, uint16_t op, uint64_t id, const uint8_t *p, size_t n),
		     void *arg);
/* Each mapping that some GPU may access, as a MEMK_FIXED allocation of a
 * context on such a GPU; stops at a nonzero return of fn. */
int vmm_each_map(struct session *s, int (*fn)(void *arg, const struct memif_alloc *a), void *arg);
/* The physical memory under the mapping at addr, exported for a move to a
 * worker of this rgpud (a PEER record: snapshot.h): its token, where its
 * first byte would lie in the mapping's terms, its size.  A CUresult
 * (CUDA_ERROR_NOT_SUPPORTED: not so exportable; it goes by value). */
int vmm_export_map(struct session *s, uint64_t addr, uint8_t token[16], uint64_t *va,
		   uint64_t *len);
/* Drops what vmm_export_map exported (the move is over either way). */
void vmm_export_drop(struct session *s);

#endif
