/* Server-wide state of rgpud. */
#ifndef RGPUD_H
#define RGPUD_H

#include "access.h"
#include "driver.h"

#include <pthread.h>
#include <signal.h>

struct session;

struct rgpud {
	struct rgpud_driver drv; /* loaded in workers only */
	int ndev;
	char driver_path[4096];
	char self_exe[4096];
	int use_syslog;
	char hostname[128];
	int listen_fd;
	int unix_fd; /* same-host clients: @rgpud.PORT */
	pthread_mutex_t lock; /* guards the session list */
	struct session *sessions;
	int nsessions;
	volatile sig_atomic_t stopping; /* set by SIGTERM/SIGINT */
	/* bounds before authentication (server.c) */
	int hello_timeout_ms;     /* --hello-timeout: a HELLO must arrive by then */
	int max_pending_per_host; /* --max-pending-per-host: handshakes per address */
	/* after it */
	int max_sessions_per_user; /* --max-sessions-per-user (0: no limit) */
	/* migration and recovery (daemon/migrate/) */
	int worker_random_layout;  /* --worker-layout=random: workers keep ASLR */
	int checkpoint_s;          /* --checkpoint-interval: told to clients (0: none) */
	volatile int draining;     /* `rgpu drain`: new sessions are refused */
	int no_outbound;           /* workers neither open connections to other rgpuds nor
				    * wait for them (the fuzz harness's dispatcher) */
	/* random at start, told in HELLO's reply and to every worker: a
	 * moving worker knows a target that is its own rgpud (memory then
	 * goes GPU to GPU: migrate/out.c) */
	uint64_t instance;
};

/* Defaults of the bounds above. */
#define RGPUD_HELLO_TIMEOUT_MS 10000
#define RGPUD_MAX_PENDING_PER_HOST 128
#define RGPUD_MAX_PENDING 1024 /* handshakes in all */
#define RGPUD_HELLO_MAX 16384  /* bytes of a HELLO payload (a munge credential is ~300) */

extern struct rgpud rgpud_server;

/* server.c */
int rgpud_serve(struct rgpud *srv);
void rgpud_session_register(struct rgpud *srv, struct session *s);
void rgpud_session_unregister(struct rgpud *srv, struct session *s);
/* Open sessions of an authenticated uid (for --max-sessions-per-user). */
int rgpud_sessions_of_uid(uint32_t uid);

#endif
