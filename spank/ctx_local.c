/* sbatch, salloc, srun (as the user, before anything is submitted): refuse
 * a slice no GPU could hold.  A malformed size was already refused when
 * the option was parsed; a count larger than the cluster is refused by
 * job_submit.lua, which sees --gres. */
#include "plugin.h"
#include "lease.h"
#include "size.h"

#include <stdio.h>

int rgpu_local_post_opt(spank_t sp)
{
	if (!rgpu_mem_arg)
		return 0;
	uint64_t mem;
	char err[512];
	if (rgpu_mem_parse(rgpu_mem_arg, &mem, err, sizeof(err))) {
		slurm_error("rgpu: %s", err);
		return -1;
	}
	/* GPU sizes rarely change: any snapshot will do, polled once if none. */
	struct rg_cluster c;
	if (rgpu_view_get(&c, -1, 0, err, sizeof(err))) {
		slurm_info("rgpu: cannot check --rgpu-mem against the GPUs: %s", err);
		return 0;
	}
	uint64_t res = 0;
	uint64_t max = rg_cluster_max_slice(&c, &res);
	rgpu_view_release(&c, 0);
	if (max && mem > max) {
		char a[32], b[32];
		rgpu_format_size(max, a, sizeof(a));
		rgpu_format_size(res, b, sizeof(b));
		slurm_error("rgpu: --rgpu-mem=%s is larger than any GPU in the cluster can give: "
			    "the largest slice is %s (a GPU's memory less %s for the context)",
			    rgpu_mem_arg, a, b);
		return -1;
	}
	return 0;
}
