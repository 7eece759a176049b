/* The kernel driver version from /proc/driver/nvidia/version's text
 * (lib/nvrm.c), for the proprietary and the open kernel modules, x86_64
 * and aarch64, and text that holds none. */
#include "tap.h"
#include "nvrm.h"

static void check(const char *text, const char *want, const char *what)
{
	char out[64];
	int rc = rgpu_nvrm_parse(text, out, sizeof(out));
	if (want)
		ok(rc == 0 && !strcmp(out, want), "%s: '%s'", what, out);
	else
		ok(rc < 0 && out[0] == '\0', "%s: none ('%s')", what, out);
}

int main(void)
{
	check("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Release Build  "
	      "(dvs-builder@U16-I3-B08-5-1)  Mon Sep  1 18:31:12 UTC 2025\n"
	      "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n",
	      "580.159.04", "the proprietary module");
	check("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  "
	      "(dvs-builder@U16-T02-35-3)  Tue Jan 28 21:05:33 UTC 2025\n",
	      "570.86.15", "the open module");
	check("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  560.35.03  Release Build\n",
	      "560.35.03", "aarch64");
	check("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54\n", "550.54", "two parts, at the end");
	check("NVRM version: unknown\nGCC version:  gcc version 12.2.0\n", NULL,
	      "a version on another line is not taken");
	check("", NULL, "empty text");
	check(NULL, NULL, "no text");
	char small[4];
	ok(rgpu_nvrm_parse("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Release\n",
			   small, sizeof(small)) < 0 && small[0] == '\0',
	   "a buffer too small for it gets nothing");
	return tap_done();
}
