#!/bin/bash
# Compatibility corpus (test/compat/README.md): CUDA runtime programs (static
# and shared cudart), cuBLAS/cuFFT/cuRAND/cuSPARSE programs and PyTorch, each
# run three ways on a GPU machine:
#   direct  the real driver (RGPU_REAL_DRIVER_DIR first on LD_LIBRARY_PATH)
#   tcp     the rgpu client -> rgpud on 127.0.0.1 over TCP (RGPU_TRANSPORT=tcp)
#   local   the rgpu client -> the same rgpud, same-host path (Unix socket +
#           shared memory; RGPU_TRANSPORT unset = auto)
# The "RESULT" lines of each rgpu run are compared with the direct run's.
# Then item 4's benchmarks (cuBLAS SGEMM loop, PyTorch training step) direct
# vs through rgpud.  Writes $OUT_DIR/compat-results.md, compat-logs.tar.gz.
#
# Usage: run-compat.sh [--bin DIR] [--out DIR] [--only REGEX] [--no-torch]
#                      [--no-bench] [--selftest]
#   --bin DIR    prebuilt programs (test/compat/build.sh DIR); default
#                $top_srcdir/.devcarry/compat if present, else built into
#                $OUT_DIR/build
#   --out DIR    results ($OUT_DIR; default $OUT, else test/compat/results)
#   --only RE    run only programs whose name matches RE (e.g. 'vecadd|cufft')
#   --selftest   only check that the comparison detects a changed digest
#   --no-trace   do not rerun failing programs direct under tools/tracer
# Failing programs are rerun against the real driver under the tracer
# ($COMPAT_TRACER, default $top_srcdir/.devcarry/tracer, built with
# `make -C tools/tracer O=...`): logs/trace/ID.log lists every driver call
# and export-table entry they use, so the calls rgpu lacks can be listed
# beyond the first failure.  A PyTorch failure through rgpu (tcp) is
# diagnosed by rerunning with the crashing stage skipped (COMPAT_TORCH_SKIP),
# python -X faulthandler, RGPU_LOG_LEVEL=debug, and a gdb backtrace if gdb
# is installed.
# Environment: top_builddir (default $top_srcdir/_build), RGPU_REAL_DRIVER_DIR
#   (/usr/local/nvidia/lib64), CUDA_HOME (/usr/local/cuda), PYTHON (python3),
#   COMPAT_TIMEOUT (60 s per program), COMPAT_TORCH_TIMEOUT (120 s),
#   COMPAT_DEADLINE (seconds for the whole run; later programs are skipped),
#   COMPAT_FLIP (a program name: its tcp digests are altered once, to show
#   the comparison fails; reported as row "flip-check").
# Exit: 0 the run completed (verdicts in the report), 1 error, 77 no GPU.
set -u
here=$(cd "$(dirname "$0")" && pwd)
: "${top_srcdir:=$(cd "$here/../.." && pwd)}"
: "${top_builddir:=$top_srcdir/_build}"
: "${PYTHON:=python3}"
: "${CUDA_HOME:=/usr/local/cuda}"
: "${COMPAT_TIMEOUT:=60}"
: "${COMPAT_TORCH_TIMEOUT:=120}"
: "${COMPAT_DEADLINE:=0}"
: "${COMPAT_FLIP:=}"
REAL=${RGPU_REAL_DRIVER_DIR:-/usr/local/nvidia/lib64}
RGPUD=$top_builddir/daemon/rgpud
CLIENTDIR=$top_builddir/client/.libs
OUT_DIR=${OUT:-$here/results}
BIN=""
ONLY=""
TORCH=1
BENCH=1
SELFTEST=0
TRACE=1
TRACER=${COMPAT_TRACER:-$top_srcdir/.devcarry/tracer}
while [ $# -gt 0 ]; do
	case $1 in
	--bin) BIN=$2; shift ;;
	--out) OUT_DIR=$2; shift ;;
	--only) ONLY=$2; shift ;;
	--no-torch) TORCH=0 ;;
	--no-bench) BENCH=0 ;;
	--selftest) SELFTEST=1 ;;
	--no-trace) TRACE=0 ;;
	*) echo "run-compat.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
T_START=$(date +%s)

# ---------------------------------------------------------------- compare
# digests FILE: the sorted RESULT lines
digests() { grep -a '^RESULT ' "$1" 2>/dev/null | sort; }
# compare A_OUT B_OUT: prints "same" or "differ: <first difference>"
compare() {
	local a b
	a=$(digests "$1")
	b=$(digests "$2")
	if [ -n "$a" ] && [ "$a" = "$b" ]; then
		echo same
	else
		echo "differ: $(diff <(echo "$a") <(echo "$b") | grep -a '^[<>]' | head -2 | tr '\n' ' ' | cut -c1-160)"
	fi
}

if [ $SELFTEST = 1 ]; then
	t=$(mktemp -d)
	printf 'RESULT x fnv=0011\nRESULT y 5\nINFO z\n' >"$t/a"
	printf 'RESULT y 5\nINFO other\nRESULT x fnv=0011\n' >"$t/b"
	printf 'RESULT x fnv=0012\nRESULT y 5\n' >"$t/c"
	printf 'RESULT y 5\n' >"$t/d"
	r1=$(compare "$t/a" "$t/b") r2=$(compare "$t/a" "$t/c") r3=$(compare "$t/a" "$t/d") r4=$(compare "$t/e" "$t/e")
	rm -rf "$t"
	echo "same order-insensitive: $r1"
	echo "one digest changed:     $r2"
	echo "one digest missing:     $r3"
	echo "no digests at all:      $r4"
	[ "$r1" = same ] && [ "$r2" != same ] && [ "$r3" != same ] && [ "$r4" != same ] && { echo "selftest PASS"; exit 0; }
	echo "selftest FAIL"
	exit 1
fi

# ---------------------------------------------------------------- setup
if [ ! -e "$REAL/libcuda.so.1" ]; then
	echo "SKIP: no real driver at $REAL/libcuda.so.1"
	exit 77
fi
if [ ! -x "$RGPUD" ] || [ ! -e "$CLIENTDIR/libcuda.so.1" ]; then
	echo "FAIL: rgpud or the client is not built in $top_builddir"
	exit 1
fi
mkdir -p "$OUT_DIR"
LOGDIR=$OUT_DIR/logs
rm -rf "$LOGDIR"
mkdir -p "$LOGDIR"
if [ -z "$BIN" ]; then
	if [ -d "$top_srcdir/.devcarry/compat" ]; then
		BIN=$top_srcdir/.devcarry/compat
	else
		BIN=$OUT_DIR/build
		"$here/build.sh" "$BIN" >"$LOGDIR/build.log" 2>&1 || { echo "FAIL: build (see $LOGDIR/build.log)"; exit 1; }
	fi
fi

smi() { command -v nvidia-smi >/dev/null && nvidia-smi "$@" 2>/dev/null; }
GPU=$(smi --query-gpu=name --format=csv,noheader | head -1)
DRIVER=$(smi --query-gpu=driver_version --format=csv,noheader | head -1)
TORCHVER=$("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null)
echo "GPU: ${GPU:-?}; driver ${DRIVER:-?}; torch ${TORCHVER:-none}; programs in $BIN"

free_port() {
	"$PYTHON" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}
DPID=""
cleanup() { [ -n "$DPID" ] && kill "$DPID" 2>/dev/null && wait "$DPID" 2>/dev/null; }
trap cleanup EXIT
trap 'exit 130' INT TERM
start_daemon() {
	local try
	for try in 1 2 3; do
		PORT=$(free_port)
		LD_LIBRARY_PATH="$REAL${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$RGPUD" --open --listen "127.0.0.1:$PORT" \
			${RGPUD_ARGS:-} >>"$LOGDIR/rgpud.log" 2>&1 &
		DPID=$!
		for _ in $(seq 1 300); do
			kill -0 "$DPID" 2>/dev/null || break
			(exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return 0
			sleep 0.1
		done
		kill "$DPID" 2>/dev/null
		wait "$DPID" 2>/dev/null
		DPID=""
		echo "rgpud did not come up (try $try)"
	done
	return 1
}
# restart the daemon if it died (a crash is recorded by the caller)
ensure_daemon() {
	if [ -z "$DPID" ] || ! kill -0 "$DPID" 2>/dev/null; then
		[ -n "$DPID" ] && echo "rgpud died; restarting" | tee -a "$LOGDIR/rgpud.log"
		DPID=""
		start_daemon || { echo "FAIL: rgpud does not start"; tail -20 "$LOGDIR/rgpud.log"; exit 1; }
	fi
}
ensure_daemon
echo "rgpud on 127.0.0.1:$PORT (pid $DPID)"

# runone MODE NAME TIMEOUT CMD...: output to $LOGDIR/MODE/NAME.{out,err};
# sets RC
runone() {
	local mode=$1 name=$2 to=$3
	shift 3
	local lib envs=()
	mkdir -p "$LOGDIR/$mode"
	case $mode in
	direct) lib=$REAL; envs=(RGPU_SERVERS=) ;;
	tcp) lib=$CLIENTDIR; envs=(RGPU_SERVERS="127.0.0.1:$PORT/0" RGPU_TRANSPORT=tcp RGPU_LOG_LEVEL=info) ;;
	local) lib=$CLIENTDIR; envs=(RGPU_SERVERS="127.0.0.1:$PORT/0" RGPU_TRANSPORT=auto RGPU_LOG_LEVEL=info) ;;
	esac
	[ "$mode" = direct ] || ensure_daemon
	local t0=$(date +%s%N)
	env LD_LIBRARY_PATH="$lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "${envs[@]}" \
		timeout -k 5 "$to" "$@" >"$LOGDIR/$mode/$name.out" 2>"$LOGDIR/$mode/$name.err"
	RC=$?
	MS=$(( ($(date +%s%N) - t0) / 1000000 ))
	echo "RC $RC MS $MS" >>"$LOGDIR/$mode/$name.err"
}
# status text of the last run
status() {
	local f=$LOGDIR/$1/$2
	local n
	n=$(digests "$f.out" | wc -l)
	case $RC in
	0) echo "ok ($n digests, $(printf '%d.%ds' $((MS / 1000)) $((MS % 1000 / 100))))" ;;
	124|137) echo "timeout ${3}s" ;;
	*) if [ "$RC" -gt 128 ]; then echo "signal $((RC - 128))"; else echo "exit $RC"; fi ;;
	esac
}
# what the client said about the failure: one token per line, no spaces
# (cuFoo, export-table:NAME[N], table-not-served:UUID8)
why_lines() {
	local f=$LOGDIR/$1/$2
	{
		sed -n 's/^rgpu\[[0-9]*\]: [a-z]*: \(.*\) is not supported by rgpu.*/\1/p' "$f.err" |
			sed 's/^export table \([^ ]*\) entry \([0-9]*\)$/export-table:\1[\2]/'
		sed -n 's/.*cuGetExportTable \([0-9a-f]\{8\}\)[0-9a-f-]*: private table not served.*/table-not-served:\1/p' "$f.err"
	} | sort -u
}
why() { why_lines "$@" | paste -sd, - | sed 's/,/, /g'; }
progmsg() { # the program's own failure line, else the last line it printed
	local m
	m=$(cat "$LOGDIR/$1/$2.out" "$LOGDIR/$1/$2.err" 2>/dev/null | grep -a -v '^rgpu\[' |
		grep -a -m1 -E '^FAIL|Error|error' | sed "s|$here/||g; s|^FAIL ||" | cut -c1-160 | tr '|' '/')
	[ -n "$m" ] || m="last output: $(grep -a -v '^INFO' "$LOGDIR/$1/$2.out" 2>/dev/null | tail -1 | cut -c1-100 | tr '|' '/')"
	echo "$m"
}

# PyTorch through rgpu (tcp) failed: rerun skipping each crashing stage
DIAG=()
DIAG_BENCH=""
torch_diag() {
	local id=$1 skip="" i last rc f
	grep -q '^RC 0 ' "$LOGDIR/tcp/$id.err" 2>/dev/null && return
	over_deadline && return
	for i in 1 2 3 4 5; do
		f=torchdiag-$i
		runone tcp "$f" "$COMPAT_TORCH_TIMEOUT" env RGPU_LOG_LEVEL=debug COMPAT_TORCH_SKIP="$skip" \
			"$PYTHON" -X faulthandler "$here/torch_compat.py" check bench
		rc=$RC
		last=$(sed -n 's/^STAGE \([a-z0-9_]*\)$/\1/p' "$LOGDIR/tcp/$f.out" | tail -1)
		DIAG+=("- run $i (skipping: ${skip:-nothing}): $(status tcp "$f" "$COMPAT_TORCH_TIMEOUT"); last stage started: ${last:-none}; $(grep -a -m1 '^FAIL' "$LOGDIR/tcp/$f.out" | cut -c1-200 | tr '|' '/')")
		if [ $rc -eq 0 ] || [ -z "$last" ] || [[ ,$skip, == *,$last,* ]]; then
			break
		fi
		if [ $i = 1 ] && [ $rc -gt 128 ] && command -v gdb >/dev/null; then
			env LD_LIBRARY_PATH="$CLIENTDIR:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
				RGPU_SERVERS="127.0.0.1:$PORT/0" RGPU_TRANSPORT=tcp COMPAT_TORCH_SKIP="$skip" \
				timeout -k 5 "$COMPAT_TORCH_TIMEOUT" gdb -batch -ex run -ex bt -ex 'info registers rip' \
				--args "$PYTHON" "$here/torch_compat.py" check >"$LOGDIR/tcp/torchdiag-gdb.txt" 2>&1
		fi
		skip=${skip:+$skip,}$last
	done
	DIAG_BENCH=$f
}

ROWS=()
NPASS=0 NFAIL=0 NXFAIL=0 NXPASS=0 NBASE=0 NSKIP=0
declare -A MISSING   # call -> programs
NMISS=0
EXPECTED_FAIL='^(managed|graph|hostalloc_mapped)$'
over_deadline() { [ "$COMPAT_DEADLINE" -gt 0 ] && [ $(( $(date +%s) - T_START )) -ge "$COMPAT_DEADLINE" ]; }

# program NAME VARIANT TIMEOUT CMD...
program() {
	local name=$1 variant=$2 to=$3
	shift 3
	local id=$name.$variant
	[ -n "$ONLY" ] && ! [[ $name =~ $ONLY ]] && return
	if over_deadline; then
		ROWS+=("| $name | $variant | skipped (deadline) | | | SKIP | |")
		NSKIP=$((NSKIP + 1))
		return
	fi
	local sd st sl ct cl calls msg v
	runone direct "$id" "$to" "$@"; sd=$(status direct "$id" "$to"); local rcd=$RC
	runone tcp "$id" "$to" "$@"; st=$(status tcp "$id" "$to"); local rct=$RC
	if [ "$COMPAT_FLIP" = "$id" ]; then
		# demonstrate that a changed digest is caught: alter the first one
		cp "$LOGDIR/tcp/$id.out" "$LOGDIR/tcp/$id.flipped.out"
		sed -i '0,/^RESULT /s/^\(RESULT .*\).$/\1X/' "$LOGDIR/tcp/$id.flipped.out"
		ct=$(compare "$LOGDIR/direct/$id.out" "$LOGDIR/tcp/$id.flipped.out")
		ROWS+=("| flip-check ($id, one tcp digest altered) | | | | | $([ "$ct" = same ] && echo 'NOT DETECTED' || echo 'detected (FAIL as it should)') | $ct |")
	fi
	runone local "$id" "$to" "$@"; sl=$(status local "$id" "$to"); local rcl=$RC
	ct=$(compare "$LOGDIR/direct/$id.out" "$LOGDIR/tcp/$id.out")
	cl=$(compare "$LOGDIR/direct/$id.out" "$LOGDIR/local/$id.out")
	calls=$( { why_lines tcp "$id"; why_lines local "$id"; } | sort -u | paste -sd, - | sed 's/,/, /g')
	msg=""
	if [ $rcd -ne 0 ]; then
		v="BASELINE-FAIL"
		NBASE=$((NBASE + 1))
		msg="direct: $(progmsg direct "$id")"
	elif [ $rct -eq 0 ] && [ $rcl -eq 0 ] && [ "$ct" = same ] && [ "$cl" = same ]; then
		if [[ $name =~ $EXPECTED_FAIL ]]; then v="PASS (XPASS)"; NXPASS=$((NXPASS + 1)); else v=PASS; NPASS=$((NPASS + 1)); fi
	else
		if [[ $name =~ $EXPECTED_FAIL ]]; then v="XFAIL"; NXFAIL=$((NXFAIL + 1)); else v=FAIL; NFAIL=$((NFAIL + 1)); fi
		[ $rct -ne 0 ] && msg="tcp: $(progmsg tcp "$id")"
		[ $rct -eq 0 ] && [ "$ct" != same ] && msg="tcp digests $ct"
		[ $rcl -ne 0 ] && [ -z "$msg" ] && msg="local: $(progmsg local "$id")"
		[ $rcl -eq 0 ] && [ "$cl" != same ] && [ -z "$msg" ] && msg="local digests $cl"
		local c
		for c in $( { why_lines tcp "$id"; why_lines local "$id"; } | sort -u); do MISSING[$c]="${MISSING[$c]:-} ${id// /_}"; NMISS=1; done
	fi
	if [ $rct -eq 0 ]; then [ "$ct" = same ] && st="$st, same" || st="$st, DIFFERENT"; fi
	if [ $rcl -eq 0 ]; then [ "$cl" = same ] && sl="$sl, same" || sl="$sl, DIFFERENT"; fi
	if [ $TRACE = 1 ] && [ $rcd -eq 0 ] && [ -e "$TRACER/libcuda.so.1" ] && [[ $v != PASS* ]]; then
		local targs=() a
		for a in "$@"; do [ "$a" = bench ] || targs+=("$a"); done
		mkdir -p "$LOGDIR/trace"
		env LD_LIBRARY_PATH="$TRACER:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" RGPU_SERVERS= \
			RGPU_TRACE_LOG="$LOGDIR/trace/$id.log" RGPU_TRACE_NODUMP=1 RGPU_TRACE_REAL="$REAL/libcuda.so.1" \
			timeout -k 5 "$to" "${targs[@]}" >"$LOGDIR/trace/$id.out" 2>&1
		echo "RC $?" >>"$LOGDIR/trace/$id.out"
	fi
	printf '%-22s %-7s %-8s | direct: %s | tcp: %s | local: %s | %s %s\n' "$name" "$variant" "$v" "$sd" "$st" "$sl" "$calls" "$msg"
	ROWS+=("| $name | $variant | $sd | $st | $sl | $v | ${calls:-} $([ -n "$msg" ] && echo "($msg)") |")
}

PROGS="vecadd matmul reduce_atomic streams_events async_pinned templates coop kprintf
	cublas_gemm cufft curand cusparse managed graph hostalloc_mapped"
for p in $PROGS; do
	for v in static shared; do
		[ -x "$BIN/$p.$v" ] || { ROWS+=("| $p | $v | not built | | | SKIP | |"); continue; }
		program "$p" "$v" "$COMPAT_TIMEOUT" "$BIN/$p.$v"
	done
done
# ---------------------------------------------------------------- item 4
BROWS=()
bench_val() { # MODE ID KEY -> value of KEY= on the BENCH NAME line ($4)
	grep -a "^BENCH $4 " "$LOGDIR/$1/$2.out" 2>/dev/null | sed -n "s/.* $3=\([0-9.]*\).*/\1/p" | head -1
}
ratio() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b / a }'; }
if [ $BENCH = 1 ] && ! over_deadline; then
	if [ -x "$BIN/cublas_bench.static" ] && { [ -z "$ONLY" ] || [[ cublas_bench =~ $ONLY ]]; }; then
		for m in direct tcp local; do
			runone $m cublas_bench 120 "$BIN/cublas_bench.static" 200
		done
		d=$(bench_val direct cublas_bench total_s cublas_sgemm4096)
		for m in tcp local; do
			r=$(bench_val $m cublas_bench total_s cublas_sgemm4096)
			BROWS+=("| 200 x SGEMM 4096^3, one sync (total s) | ${d:-failed} | $m | ${r:-failed ($(why $m cublas_bench) $(progmsg $m cublas_bench))} | $(ratio "$d" "$r") |")
		done
	fi
fi
if [ $TORCH = 1 ] && [ -n "$TORCHVER" ]; then
	if [ $BENCH = 1 ]; then
		program pytorch "torch-$TORCHVER" "$COMPAT_TORCH_TIMEOUT" "$PYTHON" "$here/torch_compat.py" check bench
		TORCH_ID="pytorch.torch-$TORCHVER"
		torch_diag "$TORCH_ID"
	else
		program pytorch "torch-$TORCHVER" "$COMPAT_TORCH_TIMEOUT" "$PYTHON" "$here/torch_compat.py" check
	fi
fi

if [ $BENCH = 1 ]; then
	if [ -n "${TORCH_ID:-}" ]; then
		for b in torch_cnn_train_step_b128 torch_mlp_train_step_b256; do
			d=$(bench_val direct "$TORCH_ID" median_ms $b)
			for m in tcp local; do
				r=$(bench_val $m "$TORCH_ID" median_ms $b)
				BROWS+=("| $b (median ms of 50 after 10 warm-up) | ${d:-failed} | $m | ${r:-failed} | $(ratio "$d" "$r") |")
			done
			if [ -n "$DIAG_BENCH" ]; then
				r=$(bench_val tcp "$DIAG_BENCH" median_ms $b)
				[ -n "$r" ] && BROWS+=("| $b, diagnostic run ($DIAG_BENCH: crashing stages skipped, debug log) | ${d:-failed} | tcp | $r | $(ratio "$d" "$r") |")
			fi
		done
	fi
fi

# ---------------------------------------------------------------- report
report=$OUT_DIR/compat-results.md
{
	echo "# rgpu compatibility corpus"
	echo
	echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
	echo "- GPU: ${GPU:-?}, driver ${DRIVER:-?} (real libcuda: $REAL)"
	echo "- nvcc: $("$CUDA_HOME/bin/nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p') (programs: $BIN), torch ${TORCHVER:-none}"
	echo "- rgpu: $(cd "$top_srcdir" && git describe --always --dirty 2>/dev/null); rgpud on 127.0.0.1"
	echo "- summary: $NPASS pass, $NFAIL fail, $NXFAIL expected failures, $NXPASS unexpected passes, $NBASE baseline failures, $NSKIP skipped; $(( $(date +%s) - T_START )) s"
	echo
	echo "direct = real driver; tcp = rgpu client over TCP to rgpud on 127.0.0.1;"
	echo "local = same rgpud over the same-host path (Unix socket, shared memory)."
	echo "\"same\" = the run's RESULT digests equal the direct run's."
	echo
	echo "| program | cudart | direct | rgpu tcp | rgpu local | verdict | failing driver call(s) / cause |"
	echo "|---|---|---|---|---|---|---|"
	for r in "${ROWS[@]}"; do echo "$r"; done
	echo
	if [ $NMISS = 1 ]; then
		echo "## Calls the client reported as unsupported in failing programs"
		echo
		for c in $(printf '%s\n' "${!MISSING[@]}" | sort); do
			echo "- \`$c\`:$(echo "${MISSING[$c]}" | tr ' ' '\n' | sort -u | paste -sd' ' - | sed 's/^/ /')"
		done
		echo
	fi
	if [ ${#DIAG[@]} -gt 0 ]; then
		echo "## PyTorch through rgpu (tcp), stage by stage"
		echo
		for r in "${DIAG[@]}"; do echo "$r"; done
		echo
	fi
	if [ ${#BROWS[@]} -gt 0 ]; then
		echo "## Item 4: rgpu vs local"
		echo
		echo "| measurement | local (direct) | rgpu path | rgpu | ratio rgpu/local |"
		echo "|---|---|---|---|---|"
		for r in "${BROWS[@]}"; do echo "$r"; done
		echo
	fi
} >"$report"
cat "$report"
cp "$LOGDIR/rgpud.log" "$OUT_DIR/rgpud.log" 2>/dev/null
tar -C "$OUT_DIR" -czf "$OUT_DIR/compat-logs.tar.gz" logs && rm -rf "$LOGDIR"
exit 0
