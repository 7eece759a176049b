#include "servers.h"
#include "proto.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_uint(const char *s, size_t n, unsigned max, unsigned *out)
{
	if (n == 0 || n > 10)
		return -1;
	char buf[16];
	memcpy(buf, s, n);
	buf[n] = '\0';
	char *end;
	errno = 0;
	unsigned long v = strtoul(buf, &end, 10);
	if (*end || errno || v > max || buf[0] == '-' || buf[0] == '+')
		return -1;
	*out = (unsigned)v;
	return 0;
}

static int parse_one(const char *s, size_t n, struct rgpu_server_ent *e, char *err, size_t errlen)
{
	const char *end = s + n;
	const char *hs = s, *he;
	e->port = RGPU_DEFAULT_PORT;
	e->gpu = 0;
	if (n && *s == '[') {
		he = memchr(s, ']', n);
		if (!he) {
			snprintf(err, errlen, "unclosed '[' in '%.*s'", (int)n, s);
			return -1;
		}
		hs = s + 1;
		s = he + 1;
	} else {
		he = s;
		while (he < end && *he != ':' && *he != '/')
			he++;
		s = he;
	}
	size_t hl = (size_t)(he - hs);
	if (hl == 0 || hl >= sizeof(e->host)) {
		snprintf(err, errlen, "missing or too long host name in '%.*s'", (int)n, hs);
		return -1;
	}
	memcpy(e->host, hs, hl);
	e->host[hl] = '\0';
	if (s < end && *s == ':') {
		const char *ps = ++s;
		while (s < end && *s != '/')
			s++;
		if (parse_uint(ps, (size_t)(s - ps), 65535, &e->port) < 0 || e->port == 0) {
			snprintf(err, errlen, "bad port '%.*s' for host %s", (int)(s - ps), ps, e->host);
			return -1;
		}
	}
	if (s < end && *s == '/') {
		const char *gs = ++s;
		if (parse_uint(gs, (size_t)(end - gs), 1023, &e->gpu) < 0) {
			snprintf(err, errlen, "bad GPU index '%.*s' for host %s", (int)(end - gs), gs, e->host);
			return -1;
		}
		s = end;
	}
	if (s != end) {
		snprintf(err, errlen, "unexpected '%.*s' after host %s", (int)(end - s), s, e->host);
		return -1;
	}
	return 0;
}

int rgpu_servers_parse(const char *spec, struct rgpu_server_ent *out, int max,
		       char *err, size_t errlen)
{
	if (!spec || !*spec) {
		snprintf(err, errlen, "RGPU_SERVERS is empty");
		return -1;
	}
	int n = 0;
	const char *p = spec;
	for (;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		while (len && (*p == ' ' || *p == '\t')) {
			p++;
			len--;
		}
		while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		if (len == 0) {
			snprintf(err, errlen, "empty entry %d in RGPU_SERVERS", n + 1);
			return -1;
		}
		if (n >= max) {
			snprintf(err, errlen, "more than %d GPUs in RGPU_SERVERS", max);
			return -1;
		}
		char e2[200];
		if (parse_one(p, len, &out[n], e2, sizeof(e2)) < 0) {
			snprintf(err, errlen, "RGPU_SERVERS entry %d: %s", n + 1, e2);
			return -1;
		}
		n++;
		if (!comma)
			break;
		p = comma + 1;
	}
	return n;
}
