/* rgpud: serves this node's GPUs to rgpu clients. */
#include "config.h"
#include "log.h"
#include "proto.h"
#include "gate.h"
#include "lease.h"
#include "metrics.h"
#include "mem/mem.h"
#include "session.h"
#include "sched/scheduler.h"
#include "crash.h"
#include "rgpud.h"
#include "size.h"
#include "transport.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef RGPU_PKGLIBDIR
#define RGPU_PKGLIBDIR "/usr/local/lib/rgpu"
#endif
#ifndef RGPU_STATEDIR
#define RGPU_STATEDIR "/var/lib/rgpu"
#endif

static void usage(FILE *f)
{
	fprintf(f,
"Usage: rgpud [OPTION]...\n"
"Serve this node's GPUs to rgpu clients (programs using the rgpu libcuda.so.1).\n"
"\n"
"  -l, --listen=ADDR[:PORT]  address to listen on (default 0.0.0.0:%d)\n"
"  -e, --emulated            serve emulated GPUs from host memory instead of the\n"
"                            CUDA driver (for tests and demos; no GPU needed)\n"
"      --driver=PATH         CUDA driver library to load (default libcuda.so.1,\n"
"                            or the emulated device with --emulated)\n"
"      --leases              require a munge credential and a Slurm job lease for\n"
"                            every client (cluster mode)\n"
"      --allow-users=LIST    without --leases: users (names or uids, comma-\n"
"                            separated) admitted besides root; a munge\n"
"                            credential is required (the default admits root only)\n"
"      --allow-groups=LIST   the same for the members of these groups\n"
"      --open                serve every client, without a credential\n"
"      --hello-timeout=SEC   close connections that send no HELLO by then (10)\n"
"      --max-pending-per-host=N  connections waiting for their HELLO per client\n"
"                            address (128); more are closed at once\n"
"      --checkpoint-interval=S  clients with standby servers checkpoint their\n"
"                               sessions every S seconds (0: never, the default)\n"
"      --worker-layout=fixed|random  session workers without (fixed, the default)\n"
"                            or with address-space randomisation; fixed lets a\n"
"                            moved or recovered session find the driver's\n"
"                            module data at the same device addresses\n"
"      --max-sessions-per-user=N  sessions one user (other than root) may hold\n"
"                            at once (default: no limit)\n"
"      --state-dir=DIR       where leases persist across restarts (default %s)\n"
"      --slurm-user=USER     besides root, the user allowed to manage leases\n"
"      --metrics=[ADDR:]PORT serve Prometheus metrics on http://ADDR:PORT/metrics\n"
"                            (ADDR 127.0.0.1 when only a port is given)\n"
"      --lease-check-interval=SEC  how often expired leases end (default 15)\n"
"      --ctx-reserve=SIZE    device memory set aside per slice for its context,\n"
"                            and charged for every context (default 526M)\n"
"      --sched=POLICY        how the sessions of one GPU share it: fair (weighted\n"
"                            by --rgpu-share, with history; the default), las\n"
"                            (least attained service first) or fifo (no gate)\n"
"      --sched-quantum=MS    GPU time a session may run ahead of the others and\n"
"                            keep queued (default 2)\n"
"      --mps=off|job         off (default): sessions are time-sliced; job: one MPS\n"
"                            server per Slurm job (per uid outside a job), so a\n"
"                            job's sessions run at once (needs root)\n"
"      --mps-dir=DIR         where MPS pipe and log directories go (default\n"
"                            /run/rgpud/mps)\n"
"      --mps-control=PATH    the MPS control program (default\n"
"                            nvidia-cuda-mps-control in PATH, /usr/local/nvidia/bin)\n"
"      --mps-default-share=P with --mps=job: the part of the GPU's threads (percent)\n"
"                            of a session whose lease gives no --rgpu-share (75)\n"
"      --memory-policy=POLICY  when an allocation does not fit on the GPU:\n"
"                            swap (default: evict idle sessions to host memory),\n"
"                            wait (until memory is freed), or fail\n"
"      --memory-wait=SEC     how long an allocation may wait for room under swap\n"
"                            or wait (default 60; 0: not at all)\n"
"      --memory-quantum=SEC  under swap, the least time a session keeps its memory\n"
"                            on a GPU once it got it, before it may be evicted\n"
"                            (default 1; longer where swapping it costs more:\n"
"                            rgpud(8))\n"
"      --memory-overcommit=RATIO  with --leases: slices of a GPU may together\n"
"                            promise up to RATIO times its memory (1 to 10,\n"
"                            default 1; above 1 needs swap or wait)\n"
"  -d, --daemon              detach and run in the background\n"
"      --pidfile=PATH        write the process id to PATH\n"
"  -s, --syslog              log to syslog instead of stderr\n"
"  -v, --log-level=LEVEL     error, warn, info (default) or debug (debug also\n"
"                            names each request the driver fails)\n"
"  -h, --help                show this help and exit\n"
"  -V, --version             show the version and exit\n"
"\n"
"Clients select GPUs with RGPU_SERVERS=host[:port][/gpu],...  See rgpud(8).\n",
		RGPU_DEFAULT_PORT, RGPU_STATEDIR);
}

/* long options without a short form */
enum { OPT_METRICS = 256, OPT_SCHED, OPT_QUANTUM, OPT_MPS, OPT_MPS_DIR, OPT_MPS_CONTROL,
       OPT_MPS_SHARE, OPT_WORKER_SCHED, OPT_MEM_POLICY, OPT_MEM_WAIT, OPT_MEM_OVERCOMMIT,
       OPT_MEM_QUANTUM,
       OPT_CTX_RESERVE, OPT_WORKER_LAYOUT };

/* Parses a non-negative integer option in [lo, hi]; exits on error. */
static long num_opt(const char *name, const char *v, long lo, long hi)
{
	char *end;
	errno = 0;
	long n = strtol(v, &end, 10);
	if (errno || end == v || *end || n < lo || n > hi) {
		fprintf(stderr, "rgpud: --%s: '%s' is not a number from %ld to %ld\n", name, v, lo, hi);
		exit(2);
	}
	return n;
}

/* --allow-users / --allow-groups: names or numbers, comma-separated,
 * appended to *v.  Exits on an unknown name. */
static void id_list(const char *name, const char *arg, int groups, uint32_t **v, size_t *n)
{
	char *copy = strdup(arg), *save = NULL;
	if (!copy)
		exit(1);
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		uint32_t id;
		char *end;
		errno = 0;
		unsigned long num = strtoul(t, &end, 10);
		struct passwd *pw = groups ? NULL : getpwnam(t);
		struct group *gr = groups ? getgrnam(t) : NULL;
		if (pw)
			id = pw->pw_uid;
		else if (gr)
			id = gr->gr_gid;
		else if (!errno && *t && !*end && num < UINT32_MAX)
			id = (uint32_t)num;
		else {
			fprintf(stderr, "rgpud: --%s: no such %s '%s'\n", name, groups ? "group" : "user", t);
			exit(2);
		}
		uint32_t *nv = realloc(*v, (*n + 1) * sizeof(*nv));
		if (!nv)
			exit(1);
		*v = nv;
		(*v)[(*n)++] = id;
	}
	free(copy);
}

/* Whether the listen address is a loopback one (--open is then local). */
static int is_loopback(const char *addr)
{
	return !strncmp(addr, "127.", 4) || !strncmp(addr, "[::1]", 5) ||
	       !strncmp(addr, "localhost:", 10);
}

/* metrics: GPU time a live worker attained (daemon/sched/) */
static uint64_t sched_gpu_time(int pid, unsigned gpu)
{
	return sched_parent_attained((pid_t)pid, gpu, NULL, NULL, NULL);
}

static void on_signal(int sig)
{
	(void)sig;
	rgpud_server.stopping = 1;
}

/* The emulated device: installed beside rgpu's other modules, or in the
 * build tree next to this binary. */
static void emu_path(char *out, size_t len)
{
	const char *env = getenv("RGPU_EMU_LIB");
	if (env && *env) {
		snprintf(out, len, "%s", env);
		return;
	}
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = '\0';
		char *slash = strrchr(exe, '/');
		if (slash) {
			*slash = '\0';
			snprintf(out, len, "%s/../emu/.libs/librgpu-emu.so", exe);
			if (access(out, R_OK) == 0)
				return;
		}
	}
	snprintf(out, len, "%s/librgpu-emu.so", RGPU_PKGLIBDIR);
}

struct probe_gpu {
	char name[256];
	uint64_t mem;
};

/* Reads the GPUs in a child process, so the parent never initialises CUDA
 * (a CUDA context does not survive fork, and a GPU fault would poison it). */
static int probe_gpus(const char *driver, struct probe_gpu *g, int max, char *err, size_t errlen)
{
	int pfd[2];
	if (pipe(pfd) < 0) {
		snprintf(err, errlen, "pipe: %s", strerror(errno));
		return -1;
	}
	pid_t pid = fork();
	if (pid < 0) {
		snprintf(err, errlen, "fork: %s", strerror(errno));
		close(pfd[0]);
		close(pfd[1]);
		return -1;
	}
	if (pid == 0) {
		close(pfd[0]);
		/* unbuffered: what the child says must reach the parent before
		 * _exit, which flushes nothing */
		FILE *out = fdopen(pfd[1], "w");
		if (out)
			setvbuf(out, NULL, _IONBF, 0);
		struct rgpud_driver d;
		char e[600];
		int n = 0;
		if (!out)
			_exit(1);
		if (rgpud_driver_load(&d, driver, e, sizeof(e)) < 0) {
			fprintf(out, "E %s\n", e);
			_exit(0);
		}
		int rc = d.cuInit(0);
		if (!rc)
			rc = d.cuDeviceGetCount(&n);
		if (rc) {
			fprintf(out, "E CUDA driver %s: cuInit failed: %s\n", driver, rgpud_cu_errname(&d, rc));
			_exit(0);
		}
		for (int i = 0; i < n; i++) {
			CUdevice dv;
			char name[256] = "";
			size_t mem = 0;
			if (d.cuDeviceGet(&dv, i) || d.cuDeviceGetName(name, sizeof(name), dv) ||
			    d.cuDeviceTotalMem_v2(&mem, dv)) {
				fprintf(out, "E cannot read the properties of GPU %d\n", i);
				_exit(0);
			}
			fprintf(out, "G %zu %s\n", mem, name);
		}
		fclose(out);
		_exit(0);
	}
	close(pfd[1]);
	FILE *in = fdopen(pfd[0], "r");
	if (!in)
		close(pfd[0]);
	char line[1024];
	int n = 0;
	snprintf(err, errlen, "CUDA driver %s: the GPU probe failed", driver);
	while (in && fgets(line, sizeof(line), in)) {
		line[strcspn(line, "\n")] = '\0';
		if (line[0] == 'E') {
			snprintf(err, errlen, "%s", line + 2);
			n = -1;
			break;
		}
		unsigned long long mem;
		int off = 0;
		if (n < max && sscanf(line, "G %llu %n", &mem, &off) == 1 && off > 0) {
			g[n].mem = mem;
			snprintf(g[n].name, sizeof(g[n].name), "%s", line + off);
			n++;
		}
	}
	if (in)
		fclose(in);
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (n == 0) {
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			snprintf(err, errlen, "CUDA driver %s: the GPU probe crashed", driver);
		else if (strstr(err, "probe failed"))
			snprintf(err, errlen, "CUDA driver %s reports no GPUs", driver);
		return -1;
	}
	return n;
}

/* A session worker: serves one client on an inherited socket. */
/* The worker gives up root for the uid it serves (server.c says whom and
 * why), keeps no way back, cannot be traced by that user (it would then
 * allocate past the parent's accounting), and dies with its parent. */
static int worker_drop(const char *name, unsigned uid, unsigned gid, int parent, int groups)
{
	if (geteuid() == 0 && uid != 0) {
		struct passwd *pw = groups ? getpwuid(uid) : NULL;
		if ((pw ? initgroups(pw->pw_name, gid) : setgroups(0, NULL)) < 0 || setgid(gid) < 0 ||
		    setuid(uid) < 0) {
			log_err("%s: cannot run as uid %u gid %u: %s", name, uid, gid, strerror(errno));
			return -1;
		}
		if (setuid(0) == 0) {
			log_err("%s: could regain root after dropping it", name);
			return -1;
		}
		log_debug("%s: worker runs as uid %u gid %u", name, uid, gid);
	}
	/* a change of uid clears the parent-death signal: set it again */
	if (prctl(PR_SET_DUMPABLE, 0) < 0 || prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 ||
	    (parent > 0 && getppid() != parent)) {
		log_err("%s: the rgpud parent is gone", name);
		return -1;
	}
	return 0;
}

static int worker_main(const char *fds, const char *who, const char *runas, const char *name,
		       const char *driver)
{
	int cfd, ctl, mig = -1, parent, groups;
	unsigned uid, gid, run_uid, run_gid;
	unsigned long long job, instance;
	int admin, authd;
	if (!driver || sscanf(fds, "%d,%d,%d", &cfd, &ctl, &mig) < 2 || !who || !runas ||
	    sscanf(who, "%u,%u,%llu,%d,%d", &uid, &gid, &job, &admin, &authd) != 5 ||
	    sscanf(runas, "%u,%u,%d,%d,%llx", &run_uid, &run_gid, &parent, &groups, &instance) != 5) {
		fprintf(stderr, "rgpud: --session-worker is internal to rgpud\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	crash_report_install(name);
	struct rgpud *srv = &rgpud_server;
	srv->instance = instance;
	char err[600];
	/* loaded as root (the library may sit where the served user cannot
	 * read), initialised after the drop */
	if (rgpud_driver_load(&srv->drv, driver, err, sizeof(err)) < 0) {
		log_err("%s: %s", name, err);
		return 1;
	}
	if (worker_drop(name, run_uid, run_gid, parent, groups) < 0)
		return 1;
	int rc = srv->drv.cuInit(0);
	if (!rc)
		rc = srv->drv.cuDeviceGetCount(&srv->ndev);
	if (rc) {
		log_err("%s: cuInit failed: %s", name, rgpud_cu_errname(&srv->drv, rc));
		return 1;
	}
	/* (the session's thread: see rgpud_capture_relaxed) */
	rgpud_capture_relaxed(&srv->drv);
	gate_attach(ctl);
	/* what kernels print (device printf) goes to the client: the worker's
	 * stdout becomes a pipe drained at synchronising calls */
	int outp[2], out_fd = -1;
	if (pipe2(outp, O_CLOEXEC | O_NONBLOCK) == 0 && dup2(outp[1], STDOUT_FILENO) >= 0) {
		close(outp[1]);
		out_fd = outp[0];
	}
	struct session *s = calloc(1, sizeof(*s));
	if (!s || !(s->conn = rgpu_tcp_from_fd(cfd))) {
		log_err("%s: cannot take over the connection", name);
		return 1;
	}
	s->srv = srv;
	s->out_fd = out_fd;
	s->mig_fd = mig;
	s->hello_done = 1;
	s->who = (struct rgpud_principal){ .uid = uid, .gid = gid, .job_id = job,
					   .admin = admin, .authenticated = authd };
	snprintf(s->name, sizeof(s->name), "%s", name);
	ht_init(&s->ht);
	wbuf_init(&s->tx);
	session_run(s);
	rgpu_conn_close(s->conn);
	free(s);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "emulated", no_argument, NULL, 'e' },
		{ "driver", required_argument, NULL, 'D' },
		{ "leases", no_argument, NULL, 'L' },
		{ "open", no_argument, NULL, 'O' },
		{ "state-dir", required_argument, NULL, 'S' },
		{ "slurm-user", required_argument, NULL, 'U' },
		{ "metrics", required_argument, NULL, OPT_METRICS },
		{ "ctx-reserve", required_argument, NULL, OPT_CTX_RESERVE },
		{ "sched", required_argument, NULL, OPT_SCHED },
		{ "sched-quantum", required_argument, NULL, OPT_QUANTUM },
		{ "mps", required_argument, NULL, OPT_MPS },
		{ "mps-dir", required_argument, NULL, OPT_MPS_DIR },
		{ "mps-control", required_argument, NULL, OPT_MPS_CONTROL },
		{ "mps-default-share", required_argument, NULL, OPT_MPS_SHARE },
		{ "worker-sched", required_argument, NULL, OPT_WORKER_SCHED },
		{ "memory-policy", required_argument, NULL, OPT_MEM_POLICY },
		{ "memory-wait", required_argument, NULL, OPT_MEM_WAIT },
		{ "memory-quantum", required_argument, NULL, OPT_MEM_QUANTUM },
		{ "memory-overcommit", required_argument, NULL, OPT_MEM_OVERCOMMIT },
		{ "worker-layout", required_argument, NULL, OPT_WORKER_LAYOUT },
		{ "daemon", no_argument, NULL, 'd' },
		{ "pidfile", required_argument, NULL, 'P' },
		{ "syslog", no_argument, NULL, 's' },
		{ "log-level", required_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		/* internal: how the parent starts a session worker */
		{ "session-worker", required_argument, NULL, 'W' },
		{ "worker-who", required_argument, NULL, 'H' },
		{ "worker-name", required_argument, NULL, 'N' },
		{ "worker-run-as", required_argument, NULL, 'R' },
		{ "allow-users", required_argument, NULL, 'A' },
		{ "allow-groups", required_argument, NULL, 'G' },
		{ "hello-timeout", required_argument, NULL, 'T' },
		{ "max-pending-per-host", required_argument, NULL, 'M' },
		{ "max-sessions-per-user", required_argument, NULL, 'u' },
		{ "lease-check-interval", required_argument, NULL, 'I' },
		{ "checkpoint-interval", required_argument, NULL, 'C' },
		{ NULL, 0, NULL, 0 },
	};
	char listen_addr[300];
	snprintf(listen_addr, sizeof(listen_addr), "0.0.0.0:%d", RGPU_DEFAULT_PORT);
	const char *driver = NULL, *pidfile = NULL, *metrics_addr = NULL;
	int open_access = 0; /* deny by default: --open serves everyone */
	uint32_t *allow_uids = NULL, *allow_gids = NULL;
	size_t nallow_uids = 0, nallow_gids = 0;
	const char *worker_runas = NULL;
	struct rgpud *srv = &rgpud_server;
	int emulated = 0, daemonize = 0, use_syslog = 0, level = RGPU_LOG_INFO;
	struct rgpud_access_config acfg = { .state_dir = RGPU_STATEDIR };
	const char *worker_fds = NULL, *worker_who = NULL, *worker_name = "client";
	const char *worker_sched = NULL;
	struct sched_config scfg = { .policy = SCHED_POL_FAIR, .quantum = SCHED_QUANTUM_NS_DEFAULT,
				     .mps = SCHED_MPS_OFF, .mps_dir = "/run/rgpud/mps",
				     .mps_control = "", /* found in PATH */
				     .mps_default_share = 75 };
	enum mem_policy mem_policy = MEM_POLICY_SWAP;
	unsigned mem_wait = 60, mem_overcommit_pct = 100, mem_quantum_ms = MEM_QUANTUM_DEFAULT_MS;
	int c;
	while ((c = getopt_long(argc, argv, "l:edsv:hV", opts, NULL)) != -1) {
		switch (c) {
		case 'l':
			if (strlen(optarg) >= sizeof(listen_addr) - 8) {
				fprintf(stderr, "rgpud: listen address too long\n");
				return 2;
			}
			/* a bare host gets the default port */
			if (!strchr(optarg, ':') || (optarg[0] == '[' && !strstr(optarg, "]:")))
				snprintf(listen_addr, sizeof(listen_addr), "%s:%d", optarg, RGPU_DEFAULT_PORT);
			else
				snprintf(listen_addr, sizeof(listen_addr), "%s", optarg);
			break;
		case 'e': emulated = 1; break;
		case 'D': driver = optarg; break;
		case 'L': acfg.require_lease = 1; break;
		case 'O': open_access = 1; break;
		case 'S': acfg.state_dir = optarg; break;
		case 'U': {
			struct passwd *pw = getpwnam(optarg);
			char *end;
			long uid = strtol(optarg, &end, 10);
			if (pw)
				acfg.admin_uid = pw->pw_uid;
			else if (!*end && uid >= 0)
				acfg.admin_uid = (unsigned)uid;
			else {
				fprintf(stderr, "rgpud: --slurm-user: no such user '%s'\n", optarg);
				return 2;
			}
			break;
		}
		case OPT_METRICS: metrics_addr = optarg; break;
		case OPT_CTX_RESERVE: {
			uint64_t b = 0;
			char why[200];
			if (rgpu_parse_size(optarg, &b, why, sizeof(why)) || b > (64ull << 30)) {
				fprintf(stderr, "rgpud: --ctx-reserve=%s: %s\n", optarg,
					b > (64ull << 30) ? "more than 64G" : why);
				return 2;
			}
			rgpud_lease_set_ctx_reserve(b);
			break;
		}
		case OPT_SCHED:
			if ((scfg.policy = sched_policy_parse(optarg)) < 0) {
				fprintf(stderr, "rgpud: --sched: '%s' is not one of fair, las, fifo\n", optarg);
				return 2;
			}
			break;
		case OPT_QUANTUM:
			scfg.quantum = 1000000ull * (uint64_t)num_opt("sched-quantum", optarg, 1, 1000);
			break;
		case OPT_MPS:
			if (!strcmp(optarg, "off"))
				scfg.mps = SCHED_MPS_OFF;
			else if (!strcmp(optarg, "job"))
				scfg.mps = SCHED_MPS_JOB;
			else {
				fprintf(stderr, "rgpud: --mps: '%s' is not one of off, job\n", optarg);
				return 2;
			}
			break;
		case OPT_MPS_DIR:
		case OPT_MPS_CONTROL: {
			char *dst = c == OPT_MPS_DIR ? scfg.mps_dir : scfg.mps_control;
			size_t cap = c == OPT_MPS_DIR ? sizeof(scfg.mps_dir) : sizeof(scfg.mps_control);
			if (optarg[0] != '/' || strlen(optarg) >= cap - 64) {
				fprintf(stderr, "rgpud: --%s: '%s' is not an absolute path (of at most %zu "
					"bytes)\n", c == OPT_MPS_DIR ? "mps-dir" : "mps-control", optarg,
					cap - 65);
				return 2;
			}
			snprintf(dst, cap, "%s", optarg);
			break;
		}
		case OPT_MPS_SHARE:
			scfg.mps_default_share = (uint32_t)num_opt("mps-default-share", optarg, 1, 100);
			break;
		case OPT_WORKER_SCHED: worker_sched = optarg; break;
		case OPT_MEM_POLICY:
			if (mem_policy_parse(optarg, &mem_policy) < 0) {
				fprintf(stderr, "rgpud: --memory-policy: '%s' is not one of swap, wait, fail\n",
					optarg);
				return 2;
			}
			break;
		case OPT_WORKER_LAYOUT:
			if (!strcmp(optarg, "fixed") || !strcmp(optarg, "random")) {
				srv->worker_random_layout = !strcmp(optarg, "random");
			} else {
				fprintf(stderr, "rgpud: --worker-layout: '%s' is not one of fixed, random\n",
					optarg);
				return 2;
			}
			break;
		case OPT_MEM_WAIT: mem_wait = (unsigned)num_opt("memory-wait", optarg, 0, 86400); break;
		case OPT_MEM_QUANTUM: {
			char *end;
			errno = 0;
			double q = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(q >= 0.0 && q <= 3600.0)) {
				fprintf(stderr, "rgpud: --memory-quantum: '%s' is not a number of seconds "
					"from 0 to 3600\n", optarg);
				return 2;
			}
			mem_quantum_ms = (unsigned)(q * 1000 + 0.5);
			break;
		}
		case OPT_MEM_OVERCOMMIT: {
			char *end;
			errno = 0;
			double r = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(r >= 1.0 && r <= 10.0)) {
				fprintf(stderr, "rgpud: --memory-overcommit: '%s' is not a ratio from 1 to 10\n",
					optarg);
				return 2;
			}
			mem_overcommit_pct = (unsigned)(r * 100 + 0.5);
			break;
		}
		case 'd': daemonize = 1; break;
		case 'P': pidfile = optarg; break;
		case 's': use_syslog = 1; break;
		case 'v':
			level = rgpu_log_parse_level(optarg);
			if (level < 0) {
				fprintf(stderr, "rgpud: --log-level: '%s' is not one of error, warn, info, debug\n", optarg);
				return 2;
			}
			break;
		case 'h': usage(stdout); return 0;
		case 'W': worker_fds = optarg; break;
		case 'H': worker_who = optarg; break;
		case 'N': worker_name = optarg; break;
		case 'R': worker_runas = optarg; break;
		case 'A': id_list("allow-users", optarg, 0, &allow_uids, &nallow_uids); break;
		case 'G': id_list("allow-groups", optarg, 1, &allow_gids, &nallow_gids); break;
		case 'T': srv->hello_timeout_ms = (int)(1000 * num_opt("hello-timeout", optarg, 1, 3600)); break;
		case 'M': srv->max_pending_per_host = (int)num_opt("max-pending-per-host", optarg, 1, 100000); break;
		case 'I': acfg.check_interval_s = (int)num_opt("lease-check-interval", optarg, 1, 86400); break;
		case 'C': srv->checkpoint_s = (int)num_opt("checkpoint-interval", optarg, 0, 86400); break;
		case 'u': srv->max_sessions_per_user = (int)num_opt("max-sessions-per-user", optarg, 0, 1000000); break;
		case 'V': printf("rgpud %s (protocol %d)\n", PACKAGE_VERSION, RGPU_PROTO_VERSION); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "rgpud: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	rgpu_log_open("rgpud", level, use_syslog);
	if (worker_fds) {
		if (worker_sched && sched_worker_init(worker_sched) < 0)
			log_warn("%s: the scheduler's shared memory is unusable: this session runs "
				 "ungated", worker_name);
		return worker_main(worker_fds, worker_who, worker_runas, worker_name, driver);
	}

	mem_parent_config(mem_policy, mem_wait, mem_quantum_ms);
	if (mem_overcommit_pct > 100 && mem_policy == MEM_POLICY_FAIL) {
		fprintf(stderr, "rgpud: --memory-overcommit above 1 needs --memory-policy=swap or wait\n");
		return 2;
	}
	rgpud_lease_set_overcommit(mem_overcommit_pct);
	if (open_access && acfg.require_lease) {
		fprintf(stderr, "rgpud: --open and --leases exclude each other\n");
		return 2;
	}
	if ((nallow_uids || nallow_gids) && (open_access || acfg.require_lease)) {
		fprintf(stderr, "rgpud: --allow-users and --allow-groups go without --open and --leases\n");
		return 2;
	}
	acfg.open_access = open_access;
	acfg.allow_uids = allow_uids;
	acfg.nallow_uids = nallow_uids;
	acfg.allow_gids = allow_gids;
	acfg.nallow_gids = nallow_gids;
	acfg.max_sessions_per_user = srv->max_sessions_per_user;

	if (gethostname(srv->hostname, sizeof(srv->hostname) - 1) < 0)
		snprintf(srv->hostname, sizeof(srv->hostname), "localhost");
	if (getrandom(&srv->instance, sizeof(srv->instance), 0) != (ssize_t)sizeof(srv->instance))
		srv->instance = (uint64_t)time(NULL) << 20 ^ (uint64_t)getpid();
	srv->use_syslog = use_syslog;
	ssize_t xl = readlink("/proc/self/exe", srv->self_exe, sizeof(srv->self_exe) - 1);
	if (xl <= 0) {
		log_err("cannot find my own executable: %s", strerror(errno));
		return 1;
	}
	srv->self_exe[xl] = '\0';

	char emu[PATH_MAX + 64];
	if (emulated && !driver) {
		emu_path(emu, sizeof(emu));
		driver = emu;
	}
	if (!driver)
		driver = "libcuda.so.1";
	snprintf(srv->driver_path, sizeof(srv->driver_path), "%s", driver);
	char err[600];
	/* before any thread exists: the probe is a forked child */
	struct probe_gpu gpus[RGPUD_MAX_GPUS];
	int ndev = probe_gpus(driver, gpus, RGPUD_MAX_GPUS, err, sizeof(err));
	if (ndev < 0) {
		log_err("%s", err);
		return 1;
	}
	srv->ndev = ndev;
	/* leases are checked against each GPU's size */
	for (int i = 0; i < ndev; i++)
		rgpud_lease_set_gpu((unsigned)i, gpus[i].name, gpus[i].mem);
	if (rgpud_access_init(&acfg, err, sizeof(err)) < 0) {
		log_err("%s", err);
		return 1;
	}
	if (sched_parent_init(&scfg, err, sizeof(err)) < 0) {
		log_err("%s", err);
		return 1;
	}
	metrics_set_gpu_time_source(sched_gpu_time);
	srv->listen_fd = rgpu_tcp_listen(listen_addr, err, sizeof(err));
	if (srv->listen_fd < 0) {
		log_err("%s", err);
		return 1;
	}
	{
		/* same-host clients come in over a Unix socket named after the port */
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		unsigned port = 0;
		if (getsockname(srv->listen_fd, (struct sockaddr *)&ss, &sl) == 0)
			port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
							      : ((struct sockaddr_in *)&ss)->sin_port);
		srv->unix_fd = port ? rgpu_unix_listen(port, err, sizeof(err)) : -1;
		if (srv->unix_fd < 0) {
			/* whoever holds the name would receive same-host clients and
			 * their credentials */
			log_err("%s: another process holds that name (another rgpud on this "
				"port, or a squatter): not starting", err);
			return 1;
		}
	}
	if (daemonize && daemon(0, use_syslog ? 0 : 1) < 0) {
		log_err("cannot detach: %s", strerror(errno));
		return 1;
	}
	/* threads after daemon(): fork keeps only the calling thread */
	if (rgpud_access_start(err, sizeof(err)) < 0) {
		log_err("%s", err);
		return 1;
	}
	/* (after detaching: the endpoint runs a thread) */
	if (metrics_addr && metrics_start(metrics_addr, err, sizeof(err)) < 0) {
		log_err("%s", err);
		return 1;
	}
	if (pidfile) {
		FILE *f = fopen(pidfile, "w");
		if (!f || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f) != 0) {
			log_err("cannot write pid file %s: %s", pidfile, strerror(errno));
			return 1;
		}
	}
	struct sigaction sa = { .sa_handler = on_signal };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	log_info("serving %d GPU(s) (%s%s) on %s with %s, protocol %d, %s", ndev, gpus[0].name,
		 ndev > 1 ? ", ..." : "", listen_addr, driver, RGPU_PROTO_VERSION,
		 acfg.require_lease ? "leases required"
		 : open_access ? "open access (no authentication)"
			       : "munge credential of root or an allowed user required");
	if (open_access && !is_loopback(listen_addr))
		log_warn("--open on %s: anyone who can reach this address may use the GPUs, "
			 "without authentication", listen_addr);
	log_info("scheduler: %s, quantum %.1f ms, MPS %s", sched_policy_name(scfg.policy),
		 scfg.quantum / 1e6, scfg.mps == SCHED_MPS_JOB ? "per job" : "off");
	rgpud_serve(srv);
	log_info("shutting down");
	sched_mps_shutdown();
	metrics_stop();
	close(srv->listen_fd);
	if (srv->unix_fd >= 0)
		close(srv->unix_fd);
	rgpud_access_fini();
	free(allow_uids);
	free(allow_gids);
	if (pidfile)
		unlink(pidfile);
	return 0;
}
