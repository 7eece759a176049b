/* Device printf output: see devout.h. */
#include "devout.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

struct devout {
	int fd;
	int stop_pipe[2]; /* wakes the reader at the end */
	pthread_t tid;
	pthread_mutex_t lock;
	pthread_cond_t moved;
	char *buf;
	size_t len, cap;
	size_t lost;
	int reading; /* bytes are out of the pipe but not yet in buf */
};

static void append(struct devout *o, const char *p, size_t n)
{
	if (o->len + n > DEVOUT_MAX) {
		size_t room = DEVOUT_MAX - o->len;
		o->lost += n - room;
		n = room;
	}
	if (o->len + n > o->cap) {
		size_t cap = o->cap ? o->cap : 65536;
		while (cap < o->len + n)
			cap *= 2;
		char *b = realloc(o->buf, cap);
		if (!b) {
			o->lost += n;
			return;
		}
		o->buf = b;
		o->cap = cap;
	}
	memcpy(o->buf + o->len, p, n);
	o->len += n;
}

static void *reader(void *arg)
{
	struct devout *o = arg;
	char chunk[65536];
	for (;;) {
		struct pollfd pf[2] = { { .fd = o->fd, .events = POLLIN },
					{ .fd = o->stop_pipe[0], .events = POLLIN } };
		if (poll(pf, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pf[1].revents)
			break;
		if (!pf[0].revents)
			continue;
		/* marked before the read so devout_take never misses bytes
		 * that are neither in the pipe nor in buf */
		pthread_mutex_lock(&o->lock);
		o->reading = 1;
		pthread_mutex_unlock(&o->lock);
		ssize_t n = read(o->fd, chunk, sizeof(chunk));
		pthread_mutex_lock(&o->lock);
		if (n > 0)
			append(o, chunk, (size_t)n);
		o->reading = 0;
		pthread_cond_broadcast(&o->moved);
		pthread_mutex_unlock(&o->lock);
		if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
			break;
	}
	return NULL;
}

struct devout *devout_start(int fd)
{
	struct devout *o = calloc(1, sizeof(*o));
	if (!o)
		return NULL;
	o->fd = fd;
	/* blocking at both ends: the writer (the driver, through stdout)
	 * waits for the reader instead of losing output */
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	fl = fcntl(STDOUT_FILENO, F_GETFL);
	if (fl >= 0)
		fcntl(STDOUT_FILENO, F_SETFL, fl & ~O_NONBLOCK);
	if (pipe2(o->stop_pipe, O_CLOEXEC) < 0) {
		free(o);
		return NULL;
	}
	pthread_mutex_init(&o->lock, NULL);
	pthread_cond_init(&o->moved, NULL);
	if (pthread_create(&o->tid, NULL, reader, o) != 0) {
		close(o->stop_pipe[0]);
		close(o->stop_pipe[1]);
		pthread_mutex_destroy(&o->lock);
		pthread_cond_destroy(&o->moved);
		free(o);
		return NULL;
	}
	return o;
}

static int pipe_pending(int fd)
{
	int n = 0;
	return ioctl(fd, FIONREAD, &n) == 0 && n > 0;
}

char *devout_take(struct devout *o, size_t *len)
{
	*len = 0;
	/* the driver prints through stdio: push it into the pipe first */
	fflush(stdout);
	pthread_mutex_lock(&o->lock);
	/* everything written so far; a kernel still printing (another
	 * stream) does not hold the caller past a second */
	for (int waits = 0; (o->reading || pipe_pending(o->fd)) && waits < 100; waits++) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 10 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&o->moved, &o->lock, &ts);
	}
	if (o->lost) {
		char note[160];
		int k = snprintf(note, sizeof(note),
				 "\n[rgpud: %zu bytes of device output lost: more than %u MiB "
				 "between two synchronising calls]\n", o->lost, DEVOUT_MAX >> 20);
		o->lost = 0;
		if (o->len + (size_t)k > DEVOUT_MAX)
			o->len = DEVOUT_MAX - (size_t)k;
		append(o, note, (size_t)k);
	}
	char *b = NULL;
	if (o->len) {
		b = o->buf;
		*len = o->len;
		o->buf = NULL;
		o->len = o->cap = 0;
	}
	pthread_mutex_unlock(&o->lock);
	return b;
}

void devout_stop(struct devout *o)
{
	if (!o)
		return;
	ssize_t w = write(o->stop_pipe[1], "x", 1);
	(void)w;
	pthread_join(o->tid, NULL);
	close(o->stop_pipe[0]);
	close(o->stop_pipe[1]);
	close(o->fd);
	pthread_mutex_destroy(&o->lock);
	pthread_cond_destroy(&o->moved);
	free(o->buf);
	free(o);
}
