/* The lease table (see lease.h): an array under one mutex, persisted as
 * JSON. */
#include "config.h"

#include "lease.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <json.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LEASE_FILE_VERSION 1

struct gpu_slot {
	int known;
	char name[128];
	uint64_t total;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct rgpud_lease *tab;
static size_t ntab, captab;
static struct gpu_slot gpus[RGPUD_MAX_GPUS];
static char *state_dir; /* NULL: no persistence */

static int live(const struct rgpud_lease *l, time_t now)
{
	return l->expires == 0 || (uint64_t)now < l->expires;
}

static struct rgpud_lease *lookup(uint64_t job, unsigned gpu)
{
	for (size_t i = 0; i < ntab; i++)
		if (tab[i].job_id == job && tab[i].gpu == gpu)
			return &tab[i];
	return NULL;
}

static int append(const struct rgpud_lease *l)
{
	if (ntab == captab) {
		size_t nc = captab ? captab * 2 : 16;
		struct rgpud_lease *t = realloc(tab, nc * sizeof(*t));
		if (!t)
			return -1;
		tab = t;
		captab = nc;
	}
	tab[ntab] = *l;
	tab[ntab].used = 0;
	ntab++;
	return 0;
}

static void remove_at(size_t i)
{
	tab[i] = tab[ntab - 1];
	ntab--;
}

static void path_of(char *buf, size_t n, const char *suffix)
{
	snprintf(buf, n, "%s/%s%s", state_dir, RGPUD_LEASE_FILE, suffix);
}

/* ---- persistence ---- */

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Writes the table (mu held).  0, or -1 with why. */
static int save_locked(char *why, size_t whylen)
{
	if (!state_dir)
		return 0;
	char path[4096], tmp[4096];
	path_of(path, sizeof(path), "");
	path_of(tmp, sizeof(tmp), ".tmp");

	json_object *root = json_object_new_object();
	json_object *arr = json_object_new_array();
	if (!root || !arr) {
		json_object_put(root);
		json_object_put(arr);
		snprintf(why, whylen, "out of memory writing %s", path);
		return -1;
	}
	json_object_object_add(root, "version", json_object_new_int(LEASE_FILE_VERSION));
	json_object_object_add(root, "leases", arr);
	for (size_t i = 0; i < ntab; i++) {
		json_object *o = json_object_new_object();
		json_object_object_add(o, "job_id", json_object_new_uint64(tab[i].job_id));
		json_object_object_add(o, "uid", json_object_new_uint64(tab[i].uid));
		json_object_object_add(o, "gpu", json_object_new_uint64(tab[i].gpu));
		json_object_object_add(o, "mem_limit", json_object_new_uint64(tab[i].mem_limit));
		json_object_object_add(o, "expires", json_object_new_uint64(tab[i].expires));
		if (tab[i].share)
			json_object_object_add(o, "share", json_object_new_uint64(tab[i].share));
		json_object_array_add(arr, o);
	}
	size_t len = 0;
	const char *text = json_object_to_json_string_length(root, JSON_C_TO_STRING_PRETTY, &len);
	int rc = -1;
	int fd = -1;
	if (!text) {
		snprintf(why, whylen, "out of memory writing %s", path);
		goto out;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		snprintf(why, whylen, "cannot create %s: %s", tmp, strerror(errno));
		goto out;
	}
	if (write_all(fd, text, len) || write_all(fd, "\n", 1) || fsync(fd)) {
		snprintf(why, whylen, "cannot write %s: %s", tmp, strerror(errno));
		goto out;
	}
	if (close(fd)) {
		fd = -1;
		snprintf(why, whylen, "cannot write %s: %s", tmp, strerror(errno));
		goto out;
	}
	fd = -1;
	if (rename(tmp, path)) {
		snprintf(why, whylen, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
		goto out;
	}
	/* Make the rename itself durable. */
	int dfd = open(state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		if (fsync(dfd))
			log_warn("leases: fsync of %s: %s", state_dir, strerror(errno));
		close(dfd);
	}
	rc = 0;
out:
	if (fd >= 0) {
		close(fd);
		unlink(tmp);
	}
	json_object_put(root);
	return rc;
}

/* A non-negative JSON integer field, or -1 with why. */
static int get_field(json_object *o, const char *key, uint64_t max, uint64_t *v,
		     char *why, size_t whylen, size_t idx)
{
	json_object *f;
	if (!json_object_object_get_ex(o, key, &f) || !json_object_is_type(f, json_type_int)) {
		snprintf(why, whylen, "lease %zu: \"%s\" missing or not an integer", idx, key);
		return -1;
	}
	if (json_object_get_int64(f) < 0 || json_object_get_uint64(f) > max) {
		snprintf(why, whylen, "lease %zu: \"%s\" out of range", idx, key);
		return -1;
	}
	*v = json_object_get_uint64(f);
	return 0;
}

static int cmp_job_gpu(const void *a, const void *b)
{
	const struct rgpud_lease *x = *(const struct rgpud_lease *const *)a;
	const struct rgpud_lease *y = *(const struct rgpud_lease *const *)b;
	if (x->job_id != y->job_id)
		return x->job_id < y->job_id ? -1 : 1;
	return x->gpu < y->gpu ? -1 : x->gpu > y->gpu;
}

/* A (job, GPU) held twice in the loaded table, found by sorting (a lookup
 * per lease made loading 200,000 leases take seconds).  0 or -1 with why. */
static int find_duplicate(char *why, size_t whylen)
{
	if (ntab < 2)
		return 0;
	const struct rgpud_lease **v = malloc(ntab * sizeof(*v));
	if (!v) {
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	for (size_t i = 0; i < ntab; i++)
		v[i] = &tab[i];
	qsort(v, ntab, sizeof(*v), cmp_job_gpu);
	int rc = 0;
	for (size_t i = 1; i < ntab && !rc; i++)
		if (!cmp_job_gpu(&v[i - 1], &v[i])) {
			snprintf(why, whylen, "job %" PRIu64 " on GPU %u twice", v[i]->job_id, v[i]->gpu);
			rc = -1;
		}
	free(v);
	return rc;
}

/* json-c saturates integers that do not fit 64 bits (a mem_limit of 1e20
 * digits would read as "unlimited"): find such literals in the raw text.
 * 0, or -1 with why. */
static int check_number_range(const char *text, size_t len, char *why, size_t whylen)
{
	int in_str = 0;
	for (size_t i = 0; i < len; i++) {
		char c = text[i];
		if (in_str) {
			if (c == '\\')
				i++;
			else if (c == '"')
				in_str = 0;
			continue;
		}
		if (c == '"') {
			in_str = 1;
			continue;
		}
		if (c != '-' && (c < '0' || c > '9'))
			continue;
		size_t j = i + (c == '-');
		while (j < len && text[j] == '0')
			j++; /* leading zeros do not count */
		size_t start = j, frac = 0;
		while (j < len && ((text[j] >= '0' && text[j] <= '9') || text[j] == '.' ||
				   text[j] == 'e' || text[j] == 'E' || text[j] == '+' || text[j] == '-'))
			frac += text[j++] > '9';
		size_t digits = j - start;
		const char *lim = c == '-' ? "9223372036854775808" : "18446744073709551615";
		size_t ll = strlen(lim);
		if (!frac && (digits > ll || (digits == ll && memcmp(text + start, lim, ll) > 0))) {
			snprintf(why, whylen, "number at byte %zu does not fit in 64 bits", i);
			return -1;
		}
		i = j - 1;
	}
	return 0;
}

/* Parses text into the (empty) table, mu held.  0, or -1 with why. */
static int parse_locked(const char *text, size_t len, time_t now, size_t *dropped,
			char *why, size_t whylen)
{
	if (check_number_range(text, len, why, whylen))
		return -1;
	json_tokener *tok = json_tokener_new();
	if (!tok) {
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	json_object *root = json_tokener_parse_ex(tok, text, (int)len);
	enum json_tokener_error jerr = json_tokener_get_error(tok);
	if (!root || jerr != json_tokener_success) {
		if (jerr == json_tokener_success || jerr == json_tokener_continue)
			snprintf(why, whylen, "not valid JSON (truncated or empty)");
		else
			snprintf(why, whylen, "not valid JSON at byte %zu: %s",
				 json_tokener_get_parse_end(tok), json_tokener_error_desc(jerr));
		json_object_put(root);
		json_tokener_free(tok);
		return -1;
	}
	json_tokener_free(tok);

	int rc = -1;
	json_object *ver, *arr;
	if (!json_object_is_type(root, json_type_object)) {
		snprintf(why, whylen, "top level is not a JSON object");
		goto out;
	}
	if (!json_object_object_get_ex(root, "version", &ver) ||
	    !json_object_is_type(ver, json_type_int) ||
	    json_object_get_int64(ver) != LEASE_FILE_VERSION) {
		snprintf(why, whylen, "\"version\" missing or not %d", LEASE_FILE_VERSION);
		goto out;
	}
	if (!json_object_object_get_ex(root, "leases", &arr) ||
	    !json_object_is_type(arr, json_type_array)) {
		snprintf(why, whylen, "\"leases\" missing or not an array");
		goto out;
	}
	size_t n = json_object_array_length(arr);
	for (size_t i = 0; i < n; i++) {
		json_object *o = json_object_array_get_idx(arr, i);
		if (!json_object_is_type(o, json_type_object)) {
			snprintf(why, whylen, "lease %zu is not an object", i);
			goto out;
		}
		struct rgpud_lease l = { 0 };
		uint64_t uid, gpu;
		if (get_field(o, "job_id", UINT64_MAX, &l.job_id, why, whylen, i) ||
		    get_field(o, "uid", UINT32_MAX, &uid, why, whylen, i) ||
		    get_field(o, "gpu", RGPUD_MAX_GPUS - 1, &gpu, why, whylen, i) ||
		    get_field(o, "mem_limit", UINT64_MAX, &l.mem_limit, why, whylen, i) ||
		    get_field(o, "expires", UINT64_MAX, &l.expires, why, whylen, i))
			goto out;
		l.uid = (uint32_t)uid;
		l.gpu = (uint32_t)gpu;
		/* (share: optional, files written before it lack it) */
		uint64_t share = 0;
		if (json_object_object_get_ex(o, "share", NULL) &&
		    get_field(o, "share", 100, &share, why, whylen, i))
			goto out;
		l.share = (uint32_t)share;
		if (l.job_id == 0) {
			snprintf(why, whylen, "lease %zu: job_id 0", i);
			goto out;
		}
		if (!live(&l, now)) {
			log_info("leases: dropping job %" PRIu64 "'s lease on GPU %u: expired at %" PRIu64,
				 l.job_id, l.gpu, l.expires);
			(*dropped)++;
			continue;
		}
		if (append(&l)) {
			snprintf(why, whylen, "out of memory");
			goto out;
		}
	}
	rc = find_duplicate(why, whylen);
out:
	json_object_put(root);
	if (rc)
		ntab = 0;
	return rc;
}

static int read_file(const char *path, char **text, size_t *len)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	while (buf) {
		size_t r = fread(buf + n, 1, cap - n, f);
		n += r;
		if (n < cap) {
			if (ferror(f)) {
				free(buf);
				buf = NULL;
			}
			break;
		}
		char *nb = realloc(buf, cap * 2);
		if (!nb) {
			free(buf);
			buf = NULL;
			errno = ENOMEM;
			break;
		}
		buf = nb;
		cap *= 2;
	}
	int e = errno;
	fclose(f);
	if (!buf) {
		errno = e ? e : EIO;
		return -1;
	}
	*text = buf;
	*len = n;
	return 0;
}

int rgpud_lease_init(const char *dir, time_t now, char *err, size_t errlen)
{
	if (err && errlen)
		err[0] = 0;
	pthread_mutex_lock(&mu);
	ntab = 0;
	free(state_dir);
	state_dir = NULL;
	int rc = 0;
	if (!dir)
		goto out;
	state_dir = strdup(dir);
	if (!state_dir) {
		snprintf(err, errlen, "out of memory");
		rc = -1;
		goto out;
	}
	struct stat st;
	if (stat(dir, &st)) {
		if (errno != ENOENT || mkdir(dir, 0700)) {
			snprintf(err, errlen, "lease state directory %s: %s", dir, strerror(errno));
			rc = -1;
			goto out;
		}
		log_info("leases: created state directory %s", dir);
	} else if (!S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "lease state directory %s is not a directory", dir);
		rc = -1;
		goto out;
	}

	char path[4096];
	path_of(path, sizeof(path), "");
	char *text = NULL;
	size_t len = 0;
	if (read_file(path, &text, &len)) {
		if (errno == ENOENT) {
			log_info("leases: no %s yet, starting without leases", path);
			goto out;
		}
		snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
		rc = -1;
		goto out;
	}
	char why[512];
	size_t dropped = 0;
	if (parse_locked(text, len, now, &dropped, why, sizeof(why))) {
		char aside[4200];
		snprintf(aside, sizeof(aside), "%s.corrupt-%lld", path, (long long)now);
		if (rename(path, aside)) {
			snprintf(err, errlen, "%s is corrupt (%s) and cannot be renamed aside: %s",
				 path, why, strerror(errno));
			rc = -1;
		} else {
			log_err("leases: %s is corrupt (%s); moved it to %s and started "
				"WITHOUT leases: re-grant them (or repair the file and restart)",
				path, why, aside);
			snprintf(err, errlen, "%s was corrupt (%s), moved to %s", path, why, aside);
		}
		free(text);
		goto out;
	}
	free(text);
	log_info("leases: loaded %zu lease(s) from %s (%zu expired dropped)", ntab, path, dropped);
	if (dropped && save_locked(why, sizeof(why)))
		log_err("leases: %s", why);
out:
	pthread_mutex_unlock(&mu);
	return rc;
}

void rgpud_lease_fini(void)
{
	pthread_mutex_lock(&mu);
	free(tab);
	tab = NULL;
	ntab = captab = 0;
	free(state_dir);
	state_dir = NULL;
	memset(gpus, 0, sizeof(gpus));
	pthread_mutex_unlock(&mu);
}

void rgpud_lease_set_gpu(unsigned gpu, const char *name, uint64_t total)
{
	if (gpu >= RGPUD_MAX_GPUS) {
		log_warn("leases: GPU %u ignored (at most %d GPUs)", gpu, RGPUD_MAX_GPUS);
		return;
	}
	pthread_mutex_lock(&mu);
	gpus[gpu].known = 1;
	gpus[gpu].total = total;
	snprintf(gpus[gpu].name, sizeof(gpus[gpu].name), "%s", name ? name : "");
	pthread_mutex_unlock(&mu);
}

/* Slices may promise a GPU's memory up to this many percent of it (rgpud
 * --memory-overcommit; the memory manager swaps or waits for the rest).
 * One slice never exceeds the GPU itself. */
static unsigned overcommit_pct = 100;

void rgpud_lease_set_overcommit(unsigned pct)
{
	pthread_mutex_lock(&mu);
	overcommit_pct = pct < 100 ? 100 : pct;
	pthread_mutex_unlock(&mu);
}

static uint64_t slice_cost(uint64_t limit)
{
	uint64_t c = limit + RGPUD_LEASE_CTX_RESERVE;
	return c < limit ? UINT64_MAX : c;
}

/* Reserved bytes on gpu by live leases other than skip's, mu held;
 * *excl_job set to a job holding it whole, *others to the number of other
 * live leases. */
static uint64_t reserved_locked(unsigned gpu, time_t now, const struct rgpud_lease *skip,
				uint64_t *excl_job, size_t *others)
{
	uint64_t sum = 0;
	*excl_job = 0;
	*others = 0;
	for (size_t i = 0; i < ntab; i++) {
		const struct rgpud_lease *l = &tab[i];
		if (l->gpu != gpu || l == skip || !live(l, now))
			continue;
		(*others)++;
		if (l->mem_limit == 0)
			*excl_job = l->job_id;
		else
			sum = sum + slice_cost(l->mem_limit) < sum ? UINT64_MAX
								    : sum + slice_cost(l->mem_limit);
	}
	return sum;
}

static void fmt_bytes(char *buf, size_t n, uint64_t b)
{
	if (b >= (1ull << 30) && b % (1ull << 20) == 0)
		snprintf(buf, n, "%.2f GiB", (double)b / (double)(1ull << 30));
	else if (b >= (1ull << 20))
		snprintf(buf, n, "%.1f MiB", (double)b / (double)(1ull << 20));
	else
		snprintf(buf, n, "%" PRIu64 " bytes", b);
}

int rgpud_lease_grant(const struct rgpud_lease *req, time_t now, char *why, size_t whylen)
{
	if (req->job_id == 0) {
		snprintf(why, whylen, "job id 0 cannot hold a lease");
		return RGPUD_LEASE_INVAL;
	}
	if (req->expires && (uint64_t)now >= req->expires) {
		snprintf(why, whylen, "lease for job %" PRIu64 " expires in the past (%" PRIu64 ")",
			 req->job_id, req->expires);
		return RGPUD_LEASE_INVAL;
	}
	if (req->share > 100) {
		snprintf(why, whylen, "share %u is not a percentage from 1 to 100", req->share);
		return RGPUD_LEASE_INVAL;
	}
	pthread_mutex_lock(&mu);
	int rc;
	if (req->gpu >= RGPUD_MAX_GPUS || !gpus[req->gpu].known) {
		snprintf(why, whylen, "this server has no GPU %u", req->gpu);
		rc = RGPUD_LEASE_NODEV;
		goto out;
	}
	struct rgpud_lease *old = lookup(req->job_id, req->gpu);
	if (old && !live(old, now)) {
		/* Expired but not yet collected: replace it. */
		remove_at((size_t)(old - tab));
		old = NULL;
	}
	if (old) {
		if (old->uid != req->uid || old->mem_limit != req->mem_limit ||
		    old->share != req->share) {
			snprintf(why, whylen, "job %" PRIu64 " already holds a different lease on "
				 "GPU %u (uid %u, limit %" PRIu64 "): release it first",
				 req->job_id, req->gpu, old->uid, old->mem_limit);
			rc = RGPUD_LEASE_EXISTS;
			goto out;
		}
		if (old->expires == req->expires) {
			rc = RGPUD_LEASE_SAME;
			goto out;
		}
		uint64_t prev = old->expires;
		old->expires = req->expires;
		if (save_locked(why, whylen)) {
			old->expires = prev;
			rc = RGPUD_LEASE_IO;
			goto out;
		}
		log_info("leases: job %" PRIu64 " renewed its lease on GPU %u until %" PRIu64,
			 req->job_id, req->gpu, req->expires);
		rc = RGPUD_LEASE_OK;
		goto out;
	}

	uint64_t excl = 0;
	size_t others = 0;
	uint64_t sum = reserved_locked(req->gpu, now, NULL, &excl, &others);
	uint64_t total = gpus[req->gpu].total;
	if (excl) {
		snprintf(why, whylen, "GPU %u is leased whole to job %" PRIu64, req->gpu, excl);
		rc = RGPUD_LEASE_BUSY;
		goto out;
	}
	if (req->mem_limit == 0 && others) {
		snprintf(why, whylen, "GPU %u cannot be leased whole: %zu other job(s) hold slices of it",
			 req->gpu, others);
		rc = RGPUD_LEASE_BUSY;
		goto out;
	}
	if (req->mem_limit) {
		uint64_t cost = slice_cost(req->mem_limit);
		uint64_t room = total > UINT64_MAX / overcommit_pct ? UINT64_MAX
								     : total * overcommit_pct / 100;
		if (cost > total || sum > room - cost) {
			char want[32], have[32], tot[32], res[32];
			fmt_bytes(want, sizeof(want), req->mem_limit);
			fmt_bytes(have, sizeof(have), room > sum ? room - sum : 0);
			fmt_bytes(tot, sizeof(tot), total);
			fmt_bytes(res, sizeof(res), RGPUD_LEASE_CTX_RESERVE);
			snprintf(why, whylen, "GPU %u has no room for %s (+%s context reserve): "
				 "%s of %s unreserved", req->gpu, want, res, have, tot);
			rc = RGPUD_LEASE_NOSPACE;
			goto out;
		}
	}
	if (append(req)) {
		snprintf(why, whylen, "out of memory");
		rc = RGPUD_LEASE_IO;
		goto out;
	}
	if (save_locked(why, whylen)) {
		ntab--;
		rc = RGPUD_LEASE_IO;
		goto out;
	}
	log_info("leases: granted job %" PRIu64 " (uid %u) GPU %u, limit %" PRIu64
		 "%s, expires %" PRIu64, req->job_id, req->uid, req->gpu, req->mem_limit,
		 req->mem_limit ? "" : " (whole GPU)", req->expires);
	rc = RGPUD_LEASE_OK;
out:
	pthread_mutex_unlock(&mu);
	return rc;
}

int rgpud_lease_release_job(uint64_t job_id)
{
	pthread_mutex_lock(&mu);
	int n = 0;
	for (size_t i = 0; i < ntab;) {
		if (tab[i].job_id == job_id) {
			remove_at(i);
			n++;
		} else {
			i++;
		}
	}
	if (n) {
		char why[512];
		if (save_locked(why, sizeof(why)))
			log_err("leases: job %" PRIu64 " released but not persisted: %s", job_id, why);
		log_info("leases: released %d lease(s) of job %" PRIu64, n, job_id);
	}
	pthread_mutex_unlock(&mu);
	return n;
}

int rgpud_lease_find(uint64_t job_id, unsigned gpu, time_t now, struct rgpud_lease *out)
{
	pthread_mutex_lock(&mu);
	struct rgpud_lease *l = lookup(job_id, gpu);
	int rc = RGPUD_LEASE_NOTFOUND;
	if (l && live(l, now)) {
		if (out)
			*out = *l;
		rc = 0;
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

int rgpud_lease_job_count(uint64_t job_id, time_t now)
{
	return rgpud_lease_job_uid_count(job_id, UINT32_MAX, now);
}

int rgpud_lease_job_uid_count(uint64_t job_id, uint32_t uid, time_t now)
{
	pthread_mutex_lock(&mu);
	int n = 0;
	for (size_t i = 0; i < ntab; i++)
		if (tab[i].job_id == job_id && live(&tab[i], now) &&
		    (uid == UINT32_MAX || tab[i].uid == uid))
			n++;
	pthread_mutex_unlock(&mu);
	return n;
}

int rgpud_lease_charge(uint64_t job_id, unsigned gpu, uint64_t bytes)
{
	pthread_mutex_lock(&mu);
	struct rgpud_lease *l = lookup(job_id, gpu);
	int rc = 0;
	if (!l)
		rc = bytes ? RGPUD_LEASE_NOTFOUND : 0;
	else if (bytes > UINT64_MAX - l->used)
		rc = RGPUD_LEASE_QUOTA; /* would wrap: no quota can hold it */
	else if (l->mem_limit && l->used + bytes > l->mem_limit)
		rc = RGPUD_LEASE_QUOTA;
	else
		l->used += bytes;
	pthread_mutex_unlock(&mu);
	return rc;
}

int rgpud_lease_refund(uint64_t job_id, unsigned gpu, uint64_t bytes)
{
	pthread_mutex_lock(&mu);
	struct rgpud_lease *l = lookup(job_id, gpu);
	int rc = 0;
	if (l && bytes > l->used) {
		/* the caller's books are wrong: keep ours as they are */
		log_err("leases: job %" PRIu64 " GPU %u: refund of %" PRIu64
			" exceeds the %" PRIu64 " charged: refused", job_id, gpu, bytes, l->used);
		rc = RGPUD_LEASE_INVAL;
	} else if (l) {
		l->used -= bytes;
	}
	pthread_mutex_unlock(&mu);
	return rc;
}

int rgpud_lease_expire(time_t now, uint64_t **jobs, size_t *njobs)
{
	*jobs = NULL;
	*njobs = 0;
	pthread_mutex_lock(&mu);
	size_t n = 0, cap = 0;
	uint64_t *out = NULL;
	int rc = 0;
	for (size_t i = 0; i < ntab;) {
		if (live(&tab[i], now)) {
			i++;
			continue;
		}
		log_warn("leases: job %" PRIu64 "'s lease on GPU %u expired at %" PRIu64
			 " (job ended without an epilog?)", tab[i].job_id, tab[i].gpu, tab[i].expires);
		size_t k;
		for (k = 0; k < n && out[k] != tab[i].job_id; k++)
			;
		if (k == n) {
			if (n == cap) {
				size_t nc = cap ? cap * 2 : 8;
				uint64_t *t = realloc(out, nc * sizeof(*t));
				if (!t) {
					rc = -1;
					break;
				}
				out = t;
				cap = nc;
			}
			out[n++] = tab[i].job_id;
		}
		remove_at(i);
	}
	if (n) {
		char why[512];
		if (save_locked(why, sizeof(why)))
			log_err("leases: expired leases not persisted: %s", why);
	}
	pthread_mutex_unlock(&mu);
	*jobs = out;
	*njobs = n;
	return rc;
}

int rgpud_lease_list(struct rgpud_lease **leases, size_t *n)
{
	pthread_mutex_lock(&mu);
	struct rgpud_lease *out = malloc((ntab ? ntab : 1) * sizeof(*out));
	if (out && ntab)
		memcpy(out, tab, ntab * sizeof(*out));
	*n = out ? ntab : 0;
	pthread_mutex_unlock(&mu);
	*leases = out;
	return out ? 0 : -1;
}

int rgpud_lease_gpus(struct rgpud_gpu_load **out, size_t *n)
{
	time_t now = time(NULL);
	pthread_mutex_lock(&mu);
	size_t k = 0;
	for (unsigned g = 0; g < RGPUD_MAX_GPUS; g++)
		if (gpus[g].known)
			k++;
	struct rgpud_gpu_load *v = calloc(k ? k : 1, sizeof(*v));
	size_t j = 0;
	for (unsigned g = 0; v && g < RGPUD_MAX_GPUS; g++) {
		if (!gpus[g].known)
			continue;
		uint64_t excl;
		size_t others;
		v[j].gpu = g;
		snprintf(v[j].name, sizeof(v[j].name), "%s", gpus[g].name);
		v[j].total = gpus[g].total;
		v[j].reserved = reserved_locked(g, now, NULL, &excl, &others);
		v[j].exclusive = excl != 0;
		if (excl)
			v[j].reserved = gpus[g].total;
		j++;
	}
	pthread_mutex_unlock(&mu);
	*out = v;
	*n = v ? j : 0;
	return v ? 0 : -1;
}
