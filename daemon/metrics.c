/*
 * Prometheus metrics of the rgpud parent (metrics.h): the counters and
 * per-(job, GPU) table, their text exposition, and the HTTP endpoint
 * (libmicrohttpd, optional at build time).
 */
#include "config.h"

#include "access.h"
#include "clock.h"
#include "lease.h"
#include "log.h"
#include "metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>

#ifdef HAVE_MICROHTTPD
#include <microhttpd.h>
#endif

#define NO_GPU UINT32_MAX /* a (job, NO_GPU) row counts the job's sessions */
#define MAX_WORDS 32      /* distinct refusal reasons / error kinds */
#define PRUNE_AT 4096     /* idle (job, GPU) rows kept before pruning */

struct metrics_session {
	uint64_t job;
	int counted; /* its (job, NO_GPU) row counts it */
	uint64_t gpus; /* admitted, bit mask */
	double since[RGPUD_MAX_GPUS];
	uint64_t mem[RGPUD_MAX_GPUS];
	int pid;
	uint32_t uid;
	uint64_t gpu_ns[RGPUD_MAX_GPUS]; /* attained, once the worker ended */
	struct metrics_session *next, *prev; /* live sessions (listing) */
	uint64_t resident, swapped; /* memory manager (metrics_session_memory) */
};

/* Per (job, GPU): what live sessions hold, and GPU time of ended ones. */
struct row {
	uint64_t job;
	uint32_t gpu;
	int live;
	uint64_t mem;
	double secs;      /* GPU time of ended sessions */
	uint64_t gpu_ns;  /* kernel time attained by ended sessions */
	double since_sum; /* sum of the live sessions' admission times */
	uint64_t resident, swapped; /* NO_GPU rows: the job's sessions' sums */
};

struct word_count {
	const char *word;
	uint64_t n;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct row *rows;
static size_t nrows, caprows;
static uint64_t n_accepted, n_started, n_ended, n_crashes;
static struct word_count refusals[MAX_WORDS + 1], errors[MAX_WORDS + 1];
static struct metrics_session *live;
static uint64_t (*gpu_time_source)(int pid, unsigned gpu);

/* Drops rows that hold nothing now; their GPU time goes with them (a job
 * long gone).  mu held. */
static void prune_locked(void)
{
	size_t k = 0;
	for (size_t i = 0; i < nrows; i++)
		if (rows[i].live || rows[i].mem)
			rows[k++] = rows[i];
	nrows = k;
}

/* The row of (job, gpu), created if missing; NULL when out of memory. */
static struct row *row_get(uint64_t job, uint32_t gpu)
{
	for (size_t i = 0; i < nrows; i++)
		if (rows[i].job == job && rows[i].gpu == gpu)
			return &rows[i];
	if (nrows >= PRUNE_AT)
		prune_locked();
	if (nrows == caprows) {
		size_t cap = caprows ? caprows * 2 : 16;
		struct row *r = realloc(rows, cap * sizeof(*r));
		if (!r)
			return NULL;
		rows = r;
		caprows = cap;
	}
	rows[nrows] = (struct row){ .job = job, .gpu = gpu };
	return &rows[nrows++];
}

struct metrics_session *metrics_session_open(const struct rgpud_principal *who)
{
	struct metrics_session *ms = calloc(1, sizeof(*ms));
	if (!ms)
		return NULL;
	ms->job = who->job_id;
	ms->uid = who->uid;
	pthread_mutex_lock(&mu);
	ms->next = live;
	if (live)
		live->prev = ms;
	live = ms;
	struct row *r = row_get(ms->job, NO_GPU);
	if (r) {
		r->live++;
		ms->counted = 1;
	}
	n_started++;
	pthread_mutex_unlock(&mu);
	return ms;
}

void metrics_session_gpu(struct metrics_session *ms, unsigned gpu)
{
	if (!ms || gpu >= RGPUD_MAX_GPUS)
		return;
	pthread_mutex_lock(&mu);
	if (!(ms->gpus & (1ull << gpu))) {
		struct row *r = row_get(ms->job, gpu);
		if (r) {
			r->live++;
			ms->gpus |= 1ull << gpu;
			ms->since[gpu] = rgpu_now_s();
			r->since_sum += ms->since[gpu];
		}
	}
	pthread_mutex_unlock(&mu);
}

void metrics_session_charge(struct metrics_session *ms, unsigned gpu, uint64_t bytes)
{
	if (!ms || gpu >= RGPUD_MAX_GPUS)
		return;
	pthread_mutex_lock(&mu);
	struct row *r = row_get(ms->job, gpu);
	if (r) {
		/* (the lease code refuses charges that would overflow; the
		 * sums below stay within what it accepted) */
		ms->mem[gpu] += bytes;
		r->mem += bytes;
	}
	pthread_mutex_unlock(&mu);
}

void metrics_session_refund(struct metrics_session *ms, unsigned gpu, uint64_t bytes)
{
	if (!ms || gpu >= RGPUD_MAX_GPUS)
		return;
	pthread_mutex_lock(&mu);
	struct row *r = row_get(ms->job, gpu);
	if (r) {
		if (bytes > ms->mem[gpu])
			bytes = ms->mem[gpu];
		ms->mem[gpu] -= bytes;
		r->mem -= bytes;
	}
	pthread_mutex_unlock(&mu);
}

void metrics_session_close(struct metrics_session *ms)
{
	if (!ms)
		return;
	double t = rgpu_now_s();
	pthread_mutex_lock(&mu);
	for (unsigned g = 0; g < RGPUD_MAX_GPUS; g++) {
		if (!(ms->gpus & (1ull << g)) && !ms->mem[g])
			continue;
		struct row *r = row_get(ms->job, g);
		if (!r)
			continue;
		r->mem -= ms->mem[g];
		r->gpu_ns += ms->gpu_ns[g];
		if (ms->gpus & (1ull << g)) {
			r->live--;
			r->secs += t - ms->since[g];
			r->since_sum -= ms->since[g];
		}
	}
	struct row *r = ms->counted ? row_get(ms->job, NO_GPU) : NULL;
	if (r)
		r->live--;
	if (ms->prev)
		ms->prev->next = ms->next;
	else
		live = ms->next;
	if (ms->next)
		ms->next->prev = ms->prev;
	n_ended++;
	pthread_mutex_unlock(&mu);
	free(ms);
}

double metrics_job_gpu_seconds(uint64_t job, unsigned gpu)
{
	double s = 0, t = rgpu_now_s();
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < nrows; i++)
		if (rows[i].job == job && rows[i].gpu == gpu)
			s = rows[i].secs + rows[i].live * t - rows[i].since_sum;
	pthread_mutex_unlock(&mu);
	return s > 0 ? s : 0;
}

uint64_t metrics_job_attained_ns(uint64_t job, unsigned gpu)
{
	uint64_t ns = 0;
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < nrows; i++)
		if (rows[i].job == job && rows[i].gpu == gpu)
			ns += rows[i].gpu_ns;
	for (struct metrics_session *m = live; m; m = m->next) {
		if (m->job != job || gpu >= RGPUD_MAX_GPUS || !(m->gpus & (1ull << gpu)))
			continue;
		uint64_t w = gpu_time_source && m->pid > 0 ? gpu_time_source(m->pid, gpu) : 0;
		ns += w > m->gpu_ns[gpu] ? w : m->gpu_ns[gpu];
	}
	pthread_mutex_unlock(&mu);
	return ns;
}

void metrics_session_worker(struct metrics_session *ms, int pid, uint32_t uid)
{
	if (!ms)
		return;
	pthread_mutex_lock(&mu);
	ms->pid = pid;
	ms->uid = uid;
	pthread_mutex_unlock(&mu);
}

void metrics_session_gpu_time(struct metrics_session *ms, unsigned gpu, uint64_t ns)
{
	if (!ms || gpu >= RGPUD_MAX_GPUS)
		return;
	pthread_mutex_lock(&mu);
	ms->gpu_ns[gpu] = ns;
	pthread_mutex_unlock(&mu);
}

void metrics_set_gpu_time_source(uint64_t (*source)(int pid, unsigned gpu))
{
	pthread_mutex_lock(&mu);
	gpu_time_source = source;
	pthread_mutex_unlock(&mu);
}

int metrics_sessions_list(struct metrics_session_row **out, size_t *n)
{
	double t = rgpu_now_s();
	pthread_mutex_lock(&mu);
	size_t cnt = 0;
	for (struct metrics_session *m = live; m; m = m->next)
		cnt += (size_t)__builtin_popcountll(m->gpus);
	struct metrics_session_row *v = calloc(cnt ? cnt : 1, sizeof(*v));
	if (!v) {
		pthread_mutex_unlock(&mu);
		return -1;
	}
	size_t k = 0;
	for (struct metrics_session *m = live; m; m = m->next)
		for (unsigned g = 0; g < RGPUD_MAX_GPUS; g++)
			if (m->gpus & (1ull << g))
				v[k++] = (struct metrics_session_row){ .job = m->job, .uid = m->uid,
					.gpu = g, .pid = m->pid, .mem = m->mem[g], .age_s = t - m->since[g],
					.resident = m->resident, .swapped = m->swapped };
	pthread_mutex_unlock(&mu);
	*out = v;
	*n = k;
	return 0;
}

void metrics_session_memory(struct metrics_session *ms, uint64_t resident, uint64_t swapped)
{
	if (!ms)
		return;
	pthread_mutex_lock(&mu);
	struct row *r = ms->counted ? row_get(ms->job, NO_GPU) : NULL;
	if (r) {
		r->resident = r->resident - ms->resident + resident;
		r->swapped = r->swapped - ms->swapped + swapped;
	}
	ms->resident = resident;
	ms->swapped = swapped;
	pthread_mutex_unlock(&mu);
}

void metrics_session_memory_get(struct metrics_session *ms, uint64_t *resident, uint64_t *swapped)
{
	*resident = *swapped = 0;
	if (!ms)
		return;
	pthread_mutex_lock(&mu);
	*resident = ms->resident;
	*swapped = ms->swapped;
	pthread_mutex_unlock(&mu);
}

static void count_word(struct word_count *t, const char *w)
{
	pthread_mutex_lock(&mu);
	int i;
	for (i = 0; i < MAX_WORDS && t[i].word; i++)
		if (!strcmp(t[i].word, w))
			break;
	if (i < MAX_WORDS && !t[i].word)
		t[i].word = w;
	if (i == MAX_WORDS)
		t[i].word = "other";
	t[i].n++;
	pthread_mutex_unlock(&mu);
}

void metrics_refused(const char *reason) { count_word(refusals, reason ? reason : "other"); }
void metrics_error(const char *kind) { count_word(errors, kind ? kind : "other"); }

void metrics_conn_accepted(void)
{
	pthread_mutex_lock(&mu);
	n_accepted++;
	pthread_mutex_unlock(&mu);
}

void metrics_worker_exit(int st)
{
	/* rgpud ends workers with SIGKILL (lease ended) and SIGTERM (shutdown);
	 * any other signal is a crash, a non-zero exit an error */
	if (WIFSIGNALED(st) && WTERMSIG(st) != SIGKILL && WTERMSIG(st) != SIGTERM) {
		pthread_mutex_lock(&mu);
		n_crashes++;
		pthread_mutex_unlock(&mu);
	} else if (WIFEXITED(st) && WEXITSTATUS(st)) {
		metrics_error("worker_exit");
	}
}

/* ---- exposition ---- */

size_t metrics_escape(const char *in, char *out, size_t n)
{
	size_t k = 0;
	for (; *in; in++) {
		const char *rep = NULL;
		char one[2] = { *in, 0 };
		if (*in == '\\')
			rep = "\\\\";
		else if (*in == '"')
			rep = "\\\"";
		else if (*in == '\n')
			rep = "\\n";
		else
			rep = one;
		for (; *rep; rep++, k++)
			if (n && k < n - 1)
				out[k] = *rep;
	}
	if (n)
		out[k < n - 1 ? k : n - 1] = '\0';
	return k;
}

static void head(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void gpu_label(char *buf, size_t n, uint32_t gpu)
{
	if (gpu == NO_GPU)
		snprintf(buf, n, "none");
	else
		snprintf(buf, n, "%u", gpu);
}

static void words(FILE *f, const char *name, const char *label, const char *help,
		  const struct word_count *t)
{
	head(f, name, "counter", help);
	for (int i = 0; i <= MAX_WORDS && t[i].word; i++) {
		char esc[128];
		metrics_escape(t[i].word, esc, sizeof(esc));
		fprintf(f, "%s{%s=\"%s\"} %" PRIu64 "\n", name, label, esc, t[i].n);
	}
}

char *metrics_render(size_t *len)
{
	char *buf = NULL;
	size_t size = 0;
	FILE *f = open_memstream(&buf, &size);
	if (!f)
		return NULL;
	struct rgpud_gpu_load *g = NULL;
	struct rgpud_lease *l = NULL;
	size_t ng = 0, nl = 0;
	/* (lease.c's own lock; taken before ours, never inside it) */
	if (rgpud_lease_gpus(&g, &ng))
		ng = 0;
	if (rgpud_lease_list(&l, &nl))
		nl = 0;

	char gl[16], esc[300];
	double t = rgpu_now_s();
	pthread_mutex_lock(&mu);
	head(f, "rgpud_connections_accepted_total", "counter",
	     "Connections accepted (TCP and same-host), before authentication.");
	fprintf(f, "rgpud_connections_accepted_total %" PRIu64 "\n", n_accepted);
	head(f, "rgpud_sessions_started_total", "counter",
	     "Sessions that got a worker process (authenticated).");
	fprintf(f, "rgpud_sessions_started_total %" PRIu64 "\n", n_started);
	head(f, "rgpud_sessions_ended_total", "counter", "Sessions whose worker has exited.");
	fprintf(f, "rgpud_sessions_ended_total %" PRIu64 "\n", n_ended);
	head(f, "rgpud_worker_crashes_total", "counter",
	     "Session workers that died of a signal rgpud did not send.");
	fprintf(f, "rgpud_worker_crashes_total %" PRIu64 "\n", n_crashes);
	words(f, "rgpud_refusals_total", "reason",
	      "Clients or requests refused, by reason (auth, version, gpu, quota, ...).", refusals);
	words(f, "rgpud_errors_total", "kind", "Server-side errors, by kind.", errors);

	head(f, "rgpud_sessions", "gauge",
	     "Live sessions per Slurm job (slurm_job 0: a client outside any job).");
	for (size_t i = 0; i < nrows; i++)
		if (rows[i].gpu == NO_GPU)
			fprintf(f, "rgpud_sessions{slurm_job=\"%" PRIu64 "\"} %d\n", rows[i].job, rows[i].live);
	head(f, "rgpud_gpu_sessions", "gauge",
	     "Live sessions admitted to a GPU, per GPU and job.");
	for (size_t i = 0; i < nrows; i++)
		if (rows[i].gpu != NO_GPU) {
			gpu_label(gl, sizeof(gl), rows[i].gpu);
			fprintf(f, "rgpud_gpu_sessions{gpu=\"%s\",slurm_job=\"%" PRIu64 "\"} %d\n", gl,
				rows[i].job, rows[i].live);
		}
	head(f, "rgpud_memory_used_bytes", "gauge",
	     "Device memory allocated by live sessions, per GPU and job.");
	for (size_t i = 0; i < nrows; i++)
		if (rows[i].gpu != NO_GPU) {
			gpu_label(gl, sizeof(gl), rows[i].gpu);
			fprintf(f, "rgpud_memory_used_bytes{gpu=\"%s\",slurm_job=\"%" PRIu64 "\"} %" PRIu64 "\n",
				gl, rows[i].job, rows[i].mem);
		}
	head(f, "rgpud_memory_resident_bytes", "gauge",
	     "Device memory of a job's sessions resident on the GPU (memory manager).");
	for (size_t i = 0; i < nrows; i++)
		if (rows[i].gpu == NO_GPU)
			fprintf(f, "rgpud_memory_resident_bytes{slurm_job=\"%" PRIu64 "\"} %" PRIu64 "\n",
				rows[i].job, rows[i].resident);
	head(f, "rgpud_memory_swapped_bytes", "gauge",
	     "Device memory of a job's sessions swapped out to host memory (memory manager).");
	for (size_t i = 0; i < nrows; i++)
		if (rows[i].gpu == NO_GPU)
			fprintf(f, "rgpud_memory_swapped_bytes{slurm_job=\"%" PRIu64 "\"} %" PRIu64 "\n",
				rows[i].job, rows[i].swapped);
	/* GPU time attained, as the time sessions held the GPU (from admission
	 * to exit): the parent does not see kernel run times */
	head(f, "rgpud_gpu_session_seconds_total", "counter",
	     "Seconds sessions of a job have held a GPU (admission to exit), per GPU and job.");
	for (size_t i = 0; i < nrows; i++) {
		if (rows[i].gpu == NO_GPU)
			continue;
		/* ended sessions, plus the live ones up to now */
		double s = rows[i].secs + rows[i].live * t - rows[i].since_sum;
		if (s < 0) /* (rounding) */
			s = 0;
		gpu_label(gl, sizeof(gl), rows[i].gpu);
		fprintf(f, "rgpud_gpu_session_seconds_total{gpu=\"%s\",slurm_job=\"%" PRIu64 "\"} %.3f\n",
			gl, rows[i].job, s);
	}
	/* GPU time attained: what the scheduler charged for kernels (ended
	 * sessions, plus the live ones from their workers' records) */
	head(f, "rgpud_gpu_attained_seconds_total", "counter",
	     "GPU time attained by sessions of a job (their kernels' run time as the scheduler "
	     "charges it), per GPU and job.");
	for (size_t i = 0; i < nrows; i++) {
		if (rows[i].gpu == NO_GPU)
			continue;
		uint64_t ns = rows[i].gpu_ns;
		for (struct metrics_session *m = live; m; m = m->next) {
			if (m->job != rows[i].job || !(m->gpus & (1ull << rows[i].gpu)))
				continue;
			/* a worker's own count, or what it left when it ended */
			uint64_t w = gpu_time_source && m->pid > 0 ? gpu_time_source(m->pid, rows[i].gpu) : 0;
			ns += w > m->gpu_ns[rows[i].gpu] ? w : m->gpu_ns[rows[i].gpu];
		}
		gpu_label(gl, sizeof(gl), rows[i].gpu);
		fprintf(f, "rgpud_gpu_attained_seconds_total{gpu=\"%s\",slurm_job=\"%" PRIu64 "\"} %.6f\n",
			gl, rows[i].job, ns / 1e9);
	}
	pthread_mutex_unlock(&mu);

	head(f, "rgpud_gpu_memory_total_bytes", "gauge", "Device memory of each GPU.");
	for (size_t i = 0; i < ng; i++) {
		metrics_escape(g[i].name, esc, sizeof(esc));
		fprintf(f, "rgpud_gpu_memory_total_bytes{gpu=\"%u\",name=\"%s\"} %" PRIu64 "\n",
			g[i].gpu, esc, g[i].total);
	}
	head(f, "rgpud_gpu_memory_reserved_bytes", "gauge",
	     "Device memory promised to leases (slices and their context reserve).");
	for (size_t i = 0; i < ng; i++)
		fprintf(f, "rgpud_gpu_memory_reserved_bytes{gpu=\"%u\"} %" PRIu64 "\n", g[i].gpu,
			g[i].reserved);
	head(f, "rgpud_gpu_exclusive", "gauge", "1 if a whole-GPU lease holds the GPU.");
	for (size_t i = 0; i < ng; i++)
		fprintf(f, "rgpud_gpu_exclusive{gpu=\"%u\"} %d\n", g[i].gpu, g[i].exclusive ? 1 : 0);
	head(f, "rgpud_leases", "gauge", "Live leases on this server.");
	fprintf(f, "rgpud_leases %zu\n", nl);
	head(f, "rgpud_lease_quota_bytes", "gauge",
	     "Memory quota of each lease (0: the whole GPU, exclusive).");
	for (size_t i = 0; i < nl; i++)
		fprintf(f, "rgpud_lease_quota_bytes{gpu=\"%u\",slurm_job=\"%" PRIu64 "\",uid=\"%u\"} %" PRIu64 "\n",
			l[i].gpu, l[i].job_id, l[i].uid, l[i].mem_limit);
	head(f, "rgpud_lease_used_bytes", "gauge", "Memory charged to each lease.");
	for (size_t i = 0; i < nl; i++)
		fprintf(f, "rgpud_lease_used_bytes{gpu=\"%u\",slurm_job=\"%" PRIu64 "\",uid=\"%u\"} %" PRIu64 "\n",
			l[i].gpu, l[i].job_id, l[i].uid, l[i].used);
	head(f, "rgpud_lease_expiry_timestamp_seconds", "gauge",
	     "When each lease expires (unix time; 0: never).");
	for (size_t i = 0; i < nl; i++)
		fprintf(f, "rgpud_lease_expiry_timestamp_seconds{gpu=\"%u\",slurm_job=\"%" PRIu64 "\",uid=\"%u\"} %" PRIu64 "\n",
			l[i].gpu, l[i].job_id, l[i].uid, l[i].expires);
	free(g);
	free(l);
	int bad = ferror(f);
	if (fclose(f) || bad) {
		free(buf);
		return NULL;
	}
	if (len)
		*len = size;
	return buf;
}

/* ---- HTTP endpoint ---- */

#ifdef HAVE_MICROHTTPD

#if MHD_VERSION >= 0x00097002
typedef enum MHD_Result mhd_result;
#else
typedef int mhd_result;
#endif

static struct MHD_Daemon *httpd;
static char start_err[256];

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	char msg[256];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	msg[strcspn(msg, "\n")] = '\0';
	snprintf(start_err, sizeof(start_err), "%s", msg);
	log_warn("metrics: %s", msg);
}

static mhd_result reply(struct MHD_Connection *c, unsigned code, const char *text)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text,
								 MHD_RESPMEM_PERSISTENT);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, "Content-Type", "text/plain; charset=utf-8");
	if (code == MHD_HTTP_METHOD_NOT_ALLOWED)
		MHD_add_response_header(r, "Allow", "GET, HEAD");
	mhd_result rc = MHD_queue_response(c, code, r);
	MHD_destroy_response(r);
	return rc;
}

static mhd_result handle(void *cls, struct MHD_Connection *c, const char *url,
			 const char *method, const char *version, const char *upload,
			 size_t *upload_size, void **req_cls)
{
	(void)cls;
	(void)version;
	(void)upload;
	(void)req_cls;
	if (strcmp(method, "GET") && strcmp(method, "HEAD"))
		return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD\n");
	if (*upload_size)
		return MHD_NO; /* a GET with a body: drop it */
	if (strcmp(url, "/metrics"))
		return reply(c, MHD_HTTP_NOT_FOUND, "not found: rgpud serves /metrics\n");
	size_t len;
	char *text = metrics_render(&len);
	if (!text)
		return reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
	struct MHD_Response *r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
	mhd_result rc = MHD_queue_response(c, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	return rc;
}

/* "HOST:PORT", "[V6]:PORT", ":PORT" or "PORT" into a socket address. */
static int parse_addr(const char *addr, struct sockaddr_storage *ss, char *err, size_t errlen)
{
	char host[256];
	const char *port;
	const char *colon = strrchr(addr, ':');
	if (!colon) {
		snprintf(host, sizeof(host), "127.0.0.1");
		port = addr;
	} else {
		size_t hl = (size_t)(colon - addr);
		const char *h = addr;
		if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
			h++;
			hl -= 2;
		}
		if (hl >= sizeof(host)) {
			snprintf(err, errlen, "--metrics: address too long");
			return -1;
		}
		memcpy(host, h, hl);
		host[hl] = '\0';
		if (!hl)
			snprintf(host, sizeof(host), "127.0.0.1");
		port = colon + 1;
	}
	char *end;
	errno = 0;
	long p = strtol(port, &end, 10);
	if (!*port || *end || errno || p < 1 || p > 65535) {
		snprintf(err, errlen, "--metrics=%s: expected [ADDR:]PORT with a port from 1 to 65535",
			 addr);
		return -1;
	}
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
	struct addrinfo *res = NULL;
	int e = getaddrinfo(host, port, &hints, &res);
	if (e || !res) {
		snprintf(err, errlen, "--metrics=%s: cannot resolve '%s': %s", addr, host,
			 gai_strerror(e));
		return -1;
	}
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	return (int)p;
}

int metrics_start(const char *addr, char *err, size_t errlen)
{
	struct sockaddr_storage ss = { 0 };
	int port = parse_addr(addr, &ss, err, errlen);
	if (port < 0)
		return -1;
	unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
	if (ss.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	start_err[0] = '\0';
	/* bounded: a few scrapers at a time, each with a deadline */
	httpd = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, handle, NULL,
				 MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
				 MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
				 MHD_OPTION_CONNECTION_LIMIT, (unsigned)16,
				 MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)4,
				 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
				 MHD_OPTION_END);
	if (!httpd) {
		snprintf(err, errlen, "--metrics=%s: cannot serve metrics there%s%s", addr,
			 start_err[0] ? ": " : " (address in use?)", start_err);
		return -1;
	}
	char h[NI_MAXHOST] = "?";
	getnameinfo((struct sockaddr *)&ss, sizeof(ss), h, sizeof(h), NULL, 0, NI_NUMERICHOST);
	log_info("metrics: serving Prometheus metrics on http://%s%s%s:%d/metrics",
		 ss.ss_family == AF_INET6 ? "[" : "", h, ss.ss_family == AF_INET6 ? "]" : "", port);
	return 0;
}

void metrics_stop(void)
{
	if (httpd)
		MHD_stop_daemon(httpd);
	httpd = NULL;
}

#else /* !HAVE_MICROHTTPD */

int metrics_start(const char *addr, char *err, size_t errlen)
{
	snprintf(err, errlen, "--metrics=%s: rgpud was built without libmicrohttpd, so it cannot "
		 "serve metrics (install libmicrohttpd-dev and rebuild)", addr);
	return -1;
}

void metrics_stop(void) {}

#endif
