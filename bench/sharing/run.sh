#!/bin/bash
# Sharing one GPU (issue 11, docs/sharing.md), all in one run on the GPU
# machine:
#
#   bash bench/sharing/run.sh --out DIR [--quick]
#
# Systems: the plain driver time-slicing separate processes (ts), NVIDIA MPS
# alone (mps), and rgpud under each policy (rgpud-fifo, rgpud-fair,
# rgpud-las), time-sliced, and rgpud-fair with an MPS server per job
# (rgpud-fair-mps: --mps=job with rgpud's default share, 75 since
# 2026-11-28; rgpud-fair-mps50, rgpud-fair-mps100, ... with that share: the
# share trades throughput against fairness and isolation, docs/sharing.md).  Mixes of synthetic
# tenants (bench/sharing/tenant.cu: compute kernels of a calibrated length):
#
#   four    4 tenants whose grids fill 1/8 of the GPU, 2000 kernels of 0.5 ms
#           each: STP (weighted speedup, sum of alone/shared turnaround) and
#           ANTT (mean shared/alone turnaround); the alone time is the plain
#           driver's, one tenant at a time
#   tenx    2 tenants, full grids, kernels of 2 ms and 0.2 ms, equal shares,
#           3 s together: Jain's index over their slowdowns (alone rate /
#           shared rate)
#   shares  2 tenants, full grids, 1 ms kernels, shares 75 and 25
#           (RGPU_SHARE), 3 s: the attained GPU time ratio (rgpu top) and
#           the ratio of the work they did
#   flood   a tenant of short kernels (15 us, 16 blocks, each waited for)
#           beside one launching grids 16x larger than the GPU holds: the
#           short one's p50/p99 latency, and p99 over its p99 alone in the
#           same system (through rgpud: with the same round trips)
#   fault   a tenant of another uid (another job) faults after 0.3 s beside
#           a running one: does the running one complete, with correct
#           results?
#
# Writes DIR/table.md (the table), DIR/sharing.json, DIR/raw/ (every
# tenant's output, rgpud's logs, rgpu top's JSON).  Under 5 minutes; every
# tenant runs under a timeout.  Exit 0 when it ran (whatever the numbers), 1
# on an error, 77 when the build or a GPU is missing.
#
# Environment: top_builddir (default: _build beside the sources), NVCC,
# RGPU_REAL_DRIVER_DIR (/usr/local/nvidia/lib64), PYTHON (python3),
# SHARING_SYSTEMS (the systems to run, see below).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
BUILD=${top_builddir:-$SRC/_build}
REAL=${RGPU_REAL_DRIVER_DIR:-/usr/local/nvidia/lib64}
PY=${PYTHON:-python3}
OUT=""
QUICK=0
while [ $# -gt 0 ]; do
	case $1 in
	--out) OUT=$2; shift 2 ;;
	--out=*) OUT=${1#--out=}; shift ;;
	--quick) QUICK=1; shift ;;
	*) echo "usage: run.sh --out DIR [--quick]" >&2; exit 2 ;;
	esac
done
[ -n "$OUT" ] || { echo "usage: run.sh --out DIR [--quick]" >&2; exit 2; }
mkdir -p "$OUT/raw" || exit 1
OUT=$(cd "$OUT" && pwd)
RAW=$OUT/raw
log() { echo "[sharing] $*" | tee -a "$RAW/run.log"; }

[ -x "$BUILD/daemon/rgpud" ] && [ -e "$BUILD/client/.libs/libcuda.so.1" ] ||
	{ log "SKIP: rgpud or the client is not built in $BUILD"; exit 77; }
[ -e "$REAL/libcuda.so.1" ] || { log "SKIP: no CUDA driver in $REAL"; exit 77; }
# libraries the GPU machine lacks, carried beside the build
for d in "$SRC/.devcarry/lib" "$BUILD/../.devcarry/lib"; do
	[ -d "$d" ] && export LD_LIBRARY_PATH=$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
done

# A world-readable place: tenants of another uid run from there.
W=$(mktemp -d /tmp/rgpu-sharing.XXXXXX) || exit 1
chmod 755 "$W"
PIDS=""
MPS_UP=""
cleanup() {
	local p
	for p in $PIDS; do kill "$p" 2>/dev/null; done
	for p in $PIDS; do wait "$p" 2>/dev/null; done
	[ -n "$MPS_UP" ] && mps_stop
	rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the tenant program: built here by make, or now with nvcc
T=$W/tenant
if [ -x "$BUILD/bench/sharing/tenant" ]; then
	cp "$BUILD/bench/sharing/tenant" "$T"
else
	NV=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
	log "building the tenant with $NV"
	"$NV" -O2 -arch=sm_90 -o "$T" "$HERE/tenant.cu" >"$RAW/nvcc.log" 2>&1 ||
		{ log "nvcc failed: $(tail -3 "$RAW/nvcc.log")"; exit 1; }
fi
chmod 755 "$T"
# the client library too: a tenant of another uid must be able to load it
mkdir -p "$W/client"
cp -a "$BUILD"/client/.libs/libcuda.so* "$W/client/" && chmod -R a+rX "$W/client" || exit 1
CLIENT=$W/client
NOBODY=65534
AS_OTHER=()
if command -v setpriv >/dev/null && [ "$(id -u)" = 0 ]; then
	AS_OTHER=(setpriv --reuid=$NOBODY --regid=$NOBODY --clear-groups)
fi

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$RAW/gpu.txt" 2>&1
log "GPU: $(cat "$RAW/gpu.txt")"

free_port() {
	"$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# ---- systems
SYS=""      # current system name
PORT=""
RGPUD_PID=""
MPS_DIR=$W/mps
mps_ctl() { CUDA_MPS_PIPE_DIRECTORY=$MPS_DIR/pipe CUDA_MPS_LOG_DIRECTORY=$MPS_DIR/log "$@"; }
MPSCTL=$(command -v nvidia-cuda-mps-control || ls /usr/local/nvidia/bin/nvidia-cuda-mps-control 2>/dev/null)
mps_start() {
	mkdir -p "$MPS_DIR/pipe" "$MPS_DIR/log"
	mps_ctl "$MPSCTL" -d && MPS_UP=1
}
mps_stop() {
	echo quit | mps_ctl "$MPSCTL" >/dev/null 2>&1
	MPS_UP=""
	sleep 1
}

sys_up() { # name
	SYS=$1
	mkdir -p "$RAW/$SYS"
	chmod 777 "$RAW/$SYS"
	case $SYS in
	ts) ;;
	mps)
		[ -n "$MPSCTL" ] && mps_start || { log "$SYS: cannot start MPS"; return 1; } ;;
	rgpud-*)
		local args=(--open --driver "$REAL/libcuda.so.1" --sched="${SYS#rgpud-}") pol share
		case $SYS in
		*-mps*) # rgpud-POLICY-mps[SHARE]: an MPS server per job; without
			# SHARE, rgpud's default share
			pol=${SYS#rgpud-}; pol=${pol%%-mps*}; share=${SYS##*-mps}
			args=(--open --driver "$REAL/libcuda.so.1" --sched="$pol" --mps=job
			      --mps-dir="$W/rmps" ${share:+--mps-default-share="$share"}) ;;
		esac
		PORT=$(free_port)
		"$BUILD/daemon/rgpud" --listen "127.0.0.1:$PORT" "${args[@]}" \
			>"$RAW/$SYS/rgpud.log" 2>&1 &
		RGPUD_PID=$!
		PIDS="$PIDS $RGPUD_PID"
		local i
		for i in $(seq 1 100); do
			(exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return 0
			kill -0 "$RGPUD_PID" 2>/dev/null || break
			sleep 0.1
		done
		log "$SYS: rgpud did not start: $(tail -3 "$RAW/$SYS/rgpud.log")"
		return 1 ;;
	esac
}
sys_down() {
	case $SYS in
	mps) mps_stop ;;
	rgpud-*)
		kill "$RGPUD_PID" 2>/dev/null
		wait "$RGPUD_PID" 2>/dev/null ;;
	esac
}

# tenant MIX LABEL [SHARE] [--other] -- ARGS...: in the background, under
# the current system; output in $RAW/$SYS/MIX-LABEL.out
TPIDS=""
tenant() {
	local mix=$1 label=$2 share=$3 other=""
	shift 3
	if [ "$1" = --other ]; then other=1; shift; fi
	[ "$1" = -- ] && shift
	local env=() pre=()
	case $SYS in
	ts | alone) env=(LD_LIBRARY_PATH=$REAL) ;;
	mps) env=(LD_LIBRARY_PATH=$REAL CUDA_MPS_PIPE_DIRECTORY=$MPS_DIR/pipe
		  CUDA_MPS_LOG_DIRECTORY=$MPS_DIR/log) ;;
	rgpud-*) env=(LD_LIBRARY_PATH=$CLIENT RGPU_SERVERS=127.0.0.1:$PORT/0
		      RGPU_SHARE=$share) ;;
	esac
	# another uid (another job): not under plain MPS, whose server serves
	# one uid at a time (the other would wait for it)
	[ -n "$other" ] && [ "$SYS" != mps ] && pre=("${AS_OTHER[@]}")
	timeout 60 "${pre[@]}" env "${env[@]}" "$T" --label "$label" "$@" \
		>"$RAW/$SYS/$mix-$label.out" 2>"$RAW/$SYS/$mix-$label.err" &
	TPIDS="$TPIDS $!"
}
wait_tenants() {
	local p
	for p in $TPIDS; do wait "$p"; done
	TPIDS=""
}
start_at() { "$PY" -c "import time; print('%.3f' % (time.time() + $1))"; }

# ---- calibration (plain driver, alone)
SYS=alone
mkdir -p "$RAW/alone"
calib() { # blocks -> iterations per us
	LD_LIBRARY_PATH=$REAL timeout 60 "$T" --calibrate --blocks "$1" 2>>"$RAW/alone/calib.err" |
		sed -n 's/^ITERS_PER_US //p'
}
SM=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
NSM=132
FULL=$((NSM * 8))     # 256-thread blocks that fill the GPU (2048 threads/SM)
EIGHTH=$NSM           # 1/8 of the GPU's threads
IPU_F=$(calib $FULL) IPU_E=$(calib $EIGHTH) IPU_S=$(calib 16)
[ -n "$IPU_F" ] && [ -n "$IPU_E" ] && [ -n "$IPU_S" ] || { log "calibration failed: $(tail -3 "$RAW/alone/calib.err")"; exit 1; }
log "calibrated ($SM): iterations per us: full grid $IPU_F, 1/8 grid $IPU_E, 16 blocks $IPU_S"
it() { "$PY" -c "print(max(1, int($1 * $2)))"; } # ipu us
DUR=3
[ $QUICK = 1 ] && DUR=1.5

# what each mix runs (ARGS after --)
FOUR=(--iters "$(it "$IPU_E" 500)" --blocks $EIGHTH --kernels 2000 --depth 8)
TENX_A=(--iters "$(it "$IPU_F" 2000)" --blocks $FULL --depth 4)
TENX_B=(--iters "$(it "$IPU_F" 200)" --blocks $FULL --depth 16)
SHARE_K=(--iters "$(it "$IPU_F" 1000)" --blocks $FULL --depth 8)
SHORT=(--iters "$(it "$IPU_S" 15)" --blocks 16 --sync)
FLOOD=(--iters "$(it "$IPU_F" 50)" --blocks $((FULL * 16)) --depth 4)
GOOD=(--iters "$(it "$IPU_F" 1000)" --blocks $FULL --depth 8 --seconds 2)

# ---- alone (plain driver): the baselines
log "alone: baselines"
tenant four a "" -- "${FOUR[@]}"; wait_tenants
tenant tenx a "" -- "${TENX_A[@]}" --seconds 1.5; wait_tenants
tenant tenx b "" -- "${TENX_B[@]}" --seconds 1.5; wait_tenants
tenant shares a "" -- "${SHARE_K[@]}" --seconds 1.5; wait_tenants
tenant flood short "" -- "${SHORT[@]}" --seconds 2; wait_tenants

# ---- every system, every mix
run_mixes() {
	local s
	log "$SYS: four"
	s=$(start_at 3)
	for i in 1 2 3 4; do tenant four t$i "" -- "${FOUR[@]}" --start-at "$s"; done
	wait_tenants

	log "$SYS: tenx"
	s=$(start_at 3)
	tenant tenx a 50 -- "${TENX_A[@]}" --seconds $DUR --start-at "$s"
	tenant tenx b 50 -- "${TENX_B[@]}" --seconds $DUR --start-at "$s"
	wait_tenants

	log "$SYS: shares"
	s=$(start_at 3)
	tenant shares a 75 -- "${SHARE_K[@]}" --seconds $DUR --start-at "$s"
	tenant shares b 25 -- "${SHARE_K[@]}" --seconds $DUR --start-at "$s"
	case $SYS in
	rgpud-*)
		# the attained GPU time, near the end of the shared part
		sleep "$("$PY" -c "print(3 + $DUR * 0.9)")"
		"$BUILD/tools/rgpu" top --server "127.0.0.1:$PORT" --json >"$RAW/$SYS/shares-top.json" \
			2>"$RAW/$SYS/shares-top.err" ;;
	esac
	wait_tenants

	log "$SYS: flood"
	# the short tenant alone in this system first (its latency through rgpud
	# includes the round trips), then beside the flooder
	tenant flood short-alone 50 -- "${SHORT[@]}" --seconds 1.5
	wait_tenants
	s=$(start_at 3)
	tenant flood flooder 50 -- "${FLOOD[@]}" --seconds "$("$PY" -c "print($DUR + 0.5)")" --start-at "$s"
	tenant flood short 50 -- "${SHORT[@]}" --seconds $DUR --start-at "$("$PY" -c "print($s + 0.2)")"
	wait_tenants

	log "$SYS: fault"
	s=$(start_at 3)
	tenant fault good 50 -- "${GOOD[@]}" --start-at "$s"
	tenant fault bad 50 --other -- "${GOOD[@]}" --fault-ms 300 --start-at "$s"
	wait_tenants
}

# SHARING_SYSTEMS: another list (names as above; rgpud-POLICY-mps[SHARE]
# for an MPS server per job with that default share, e.g. rgpud-fifo-mps,
# rgpud-fair-mps100)
SYSTEMS=${SHARING_SYSTEMS:-"ts mps rgpud-fifo rgpud-fair rgpud-las rgpud-fair-mps rgpud-fair-mps50 rgpud-fair-mps100"}
for sys in $SYSTEMS; do
	if sys_up "$sys"; then
		run_mixes
		sys_down
	fi
done

log "analysis"
"$PY" "$HERE/analyze.py" "$RAW" "$OUT" "$SYSTEMS" | tee "$OUT/table.md"
exit "${PIPESTATUS[0]}"
