#!/bin/bash
# `make check` with --enable-fuzz: every harness runs once over its seed
# corpus and every reproducer in regressions/<harness>/ (each a crash the
# fuzzers found and that was fixed).  No fuzzing: a few seconds.
set -u
: "${FUZZ_BIN:=$PWD}"
: "${FUZZ_SRC:=$(cd "$(dirname "$0")" && pwd)}"
: "${FUZZ_ALL:=fuzz_frame fuzz_wire fuzz_servers fuzz_size fuzz_lease fuzz_dispatch fuzz_dispatch_lease fuzz_spank_options}"
# the two dispatcher harnesses share the recorded sessions
corpus_of() { [ "$1" = fuzz_dispatch_lease ] && echo fuzz_dispatch || echo "$1"; }

status=0
for t in $FUZZ_ALL; do
	dirs=""
	for d in "$FUZZ_SRC/corpus/$(corpus_of "$t")" "$FUZZ_SRC/regressions/$t"; do
		[ -d "$d" ] && [ -n "$(ls "$d")" ] && dirs="$dirs $d"
	done
	if [ -z "$dirs" ]; then
		echo "FAIL: $t: no seed corpus"
		status=1
		continue
	fi
	if "$FUZZ_BIN/$t" -runs=0 -timeout=60 -rss_limit_mb=4096 $dirs > "replay-$t.log" 2>&1; then
		echo "PASS: $t replays its corpus and regressions"
	else
		echo "FAIL: $t on its corpus or regressions:"
		tail -40 "replay-$t.log"
		status=1
	fi
done
exit $status
