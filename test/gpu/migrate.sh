#!/bin/bash
# Sessions that survive their server, on a real GPU (issue 8).
#
#   bash test/gpu/migrate.sh --out DIR        (about 4 minutes; root)
#
# A seeded PyTorch training run (test/gpu/migrate.py: an MLP, 1 GiB of data
# on the GPU, a loss read back every step) through rgpu over TCP:
#   local      the real driver, no rgpu (reference losses)
#   plain      rgpu on server A, nothing happens (the baseline: losses L0,
#              median step time)
#   migrate    rgpu on A (RGPUD_MIGRATE_AHEAD=0: the whole state in the
#              pause); at step MOVE_AT `rgpu migrate --from A --to B`,
#              then A is killed: the losses must equal L0 step for step;
#              the pause (the slowest step minus the median) and the state
#              moved (from A's log) give the pause per GiB
#   standby    A with --checkpoint-interval=CKPT_S, RGPU_STANDBY=B; at step
#              KILL_AT A's parent and workers get SIGKILL: the run must end
#              with L0's final loss; recovery time (the slowest step after
#              the kill minus the median) and the checkpoint overhead on
#              the median and mean step time are recorded
#   migrate-ahead  the same as rgpud moves by default: the session's
#              objects are re-created on B before the pause
#   same-gpu, same-gpu-ahead  rgpu migrate to GPU 0 of the same server (a
#              fresh worker on the same GPU; memory by reference, copied
#              within the GPU), everything in the pause, then the objects
#              ahead; on any machine
#   same-gpu-vmm, migrate-vmm  the same move, and the TCP one, of a run with
#              PyTorch's expandable segments (its memory through the VMM API)
#   graph-plain, same-gpu-graph, migrate-graph, standby-graph  a run whose
#              whole step is a CUDA graph (MIG_GRAPH=1, torch.cuda.graph):
#              unmoved (against the local driver), moved within its GPU,
#              over TCP, and recovered on a standby after a SIGKILL
#   pool-plain, same-gpu-pool, migrate-pool, standby-pool  the same with
#              PyTorch's cudaMallocAsync backend (stream-ordered pools);
#              MIG_ONLY=pool runs only these
#   two-gpus   rgpu migrate to GPU 1 of the same server: only with two GPUs
#              (everything in the pause; then through host, two-gpus-host,
#              and as by default, the objects ahead of the pause,
#              two-gpus-ahead)
# Prints one line per result and "migrate.sh: N passed, N failed"; writes
# DIR/migrate-summary.txt and the logs under DIR.
set -u
OUT=/tmp/rgpu-migrate-out
while [ $# -gt 0 ]; do
	case $1 in
	--out) OUT=$2; shift 2 ;;
	*) echo "usage: bash test/gpu/migrate.sh --out DIR"; exit 2 ;;
	esac
done
mkdir -p "$OUT"
src=$(cd "$(dirname "$0")/../.." && pwd)
B=${top_builddir:-$src/_build}
R=${RGPU_REAL_DRIVER_DIR:-/usr/local/nvidia/lib64}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
PY=${PYTHON:-python3}
STEPS=${STEPS:-600}
MOVE_AT=${MOVE_AT:-300}
KILL_AT=${KILL_AT:-400}
CKPT_S=${CKPT_S:-2}
export DATA_MB=${DATA_MB:-1024}
S=$OUT/migrate-summary.txt
: >"$S"
say() { echo "$*" | tee -a "$S"; }
pass=0 fail=0
result() { # name ok(0/1) text
	if [ "$2" = 0 ]; then pass=$((pass + 1)); say "PASS $1: $3"; else fail=$((fail + 1)); say "FAIL $1: $3"; fi
}
[ -x "$B/daemon/rgpud" ] && [ -e "$B/client/.libs/libcuda.so.1" ] || { say "FAIL: rgpu not built in $B"; exit 1; }
"$PY" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null ||
	{ say "SKIP: no PyTorch with a GPU here"; exit 0; }
say "date: $(date -u '+%F %T UTC'); $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); steps $STEPS, data $DATA_MB MiB"

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PIDS=""
cleanup() { for p in $PIDS; do kill -9 "$p" $(cat /proc/"$p"/task/*/children 2>/dev/null) 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT
# start NAME [opts] -> PORT PID
start() {
	local name=$1
	shift
	PORT=$(free_port)
	LD_LIBRARY_PATH=$R${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$B/daemon/rgpud" --open \
		--listen "127.0.0.1:$PORT" "$@" >"$OUT/rgpud-$name.log" 2>&1 &
	PID=$!
	PIDS="$PIDS $PID"
	for _ in $(seq 300); do
		grep -q serving "$OUT/rgpud-$name.log" 2>/dev/null && return 0
		sleep 0.05
	done
	say "rgpud $name did not start: $(tail -3 "$OUT/rgpud-$name.log")"
	return 1
}
kill_all() { kill -9 "$1" $(cat /proc/"$1"/task/*/children 2>/dev/null) 2>/dev/null; wait "$1" 2>/dev/null; }
# train NAME SERVER (empty: the local driver) in the background -> TPID
train() {
	local name=$1 server=$2
	if [ -z "$server" ]; then
		LD_LIBRARY_PATH=$R:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
			timeout 150 "$PY" "$src/test/gpu/migrate.py" "$STEPS" >"$OUT/$name.out" 2>"$OUT/$name.err" &
	else
		RGPU_SERVERS=$server RGPU_TRANSPORT=tcp RGPU_LOG_LEVEL=${MIG_CLIENT_LOG:-info} \
			LD_LIBRARY_PATH=$B/client/.libs:$B/nvml/.libs:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
			timeout 150 "$PY" "$src/test/gpu/migrate.py" "$STEPS" >"$OUT/$name.out" 2>"$OUT/$name.err" &
	fi
	TPID=$!
}
wait_step() { # NAME STEP: until the run printed that step (or ended)
	for _ in $(seq 3000); do
		grep -q "^step $2 " "$OUT/$1.out" 2>/dev/null && return 0
		kill -0 "$TPID" 2>/dev/null || return 1
		sleep 0.02
	done
	return 1
}
losses() { awk '$1 == "step" { print $2, $3 }' "$OUT/$1.out"; }
val() { awk -v k="$2" '$1 == k { print $2 }' "$OUT/$1.out"; }
steptimes() { awk '$1 == "step" { print $4 }' "$OUT/$1.out"; }
# slowest step at or after step FROM, minus the median: the pause (ms)
pause_ms() {
	awk -v from="$2" -v med="$(val "$1" median_ms)" '$1 == "step" && $2 >= from && $4 > m { m = $4 } END { printf "%.1f", m - med }' "$OUT/$1.out"
}
mean_ms() { awk -v a="$2" -v b="$3" '$1 == "step" && $2 >= a && $2 < b { s += $4; n++ } END { printf "%.3f", n ? s / n : 0 }' "$OUT/$1.out"; }

# ---- the moves ----
# tcp_move NAME SRC DST [DESC]: trains NAME on a fresh rgpud SRC (the
# caller's environment goes to it), moves it at step MOVE_AT to a fresh
# rgpud DST over TCP and kills SRC; one result line, the target's time
# and the pause against plain loopback TCP
RAW_TCP=""
tcp_move() {
	# (not "src": train() reads the global $src, the source tree)
	local name=$1 from=$2 to=$3 desc=${4:-} t0 t1="" MRC same moved bytes secs pause per_gib
	start "$from" && A=$PORT AP=$PID
	start "$to" && BPORT=$PORT BP=$PID
	train "$name" "127.0.0.1:$A"
	t0=$(date +%s.%N)
	if wait_step "$name" "$MOVE_AT"; then
		t0=$(date +%s.%N)
		"$B/tools/rgpu" migrate --from "127.0.0.1:$A" --to "127.0.0.1:$BPORT" >"$OUT/$name.cmd" 2>&1
		t1=$(date +%s.%N)
		kill_all "$AP"
	fi
	wait "$TPID"
	MRC=$?
	same=$(diff <(losses "${REF:-plain}") <(losses "$name") >/dev/null && echo 0 || echo 1)
	moved=$(grep -o "session moved to .*" "$OUT/rgpud-$from.log" | tail -1)
	bytes=$(echo "$moved" | sed -n 's/.*: \([0-9]*\) bytes of state in \([0-9.]*\) s.*/\1/p')
	secs=$(echo "$moved" | sed -n 's/.*bytes of state in \([0-9.]*\) s.*/\1/p')
	pause=$(pause_ms "$name" "$MOVE_AT")
	per_gib=$(awk -v p="$pause" -v b="${bytes:-0}" 'BEGIN { if (b > 0) printf "%.0f", p / (b / 1073741824); else print "?" }')
	result "$name" "$([ $MRC = 0 ] && [ "$same" = 0 ] && grep -q "1 moved" "$OUT/$name.cmd" && echo 0 || echo 1)" \
		"moved at step $MOVE_AT to a second rgpud over TCP$desc, old server killed; losses identical to plain: $([ "$same" = 0 ] && echo yes || echo NO); $(tail -1 "$OUT/$name.cmd"); state ${bytes:-?} bytes streamed in ${secs:-?} s; rgpu migrate took $(awk -v a="$t0" -v b="${t1:-$t0}" 'BEGIN{printf "%.2f", b-a}') s; pause seen by the run $pause ms = $per_gib ms per GiB"
	kill_all "$BP"
	# where the target's time went (objects re-created, memory copied in)
	grep -o "objects re-created in .*" "$OUT/rgpud-$to.log" 2>/dev/null | tail -1 | sed "s/^/$name target: /" | tee -a "$S"
	grep -o "its objects (.*" "$OUT/rgpud-$from.log" 2>/dev/null | tail -1 | sed "s/^/$name source: /" | tee -a "$S"
	# the path's own copy bandwidth, measured here: plain TCP over loopback
	# (bench/raw_tcp, 256 MiB, the faster of its two modes) against the pause
	if [ -z "$RAW_TCP" ] && [ -x "$B/bench/raw_tcp" ]; then
		RAW_TCP=$(timeout 60 "$B/bench/raw_tcp" --max 268435456 --min-time 0.5 2>/dev/null |
			awk '$2 == 256 && $3 == "MiB" && $4 > m { m = $4 } END { if (m) print m }')
	fi
	if [ -n "$RAW_TCP" ] && [ -n "${bytes:-}" ]; then
		local raw=$RAW_TCP
		say "$name path: raw loopback TCP ${raw} GB/s (256 MiB); state moved at $(awk -v b="$bytes" -v s="$secs" 'BEGIN { printf "%.2f", b / s / 1e9 }') GB/s = $(awk -v b="$bytes" -v s="$secs" -v r="$raw" 'BEGIN { printf "%.0f", 100 * b / s / 1e9 / r }')% of it; the pause ($pause ms) moved $(awk -v b="$bytes" -v p="$pause" 'BEGIN { printf "%.2f", b / (p / 1000) / 1e9 }') GB/s = $(awk -v b="$bytes" -v p="$pause" -v r="$raw" 'BEGIN { printf "%.0f", 100 * b / (p / 1000) / 1e9 / r }')% of it (target 80%)"
	fi
}
# move_to_gpu1 RUN SERVER [GPU]: trains RUN on a fresh rgpud named SERVER
# (the caller's environment goes to it), moves it to that rgpud's GPU 1 (or
# GPU) at step MOVE_AT; SAME=0 when the losses are those of the plain run,
# TRC its exit
move_to_gpu1() {
	start "$2" && A=$PORT AP=$PID
	train "$1" "127.0.0.1:$A"
	if wait_step "$1" "$MOVE_AT"; then
		"$B/tools/rgpu" migrate --from "127.0.0.1:$A" --to "127.0.0.1:$A/${3:-1}" >"$OUT/$1.cmd" 2>&1
	fi
	wait "$TPID"
	TRC=$?
	SAME=$(diff <(losses "${REF:-plain}") <(losses "$1") >/dev/null && echo 0 || echo 1)
	kill_all "$AP"
}
# variant KEY L DESC: the runs of one way of training (the caller's
# environment sets it): local and unmoved through rgpu (KEY-plain, against
# the local driver's final loss), moved within its GPU (same-gpu-KEY), over
# TCP (migrate-KEY) and recovered on a standby after a SIGKILL
# (standby-KEY), each against the unmoved run; L names its servers
variant() {
	local key=$1 l=$2 desc=$3 vrc ref
	train "local$key" ""
	wait "$TPID"
	start "plain$l" && PV=$PID
	train "plain$key" "127.0.0.1:$PORT"
	wait "$TPID"
	vrc=$?
	kill_all "$PV"
	ref=$(val "plain$key" final)
	result "$key-plain" "$([ $vrc = 0 ] && [ -n "$ref" ] && [ "$ref" = "$(val "local$key" final)" ] && echo 0 || echo 1)" \
		"$desc, rgpu, nothing moved: final loss $ref (local driver: $(val "local$key" final)), median step $(val "plain$key" median_ms) ms (local $(val "local$key" median_ms) ms)"
	REF=plain$key RGPUD_MIGRATE_AHEAD=1 move_to_gpu1 "samegpu$key" "same$l" 0
	MOVED=$(grep -q "^1 moved, 0 failed" "$OUT/samegpu$key.cmd" && echo 0 || echo 1)
	result "same-gpu-$key" "$([ $TRC = 0 ] && [ "$SAME" = 0 ] && [ $MOVED = 0 ] && echo 0 || echo 1)" \
		"$desc, moved to a fresh worker on GPU 0 at step $MOVE_AT: losses identical: $([ "$SAME" = 0 ] && echo yes || echo NO); $(tail -1 "$OUT/samegpu$key.cmd"); pause $(pause_ms "samegpu$key" "$MOVE_AT") ms; $(grep -o "session moved to .*" "$OUT/rgpud-same$l.log" | tail -1)"
	grep -o "objects re-created in .*" "$OUT/rgpud-same$l.log" 2>/dev/null | tail -1 | sed "s/^/same-gpu-$key target: /" | tee -a "$S"
	REF=plain$key RGPUD_MIGRATE_AHEAD=1 tcp_move "migrate-$key" "mig${l}A" "mig${l}B" " ($desc)"
	start "sb${l}A" --checkpoint-interval="$CKPT_S" && A=$PORT AP=$PID
	start "sb${l}B" && BPORT=$PORT BP=$PID
	RGPU_STANDBY=127.0.0.1:$BPORT train "standby$key" "127.0.0.1:$A"
	wait_step "standby$key" "$KILL_AT" && kill_all "$AP"
	wait "$TPID"
	vrc=$?
	result "standby-$key" "$([ $vrc = 0 ] && [ "$(val "standby$key" final)" = "$ref" ] && grep -q "recovered on" "$OUT/standby$key.err" && echo 0 || echo 1)" \
		"$desc, SIGKILL of rgpud at step $KILL_AT, standby took over: final loss $(val "standby$key" final) (unmoved $ref); recovery pause $(pause_ms "standby$key" "$KILL_AT") ms; $(grep -o "checkpoint of [0-9]* bytes in [0-9.]* s" "$OUT/standby$key.err" | tail -1)"
	kill_all "$BP"
}

if [ "${MIG_ONLY:-}" != pool ]; then
# ---- local and plain ----
train local ""
wait "$TPID"
start plainA || exit 1
A=$PORT AP=$PID
train plain "127.0.0.1:$A"
wait "$TPID"
PRC=$?
kill_all "$AP"
L0=$(val plain final)
result plain "$([ $PRC = 0 ] && [ -n "$L0" ] && echo 0 || echo 1)" \
	"rgpu, nothing moved: final loss $L0 (local driver: $(val local final)), median step $(val plain median_ms) ms (local $(val local median_ms) ms), device memory reserved $(val plain reserved_bytes) bytes"
[ -n "$L0" ] || { say "migrate.sh: $pass passed, $fail failed"; exit 1; }

# ---- migrate mid-run ----
RGPUD_MIGRATE_AHEAD=0 tcp_move migrate migA migB
# the same with the session's objects re-created on the target before the
# pause (the default; explicit here)
RGPUD_MIGRATE_AHEAD=1 tcp_move migrate-ahead migAA migAB " (objects ahead of the pause)"

# ---- standby, SIGKILL of the whole server ----
start sbA --checkpoint-interval="$CKPT_S" && A=$PORT AP=$PID
start sbB && BPORT=$PORT BP=$PID
RGPU_STANDBY=127.0.0.1:$BPORT train standby "127.0.0.1:$A"
if wait_step standby "$KILL_AT"; then
	kill_all "$AP"
fi
wait "$TPID"
SRC=$?
final=$(val standby final)
pre_mean=$(mean_ms standby 10 "$KILL_AT")
base_mean=$(mean_ms plain 10 "$KILL_AT")
ck=$(grep -c "checkpoint of" "$OUT/standby.err")
cksz=$(grep -o "checkpoint of [0-9]* bytes in [0-9.]* s" "$OUT/standby.err" | tail -1)
rec=$(pause_ms standby "$KILL_AT")
result standby "$([ $SRC = 0 ] && [ "$final" = "$L0" ] && grep -q "recovered on" "$OUT/standby.err" && echo 0 || echo 1)" \
	"SIGKILL of rgpud (parent and workers) at step $KILL_AT, standby took over: final loss $final (plain $L0); recovery pause $rec ms; $ck checkpoint(s) every ${CKPT_S}s, last: $cksz; mean step before the kill $pre_mean ms vs $base_mean ms without standby (overhead $(awk -v a="$pre_mean" -v b="$base_mean" 'BEGIN { if (b > 0) printf "%.1f%%", (a - b) / b * 100 }'))"
kill_all "$BP"

# ---- a fresh worker on the same GPU (any machine) ----
# the memory goes by reference as between two GPUs, copied device to device
# within the GPU: what a move costs where the copy is not the bound
# (everything in the pause first: the copies queued at the state's end)
RGPUD_MIGRATE_AHEAD=0 move_to_gpu1 samegpu0 same0 0
MOVED=$(grep -q "^1 moved, 0 failed" "$OUT/samegpu0.cmd" && echo 0 || echo 1)
result same-gpu "$([ $TRC = 0 ] && [ "$SAME" = 0 ] && [ $MOVED = 0 ] && grep -q "of them copied GPU to GPU" "$OUT/rgpud-same0.log" && echo 0 || echo 1)" \
	"moved to a fresh worker on GPU 0 of the same rgpud at step $MOVE_AT (everything in the pause): losses identical: $([ "$SAME" = 0 ] && echo yes || echo NO); $(tail -1 "$OUT/samegpu0.cmd"); pause $(pause_ms samegpu0 "$MOVE_AT") ms; $(grep -o "session moved to .*" "$OUT/rgpud-same0.log" | tail -1)"
MIG_CLIENT_LOG=debug RGPUD_MIGRATE_AHEAD=1 move_to_gpu1 samegpu sameX 0
ps=$(pause_ms samegpu "$MOVE_AT")
MOVED=$(grep -q "^1 moved, 0 failed" "$OUT/samegpu.cmd" && echo 0 || echo 1)
result same-gpu-ahead "$([ $TRC = 0 ] && [ "$SAME" = 0 ] && [ $MOVED = 0 ] && grep -q "of them copied GPU to GPU" "$OUT/rgpud-sameX.log" && echo 0 || echo 1)" \
	"moved to a fresh worker on GPU 0 of the same rgpud at step $MOVE_AT (objects ahead): losses identical: $([ "$SAME" = 0 ] && echo yes || echo NO); $(tail -1 "$OUT/samegpu.cmd"); pause $ps ms; $(grep -o "session moved to .*" "$OUT/rgpud-sameX.log" | tail -1)"
grep -o "objects re-created in .*" "$OUT/rgpud-sameX.log" 2>/dev/null | tail -1 | sed "s/^/same-gpu-ahead target: /" | tee -a "$S"
grep -o "session re-attached.*" "$OUT/samegpu.err" 2>/dev/null | tail -1 | sed "s/^/same-gpu-ahead client: /" | tee -a "$S"
LD_LIBRARY_PATH=$R:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} timeout 60 $PY -c '
import torch, time
a = torch.empty(1 << 28, dtype=torch.uint8, device="cuda"); b = torch.empty_like(a)
for _ in range(3): b.copy_(a)
torch.cuda.synchronize(); t = time.perf_counter()
for _ in range(20): b.copy_(a)
torch.cuda.synchronize(); print("BW dtod %.1f" % (20 * a.numel() / (time.perf_counter() - t) / 1e9))' >"$OUT/dtod-local.log" 2>&1
dtod=$(awk '$1 == "BW" && $2 == "dtod" { print $3 }' "$OUT/dtod-local.log")
xs=$(grep -o "[0-9]* of them device memory copied GPU to GPU" "$OUT/rgpud-sameX.log" | tail -1 | cut -d' ' -f1)
[ -n "$dtod" ] && [ -n "$xs" ] && [ -n "$ps" ] &&
	say "same-gpu-ahead path: local device-to-device copy ${dtod} GB/s (256 MiB); the pause ($ps ms) moved $xs bytes at $(awk -v b="$xs" -v p="$ps" 'BEGIN { if (p > 0) printf "%.1f", b / (p / 1000) / 1e9 }') GB/s; $(awk -v b="$xs" -v p="$ps" 'BEGIN { if (b > 0) printf "%.2f", p / (b / 1073741824) }') ms per GiB"

# PyTorch's expandable segments: its memory through the VMM API
# (cuMemCreate, cuMemMap), made again on the target from the live state;
# against an unmoved run with the same allocator
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
start plainV && PV=$PID
train plainvmm "127.0.0.1:$PORT"
wait "$TPID"
kill_all "$PV"
REF=plainvmm RGPUD_MIGRATE_AHEAD=1 move_to_gpu1 samegpuvmm sameV 0
MOVED=$(grep -q "^1 moved, 0 failed" "$OUT/samegpuvmm.cmd" && echo 0 || echo 1)
result same-gpu-vmm "$([ $TRC = 0 ] && [ "$SAME" = 0 ] && [ $MOVED = 0 ] && echo 0 || echo 1)" \
	"PyTorch with expandable segments (VMM memory) moved to a fresh worker on GPU 0 at step $MOVE_AT: losses identical: $([ "$SAME" = 0 ] && echo yes || echo NO); $(tail -1 "$OUT/samegpuvmm.cmd"); pause $(pause_ms samegpuvmm "$MOVE_AT") ms; $(grep -o "session moved to .*" "$OUT/rgpud-sameV.log" | tail -1)"
REF=plainvmm RGPUD_MIGRATE_AHEAD=1 tcp_move migrate-vmm migVA migVB " (expandable segments: VMM memory)"
unset PYTORCH_CUDA_ALLOC_CONF

# CUDA graphs: the whole training step captured once (torch.cuda.graph)
# and replayed every step; made again on the target by replaying what
# built it
MIG_GRAPH=1 variant graph G "the step a CUDA graph"

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
if [ "$ngpu" -ge 2 ]; then
	RGPUD_MIGRATE_AHEAD=0 move_to_gpu1 twogpu twoA
	pp=$(pause_ms twogpu "$MOVE_AT")
	# (a move that failed leaves the run on GPU 0 with the same losses:
	# the move itself must be reported done)
	MOVED=$(grep -q "^1 moved, 0 failed" "$OUT/twogpu.cmd" && echo 0 || echo 1)
	result two-gpus "$([ $TRC = 0 ] && [ "$SAME" = 0 ] && [ $MOVED = 0 ] && echo 0 || echo 1)" \
		"moved to GPU 1 of the same rgpud at step $MOVE_AT: losses identical: $([ "$SAME" = 0 ] && echo yes || echo NO); $(tail -1 "$OUT/twogpu.cmd"); pause $pp ms; $(grep -o "session moved to .*" "$OUT/rgpud-twoA.log" | tail -1)"
	# the same move with memory through host memory, as moves between
	# servers go (the baseline of the GPU-to-GPU handover)
	RGPUD_MIGRATE_AHEAD=0 RGPUD_MIGRATE_NO_PEER=1 move_to_gpu1 twohost twoH
	ph=$(pause_ms twohost "$MOVE_AT")
	MOVED=$(grep -q "^1 moved, 0 failed" "$OUT/twohost.cmd" && echo 0 || echo 1)
	result two-gpus-host "$([ $TRC = 0 ] && [ "$SAME" = 0 ] && [ $MOVED = 0 ] && echo 0 || echo 1)" \
		"the same move with RGPUD_MIGRATE_NO_PEER (memory through host): losses identical: $([ "$SAME" = 0 ] && echo yes || echo NO); pause $ph ms (GPU to GPU: $pp ms, $(awk -v a="$pp" -v b="$ph" 'BEGIN { if (a > 0) printf "%.1fx shorter", b / a }')); $(grep -o "session moved to .*" "$OUT/rgpud-twoH.log" | tail -1)"
	# GPU to GPU with the objects re-created before the pause: what is
	# left of the pause is the copy (NVLink) and the handover
	MIG_CLIENT_LOG=debug RGPUD_MIGRATE_AHEAD=1 move_to_gpu1 twoahead twoX
	px=$(pause_ms twoahead "$MOVE_AT")
	MOVED=$(grep -q "^1 moved, 0 failed" "$OUT/twoahead.cmd" && echo 0 || echo 1)
	result two-gpus-ahead "$([ $TRC = 0 ] && [ "$SAME" = 0 ] && [ $MOVED = 0 ] && echo 0 || echo 1)" \
		"GPU to GPU with RGPUD_MIGRATE_AHEAD=1: losses identical: $([ "$SAME" = 0 ] && echo yes || echo NO); pause $px ms (without: $pp ms); $(grep -o "session moved to .*" "$OUT/rgpud-twoX.log" | tail -1)"
	grep -o "objects re-created in .*" "$OUT/rgpud-twoX.log" 2>/dev/null | tail -1 | sed "s/^/two-gpus-ahead target: /" | tee -a "$S"
	# the same with three times the memory: the pause's growth per GiB is
	# the handover's own copy rate (its fixed part left out)
	big=$((DATA_MB * 3))
	start bigP && BP=$PORT BPID=$PID
	DATA_MB=$big train plainbig "127.0.0.1:$BP"
	wait "$TPID"
	kill_all "$BPID"
	MIG_CLIENT_LOG=debug DATA_MB=$big RGPUD_MIGRATE_AHEAD=1 move_to_gpu1 twoaheadbig twoXB
	pb=$(pause_ms twoaheadbig "$MOVE_AT")
	SAME=$(diff <(losses plainbig) <(losses twoaheadbig) >/dev/null && echo 0 || echo 1)
	MOVED=$(grep -q "^1 moved, 0 failed" "$OUT/twoaheadbig.cmd" && echo 0 || echo 1)
	xbb=$(grep -o "[0-9]* of them device memory copied GPU to GPU" "$OUT/rgpud-twoXB.log" | tail -1 | cut -d' ' -f1)
	result two-gpus-ahead-big "$([ $TRC = 0 ] && [ "$SAME" = 0 ] && [ $MOVED = 0 ] && echo 0 || echo 1)" \
		"the same with DATA_MB=$big: losses identical to its own plain run: $([ "$SAME" = 0 ] && echo yes || echo NO); pause $pb ms; $(grep -o "session moved to .*" "$OUT/rgpud-twoXB.log" | tail -1)"
	grep -o "objects re-created in .*" "$OUT/rgpud-twoXB.log" 2>/dev/null | tail -1 | sed "s/^/two-gpus-ahead-big target: /" | tee -a "$S"
	for n in twoahead twoaheadbig; do
		grep -o "session re-attached.*" "$OUT/$n.err" 2>/dev/null | tail -1 | sed "s/^/$n client: /" | tee -a "$S"
		grep -o "re-attach: .*" "$OUT/$n.err" 2>/dev/null | tail -1 | sed "s/^/$n client: /" | tee -a "$S"
	done
	# the path's own copy bandwidth, measured here: a local peer copy of
	# 256 MiB GPU 0 -> 1 (torch), against what the pause moved
	LD_LIBRARY_PATH=$R:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
		timeout 120 $PY "$src/test/gpu/multi/p2p_bw.py" >"$OUT/p2p-local.log" 2>&1
	link=$(awk '$1 == "BW" && $2 == "0to1" { print $3 }' "$OUT/p2p-local.log")
	xb=$(grep -o "[0-9]* of them device memory copied GPU to GPU" "$OUT/rgpud-twoX.log" | tail -1 | cut -d' ' -f1)
	if [ -n "$link" ] && [ -n "$xb" ]; then
		say "two-gpus-ahead path: local peer copy GPU 0 -> 1 ${link} GB/s (256 MiB); the pause ($px ms) moved $xb bytes of device memory at $(awk -v b="$xb" -v p="$px" 'BEGIN { printf "%.1f", b / (p / 1000) / 1e9 }') GB/s = $(awk -v b="$xb" -v p="$px" -v r="$link" 'BEGIN { printf "%.0f", 100 * b / (p / 1000) / 1e9 / r }')% of it (target 80%); $(awk -v b="$xb" -v p="$px" 'BEGIN { printf "%.1f", p / (b / 1073741824) }') ms per GiB"
		if [ -n "$xbb" ] && [ -n "$pb" ]; then
			say "two-gpus-ahead slope: from $xb to $xbb bytes the pause went from $px to $pb ms: $(awk -v a="$xb" -v b="$xbb" -v p="$px" -v q="$pb" 'BEGIN { if (b > a && q > p) printf "%.2f ms per GiB more = %.1f GB/s", (q - p) / ((b - a) / 1073741824), (b - a) / ((q - p) / 1000) / 1e9; else print "no growth measured" }') against the link's $link GB/s ($(awk -v a="$xb" -v b="$xbb" -v p="$px" -v q="$pb" -v r="$link" 'BEGIN { if (b > a && q > p) printf "%.0f%%", 100 * (b - a) / ((q - p) / 1000) / 1e9 / r; else print "?" }')); fixed part $(awk -v a="$xb" -v b="$xbb" -v p="$px" -v q="$pb" 'BEGIN { if (b > a && q > p) printf "%.1f ms", p - (q - p) / (b - a) * a; else print "?" }')"
		fi
	fi
else
	say "SKIP two-gpus: this machine has $ngpu GPU(s); moving between two GPUs of one server needs two"
fi
fi

# stream-ordered pools: PyTorch's cudaMallocAsync backend (every tensor
# from the device's default pool, which rgpud serves: blocks at addresses
# that move).  MIG_ONLY=pool runs only these.
PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync variant pool P "cudaMallocAsync backend"
say "migrate.sh: $pass passed, $fail failed"
[ "$fail" = 0 ]
