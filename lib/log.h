/* Logging for every component: stderr by default, syslog for daemons. */
#ifndef RGPU_LOG_H
#define RGPU_LOG_H

enum { RGPU_LOG_ERR = 3, RGPU_LOG_WARN = 4, RGPU_LOG_INFO = 6, RGPU_LOG_DEBUG = 7 };

/* ident prefixes each line; level is the most verbose level printed. */
void rgpu_log_open(const char *ident, int level, int use_syslog);
void rgpu_log_set_level(int level);
int rgpu_log_level(void);
/* Parses "error", "warn", "info", "debug" or a number; -1 if invalid. */
int rgpu_log_parse_level(const char *s);
void rgpu_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_err(...) rgpu_log(RGPU_LOG_ERR, __VA_ARGS__)
#define log_warn(...) rgpu_log(RGPU_LOG_WARN, __VA_ARGS__)
#define log_info(...) rgpu_log(RGPU_LOG_INFO, __VA_ARGS__)
#define log_debug(...) \
	do { if (rgpu_log_level() >= RGPU_LOG_DEBUG) rgpu_log(RGPU_LOG_DEBUG, __VA_ARGS__); } while (0)

#endif
