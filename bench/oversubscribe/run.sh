#!/bin/bash
# More device memory than the GPU has (issue 9), measured on a real GPU.
#
#   bash bench/oversubscribe/run.sh --out DIR
#
# Needs the tree built (_build: rgpud, the client library), nvcc and the real
# driver (/usr/local/nvidia/lib64, or RGPU_REAL_DRIVER_DIR).  Builds
# tenant.cu, reads the GPU's memory (cudaMemGetInfo) and the pinned copy
# bandwidth with the real driver, then runs tenants through one rgpud:
#
#   pair_swap   two tenants each holding 60% of the GPU at once, default
#               policy (swap) with --memory-wait=30 (so no quantum exceeds
#               15 s) and tenants that run about 20 s: they must take
#               turns (the swap bandwidth numbers come from here); both
#               must finish with their data intact
#   pair_turns  the same pair with --memory-wait=16: they take turns every
#               few seconds, so most evictions go into host memory kept
#               from the session's previous one (the steady state)
#   pair_wait   the same under --memory-policy=wait: the second waits for
#               the first to finish and free
#   alt2        two tenants of 75% (1.5x the GPU in all), alternating GPU
#               and host phases: at once (swapping) against one after the
#               other; the ratio should be at most 1.2
#   alt4        four tenants of 30% (1.2x), the same comparison
#
# OVERSUB_CASES="pair_turns alt2" runs only those cases; OVERSUB_PAIR_KEEP
# sets RGPUD_SWAP_KEEP for the pairs (default 48G: a 60% session's memory
# on an 80 GiB GPU, so its host copy stays from one eviction to the next;
# two of them, 96 GiB, fit the 128 GiB host; 24G before 2026-11-28).
#
# and, from rgpud's log, the swap-out and swap-in bandwidth of every
# eviction (host memory ready beforehand: kept from an earlier eviction or
# prepared ahead; or prepared during the eviction) against the pinned copy
# bandwidth, and per case what the memory manager did (switches.py:
# evictions, restores and their waits, how long each session had the GPU
# before its eviction, and a timeline of the switches).  Writes
# DIR/summary.txt (the numbers) and the logs; finishes in about 5 minutes on
# an H100.
set -u
OUT=""
while [ $# -gt 0 ]; do
	case $1 in
	--out) OUT=$2; shift 2 ;;
	--out=*) OUT=${1#--out=}; shift ;;
	*) echo "usage: $0 --out DIR" >&2; exit 2 ;;
	esac
done
[ -n "$OUT" ] || { echo "usage: $0 --out DIR" >&2; exit 2; }
mkdir -p "$OUT"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
B=${top_builddir:-$SRC/_build}
R=${RGPU_REAL_DRIVER_DIR:-/usr/local/nvidia/lib64}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
S=$OUT/summary.txt
: >"$S"
say() { echo "$*" | tee -a "$S"; }
T0=$(date +%s)

[ -x "$B/daemon/rgpud" ] && [ -e "$B/client/.libs/libcuda.so.1" ] ||
	{ say "SKIP: build the tree first ($B)"; exit 77; }
"$NVCC" -O2 -arch=sm_90 -o "$OUT/tenant" "$SRC/bench/oversubscribe/tenant.cu" >"$OUT/nvcc.log" 2>&1 ||
	{ say "FAIL: nvcc (see $OUT/nvcc.log)"; exit 1; }
TEN=$OUT/tenant

real() { LD_LIBRARY_PATH=$R:${LD_LIBRARY_PATH:-} timeout 60 "$TEN" "$@"; }
info=$(real info) || { say "FAIL: no GPU ($info)"; exit 1; }
TOTAL=$(echo "$info" | awk '/TOTAL/ {print $2}')
TOTAL_MIB=$((TOTAL >> 20))
say "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1); cudaMemGetInfo total $TOTAL_MIB MiB"
bwout=$(real bw)
PIN_D2H=$(echo "$bwout" | awk '/PINNED_DTOH/ {print $2}')
PIN_H2D=$(echo "$bwout" | awk '/PINNED_HTOD/ {print $2}')
say "pinned copy bandwidth (real driver, 4 GiB, best of 3): device-to-host $PIN_D2H GB/s, host-to-device $PIN_H2D GB/s"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
DPID=""
start_rgpud() { # NAME ARGS...
	local name=$1
	LAST=$name
	shift
	PORT=$(free_port)
	: >"$OUT/rgpud-$name.log"
	# appending: the marker written before the tenants at once stays
	RGPUD_SWAP_KEEP=${KEEP:-24G} LD_LIBRARY_PATH=$R:${LD_LIBRARY_PATH:-} "$B/daemon/rgpud" --open --listen "127.0.0.1:$PORT" "$@" \
		>>"$OUT/rgpud-$name.log" 2>&1 &
	DPID=$!
	for _ in $(seq 1 100); do
		python3 -c "import socket; socket.create_connection(('127.0.0.1', $PORT), 1)" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}
stop_rgpud() {
	[ -n "$DPID" ] || return 0 # (once per case, not again at exit)
	kill "$DPID" 2>/dev/null && wait "$DPID" 2>/dev/null
	DPID=""
	# what the memory manager did, in the summary (the logs may not come back)
	local f=$OUT/rgpud-$LAST.log
	[ -f "$f" ] || return 0
	say "  $LAST: $(grep -c 'swapped out' "$f") evictions, $(grep -c 'swapped in' "$f") restores, $(grep -c 'eviction asked by rgpud failed' "$f") failed evictions"
	# per switch: what each eviction and restore cost, and why requests
	# waited (the part after the marker: the tenants at once)
	python3 "$SRC/bench/oversubscribe/switches.py" --after "---- at once" --timeline 24 "$f" 2>&1 |
		sed 's/^/    /' | tee -a "$S"
}
trap 'stop_rgpud; kill $(jobs -p) 2>/dev/null' EXIT

# tenants NAME MIB ITERS PASSES HOST_MS N MODE(seq|conc): wall seconds in WALL,
# failures in BAD
tenants() {
	local name=$1 mib=$2 it=$3 pa=$4 host=$5 n=$6 mode=$7 i p pids="" t0 t1 st
	BAD=0
	[ "$mode" = conc ] && echo "---- at once" >>"$OUT/rgpud-$LAST.log"
	t0=$(date +%s.%N)
	for i in $(seq 1 "$n"); do
		LD_LIBRARY_PATH=$B/client/.libs:${LD_LIBRARY_PATH:-} RGPU_SERVERS=127.0.0.1:$PORT/0 \
			timeout 200 "$TEN" run "$mib" "$it" "$pa" "$host" >"$OUT/$name-$i.out" 2>&1 &
		if [ "$mode" = seq ]; then
			wait $! || BAD=$((BAD + 1))
		else
			pids="$pids $!"
			sleep 0.5 # in order of arrival
		fi
	done
	for p in $pids; do wait "$p" || BAD=$((BAD + 1)); done
	t1=$(date +%s.%N)
	WALL=$(python3 -c "print('%.2f' % ($t1 - $t0))")
	for i in $(seq 1 "$n"); do
		grep -q "RESULT ok" "$OUT/$name-$i.out" || { BAD=$((BAD + 1)); say "  $name-$i: $(tail -n 2 "$OUT/$name-$i.out" | tr '\n' ' ')"; }
	done
}

# phases NAME N: each tenant's start (READY: its allocations done), GPU
# phases and end, times from its own start: a GPU phase much longer than
# alone waited for its memory to come back
phases() {
	local i
	for i in $(seq 1 "$2"); do
		say "  $1-$i: $(awk '/^READY/ {printf "ready at %s s; GPU phases", $2} /^PHASE/ {printf " %s", $4} /^TIME/ {printf "; done at %s s", $2}' "$OUT/$1-$i.out" 2>/dev/null)"
	done
}

pct() { echo $((TOTAL_MIB * $1 / 100)); }
RC=0
# Host memory (128 GiB on the H100 machine) bounds what may be swapped out
# plus what restored sessions keep for their next eviction
# (RGPUD_SWAP_KEEP, per session): set per case below.

# ---- two sessions of 60% each, swap and wait
# pair NAME ITERS WHAT [RGPUD ARGS...]: two tenants of 60% at once on a
# fresh rgpud; their phases shown where swapping was expected
KEEP=${OVERSUB_PAIR_KEEP:-48G}
want() { [ -z "${OVERSUB_CASES:-}" ] || [[ " $OVERSUB_CASES " == *" $1 "* ]]; }
pair() {
	local name=$1 it=$2 what=$3
	shift 3
	want "$name" || return 0
	if start_rgpud "$name" "$@"; then
		tenants "$name" "$(pct 60)" "$it" 20 1500 2 conc
		say "$name: two sessions x 60% $what: $([ $BAD = 0 ] && echo 'both completed, data intact' || echo "FAILED ($BAD)") in $WALL s"
		[ "$name" = pair_wait ] || phases "$name" 2
		[ $BAD = 0 ] || RC=1
	else
		say "$name: rgpud did not start"; RC=1
	fi
	stop_rgpud
}
pair pair_swap 8 "under swap" --memory-wait=30
# the same pair taking turns every few seconds (--memory-wait=16: a
# quantum of at most 8 s, and a waiter's 8 s plus a first eviction into
# fresh host memory stay within the wait): after each session's first
# eviction the host copies it keeps are ready, so the later evictions show
# the steady state's swap-out bandwidth
pair pair_turns 8 "taking turns (quantum at most 8 s)" --memory-wait=16
pair pair_wait 2 "under wait" --memory-policy=wait --memory-wait=120

# ---- alternating tenants: at once (swap) against one after another
alt() { # NAME PCT N PASSES KEEP
	local name=$1 p=$2 n=$3 pa=$4 seq conc
	want "$name" || return 0
	KEEP=$5
	start_rgpud "$name" || { say "$name: rgpud did not start"; RC=1; return; }
	tenants "$name-seq" "$(pct "$p")" 3 "$pa" 2000 "$n" seq
	seq=$WALL; local bad=$BAD
	tenants "$name-conc" "$(pct "$p")" 3 "$pa" 2000 "$n" conc
	conc=$WALL; bad=$((bad + BAD))
	stop_rgpud
	local ratio
	ratio=$(python3 -c "print('%.2f' % ($conc / $seq))")
	say "$name: $n tenants x $p% ($((n * p))% of the GPU), 3 x (GPU phase, 2 s host phase): one after another $seq s, at once $conc s: ratio $ratio (target <= 1.20)$([ $bad = 0 ] && echo ', data intact' || echo ", $bad FAILED")"
	phases "$name-conc" "$n"
	[ $bad = 0 ] || RC=1
}
alt alt2 75 2 25 40G
alt alt4 30 4 40 10G

# ---- swap bandwidth from the logs
python3 - "$OUT" "$PIN_D2H" "$PIN_H2D" <<'EOF' | tee -a "$S"
import glob, re, sys, statistics
out, d2h, h2d = sys.argv[1], float(sys.argv[2] or 0), float(sys.argv[3] or 0)
outs = {"prepared now": [], "kept from before": []}
ins = []
for f in sorted(glob.glob(out + "/rgpud-*.log")):
    for l in open(f, errors="replace"):
        m = re.search(r"swapped out (\d+) bytes .* in ([0-9.]+) s \(([0-9.]+) GB/s, host memory (prepared now|kept from before)", l)
        if m and int(m.group(1)) >= 1 << 30:
            outs[m.group(4)].append(float(m.group(3)))
        # this build's lines: how much host memory was ready beforehand
        m = re.search(r"swapped out (\d+) bytes .* in ([0-9.]+) s \(([0-9.]+) GB/s; host memory: (\d+) bytes ready, (\d+) prepared now", l)
        if m and int(m.group(1)) >= 1 << 30:
            outs["prepared now" if int(m.group(5)) else "kept from before"].append(float(m.group(3)))
        m = re.search(r"swapped in (\d+) bytes .*\(copy ([0-9.]+) s, ([0-9.]+) GB/s", l)
        if m and int(m.group(1)) >= 1 << 30:
            ins.append(float(m.group(3)))
def show(what, v, ref):
    if not v:
        print("%s: no event of 1 GiB or more" % what)
        return
    med = statistics.median(v)
    print("%s: %d events, median %.1f GB/s (min %.1f, max %.1f) = %.0f%% of pinned %.1f GB/s" %
          (what, len(v), med, min(v), max(v), 100 * med / ref if ref else 0, ref))
show("swap-out, host memory all ready beforehand (kept or prepared ahead)", outs["kept from before"], d2h)
show("swap-out, some host memory prepared during the eviction", outs["prepared now"], d2h)
show("swap-in (copy)", ins, h2d)
EOF
say "elapsed $(( $(date +%s) - T0 )) s"
exit $RC
