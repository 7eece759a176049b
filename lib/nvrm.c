/* The kernel driver's version (nvrm.h). */
#include "nvrm.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* a version: digits and dots, starting and ending with a digit, with at
 * least one dot */
static size_t version_at(const char *p)
{
	size_t k = 0, dots = 0;
	while (isdigit((unsigned char)p[k]) || (p[k] == '.' && k && isdigit((unsigned char)p[k + 1]))) {
		dots += p[k] == '.';
		k++;
	}
	return dots ? k : 0;
}

int rgpu_nvrm_parse(const char *text, char *out, size_t n)
{
	if (n)
		out[0] = '\0';
	const char *line = text ? strstr(text, "NVRM version:") : NULL;
	if (!line || !n)
		return -1;
	const char *end = strchr(line, '\n');
	/* the first version after "Kernel Module" (or, failing that, on
	 * the line): "Open Kernel Module for x86_64  580.159.04  Release" */
	const char *from = strstr(line, "Kernel Module");
	if (!from || (end && from > end))
		from = line;
	for (const char *p = from; *p && (!end || p < end); p++) {
		if (p > text && isdigit((unsigned char)p[-1]))
			continue;
		size_t k = version_at(p);
		if (k && k < n && (p[k] == ' ' || p[k] == '\t' || p[k] == '\n' || !p[k])) {
			memcpy(out, p, k);
			out[k] = '\0';
			return 0;
		}
	}
	return -1;
}

int rgpu_nvrm_version(char *out, size_t n)
{
	char buf[1024];
	FILE *f = fopen("/proc/driver/nvidia/version", "re");
	if (n)
		out[0] = '\0';
	if (!f)
		return -1;
	size_t k = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[k] = '\0';
	return rgpu_nvrm_parse(buf, out, n);
}
