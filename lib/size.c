#include "size.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int rgpu_parse_size(const char *s, uint64_t *bytes, char *err, size_t errlen)
{
	if (!s || !*s) {
		snprintf(err, errlen, "empty size");
		return -1;
	}
	const char *p = s;
	if (!isdigit((unsigned char)*p) && *p != '.') {
		snprintf(err, errlen, "'%s' is not a size (expected a number with an optional K, M, G or T suffix, e.g. 2G)", s);
		return -1;
	}
	char *end;
	errno = 0;
	double v = strtod(p, &end);
	if (errno || end == p || !isfinite(v) || v < 0) {
		snprintf(err, errlen, "'%s' is not a size (expected e.g. 2G or 512M)", s);
		return -1;
	}
	double mult;
	const char *u = end;
	switch (toupper((unsigned char)*u)) {
	case '\0': mult = 1024.0 * 1024; break;
	case 'B': mult = 1; break;
	case 'K': mult = 1024.0; break;
	case 'M': mult = 1024.0 * 1024; break;
	case 'G': mult = 1024.0 * 1024 * 1024; break;
	case 'T': mult = 1024.0 * 1024 * 1024 * 1024; break;
	default:
		snprintf(err, errlen, "unknown unit '%s' in size '%s' (use K, M, G or T)", u, s);
		return -1;
	}
	if (*u && toupper((unsigned char)*u) != 'B') {
		u++;
		if (!strcasecmp(u, "iB") || !strcasecmp(u, "B"))
			u += strlen(u);
	} else if (*u) {
		u++;
	}
	if (*u) {
		snprintf(err, errlen, "trailing '%s' in size '%s'", u, s);
		return -1;
	}
	double b = v * mult;
	if (b >= 18446744073709551615.0) {
		snprintf(err, errlen, "size '%s' is too large", s);
		return -1;
	}
	if (b < 1) {
		snprintf(err, errlen, "size '%s' is zero", s);
		return -1;
	}
	*bytes = (uint64_t)b;
	return 0;
}

void rgpu_format_size(uint64_t bytes, char *buf, size_t len)
{
	static const char *units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)bytes;
	int i = 0;
	while (v >= 1024 && i < 4) {
		v /= 1024;
		i++;
	}
	if (i == 0)
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
	else
		snprintf(buf, len, "%.1f %s", v, units[i]);
}
