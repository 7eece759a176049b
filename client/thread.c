/* The client's own threads (flusher, copy helpers, guard, destructors):
 * detached, and blocking every signal, which are the program's. */
#include "client.h"

#include <signal.h>

int rc_thread_start(void *(*fn)(void *), void *arg)
{
	pthread_t t;
	pthread_attr_t at;
	sigset_t all, old;
	int err = pthread_attr_init(&at);
	if (err)
		return err;
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&t, &at, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&at);
	return err;
}
