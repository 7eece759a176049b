#!/bin/bash
# JAX's jitted training step (test/gpu/multi/jax_step.py, XLA's defaults:
# command buffers) through rgpud on the same host, ROUNDS times, each on a
# fresh rgpud: a flaky failure (XLA's graph tracing refused) shows as a
# count, with the rgpud log of each round.
#
#   bash test/gpu/jax-probe.sh --out DIR        (ROUNDS, default 4)
set -u
OUT=/tmp/rgpu-jax-probe
while [ $# -gt 0 ]; do
	case $1 in
	--out) OUT=$2; shift 2 ;;
	*) echo "usage: bash test/gpu/jax-probe.sh --out DIR"; exit 2 ;;
	esac
done
mkdir -p "$OUT"
src=$(cd "$(dirname "$0")/../.." && pwd)
B=${top_builddir:-$src/_build}
R=${RGPU_REAL_DRIVER_DIR:-/usr/local/nvidia/lib64}
C=${CUDA_HOME:-/usr/local/cuda}
fails=0
for round in $(seq "${ROUNDS:-4}"); do
	PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	LD_LIBRARY_PATH=$R${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$B/daemon/rgpud" --open \
		--listen "127.0.0.1:$PORT" --log-level=debug >"$OUT/rgpud-$round.log" 2>&1 &
	P=$!
	sleep 1.5
	RGPU_SERVERS=127.0.0.1:$PORT/0 XLA_PYTHON_CLIENT_PREALLOCATE=false \
		LD_LIBRARY_PATH=$B/client/.libs:$B/nvml/.libs:$C/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
		timeout 120 python3 "$src/test/gpu/multi/jax_step.py" >"$OUT/jax-$round.log" 2>&1
	rc=$?
	n=$(grep -c '^LOSS' "$OUT/jax-$round.log")
	[ "$rc" = 0 ] && [ "$n" -gt 0 ] || fails=$((fails + 1))
	echo "round $round: exit $rc, $n losses; $(grep -c 'GRAPH_OP failed' "$OUT/rgpud-$round.log") GRAPH_OP failure(s) in rgpud's log"
	kill "$P"; wait "$P" 2>/dev/null
done
echo "jax-probe: $fails of ${ROUNDS:-4} rounds failed"
[ "$fails" = 0 ]
