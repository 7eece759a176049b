/* Two same-host connections copying at once (issue 15 item 2): two
 * threads, each with its own device on its own server (RGPU_SERVERS lists
 * two), copy multi-MiB buffers both ways over and over and check every
 * byte.  The same-host path's parallel memcpy used to share one job between
 * connections: the data came back corrupted and the copy then hung. */
#include "common.h"

#include <pthread.h>

#define NDEV 2
#define BYTES (24u << 20) /* several ring slots, each split over helper threads */
#define ROUNDS 12

struct worker {
	int dev;
	CUcontext ctx;
	const char *fail;
	size_t bad_at;
};

static void fill(uint32_t *p, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = seed * 2654435761u + (uint32_t)i;
}

static void *run(void *arg)
{
	struct worker *w = arg;
	const size_t n = BYTES / 4;
	uint32_t *src = malloc(BYTES), *back = malloc(BYTES);
	CUdeviceptr d = 0;
	if (!src || !back) {
		w->fail = "out of memory";
		goto out;
	}
	if (cuCtxSetCurrent(w->ctx) || cuMemAlloc(&d, BYTES)) {
		w->fail = "cannot allocate device memory";
		goto out;
	}
	for (int r = 0; r < ROUNDS && !w->fail; r++) {
		uint32_t seed = (uint32_t)(w->dev * 1000 + r);
		fill(src, n, seed);
		memset(back, 0, BYTES);
		if (cuMemcpyHtoD(d, src, BYTES) || cuMemcpyDtoH(back, d, BYTES)) {
			w->fail = "a copy failed";
			break;
		}
		for (size_t i = 0; i < n; i++) {
			if (back[i] != src[i]) {
				w->fail = "data came back different";
				w->bad_at = i * 4;
				break;
			}
		}
	}
	cuMemFree(d);
out:
	free(src);
	free(back);
	return NULL;
}

int main(int argc, char **argv)
{
	e2e_init(argv[0]);
	CK(cuInit(0));
	int count = 0;
	CK(cuDeviceGetCount(&count));
	if (count < NDEV)
		skip("needs %d devices, found %d", NDEV, count);
	struct worker w[NDEV];
	pthread_t t[NDEV];
	for (int i = 0; i < NDEV; i++) {
		w[i] = (struct worker){ .dev = i };
		w[i].ctx = primary_ctx(i, NULL);
	}
	for (int i = 0; i < NDEV; i++)
		CHECK(pthread_create(&t[i], NULL, run, &w[i]) == 0, "cannot start thread %d", i);
	for (int i = 0; i < NDEV; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < NDEV; i++) {
		CHECK(!w[i].fail, "device %d: %s (at byte %zu)", i, w[i].fail ? w[i].fail : "",
		      w[i].bad_at);
		primary_ctx_release(i);
	}
	say("%d rounds of %u MiB both ways on %d same-host connections at once: all data intact",
	    ROUNDS, BYTES >> 20, NDEV);
	return 0;
}
