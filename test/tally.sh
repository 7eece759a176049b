# Counting test results for test/run-all.sh (sourced; bash).  A skip is
# never a pass; an expected failure (automake XFAIL, TAP "# TODO") counts as
# passed and is reported as such.  test/t_tally.sh checks these.

# tap_counts FILE -> "pass fail skip xfail" from TAP lines ("ok N - ...",
# "not ok N - ...", "# SKIP", "# TODO", "1..0 # SKIP", "Bail out!")
tap_counts() {
	awk '/^ok [0-9]/ { if ($0 ~ /# *[Ss][Kk][Ii][Pp]/) s++; else p++ }
	     /^not ok [0-9]/ { if ($0 ~ /# *TODO/) { p++; x++ } else f++ }
	     /^1\.\.0 *# *SKIP/ { s++ }
	     /^Bail out!/ { f++ }
	     END { printf "%d %d %d %d\n", p, f, s, x }' "$1"
}

# trs_counts FILE... -> "pass fail skip xfail" from automake's .trs files
trs_counts() {
	[ $# -gt 0 ] || { echo "0 0 0 0"; return; }
	cat "$@" | awk '/^:test-result: (PASS|XFAIL)$/ { p++ } /^:test-result: XFAIL$/ { x++ }
			 /^:test-result: (FAIL|XPASS|ERROR)$/ { f++ } /^:test-result: SKIP$/ { s++ }
			 END { printf "%d %d %d %d\n", p, f, s, x }'
}

# slurm_counts FILE -> "pass fail skip" from test/slurm/run.sh's closing
# list ("PASS  name", "FAIL  name: why", "SKIP  name: why" after "----")
slurm_counts() {
	sed -n '/^----$/,$p' "$1" |
		awk '/^PASS  / { p++ } /^FAIL  / { f++ } /^SKIP  / { s++ }
		     END { printf "%d %d %d\n", p, f, s }'
}

# summary LABEL PASS FAIL SKIP [XFAIL]: adds a labelled line to $SUMMARY and
# the counts to PASS, FAIL, SKIP
PASS=0 FAIL=0 SKIP=0 SUMMARY=""
summary() {
	local x=""
	[ "${5:-0}" -gt 0 ] && x=" (of which $5 expected failures)"
	SUMMARY="$SUMMARY$1: $2 passed$x, $3 failed, $4 skipped
"
	PASS=$((PASS + $2)); FAIL=$((FAIL + $3)); SKIP=$((SKIP + $4))
}

# the closing line CI reads
final_line() {
	echo "$PASS passed, $FAIL failed, $SKIP skipped"
}
