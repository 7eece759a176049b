/* A session worker that crashes says where: the signal, the faulting
 * address and a backtrace go to the log (rgpud's stderr) before the worker
 * dies of the signal as it would have (the parent then frees the session's
 * GPU memory and logs the death).  Offsets in the backtrace resolve with
 * addr2line -e rgpud.  Not under a sanitizer, which reports crashes itself. */
#include "crash.h"

#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CRASH_SANITIZED 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CRASH_SANITIZED 1
#endif
#endif

#ifndef CRASH_SANITIZED
static char who[160];

static void on_crash(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	char line[320];
	/* (snprintf of integers and strings does not allocate in glibc) */
	int n = snprintf(line, sizeof(line), "%s: worker crashed: signal %d (%s) at address %p; backtrace:\n",
			 who, sig, sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGFPE ? "SIGFPE"
				   : sig == SIGILL ? "SIGILL" : "SIGABRT",
			 si ? si->si_addr : NULL);
	if (n > 0)
		(void)!write(STDERR_FILENO, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
	void *frames[48];
	int k = backtrace(frames, 48);
	backtrace_symbols_fd(frames, k, STDERR_FILENO);
	signal(sig, SIG_DFL);
	raise(sig);
}
#endif

void crash_report_install(const char *name)
{
#ifndef CRASH_SANITIZED
	snprintf(who, sizeof(who), "rgpud[%d]: %s", (int)getpid(), name);
	/* the first backtrace loads libgcc: not in a signal handler */
	void *f[2];
	(void)backtrace(f, 2);
	static char altstack[64 * 1024]; /* a stack overflow still reports */
	stack_t ss = { .ss_sp = altstack, .ss_size = sizeof(altstack) };
	(void)sigaltstack(&ss, NULL);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_crash;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
	sigemptyset(&sa.sa_mask);
	static const int sigs[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT };
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		(void)sigaction(sigs[i], &sa, NULL);
#else
	(void)name;
#endif
}
