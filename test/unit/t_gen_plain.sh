#!/bin/bash
# The driver-API table generator (client/gen-driver-api.py --plain): a plain
# call gets its argument kinds from cuda.h (value, stream handle, struct
# out); an annotation overrides a void pointer; a call that is not plain
# stops the generator with a message naming the call and the argument.
set -u
: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir/_build}"
GEN=$top_srcdir/client/gen-driver-api.py
I=$top_builddir/client/cuda.i
[ -f "$I" ] || { echo "1..0 # SKIP $I not built"; exit 0; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
echo "1..4"
printf 'cuStreamGetAttribute\ncuDeviceGetGraphMemAttribute value=out:8\n' >"$T/ok.calls"
if python3 "$GEN" --plain client "$I" "$T/ok.calls" "$T/c.c" &&
   python3 "$GEN" --plain server "$I" "$T/ok.calls" "$T/s.c"; then
	echo "ok 1 - plain calls generate"
else
	fail=1; echo "not ok 1 - plain calls generate"
fi
if grep -q '{ "cuStreamGetAttribute", 3, { RGPU_ARG_STREAM, RGPU_ARG_VAL, RGPU_ARG_OUT }' "$T/s.c"; then
	echo "ok 2 - kinds from the prototype: stream, value, struct out"
else
	fail=1; echo "not ok 2 - kinds from the prototype"; grep cuStreamGetAttribute "$T/s.c" | sed 's/^/# /'
fi
if grep -q '{ RGPU_ARG_DEVICE, RGPU_ARG_VAL, RGPU_ARG_OUT }, { 0, 0, 8 }' "$T/s.c"; then
	echo "ok 3 - an annotation sizes a void pointer"
else
	fail=1; echo "not ok 3 - an annotation sizes a void pointer"
fi
printf 'cuMemcpyHtoD_v2\n' >"$T/bad.calls"
msg=$(python3 "$GEN" --plain client "$I" "$T/bad.calls" "$T/x.c" 2>&1)
if [ $? -ne 0 ] && [[ $msg == *"cuMemcpyHtoD_v2: argument 'const void * srcHost' is not plain"* ]]; then
	echo "ok 4 - a call that is not plain is refused by name"
else
	fail=1; echo "not ok 4 - a call that is not plain is refused by name ($msg)"
fi
exit $fail
