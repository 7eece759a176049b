/* Server-wide state of rgpud. */
#ifndef RGPUD_H
#define RGPUD_H

#include "access.h"
#include "driver.h"

#include <pthread.h>

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
	volatile int stopping;
};

extern struct rgpud rgpud_server;

/* server.c */
int rgpud_serve(struct rgpud *srv);
void rgpud_session_register(struct rgpud *srv, struct session *s);
void rgpud_session_unregister(struct rgpud *srv, struct session *s);

#endif
