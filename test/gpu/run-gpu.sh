#!/bin/bash
# GPU suite (`make check-gpu`): the e2e programs on a machine with a real
# GPU and driver,
#   (a) "direct": against the real driver (the baseline), and
#   (b) "rgpu":   through the rgpu client and local rgpud daemons that drive
#       the real GPU (two daemons, so two devices: GPU 0 and GPU 1, or GPU 0
#       twice on a one-GPU machine),
# compares the data digests ("RESULT" lines) of (a) and (b), checks that a
# daemon keeps serving after a client's kernel fault, and writes a markdown
# report to $RGPU_RESULTS_DIR (default test/gpu/results/) for
# docs/gpu-results.md.
#
# Environment:
#   top_builddir, top_srcdir   set by `make check-gpu`
#   RGPU_REAL_DRIVER_DIR       the real libcuda.so.1 (/usr/local/nvidia/lib64)
#   RGPU_RESULTS_DIR           where the report goes
#   RGPU_GPU_LOGDIR            per-test output (./gpu-logs)
#   RGPU_TEST_TIMEOUT          seconds per test (120)
#   RGPUD_ARGS                 extra arguments for rgpud
#   RGPU_GPU_ONLY="direct"     or "rgpu": run one half only
# Exit: 0 all passed, 1 a failure, 77 no GPU/driver found.

set -u
here=$(cd "$(dirname "$0")" && pwd)
: "${top_srcdir:=$(cd "$here/../.." && pwd)}"
: "${top_builddir:=$top_srcdir/_build}"
: "${PYTHON:=python3}"
: "${RGPU_TEST_TIMEOUT:=120}"
REAL=${RGPU_REAL_DRIVER_DIR:-/usr/local/nvidia/lib64}
RESULTS_DIR=${RGPU_RESULTS_DIR:-$top_srcdir/test/gpu/results}
LOGDIR=${RGPU_GPU_LOGDIR:-$PWD/gpu-logs}
E2E=$top_builddir/test/e2e
RGPUD=$top_builddir/daemon/rgpud
CLIENTDIR=$top_builddir/client/.libs
ONLY=${RGPU_GPU_ONLY:-}

if [ ! -e "$REAL/libcuda.so.1" ]; then
	echo "SKIP: no real driver at $REAL/libcuda.so.1 (set RGPU_REAL_DRIVER_DIR)"
	exit 77
fi
if [ ! -x "$E2E/t_vecadd" ]; then
	echo "FAIL: the e2e programs are not built in $E2E (run make check-gpu from the build tree)"
	exit 1
fi
mkdir -p "$LOGDIR" "$RESULTS_DIR"
rm -f "$LOGDIR"/*.out "$LOGDIR"/*.err "$LOGDIR"/*.log

# ---- machine description
smi() { command -v nvidia-smi >/dev/null && nvidia-smi "$@" 2>/dev/null; }
GPU_NAMES=$(smi --query-gpu=name --format=csv,noheader | sort | uniq -c | sed 's/^ *//; s/ /x /' | paste -sd, -)
DRIVER=$(smi --query-gpu=driver_version --format=csv,noheader | head -1)
NGPU=$(smi --query-gpu=name --format=csv,noheader | wc -l)
[ -n "$NGPU" ] && [ "$NGPU" -gt 0 ] || NGPU=1
: "${GPU_NAMES:=unknown (no nvidia-smi)}"
: "${DRIVER:=unknown}"
NVCC_VER=$("${NVCC:-nvcc}" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')
echo "GPU: $GPU_NAMES; driver $DRIVER; $NGPU GPU(s); real driver $REAL"

free_port() {
	"$PYTHON" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

ms_now() { echo $(( $(date +%s%N) / 1000000 )); }

DAEMON_PIDS=""
cleanup() {
	for p in $DAEMON_PIDS; do kill "$p" 2>/dev/null; done
	for p in $DAEMON_PIDS; do wait "$p" 2>/dev/null; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ROWS=()   # markdown table rows
PASS=0 FAIL=0 XFAIL=0 SKIPPED=0 FAILED=""

record() { # mode name status ms note
	local secs
	secs=$(printf '%d.%02d' $(($4 / 1000)) $((($4 % 1000) / 10)))
	printf '%-6s %-26s %-5s %7ss %s\n' "$1" "$2" "$3" "$secs" "$5"
	ROWS+=("| $1 | $2 | $3 | $secs | $5 |")
	case $3 in
	PASS) PASS=$((PASS + 1)) ;;
	XFAIL) XFAIL=$((XFAIL + 1)) ;;
	SKIP) SKIPPED=$((SKIPPED + 1)) ;;
	*) FAIL=$((FAIL + 1)); FAILED="$FAILED $1/$2" ;;
	esac
}

# run MODE NAME [xfail] -- [VAR=VALUE...] PROGRAM [ARGS...]
# MODE direct: real driver; MODE rgpu: client library, RGPU_SERVERS as set.
run() {
	local mode=$1 name=$2 xfail=""
	shift 2
	if [ "$1" = xfail ]; then xfail=1; shift; fi
	[ "$1" = -- ] && shift
	local envs=()
	while [ $# -gt 0 ] && [[ $1 == *=* ]]; do envs+=("$1"); shift; done
	local prog=$1
	shift
	local out=$LOGDIR/$mode-$name.out err=$LOGDIR/$mode-$name.err t0 rc ms lib
	if [ "$mode" = direct ]; then
		lib=$REAL
		envs+=(RGPU_SERVERS=)
	else
		lib=$CLIENTDIR
		envs+=("RGPU_SERVERS=${SERVERS}")
	fi
	t0=$(ms_now)
	env LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "${envs[@]}" timeout "$RGPU_TEST_TIMEOUT" "$E2E/$prog" "$@" \
		>"$out" 2>"$err"
	rc=$?
	ms=$(( $(ms_now) - t0 ))
	LAST_RC=$rc
	local note=""
	if [ $rc -eq 0 ]; then
		record "$mode" "$name" PASS "$ms" ""
	elif [ $rc -eq 77 ]; then
		record "$mode" "$name" SKIP "$ms" "$(tail -1 "$out" | sed 's/.*SKIP: //')"
	else
		note="exit $rc"
		[ $rc -eq 124 ] && note="timeout after ${RGPU_TEST_TIMEOUT}s"
		[ $rc -gt 128 ] && note="killed by signal $((rc - 128))"
		note="$note: $(grep -m1 -E 'FAIL|error' "$err" | cut -c1-160 | tr '|' '/')"
		if [ -n "$xfail" ]; then
			record "$mode" "$name" XFAIL "$ms" "tolerated: $note"
		else
			record "$mode" "$name" FAIL "$ms" "$note"
		fi
		sed 's/^/    | /' "$err" | tail -10
	fi
	return 0
}

# a check made by this script
verdict() { # mode name ok(0/1) message
	if [ "$3" -eq 0 ]; then record "$1" "$2" PASS 0 ""; else record "$1" "$2" FAIL 0 "$4"; fi
}

PROGS="t_device t_vecadd t_matmul t_struct t_globals t_streams t_async t_memory t_library t_errors t_managed t_memcpy2d t_array t_graph t_hostfn t_hostmem_live t_attrs t_graph_nodes t_graph_memop t_graph_hostcopy t_umhint t_memops t_uobj t_ctxevent t_green t_module_managed t_legacy_launch t_link t_tensormap t_ipc"

# ---------------------------------------------------------------- (a) direct
if [ "$ONLY" != rgpu ]; then
	echo "--- (a) direct: real driver"
	# GPU 0 alone, as the rgpu runs of the same programs see it (through
	# one server's GPU 0): on a host of two GPUs the digests differed by
	# the second device's line
	for p in $PROGS; do
		run direct "$p" -- CUDA_VISIBLE_DEVICES=0 "$p"
	done
	run direct t_hostfn_managed -- CUDA_VISIBLE_DEVICES=0 t_hostfn managed
	run direct t_multi -- t_multi
	run direct t_fault -- t_fault
	if [ -x "$E2E/t_runtime" ]; then
		run direct t_runtime -- t_runtime
	fi
	if [ -x "$E2E/t_runtime_managed_init" ]; then
		run direct t_runtime_managed -- t_runtime_managed_init
	fi
fi

# ---------------------------------------------------------------- (b) rgpu
start_daemon() { # NAME -> PORT
	local name=$1 try pid
	for try in 1 2 3; do
		PORT=$(free_port)
		# shellcheck disable=SC2086
		LD_LIBRARY_PATH="$REAL${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$RGPUD" --open --listen "127.0.0.1:$PORT" ${RGPUD_ARGS:-} \
			>"$LOGDIR/$name.log" 2>&1 &
		pid=$!
		for _ in $(seq 1 300); do
			kill -0 "$pid" 2>/dev/null || break
			if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
				DAEMON_PIDS="$DAEMON_PIDS $pid"
				eval "PID_$name=$pid"
				return 0
			fi
			sleep 0.1
		done
		kill "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
		echo "rgpud ($name) did not come up on 127.0.0.1:$PORT (try $try):"
		tail -20 "$LOGDIR/$name.log" | sed 's/^/    /'
	done
	return 1
}

if [ "$ONLY" != direct ]; then
	echo "--- (b) rgpu: client -> rgpud (real driver) on 127.0.0.1"
	if [ ! -x "$RGPUD" ] || [ ! -e "$CLIENTDIR/libcuda.so.1" ]; then
		record rgpu build FAIL 0 "rgpud or the client library is not built"
	elif ! start_daemon d1; then
		record rgpu rgpud-start FAIL 0 "rgpud did not start (see $LOGDIR/d1.log)"
	else
		P1=$PORT
		start_daemon d2 || record rgpu rgpud-start-2 FAIL 0 "second rgpud did not start"
		P2=${PORT:-$P1}
		if [ "$NGPU" -ge 2 ]; then
			GPU2=1
			SAME=0
		else
			GPU2=0
			SAME=1
		fi
		echo "rgpud on 127.0.0.1:$P1 and 127.0.0.1:$P2; second device is GPU $GPU2"
		ONE="127.0.0.1:$P1/0"
		TWO="127.0.0.1:$P1/0,127.0.0.1:$P2/$GPU2"

		SERVERS=$ONE
		for p in $PROGS; do
			run rgpu "$p" -- "$p"
		done
		run rgpu t_hostfn_managed -- t_hostfn managed
		SERVERS=$TWO
		run rgpu t_device_2 -- T_ALLOW_SAME_UUID=$SAME t_device
		run rgpu t_multi -- t_multi
		run rgpu t_vecadd_dev1 -- T_DEVICE=1 t_vecadd

		# several clients at once
		t0=$(ms_now)
		pids=()
		for i in 1 2 3 4; do
			env LD_LIBRARY_PATH="$CLIENTDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" RGPU_SERVERS="$ONE" \
				timeout "$RGPU_TEST_TIMEOUT" "$E2E/t_vecadd" >"$LOGDIR/rgpu-concurrent-$i.out" \
				2>"$LOGDIR/rgpu-concurrent-$i.err" &
			pids+=($!)
		done
		env LD_LIBRARY_PATH="$CLIENTDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" RGPU_SERVERS="$TWO" \
			timeout "$RGPU_TEST_TIMEOUT" "$E2E/t_multi" >"$LOGDIR/rgpu-concurrent-5.out" \
			2>"$LOGDIR/rgpu-concurrent-5.err" &
		pids+=($!)
		bad=0
		for p in "${pids[@]}"; do wait "$p" || bad=$((bad + 1)); done
		if [ $bad -eq 0 ]; then
			record rgpu t_concurrent PASS $(( $(ms_now) - t0 )) "4 x t_vecadd + t_multi at once"
		else
			record rgpu t_concurrent FAIL $(( $(ms_now) - t0 )) "$bad of 5 concurrent clients failed"
		fi

		SERVERS=$ONE
		run rgpu t_library_ctx_first -- T_LIBRARY_CTX_FIRST=1 t_library

		# raw-protocol abuse, then a normal client
		run rgpu t_malformed -- t_malformed 127.0.0.1 "$P1"
		run rgpu t_malformed_then_vecadd -- t_vecadd

		# no server
		closed=$(free_port)
		SERVERS="127.0.0.1:$closed/0"
		run rgpu t_noserver -- t_noserver
		if [ "$LAST_RC" -eq 0 ]; then
			grep -q "127.0.0.1:$closed" "$LOGDIR/rgpu-t_noserver.err"
			verdict rgpu t_noserver_log $? "stderr does not name 127.0.0.1:$closed"
		fi

		SERVERS=$ONE
		if [ -x "$E2E/t_runtime" ]; then
			run rgpu t_runtime -- t_runtime
		fi
		if [ -x "$E2E/t_runtime_managed_init" ]; then
			run rgpu t_runtime_managed -- t_runtime_managed_init
			run rgpu t_runtime_managed_tcp -- RGPU_TRANSPORT=tcp t_runtime_managed_init
		fi

		# last, since on a real GPU a fault can poison the daemon: a kernel
		# fault, then other clients on the same daemon (first d1, then d2
		# which never saw the fault)
		run rgpu t_fault -- t_fault
		run rgpu t_fault_then_vecadd -- t_vecadd
		run rgpu t_fault_then_matmul -- t_matmul
		SERVERS="127.0.0.1:$P2/$GPU2"
		run rgpu t_other_daemon_after_fault -- t_vecadd

		alive=0
		for p in $DAEMON_PIDS; do kill -0 "$p" 2>/dev/null || alive=1; done
		verdict rgpu daemons_survived $alive "an rgpud exited during the run"
	fi
fi

# ---------------------------------------------------------------- compare
if [ -z "$ONLY" ]; then
	echo "--- direct vs rgpu: RESULT digests"
	for f in "$LOGDIR"/direct-*.out; do
		[ -e "$f" ] || continue
		name=${f#"$LOGDIR"/direct-}
		name=${name%.out}
		g=$LOGDIR/rgpu-$name.out
		[ -e "$g" ] || continue
		a=$(grep '^RESULT ' "$f" | sort)
		b=$(grep '^RESULT ' "$g" | sort)
		[ -n "$a" ] || continue
		if [ -z "$b" ]; then
			continue # the rgpu run failed; already reported
		fi
		if [ "$a" = "$b" ]; then
			record compare "$name" PASS 0 "$(echo "$a" | wc -l) digest(s) identical"
		else
			record compare "$name" FAIL 0 "digests differ: $(diff <(echo "$a") <(echo "$b") | grep '^[<>]' | tr '\n' ' ' | cut -c1-200)"
		fi
	done
	# attributes: informational
	a=$(grep '^INFO device0-attrs' "$LOGDIR/direct-t_device.out" 2>/dev/null)
	b=$(grep '^INFO device0-attrs' "$LOGDIR/rgpu-t_device.out" 2>/dev/null)
	if [ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ]; then
		echo "note: device attributes differ between direct and rgpu (T_VERBOSE=1 t_device lists them)"
	fi
fi

# ---------------------------------------------------------------- report
stamp=$(date -u +%Y%m%d-%H%M%S)
report=$RESULTS_DIR/gpu-results-$stamp.md
{
	echo "# rgpu GPU suite results"
	echo
	echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
	echo "- host: $(hostname)"
	echo "- GPU: $GPU_NAMES ($NGPU GPU(s))"
	echo "- driver: $DRIVER (real libcuda: $REAL)"
	echo "- nvcc: ${NVCC_VER:-unknown}"
	echo "- rgpu: ${RGPU_VERSION:-?} $(cd "$top_srcdir" && git describe --always --dirty 2>/dev/null)"
	echo "- summary: $PASS passed, $FAIL failed, $XFAIL tolerated failures (xfail), $SKIPPED skipped"
	echo
	echo "Modes: **direct** = the programs on the real driver; **rgpu** = through the"
	echo "rgpu client and rgpud on 127.0.0.1; **compare** = data digests of direct and"
	echo "rgpu runs are identical."
	echo
	echo "| mode | test | result | time (s) | notes |"
	echo "|------|------|--------|----------|-------|"
	for r in "${ROWS[@]}"; do echo "$r"; done
} >"$report"
cp "$report" "$RESULTS_DIR/latest.md"
echo "report: $report"
echo "gpu: $PASS passed, $FAIL failed, $XFAIL xfail, $SKIPPED skipped; logs in $LOGDIR"
[ $FAIL -eq 0 ] || { echo "failed:$FAILED"; exit 1; }
exit 0
