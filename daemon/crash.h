/* A crashing session worker logs where it crashed (crash.c). */
#ifndef RGPUD_CRASH_H
#define RGPUD_CRASH_H

/* Installs the report for this process; name: the session, for the log. */
void crash_report_install(const char *name);

#endif
