/*
 * The scheduler's parent requests: SESSION_LIST (rgpu top) and
 * SESSION_SHARE (lib/proto.h).
 */
#include "access.h"
#include "lease.h"
#include "metrics.h"
#include "proto.h"
#include "scheduler.h"
#include "wire.h"

#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1
#endif
#include <cuda.h>

#include <stdlib.h>
#include <time.h>

static int fail(struct wbuf *out, int status, const char *msg)
{
	put_str(out, msg);
	return status;
}

static int op_list(const struct rgpud_principal *who, struct rd *r, struct wbuf *out)
{
	if (!rd_done(r))
		return fail(out, RGPU_ERR_PROTO, "malformed SESSION_LIST");
	struct metrics_session_row *v = NULL;
	size_t n = 0;
	if (metrics_sessions_list(&v, &n))
		return fail(out, CUDA_ERROR_OUT_OF_MEMORY, "out of memory");
	/* root and the SlurmUser see every session; others their own uid's.
	 * (An unauthenticated client of an --open server is root only if
	 * it is: its uid is whatever it claimed, so it sees only that.) */
	int all = who->admin && who->authenticated;
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (all || v[i].uid == who->uid)
			v[k++] = v[i];
	put_u32(out, (uint32_t)k);
	time_t now = time(NULL);
	for (size_t i = 0; i < k; i++) {
		uint64_t busy = 0;
		uint32_t weight = 0, pct = 0, share = 0;
		uint64_t ns = v[i].pid > 0 ? sched_parent_attained(v[i].pid, v[i].gpu, &busy, &weight, &pct)
					   : 0;
		struct rgpud_lease l;
		if (v[i].job && rgpud_lease_find(v[i].job, v[i].gpu, now, &l) == 0)
			share = l.share;
		put_u64(out, v[i].job);
		put_u32(out, v[i].uid);
		put_u32(out, v[i].gpu);
		put_u32(out, (uint32_t)v[i].pid);
		put_u64(out, v[i].mem);
		put_u32(out, share);
		put_u32(out, weight);
		put_u64(out, ns);
		put_u64(out, busy);
		put_u64(out, 0); /* resident: the memory manager's, once it reports */
		put_u64(out, 0); /* swapped out */
		put_u64(out, (uint64_t)(v[i].age_s * 1000));
	}
	put_str(out, sched_policy_name(sched_config()->policy));
	free(v);
	return CUDA_SUCCESS;
}

static int op_share(pid_t pid, struct rd *r, struct wbuf *out)
{
	uint32_t share = get_u32(r);
	if (!rd_done(r))
		return fail(out, RGPU_ERR_PROTO, "malformed SESSION_SHARE");
	if (sched_parent_lower_share(pid, share))
		return fail(out, CUDA_ERROR_INVALID_VALUE, "a share is a percentage from 1 to 100");
	return CUDA_SUCCESS;
}

int sched_parent_op(const struct rgpud_principal *who, pid_t pid, unsigned op, struct rd *r,
		    struct wbuf *out)
{
	switch (op) {
	case RGPU_OP_SESSION_LIST: return op_list(who, r, out);
	case RGPU_OP_SESSION_SHARE: return op_share(pid, r, out);
	default: return -1;
	}
}
