#!/bin/bash
# The rgpu demo: brings up a three-node Slurm on this machine (network
# namespaces on a private bridge, 10.77.0.0/24; one node without GPUs, two
# GPU nodes each running `rgpud --emulated` with two emulated GPUs), submits
# a job to the GPU-less node asking for two remote GPUs, prints what it got,
# and tears everything down.  Needs root, iproute2, Debian's slurmctld,
# slurmd and munge; on a fresh machine it installs them and builds rgpu
# into _build/ first.
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

. "$SRC/test/slurm/cluster.sh"
trap 'rc_down' EXIT
trap 'exit 1' INT TERM

echo "== starting munge, slurmctld, 3 slurmd (cpu1, gpu1, gpu2) and 2 rgpud"
rc_up "$SRC" "$BUILD" 9>&- || { echo "demo.sh: the cluster did not come up"; exit 1; }
gcc -std=gnu11 -O1 -o "$RC_DIR/rgpu_probe" "$SRC/test/slurm/rgpu_probe.c" -ldl || exit 1
sinfo -N -o '%N %t %G'
echo
echo "== sbatch -w cpu1 --gres=rgpu:2   (cpu1 has no GPU)"
job=$(sbatch --parsable --uid=nobody -w cpu1 --gres=rgpu:2 --chdir="$RC_DIR/work" \
	-o "$RC_DIR/work/demo.out" --wrap "
echo \"node: \$SLURMD_NODENAME   RGPU_SERVERS=\$RGPU_SERVERS\"
$BUILD/tools/rgpu status
echo
echo 'what a CUDA program in the job sees:'
$RC_DIR/rgpu_probe")
for t in $(seq 1 120); do
	[ -z "$(squeue -h -j "$job" 2>/dev/null)" ] && break
	sleep 0.5
done
cat "$RC_DIR/work/demo.out"
echo
echo "== done; tearing the cluster down"
