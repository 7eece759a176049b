#!/bin/bash
# Copies between GPUs of two servers (issue 10), three ways in one run:
# server to server (one rgpud fetches from the other), through the client
# (RGPU_PEER_PATH=client: read from one, written to the other), and raw
# loopback TCP of the same size (bench/raw_tcp, stream mode: the wire's
# own speed, the baseline).
#
#   bash bench/peer-remote.sh --out DIR [--emulated] [--size 256M] [--reps 8]
#
# Two rgpuds on this host, each one of the client's servers: both on GPU 0
# of this machine (or emulated GPUs with --emulated); bench/peer_bw copies
# between device 0 (the first rgpud) and device 1 (the second), both ways,
# synchronous and on a stream, and checks the data.  Prints "BW path_copy
# GB/s", "RATIO name x" (server / raw TCP, server / client) and "RESULT
# name PASS|FAIL detail"; exits 1 when a copy fails, its data is wrong, or
# the copies did not go the way asked (the client's RGPU_STATS counters).
set -u
OUT="" EMU=0 SIZE=256M REPS=8
while [ $# -gt 0 ]; do
	case $1 in
	--out) OUT=$2; shift 2 ;;
	--out=*) OUT=${1#--out=}; shift ;;
	--emulated) EMU=1; shift ;;
	--size) SIZE=$2; shift 2 ;;
	--reps) REPS=$2; shift 2 ;;
	*) echo "usage: $0 --out DIR [--emulated] [--size BYTES] [--reps N]" >&2; exit 2 ;;
	esac
done
[ -n "$OUT" ] || { echo "usage: $0 --out DIR [--emulated] [--size BYTES] [--reps N]" >&2; exit 2; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
B=${top_builddir:-$src/_build}
REAL=${RGPU_REAL_DRIVER_DIR:-/usr/local/nvidia/lib64}
PY=${PYTHON:-python3}
RGPUD=$B/daemon/rgpud
CLIENT=$B/client/.libs
for f in "$RGPUD" "$B/bench/peer_bw" "$B/bench/raw_tcp" "$CLIENT/libcuda.so.1"; do
	[ -e "$f" ] || { echo "peer-remote: $f is not built"; exit 77; }
done
FAIL=0
result() { echo "RESULT $1 $2 ${3:-}"; [ "$2" = FAIL ] && FAIL=1; return 0; }

free_port() {
	$PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
PIDS=""
trap 'for p in $PIDS; do kill $p 2>/dev/null; done; wait 2>/dev/null' EXIT
start() { # name: its port in $PORT
	PORT=$(free_port)
	local args=(--open --listen "127.0.0.1:$PORT" --log-level=debug)
	if [ $EMU = 1 ]; then
		RGPU_EMU_DEVICES=2 "$RGPUD" --emulated "${args[@]}" >"$OUT/$1.log" 2>&1 &
	else
		LD_LIBRARY_PATH=$REAL${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$RGPUD" "${args[@]}" \
			>"$OUT/$1.log" 2>&1 &
	fi
	PIDS="$PIDS $!"
	for _ in $(seq 1 100); do
		(exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return 0
		sleep 0.1
	done
	echo "peer-remote: rgpud $1 did not start:"; tail -5 "$OUT/$1.log"
	exit 1
}
start rgpud1; P1=$PORT
start rgpud2; P2=$PORT
GPU1=0
[ $EMU = 1 ] && GPU1=1
SERVERS="127.0.0.1:$P1/0,127.0.0.1:$P2/$GPU1"
echo "peer-remote: $([ $EMU = 1 ] && echo emulated || nvidia-smi --query-gpu=name --format=csv,noheader | head -1); servers $SERVERS; $SIZE x $REPS"

for path in server client; do
	RGPU_SERVERS=$SERVERS RGPU_PEER_PATH=$path RGPU_STATS=1 RGPU_TRANSPORT=tcp \
		LD_LIBRARY_PATH=$CLIENT${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
		timeout 300 "$B/bench/peer_bw" --size "$SIZE" --reps "$REPS" \
		>"$OUT/peer-$path.out" 2>"$OUT/peer-$path.err"
	rc=$?
	sed "s/^BW /BW ${path}_/" "$OUT/peer-$path.out" | grep '^BW '
	line=$(grep 'copies between servers:' "$OUT/peer-$path.err")
	want=$([ $path = server ] && echo 'direct=[1-9][0-9]* relayed=0' || echo 'direct=0 relayed=[1-9]')
	if [ $rc -ne 0 ]; then
		result "peer_$path" FAIL "exit $rc: $(tail -2 "$OUT/peer-$path.err" | tr '\n' ' ')"
	elif grep -q '^CHECK .* WRONG' "$OUT/peer-$path.out"; then
		result "peer_$path" FAIL "wrong data: $(grep WRONG "$OUT/peer-$path.out" | tr '\n' ' ')"
	elif ! echo "$line" | grep -q "$want"; then
		result "peer_$path" FAIL "the copies did not go $path to ... ('$line')"
	else
		result "peer_$path" PASS "$(grep -c '^CHECK .* ok' "$OUT/peer-$path.out") copy kinds, data ok; $line"
	fi
done

# (its sizes are powers of two and more: the largest up to SIZE)
"$B/bench/raw_tcp" --min 1M --max "$SIZE" --min-time 0.5 >"$OUT/raw_tcp.out" 2>&1 ||
	result raw_tcp FAIL "$(tail -2 "$OUT/raw_tcp.out" | tr '\n' ' ')"
RAW=$(awk '$1 == "stream" { v = $4; s = $2 " " $3 } END { if (v) print v, s }' "$OUT/raw_tcp.out")
echo "BW raw_tcp_stream ${RAW:-?}"
RAW=${RAW%% *}

$PY - "$OUT/peer-server.out" "$OUT/peer-client.out" "${RAW:-0}" <<'EOF'
import sys
def bw(p):
    try:
        return {l.split()[1]: float(l.split()[2]) for l in open(p) if l.startswith("BW ")}
    except OSError:
        return {}
s, c, raw = bw(sys.argv[1]), bw(sys.argv[2]), float(sys.argv[3])
for k in sorted(s):
    if raw > 0:
        print("RATIO server_vs_raw_tcp_%s %.3f" % (k, s[k] / raw))
    if c.get(k):
        print("RATIO server_vs_client_%s %.3f" % (k, s[k] / c[k]))
EOF
exit $FAIL
