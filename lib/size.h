/* Memory sizes as users type them: "2G", "512M", "1.5G", "4096K", "2GiB".
 * A bare number is MiB, as in Slurm's --mem.  Binary units. */
#ifndef RGPU_SIZE_H
#define RGPU_SIZE_H

#include <stddef.h>
#include <stdint.h>

/* 0 on success; -1 with a sentence in err. */
int rgpu_parse_size(const char *s, uint64_t *bytes, char *err, size_t errlen);
/* "2.0 GiB" style, for messages. */
void rgpu_format_size(uint64_t bytes, char *buf, size_t len);

#endif
