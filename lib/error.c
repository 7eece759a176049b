#include "error.h"

#include <stdarg.h>
#include <stdio.h>

void rgpu_error_set(struct rgpu_error *e, enum rgpu_errcode code, const char *fmt, ...)
{
	va_list ap;
	e->code = code;
	va_start(ap, fmt);
	vsnprintf(e->text, sizeof(e->text), fmt, ap);
	va_end(ap);
}
