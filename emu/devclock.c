/*
 * Time on the emulated device (README.md, "Time"): kernels take time, and a
 * device runs one kernel at a time, across every process that uses it.
 *
 *  - RGPU_EMU_KERNEL_NS: every kernel takes this long besides its own work
 *    (default 0: no time, as before).  busy_wait_ns takes its argument.
 *  - RGPU_EMU_CLOCK=PATH: a file every process of one host names the same
 *    (rgpud's workers inherit it): per device a "busy until" time
 *    (CLOCK_MONOTONIC ns).  A kernel then waits for the device: it starts
 *    at max(now, busy until) and moves busy until past its end (a compare-
 *    and-swap: no lock a dying process could keep).  Without it each
 *    process's kernels take their time on their own.
 *
 * Events follow a time-sliced GPU: an event recorded right after a kernel
 * of its stream is stamped when that kernel ends; any other is stamped when
 * its context would get the device (after the kernels reserved before it),
 * so events around a kernel measure the kernel's own time.
 */
#include "emu.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CLOCK_DEVS 64

static pthread_once_t once = PTHREAD_ONCE_INIT;
static _Atomic uint64_t *busy; /* CLOCK_DEVS entries, shared; NULL: no clock */
static uint64_t kernel_ns;

static void setup(void)
{
	const char *k = getenv("RGPU_EMU_KERNEL_NS");
	if (k && *k) {
		char *end;
		unsigned long long v = strtoull(k, &end, 10);
		if (!*end && v <= 10000000000ull)
			kernel_ns = v;
	}
	const char *path = getenv("RGPU_EMU_CLOCK");
	if (!path || !*path)
		return;
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	struct stat st;
	if (fstat(fd, &st) == 0 && st.st_size < (off_t)(CLOCK_DEVS * sizeof(uint64_t)) &&
	    ftruncate(fd, CLOCK_DEVS * sizeof(uint64_t)) < 0) {
		close(fd);
		return;
	}
	void *p = mmap(NULL, CLOCK_DEVS * sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p != MAP_FAILED)
		busy = p;
}

int emu_devclock_check(void)
{
	const char *k = getenv("RGPU_EMU_KERNEL_NS");
	if (k && *k) {
		char *end;
		errno = 0;
		unsigned long long v = strtoull(k, &end, 10);
		if (errno || *end || *k == '-' || v > 10000000000ull)
			return -1;
	}
	pthread_once(&once, setup);
	const char *path = getenv("RGPU_EMU_CLOCK");
	if (path && *path && !busy)
		return -1;
	return 0;
}

static void sleep_until(uint64_t t)
{
	struct timespec ts = { (time_t)(t / 1000000000ull), (long)(t % 1000000000ull) };
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

int emu_devclock_shared(void)
{
	pthread_once(&once, setup);
	return busy != NULL;
}

uint64_t emu_devclock_kernel_ns(void)
{
	pthread_once(&once, setup);
	return kernel_ns;
}

void emu_devclock_run(int dev, uint64_t ns)
{
	pthread_once(&once, setup);
	if (!ns)
		return;
	uint64_t now = emu_now_ns();
	if (!busy || dev < 0 || dev >= CLOCK_DEVS) {
		sleep_until(now + ns);
		return;
	}
	uint64_t old = atomic_load(&busy[dev]), start, end;
	do {
		start = old > now ? old : now;
		end = start + ns;
	} while (!atomic_compare_exchange_weak(&busy[dev], &old, end));
	sleep_until(end);
}

uint64_t emu_devclock_stamp(int dev, int after_kernel)
{
	pthread_once(&once, setup);
	uint64_t now = emu_now_ns();
	if (!busy || after_kernel || dev < 0 || dev >= CLOCK_DEVS)
		return now;
	uint64_t b = atomic_load(&busy[dev]);
	return b > now ? b : now;
}
