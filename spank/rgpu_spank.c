/* SPANK entry points: options everywhere, then one file per context. */
#include "plugin.h"

#include <slurm/spank.h>

SPANK_PLUGIN(rgpu, 1);

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	if (rgpu_cfg_parse(ac, av))
		return -1;
	return rgpu_options_register(sp);
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	switch (spank_context()) {
	case S_CTX_LOCAL:
	case S_CTX_ALLOCATOR:
		return rgpu_local_post_opt(sp);
	default:
		return 0;
	}
}

int slurm_spank_job_prolog(spank_t sp, int ac, char **av)
{
	if (rgpu_cfg_parse(ac, av))
		return -1;
	return rgpu_job_prolog(sp);
}

int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
	if (rgpu_cfg_parse(ac, av))
		return -1;
	return rgpu_job_epilog(sp);
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	return rgpu_remote_user_init(sp);
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	if (spank_context() != S_CTX_REMOTE)
		return 0;
	return rgpu_remote_exit(sp);
}
