#!/bin/bash
# Where a same-host small call's time goes (issue 13): the small-call
# latencies of bench/bw_lat through an rgpud on this host, over the
# shared-memory queues, with the real driver and with the emulated device
# on the same machine, under several spin settings (RGPU_SPIN_US for the
# client, RGPUD_SPIN_US for the session worker), and the local driver.
# A diagnosis, not a bar: run-bench.sh holds the bars.
#
#   bash bench/latency-probe.sh [--out DIR]
#
# Environment: top_builddir (default: _build beside the sources),
# RGPU_REAL_DRIVER_DIR (/usr/local/nvidia/lib64), PROBE_ONLY=launch (the
# launch throughput part alone).
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
B=${top_builddir:-$src/_build}
REAL=${RGPU_REAL_DRIVER_DIR:-/usr/local/nvidia/lib64}
OUT=/tmp/rgpu-latency-probe
[ "${1:-}" = --out ] && OUT=$2
mkdir -p "$OUT"
for d in "$src/.devcarry/lib"; do
	[ -d "$d" ] && export LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
done
BW=$B/bench/bw_lat
CL=$B/client/.libs
[ -x "$BW" ] && [ -x "$B/daemon/rgpud" ] || { echo "SKIP: not built in $B"; exit 77; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PID=""
trap '[ -n "$PID" ] && kill $PID 2>/dev/null' EXIT

# up KIND SERVER_SPIN: an rgpud (real or emulated) on a fresh port
up() {
	[ -n "$PID" ] && { kill $PID 2>/dev/null; wait $PID 2>/dev/null; }
	P=$(port)
	if [ "$1" = emu ]; then
		RGPUD_OP_STATS=1 RGPUD_SPIN_US=$2 RGPU_EMU_LIB=$B/emu/.libs/librgpu-emu.so "$B/daemon/rgpud" --emulated --open \
			--listen 127.0.0.1:$P >"$OUT/rgpud-$1-$2.log" 2>&1 &
	else
		RGPUD_OP_STATS=1 RGPUD_SPIN_US=$2 LD_LIBRARY_PATH=$REAL:${LD_LIBRARY_PATH:-} ${3:+taskset -c $3} "$B/daemon/rgpud" --open \
			--listen 127.0.0.1:$P >"$OUT/rgpud-$1-$2.log" 2>&1 &
	fi
	PID=$!
	for _ in $(seq 1 100); do
		(exec 3<>/dev/tcp/127.0.0.1/$P) 2>/dev/null && return 0
		sleep 0.1
	done
	echo "rgpud ($1) did not start"; tail -3 "$OUT/rgpud-$1-$2.log"; return 1
}
# one LABEL CLIENT_SPIN [env...]: the latency lines of one bw_lat run
one() {
	local label=$1 cspin=$2
	shift 2
	env RGPU_SPIN_US=$cspin "$@" "$BW" --no-bw --min-time 0.3 --target "$label" \
		>"$OUT/$label.out" 2>"$OUT/$label.err"
	printf '%-28s ' "$label"
	awk '$1 ~ /^(null_call|htod_4B|dtoh_4B|launch_sync)$/ { printf "%s %s  ", $1, $2 }' "$OUT/$label.out"
	echo
}
echo "latency-probe: $(date -u '+%F %T UTC'), $(nproc) CPUs, $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
echo "(medians in microseconds; client spin / server spin in us)"
[ -e "$REAL/libcuda.so.1" ] && [ "${PROBE_ONLY:-}" != launch ] && one local - LD_LIBRARY_PATH=$REAL
for kind in real emu; do
	[ "${PROBE_ONLY:-}" = launch ] && break
	[ $kind = real ] && [ ! -e "$REAL/libcuda.so.1" ] && continue
	for ss in 100 1000 0; do
		up $kind $ss || continue
		for cs in 50 1000; do
			one "$kind-shm-c$cs-s$ss" $cs RGPU_TRANSPORT=local RGPU_SERVERS=127.0.0.1:$P \
				LD_LIBRARY_PATH=$CL:${LD_LIBRARY_PATH:-}
		done
		[ $ss = 100 ] && one "$kind-tcp-s$ss" 50 RGPU_TRANSPORT=tcp RGPU_SERVERS=127.0.0.1:$P \
			LD_LIBRARY_PATH=$CL:${LD_LIBRARY_PATH:-}
	done
done
# the real driver again, rgpud and the client on neighbouring CPUs (is it
# where the threads run?)
if [ "${PROBE_ONLY:-}" != launch ] && [ -e "$REAL/libcuda.so.1" ] && [ "$(nproc)" -ge 4 ] &&
	up real 100 1-2; then
	one real-shm-c50-s100-cpus12-3 50 RGPU_TRANSPORT=local RGPU_SERVERS=127.0.0.1:$P \
		LD_LIBRARY_PATH=$CL:${LD_LIBRARY_PATH:-} taskset -c 3
fi
[ -n "$PID" ] && { kill $PID 2>/dev/null; wait $PID 2>/dev/null; PID=""; }
# Launch throughput (issue 13: 90% of local): batches of 200 launches and
# a sync, per launch (launch_async), and the launches' own time in the
# caller (launch_enqueue: locally the driver's CPU time; through rgpud the
# client's).  A fresh rgpud for each path, so that its op stats are these
# launches only: rgpud's handling of one, the driver's call within it,
# and how long the worker waited for its client.
echo "launch throughput (us per launch; rgpud's op stats for the same run):"
launches() {
	local label=$1
	shift
	env "$@" "$BW" --no-bw --only launch_async,launch_enqueue --min-time 1 --target "$label" \
		>"$OUT/launch-$label.out" 2>"$OUT/launch-$label.err"
	printf '  %-10s ' "$label"
	awk '$1 ~ /^launch_(async|enqueue)$/ { printf "%s %s  ", $1, $2 }' "$OUT/launch-$label.out"
	echo
}
if [ -e "$REAL/libcuda.so.1" ]; then
	launches local LD_LIBRARY_PATH=$REAL
	# nospin: as before 2026-11-28, the client sleeps at a sync
	# (RGPU_SYNC_SPIN_US=0) and a TCP worker for the next call
	# (RGPUD_SPIN_US=0; the same-host queues spun 100 us already)
	for path in tcp local; do
		for sp in spin nospin; do
			ss=100 cs=1000
			[ $sp = nospin ] && cs=0
			[ $sp = nospin ] && [ $path = tcp ] && ss=0
			up real-launch-$path $ss || continue
			launches rgpud-$path-$sp RGPU_SYNC_SPIN_US=$cs RGPU_TRANSPORT=$path \
				RGPU_SERVERS=127.0.0.1:$P LD_LIBRARY_PATH=$CL:${LD_LIBRARY_PATH:-}
			kill $PID 2>/dev/null; wait $PID 2>/dev/null; PID=""
			grep -o "op stats: [0-9]* requests, [0-9.]* s handling them, [0-9.]* s waiting" \
				"$OUT/rgpud-real-launch-$path-$ss.log" | sed 's|^|      |'
			grep -o "LAUNCH [0-9]* x [0-9.]* us (driver [0-9.]* us)" \
				"$OUT/rgpud-real-launch-$path-$ss.log" | sed 's|^|      |'
		done
	done
fi
# rgpud's side of each run (RGPUD_OP_STATS): a launch's mean handling time
# against the local launch rate tells whether the worker or the client
# bounds the launch throughput
echo "rgpud's handling time per request (RGPUD_OP_STATS), the launches of each run's session:"
for f in "$OUT"/rgpud-*.log; do
	grep -o "op stats: .*" "$f" | grep -o "LAUNCH [0-9]* x [0-9.]* us[^;]*" | sed "s|^|  $(basename "$f" .log): |"
done
exit 0
