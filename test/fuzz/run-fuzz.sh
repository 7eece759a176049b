#!/bin/bash
# Runs libFuzzer harnesses and records what they did (docs/fuzzing.md).
# Called by `make fuzz`; also runnable by hand from the build tree.
#
#   FUZZ_TARGETS  harnesses to run (default: all built, FUZZ_ALL)
#   FUZZ_SECONDS  seconds per worker per harness (default 60)
#   FUZZ_JOBS     parallel workers per harness (default 1)
#   FUZZ_CPU_SECONDS  if set, run each harness until its workers have used
#                 this much CPU time (measured, so a loaded machine still
#                 gets the full budget): rounds of FUZZ_SECONDS wall time
#                 each (default 600) on the same corpus; a run into the
#                 same FUZZ_RESULTS carries on where an earlier one stopped
#                 (FUZZ_RESULTS/<harness>/progress)
#   FUZZ_RESULTS  results directory (default ./fuzz-results/DATE-HOST)
#   FUZZ_NICE     nice level of the fuzzers (default 10)
#   FUZZ_BIN, FUZZ_SRC  where the harnesses and test/fuzz sources are
#
# Per harness, in FUZZ_RESULTS/<harness>/: corpus/ (the seed corpus, then
# what the run added), artifacts/ (crash-*, leak-*, timeout-*, oom-*),
# fuzz-N.log (libFuzzer's output per worker; with FUZZ_CPU_SECONDS,
# round-R/fuzz-N.log) and stats.txt.  summary.tsv has one line per
# harness: date, machine, harness, wall seconds, jobs, CPU seconds (user +
# system of the workers, measured), execs, coverage (edges), corpus size,
# artifacts.
# Exit 1 if any harness left a crash, leak or oom artifact, else 0
# (timeouts and slow units are reported, not failed).
set -u
: "${FUZZ_BIN:=$PWD}"
: "${FUZZ_SRC:=$(cd "$(dirname "$0")" && pwd)}"
: "${FUZZ_ALL:=fuzz_frame fuzz_wire fuzz_servers fuzz_size fuzz_lease fuzz_dispatch fuzz_dispatch_lease fuzz_spank_options}"
FUZZ_TARGETS=${FUZZ_TARGETS:-$FUZZ_ALL}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
FUZZ_JOBS=${FUZZ_JOBS:-1}
FUZZ_NICE=${FUZZ_NICE:-10}
host=$(hostname -s 2>/dev/null || hostname)
stamp=$(date -u +%Y-%m-%dT%H%MZ)
FUZZ_RESULTS=${FUZZ_RESULTS:-$PWD/fuzz-results/$stamp-$host}
mkdir -p "$FUZZ_RESULTS"
FUZZ_RESULTS=$(cd "$FUZZ_RESULTS" && pwd)
machine="$host ($(nproc) cores, $(uname -m))"
summary=$FUZZ_RESULTS/summary.tsv
[ -s "$summary" ] || printf 'date\tmachine\tharness\tseconds\tjobs\tcpu_seconds\texecs\tedges\tcorpus\tartifacts\n' > "$summary"

# Per-harness libFuzzer flags: the dispatcher's inputs hold recorded
# sessions (module images, bulk copies), the parsers' inputs are short.
flags_for() {
	case $1 in
	fuzz_dispatch*) echo "-max_len=262144 -timeout=20 -rss_limit_mb=4096" ;;
	fuzz_lease) echo "-max_len=16384 -timeout=10" ;;
	fuzz_frame|fuzz_wire) echo "-max_len=65536 -timeout=10" ;;
	*) echo "-max_len=4096 -timeout=10" ;;
	esac
}

# the two dispatcher harnesses share the recorded sessions
# CPU seconds (user + system) of this shell's finished children and their
# waited-for descendants: the fuzz workers' real CPU time on a busy machine
# (`times` must run in this shell, not in a $(...) subshell of its own)
cpu_file=$(mktemp)
trap 'rm -f "$cpu_file"' EXIT
children_cpu_now() {
	times >"$cpu_file"
}
children_cpu() {
	local t
	t=$(tail -1 "$cpu_file")
	awk -v t="$t" 'BEGIN { n = split(t, a, " "); s = 0
		for (i = 1; i <= n; i++) { split(a[i], b, "m"); sub("s", "", b[2]); s += b[1] * 60 + b[2] }
		printf "%d\n", s }'
}

corpus_of() { [ "$1" = fuzz_dispatch_lease ] && echo fuzz_dispatch || echo "$1"; }

status=0
for t in $FUZZ_TARGETS; do
	bin=$FUZZ_BIN/$t
	if [ ! -x "$bin" ]; then
		echo "FAIL: $t: $bin not built"
		status=1
		continue
	fi
	out=$FUZZ_RESULTS/$t
	mkdir -p "$out/corpus" "$out/artifacts"
	# the repository's seeds are copied, never written to
	for d in "$FUZZ_SRC/corpus/$(corpus_of "$t")" "$FUZZ_SRC/regressions/$t"; do
		[ -d "$d" ] && cp -n "$d"/* "$out/corpus/" 2>/dev/null
	done
	dict=""
	[ -f "$FUZZ_SRC/$t.dict" ] && dict="-dict=$FUZZ_SRC/$t.dict"
	if [ -n "${FUZZ_CPU_SECONDS:-}" ]; then
		echo "== $t: $FUZZ_JOBS worker(s) until ${FUZZ_CPU_SECONDS} CPU seconds"
	else
		echo "== $t: $FUZZ_JOBS worker(s) x ${FUZZ_SECONDS}s"
	fi
	start=$(date +%s)
	children_cpu_now
	cpu0=$(children_cpu)
	cpu=0 round=0 execs=0 edges=0 base_cpu=0 base_wall=0
	# a CPU budget carries on where an earlier run into the same results
	# directory stopped (the machine went away, the session ended)
	if [ -n "${FUZZ_CPU_SECONDS:-}" ] && [ -s "$out/progress" ]; then
		read -r base_cpu round execs edges base_wall < "$out/progress"
		cpu=$base_cpu
		echo "   resuming after round $round: $base_cpu CPU seconds, $execs runs so far"
	fi
	while [ -z "${FUZZ_CPU_SECONDS:-}" ] || [ "$cpu" -lt "$FUZZ_CPU_SECONDS" ]; do
		round=$((round + 1))
		secs=$FUZZ_SECONDS
		dir=$out
		if [ -n "${FUZZ_CPU_SECONDS:-}" ]; then
			left=$((FUZZ_CPU_SECONDS - cpu))
			secs=$(( (left + FUZZ_JOBS - 1) / FUZZ_JOBS ))
			[ "$secs" -gt "${FUZZ_SECONDS_ROUND:-600}" ] && secs=${FUZZ_SECONDS_ROUND:-600}
			[ "$secs" -lt 10 ] && secs=10
			dir=$out/round-$round
			mkdir -p "$dir"
		fi
		( cd "$dir" && nice -n "$FUZZ_NICE" "$bin" $(flags_for "$t") $dict \
			-max_total_time="$secs" -jobs="$FUZZ_JOBS" -workers="$FUZZ_JOBS" \
			-print_final_stats=1 -artifact_prefix="$out/artifacts/" \
			"$out/corpus" > run.log 2>&1 )
		children_cpu_now
		cpu=$(( base_cpu + $(children_cpu) - cpu0 ))
		for log in "$dir"/fuzz-*.log; do
			[ -f "$log" ] || continue
			e=$(grep -a 'stat::number_of_executed_units' "$log" | tail -1 | awk '{print $2}')
			execs=$((execs + ${e:-0}))
			c=$(grep -a -o 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2}')
			[ "${c:-0}" -gt "$edges" ] && edges=$c
		done
		[ -z "${FUZZ_CPU_SECONDS:-}" ] && break
		echo "$cpu $round $execs $edges $((base_wall + $(date +%s) - start))" > "$out/progress"
		# a crash ends a round early: stop rather than fuzz on past it
		ls "$out/artifacts" | grep -q -E '^(crash|leak|oom)-' && break
	done
	wall=$(( base_wall + $(date +%s) - start ))
	ncorpus=$(ls "$out/corpus" | wc -l)
	nart=$(ls "$out/artifacts" | wc -l)
	{
		echo "harness: $t"
		echo "date: $stamp"
		echo "machine: $machine"
		echo "workers: $FUZZ_JOBS"
		echo "rounds: $round"
		echo "cpu_seconds: $cpu (measured: user + system of the workers)"
		echo "wall_seconds: $wall"
		echo "execs: $execs"
		echo "edges: $edges"
		echo "corpus: $ncorpus"
		echo "artifacts: $nart"
		ls "$out/artifacts" | sed 's/^/  /'
	} > "$out/stats.txt"
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$stamp" "$machine" "$t" "$wall" \
		"$FUZZ_JOBS" "$cpu" "$execs" "$edges" "$ncorpus" "$nart" >> "$summary"
	# crashes, leaks and out-of-memory fail the run; a timeout or a slow
	# unit is reported (the emulated device runs queued kernels out at
	# context teardown: docs/fuzzing.md) without failing it
	nbad=$(ls "$out/artifacts" | grep -c -E '^(crash|leak|oom)-' || true)
	if [ "$nbad" -gt 0 ]; then
		echo "FAIL: $t: $nbad crash/leak/oom artifact(s) in $out/artifacts (see fuzz-*.log there)"
		status=1
	elif [ "$nart" -gt 0 ]; then
		echo "PASS: $t: $execs runs, $edges edges, no crash; $nart timeout/slow artifact(s) in $out/artifacts"
	else
		echo "PASS: $t: $execs runs, $edges edges, no crash"
	fi
done
echo "results: $FUZZ_RESULTS (summary.tsv)"
exit $status
