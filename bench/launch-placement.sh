#!/bin/bash
# Where the processes run against the launch rate (issue 13: launches
# through rgpud at >= 90% of local).  A diagnosis, not a bar
# (run-bench.sh holds the bars): interleaved rounds of bw_lat's
# launch_async (batches of 200 launches and a sync, per launch) locally,
# over TCP and on the same host, under several placements of rgpud (its
# session worker inherits the CPUs) and the program:
#   free      nothing pinned (what the bars measure)
#   apart     rgpud on one CPU near the GPU, the program on another
#             physical core near it; the local program on rgpud's CPU
#   siblings  rgpud and the program on the two hyperthreads of one core
#   far       rgpud on a CPU of another NUMA node (when there is one)
#   apart-spin  apart, the client spinning for the sync's reply
#               (RGPU_SYNC_SPIN_US=1000)
#   random    nothing pinned, rgpud --worker-layout=random (its workers'
#             address space randomised, as a program's is)
#   noburst   nothing pinned, RGPUD_BURST_SPIN_US=0 (the worker sleeps
#             whenever a burst of launches runs dry, instead of spinning)
# and, unpinned, the local driver in a context of its own (cuCtxCreate,
# as rgpud once made a session's) and without address-space
# randomisation (setarch -R, as rgpud lays out its workers) against the
# plain local run.
# It prints the machine's topology first (CPUs, NUMA nodes, the GPU's
# local CPUs, nvidia-smi topo -m).
#
#   bash bench/launch-placement.sh [--out DIR]
#
# Environment: top_builddir (default _build beside the sources),
# RGPU_REAL_DRIVER_DIR (/usr/local/nvidia/lib64), PLACE_ROUNDS (5),
# PLACE_GPU (0), PLACE_ONLY (the placements to run, e.g. "free random";
# default all).
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
B=${top_builddir:-$src/_build}
REAL=${RGPU_REAL_DRIVER_DIR:-/usr/local/nvidia/lib64}
OUT=/tmp/rgpu-launch-placement
[ "${1:-}" = --out ] && OUT=$2
ROUNDS=${PLACE_ROUNDS:-5}
GPU=${PLACE_GPU:-0}
mkdir -p "$OUT"
rm -f "$OUT/rounds.txt"
[ -d "$src/.devcarry/lib" ] && export LD_LIBRARY_PATH=$src/.devcarry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
BW=$B/bench/bw_lat
CL=$B/client/.libs
[ -x "$BW" ] && [ -x "$B/daemon/rgpud" ] || { echo "SKIP: not built in $B"; exit 77; }
[ -e "$REAL/libcuda.so.1" ] || { echo "SKIP: no driver in $REAL"; exit 77; }

# expand a cpulist ("0-3,8") to one CPU per word
cpus() { tr ',' '\n' <<<"$1" | while IFS=- read -r a b; do seq "$a" "${b:-$a}"; done | tr '\n' ' '; }
siblings() { cpus "$(cat /sys/devices/system/cpu/cpu$1/topology/thread_siblings_list 2>/dev/null || echo "$1")"; }

echo "launch-placement: $(date -u '+%F %T UTC'), $(nproc) CPUs"
lscpu 2>/dev/null | grep -E '^(Model name|Socket|Core|Thread|NUMA)' | sed 's/^/  /'
nvidia-smi topo -m 2>/dev/null | sed 's/^/  /'
bus=$(nvidia-smi -i "$GPU" --query-gpu=pci.bus_id --format=csv,noheader 2>/dev/null | tr 'A-F' 'a-f')
bus=${bus: -12}
near=$(cat "/sys/bus/pci/devices/$bus/local_cpulist" 2>/dev/null || echo "0-$(($(nproc) - 1))")
node=$(cat "/sys/bus/pci/devices/$bus/numa_node" 2>/dev/null || echo -1)
echo "  GPU $GPU at $bus: NUMA node $node, local CPUs $near"
allowed=" $(cpus "$(taskset -pc $$ | sed 's/.*: //')") "
near_list=()
for c in $(cpus "$near"); do [[ $allowed == *" $c "* ]] && near_list+=("$c"); done
# A: the second CPU near the GPU (the first often takes interrupts); S: its
# hyperthread; C: a CPU near the GPU on another core; F: one far away
A=${near_list[1]:-${near_list[0]}}
S=""
for c in $(siblings "$A"); do [ "$c" != "$A" ] && S=$c; done
C=""
for c in "${near_list[@]}"; do
	[[ " $(siblings "$A") " == *" $c "* ]] && continue
	C=$c
	break
done
F=""
for c in $allowed; do [[ " $(cpus "$near") " == *" $c "* ]] || { F=$c; break; }; done
echo "  chosen: rgpud on CPU $A; the program on CPU ${C:-none} (another core), ${S:-none} (its hyperthread); far CPU ${F:-none}"

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill $p 2>/dev/null; done' EXIT
declare -A PORT=() SRV=() CLI=() LOC=() CENV=()
# placement NAME SERVER_CPU CLIENT_CPU LOCAL_CPU [client env]
placement() {
	local name=$1 scpu=$2 ccpu=$3 lcpu=$4
	shift 4
	[ -z "${PLACE_ONLY:-}" ] || [[ " $PLACE_ONLY " == *" $name "* ]] || return
	[ -n "$scpu" ] || [ "$name" = free ] || [ "$name" = random ] || [ "$name" = noburst ] ||
		{ echo "  (no $name placement here)"; return; }
	local p
	p=$(port)
	local layout=()
	[ "$name" = random ] && layout=(--worker-layout=random)
	local senv=()
	[ "$name" = noburst ] && senv=(RGPUD_BURST_SPIN_US=0)
	env ${senv[@]+"${senv[@]}"} RGPUD_OP_STATS=1 LD_LIBRARY_PATH=$REAL:${LD_LIBRARY_PATH:-} ${scpu:+taskset -c $scpu} \
		"$B/daemon/rgpud" --open --listen 127.0.0.1:$p "${layout[@]}" >"$OUT/rgpud-$name.log" 2>&1 &
	PIDS+=($!)
	PORT[$name]=$p SRV[$name]=$scpu CLI[$name]=$ccpu LOC[$name]=$lcpu CENV[$name]="$*"
	ORDER+=("$name")
}
ORDER=()
placement free "" "" ""
placement apart "$A" "$C" "$A"
[ -n "$S" ] && placement siblings "$A" "$S" "$A"
[ -n "$F" ] && placement far "$F" "$C" "$F"
[ -n "$C" ] && placement apart-spin "$A" "$C" "$A" RGPU_SYNC_SPIN_US=1000
# session workers laid out at random (rgpud --worker-layout=random), as a
# program is: does the fixed layout of a worker cost its launches?
placement random "" "" ""
placement noburst "" "" ""
for n in "${ORDER[@]}"; do
	for _ in $(seq 1 100); do
		(exec 3<>/dev/tcp/127.0.0.1/${PORT[$n]}) 2>/dev/null && break
		sleep 0.1
	done
done

# one PLACEMENT PATH: the median us per launch of one bw_lat run
one() {
	local n=$1 path=$2 cpu env=()
	local extra=() pre=()
	if [ "$path" = driver ] || [ "$path" = owned ] || [ "$path" = fixed ]; then
		cpu=${LOC[$n]}
		env=(LD_LIBRARY_PATH=$REAL:${LD_LIBRARY_PATH:-})
		[ "$path" = owned ] && extra=(--own-ctx)
		# the program laid out as rgpud lays out its workers (no
		# address-space randomisation)
		[ "$path" = fixed ] && command -v setarch >/dev/null && pre=(setarch "$(uname -m)" -R)
	else
		cpu=${CLI[$n]}
		env=(RGPU_SERVERS=127.0.0.1:${PORT[$n]}/$GPU RGPU_TRANSPORT=$path LD_LIBRARY_PATH=$CL:${LD_LIBRARY_PATH:-} ${CENV[$n]})
	fi
	env "${env[@]}" ${cpu:+taskset -c $cpu} ${pre[@]+"${pre[@]}"} "$BW" --no-bw --only launch_async --min-time 0.5 \
		--device "$([ "$path" = driver ] || [ "$path" = owned ] || [ "$path" = fixed ] && echo "$GPU" || echo 0)" \
		--target "$n-$path" "${extra[@]}" \
		2>>"$OUT/bw_lat.err" | awk '$1 == "launch_async" { print $2 }'
}
echo "us per launch (batches of 200 and a sync), $ROUNDS interleaved rounds:"
for r in $(seq 1 "$ROUNDS"); do
	for n in "${ORDER[@]}"; do
		# the local driver; rgpud over TCP; rgpud on the same host;
		# (free) the local driver in a context of its own, as rgpud's
		paths="driver tcp local"
		[ "$n" = free ] && paths="$paths owned fixed"
		for path in $paths; do
			v=$(one "$n" "$path")
			echo "$r $n $path ${v:-nan}" >>"$OUT/rounds.txt"
		done
	done
done
python3 - "$OUT/rounds.txt" <<'PY'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
by = {}
for r, n, path, v in rows:
    if v != "nan":
        by.setdefault((n, path), {})[r] = float(v)
order = []
for _, n, _, _ in rows:
    if n not in order:
        order.append(n)
for n in order:
    loc = by.get((n, "driver"), {})
    line = "  %-11s local %5.2f" % (n, st.median(loc.values()) if loc else float("nan"))
    for path, word in (("tcp", "tcp"), ("local", "same host"), ("owned", "driver, own context"),
                       ("fixed", "driver, no ASLR")):
        d = by.get((n, path), {})
        # per round: local / rgpu (the rate ratio), then the median
        ratios = [loc[r] / d[r] for r in d if r in loc]
        if d:
            line += "  %s %5.2f (%.1f%%, rounds %.0f-%.0f%%)" % (
                word, st.median(d.values()), 100 * st.median(ratios) if ratios else float("nan"),
                100 * min(ratios) if ratios else 0, 100 * max(ratios) if ratios else 0)
    print(line)
PY
for n in "${ORDER[@]}"; do
	kill "${PIDS[@]}" 2>/dev/null
done
wait 2>/dev/null
echo "rgpud's launches (op stats: handling, of it the driver's call):"
for n in "${ORDER[@]}"; do
	printf '  %-11s ' "$n"
	grep -o "LAUNCH [0-9]* x [0-9.]* us (driver [0-9.]* us)" "$OUT/rgpud-$n.log" | tail -3 | tr '\n' ' '
	echo
	# how often the worker found no call waiting (slept), per session
	grep -o "waiting for the client ([^)]*)" "$OUT/rgpud-$n.log" | tail -3 | sed 's/^/              /'
done
exit 0
