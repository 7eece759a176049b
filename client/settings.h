/* The client's settings: one table (settings.c) of every RGPU_* variable
 * the client reads, with its type, default, bounds and meaning.  cuInit
 * checks them all once; a bad value fails cuInit with a sentence that says
 * what is wrong and what is allowed. */
#ifndef RGPU_CLIENT_SETTINGS_H
#define RGPU_CLIENT_SETTINGS_H

#include <stddef.h>

enum rc_setting {
	RS_LOG_LEVEL,            /* 0..7 (words error, warn, info, debug) */
	RS_CONNECT_TIMEOUT_MS,   /* TCP connect */
	RS_HANDSHAKE_TIMEOUT_MS, /* the server's answer to HELLO */
	RS_KEEPALIVE_S,          /* a silent peer is declared dead after this */
	RS_CHUNK_KB,             /* host-to-device copy pieces; 0: automatic */
	RS_TRANSPORT,            /* index into the allowed words */
	RS_VA_BASE,              /* shared range for managed/mapped memory */
	RS_WRITE_TRACKING,       /* 0 or 1 */
	RS_STATS,                /* 0 or 1: call statistics at exit (stats.c) */
	RS_COALESCE_US,          /* requests without a reply wait at most this (rpc.c) */
	RS_SHM_CALLS,            /* 0 or 1: calls through shared memory on the same host */
	RS_SPIN_US,              /* a reader spins this long before it sleeps (shmq) */
	RS_SYNC_SPIN_US,         /* a wait for the GPU spins this long first (rpc.c) */
	RS_TRACE,                /* off, errors, all (trace.h) */
	RS_PEER_PATH,            /* server, client: copies between GPUs of two servers */
	RS_COUNT
};

enum rc_transport_word { RS_TP_AUTO, RS_TP_TCP, RS_TP_LOCAL, RS_TP_VERBS };
enum rc_peer_path_word { RS_PEER_SERVER, RS_PEER_CLIENT };

/* Reads and checks every setting from the environment (thread-safe, once):
 * 0, or -1 with err naming the variable, the value and what is allowed. */
int rc_settings_load(char *err, size_t errlen);
/* A setting's value (numbers as numbers, words as their index); the
 * default until rc_settings_load has run. */
unsigned long long rc_setting(enum rc_setting s);
/* The variable's name, e.g. "RGPU_CHUNK_KB". */
const char *rc_setting_name(enum rc_setting s);

#endif
