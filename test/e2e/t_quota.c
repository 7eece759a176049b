/*
 * A lease's quota counts the device memory a session holds besides
 * cuMemAlloc (issue 16): contexts beyond the one the lease reserves for,
 * cuCtxSetLimit heap / stack / printf FIFO growth, and module globals; and
 * cuMemGetInfo agrees with it.
 *
 * Starts a private munged and `rgpud --emulated --leases` (the current user
 * as SlurmUser, so it may grant leases), grants job 4242 a 1 GiB slice of
 * GPU 0, and speaks the raw protocol as that job.  Exit 77 without munge.
 *
 * usage: t_quota RGPUD   (RGPU_EMU_LIB names the emulated device)
 */
#include "config.h"
#include "raw.h"

#include <cuda.h>
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#ifndef HAVE_MUNGE
int main(void)
{
	printf("t_quota: built without munge: skipped\n");
	return 77;
}
#else
#include <munge.h>

#define GiB (1ull << 30)
#define MiB (1ull << 20)
#define JOB 4242

static int failures;
static char dir[] = "/tmp/rgpu-t_quota-XXXXXX";
static pid_t munged_pid, rgpud_pid;
static char sock[700];

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "t_quota: FAIL: " __VA_ARGS__); fputc('\n', stderr); failures++; } } while (0)

static const char *find(const char *const *paths)
{
	for (; *paths; paths++)
		if (access(*paths, X_OK) == 0)
			return *paths;
	return NULL;
}

static int start_munged(void)
{
	static const char *const where[] = { "/usr/sbin/munged", "/usr/bin/munged", "/sbin/munged", NULL };
	const char *munged = find(where);
	if (!munged)
		return -1;
	char key[700], s[720], pid[720], log[720], seed[720], keyopt[720];
	snprintf(key, sizeof(key), "%s/munge.key", dir);
	snprintf(sock, sizeof(sock), "%s/munge.socket", dir);
	snprintf(s, sizeof(s), "--socket=%s", sock);
	snprintf(pid, sizeof(pid), "--pid-file=%s/munged.pid", dir);
	snprintf(log, sizeof(log), "--log-file=%s/munged.log", dir);
	snprintf(seed, sizeof(seed), "--seed-file=%s/munged.seed", dir);
	snprintf(keyopt, sizeof(keyopt), "--key-file=%s", key);
	unsigned char k[1024];
	int rfd = open("/dev/urandom", O_RDONLY);
	int kfd = open(key, O_WRONLY | O_CREAT | O_EXCL, 0600);
	if (rfd < 0 || kfd < 0 || read(rfd, k, sizeof(k)) != (ssize_t)sizeof(k) ||
	    write(kfd, k, sizeof(k)) != (ssize_t)sizeof(k))
		return -1;
	close(rfd);
	close(kfd);
	munged_pid = fork();
	if (munged_pid == 0) {
		int devnull = open("/dev/null", O_RDWR);
		dup2(devnull, 0);
		dup2(devnull, 1);
		dup2(devnull, 2);
		execl(munged, "munged", "--foreground", keyopt, s, pid, log, seed, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 100; i++) {
		if (access(sock, F_OK) == 0) {
			setenv("RGPU_MUNGE_SOCKET", sock, 1);
			return 0;
		}
		if (waitpid(munged_pid, NULL, WNOHANG) == munged_pid) {
			munged_pid = 0;
			return -1;
		}
		usleep(50000);
	}
	return -1;
}

static unsigned free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
		return 0;
	close(fd);
	return ntohs(sa.sin_port);
}

static int start_rgpud(const char *rgpud, unsigned port)
{
	char listen[64], state[720], user[300];
	struct passwd *pw = getpwuid(getuid());
	if (!pw)
		return -1;
	snprintf(listen, sizeof(listen), "--listen=127.0.0.1:%u", port);
	snprintf(state, sizeof(state), "--state-dir=%s/state", dir);
	snprintf(user, sizeof(user), "--slurm-user=%s", pw->pw_name);
	mkdir(state + strlen("--state-dir="), 0700);
	char logf[720];
	snprintf(logf, sizeof(logf), "%s/rgpud.log", dir);
	rgpud_pid = fork();
	if (rgpud_pid == 0) {
		int fd = open(logf, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		dup2(fd, 1);
		dup2(fd, 2);
		/* the reserve this test's arithmetic assumes, whatever the default */
		execl(rgpud, "rgpud", "--emulated", "--leases", "--ctx-reserve=512M", listen, state, user,
		      (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 100; i++) {
		struct raw c;
		if (raw_connect(&c, "127.0.0.1", port) == 0) {
			close(c.fd);
			return 0;
		}
		if (waitpid(rgpud_pid, NULL, WNOHANG) == rgpud_pid) {
			rgpud_pid = 0;
			return -1;
		}
		usleep(100000);
	}
	return -1;
}

/* HELLO with a munge credential for job (0: none in Slurm) */
static int hello(struct raw *c, unsigned port, uint64_t job)
{
	char payload[64];
	snprintf(payload, sizeof(payload), "rgpu-job=%llu", (unsigned long long)job);
	munge_ctx_t ctx = munge_ctx_create();
	char *cred = NULL;
	if (!ctx || munge_ctx_set(ctx, MUNGE_OPT_SOCKET, sock) != EMUNGE_SUCCESS ||
	    munge_encode(&cred, ctx, payload, (int)strlen(payload)) != EMUNGE_SUCCESS) {
		munge_ctx_destroy(ctx);
		return -1;
	}
	munge_ctx_destroy(ctx);
	if (raw_connect(c, "127.0.0.1", port) < 0) {
		free(cred);
		return -1;
	}
	struct wbuf w;
	struct raw_reply rp = { 0 };
	wbuf_init(&w);
	put_u32(&w, RGPU_PROTO_VERSION);
	put_str(&w, "t_quota");
	put_bytes(&w, cred, strlen(cred));
	free(cred);
	int32_t st = raw_call(c, RGPU_OP_HELLO, &w, &rp);
	wbuf_free(&w);
	free(rp.data);
	return st == 0 ? 0 : -1;
}

static struct wbuf W;
static struct raw_reply RP;

static uint64_t ctx_create(struct raw *c, int32_t *st)
{
	wbuf_reset(&W);
	put_u32(&W, 0);
	put_u32(&W, 0);
	*st = raw_call(c, RGPU_OP_CTX_CREATE, &W, &RP);
	return *st == 0 ? get_u64(&RP.r) : 0;
}

/* the quota's free bytes as cuMemGetInfo gives them */
static uint64_t mem_free(struct raw *c, uint64_t ctx)
{
	wbuf_reset(&W);
	put_u64(&W, ctx);
	if (raw_call(c, RGPU_OP_MEM_GET_INFO, &W, &RP) != 0)
		return UINT64_MAX;
	return get_u64(&RP.r);
}

static int32_t set_limit(struct raw *c, uint64_t ctx, uint32_t lim, uint64_t v)
{
	wbuf_reset(&W);
	put_u64(&W, ctx);
	put_u32(&W, lim);
	put_u64(&W, v);
	return raw_call(c, RGPU_OP_CTX_SET_LIMIT, &W, &RP);
}

/* Application memory (issue 10): VMM physical memory and pool reserves are
 * charged; exported memory is importable by the same job only, and the
 * importer is not charged again. */
static void appmem(unsigned port, struct raw *admin, struct raw *job, uint64_t c1)
{
	int32_t st;
	uint64_t f0 = mem_free(job, c1);
	CHECK(f0 == GiB, "appmem: start with the whole quota free: %llu", (unsigned long long)f0);
	wbuf_reset(&W);
	put_u32(&W, 0);
	put_u64(&W, 256 * MiB);
	put_u32(&W, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	st = raw_call(job, RGPU_OP_VMM_CREATE, &W, &RP);
	uint64_t h = st == 0 ? get_u64(&RP.r) : 0;
	CHECK(h, "VMM_CREATE: %d", st);
	CHECK(mem_free(job, c1) == f0 - 256 * MiB, "VMM_CREATE charges 256 MiB: free %llu",
	      (unsigned long long)mem_free(job, c1));
	wbuf_reset(&W);
	put_u32(&W, 0);
	put_u64(&W, GiB);
	put_u32(&W, 0);
	st = raw_call(job, RGPU_OP_VMM_CREATE, &W, &RP);
	CHECK(st == CUDA_ERROR_OUT_OF_MEMORY, "VMM_CREATE beyond the quota: %d", st);
	CHECK(mem_free(job, c1) == f0 - 256 * MiB, "a refused VMM_CREATE charged something");

	wbuf_reset(&W);
	put_u64(&W, h);
	st = raw_call(job, RGPU_OP_VMM_EXPORT, &W, &RP);
	uint8_t token[16] = { 0 };
	const void *t = st == 0 ? get_raw(&RP.r, 16) : NULL;
	CHECK(t, "VMM_EXPORT: %d", st);
	if (t)
		memcpy(token, t, 16);
	/* another job (with its own lease on the GPU) may not import it */
	wbuf_reset(&W);
	put_u64(&W, JOB + 1);
	put_u32(&W, (uint32_t)getuid());
	put_u32(&W, 0);
	put_u64(&W, GiB);
	put_u64(&W, 0);
	st = raw_call(admin, RGPU_OP_LEASE_GRANT, &W, &RP);
	CHECK(st == 0, "LEASE_GRANT for a second job: %d", st);
	struct raw other, same;
	if (hello(&other, port, JOB + 1) == 0) {
		wbuf_reset(&W);
		put_raw(&W, token, 16);
		st = raw_call(&other, RGPU_OP_VMM_IMPORT, &W, &RP);
		CHECK(st == CUDA_ERROR_NOT_PERMITTED, "another job imported the memory: %d", st);
		close(other.fd);
	} else {
		CHECK(0, "HELLO of the second job refused");
	}
	/* a second session of the same job may, and is not charged again */
	if (hello(&same, port, JOB) == 0) {
		wbuf_reset(&W);
		put_raw(&W, token, 16);
		st = raw_call(&same, RGPU_OP_VMM_IMPORT, &W, &RP);
		uint64_t ih = 0, isize = 0;
		if (st == 0) {
			ih = get_u64(&RP.r);
			isize = get_u64(&RP.r);
		}
		CHECK(st == 0 && ih && isize == 256 * MiB, "import by the same job: %d, %llu bytes", st,
		      (unsigned long long)isize);
		CHECK(mem_free(job, c1) == f0 - 256 * MiB, "the import was charged again");
		/* a forged token is unknown */
		token[0] ^= 1;
		wbuf_reset(&W);
		put_raw(&W, token, 16);
		st = raw_call(&same, RGPU_OP_VMM_IMPORT, &W, &RP);
		CHECK(st == CUDA_ERROR_INVALID_VALUE, "a forged token: %d", st);
		close(same.fd);
	} else {
		CHECK(0, "HELLO of the job's second session refused");
	}
	wbuf_reset(&W);
	put_u64(&W, h);
	st = raw_call(job, RGPU_OP_VMM_RELEASE, &W, &RP);
	CHECK(st == 0 && mem_free(job, c1) == f0, "VMM_RELEASE refunds: %d, free %llu", st,
	      (unsigned long long)mem_free(job, c1));

	/* a pool's reserve is charged, and refunded when it shrinks */
	wbuf_reset(&W);
	put_u32(&W, 0);
	st = raw_call(job, RGPU_OP_POOL_DEFAULT, &W, &RP);
	uint64_t pool = st == 0 ? get_u64(&RP.r) : 0;
	CHECK(pool, "POOL_DEFAULT: %d", st);
	wbuf_reset(&W);
	put_u64(&W, c1);
	put_u64(&W, 0);
	put_u64(&W, pool);
	put_u64(&W, 100 * MiB);
	st = raw_call(job, RGPU_OP_MEM_ALLOC_ASYNC, &W, &RP);
	uint64_t p = st == 0 ? get_u64(&RP.r) : 0;
	CHECK(p, "MEM_ALLOC_ASYNC: %d", st);
	CHECK(mem_free(job, c1) == f0 - 100 * MiB, "a 100 MiB pool allocation: free %llu",
	      (unsigned long long)mem_free(job, c1));
	wbuf_reset(&W);
	put_u64(&W, c1);
	put_u64(&W, 0);
	put_u64(&W, pool);
	put_u64(&W, 2 * GiB);
	st = raw_call(job, RGPU_OP_MEM_ALLOC_ASYNC, &W, &RP);
	CHECK(st == CUDA_ERROR_OUT_OF_MEMORY, "a pool allocation beyond the quota: %d", st);
	CHECK(mem_free(job, c1) == f0 - 100 * MiB, "a refused pool allocation charged something");
	wbuf_reset(&W);
	put_u64(&W, c1);
	put_u64(&W, 0);
	put_u64(&W, p);
	st = raw_call(job, RGPU_OP_MEM_FREE_ASYNC, &W, &RP);
	CHECK(st == 0, "MEM_FREE_ASYNC: %d", st);
	/* release threshold 0: the pool gives it back at the next
	 * synchronisation, as CUDA's pools do */
	wbuf_reset(&W);
	put_u64(&W, c1);
	put_u64(&W, 0);
	st = raw_call(job, RGPU_OP_STREAM_SYNC, &W, &RP);
	CHECK(st == 0 && mem_free(job, c1) == f0, "a synchronisation refunds the reserve: %d, free %llu",
	      st, (unsigned long long)mem_free(job, c1));
}

static void run(unsigned port)
{
	struct raw admin, job;
	int32_t st;
	if (hello(&admin, port, 0) < 0) {
		CHECK(0, "admin HELLO refused");
		return;
	}
	wbuf_reset(&W);
	put_u64(&W, JOB);
	put_u32(&W, (uint32_t)getuid());
	put_u32(&W, 0);
	put_u64(&W, GiB);
	put_u64(&W, 0);
	st = raw_call(&admin, RGPU_OP_LEASE_GRANT, &W, &RP);
	CHECK(st == 0, "LEASE_GRANT: %d", st);
	if (hello(&job, port, JOB) < 0) {
		CHECK(0, "job HELLO refused");
		return;
	}
	uint64_t c1 = ctx_create(&job, &st);
	CHECK(c1, "first context: %d", st);
	uint64_t f0 = mem_free(&job, c1);
	/* the first context is the one the lease reserves for */
	CHECK(f0 == GiB, "free with one context: %llu, want the whole 1 GiB quota", (unsigned long long)f0);

	uint64_t c2 = ctx_create(&job, &st);
	CHECK(c2, "second context: %d", st);
	uint64_t f1 = mem_free(&job, c1);
	CHECK(f1 == f0 - 512 * MiB, "a second context: free %llu, want %llu (512 MiB charged)",
	      (unsigned long long)f1, (unsigned long long)(f0 - 512 * MiB));

	/* heap: 8 MiB at creation (emulated device) -> 108 MiB */
	st = set_limit(&job, c2, CU_LIMIT_MALLOC_HEAP_SIZE, 108 * MiB);
	CHECK(st == 0, "heap limit: %d", st);
	uint64_t f2 = mem_free(&job, c1);
	CHECK(f2 == f1 - 100 * MiB, "heap +100 MiB: free %llu, want %llu", (unsigned long long)f2,
	      (unsigned long long)(f1 - 100 * MiB));
	/* stack: per resident thread (132 SMs x 2048 threads): 1 KiB more */
	st = set_limit(&job, c2, CU_LIMIT_STACK_SIZE, 2048);
	CHECK(st == 0, "stack limit: %d", st);
	uint64_t f3 = mem_free(&job, c1);
	uint64_t stack = 1024ull * 132 * 2048;
	CHECK(f3 == f2 - stack, "stack +1 KiB/thread: free %llu, want %llu", (unsigned long long)f3,
	      (unsigned long long)(f2 - stack));
	/* more than the quota: refused, nothing charged */
	st = set_limit(&job, c2, CU_LIMIT_PRINTF_FIFO_SIZE, 4 * GiB);
	CHECK(st == CUDA_ERROR_OUT_OF_MEMORY, "a 4 GiB printf FIFO on a 1 GiB quota: %d", st);
	CHECK(mem_free(&job, c1) == f3, "a refused limit changed the quota");
	/* back down: refunded */
	st = set_limit(&job, c2, CU_LIMIT_MALLOC_HEAP_SIZE, 8 * MiB);
	uint64_t f4 = mem_free(&job, c1);
	CHECK(st == 0 && f4 == f3 + 100 * MiB, "heap back to 8 MiB: %d, free %llu, want %llu", st,
	      (unsigned long long)f4, (unsigned long long)(f3 + 100 * MiB));

	/* globals: charged when the client learns of them */
	wbuf_reset(&W);
	put_u64(&W, c1);
	put_u32(&W, RGPU_IMAGE_FATBIN);
	extern const unsigned char test_kernels_fatbin[];
	extern const size_t test_kernels_fatbin_size;
	put_bytes(&W, test_kernels_fatbin, test_kernels_fatbin_size);
	st = raw_call(&job, RGPU_OP_MODULE_LOAD, &W, &RP);
	uint64_t mod = st == 0 ? get_u64(&RP.r) : 0;
	CHECK(mod, "MODULE_LOAD: %d", st);
	wbuf_reset(&W);
	put_u64(&W, c1);
	put_u64(&W, mod);
	put_str(&W, "g_counter");
	st = raw_call(&job, RGPU_OP_MODULE_GET_GLOBAL, &W, &RP);
	uint64_t gsize = 0;
	if (st == 0) {
		get_u64(&RP.r);
		gsize = get_u64(&RP.r);
	}
	CHECK(st == 0 && gsize, "MODULE_GET_GLOBAL: %d", st);
	uint64_t f5 = mem_free(&job, c1);
	CHECK(f5 == f4 - gsize, "a global of %llu bytes: free %llu, want %llu", (unsigned long long)gsize,
	      (unsigned long long)f5, (unsigned long long)(f4 - gsize));
	wbuf_reset(&W);
	put_u64(&W, c1);
	put_u64(&W, mod);
	st = raw_call(&job, RGPU_OP_MODULE_UNLOAD, &W, &RP);
	CHECK(st == 0 && mem_free(&job, c1) == f4, "MODULE_UNLOAD refunds its globals: %d", st);

	/* a third context does not fit what is left (1 GiB - 512 MiB - stack) */
	uint64_t c3 = ctx_create(&job, &st);
	CHECK(!c3 && st == CUDA_ERROR_OUT_OF_MEMORY, "a third context beyond the quota: %d", st);
	/* the second one's context and limits come back with it */
	wbuf_reset(&W);
	put_u64(&W, c2);
	st = raw_call(&job, RGPU_OP_CTX_DESTROY, &W, &RP);
	uint64_t f6 = mem_free(&job, c1);
	CHECK(st == 0 && f6 == GiB, "CTX_DESTROY refunds: %d, free %llu, want the whole 1 GiB", st,
	      (unsigned long long)f6);

	/* another session of the job (a second process of it): its context
	 * is charged as well; the lease reserves for one context, not one per
	 * session (issue 16.5) */
	struct raw job2;
	if (hello(&job2, port, JOB) < 0) {
		CHECK(0, "second session's HELLO refused");
	} else {
		uint64_t d1 = ctx_create(&job2, &st);
		CHECK(d1, "second session's context: %d", st);
		uint64_t g1 = mem_free(&job, c1);
		CHECK(g1 == GiB - 512 * MiB, "a second session's context: free %llu, want %llu",
		      (unsigned long long)g1, (unsigned long long)(GiB - 512 * MiB));
		CHECK(mem_free(&job2, d1) == g1, "the two sessions see different quotas");
		wbuf_reset(&W);
		put_u64(&W, d1);
		put_u64(&W, 600 * MiB);
		st = raw_call(&job2, RGPU_OP_MEM_ALLOC, &W, &RP);
		CHECK(st == CUDA_ERROR_OUT_OF_MEMORY, "600 MiB with 512 MiB left: %d", st);
		wbuf_reset(&W);
		put_u64(&W, d1);
		put_u64(&W, 512 * MiB);
		st = raw_call(&job2, RGPU_OP_MEM_ALLOC, &W, &RP);
		CHECK(st == 0 && mem_free(&job, c1) == 0, "the last 512 MiB: %d", st);
		close(job2.fd);
		/* the session's end gives its context and memory back */
		uint64_t g2 = 0;
		for (int t = 0; t < 100 && (g2 = mem_free(&job, c1)) != GiB; t++)
			usleep(50 * 1000);
		CHECK(g2 == GiB, "after the second session ended: free %llu, want 1 GiB",
		      (unsigned long long)g2);
	}
	appmem(port, &admin, &job, c1);
	close(job.fd);
	close(admin.fd);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: t_quota RGPUD\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	chmod(dir, 0755);
	int rc = 0;
	if (start_munged() < 0) {
		printf("t_quota: no munged: skipped\n");
		rc = 77;
	} else {
		unsigned port = free_port();
		if (!port || start_rgpud(argv[1], port) < 0) {
			fprintf(stderr, "t_quota: FAIL: rgpud --leases did not start (log in %s)\n", dir);
			rc = 1;
		} else {
			wbuf_init(&W);
			run(port);
			wbuf_free(&W);
			free(RP.data);
			rc = failures ? 1 : 0;
		}
	}
	if (rgpud_pid > 0) {
		kill(rgpud_pid, SIGTERM);
		waitpid(rgpud_pid, NULL, 0);
	}
	if (munged_pid > 0) {
		kill(munged_pid, SIGTERM);
		waitpid(munged_pid, NULL, 0);
	}
	if (rc == 1) {
		char cmd[800];
		snprintf(cmd, sizeof(cmd), "cat %s/rgpud.log >&2", dir);
		if (system(cmd) < 0)
			perror("system");
	} else {
		char cmd[800];
		snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
		if (system(cmd) < 0)
			perror("system");
	}
	if (rc == 0)
		printf("t_quota: PASS\n");
	return rc;
}
#endif
