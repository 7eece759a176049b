#!/bin/bash
# The driver-API table generator (client/gen-driver-api.py --plain): a plain
# call gets its argument kinds from cuda.h (value, stream handle, struct
# out); an annotation overrides a void pointer (a size, a value, an array
# whose length another argument gives, checked before it is read); a call
# that is not plain stops the generator with a message naming the call and
# the argument.
set -u
: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir/_build}"
GEN=$top_srcdir/client/gen-driver-api.py
I=$top_builddir/client/cuda.i
[ -f "$I" ] || { echo "1..0 # SKIP $I not built"; exit 0; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
echo "1..6"
printf 'cuStreamGetAttribute\ncuDeviceGetGraphMemAttribute value=out:8\n' >"$T/ok.calls"
printf 'cuTensorMapReplaceAddress tensorMap=inout globalAddress=val\n' >>"$T/ok.calls"
printf 'cuTensorMapEncodeTiled globalAddress=val globalDim=in:8*(uint64_t)tensorRank:40 globalStrides=in:8*((uint64_t)tensorRank-1):32 boxDim=in:4*(uint64_t)tensorRank:20 elementStrides=in:4*(uint64_t)tensorRank:20\n' >>"$T/ok.calls"
if python3 "$GEN" --plain client "$I" "$T/ok.calls" "$T/c.c" &&
   python3 "$GEN" --plain server "$I" "$T/ok.calls" "$T/s.c"; then
	echo "ok 1 - plain calls generate"
else
	fail=1; echo "not ok 1 - plain calls generate"
fi
if grep -q '.name = "cuStreamGetAttribute", .nargs = 3, .kind = { RGPU_ARG_STREAM, RGPU_ARG_VAL, RGPU_ARG_OUT }' "$T/s.c"; then
	echo "ok 2 - kinds from the prototype: stream, value, struct out"
else
	fail=1; echo "not ok 2 - kinds from the prototype"; grep cuStreamGetAttribute "$T/s.c" | sed 's/^/# /'
fi
if grep -q '.kind = { RGPU_ARG_DEVICE, RGPU_ARG_VAL, RGPU_ARG_OUT }, .size = { 0, 0, 8 }, .upto = 0x0' "$T/s.c"; then
	echo "ok 3 - an annotation sizes a void pointer"
else
	fail=1; echo "not ok 3 - an annotation sizes a void pointer"
fi
# a pointer passed as a value both ways; an array sized by the rank, at
# most 5 elements (bits 4-7: the four arrays), refused before it is read
if grep -q '{ RGPU_ARG_VAL, NULL, (uint64_t)(uintptr_t)globalAddress, 0 }' "$T/c.c" &&
   grep -q '(void \*)(uintptr_t)\*(const uint64_t \*)a\[1\]' "$T/s.c"; then
	echo "ok 5 - val: a pointer that is a value"
else
	fail=1; echo "not ok 5 - val: a pointer that is a value"
fi
if grep -q 'if ((uint64_t)(8\*(uint64_t)tensorRank) > 40)' "$T/c.c" &&
   grep -q '.size = { sizeof(CUtensorMap), 0, 0, 0, 40, 32, 20, 20, 0, 0, 0, 0 }, .upto = 0xf0' "$T/s.c"; then
	echo "ok 6 - in:EXPR:MAX: checked on the client, at most MAX on the server"
else
	fail=1; echo "not ok 6 - in:EXPR:MAX"; grep -n "tensorRank) >\|cuTensorMapEncodeTiled\"" "$T/c.c" "$T/s.c" | sed 's/^/# /'
fi
printf 'cuMemcpyHtoD_v2\n' >"$T/bad.calls"
msg=$(python3 "$GEN" --plain client "$I" "$T/bad.calls" "$T/x.c" 2>&1)
if [ $? -ne 0 ] && [[ $msg == *"cuMemcpyHtoD_v2: argument 'const void * srcHost' is not plain"* ]]; then
	echo "ok 4 - a call that is not plain is refused by name"
else
	fail=1; echo "not ok 4 - a call that is not plain is refused by name ($msg)"
fi
exit $fail
