/*
 * Interprocess events (cuIpcGetEventHandle, cuIpcOpenEventHandle) of the
 * emulated device.  The emulated device lives in each process, so an
 * exported event's generations (recorded, completed) are kept in a small
 * POSIX shared-memory object too, named in the handle: the exporter and
 * every importer publish to it what they record and complete, and read
 * from it before they look at the event; waits on such an event poll it
 * (no condition variable crosses processes).
 */
#include "emu.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define IPC_TAG "emuIPCev"

struct emu_ipc_ev {
	uint64_t recorded, completed; /* (atomics) */
};

static void store_max(uint64_t *p, uint64_t v)
{
	uint64_t cur = __atomic_load_n(p, __ATOMIC_ACQUIRE);
	while (cur < v && !__atomic_compare_exchange_n(p, &cur, v, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		;
}

void emu_ipc_push(struct emu_event *ev)
{
	if (!ev->ipc)
		return;
	store_max(&ev->ipc->recorded, ev->recorded);
	store_max(&ev->ipc->completed, ev->completed);
}

void emu_ipc_pull(struct emu_event *ev)
{
	if (!ev->ipc)
		return;
	uint64_t r = __atomic_load_n(&ev->ipc->recorded, __ATOMIC_ACQUIRE);
	uint64_t c = __atomic_load_n(&ev->ipc->completed, __ATOMIC_ACQUIRE);
	if (r > ev->recorded)
		ev->recorded = r;
	if (c > ev->completed)
		ev->completed = c;
}

void emu_ipc_nap(pthread_mutex_t *m)
{
	struct timespec ts = { 0, 100 * 1000 };
	emu_unlock(m);
	nanosleep(&ts, NULL);
	emu_lock(m);
}

void emu_ipc_free(struct emu_event *ev)
{
	if (!ev->ipc)
		return;
	munmap(ev->ipc, sizeof(*ev->ipc));
	if (!ev->ipc_opened)
		shm_unlink(ev->ipc_name);
	ev->ipc = NULL;
}

static struct emu_ipc_ev *map(const char *name, int create)
{
	int fd = shm_open(name, create ? O_RDWR | O_CREAT | O_EXCL : O_RDWR, 0600);
	if (fd < 0)
		return NULL;
	void *p = MAP_FAILED;
	if (!create || ftruncate(fd, sizeof(struct emu_ipc_ev)) == 0)
		p = mmap(NULL, sizeof(struct emu_ipc_ev), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		if (create)
			shm_unlink(name);
		return NULL;
	}
	return p;
}

EMU_API CUresult CUDAAPI cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event)
{
	struct emu_ctx *ctx;
	struct emu_event *ev;
	if (!pHandle)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = emu_event_enter(event, &ctx, &ev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!(ev->flags & CU_EVENT_INTERPROCESS)) {
		rc = CUDA_ERROR_INVALID_HANDLE;
	} else if (!ev->ipc) {
		uint64_t rnd = 0;
		if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
			rnd = (uint64_t)time(NULL);
		snprintf(ev->ipc_name, sizeof(ev->ipc_name), "/rgpu-emu-ev-%d-%016llx", (int)getpid(),
			 (unsigned long long)rnd);
		ev->ipc = map(ev->ipc_name, 1);
		if (ev->ipc)
			emu_ipc_push(ev);
		else
			rc = CUDA_ERROR_OPERATING_SYSTEM;
	}
	if (rc == CUDA_SUCCESS) {
		memset(pHandle, 0, sizeof(*pHandle));
		memcpy(pHandle->reserved, IPC_TAG, 8);
		memcpy(pHandle->reserved + 8, ev->ipc_name, strlen(ev->ipc_name));
	}
	emu_ctx_unlock_leave(ctx);
	return rc;
}

EMU_API CUresult CUDAAPI cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
	char name[sizeof(handle.reserved) - 7];
	if (!phEvent || memcmp(handle.reserved, IPC_TAG, 8))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(name, handle.reserved + 8, sizeof(name) - 1);
	name[sizeof(name) - 1] = 0;
	if (strncmp(name, "/rgpu-emu-ev-", 13))
		return CUDA_ERROR_INVALID_VALUE;
	CUevent h;
	CUresult rc = cuEventCreate(&h, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING);
	if (rc != CUDA_SUCCESS)
		return rc;
	struct emu_ctx *ctx;
	struct emu_event *ev;
	if ((rc = emu_event_enter(h, &ctx, &ev)) != CUDA_SUCCESS)
		return rc;
	snprintf(ev->ipc_name, sizeof(ev->ipc_name), "%s", name);
	ev->ipc = map(name, 0);
	ev->ipc_opened = 1;
	if (ev->ipc)
		emu_ipc_pull(ev);
	else
		rc = CUDA_ERROR_INVALID_VALUE;
	emu_ctx_unlock_leave(ctx);
	if (rc != CUDA_SUCCESS)
		cuEventDestroy_v2(h);
	else
		*phEvent = h;
	return rc;
}
