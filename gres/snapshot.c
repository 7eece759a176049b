#include "snapshot.h"
#include "lease_rpc.h"
#include "log.h"

#include <errno.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static uint64_t jget_u64(json_object *o, const char *k)
{
	json_object *v;
	return json_object_object_get_ex(o, k, &v) ? (uint64_t)json_object_get_int64(v) : 0;
}

static const char *jget_str(json_object *o, const char *k)
{
	json_object *v;
	return json_object_object_get_ex(o, k, &v) ? json_object_get_string(v) : "";
}

int rg_snapshot_load(const char *path, struct rg_cluster *c)
{
	json_object *root = json_object_from_file(path);
	if (!root)
		return -1;
	json_object *srvs;
	if (!json_object_object_get_ex(root, "servers", &srvs) ||
	    !json_object_is_type(srvs, json_type_array)) {
		json_object_put(root);
		return -1;
	}
	c->taken = (time_t)jget_u64(root, "taken");
	size_t ns = json_object_array_length(srvs);
	for (size_t i = 0; i < ns; i++) {
		json_object *s = json_object_array_get_idx(srvs, i), *gpus;
		if (rg_cluster_add_server(c, jget_str(s, "node"), jget_str(s, "host"),
					  (unsigned)jget_u64(s, "port")) < 0)
			goto oom;
		if (json_object_object_get_ex(s, "gpus", &gpus)) {
			size_t ng = json_object_array_length(gpus);
			for (size_t j = 0; j < ng; j++) {
				json_object *g = json_object_array_get_idx(gpus, j);
				if (rg_cluster_add_gpu(c, (uint32_t)jget_u64(g, "index"),
						       jget_str(g, "name"), jget_u64(g, "total"),
						       jget_u64(g, "reserved"),
						       (uint32_t)jget_u64(g, "slices"),
						       (int)jget_u64(g, "exclusive")))
					goto oom;
			}
		}
		c->srv[c->nsrv - 1].up = (int)jget_u64(s, "up");
		json_object *cr;
		if (json_object_object_get_ex(s, "ctx_reserve", &cr))
			rg_cluster_set_reserve(c, c->nsrv - 1, (uint64_t)json_object_get_int64(cr));
	}
	json_object_put(root);
	return 0;
oom:
	json_object_put(root);
	rg_cluster_free(c);
	return -1;
}

int rg_snapshot_save(const char *path, const struct rg_cluster *c, char *err, size_t errlen)
{
	json_object *root = json_object_new_object();
	json_object *srvs = json_object_new_array();
	json_object_object_add(root, "taken", json_object_new_int64((int64_t)c->taken));
	json_object_object_add(root, "servers", srvs);
	for (size_t i = 0; i < c->nsrv; i++) {
		const struct rg_server *s = &c->srv[i];
		json_object *js = json_object_new_object(), *gpus = json_object_new_array();
		json_object_object_add(js, "node", json_object_new_string(s->node));
		json_object_object_add(js, "host", json_object_new_string(s->host));
		json_object_object_add(js, "port", json_object_new_int64(s->port));
		json_object_object_add(js, "up", json_object_new_int(s->up));
		json_object_object_add(js, "ctx_reserve", json_object_new_int64((int64_t)s->ctx_reserve));
		for (uint32_t k = 0; k < s->ngpu; k++) {
			const struct rg_gpu *g = &c->gpu[s->first + k];
			json_object *jg = json_object_new_object();
			json_object_object_add(jg, "index", json_object_new_int64(g->index));
			json_object_object_add(jg, "name", json_object_new_string(g->name));
			json_object_object_add(jg, "total", json_object_new_int64((int64_t)g->total));
			json_object_object_add(jg, "reserved",
					       json_object_new_int64((int64_t)g->reserved));
			json_object_object_add(jg, "slices", json_object_new_int64(g->nslices));
			json_object_object_add(jg, "exclusive", json_object_new_int(g->exclusive));
			json_object_array_add(gpus, jg);
		}
		json_object_object_add(js, "gpus", gpus);
		json_object_array_add(srvs, js);
	}
	char tmp[4096];
	snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
	int rc = json_object_to_file_ext(tmp, root, JSON_C_TO_STRING_PLAIN);
	json_object_put(root);
	if (rc == 0)
		chmod(tmp, 0644);
	if (rc || rename(tmp, path)) {
		snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
		unlink(tmp);
		return -1;
	}
	return 0;
}

struct poll_job {
	const struct rg_server_addr *addrs;
	struct rg_list *lists;
	int *ok;
	size_t n, next;
	int timeout_ms;
	pthread_mutex_t mu;
};

static void *poll_worker(void *arg)
{
	struct poll_job *j = arg;
	for (;;) {
		pthread_mutex_lock(&j->mu);
		size_t i = j->next++;
		pthread_mutex_unlock(&j->mu);
		if (i >= j->n)
			return NULL;
		char err[512];
		const struct rg_server_addr *a = &j->addrs[i];
		struct rg_conn *c = rg_connect(a->host, a->port, 0, j->timeout_ms, err, sizeof(err));
		if (!c) {
			log_warn("rgpu: server %s (%s:%u) not polled: %s", a->node, a->host, a->port, err);
			continue;
		}
		if (rg_lease_list(c, &j->lists[i], err, sizeof(err)) == 0)
			j->ok[i] = 1;
		else
			log_warn("rgpu: server %s: LEASE_LIST: %s", a->node, err);
		rg_close(c);
	}
}

int rg_snapshot_poll(const struct rg_server_addr *addrs, size_t n, int timeout_ms,
		     int parallel, struct rg_cluster *c)
{
	struct poll_job j = { .addrs = addrs, .n = n, .timeout_ms = timeout_ms };
	j.lists = calloc(n ? n : 1, sizeof(*j.lists));
	j.ok = calloc(n ? n : 1, sizeof(*j.ok));
	if (!j.lists || !j.ok) {
		free(j.lists);
		free(j.ok);
		return 0;
	}
	pthread_mutex_init(&j.mu, NULL);
	if (parallel < 1)
		parallel = 1;
	if ((size_t)parallel > n)
		parallel = (int)(n ? n : 1);
	pthread_t *th = calloc((size_t)parallel, sizeof(*th));
	int started = 0;
	for (int i = 0; th && i < parallel; i++)
		if (pthread_create(&th[i], NULL, poll_worker, &j) == 0)
			started++;
	if (!started)
		poll_worker(&j);
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	free(th);
	pthread_mutex_destroy(&j.mu);

	int answered = 0;
	c->taken = time(NULL);
	for (size_t i = 0; i < n; i++) {
		if (rg_cluster_add_server(c, addrs[i].node, addrs[i].host, addrs[i].port) < 0)
			break;
		const struct rg_list *l = &j.lists[i];
		for (size_t k = 0; j.ok[i] && k < l->ngpu; k++) {
			uint32_t slices = 0;
			for (size_t m = 0; m < l->nlease; m++)
				slices += l->leases[m].gpu == l->gpus[k].gpu && l->leases[m].mem_limit;
			rg_cluster_add_gpu(c, l->gpus[k].gpu, l->gpus[k].name, l->gpus[k].total,
					   l->gpus[k].reserved, slices, (int)l->gpus[k].exclusive);
		}
		c->srv[c->nsrv - 1].up = j.ok[i];
		if (j.ok[i])
			rg_cluster_set_reserve(c, c->nsrv - 1, l->ctx_reserve);
		answered += j.ok[i];
		rg_list_free(&j.lists[i]);
	}
	free(j.lists);
	free(j.ok);
	return answered;
}
