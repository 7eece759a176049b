#!/bin/bash
# The Slurm mini-cluster of cluster.sh on a machine with a real NVIDIA GPU
# and no package manager (the project's GPU machine: Ubuntu 24.04, root, no
# apt, no iproute2): Slurm, munge and iproute2 come along as Debian 12 .debs,
# unpacked with dpkg -x into a private prefix under /tmp (never into /), and
# run from there.  The two GPU nodes run the real rgpud on the real driver,
# both serving GPU 0; the GPU-less node cpu1 runs the jobs:
#
#   1. --gres=rgpu:2: rgpu status, rgpu_probe, t_vecadd and t_multi
#      (test/e2e, real CUDA kernels through the rgpu client)
#   2. --rgpu-mem=2G: rgpu_probe (cuMemGetInfo reports the 2 GiB quota,
#      3 GiB is refused, 1 GiB fits) and rgpu status
#
#   test/slurm/gpu-machine.sh [BUILD_DIR]        (default: _build)
#
# RGPU_SLURM_DEBS   the .debs (default .devcarry/slurm-debs): slurmctld slurmd
#                   slurm-client slurm-wlm-basic-plugins libslurm38 munge
#                   libmunge2 iproute2 and their libraries; only the libraries
#                   this machine lacks (ldconfig -p) are put on LD_LIBRARY_PATH
# RGPU_PROBE        a prebuilt test/slurm/rgpu_probe.c where there is no gcc
#                   (default .devcarry/slurm-bin/rgpu_probe)
# RGPU_DRIVER       the CUDA driver for rgpud (/usr/local/nvidia/lib64/libcuda.so.1)
# RGPU_LOG_DIR      copy the cluster's logs there before teardown
# RGPU_GPU_EMULATED=1  emulated GPUs instead (to try this script without a GPU)
#
# Network: the bridge and namespaces of cluster.sh (10.77.0.0/24); nothing
# is routed out.  Exits 0 only if both jobs gave the expected output.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
BUILD=$(cd "${1:-$SRC/_build}" && pwd) || exit 1
DEBS=${RGPU_SLURM_DEBS:-$SRC/.devcarry/slurm-debs}
DRIVER=${RGPU_DRIVER:-/usr/local/nvidia/lib64/libcuda.so.1}
log() { echo "[gpu-machine] $*"; }
die() { echo "[gpu-machine] FAILED: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root"
ls "$DEBS"/*.deb >/dev/null 2>&1 || die "no .debs in $DEBS"
for f in spank/.libs/spank_rgpu.so client/.libs/libcuda.so.1 daemon/rgpud tools/rgpu \
	test/e2e/t_vecadd test/e2e/t_multi; do
	[ -e "$BUILD/$f" ] || die "$BUILD/$f is missing: build first"
done
exec 9>/run/rgpu-slurm-test.lock
flock -n 9 || die "a test/slurm run holds /run/rgpu-slurm-test.lock"

# ---- the prefix: every .deb unpacked, daemons under their usual names
P=$(mktemp -d /tmp/rgpu-slurm-prefix.XXXXXX)
chmod 755 "$P"
# dpkg -x; without dpkg, python3 reads the ar archive and its data.tar.*
deb_x() {
	if command -v dpkg >/dev/null; then dpkg -x "$1" "$2"; return; fi
	python3 - "$1" "$2" <<'PY'
import io, sys, tarfile
d = open(sys.argv[1], 'rb').read()
assert d[:8] == b'!<arch>\n'
i = 8
while i < len(d):
    name, size = d[i:i + 16].decode().strip().rstrip('/'), int(d[i + 48:i + 58])
    if name.startswith('data.tar'):
        tarfile.open(fileobj=io.BytesIO(d[i + 60:i + 60 + size])).extractall(sys.argv[2])
    i += 60 + size + (size & 1)
PY
}
for f in "$DEBS"/*.deb; do deb_x "$f" "$P" || die "unpacking $f"; done
mkdir -p "$P/rgpubin" "$P/missing"
ln -s "$P/usr/sbin/slurmctld-wlm" "$P/rgpubin/slurmctld"
ln -s "$P/usr/sbin/slurmd-wlm" "$P/rgpubin/slurmd"
# slurmd runs slurmstepd for the prolog and epilog with an environment of its
# own making, without our LD_LIBRARY_PATH: the binaries' RUNPATH
# (/usr/lib/x86_64-linux-gnu/slurm-wlm) does not exist on this machine, and
# slurmstepd then fails with "libslurmfull.so: cannot open shared object
# file" (exit 127: "prolog failed", cpu1 drained).  A wrapper sets it.
cat >"$P/rgpubin/slurmstepd" <<EOF
#!/bin/sh
LD_LIBRARY_PATH=$P/missing:$P/usr/lib/x86_64-linux-gnu/slurm-wlm\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH
exec $P/usr/sbin/slurmstepd-wlm "\$@"
EOF
chmod 755 "$P/rgpubin/slurmstepd"
ln -s "$P/bin/ip" "$P/rgpubin/ip"
# A library is looked up by its soname: in these .debs the symlink, or the
# file itself where nothing links to it.
nmiss=0
for l in "$P"/lib/x86_64-linux-gnu/*.so* "$P"/usr/lib/x86_64-linux-gnu/*.so*; do
	[ -e "$l" ] || continue
	b=${l##*/}
	if [ ! -L "$l" ]; then
		for o in "${l%/*}"/*.so*; do
			[ -L "$o" ] && [ "$(readlink "$o")" = "$b" ] && continue 2
		done
	fi
	ldconfig -p | grep -q "^[[:space:]]*$b " && continue
	ln -sf "$l" "$P/missing/$b"
	nmiss=$((nmiss + 1))
done
log "unpacked $(ls "$DEBS"/*.deb | wc -l) .debs into $P; $nmiss libraries this machine lacks: $(ls "$P/missing" | tr '\n' ' ')"
export PATH=$P/rgpubin:$P/usr/sbin:$P/usr/bin:$P/sbin:$PATH
export LD_LIBRARY_PATH=$P/missing:$P/usr/lib/x86_64-linux-gnu/slurm-wlm${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
command -v hostname >/dev/null || hostname() { local h; h=$(cat /proc/sys/kernel/hostname); echo "${h%%.*}"; }
for c in slurmctld slurmd sbatch squeue sinfo scontrol munge munged ip nsenter; do
	command -v $c >/dev/null || die "no $c"
done
log "$(slurmd -V 2>&1), munge $(munged -V 2>&1 | head -n1), $(ip -V 2>&1)"

# ---- munge: the clients (Slurm, rgpud, the plugin) use libmunge's default socket
MUNGED_PID=
if ! munge -n </dev/null >/dev/null 2>&1; then
	mkdir -p /run/munge "$P/munge"
	chmod 755 /run/munge
	chmod 700 "$P/munge"
	dd if=/dev/urandom of="$P/munge/munge.key" bs=1024 count=1 2>/dev/null
	chmod 400 "$P/munge/munge.key"
	munged --socket=/run/munge/munge.socket.2 --key-file="$P/munge/munge.key" \
		--pid-file=/run/munge/munged.pid --log-file="$P/munge/munged.log" \
		--seed-file="$P/munge/munged.seed" || die "munged: $(tail -n 3 "$P/munge/munged.log" 2>&1)"
	MUNGED_PID=$(cat /run/munge/munged.pid)
	munge -n </dev/null >/dev/null || die "munged does not answer"
	log "munged started (pid $MUNGED_PID)"
fi

# ---- the build, readable by the job's user (nobody)
RB=$P/build
mkdir -p "$RB"
cp -a "$BUILD/." "$RB/"
chmod -R a+rX "$RB"
PROBE=$P/rgpu_probe
if command -v gcc >/dev/null; then
	gcc -std=gnu11 -O1 -o "$PROBE" "$HERE/rgpu_probe.c" -ldl || die "gcc rgpu_probe"
else
	cp "${RGPU_PROBE:-$SRC/.devcarry/slurm-bin/rgpu_probe}" "$PROBE" || die "no rgpu_probe (no gcc here: set RGPU_PROBE)"
fi
chmod 755 "$PROBE"

# ---- the cluster: one GPU per GPU node, both GPU 0 of this machine
. "$HERE/cluster.sh"
# slurmd initialises a cgroup plugin even with proctrack/linuxproc and
# task/none; on a cgroup v2 host without systemd (dbus) or delegated
# controllers, cgroup/v2 fails ("Unable to initialize cgroup plugin", slurmd
# exits).  cgroup/v1 loads without touching the cgroup file system, and
# nothing here uses cgroups.
eval "$(declare -f rc_write_conf | sed '1s/rc_write_conf/rc_write_conf_plain/')"
rc_write_conf() {
	rc_write_conf_plain || return 1
	echo "CgroupPlugin=cgroup/v1" >"$RC_DIR/cgroup.conf"
}
# Where no bridge or network namespace can be made (RGPU_NET=loopback, or
# automatically when `ip link add ... type bridge` fails): every daemon in
# this namespace, nodes on 127.0.0.11-13 (loopback), one slurmd port each.
use_loopback() {
	log "network: loopback (127.0.0.11-13), no namespaces"
	RC_NET=127.0.0
	rc_net_up() { return 0; }
	rc_net_down() { return 0; }
	nsenter() { case $1 in --net=*) shift ;; esac; "$@"; }
	eval "$(declare -f rc_write_conf | sed '1s/rc_write_conf/rc_write_conf_ns/')"
	rc_write_conf() {
		rc_write_conf_ns || return 1
		sed -i -e "s/^NodeName=cpu1 /&Port=$RC_SLURMD_PORT /" \
			-e "s/^NodeName=gpu1 /&Port=$((RC_SLURMD_PORT + 1)) /" \
			-e "s/^NodeName=gpu2 /&Port=$((RC_SLURMD_PORT + 2)) /" "$RC_DIR/slurm.conf"
	}
}
case ${RGPU_NET:-auto} in
loopback) use_loopback ;;
auto)
	if ip link add rgpuprobe0 type bridge 2>"$P/ip.err" && ip netns add rgpu-probe 2>>"$P/ip.err"; then
		log "network: bridge $RC_BR and namespaces"
	else
		log "no bridge/namespace here: $(cat "$P/ip.err")"
		use_loopback
	fi
	ip link del rgpuprobe0 2>/dev/null
	ip netns del rgpu-probe 2>/dev/null
	;;
esac
RC_EMU_DEVICES=1
if [ -n "${RGPU_GPU_EMULATED:-}" ]; then
	RC_RGPUD_ARGS=--emulated
else
	[ -e "$DRIVER" ] || die "no CUDA driver at $DRIVER"
	RC_RGPUD_ARGS=--driver=$DRIVER
	command -v nvidia-smi >/dev/null && nvidia-smi -L
fi
RC_SLURMD_ARGS="-d $P/rgpubin/slurmstepd"
RC_CONF_EXTRA="PluginDir=$P/usr/lib/x86_64-linux-gnu/slurm-wlm"

finish() {
	local rc=$?
	trap - EXIT INT TERM
	[ -n "${WATCHDOG:-}" ] && kill "$WATCHDOG" 2>/dev/null
	if [ -n "${RGPU_LOG_DIR:-}" ] && [ -n "${RC_DIR:-}" ]; then
		mkdir -p "$RGPU_LOG_DIR"
		cp "$RC_DIR/slurmctld.log" "$RGPU_LOG_DIR/" 2>/dev/null
		for n in $RC_NODES; do
			cat "$RC_DIR/$n/slurmd.log" "$RC_DIR/$n/slurmd.out" >"$RGPU_LOG_DIR/slurmd-$n.log" 2>/dev/null
			[ -e "$RC_DIR/$n/rgpud.log" ] && cp "$RC_DIR/$n/rgpud.log" "$RGPU_LOG_DIR/rgpud-$n.log"
		done
	fi
	rc_down
	[ -n "$MUNGED_PID" ] && kill "$MUNGED_PID" 2>/dev/null
	rm -rf "$P"
	exit $rc
}
trap finish EXIT
trap 'echo "[gpu-machine] interrupted or out of time"; exit 1' INT TERM
( exec 9>&- >/dev/null 2>&1; sleep "${RGPU_SLURM_TIMEOUT:-420}"; kill -TERM $$ ) &
WATCHDOG=$!

log "bringing up munge/slurmctld/3 slurmd (cpu1, gpu1, gpu2) and 2 rgpud ($RC_RGPUD_ARGS)"
if ! rc_up "$SRC" "$RB" 9>&-; then
	[ -n "${RC_DIR:-}" ] && tail -n 20 "$RC_DIR"/slurmctld.log "$RC_DIR"/*/slurmd.log "$RC_DIR"/*/slurmd.out "$RC_DIR"/slurmctld.out 2>/dev/null
	die "the cluster did not come up"
fi
for n in $RC_GPU_NODES; do
	for t in $(seq 1 40); do
		rc_in $n bash -c "exec 3<>/dev/tcp/$(rc_addr $n)/$RC_RGPU_PORT" 2>/dev/null && break
		sleep 0.5
	done
done
sinfo -N -o '%N %t %G'
W=$RC_DIR/work
cp "$PROBE" "$RC_DIR/rgpu_probe"

run_job() {
	local out=$W/$1.out j t
	shift
	echo
	echo "== sbatch --uid=nobody -w cpu1 $*"
	j=$(sbatch --parsable --uid=nobody --chdir="$W" -o "$out" -e "$out" -w cpu1 "$@") || return 1
	for t in $(seq 1 180); do
		[ -z "$(squeue -h -j "$j" 2>/dev/null)" ] && break
		sleep 0.5
	done
	[ -n "$(squeue -h -j "$j" 2>/dev/null)" ] && echo "-- job $j still queued: $(squeue -h -j "$j" -o '%T %r')" && scancel "$j"
	echo "-- job $j output:"
	cat "$out"
}

OK=1
run_job compute --gres=rgpu:2 --wrap "
echo \"node: \$SLURMD_NODENAME   RGPU_SERVERS=\$RGPU_SERVERS\"
$RB/tools/rgpu status
echo '-- rgpu_probe:'; $RC_DIR/rgpu_probe
echo '-- t_vecadd:'; $RB/test/e2e/t_vecadd; echo \"t_vecadd exit \$?\"
echo '-- t_multi:'; $RB/test/e2e/t_multi; echo \"t_multi exit \$?\"" || OK=0
o=$(cat "$W/compute.out" 2>/dev/null)
echo "$o" | grep -q "^devices 2" || { OK=0; log "job 1: no two devices"; }
echo "$o" | grep -q "t_vecadd exit 0" || { OK=0; log "job 1: t_vecadd failed"; }
echo "$o" | grep -q "t_multi exit 0" || { OK=0; log "job 1: t_multi failed"; }

run_job quota --rgpu-mem=2G --wrap "
echo \"node: \$SLURMD_NODENAME   RGPU_SERVERS=\$RGPU_SERVERS RGPU_MEM=\$RGPU_MEM\"
$RC_DIR/rgpu_probe --alloc $((3 << 30))
$RC_DIR/rgpu_probe --alloc $((1 << 30))
$RB/tools/rgpu status" || OK=0
o=$(cat "$W/quota.out" 2>/dev/null)
echo "$o" | grep -q "meminfo_total=2147483648" || { OK=0; log "job 2: cuMemGetInfo total is not 2 GiB"; }
echo "$o" | grep -q "alloc 3221225472 CUDA_ERROR_OUT_OF_MEMORY" || { OK=0; log "job 2: 3 GiB not refused"; }
echo "$o" | grep -q "alloc 1073741824 OK" || { OK=0; log "job 2: 1 GiB refused"; }

echo
for n in $RC_GPU_NODES; do
	echo "-- rgpud on $n (last lines):"
	tail -n 8 "$RC_DIR/$n/rgpud.log"
done
echo
if [ $OK = 1 ]; then log "PASS: both jobs ran as expected"; exit 0; fi
log "FAIL"
tail -n 15 "$RC_DIR"/slurmctld.log "$RC_DIR"/cpu1/slurmd.log 2>/dev/null
exit 1
