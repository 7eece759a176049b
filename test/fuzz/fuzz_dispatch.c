/* libFuzzer harness: every request through a session worker's dispatcher
 * (daemon/session.c, dispatch.c, ops_*.c) against the emulated device
 * (emu/, linked in), with the parent's side of the gate (gate_serve,
 * access.c, lease.c in open mode) on a thread of this process.
 *
 * One input is one client connection: the harness sends a proper HELLO,
 * then the input as frames.  Each frame header gets the protocol's magic
 * and version, its opcode is taken modulo RGPU_OP_MAX and its length is cut
 * to what the input holds, so the fuzzer spends its time on payloads and
 * sequences of requests rather than on framing (fuzz_frame covers that).
 * The connection is in memory (memconn.c): no sockets, no threads per run.
 * When the input ends the client has gone: the session frees everything it
 * created, as a worker does, so nothing carries over to the next run.
 *
 * Built with -DFUZZ_LEASES (fuzz_dispatch_lease) the server requires leases:
 * the session belongs to a job holding a 64 MiB slice of GPU 0 and the
 * whole GPU 1, starts after HELLO as a worker does (the parent checked the
 * credential), and when it ends every byte it charged must be given back. */
#include "driver.h"
#include "gate.h"
#include "lease.h"
#include "log.h"
#include "memconn.h"
#include "rgpud.h"
#include "session.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CHECK(c) do { if (!(c)) __builtin_trap(); } while (0)

/* what server.c defines in rgpud (not linked here) */
struct rgpud rgpud_server = { .lock = PTHREAD_MUTEX_INITIALIZER, .listen_fd = -1, .unix_fd = -1 };

#ifdef FUZZ_LEASES
#define JOB 77
static struct rgpud_principal parent_who = { .uid = 1000, .gid = 1000, .job_id = JOB,
					     .authenticated = 1 };
static char state_dir[256];
#else
static struct rgpud_principal parent_who;
#endif
static int gate_fd[2];

/* The emulated device runs kernels on this CPU, a thread block at a time:
 * a grid a GPU finishes in a millisecond can take it minutes.  Launches
 * past this many threads are refused as too big for the device, so the
 * fuzzer's time goes to the request handling and not to arithmetic. */
#define FUZZ_MAX_THREADS (1u << 16)

static int too_big(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz)
{
	return (double)gx * gy * gz * bx * by * bz > FUZZ_MAX_THREADS;
}

static CUresult CUDAAPI launch_capped(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
				     unsigned bx, unsigned by, unsigned bz, unsigned smem,
				     CUstream st, void **params, void **extra)
{
	if (too_big(gx, gy, gz, bx, by, bz))
		return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
	return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, st, params, extra);
}

static CUresult CUDAAPI launch_ex_capped(const CUlaunchConfig *c, CUfunction f, void **params,
					void **extra)
{
	if (c && too_big(c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY,
			 c->blockDimZ))
		return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
	return cuLaunchKernelEx(c, f, params, extra);
}

/* The emulated device's test kernel busy_wait_ns sleeps as long as the
 * client asks (clock_nanosleep to an absolute time), as a spinning kernel
 * holds a real GPU.  This definition takes the place of libc's for the
 * code linked into the harness: any sleep is cut to 1 ms. */
int clock_nanosleep(clockid_t clk, int flags, const struct timespec *req, struct timespec *rem)
{
	struct timespec ms = { 0, 1000 * 1000 };
	(void)clk;
	(void)flags;
	(void)req;
	(void)rem;
	return (int)syscall(SYS_clock_nanosleep, CLOCK_MONOTONIC, 0, &ms, NULL);
}

static void *gate_main(void *arg)
{
	gate_serve(gate_fd[1], &parent_who, "fuzz", getpid());
	/* The parent stopped serving this worker: the worker would _exit(3)
	 * at its next call, which libFuzzer cannot catch.  A crash here saves
	 * the input that did it. */
	__builtin_trap();
	return NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	int verbose = getenv("RGPU_FUZZ_LOG") != NULL;
	rgpu_log_set_level(verbose ? RGPU_LOG_DEBUG : 0);
	/* a small emulated device: allocations are real host memory */
	setenv("RGPU_EMU_DEVICES", "2", 0);
	setenv("RGPU_EMU_MEM", "256M", 0);
	/* no InfiniBand upgrade from a TRANSPORT request */
	setenv("RGPU_TRANSPORT", "tcp", 1);
	if (!verbose) {
		/* kernels' printf goes to stdout; libFuzzer reports on stderr */
		int fd = open("/dev/null", O_WRONLY);
		if (fd >= 0) {
			dup2(fd, STDOUT_FILENO);
			close(fd);
		}
	}
	/* a peer copy between two rgpuds would wait a minute for the other
	 * side, or connect where the input says: refused after its fields
	 * are read */
	rgpud_server.no_outbound = 1;
	struct rgpud_driver *d = &rgpud_server.drv;
	memset(d, 0, sizeof(*d));
	snprintf(d->path, sizeof(d->path), "emulated (linked in)");
#define FUZZ_DRV(fn) d->fn = fn;
	RGPUD_DRIVER_FUNCS(FUZZ_DRV)
	RGPUD_DRIVER_OPTIONAL(FUZZ_DRV)
	RGPUD_DRIVER_MODFUNCS(FUZZ_DRV)
	/* application memory, peers, arrays and textures: what the emulated
	 * device serves of it */
	RGPUD_DRIVER_APPMEM(FUZZ_DRV)
#undef FUZZ_DRV
	d->cuLaunchKernel = launch_capped;
	d->cuLaunchKernelEx = launch_ex_capped;
	d->have_vmm = 1;
	d->have_modfuncs = 1; /* graphs are not emulated: have_graphs stays 0 */
	CHECK(d->cuInit(0) == CUDA_SUCCESS);
	CHECK(d->cuDeviceGetCount(&rgpud_server.ndev) == CUDA_SUCCESS);
	snprintf(rgpud_server.hostname, sizeof(rgpud_server.hostname), "fuzz");

	char err[512];
#ifdef FUZZ_LEASES
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	snprintf(state_dir, sizeof(state_dir), "%s/rgpu-fuzz-dispatch.XXXXXX", base);
	CHECK(mkdtemp(state_dir));
	struct rgpud_access_config acfg = { .require_lease = 1, .state_dir = state_dir };
	CHECK(rgpud_access_init(&acfg, err, sizeof(err)) == 0);
	for (int i = 0; i < rgpud_server.ndev; i++) {
		size_t total;
		CUdevice cd;
		char name[128];
		CHECK(d->cuDeviceGet(&cd, i) == 0 && d->cuDeviceTotalMem_v2(&total, cd) == 0 &&
		      d->cuDeviceGetName(name, sizeof(name), cd) == 0);
		/* room for a slice and its context reserve on the small device */
		rgpud_lease_set_gpu((unsigned)i, name, total < (8ull << 30) ? 8ull << 30 : total);
	}
	struct rgpud_lease slice = { .job_id = JOB, .uid = 1000, .gpu = 0, .mem_limit = 64ull << 20 };
	struct rgpud_lease whole = { .job_id = JOB, .uid = 1000, .gpu = 1, .mem_limit = 0 };
	CHECK(rgpud_lease_grant(&slice, time(NULL), err, sizeof(err)) >= 0);
	CHECK(rgpud_lease_grant(&whole, time(NULL), err, sizeof(err)) >= 0);
	/* the persisted table is not needed after the grants */
	char p[600];
	snprintf(p, sizeof(p), "%s/%s", state_dir, RGPUD_LEASE_FILE);
	unlink(p);
	rmdir(state_dir);
#else
	struct rgpud_access_config acfg = { .open_access = 1 };
	CHECK(rgpud_access_init(&acfg, err, sizeof(err)) == 0);
#endif
	CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, gate_fd) == 0);
	gate_attach(gate_fd[0]);
	pthread_t t;
	CHECK(pthread_create(&t, NULL, gate_main, NULL) == 0);
	pthread_detach(t);
	return 0;
}

static void put_hdr(uint8_t *p, uint16_t op, uint32_t flags, uint32_t len, uint64_t id)
{
	struct rgpu_hdr h = { .magic = RGPU_PROTO_MAGIC, .version = RGPU_PROTO_VERSION,
			      .op = op, .flags = flags, .len = len, .id = id };
	rgpu_hdr_encode(&h, p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* HELLO: version, client name, no credential (open mode) */
	struct wbuf hello;
	wbuf_init(&hello);
	put_u32(&hello, RGPU_PROTO_VERSION);
	put_str(&hello, "fuzz_dispatch");
	put_bytes(&hello, NULL, 0);
	CHECK(!hello.oom);

	size_t cap = RGPU_HDR_SIZE + hello.len + size;
	uint8_t *in = malloc(cap);
	CHECK(in);
	put_hdr(in, RGPU_OP_HELLO, 0, (uint32_t)hello.len, 1);
	memcpy(in + RGPU_HDR_SIZE, hello.data, hello.len);
	size_t n = RGPU_HDR_SIZE + hello.len, hello_len = hello.len;
	wbuf_free(&hello);

	size_t off = 0;
	while (size - off >= RGPU_HDR_SIZE) {
		struct rgpu_hdr h;
		rgpu_hdr_decode(data + off, &h);
		off += RGPU_HDR_SIZE;
		size_t left = size - off;
		uint32_t len = h.len < left ? h.len : (uint32_t)left;
		put_hdr(in + n, (uint16_t)(h.op % RGPU_OP_MAX), h.flags, len, h.id);
		n += RGPU_HDR_SIZE;
		memcpy(in + n, data + off, len);
		n += len;
		off += len;
	}
	memcpy(in + n, data + off, size - off); /* a partial header: EOF inside it */
	n += size - off;

	(void)hello_len;
	struct memconn mc;
	memconn_init(&mc, in, n, 0);
	struct session *s = calloc(1, sizeof(*s));
	CHECK(s);
	s->srv = &rgpud_server;
	s->conn = &mc.c;
	s->out_fd = -1;
	snprintf(s->name, sizeof(s->name), "fuzz");
	ht_init(&s->ht);
	wbuf_init(&s->tx);
#ifdef FUZZ_LEASES
	/* as worker_main: the parent answered HELLO and sends the principal */
	s->hello_done = 1;
	s->who = parent_who;
	mc.in_off = RGPU_HDR_SIZE + hello_len;
#endif
	session_run(s);
#ifdef FUZZ_LEASES
	/* everything charged was given back, and nothing more */
	struct rgpud_lease l;
	CHECK(rgpud_lease_find(JOB, 0, time(NULL), &l) == 0 && l.used == 0);
	CHECK(rgpud_lease_find(JOB, 1, time(NULL), &l) == 0 && l.used == 0);
#else
	CHECK(mc.sent >= RGPU_HDR_SIZE + 4); /* HELLO was answered */
#endif
	free(s);
	memconn_fini(&mc);
	free(in);
	return 0;
}
