#!/bin/bash
# The benchmark, all in one run (docs/benchmarks.md):
#   local   bw_lat against the real driver (the local GPU, no rgpu)
#   rgpud   bw_lat through the rgpu client and an rgpud on 127.0.0.1 that
#           drives the same GPU
#   raw_tcp the same sizes as plain TCP over loopback, in two modes (oneway:
#           into a receive buffer of the full size; stream: 4 MiB pieces
#           into one reused buffer, as rgpud stages); the faster is the
#           baseline for rgpud/TCP and the bar
# then the combined table (bench/combine.py) and $OUT_DIR/bench.json.
#
# Usage: run-bench.sh [--emulated] [--max SIZE] [--min-time SEC] [--out DIR]
#                     [--device N]
#   --emulated      rgpud --emulated (no GPU needed; numbers meaningless);
#                   no local column
#   --max SIZE      largest copy (default 256M); the bar needs >= 64M
#   --min-time SEC  minimum time per measurement (default 0.2)
#   --out DIR       where bench.json and the logs go ($OUT_DIR, default
#                   bench/results in the source tree)
#   --device N      GPU ordinal (default 0), for both local and rgpud
#
# Environment: top_builddir (default: the _build next to this script if
# present, else the source tree), RGPU_REAL_DRIVER_DIR (the real driver's
# libcuda.so.1, default /usr/local/nvidia/lib64), RGPUD_ARGS (extra rgpud
# arguments), PYTHON (python3), OUT_DIR, BENCH_BULK_ROUNDS (rounds of
# rgpud-over-TCP and raw TCP copies from 16 MiB, back to back, for the 95%
# bar; default 5, 0: none), BENCH_LAUNCH_ROUNDS (rounds of the launch
# rate locally, over TCP and on the same host, back to back, for the 90%
# bar; default 9, 0: none), BENCH_TASKSET (CPUs for rgpud and the launch
# rounds, taskset -c syntax; default: unpinned).  On the GPU machines a round's ratio ranges
# from 0.64 to 1.20 in one run (the host's noise: the local rate alone
# moves 30% between rounds), so the median needs more rounds than five.
#
# Exit: 0 when every part ran (whether or not the bar is met), 1 on an
# error, 2 on bad usage, 77 when rgpud or the programs are not built.

set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
: "${top_srcdir:=$(cd "$here/.." && pwd)}"
if [ -z "${top_builddir:-}" ]; then
	if [ -x "$top_srcdir/_build/daemon/rgpud" ]; then
		top_builddir=$top_srcdir/_build
	else
		top_builddir=$top_srcdir
	fi
fi
: "${PYTHON:=python3}"
REAL=${RGPU_REAL_DRIVER_DIR:-/usr/local/nvidia/lib64}
OUT_DIR=${OUT_DIR:-$here/results}
EMULATED=0
MAX=${BENCH_MAX_SIZE:-256M}
MIN_TIME=0.2
DEVICE=0
ROUNDS=${BENCH_BULK_ROUNDS:-5}
# BENCH_TASKSET=CPUS: rgpud and the launch rounds' programs (local and
# through rgpu alike) run on these CPUs (taskset -c), to tell where a
# launch's cost swings between rounds from where it runs
PIN=()
[ -n "${BENCH_TASKSET:-}" ] && PIN=(taskset -c "$BENCH_TASKSET")
LROUNDS=${BENCH_LAUNCH_ROUNDS:-9}

usage() { sed -n '12,20p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
	case $1 in
	--emulated) EMULATED=1 ;;
	--max) MAX=${2:?--max needs a size}; shift ;;
	--max=*) MAX=${1#*=} ;;
	--min-time) MIN_TIME=${2:?--min-time needs seconds}; shift ;;
	--min-time=*) MIN_TIME=${1#*=} ;;
	--out) OUT_DIR=${2:?--out needs a directory}; shift ;;
	--out=*) OUT_DIR=${1#*=} ;;
	--device) DEVICE=${2:?--device needs a number}; shift ;;
	--device=*) DEVICE=${1#*=} ;;
	-h|--help) usage; exit 0 ;;
	*) echo "run-bench.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
	esac
	shift
done

RGPUD=$top_builddir/daemon/rgpud
CLIENTDIR=$top_builddir/client/.libs
EMULIB=$top_builddir/emu/.libs/librgpu-emu.so
BW_LAT=$top_builddir/bench/bw_lat
RAW_TCP=$top_builddir/bench/raw_tcp

missing=""
for f in "$RGPUD" "$BW_LAT" "$RAW_TCP"; do
	[ -x "$f" ] || missing="$missing $f"
done
[ -e "$CLIENTDIR/libcuda.so.1" ] || missing="$missing $CLIENTDIR/libcuda.so.1"
[ $EMULATED = 0 ] || [ -e "$EMULIB" ] || missing="$missing $EMULIB"
if [ -n "$missing" ]; then
	echo "SKIP: not built:$missing (run make in $top_builddir)"
	exit 77
fi
# Without the real driver at $REAL: no local column, and rgpud loads
# whichever libcuda.so.1 the dynamic loader finds (it fails when none).
HAVE_REAL=0
[ -e "$REAL/libcuda.so.1" ] && HAVE_REAL=1

mkdir -p "$OUT_DIR" || exit 1
OUT_DIR=$(cd "$OUT_DIR" && pwd)
LOGDIR=$OUT_DIR/logs
mkdir -p "$LOGDIR" || exit 1
rm -f "$LOGDIR"/*.jsonl "$LOGDIR"/*.log "$LOGDIR"/*.out

free_port() {
	"$PYTHON" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

DAEMON_PID=""
cleanup() {
	if [ -n "$DAEMON_PID" ]; then
		kill "$DAEMON_PID" 2>/dev/null
		wait "$DAEMON_PID" 2>/dev/null
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start_daemon() {
	local try pid
	for try in 1 2 3 4 5; do
		PORT=$(free_port) || { echo "cannot pick a free port" >&2; return 1; }
		if [ $EMULATED = 1 ]; then
			RGPU_EMU_LIB=$EMULIB "$RGPUD" --emulated --open --listen "127.0.0.1:$PORT" \
				${RGPUD_ARGS:-} >"$LOGDIR/rgpud.log" 2>&1 &
		else
			LD_LIBRARY_PATH=$([ $HAVE_REAL = 1 ] && echo "$REAL${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" || echo "${LD_LIBRARY_PATH:-}") \
				${PIN[@]+"${PIN[@]}"} "$RGPUD" --open --listen "127.0.0.1:$PORT" \
				${RGPUD_ARGS:-} >"$LOGDIR/rgpud.log" 2>&1 &
		fi
		pid=$!
		for _ in $(seq 1 150); do
			kill -0 "$pid" 2>/dev/null || break
			if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
				DAEMON_PID=$pid
				return 0
			fi
			sleep 0.1
		done
		kill "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
		echo "rgpud did not come up on 127.0.0.1:$PORT (try $try):" >&2
		tail -20 "$LOGDIR/rgpud.log" | sed 's/^/    /' >&2
		# another port only helps when this one was taken
		grep -qi 'in use' "$LOGDIR/rgpud.log" || break
	done
	return 1
}

# ---- the machine, for the record
smi() { command -v nvidia-smi >/dev/null && nvidia-smi "$@" 2>/dev/null; }
GPU=$(smi --query-gpu=name --format=csv,noheader -i "$DEVICE" | head -1)
DRIVER=$(smi --query-gpu=driver_version --format=csv,noheader | head -1)
[ $EMULATED = 1 ] && GPU="emulated (rgpud --emulated)"
REV=$(git -C "$top_srcdir" rev-parse --short HEAD 2>/dev/null)
echo "bench: $(hostname), $(nproc) CPUs, GPU ${GPU:-unknown}, driver ${DRIVER:-unknown}, rgpu ${REV:-unknown}"
echo "bench: sizes up to $MAX, >= ${MIN_TIME}s per measurement; logs in $LOGDIR"

STATUS=0
LOCAL_SKIPPED=""

# ---- local GPU (real driver, no rgpu)
if [ $EMULATED = 1 ]; then
	LOCAL_SKIPPED="--emulated: no local GPU measured"
elif [ $HAVE_REAL = 0 ]; then
	LOCAL_SKIPPED="no real driver at $REAL/libcuda.so.1 (set RGPU_REAL_DRIVER_DIR)"
	echo "--- local GPU: SKIPPED, $LOCAL_SKIPPED"
else
	echo "--- local GPU: real driver ($REAL)"
	if ! LD_LIBRARY_PATH=$REAL "$BW_LAT" --target local --device "$DEVICE" \
		--max "$MAX" --min-time "$MIN_TIME" --json "$LOGDIR/local.jsonl" \
		2>"$LOGDIR/local.err" | tee "$LOGDIR/local.out"; then
		echo "FAIL: bw_lat against the real driver:"; tail -5 "$LOGDIR/local.err"
		STATUS=1
	fi
fi

# ---- through rgpud over loopback
if [ $EMULATED = 1 ]; then
	echo "--- rgpud on 127.0.0.1 (emulated)"
elif [ $HAVE_REAL = 1 ]; then
	echo "--- rgpud on 127.0.0.1 (real driver, $REAL)"
else
	echo "--- rgpud on 127.0.0.1 (libcuda.so.1 from the loader's default path)"
fi
if start_daemon; then
	echo "rgpud: 127.0.0.1:$PORT (pid $DAEMON_PID)"
	# the network path (TCP over loopback), then the same-host path
	# (Unix socket and shared memory)
	if ! RGPU_TRANSPORT=tcp RGPU_SERVERS="127.0.0.1:$PORT/$DEVICE" LD_LIBRARY_PATH=$CLIENTDIR \
		"$BW_LAT" --target rgpud --max "$MAX" --min-time "$MIN_TIME" \
		--json "$LOGDIR/rgpud.jsonl" 2>"$LOGDIR/rgpud.err" | tee "$LOGDIR/rgpud.out"; then
		echo "FAIL: bw_lat through rgpud:"; tail -5 "$LOGDIR/rgpud.err"
		STATUS=1
	fi
	echo "--- rgpud on this host: Unix socket and shared memory (RGPU_TRANSPORT=local)"
	if ! RGPU_TRANSPORT=local RGPU_SERVERS="127.0.0.1:$PORT/$DEVICE" LD_LIBRARY_PATH=$CLIENTDIR \
		"$BW_LAT" --target rgpud_shm --max "$MAX" --min-time "$MIN_TIME" \
		--json "$LOGDIR/rgpud_shm.jsonl" 2>"$LOGDIR/rgpud_shm.err" | tee "$LOGDIR/rgpud_shm.out"; then
		echo "FAIL: bw_lat through rgpud (same host):"; tail -5 "$LOGDIR/rgpud_shm.err"
		STATUS=1
	fi
	# the calls through the socket instead of the shared-memory queues:
	# what the queues save, in the same run
	echo "--- the same host, calls through the Unix socket (RGPU_SHM_CALLS=0; latency only)"
	if ! RGPU_TRANSPORT=local RGPU_SHM_CALLS=0 RGPU_SERVERS="127.0.0.1:$PORT/$DEVICE" \
		LD_LIBRARY_PATH=$CLIENTDIR "$BW_LAT" --target rgpud_shmsock --no-bw \
		--min-time "$MIN_TIME" --json "$LOGDIR/rgpud_shmsock.jsonl" \
		2>"$LOGDIR/rgpud_shmsock.err" | tee "$LOGDIR/rgpud_shmsock.out"; then
		echo "FAIL: bw_lat through rgpud (same host, socket):"; tail -5 "$LOGDIR/rgpud_shmsock.err"
		STATUS=1
	fi
	# The 95% bulk bar from interleaved rounds: loopback TCP drifts over a
	# run (2.3-4.4 GB/s on the GPU host), so each round measures rgpud over
	# TCP and raw TCP back to back from 16 MiB, and combine.py takes each
	# size's median ratio
	for r in $(seq 1 "$ROUNDS"); do
		echo "--- bulk round $r of $ROUNDS: rgpud over TCP, then raw TCP, from 16 MiB"
		if ! RGPU_TRANSPORT=tcp RGPU_SERVERS="127.0.0.1:$PORT/$DEVICE" LD_LIBRARY_PATH=$CLIENTDIR \
			"$BW_LAT" --target "rgpud_r$r" --no-lat --min 16M --max "$MAX" \
			--min-time "$MIN_TIME" --json "$LOGDIR/bulk_rounds.jsonl" \
			>>"$LOGDIR/bulk_rounds.out" 2>"$LOGDIR/bulk_rounds.err" ||
		   ! "$RAW_TCP" --target "raw_tcp_r$r" --min 16M --max "$MAX" --min-time "$MIN_TIME" \
			--json "$LOGDIR/bulk_rounds.jsonl" >>"$LOGDIR/bulk_rounds.out" \
			2>>"$LOGDIR/bulk_rounds.err"; then
			echo "FAIL: bulk round $r:"; tail -5 "$LOGDIR/bulk_rounds.err"
			STATUS=1
			break
		fi
	done
	# The launch throughput bar (90% of local) from interleaved rounds as
	# well: a launch's cost swings by 10% between processes (where they
	# run), so each round measures the local driver, rgpud over TCP and on
	# the same host back to back, and combine.py takes the median ratio
	for r in $(seq 1 "$LROUNDS"); do
		lr=()
		[ $EMULATED = 0 ] && [ $HAVE_REAL = 1 ] && lr=(local)
		for k in "${lr[@]}" tcp shm; do
			case $k in
			local) env=(LD_LIBRARY_PATH=$REAL) ;;
			tcp) env=(RGPU_TRANSPORT=tcp RGPU_SERVERS="127.0.0.1:$PORT/$DEVICE" LD_LIBRARY_PATH=$CLIENTDIR) ;;
			shm) env=(RGPU_TRANSPORT=local RGPU_SERVERS="127.0.0.1:$PORT/$DEVICE" LD_LIBRARY_PATH=$CLIENTDIR) ;;
			esac
			if ! env "${env[@]}" ${PIN[@]+"${PIN[@]}"} "$BW_LAT" --target "launch_${k}_r$r" --device "$DEVICE" \
				--no-bw --only launch_async --max 4K --min-time "$MIN_TIME" \
				--json "$LOGDIR/launch_rounds.jsonl" >>"$LOGDIR/launch_rounds.out" \
				2>>"$LOGDIR/launch_rounds.err"; then
				echo "FAIL: launch round $r ($k):"; tail -5 "$LOGDIR/launch_rounds.err"
				STATUS=1
				break 2
			fi
		done
	done
	if ! kill -0 "$DAEMON_PID" 2>/dev/null; then
		echo "FAIL: rgpud exited during the run (see $LOGDIR/rgpud.log)"
		STATUS=1
	fi
	cleanup
	DAEMON_PID=""
else
	echo "FAIL: cannot start rgpud (see $LOGDIR/rgpud.log)"
	STATUS=1
fi

# ---- raw TCP over the same loopback
echo "--- raw TCP over 127.0.0.1 (modes oneway and stream)"
if ! "$RAW_TCP" --max "$MAX" --min-time "$MIN_TIME" --json "$LOGDIR/raw_tcp.jsonl" \
	2>"$LOGDIR/raw_tcp.err" | tee "$LOGDIR/raw_tcp.out"; then
	echo "FAIL: raw_tcp:"; tail -5 "$LOGDIR/raw_tcp.err"
	STATUS=1
fi

# ---- combined table and JSON
json_str() { "$PYTHON" -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$1"; }
cat >"$LOGDIR/meta.json" <<EOF
{"date": $(json_str "$(date -u +%Y-%m-%dT%H:%M:%SZ)"),
 "host": $(json_str "$(hostname)"), "cpus": $(nproc),
 "kernel": $(json_str "$(uname -r)"),
 "gpu": $(json_str "${GPU:-unknown}"), "driver": $(json_str "${DRIVER:-unknown}"),
 "device": $DEVICE, "emulated": $([ $EMULATED = 1 ] && echo true || echo false),
 "real_driver_dir": $(json_str "$REAL"), "rgpu_rev": $(json_str "${REV:-unknown}"),
 "max_size": $(json_str "$MAX"), "min_time_s": $("$PYTHON" -c 'import sys; print(float(sys.argv[1]))' "$MIN_TIME"),
 "local_skipped": $(json_str "$LOCAL_SKIPPED")}
EOF
inputs=()
for t in local rgpud rgpud_shm rgpud_shmsock raw_tcp bulk_rounds launch_rounds; do
	[ -s "$LOGDIR/$t.jsonl" ] && inputs+=("$LOGDIR/$t.jsonl")
done
if ! "$PYTHON" "$here/combine.py" "$LOGDIR/meta.json" "$OUT_DIR/bench.json" "${inputs[@]}"; then
	echo "FAIL: combining the results"
	STATUS=1
fi
[ $STATUS = 0 ] || echo "bench: errors (see above and $LOGDIR)"
exit $STATUS
