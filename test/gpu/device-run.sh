#!/bin/bash
# Everything that needs a real GPU, in one run on the GPU machine: the GPU
# suite, the compatibility corpus and the benchmark, against a build made on
# a CI-type machine (Debian 12) and carried over as _build, with the
# libraries that machine lacks in .devcarry/lib (libjson-c.so.5, ...).
#
#   OUT=DIR test/gpu/device-run.sh [gpu] [compat] [bench] [threads] [PATH.sh...]
#   (default: gpu compat bench; PATH.sh: any script of the tree, run as
#   `bash PATH.sh --out DIR`; every part runs at most RGPU_PART_TIMEOUT
#   seconds, default 540 for scripts, 900 for the GPU suite)
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
	# (the build's own record: the checkout here may be older than it)
	echo "rgpu: $(cat _build/revision.txt 2>/dev/null || git -C "$src" describe --always --dirty 2>/dev/null || echo '?')"
	ldd _build/daemon/rgpud | grep -i "not found" && echo "rgpud: missing libraries"
} >"$S" 2>&1
threads_part() {
	local R=${RGPU_REAL_DRIVER_DIR:-/usr/local/nvidia/lib64} E=_build/test/e2e fail=0 pass=0 p1 p2 port pids=""
	p1=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	p2=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	for port in $p1 $p2; do
		LD_LIBRARY_PATH=$R:$LD_LIBRARY_PATH _build/daemon/rgpud --open --listen 127.0.0.1:$port \
			>"$L/threads-rgpud-$port.log" 2>&1 &
		pids="$pids $!"
	done
	sleep 3
	for tp in tcp auto; do
		for i in 1 2 3 4 5; do
			for t in "t_threads" "t_sync_threads" "t_shm_parallel"; do
				srv=127.0.0.1:$p1
				[ $t = t_shm_parallel ] && srv=127.0.0.1:$p1,127.0.0.1:$p2
				if RGPU_TRANSPORT=$tp RGPU_SERVERS=$srv LD_LIBRARY_PATH=_build/client/.libs:$LD_LIBRARY_PATH \
				   timeout 120 "$E/$t" >"$L/threads-$t-$tp-$i.out" 2>&1; then
					pass=$((pass + 1)); echo "PASS $t $tp #$i"
				else
					fail=$((fail + 1)); echo "FAIL $t $tp #$i: $(tail -2 "$L/threads-$t-$tp-$i.out" | tr '\n' ' ')"
				fi
			done
		done
	done
	kill $pids 2>/dev/null; wait
	echo "threads: $pass passed, $fail failed"
	[ $fail = 0 ]
}

for p in $parts; do
	t0=$(date +%s)
	case $p in
	gpu)
		RGPU_RESULTS_DIR=$L/gpu RGPU_GPU_LOGDIR=$L/gpu/logs timeout "${RGPU_PART_TIMEOUT:-900}" \
			bash test/gpu/run-gpu.sh >"$L/gpu.txt" 2>&1
		rc=$? ;;
	compat)
		bash test/compat/run-compat.sh --out "$L/compat" >"$L/compat.txt" 2>&1
		rc=$? ;;
	bench)
		bash bench/run-bench.sh --out "$L/bench" >"$L/bench.txt" 2>&1
		rc=$? ;;
	threads)
		# the multi-threaded and copy-path e2e programs on the real GPU,
		# each 5 times over TCP and the same-host path
		threads_part >"$L/threads.txt" 2>&1
		rc=$? ;;
	*.sh)
		# any GPU script of the tree (a benchmark, a peer suite):
		# run as `bash SCRIPT --out DIR`, its output kept like the others
		n=$(basename "$p" .sh)
		if [ -f "$p" ]; then
			timeout "${RGPU_PART_TIMEOUT:-540}" bash "$p" --out "$L/$n" >"$L/$n.txt" 2>&1
			rc=$?
		else
			echo "no such script: $p" >"$L/$n.txt"; rc=127
		fi
		p=$n ;;
	*) echo "unknown part $p" >>"$S"; continue ;;
	esac
	echo "== $p: exit $rc in $(( $(date +%s) - t0 )) s" >>"$S"
	tail -25 "$L/$p.txt" >>"$S"
	# after every part, so that a run cut off later still brings back
	# the logs of the parts it finished
	tar -C "$W" -czf "$OUT/logs.tar.gz" logs 2>/dev/null
	cp "$S" "$OUT/summary.txt" 2>/dev/null
	# the part's tables and summaries on their own as well: a log tarball
	# over the transfer limit does not come back (the cuda-samples table
	# was lost that way)
	if [ -d "$L/$p" ]; then
		find "$L/$p" -maxdepth 2 -type f \( -name '*.md' -o -name '*summary*.txt' \) -size -2M |
			tar -czf "$OUT/$p-results.tar.gz" -T - 2>/dev/null
	fi
done
cat "$S"
