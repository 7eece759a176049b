#!/bin/bash
# test/tally.sh, which test/run-all.sh's summary counts with: each TAP
# check counts once, a skip is a skip (never a pass), an expected failure
# is a pass shown as such, a bail-out and an automake ERROR are failures,
# and the closing line is "N passed, N failed, N skipped".
set -u
. "${top_srcdir:-$(dirname "$0")/..}/test/tally.sh"
T=$(mktemp -d "${TMPDIR:-/tmp}/t_tally.XXXXXX")
trap 'rm -rf "$T"' EXIT
n=0 bad=0
check() { # name got want
	n=$((n + 1))
	if [ "$2" = "$3" ]; then echo "ok $n - $1"
	else echo "not ok $n - $1: got '$2', want '$3'"; bad=1; fi
}

cat >"$T/e2e.tap" <<'X'
# rgpud --emulated on 127.0.0.1:1 and 127.0.0.1:2
ok 1 - t_device  0.02s
ok 2 - t_graph # SKIP t_graph: SKIP: no CUDA graphs on this device
not ok 3 - t_fault  0.10s (exit 1)
#    | ok 9 - not a result: a quoted log line
not ok 4 - t_runtime # TODO exit 1, tolerated
ok 5 - t_vecadd  0.01s
1..5
X
check "TAP: pass, fail, skip, xfail" "$(tap_counts "$T/e2e.tap")" "3 1 1 1"
printf '1..0 # SKIP not built: rgpud\n' >"$T/skipall.tap"
check "TAP: a whole-suite skip is one skip" "$(tap_counts "$T/skipall.tap")" "0 0 1 0"
printf 'ok 1 - a\nBail out! cannot start rgpud\n' >"$T/bail.tap"
check "TAP: a bail-out is a failure" "$(tap_counts "$T/bail.tap")" "1 1 0 0"

printf ':test-result: PASS\n:test-result: SKIP\n:test-result: SKIP\n' >"$T/a.trs"
printf ':test-result: XFAIL\n:test-result: FAIL\n:test-result: ERROR\n:test-result: XPASS\n' >"$T/b.trs"
check ".trs: skips apart, XFAIL a pass, ERROR and XPASS failures" \
	"$(trs_counts "$T/a.trs" "$T/b.trs")" "2 3 2 1"
check ".trs: none" "$(trs_counts)" "0 0 0 0"

cat >"$T/slurm.log" <<'X'
PASS  bad_options_refused
FAIL  no_lease_refused: a job without a lease got a GPU
SKIP  two_gpus: no rgpud
----
PASS  bad_options_refused
FAIL  no_lease_refused: a job without a lease got a GPU
SKIP  two_gpus: no rgpud
1 passed, 2 failed
X
check "Slurm: each result once, the skip a skip" "$(slurm_counts "$T/slurm.log")" "1 1 1"

summary "make check" 3 1 1 1
summary "Slurm" 1 1 1
check "labelled lines" "$SUMMARY" "make check: 3 passed (of which 1 expected failures), 1 failed, 1 skipped
Slurm: 1 passed, 1 failed, 1 skipped
"
check "closing line" "$(final_line)" "4 passed, 2 failed, 2 skipped"
echo "1..$n"
exit $bad
