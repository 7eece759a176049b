/*
 * The gate between a session worker and the rgpud parent.
 *
 * Each client session runs in its own worker process (a GPU fault poisons
 * every CUDA context of a process, so the process is the fault boundary).
 * Lease state and quotas stay in the parent; a worker asks through a
 * SOCK_SEQPACKET pair whenever it admits a GPU, allocates or frees memory,
 * or serves a lease-management request.  The parent counts what each
 * worker charged, so a worker that dies is refunded in full.
 */
#ifndef RGPUD_GATE_H
#define RGPUD_GATE_H

#include "access.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct session;
struct rd;
struct wbuf;

/* worker side (calls block on the parent) */
void gate_attach(int ctl_fd);
int gate_device(unsigned gpu, uint64_t *limit, char *why, size_t whylen);
/* Device memory against the session's quota: charge before allocating
 * (0, or -1: over quota or it would overflow), refund after freeing or a
 * failed allocation (-1: more than this worker holds; nothing changes).
 * Anything a worker holds when it exits is refunded by the parent. */
int gate_charge_bytes(unsigned gpu, uint64_t bytes);
int gate_refund_bytes(unsigned gpu, uint64_t bytes);
/* Older form: delta > 0 charges, delta < 0 refunds -delta.  New code uses
 * the two above (a u64 size cast to int64 reads as a refund). */
int gate_charge(unsigned gpu, int64_t delta);
void gate_usage(unsigned gpu, uint64_t *limit, uint64_t *used);
int gate_admin(unsigned op, struct rd *r, struct wbuf *out);
/* The memory manager's messages (daemon/mem/): a request answered by the
 * parent (its rc), and one it does not answer.  gate_ctl_fd: the control
 * socket, which the worker watches between requests. */
int gate_mem_call(unsigned sub, unsigned gpu, const void *payload, uint32_t len);
int gate_mem_send(unsigned sub, unsigned gpu, const void *payload, uint32_t len);
int gate_ctl_fd(void);

/* parent side: serves one worker (process id worker) until it exits, then
 * refunds what it still holds and frees its scheduler slots.  Returns when
 * the worker's end of ctl_fd closes. */
void gate_serve(int ctl_fd, const struct rgpud_principal *who, const char *name, pid_t worker);

#endif
