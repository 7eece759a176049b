/* Tables generated from cuda.h (see gen-driver-api.py). */
#ifndef RGPU_PROCADDR_H
#define RGPU_PROCADDR_H

struct rc_sym {
	const char *name;
	void *fn;
};
extern const struct rc_sym rc_syms[];
extern const int rc_nsyms;

struct rc_err {
	int code;
	const char *name;
	const char *text;
};
extern const struct rc_err rc_errs[];
extern const int rc_nerrs;

#endif
