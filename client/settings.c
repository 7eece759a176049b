/* The client settings table (see settings.h). */
#include "settings.h"
#include "log.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum kind { K_INT, K_WORD, K_HEX };

struct setting {
	const char *name;
	enum kind kind;
	unsigned long long dflt, min, max; /* K_INT, K_HEX (min/max: bounds) */
	const char *const *words;          /* K_WORD: allowed values, NULL-ended */
	const char *doc;
};

static const char *const transport_words[] = { "auto", "tcp", "local", "verbs", NULL };
static const char *const trace_words[] = { "off", "errors", "all", NULL };
static const char *const peer_path_words[] = { "server", "client", NULL };

/* RGPU_VA_BASE must be 16 TiB aligned (coherence.c keeps a 16 TiB range). */
#define VA_ALIGN (16ull << 40)

static const struct setting table[RS_COUNT] = {
	[RS_LOG_LEVEL] = { "RGPU_LOG_LEVEL", K_INT, RGPU_LOG_WARN, 0, 7, NULL,
			   "client log level: error, warn, info, debug or 0-7" },
	[RS_CONNECT_TIMEOUT_MS] = { "RGPU_CONNECT_TIMEOUT_MS", K_INT, 5000, 1, 3600000, NULL,
				    "milliseconds to wait for a TCP connection to a server" },
	[RS_HANDSHAKE_TIMEOUT_MS] = { "RGPU_HANDSHAKE_TIMEOUT_MS", K_INT, 10000, 1, 3600000, NULL,
				      "milliseconds to wait for a server to answer the handshake" },
	[RS_KEEPALIVE_S] = { "RGPU_KEEPALIVE_S", K_INT, 60, 10, 86400, NULL,
			     "seconds after which a server whose host stops answering TCP "
			     "keepalive probes counts as lost (calls then fail)" },
	[RS_CHUNK_KB] = { "RGPU_CHUNK_KB", K_INT, 0, 64, 4096, NULL,
			  "KiB pieces host-to-device copies are cut into (default: 4096 over "
			  "a network, 2048 through shared memory)" },
	[RS_TRANSPORT] = { "RGPU_TRANSPORT", K_WORD, RS_TP_AUTO, 0, 0, transport_words,
			   "how to reach servers" },
	[RS_VA_BASE] = { "RGPU_VA_BASE", K_HEX, 0x600000000000ull, VA_ALIGN, 0x7f0000000000ull,
			 NULL, "hex start of the 16 TiB range for managed and mapped memory "
			       "(16 TiB aligned)" },
	[RS_WRITE_TRACKING] = { "RGPU_WRITE_TRACKING", K_INT, 1, 0, 1, NULL,
				"1: track host writes to managed memory by page protection; "
				"0: count every region as written" },
	[RS_STATS] = { "RGPU_STATS", K_INT, 0, 0, 1, NULL,
		       "1: print call statistics (round trips by kind) to stderr at exit" },
	[RS_COALESCE_US] = { "RGPU_COALESCE_US", K_INT, 50, 0, 10000, NULL,
			     "microseconds a request without a reply (a launch, an asynchronous "
			     "copy) may wait to go out with others; 0: each goes out at once" },
	[RS_SHM_CALLS] = { "RGPU_SHM_CALLS", K_INT, 1, 0, 1, NULL,
			   "1: on the same host, calls go through shared-memory queues with a "
			   "doorbell; 0: through the Unix socket" },
	[RS_SPIN_US] = { "RGPU_SPIN_US", K_INT, 50, 0, 100000, NULL,
			 "microseconds a thread waiting for a same-host server's reply spins "
			 "before it sleeps (0: sleeps at once)" },
	[RS_SYNC_SPIN_US] = { "RGPU_SYNC_SPIN_US", K_INT, 0, 0, 1000000, NULL,
			      "microseconds a thread waiting for the GPU (a synchronize, a "
			      "device-to-host copy) spins before it sleeps; not in a context "
			      "made with CU_CTX_SCHED_BLOCKING_SYNC (0: sleeps at once)" },
	[RS_TRACE] = { "RGPU_TRACE", K_WORD, 0, 0, 0, trace_words,
		       "driver calls reported on stderr: errors (each call that fails), all "
		       "(each call, its result and time) or off" },
	[RS_PEER_PATH] = { "RGPU_PEER_PATH", K_WORD, RS_PEER_SERVER, 0, 0, peer_path_words,
			   "how copies between GPUs of two servers go: server (from one rgpud "
			   "to the other, where they can reach each other) or client (through "
			   "this process)" },
};

static unsigned long long value[RS_COUNT];
static int loaded;
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static int load_rc;
static char load_err[512];

const char *rc_setting_name(enum rc_setting s) { return table[s].name; }

unsigned long long rc_setting(enum rc_setting s)
{
	if (!__atomic_load_n(&loaded, __ATOMIC_ACQUIRE))
		return table[s].dflt;
	return value[s];
}

static void allowed(const struct setting *t, char *out, size_t n)
{
	if (t->kind == K_WORD) {
		size_t k = 0;
		out[0] = '\0';
		for (int i = 0; t->words[i]; i++)
			k += (size_t)snprintf(out + k, k < n ? n - k : 0, "%s%s",
					      i ? (t->words[i + 1] ? ", " : " or ") : "", t->words[i]);
	} else if (t->kind == K_HEX) {
		snprintf(out, n, "a hex address from %#llx to %#llx, a multiple of %#llx", t->min,
			 t->max, VA_ALIGN);
	} else if (t == &table[RS_LOG_LEVEL]) {
		snprintf(out, n, "error, warn, info, debug or a number from 0 to 7");
	} else if (t == &table[RS_CHUNK_KB]) {
		snprintf(out, n, "a whole number of KiB from %llu to %llu", t->min, t->max);
	} else {
		snprintf(out, n, "a whole number from %llu to %llu", t->min, t->max);
	}
}

/* 0 and *v, or -1: s is not a value of t. */
static int parse(const struct setting *t, const char *s, unsigned long long *v)
{
	if (t == &table[RS_LOG_LEVEL]) {
		int l = rgpu_log_parse_level(s);
		if (l < 0)
			return -1;
		*v = (unsigned long long)l;
		return 0;
	}
	if (t->kind == K_WORD) {
		for (int i = 0; t->words[i]; i++)
			if (!strcmp(s, t->words[i])) {
				*v = (unsigned long long)i;
				return 0;
			}
		return -1;
	}
	/* digits only: strtoull would take "-5" as a huge number and " 7" */
	const char *p = s;
	if (t->kind == K_HEX && (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')))
		p += 2;
	if (!*p || strspn(p, t->kind == K_HEX ? "0123456789abcdefABCDEF" : "0123456789") != strlen(p))
		return -1;
	errno = 0;
	unsigned long long x = strtoull(p, NULL, t->kind == K_HEX ? 16 : 10);
	if (errno || x < t->min || x > t->max)
		return -1;
	if (t->kind == K_HEX && (x & (VA_ALIGN - 1)))
		return -1;
	*v = x;
	return 0;
}

int rc_settings_load(char *err, size_t errlen)
{
	pthread_mutex_lock(&load_lock);
	if (!loaded) {
		load_rc = 0;
		for (int i = 0; i < RS_COUNT; i++) {
			const struct setting *t = &table[i];
			const char *s = getenv(t->name);
			value[i] = t->dflt;
			if (!s || !*s)
				continue;
			if (parse(t, s, &value[i]) < 0) {
				char a[256];
				allowed(t, a, sizeof(a));
				snprintf(load_err, sizeof(load_err), "%s=%s is not valid: expected %s",
					 t->name, s, a);
				value[i] = t->dflt;
				load_rc = -1;
				break;
			}
		}
		__atomic_store_n(&loaded, 1, __ATOMIC_RELEASE);
	}
	if (load_rc)
		snprintf(err, errlen, "%s", load_err);
	pthread_mutex_unlock(&load_lock);
	return load_rc;
}
