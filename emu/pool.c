/*
 * One memory pool per emulated device, shared by every process that loads
 * the emulated device for the same rgpud (its session workers, its probe).
 *
 * A real GPU has one pool of memory however many processes use it; rgpud
 * runs a worker process per session, so without this each worker would see
 * a whole device of its own and quotas, waiting and swapping could not be
 * tested honestly.  The pool is a small POSIX shared-memory segment holding
 * each device's size and one record per process: what that process holds on
 * each device.  A device's use is the sum of the records of live processes;
 * a process that died (kill(pid, 0) says ESRCH) has its record cleared, so
 * its share returns as a dead process's GPU memory does.
 *
 * The segment is named after RGPU_EMU_POOL, else RGPU_EMU_TAG, else the
 * parent process (the rgpud whose workers share it: its pid and start
 * time), and the uid.  Without
 * shared memory (no /dev/shm) each process keeps its own accounting.
 *
 * Locking: callers hold emu_glock; the segment's robust mutex is taken
 * inside it.
 */
#include "emu.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define POOL_MAGIC 0x72706f6f6c320000ULL /* "rpool2" */
#define POOL_RECS 256

struct pool_rec {
	int32_t pid;        /* 0: free */
	uint32_t pad;
	uint64_t start;     /* the process's start time: tells a reused pid */
	uint64_t used[EMU_MAX_DEVICES];
};

struct pool_shm {
	uint64_t magic;     /* set last, once the rest is initialised */
	uint32_t ndev;
	uint32_t pad;
	uint64_t total[EMU_MAX_DEVICES];
	pthread_mutex_t lock; /* robust, process-shared */
	struct pool_rec rec[POOL_RECS];
};

static struct pool_shm *seg;  /* NULL: per-process accounting */
static int my_rec = -1;
static pid_t my_pid;
static char seg_name[200];

static void seg_lock(void)
{
	int rc = pthread_mutex_lock(&seg->lock);

	/* a process died holding it: the records are consistent (each
	 * update is one store), so carry on */
	if (rc == EOWNERDEAD)
		rc = pthread_mutex_consistent(&seg->lock);
	if (rc != 0)
		abort();
}

static void seg_unlock(void)
{
	if (pthread_mutex_unlock(&seg->lock) != 0)
		abort();
}

/* When pid started (clock ticks after boot, /proc/PID/stat field 22); 0 when
 * unknown.  Pids wrap (pid_max is 32768 on many machines) and a killed
 * worker leaves its record behind, so a live pid alone does not say the
 * record's owner is alive. */
static uint64_t proc_start(pid_t pid)
{
	char path[64], buf[1024];
	unsigned long long start = 0;
	const char *c;
	ssize_t n;
	int fd, field = 2;

	snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	c = strrchr(buf, ')'); /* the command name may hold spaces */
	if (!c)
		return 0;
	for (c++; *c && field < 22; c++)
		if (*c == ' ')
			field++;
	if (field != 22 || sscanf(c, "%llu", &start) != 1)
		return 0;
	return start;
}

/* Clears the records of processes that are gone (segment locked); with
 * thorough, also of those whose pid now names another process (a read of
 * /proc per live record: only where a refusal would follow, not on every
 * cuMemGetInfo). */
static void reap(int thorough)
{
	for (int i = 0; i < POOL_RECS; i++) {
		pid_t p = seg->rec[i].pid;
		uint64_t now;

		if (!p || p == my_pid)
			continue;
		if (kill(p, 0) != 0 && errno == ESRCH) {
			memset(&seg->rec[i], 0, sizeof seg->rec[i]);
			continue;
		}
		now = thorough && seg->rec[i].start ? proc_start(p) : 0;
		if (now && now != seg->rec[i].start)
			memset(&seg->rec[i], 0, sizeof seg->rec[i]);
	}
}

static int live_records(void)
{
	int n = 0;

	for (int i = 0; i < POOL_RECS; i++)
		n += seg->rec[i].pid != 0;
	return n;
}

static void name_segment(void)
{
	const char *key = getenv("RGPU_EMU_POOL");
	char ppid[48], clean[128];
	size_t k = 0;

	if (!key || !*key)
		key = getenv("RGPU_EMU_TAG");
	if (!key || !*key) {
		/* the parent's start time too: an rgpud that got a recycled
		 * pid found the pool of the one before it, still held by its
		 * last workers, and refused it (seen in CI's soak test) */
		pid_t pp = getppid();
		snprintf(ppid, sizeof ppid, "p%ld-%llu", (long)pp, (unsigned long long)proc_start(pp));
		key = ppid;
	}
	/* a shm name is one path component */
	for (const char *c = key; *c && k < sizeof clean - 1; c++)
		clean[k++] = (char)((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
					    (*c >= '0' && *c <= '9') || *c == '-' || *c == '_' ||
					    *c == '.'
				    ? *c
				    : '_');
	clean[k] = '\0';
	snprintf(seg_name, sizeof seg_name, "/rgpu-emu-pool2-%ld-%s", (long)getuid(), clean);
}

static int init_mutex(pthread_mutex_t *m)
{
	pthread_mutexattr_t a;
	int ok;

	if (pthread_mutexattr_init(&a) != 0)
		return -1;
	ok = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED) == 0 &&
	     pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST) == 0 &&
	     pthread_mutex_init(m, &a) == 0;
	pthread_mutexattr_destroy(&a);
	return ok ? 0 : -1;
}

/* Maps (creating if needed) the segment; NULL on failure. */
static struct pool_shm *attach(int ndev, size_t total)
{
	struct pool_shm *s;
	int created = 1;
	/* Every process using the emulated device shares it, whatever uid it
	 * runs as (rgpud probes as root, its workers drop to the served uid):
	 * readable and writable by all, as the emulated device is for tests. */
	int fd = shm_open(seg_name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);

	if (fd >= 0)
		(void)fchmod(fd, 0666); /* past the umask */
	if (fd < 0 && errno == EEXIST) {
		created = 0;
		fd = shm_open(seg_name, O_RDWR | O_CLOEXEC, 0600);
	}
	if (fd < 0)
		return NULL;
	if (created && ftruncate(fd, sizeof *s) != 0) {
		close(fd);
		shm_unlink(seg_name);
		return NULL;
	}
	if (!created) {
		/* the creator may still be sizing it */
		struct stat st;

		for (int i = 0; i < 1000; i++) {
			if (fstat(fd, &st) != 0) {
				close(fd);
				return NULL;
			}
			if ((size_t)st.st_size >= sizeof *s)
				break;
			nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
		}
		if ((size_t)st.st_size < sizeof *s) {
			close(fd);
			return NULL;
		}
	}
	s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (s == MAP_FAILED)
		return NULL;
	if (created) {
		if (init_mutex(&s->lock) != 0) {
			munmap(s, sizeof *s);
			shm_unlink(seg_name);
			return NULL;
		}
		s->ndev = (uint32_t)ndev;
		for (int i = 0; i < ndev; i++)
			s->total[i] = total;
		__atomic_store_n(&s->magic, POOL_MAGIC, __ATOMIC_RELEASE);
		return s;
	}
	for (int i = 0; i < 1000 && __atomic_load_n(&s->magic, __ATOMIC_ACQUIRE) != POOL_MAGIC; i++)
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	if (__atomic_load_n(&s->magic, __ATOMIC_ACQUIRE) != POOL_MAGIC) {
		munmap(s, sizeof *s);
		return NULL;
	}
	return s;
}

int emu_pool_init(int ndev, size_t total)
{
	struct pool_shm *s;
	int rc = 0;

	if (seg && my_pid == getpid())
		return 0;
	/* a forked child takes a record of its own */
	seg = NULL;
	my_rec = -1;
	my_pid = getpid();
	name_segment();
	s = attach(ndev, total);
	if (!s)
		return 0; /* per-process accounting */
	seg = s;
	seg_lock();
	reap(1);
	if (seg->ndev != (uint32_t)ndev || seg->total[0] != total) {
		if (live_records() == 0) {
			/* left by an earlier server with another size */
			seg->ndev = (uint32_t)ndev;
			for (int i = 0; i < EMU_MAX_DEVICES; i++)
				seg->total[i] = i < ndev ? total : 0;
		} else {
			/* one device, two sizes: refuse, and say why (cuInit
			 * can only return INVALID_VALUE) */
			fprintf(stderr,
				"rgpu-emu: shared pool %s is in use with %u device(s) of %llu bytes; "
				"asked for %d of %zu (set RGPU_EMU_POOL to use another)\n",
				seg_name, seg->ndev, (unsigned long long)seg->total[0], ndev, total);
			rc = -1;
		}
	}
	for (int i = 0; rc == 0 && i < POOL_RECS; i++)
		if (seg->rec[i].pid == 0) {
			memset(&seg->rec[i], 0, sizeof seg->rec[i]);
			seg->rec[i].pid = my_pid;
			seg->rec[i].start = proc_start(my_pid);
			my_rec = i;
			break;
		}
	seg_unlock();
	if (rc == 0 && my_rec < 0)
		rc = 0; /* full: this process accounts alone (still bounded) */
	if (rc != 0 || my_rec < 0) {
		munmap(seg, sizeof *seg);
		seg = NULL;
	}
	return rc;
}

/* Bytes in use on dev by every live process (segment locked). */
static uint64_t used_locked(int dev)
{
	uint64_t n = 0;

	for (int i = 0; i < POOL_RECS; i++)
		if (seg->rec[i].pid)
			n += seg->rec[i].used[dev];
	return n;
}

int emu_pool_take(int dev, size_t n)
{
	struct emu_device *d = &emu_devices[dev];

	if (!seg || my_pid != getpid()) {
		if (d->total - d->used < n)
			return -1;
		d->used += n;
		return 0;
	}
	seg_lock();
	uint64_t used = used_locked(dev);

	if (used > d->total || d->total - used < n) {
		/* only now look for the dead: kill() for every record on every
		 * allocation would cost more than the allocation */
		reap(1);
		used = used_locked(dev);
	}
	if (used > d->total || d->total - used < n) {
		seg_unlock();
		return -1;
	}
	seg->rec[my_rec].used[dev] += n;
	seg_unlock();
	d->used += n;
	return 0;
}

void emu_pool_give(int dev, size_t n)
{
	struct emu_device *d = &emu_devices[dev];

	d->used -= n;
	if (!seg || my_pid != getpid())
		return;
	seg_lock();
	seg->rec[my_rec].used[dev] -= n;
	seg_unlock();
}

size_t emu_pool_used(int dev)
{
	uint64_t n;

	if (!seg || my_pid != getpid())
		return emu_devices[dev].used;
	seg_lock();
	reap(0);
	n = used_locked(dev);
	seg_unlock();
	return n;
}

/* A process that exits normally hands its record back at once, and the last
 * one removes the segment. */
__attribute__((destructor)) static void pool_exit(void)
{
	int last;

	if (!seg || my_pid != getpid())
		return;
	seg_lock();
	memset(&seg->rec[my_rec], 0, sizeof seg->rec[my_rec]);
	reap(0);
	last = live_records() == 0;
	if (last)
		shm_unlink(seg_name);
	seg_unlock();
	munmap(seg, sizeof *seg);
	seg = NULL;
}
