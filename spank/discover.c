/* GPU servers come from Slurm's own node table: a node whose Gres has
 * rgpu:N runs rgpud on rgpu_cfg.port at its NodeAddr.  Administrators list
 * GPU nodes once, in slurm.conf. */
#include "plugin.h"

#include <slurm/slurm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "rgpu:2", "gpu:1,rgpu:4(S:0)", "rgpu:h100:2": the rgpu count, or 0. */
static unsigned rgpu_count(const char *gres)
{
	if (!gres)
		return 0;
	const char *p = gres;
	while ((p = strstr(p, "rgpu:")) != NULL) {
		if (p == gres || p[-1] == ',') {
			const char *q = p + 5, *last = q;
			for (; *q && *q != ',' && *q != '('; q++)
				if (*q == ':')
					last = q + 1;
			return (unsigned)strtoul(last, NULL, 10);
		}
		p += 5;
	}
	return 0;
}

int rgpu_discover(struct rg_server_addr **out, size_t *n, char *err, size_t errlen)
{
	node_info_msg_t *ni = NULL;
	*out = NULL;
	*n = 0;
	if (slurm_load_node(0, &ni, SHOW_ALL) != SLURM_SUCCESS || !ni) {
		snprintf(err, errlen, "cannot read Slurm's node table: %s",
			 slurm_strerror(slurm_get_errno()));
		return -1;
	}
	struct rg_server_addr *a = calloc(ni->record_count ? ni->record_count : 1, sizeof(*a));
	if (!a) {
		slurm_free_node_info_msg(ni);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	size_t k = 0;
	for (uint32_t i = 0; i < ni->record_count; i++) {
		node_info_t *nd = &ni->node_array[i];
		if (!nd->name || !rgpu_count(nd->gres))
			continue;
		snprintf(a[k].node, sizeof(a[k].node), "%s", nd->name);
		snprintf(a[k].host, sizeof(a[k].host), "%s",
			 nd->node_addr && *nd->node_addr ? nd->node_addr : nd->name);
		a[k].port = rgpu_cfg.port;
		k++;
	}
	slurm_free_node_info_msg(ni);
	*out = a;
	*n = k;
	return 0;
}
