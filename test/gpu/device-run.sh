#!/bin/bash
# Everything that needs a real GPU, in one run on the GPU machine: the GPU
# suite, the compatibility corpus and the benchmark, against a build made on
# a CI-type machine (Debian 12) and carried over as _build, with the
# libraries that machine lacks in .devcarry/lib (libjson-c.so.5, ...).
#
#   OUT=DIR test/gpu/device-run.sh [gpu] [compat] [bench]   (default: all)
#
# rgpud runs as root there and its session workers drop to the served uid
# (nobody for --open over TCP), so the tree is copied to a world-readable
# place first.  Writes DIR/summary.txt and DIR/logs.tar.gz.
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-/tmp/rgpu-device-out}
parts=${*:-gpu compat bench}
mkdir -p "$OUT"
W=/tmp/rgpu-device
rm -rf "$W" && mkdir -p "$W"
cp -a "$src/." "$W/src" || exit 1
chmod -R a+rX "$W"
cd "$W/src" || exit 1
export LD_LIBRARY_PATH=$W/src/.devcarry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export top_srcdir=$W/src top_builddir=$W/src/_build
L=$W/logs
mkdir -p "$L"
S=$OUT/summary.txt
{
	echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
	echo "rgpu: $(git -C "$src" describe --always --dirty 2>/dev/null || echo '?')"
	ldd _build/daemon/rgpud | grep -i "not found" && echo "rgpud: missing libraries"
} >"$S" 2>&1
for p in $parts; do
	t0=$(date +%s)
	case $p in
	gpu)
		RGPU_RESULTS_DIR=$L/gpu RGPU_GPU_LOGDIR=$L/gpu/logs bash test/gpu/run-gpu.sh >"$L/gpu.txt" 2>&1
		rc=$? ;;
	compat)
		bash test/compat/run-compat.sh --out "$L/compat" >"$L/compat.txt" 2>&1
		rc=$? ;;
	bench)
		bash bench/run-bench.sh --out "$L/bench" >"$L/bench.txt" 2>&1
		rc=$? ;;
	*) echo "unknown part $p" >>"$S"; continue ;;
	esac
	echo "== $p: exit $rc in $(( $(date +%s) - t0 )) s" >>"$S"
	tail -25 "$L/$p.txt" >>"$S"
done
tar -C "$W" -czf "$OUT/logs.tar.gz" logs 2>/dev/null
cat "$S"
