/* Open access: every client may use every GPU, without quota.  Replaced by
 * munge + lease checks when rgpud runs under Slurm (see lease.h). */
#include "access.h"
#include "log.h"

#include <string.h>

int rgpud_access_init(const struct rgpud_access_config *cfg, char *err, size_t errlen)
{
	(void)cfg; (void)err; (void)errlen;
	return 0;
}

void rgpud_access_fini(void) {}

int rgpud_access_charge(const struct rgpud_principal *who, unsigned gpu, int64_t delta)
{
	(void)who; (void)gpu; (void)delta;
	return 0;
}

void rgpud_access_usage(const struct rgpud_principal *who, unsigned gpu,
			uint64_t *limit, uint64_t *used)
{
	(void)who; (void)gpu;
	*limit = 0;
	*used = 0;
}

int rgpud_access_hello(const void *cred, size_t len, const char *peer,
		       struct rgpud_principal *who, char *why, size_t whylen)
{
	(void)cred; (void)len; (void)peer; (void)why; (void)whylen;
	memset(who, 0, sizeof(*who));
	return 0;
}

int rgpud_access_device(const struct rgpud_principal *who, unsigned gpu,
			uint64_t *mem_limit, char *why, size_t whylen)
{
	(void)who; (void)gpu; (void)why; (void)whylen;
	*mem_limit = 0;
	return 0;
}

int rgpud_access_admin_op(const struct rgpud_principal *who, unsigned op,
			  struct rd *r, struct wbuf *reply)
{
	(void)who; (void)op; (void)r; (void)reply;
	return -1;
}
