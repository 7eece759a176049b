#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

static const char *log_ident = "rgpu";
static int log_lvl = RGPU_LOG_WARN;
static int log_syslog;

void rgpu_log_open(const char *ident, int level, int use_syslog)
{
	log_ident = ident;
	log_lvl = level;
	log_syslog = use_syslog;
	if (use_syslog)
		openlog(ident, LOG_PID, LOG_DAEMON);
}

void rgpu_log_set_level(int level) { log_lvl = level; }
int rgpu_log_level(void) { return log_lvl; }

int rgpu_log_parse_level(const char *s)
{
	static const struct { const char *name; int lvl; } names[] = {
		{ "error", RGPU_LOG_ERR }, { "warn", RGPU_LOG_WARN },
		{ "info", RGPU_LOG_INFO }, { "debug", RGPU_LOG_DEBUG },
	};
	if (!s || !*s)
		return -1;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(s, names[i].name))
			return names[i].lvl;
	char *end;
	long v = strtol(s, &end, 10);
	return (*end || v < 0 || v > 7) ? -1 : (int)v;
}

void rgpu_log(int level, const char *fmt, ...)
{
	if (level > log_lvl)
		return;
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (log_syslog) {
		syslog(level, "%s", msg);
		return;
	}
	static const char *tags[8] = { "emerg", "alert", "crit", "error",
				       "warning", "notice", "info", "debug" };
	/* One write per line so lines of concurrent threads do not mix. */
	char line[1200];
	int n = snprintf(line, sizeof(line), "%s[%d]: %s: %s\n", log_ident,
			 (int)getpid(), tags[level & 7], msg);
	if (n > 0) {
		if ((size_t)n > sizeof(line))
			n = sizeof(line);
		ssize_t w = write(STDERR_FILENO, line, (size_t)n);
		(void)w;
	}
}
