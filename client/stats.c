/*
 * RGPU_STATS=1: at exit the client prints to stderr
 *
 *   rgpu stats: calls=N sync=S async=A sent=BYTES received=BYTES
 *   rgpu stats:   OP count=C wait_us=W           (one per synchronous kind)
 *   rgpu stats:   OP answered locally=L          (one per kind, if any)
 *   rgpu stats:   waits for the GPU: ready=R spun=S slept=T
 *
 * calls: requests sent to rgpud; sync: those whose caller waited for a
 * reply (a round trip); async: those sent without waiting (launches,
 * asynchronous copies, ...); sent/received: bytes over the connection
 * (frame headers included; data through shared memory is not counted).
 * Then one line per kind of synchronous request, most frequent first,
 * with the total time its callers waited, and the calls answered from the
 * client's own state that would otherwise have been a round trip.  The
 * waits for the GPU (synchronize, device-to-host copy): how often the
 * reply was there when the caller looked, came within its spin
 * (RGPU_SYNC_SPIN_US), or found the caller asleep (a wake-up later).
 *
 * Counters are atomics (any thread may call); a program can read them
 * while it runs through rgpu_stats_counter (exported: a benchmark counts
 * the round trips of one training step that way).
 */
#include "client.h"
#include "settings.h"
#include "stats.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int rc_stats_on;
/* the process that read RGPU_STATS: a forked child (a DataLoader worker)
 * inherits the counters and must not report them as its own */
static pid_t stats_pid;

static uint64_t n_calls, n_sync, n_async, n_sent, n_recv, n_local, n_writes;
static uint64_t n_wait[3];
static uint64_t n_peer[2]; /* bytes copied between servers: direct, relayed */
static uint64_t op_count[RGPU_OP_MAX], op_wait_ns[RGPU_OP_MAX], op_local[RGPU_OP_MAX];

#define ADD(x, v) __atomic_add_fetch(&(x), (v), __ATOMIC_RELAXED)
#define GET(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)

void rc_stats_sync_wait(enum rc_sync_wait how)
{
	if (rc_stats_on && (unsigned)how < 3)
		ADD(n_wait[how], 1);
}

void rc_stats_peer(int relayed, size_t bytes)
{
	if (rc_stats_on)
		ADD(n_peer[relayed != 0], bytes);
}

void rc_stats_init(void)
{
	stats_pid = getpid();
	__atomic_store_n(&rc_stats_on, rc_setting(RS_STATS) ? 1 : 0, __ATOMIC_RELAXED);
}

void rc_stats_request(unsigned op, int sync, size_t bytes)
{
	if (!rc_stats_on)
		return;
	ADD(n_calls, 1);
	ADD(n_sent, bytes);
	if (sync) {
		ADD(n_sync, 1);
		if (op < RGPU_OP_MAX)
			ADD(op_count[op], 1);
	} else {
		ADD(n_async, 1);
	}
}

void rc_stats_write(void)
{
	if (rc_stats_on)
		ADD(n_writes, 1);
}

void rc_stats_received(size_t bytes)
{
	if (rc_stats_on)
		ADD(n_recv, bytes);
}

void rc_stats_wait(unsigned op, uint64_t ns)
{
	if (rc_stats_on && op < RGPU_OP_MAX)
		ADD(op_wait_ns[op], ns);
}

void rc_stats_local(unsigned op)
{
	if (!rc_stats_on)
		return;
	ADD(n_local, 1);
	if (op < RGPU_OP_MAX)
		ADD(op_local[op], 1);
}

/* For programs and benchmarks (dlsym or ctypes on libcuda.so.1): the
 * counter named by name ("calls", "sync", "async", "sent", "received",
 * "local", "writes": system calls that sent requests, "waits_ready",
 * "waits_spun", "waits_slept": waits for the GPU, "peer_direct",
 * "peer_relayed": bytes copied between GPUs of two servers, from one
 * rgpud to the other or through this process), or the synchronous count of one request kind by its protocol
 * name ("STREAM_SYNC"); 0 for an unknown name or when RGPU_STATS is off. */
RC_EXPORT unsigned long long rgpu_stats_counter(const char *name)
{
	if (!name)
		return 0;
	if (!strcmp(name, "calls"))
		return GET(n_calls);
	if (!strcmp(name, "sync"))
		return GET(n_sync);
	if (!strcmp(name, "async"))
		return GET(n_async);
	if (!strcmp(name, "sent"))
		return GET(n_sent);
	if (!strcmp(name, "received"))
		return GET(n_recv);
	if (!strcmp(name, "local"))
		return GET(n_local);
	if (!strcmp(name, "writes"))
		return GET(n_writes);
	if (!strcmp(name, "waits_ready"))
		return GET(n_wait[RC_WAIT_READY]);
	if (!strcmp(name, "waits_spun"))
		return GET(n_wait[RC_WAIT_SPUN]);
	if (!strcmp(name, "waits_slept"))
		return GET(n_wait[RC_WAIT_SLEPT]);
	if (!strcmp(name, "peer_direct"))
		return GET(n_peer[0]);
	if (!strcmp(name, "peer_relayed"))
		return GET(n_peer[1]);
	for (unsigned op = 0; op < RGPU_OP_MAX; op++) {
		const char *n = rgpu_op_name(op);
		if (n && !strcmp(n, name))
			return GET(op_count[op]);
	}
	return 0;
}

static void report(void)
{
	char buf[16384];
	size_t len = 0;
#define OUT(...)                                                                         \
	do {                                                                             \
		int k_ = snprintf(buf + len, sizeof(buf) - len, __VA_ARGS__);            \
		if (k_ > 0)                                                              \
			len += (size_t)k_ < sizeof(buf) - len ? (size_t)k_ : sizeof(buf) - len - 1; \
	} while (0)
	OUT("rgpu stats: calls=%llu sync=%llu async=%llu sent=%llu received=%llu\n",
	    (unsigned long long)GET(n_calls), (unsigned long long)GET(n_sync),
	    (unsigned long long)GET(n_async), (unsigned long long)GET(n_sent),
	    (unsigned long long)GET(n_recv));
	/* the synchronous requests, most frequent first */
	int done[RGPU_OP_MAX] = { 0 };
	for (;;) {
		int best = -1;
		for (int op = 0; op < RGPU_OP_MAX; op++)
			if (!done[op] && GET(op_count[op]) &&
			    (best < 0 || GET(op_count[op]) > GET(op_count[best])))
				best = op;
		if (best < 0)
			break;
		done[best] = 1;
		const char *n = rgpu_op_name((unsigned)best);
		OUT("rgpu stats:   %s count=%llu wait_us=%.1f\n", n ? n : "?",
		    (unsigned long long)GET(op_count[best]), (double)GET(op_wait_ns[best]) / 1e3);
	}
	OUT("rgpu stats:   writes=%llu (requests sent per write: coalesced)\n",
	    (unsigned long long)GET(n_writes));
	for (int op = 0; op < RGPU_OP_MAX; op++)
		if (GET(op_local[op])) {
			const char *n = rgpu_op_name((unsigned)op);
			OUT("rgpu stats:   %s answered locally=%llu\n", n ? n : "?",
			    (unsigned long long)GET(op_local[op]));
		}
	if (GET(n_wait[0]) + GET(n_wait[1]) + GET(n_wait[2]))
		OUT("rgpu stats:   waits for the GPU: ready=%llu spun=%llu slept=%llu\n",
		    (unsigned long long)GET(n_wait[RC_WAIT_READY]),
		    (unsigned long long)GET(n_wait[RC_WAIT_SPUN]),
		    (unsigned long long)GET(n_wait[RC_WAIT_SLEPT]));
	if (GET(n_peer[0]) + GET(n_peer[1]))
		OUT("rgpu stats:   copies between servers: direct=%llu relayed=%llu (bytes)\n",
		    (unsigned long long)GET(n_peer[0]), (unsigned long long)GET(n_peer[1]));
#undef OUT
	/* one write: lines of concurrent processes do not interleave */
	for (size_t off = 0; off < len;) {
		ssize_t w = write(STDERR_FILENO, buf + off, len - off);
		if (w <= 0)
			break;
		off += (size_t)w;
	}
}

/* At exit (or when the library is unloaded). */
__attribute__((destructor)) static void stats_at_exit(void)
{
	if (rc_stats_on && getpid() == stats_pid)
		report();
}
