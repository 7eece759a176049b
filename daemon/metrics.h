/*
 * Prometheus metrics of the rgpud parent (`--metrics=ADDR:PORT`).
 *
 * The parent's code reports events through the calls below (cheap: a mutex
 * and a few adds; they work whether or not the HTTP endpoint runs), and
 * metrics_start() serves them as Prometheus text format on GET /metrics
 * from libmicrohttpd's own thread, so a slow scraper never holds up the
 * accept loop.  Parent only: workers never call these.
 *
 * Sessions, device memory and GPU time are kept per (job, GPU): job 0 is a
 * client without a Slurm job (open mode).  Leases and GPU sizes are read
 * from the lease table (lease.h) when scraped.
 */
#ifndef RGPUD_METRICS_H
#define RGPUD_METRICS_H

#include <stddef.h>
#include <stdint.h>

struct rgpud_principal;
struct metrics_session;

/* Starts the HTTP endpoint.  addr: "HOST:PORT", "[V6]:PORT", ":PORT" or
 * "PORT" (the last two listen on 127.0.0.1 only).  Call after rgpud has
 * detached (the endpoint runs a thread).  0, or -1 with err (also when rgpud
 * was built without libmicrohttpd). */
int metrics_start(const char *addr, char *err, size_t errlen);
void metrics_stop(void);

/* One session from the moment its worker runs until it exits (gate.c).
 * open() returns NULL only when out of memory; the other calls take NULL. */
struct metrics_session *metrics_session_open(const struct rgpud_principal *who);
void metrics_session_gpu(struct metrics_session *ms, unsigned gpu); /* admitted */
/* Device memory charged to / given back by the session (what the quota
 * counts); a refund beyond what the session holds is clamped. */
void metrics_session_charge(struct metrics_session *ms, unsigned gpu, uint64_t bytes);
void metrics_session_refund(struct metrics_session *ms, unsigned gpu, uint64_t bytes);
void metrics_session_close(struct metrics_session *ms);
/* The memory manager's view of a session (daemon/mem/): device memory
 * resident on the GPU and swapped out to host memory, all GPUs together;
 * exported per job, and read back per session (rgpu top). */
void metrics_session_memory(struct metrics_session *ms, uint64_t resident, uint64_t swapped);
void metrics_session_memory_get(struct metrics_session *ms, uint64_t *resident, uint64_t *swapped);

/* The scheduler (daemon/sched/): the session's worker and uid, for the
 * listing and the attained GPU time; source(pid, gpu) answers the GPU time
 * a live worker attained (ns), asked when metrics are rendered; ended
 * sessions leave theirs with metrics_session_gpu_time() before close. */
void metrics_session_worker(struct metrics_session *ms, int pid, uint32_t uid);
void metrics_session_gpu_time(struct metrics_session *ms, unsigned gpu, uint64_t ns);
void metrics_set_gpu_time_source(uint64_t (*source)(int pid, unsigned gpu));
/* Live sessions, one row per GPU each was admitted to (malloc'd; free()). */
struct metrics_session_row {
	uint64_t job;
	uint32_t uid, gpu;
	int pid;
	uint64_t mem;
	double age_s;
};
int metrics_sessions_list(struct metrics_session_row **rows, size_t *n);

/* Counters.  reason and kind are short snake_case words in static storage
 * (they become label values): refusals "auth", "version", "gpu", "quota",
 * ...; errors "accept", "spawn", "worker_exit", ...  At most 32 distinct
 * words each; later ones are counted as "other". */
void metrics_conn_accepted(void);
void metrics_refused(const char *reason);
void metrics_error(const char *kind);
/* A worker's wait status (waitpid), once per worker. */
void metrics_worker_exit(int status);

/* The exposition text (malloc'd, NUL-terminated; free() it), or NULL when
 * out of memory.  What GET /metrics serves; for tests too. */
char *metrics_render(size_t *len);

/* For tests: label value escaping as the text format wants it (\\, \", \n).
 * Writes at most n bytes including the NUL; returns the length needed. */
size_t metrics_escape(const char *in, char *out, size_t n);

#endif
