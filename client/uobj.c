/*
 * User objects (cuUserObjectCreate, cuGraphRetainUserObject, ...): a
 * reference-counted pointer whose destructor runs when the last reference
 * goes, on the client, where the pointer and the destructor are.  Graphs
 * hold references; a clone or an executable made from a graph holds the
 * graph's too, an executable updated from a graph takes that graph's.
 * As in CUDA, destructors run on one internal thread, never in the caller
 * (they may not call CUDA), and an executable's references go only once
 * its launches are done: destroying one that holds any waits for its
 * context first (the server knows when launches end, the client does not
 * without asking).
 */
#include "client.h"
#include "graph.h"
#include "log.h"

#include <stdlib.h>

#define RC_UOBJ 0x52637562

struct rc_uobj {
	uint32_t magic;
	void *ptr;
	CUhostFn destroy;
	unsigned refs;          /* under lock */
	struct rc_uobj *next;   /* waiting for the destructor thread */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static struct rc_uobj *dying;
static int thread_up;

static void *destructor_thread(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&lock);
	for (;;) {
		while (!dying)
			pthread_cond_wait(&wake, &lock);
		struct rc_uobj *o = dying;
		dying = o->next;
		pthread_mutex_unlock(&lock);
		o->destroy(o->ptr);
		o->magic = 0;
		free(o);
		pthread_mutex_lock(&lock);
	}
	return NULL;
}

/* lock held */
static void to_destructor(struct rc_uobj *o)
{
	if (!thread_up) {
		int err = rc_thread_start(destructor_thread, NULL);
		if (err) {
			/* no thread: run it here rather than never */
			log_warn("user objects: no destructor thread (%d); running a destructor in the caller", err);
			pthread_mutex_unlock(&lock);
			o->destroy(o->ptr);
			o->magic = 0;
			free(o);
			pthread_mutex_lock(&lock);
			return;
		}
		thread_up = 1;
	}
	o->next = NULL;
	struct rc_uobj **p = &dying;
	while (*p)
		p = &(*p)->next;
	*p = o;
	pthread_cond_signal(&wake);
}

static CUresult get(CUuserObject h, struct rc_uobj **out)
{
	CUresult rc = rc_obj(h, RC_UOBJ, out);
	return rc == CUDA_ERROR_INVALID_HANDLE ? CUDA_ERROR_INVALID_VALUE : rc;
}

/* lock held; more than it has is refused, not wrapped */
static CUresult release(struct rc_uobj *o, unsigned n)
{
	if (!n || n > o->refs)
		return CUDA_ERROR_INVALID_VALUE;
	o->refs -= n;
	if (!o->refs)
		to_destructor(o);
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuUserObjectCreate(CUuserObject *out, void *ptr, CUhostFn destroy, unsigned int refs,
				      unsigned int flags)
{
	CUresult rc = rc_initialized();
	if (rc)
		return rc;
	if (!out || !destroy || !refs || flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
		return CUDA_ERROR_INVALID_VALUE;
	struct rc_uobj *o = calloc(1, sizeof(*o));
	if (!o)
		return CUDA_ERROR_OUT_OF_MEMORY;
	o->magic = RC_UOBJ;
	o->ptr = ptr;
	o->destroy = destroy;
	o->refs = refs;
	*out = (CUuserObject)o;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuUserObjectRetain(CUuserObject h, unsigned int n)
{
	struct rc_uobj *o;
	CUresult rc = get(h, &o);
	if (rc)
		return rc;
	pthread_mutex_lock(&lock);
	if (!n || o->refs > UINT32_MAX - n)
		rc = CUDA_ERROR_INVALID_VALUE;
	else
		o->refs += n;
	pthread_mutex_unlock(&lock);
	return rc;
}

RC_EXPORT CUresult cuUserObjectRelease(CUuserObject h, unsigned int n)
{
	struct rc_uobj *o;
	CUresult rc = get(h, &o);
	if (rc)
		return rc;
	pthread_mutex_lock(&lock);
	rc = release(o, n);
	pthread_mutex_unlock(&lock);
	return rc;
}

/* g holds n more of o's references (lock held) */
static CUresult hold(struct rc_graph *g, struct rc_uobj *o, unsigned n)
{
	for (size_t i = 0; i < g->nurefs; i++)
		if (g->urefs[i].obj == o) {
			g->urefs[i].count += n;
			return CUDA_SUCCESS;
		}
	struct rc_uref *u = realloc(g->urefs, (g->nurefs + 1) * sizeof(*u));
	if (!u)
		return CUDA_ERROR_OUT_OF_MEMORY;
	u[g->nurefs++] = (struct rc_uref){ o, n };
	g->urefs = u;
	return CUDA_SUCCESS;
}

RC_EXPORT CUresult cuGraphRetainUserObject(CUgraph hg, CUuserObject h, unsigned int n, unsigned int flags)
{
	struct rc_graph *g;
	struct rc_uobj *o;
	CUresult rc = rc_obj(hg, RC_GRAPH, &g);
	if (!rc)
		rc = get(h, &o);
	if (rc)
		return rc;
	if (!n || (flags & ~(unsigned)CU_GRAPH_USER_OBJECT_MOVE))
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	int move = flags & CU_GRAPH_USER_OBJECT_MOVE;
	if ((move && n > o->refs) || (!move && o->refs > UINT32_MAX - n))
		rc = CUDA_ERROR_INVALID_VALUE;
	else if (!(rc = hold(g, o, n)) && !move)
		o->refs += n; /* new references; moved ones were the caller's */
	pthread_mutex_unlock(&lock);
	return rc;
}

RC_EXPORT CUresult cuGraphReleaseUserObject(CUgraph hg, CUuserObject h, unsigned int n)
{
	struct rc_graph *g;
	struct rc_uobj *o;
	CUresult rc = rc_obj(hg, RC_GRAPH, &g);
	if (!rc)
		rc = get(h, &o);
	if (rc)
		return rc;
	pthread_mutex_lock(&lock);
	rc = CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < g->nurefs; i++)
		if (g->urefs[i].obj == o && n && n <= g->urefs[i].count) {
			g->urefs[i].count -= n;
			if (!g->urefs[i].count)
				g->urefs[i] = g->urefs[--g->nurefs];
			rc = release(o, n);
			break;
		}
	pthread_mutex_unlock(&lock);
	return rc;
}

int rc_uobj_copy(struct rc_graph *dst, const struct rc_graph *src)
{
	int bad = 0;
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < src->nurefs && !bad; i++) {
		struct rc_uobj *o = src->urefs[i].obj;
		unsigned n = src->urefs[i].count;
		if (o->refs > UINT32_MAX - n || hold(dst, o, n))
			bad = 1;
		else
			o->refs += n;
	}
	pthread_mutex_unlock(&lock);
	return bad ? -1 : 0;
}

void rc_uobj_drop(struct rc_graph *g)
{
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < g->nurefs; i++)
		release(g->urefs[i].obj, g->urefs[i].count);
	free(g->urefs);
	g->urefs = NULL;
	g->nurefs = 0;
	pthread_mutex_unlock(&lock);
}
