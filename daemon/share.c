/* The parent's registry of shareable physical memory (share.h). */
#include "share.h"
#include "log.h"

#include <cuda.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

struct share {
	struct share *next;
	uint8_t token[16];
	int fd;
	uint64_t job;
	uint32_t uid;
	unsigned gpu;
	uint64_t size;
	const void *owner;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct share *shares;
static unsigned nshares;
/* a bound, so a session cannot grow the parent without limit */
#define SHARES_MAX 65536

int share_put(const struct rgpud_principal *who, const void *owner, int fd, unsigned gpu,
	      uint64_t size, uint8_t token[16])
{
	struct share *e = fd >= 0 ? calloc(1, sizeof(*e)) : NULL;
	if (!e || getrandom(e->token, sizeof(e->token), 0) != (ssize_t)sizeof(e->token)) {
		free(e);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	e->fd = fd;
	e->job = who->job_id;
	e->uid = who->uid;
	e->gpu = gpu;
	e->size = size;
	e->owner = owner;
	pthread_mutex_lock(&lock);
	if (nshares >= SHARES_MAX) {
		pthread_mutex_unlock(&lock);
		close(fd);
		free(e);
		return -1;
	}
	e->next = shares;
	shares = e;
	nshares++;
	pthread_mutex_unlock(&lock);
	memcpy(token, e->token, 16);
	return 0;
}

int share_get(const struct rgpud_principal *who, const uint8_t token[16], int *fd,
	      unsigned *gpu, uint64_t *size)
{
	int rc = CUDA_ERROR_INVALID_VALUE;
	*fd = -1;
	pthread_mutex_lock(&lock);
	for (struct share *e = shares; e; e = e->next) {
		if (memcmp(e->token, token, 16))
			continue;
		if (e->job != who->job_id || e->uid != who->uid) {
			log_warn("refused an import of shared memory of job %llu uid %u by job %llu uid %u",
				 (unsigned long long)e->job, e->uid,
				 (unsigned long long)who->job_id, who->uid);
			rc = CUDA_ERROR_NOT_PERMITTED;
			break;
		}
		*fd = fcntl(e->fd, F_DUPFD_CLOEXEC, 3);
		rc = *fd < 0 ? CUDA_ERROR_OPERATING_SYSTEM : CUDA_SUCCESS;
		*gpu = e->gpu;
		*size = e->size;
		break;
	}
	pthread_mutex_unlock(&lock);
	return rc;
}

static void drop_if(const void *owner, const uint8_t *token)
{
	pthread_mutex_lock(&lock);
	for (struct share **pp = &shares; *pp;) {
		struct share *e = *pp;
		if (e->owner == owner && (!token || !memcmp(e->token, token, 16))) {
			*pp = e->next;
			close(e->fd);
			free(e);
			nshares--;
		} else {
			pp = &e->next;
		}
	}
	pthread_mutex_unlock(&lock);
}

void share_drop(const void *owner, const uint8_t token[16]) { drop_if(owner, token); }

void share_drop_owner(const void *owner) { drop_if(owner, NULL); }
