#!/bin/bash
# What a CUDA context really costs in device memory, on the GPU machine:
#
#   bash test/gpu/context-cost.sh --out DIR        (root; about 2 minutes)
#
# For each configuration, K processes (test/gpu/ctxcost.c, built here with
# gcc) each hold one context on GPU 0; the device's used memory
# (nvidia-smi, whole device, every process and MPS server included) is read
# before and after, and the difference over K is one context's cost.
# Configurations: the local driver with default flags, with a kernel run
# (code and its state loaded), with CU_CTX_LMEM_RESIZE_TO_MAX, with small
# stack/heap/printf limits, with CUDA_MODULE_LOADING=EAGER and LAZY; the same
# under MPS (a private nvidia-cuda-mps-control, stopped at the end); and
# through rgpud (each process is an rgpu client; its context lives in an
# rgpud session worker), without and with MPS.
#
# Prints a table (DIR/context-cost.txt) and the last line
#   RECOMMENDED --ctx-reserve=<N>M (rgpud session with a kernel run, max of
#   with and without MPS, rounded up to 2 MiB)
# which is the value for rgpud's --ctx-reserve and job_submit.lua's
# CTX_RESERVE_MIB (docs/admin.md.in, "Context cost").
set -u
OUT=
while [ $# -gt 0 ]; do
	case $1 in
	--out) OUT=$2; shift 2 ;;
	*) echo "usage: $0 --out DIR" >&2; exit 2 ;;
	esac
done
[ -n "$OUT" ] || { echo "usage: $0 --out DIR" >&2; exit 2; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${top_builddir:-$SRC/_build}
REAL=${RGPU_REAL_DRIVER_DIR:-/usr/local/nvidia/lib64}
K=${CTXCOST_K:-8}
T=$(mktemp -d /tmp/rgpu-ctxcost.XXXXXX)
chmod 755 "$T"
REPORT=$OUT/context-cost.txt
LOG=$OUT/context-cost.log
: >"$REPORT"
: >"$LOG"
MPS_STARTED= RGPUD_PID=
cleanup() {
	local p
	for p in $(jobs -p); do kill "$p" 2>/dev/null; done
	[ -n "$RGPUD_PID" ] && kill "$RGPUD_PID" 2>/dev/null
	if [ -n "$MPS_STARTED" ]; then
		echo quit | CUDA_MPS_PIPE_DIRECTORY=$T/mps-pipe timeout 10 nvidia-cuda-mps-control >/dev/null 2>&1
	fi
	wait 2>/dev/null
	rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
say() { echo "$*" | tee -a "$REPORT"; }

command -v nvidia-smi >/dev/null || { echo "SKIP: no nvidia-smi"; exit 77; }
[ -e "$REAL/libcuda.so.1" ] || { echo "SKIP: no driver at $REAL/libcuda.so.1"; exit 77; }
gcc -std=gnu11 -O1 -I/usr/local/cuda/include -o "$T/ctxcost" "$SRC/test/gpu/ctxcost.c" -ldl \
	|| { echo "FAIL: cannot build ctxcost"; exit 1; }
chmod 755 "$T/ctxcost"

used_mib() { nvidia-smi -i 0 --query-gpu=memory.used --format=csv,noheader,nounits | head -1 | tr -d ' '; }
# Used memory once it stops moving (a context that just exited takes a
# moment to be freed): two equal reads 0.3 s apart, at most 5 s.
settled() {
	local a b t
	a=$(used_mib)
	for t in $(seq 1 16); do
		sleep 0.3
		b=$(used_mib)
		[ "$a" = "$b" ] && break
		a=$b
	done
	echo "$b"
}

# measure NAME ENV... -- ARGS...: K holders at once; prints the per-context MiB
RESULTS=()
# holders that wrote their ready file (each renames it from .tmp when done;
# the directory's own path holds "tmp", so match the names alone)
nready() { ls "$T" | grep -c '^ready\.[0-9]*$'; }
measure() {
	local name=$1; shift
	local envs=() args=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
	[ $# -gt 0 ] && shift
	args=("$@")
	local before after i t pids=() ok=1
	before=$(settled)
	rm -f "$T"/ready.*
	for i in $(seq 1 "$K"); do
		env "${envs[@]}" timeout 150 "$T/ctxcost" "${args[@]}" --ready "$T/ready.$i" \
			>>"$LOG" 2>&1 &
		pids+=($!)
	done
	for t in $(seq 1 300); do
		[ "$(nready)" -ge "$K" ] && break
		# a holder that died will never be ready
		for i in "${pids[@]}"; do kill -0 "$i" 2>/dev/null || { ok=0; break 2; }; done
		sleep 0.2
	done
	[ "$(nready)" -ge "$K" ] || ok=0
	after=$(settled)
	nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader >>"$LOG" 2>&1
	kill "${pids[@]}" 2>/dev/null
	wait "${pids[@]}" 2>/dev/null
	if [ $ok = 0 ]; then
		say "$(printf '%-44s %s' "$name" "FAILED (see context-cost.log)")"
		echo "== $name: a holder failed" >>"$LOG"
		return 1
	fi
	local per=$(( (after - before + K - 1) / K ))
	say "$(printf '%-44s %6s MiB  (%d contexts: %s -> %s MiB used)' "$name" "$per" "$K" "$before" "$after")"
	RESULTS+=("$name=$per")
	return 0
}
result_of() { local r; for r in "${RESULTS[@]}"; do [ "${r%%=*}" = "$1" ] && echo "${r#*=}"; done; }

say "context cost on $(nvidia-smi -i 0 --query-gpu=name,memory.total,driver_version --format=csv,noheader)"
say "$(date -u '+%Y-%m-%d %H:%M UTC'); $K contexts per configuration, one per process; MiB per context"
DIRECT=(LD_LIBRARY_PATH=$REAL)
SMALL=(--stack 1024 --heap 1048576 --printf 65536)

say "-- local driver"
measure "direct, default" "${DIRECT[@]}" -- 
measure "direct, kernel run" "${DIRECT[@]}" -- --kernel
measure "direct, kernel, LAZY loading" "${DIRECT[@]}" CUDA_MODULE_LOADING=LAZY -- --kernel
measure "direct, kernel, EAGER loading" "${DIRECT[@]}" CUDA_MODULE_LOADING=EAGER -- --kernel
measure "direct, kernel, LMEM_RESIZE_TO_MAX" "${DIRECT[@]}" -- --kernel --lmem-max
measure "direct, kernel, small stack/heap/printf" "${DIRECT[@]}" -- --kernel "${SMALL[@]}"

start_mps() {
	mkdir -p "$T/mps-pipe" "$T/mps-log"
	chmod 1777 "$T/mps-pipe" "$T/mps-log"
	CUDA_MPS_PIPE_DIRECTORY=$T/mps-pipe CUDA_MPS_LOG_DIRECTORY=$T/mps-log \
		timeout 20 nvidia-cuda-mps-control -d >>"$LOG" 2>&1 || return 1
	MPS_STARTED=1
}
stop_mps() {
	echo quit | CUDA_MPS_PIPE_DIRECTORY=$T/mps-pipe timeout 20 nvidia-cuda-mps-control >>"$LOG" 2>&1
	MPS_STARTED=
	sleep 1
}
MPSENV=(CUDA_MPS_PIPE_DIRECTORY=$T/mps-pipe CUDA_MPS_LOG_DIRECTORY=$T/mps-log)

say "-- under MPS (the server's own context counted apart)"
if command -v nvidia-cuda-mps-control >/dev/null && start_mps; then
	# the first client starts the MPS server: hold one so it stays up
	b0=$(settled)
	env "${DIRECT[@]}" "${MPSENV[@]}" timeout 150 "$T/ctxcost" --ready "$T/anchor" >>"$LOG" 2>&1 &
	anchor=$!
	for t in $(seq 1 150); do [ -e "$T/anchor" ] && break; sleep 0.2; done
	a0=$(settled)
	say "$(printf '%-44s %6s MiB  (server + one client)' "MPS server and first client" "$((a0 - b0))")"
	measure "MPS, default" "${DIRECT[@]}" "${MPSENV[@]}" --
	measure "MPS, kernel run" "${DIRECT[@]}" "${MPSENV[@]}" -- --kernel
	measure "MPS, kernel, small stack/heap/printf" "${DIRECT[@]}" "${MPSENV[@]}" -- --kernel "${SMALL[@]}"
	kill "$anchor" 2>/dev/null; wait "$anchor" 2>/dev/null
	stop_mps
else
	say "MPS: not available (nvidia-cuda-mps-control missing or did not start)"
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# start_rgpud ENV...: an rgpud on a free loopback port (its workers drop to
# nobody: the MPS directories are world-writable for that)
start_rgpud() {
	PORT=$(free_port)
	env LD_LIBRARY_PATH=$REAL:${LD_LIBRARY_PATH:-} "$@" "$BUILD/daemon/rgpud" --open \
		--listen "127.0.0.1:$PORT" >>"$LOG" 2>&1 &
	RGPUD_PID=$!
	local t
	for t in $(seq 1 50); do
		(exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return 0
		kill -0 "$RGPUD_PID" 2>/dev/null || break
		sleep 0.2
	done
	echo "rgpud did not start" >>"$LOG"
	return 1
}
stop_rgpud() { kill "$RGPUD_PID" 2>/dev/null; wait "$RGPUD_PID" 2>/dev/null; RGPUD_PID=; sleep 1; }

say "-- through rgpud (one session worker per client)"
if [ -x "$BUILD/daemon/rgpud" ] && [ -e "$BUILD/client/.libs/libcuda.so.1" ]; then
	if start_rgpud; then
		CL=(LD_LIBRARY_PATH=$BUILD/client/.libs:${LD_LIBRARY_PATH:-} RGPU_SERVERS=127.0.0.1:$PORT/0 RGPU_TRANSPORT=tcp)
		measure "rgpud, default" "${CL[@]}" --
		measure "rgpud, kernel run" "${CL[@]}" -- --kernel
		measure "rgpud, kernel, small stack/heap/printf" "${CL[@]}" -- --kernel "${SMALL[@]}"
		stop_rgpud
	fi
	if command -v nvidia-cuda-mps-control >/dev/null && start_mps; then
		if start_rgpud "${MPSENV[@]}"; then
			CL=(LD_LIBRARY_PATH=$BUILD/client/.libs:${LD_LIBRARY_PATH:-} RGPU_SERVERS=127.0.0.1:$PORT/0 RGPU_TRANSPORT=tcp)
			# the first session starts the MPS server (for the workers' uid)
			env "${CL[@]}" timeout 150 "$T/ctxcost" --ready "$T/anchor2" >>"$LOG" 2>&1 &
			anchor=$!
			for t in $(seq 1 150); do [ -e "$T/anchor2" ] && break; sleep 0.2; done
			measure "rgpud under MPS, kernel run" "${CL[@]}" -- --kernel
			kill "$anchor" 2>/dev/null; wait "$anchor" 2>/dev/null
			stop_rgpud
		fi
		stop_mps
	fi
else
	say "rgpud: not built in $BUILD"
fi

r1=$(result_of "rgpud, kernel run")
r2=$(result_of "rgpud under MPS, kernel run")
d1=$(result_of "direct, kernel run")
best=0
for v in $r1 $r2; do [ "$v" -gt "$best" ] && best=$v; done
[ "$best" -gt 0 ] || best=${d1:-0}
if [ "$best" -gt 0 ]; then
	rec=$(( (best + 1) / 2 * 2 ))
	say "RECOMMENDED --ctx-reserve=${rec}M (rgpud session with a kernel run, max of with and without MPS, rounded up to 2 MiB)"
	exit 0
fi
say "RECOMMENDED: none (no configuration could be measured)"
exit 1
