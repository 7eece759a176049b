#!/bin/bash
# The rgpu demo: brings up a three-node Slurm on this machine (network
# namespaces on a private bridge, 10.77.0.0/24; one node without GPUs, two
# GPU nodes each running `rgpud --emulated` with two emulated GPUs), submits
# a job to the GPU-less node asking for two remote GPUs, which lists them
# (rgpu status) and runs contrib/demo_job.c on each (data in, a kernel,
# data out, checked), then two slices with compute shares 75 and 25 that
# share one GPU, and shows what `rgpu top` says about them; tears
# everything down and ends with
# "demo: PASSED: ..." or "demo: FAILED: ..." (exit 0 or 1).  Needs root
# (a user goes through sudo), iproute2, Debian's slurmctld, slurmd and
# munge; on a fresh machine it installs them and builds rgpu into _build/
# first.
#
#   contrib/demo.sh [BUILD_DIR]
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/.." && pwd)
BUILD=${1:-}
if [ -z "$BUILD" ]; then
	if [ -e "$SRC/_build/spank/.libs/spank_rgpu.so" ]; then BUILD=$SRC/_build; else BUILD=$SRC; fi
fi
# root for the network namespaces and slurmd: a user goes through sudo (a
# fresh Debian image used as root has no sudo and needs none)
if [ "$(id -u)" != 0 ]; then
	command -v sudo >/dev/null ||
		{ echo "demo.sh: needs root (network namespaces, slurmd), and there is no sudo"; exit 1; }
	echo "== not root: running again through sudo"
	exec sudo bash "$HERE/demo.sh" "$@"
fi
# a fresh machine: install the packages and build first (into _build)
if [ ! -e "$BUILD/spank/.libs/spank_rgpu.so" ] && [ -z "${1:-}" ]; then
	echo "== rgpu is not built yet: test/run-all.sh installs what is missing and builds"
	RGPU_BUILD_ONLY=1 bash "$SRC/test/run-all.sh" || { echo "demo.sh: the build failed"; exit 1; }
	BUILD=$SRC/_build
fi
BUILD=$(cd "$BUILD" && pwd)
for f in spank/.libs/spank_rgpu.so daemon/rgpud client/.libs/libcuda.so.1 tools/rgpu; do
	[ -e "$BUILD/$f" ] || { echo "demo.sh: $BUILD/$f is missing: build first"; exit 1; }
done
exec 9>/run/rgpu-slurm-test.lock
flock -n 9 || { echo "demo.sh: a test/slurm run is in progress"; exit 1; }

# the demo needs no accounting database (test/slurm/run.sh starts one)
: "${RC_DBD:=0}"
. "$SRC/test/slurm/cluster.sh"
trap 'rc_down' EXIT
trap 'exit 1' INT TERM

echo "== starting munge, slurmctld, 3 slurmd (cpu1, gpu1, gpu2) and 2 rgpud"
rc_up "$SRC" "$BUILD" 9>&- || { echo "demo.sh: the cluster did not come up"; exit 1; }
# the job's CUDA program (its kernel is PTX text: no nvcc needed)
gcc -std=gnu11 -O1 -I"${CUDA_HOME:-/usr/local/cuda}/include" -o "$RC_DIR/demo_job" \
	"$SRC/contrib/demo_job.c" "$BUILD/client/.libs/libcuda.so.1" ||
	{ echo "demo.sh: cannot build contrib/demo_job.c"; exit 1; }
chmod 755 "$RC_DIR/demo_job"
sinfo -N -o '%N %t %G'
echo
echo "== sbatch -w cpu1 --gres=rgpu:2   (cpu1 has no GPU)"
job=$(sbatch --parsable --uid=nobody -w cpu1 --gres=rgpu:2 --chdir="$RC_DIR/work" \
	-o "$RC_DIR/work/demo.out" --wrap "
echo \"node: \$SLURMD_NODENAME (no GPU)   RGPU_SERVERS=\$RGPU_SERVERS\"
echo
echo '\$ rgpu status'
$BUILD/tools/rgpu status
echo
echo '\$ demo_job     (a CUDA program: on each GPU, data in, a kernel, data out, checked)'
$RC_DIR/demo_job")
[ -n "$job" ] || { echo "demo: FAILED: sbatch did not take the job"; exit 1; }
echo "   job $job submitted; waiting for it (60 s at most)"
done_=0
for t in $(seq 1 120); do
	[ -z "$(squeue -h -j "$job" 2>/dev/null)" ] && { done_=1; break; }
	sleep 0.5
done
echo
sed 's/^/   | /' "$RC_DIR/work/demo.out" 2>/dev/null
echo
# the closing line: what the job showed
result=$(grep '^RESULT: ' "$RC_DIR/work/demo.out" 2>/dev/null | tail -1)

# ---- two slices sharing one GPU, and what `rgpu top` says about them
echo "== two slices of one GPU: sbatch --rgpu-mem=256M --rgpu-share=75, and --rgpu-share=25"
share_ok=0
sa=$(sbatch --parsable --uid=nobody -w cpu1 --rgpu-mem=256M --rgpu-share=75 --chdir="$RC_DIR/work" \
	-o "$RC_DIR/work/share75.out" --wrap "echo RGPU_SERVERS=\$RGPU_SERVERS; DEMO_SECONDS=5 $RC_DIR/demo_job 65536")
sb=$(sbatch --parsable --uid=nobody -w cpu1 --rgpu-mem=256M --rgpu-share=25 --chdir="$RC_DIR/work" \
	-o "$RC_DIR/work/share25.out" --wrap "echo RGPU_SERVERS=\$RGPU_SERVERS; DEMO_SECONDS=5 $RC_DIR/demo_job 65536")
if [ -n "$sa" ] && [ -n "$sb" ]; then
	# both jobs started (each prints its server first), then a moment of work
	for t in $(seq 1 40); do
		[ "$(cat "$RC_DIR/work/share75.out" "$RC_DIR/work/share25.out" 2>/dev/null |
			grep -c '^RGPU_SERVERS=')" = 2 ] && break
		sleep 0.5
	done
	srvs=$(sed -n 's/^RGPU_SERVERS=//p' "$RC_DIR/work/share75.out" "$RC_DIR/work/share25.out" 2>/dev/null |
		sed 's#/[0-9]*$##; s/,.*//' | sort -u)
	sleep 2
	args=()
	for s_ in $srvs; do args+=(--server "$s_"); done
	echo "   jobs $sa and $sb run on ${srvs//$'\n'/ and }"
	echo
	echo "\$ rgpu top ${args[*]} --count 1"
	"$BUILD/tools/rgpu" top "${args[@]}" --count 1 2>&1 | sed 's/^/   | /'
	"$BUILD/tools/rgpu" top "${args[@]}" --json >"$RC_DIR/work/top.json" 2>&1 &&
		python3 - "$RC_DIR/work/top.json" <<'EOF' && share_ok=1
import json, sys
s = json.load(open(sys.argv[1]))["sessions"]
shares = sorted(x["share"] for x in s)
assert shares == [25, 75], shares
assert all(x["gpu_time_ms"] >= 0 for x in s)
EOF
	for t in $(seq 1 60); do
		[ -z "$(squeue -h -j "$sa,$sb" 2>/dev/null)" ] && break
		sleep 0.5
	done
	grep -h '^RESULT: ' "$RC_DIR/work/share75.out" "$RC_DIR/work/share25.out" 2>/dev/null | sed 's/^/   | /'
	[ "$(cat "$RC_DIR/work/share75.out" "$RC_DIR/work/share25.out" 2>/dev/null |
		grep -c '^RESULT: OK')" = 2 ] || share_ok=0
fi
if [ $share_ok = 1 ]; then
	echo "   two slices shared the GPU; rgpu top showed their shares (75 and 25) and GPU time"
else
	result="RESULT: FAILED: the two slices sharing a GPU did not run, or rgpu top did not show them"
fi
echo "== done; tearing the cluster down"
rc_down >/dev/null 2>&1
trap - EXIT
if [ $done_ = 1 ] && [ "${result#RESULT: OK}" != "$result" ]; then
	echo "demo: PASSED: job $job on cpu1, a node without GPUs:${result#RESULT: OK:}"
	exit 0
fi
[ $done_ = 1 ] || result="the job did not finish in 60 s"
echo "demo: FAILED: ${result#RESULT: FAILED: } (RC_KEEP=1 contrib/demo.sh keeps the cluster's logs)"
exit 1
