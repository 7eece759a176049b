/* Entry points rgpu does not serve say so once, by name, and fail with
 * CUDA_ERROR_NOT_SUPPORTED; they never crash. */
#include "client.h"
#include "log.h"

#include <string.h>

#define SEEN_MAX 512
static const char *seen[SEEN_MAX];
static int nseen;
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;

void rc_unsupported(const char *name)
{
	pthread_mutex_lock(&seen_lock);
	for (int i = 0; i < nseen; i++)
		if (seen[i] == name || !strcmp(seen[i], name)) {
			pthread_mutex_unlock(&seen_lock);
			return;
		}
	if (nseen < SEEN_MAX)
		seen[nseen++] = name;
	pthread_mutex_unlock(&seen_lock);
	log_warn("%s is not supported by rgpu; returning CUDA_ERROR_NOT_SUPPORTED", name);
}
