/* rgpud: serves this node's GPUs to rgpu clients. */
#include "config.h"
#include "log.h"
#include "proto.h"
#include "lease.h"
#include "rgpud.h"
#include "transport.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
"                            every client (cluster mode); without it anyone who\n"
"                            can connect may use the GPUs\n"
"      --state-dir=DIR       where leases persist across restarts (default %s)\n"
"      --slurm-user=USER     besides root, the user allowed to manage leases\n"
"  -d, --daemon              detach and run in the background\n"
"      --pidfile=PATH        write the process id to PATH\n"
"  -s, --syslog              log to syslog instead of stderr\n"
"  -v, --log-level=LEVEL     error, warn, info (default) or debug\n"
"  -h, --help                show this help and exit\n"
"  -V, --version             show the version and exit\n"
"\n"
"Clients select GPUs with RGPU_SERVERS=host[:port][/gpu],...  See rgpud(8).\n",
		RGPU_DEFAULT_PORT, RGPU_STATEDIR);
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

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "emulated", no_argument, NULL, 'e' },
		{ "driver", required_argument, NULL, 'D' },
		{ "leases", no_argument, NULL, 'L' },
		{ "state-dir", required_argument, NULL, 'S' },
		{ "slurm-user", required_argument, NULL, 'U' },
		{ "daemon", no_argument, NULL, 'd' },
		{ "pidfile", required_argument, NULL, 'P' },
		{ "syslog", no_argument, NULL, 's' },
		{ "log-level", required_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	char listen_addr[300];
	snprintf(listen_addr, sizeof(listen_addr), "0.0.0.0:%d", RGPU_DEFAULT_PORT);
	const char *driver = NULL, *pidfile = NULL;
	int emulated = 0, daemonize = 0, use_syslog = 0, level = RGPU_LOG_INFO;
	struct rgpud_access_config acfg = { .state_dir = RGPU_STATEDIR };
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

	struct rgpud *srv = &rgpud_server;
	if (gethostname(srv->hostname, sizeof(srv->hostname) - 1) < 0)
		snprintf(srv->hostname, sizeof(srv->hostname), "localhost");

	char emu[PATH_MAX + 64];
	if (emulated && !driver) {
		emu_path(emu, sizeof(emu));
		driver = emu;
	}
	if (!driver)
		driver = "libcuda.so.1";
	char err[600];
	if (rgpud_driver_load(&srv->drv, driver, err, sizeof(err)) < 0) {
		log_err("%s", err);
		return 1;
	}
	int rc = srv->drv.cuInit(0);
	int ndev = 0;
	if (!rc)
		rc = srv->drv.cuDeviceGetCount(&ndev);
	if (rc) {
		log_err("CUDA driver %s: cuInit failed: %s", driver, rgpud_cu_errname(&srv->drv, rc));
		return 1;
	}
	if (ndev == 0) {
		log_err("CUDA driver %s reports no GPUs", driver);
		return 1;
	}
	srv->ndev = ndev;
	/* leases are checked against each GPU's size */
	for (int i = 0; i < ndev; i++) {
		CUdevice dv;
		char dn[256] = "";
		size_t mem = 0;
		if (srv->drv.cuDeviceGet(&dv, i) || srv->drv.cuDeviceGetName(dn, sizeof(dn), dv) ||
		    srv->drv.cuDeviceTotalMem_v2(&mem, dv)) {
			log_err("cannot read the properties of GPU %d", i);
			return 1;
		}
		rgpud_lease_set_gpu((unsigned)i, dn, mem);
	}
	if (rgpud_access_init(&acfg, err, sizeof(err)) < 0) {
		log_err("%s", err);
		return 1;
	}
	srv->listen_fd = rgpu_tcp_listen(listen_addr, err, sizeof(err));
	if (srv->listen_fd < 0) {
		log_err("%s", err);
		return 1;
	}
	if (daemonize && daemon(0, use_syslog ? 0 : 1) < 0) {
		log_err("cannot detach: %s", strerror(errno));
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

	char name[256] = "?";
	CUdevice d0;
	if (!srv->drv.cuDeviceGet(&d0, 0))
		srv->drv.cuDeviceGetName(name, sizeof(name), d0);
	log_info("serving %d GPU(s) (%s%s) on %s with %s, protocol %d, %s", ndev, name,
		 ndev > 1 ? ", ..." : "", listen_addr, driver, RGPU_PROTO_VERSION,
		 acfg.require_lease ? "leases required" : "open access (no authentication)");
	rgpud_serve(srv);
	log_info("shutting down");
	close(srv->listen_fd);
	rgpud_access_fini();
	if (pidfile)
		unlink(pidfile);
	return 0;
}
