#!/bin/bash
# Step time of a training step's call mix as the network's round trip
# grows (docs/benchmarks.md, "Real networks"): rgpud --emulated behind an
# emulated link, on a CPU machine.
#
#   bash bench/netem/run.sh [--out DIR] [--rtts "0 10 20 50 100"] [--gbps "10 100"]
#
# The link: tc netem on a veth pair between two network namespaces where
# the kernel has it (root); otherwise bench/netem/linkemu, a relay that
# delays each piece by rtt/2 and paces it at the link rate.  For each
# bandwidth and round trip, bench/netem/step_mix runs the GPT step's mix
# (467 requests without a reply, 422 kB, 1 round trip: after issue 13)
# and the same with 54 round trips (before), and measures one round trip
# and the copy bandwidth through the link.  bench/netem/model.py then sets
# each measured step beside the model
#   step = base + round trips x RTT + bytes / bandwidth.
# Writes DIR/netem.jsonl and DIR/model.txt.  A minute or two.
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
: "${top_builddir:=$src/_build}"
: "${PYTHON:=python3}"
OUT=${OUT_DIR:-$src/bench/netem/results}
RTTS="0 10 20 50 100"
GBPS="10 100"
STEPS=${STEPS:-30}
while [ $# -gt 0 ]; do
	case $1 in
	--out) OUT=${2:?}; shift ;;
	--rtts) RTTS=${2:?}; shift ;;
	--gbps) GBPS=${2:?}; shift ;;
	*) echo "netem/run.sh: unknown argument '$1'" >&2; exit 2 ;;
	esac
	shift
done
B=$top_builddir
for f in "$B/daemon/rgpud" "$B/bench/netem/linkemu" "$B/bench/netem/step_mix" "$B/client/.libs/libcuda.so.1" "$B/emu/.libs/librgpu-emu.so"; do
	[ -e "$f" ] || { echo "SKIP: not built: $f"; exit 77; }
done
mkdir -p "$OUT" || exit 1
OUT=$(cd "$OUT" && pwd)
J=$OUT/netem.jsonl
: >"$J"
port() { "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PIDS=""
cleanup() { for p in $PIDS; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT
trap 'exit 130' INT TERM
up() { # port: wait until it accepts
	for _ in $(seq 1 100); do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		sleep 0.05
	done
	return 1
}
have_netem=0
if [ "$(id -u)" = 0 ] && command -v tc >/dev/null && command -v ip >/dev/null; then
	ns=rgpunetem$$
	if ip netns add "${ns}t" 2>/dev/null; then
		ip link add "vt$$" type veth peer name "vu$$" 2>/dev/null &&
			ip link set "vt$$" netns "${ns}t" &&
			tc -n "${ns}t" qdisc add dev "vt$$" root netem delay 5us 2>/dev/null && have_netem=1
		ip netns del "${ns}t" 2>/dev/null
		ip link del "vu$$" 2>/dev/null
	fi
fi
echo "netem: link emulated by $([ $have_netem = 1 ] && echo "tc netem (veth between namespaces)" || echo "bench/netem/linkemu (this kernel has no tc netem)")"
[ $have_netem = 1 ] && echo "netem: (tc netem found, but this script drives linkemu only; see docs)"
SP=$(port)
RGPU_EMU_LIB=$B/emu/.libs/librgpu-emu.so "$B/daemon/rgpud" --emulated --open \
	--listen "127.0.0.1:$SP" >"$OUT/rgpud.log" 2>&1 &
PIDS="$PIDS $!"
up "$SP" || { echo "FAIL: rgpud did not start"; exit 1; }
STATUS=0
for g in $GBPS; do
	for r in $RTTS; do
		LP=$(port)
		"$B/bench/netem/linkemu" --listen "$LP" --to "127.0.0.1:$SP" --rtt-us "$r" --gbps "$g" \
			>"$OUT/linkemu.log" 2>&1 &
		lpid=$!
		up "$LP" || { echo "FAIL: linkemu did not start"; STATUS=1; kill $lpid; continue; }
		for mix in after before; do
			trips=1
			[ $mix = before ] && trips=54
			if ! RGPU_TRANSPORT=tcp RGPU_SERVERS="127.0.0.1:$LP/0" LD_LIBRARY_PATH=$B/client/.libs \
				timeout 120 "$B/bench/netem/step_mix" --steps "$STEPS" --trips $trips \
				--label "gbps=$g rtt_us=$r mix=$mix" --json "$J" >>"$OUT/step_mix.out" 2>&1; then
				echo "FAIL: step_mix ($g Gb/s, $r us, $mix)"; tail -3 "$OUT/step_mix.out"; STATUS=1
			fi
		done
		kill $lpid 2>/dev/null
		wait $lpid 2>/dev/null
		echo "  $g Gb/s, +$r us round trip: done"
	done
done
"$PYTHON" "$here/model.py" "$J" | tee "$OUT/model.txt" || STATUS=1
exit $STATUS
