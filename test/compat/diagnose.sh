#!/bin/bash
# Follow-up diagnostics for the failures run-compat.sh found (see
# docs/compat-results.md); run on the GPU machine after run-compat.sh.
#   1. rgpud with tools/tracer in front of the real driver (--driver): what
#      the daemon asks of the driver for managed and mapped host memory
#      (managed, hostalloc_mapped through rgpu, tcp and same host)
#   2. PyTorch's fp16 matmul (the stage that crashes through rgpu) with the
#      tracer in front of the rgpu client: the last calls before the crash
#   3. cuFFT direct under the tracer with argument dumps (export table
#      6e163fbe entry 7)
#   4. the PyTorch training-step benchmark alone (no debug logging): direct,
#      rgpu tcp, rgpu same host
# Output: $OUT_DIR (default $OUT) diag-*.txt and diag-logs.tar.gz.
set -u
here=$(cd "$(dirname "$0")" && pwd)
: "${top_srcdir:=$(cd "$here/../.." && pwd)}"
: "${top_builddir:=$top_srcdir/_build}"
: "${PYTHON:=python3}"
: "${CUDA_HOME:=/usr/local/cuda}"
REAL=${RGPU_REAL_DRIVER_DIR:-/usr/local/nvidia/lib64}
TRACER=${COMPAT_TRACER:-$top_srcdir/.devcarry/tracer}
BIN=${COMPAT_BIN:-$top_srcdir/.devcarry/compat}
CLIENTDIR=$top_builddir/client/.libs
RGPUD=$top_builddir/daemon/rgpud
OUT_DIR=${OUT_DIR:-${OUT:-$here/results}}
L=$OUT_DIR/diag-logs
mkdir -p "$L"
S=$OUT_DIR/diag-summary.txt
: >"$S"
say() { echo "$*" | tee -a "$S"; }
port() { "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
calls() { # TRACE NAME...: the named calls with their results
	local t=$1
	shift
	local re
	re=$(printf '%s\\|' "$@")
	grep -a "[<>] \\(${re%\\|}\\)[@( ]" "$t" | cut -c1-220 | head -40
}

# ---- 1. rgpud behind the tracer
P=$(port)
RGPU_TRACE_LOG=$L/rgpud-trace.log RGPU_TRACE_NODUMP=1 RGPU_TRACE_REAL=$REAL/libcuda.so.1 \
	LD_LIBRARY_PATH=$TRACER:$REAL "$RGPUD" --open --listen "127.0.0.1:$P" --driver="$TRACER/libcuda.so.1" \
	>"$L/rgpud.log" 2>&1 &
DP=$!
if wait_port "$P"; then
	for prog in managed hostalloc_mapped; do
		for tp in tcp auto; do
			echo "=== $prog $tp" >>"$L/rgpud-trace.log"
			env LD_LIBRARY_PATH="$CLIENTDIR:$CUDA_HOME/lib64" RGPU_SERVERS="127.0.0.1:$P/0" RGPU_TRANSPORT=$tp \
				RGPU_LOG_LEVEL=debug timeout 60 "$BIN/$prog.static" >"$L/$prog-$tp.out" 2>&1
			say "--- 1. $prog through rgpu ($tp): rc $? : $(grep -a -m1 -E '^FAIL|^OK' "$L/$prog-$tp.out")"
		done
	done
	say "rgpud's driver calls for them (virtual memory management):"
	calls "$L/rgpud-trace.log" cuMemAddressReserve cuMemCreate cuMemMap cuMemSetAccess cuMemAddressFree \
		cuMemRelease cuMemUnmap cuMemGetAllocationGranularity | tee -a "$S"
	grep -a -c '' "$L/rgpud-trace.log" >/dev/null
else
	say "--- 1. rgpud behind the tracer did not start: $(tail -3 "$L/rgpud.log")"
fi
kill "$DP" 2>/dev/null
wait "$DP" 2>/dev/null

# ---- 2. PyTorch fp16 matmul through rgpu, client behind the tracer
P=$(port)
LD_LIBRARY_PATH=$REAL "$RGPUD" --open --listen "127.0.0.1:$P" >"$L/rgpud2.log" 2>&1 &
DP=$!
if wait_port "$P"; then
	env LD_LIBRARY_PATH="$TRACER:$CLIENTDIR:$CUDA_HOME/lib64" RGPU_TRACE_REAL="$CLIENTDIR/libcuda.so.1" \
		RGPU_TRACE_LOG="$L/torch-f16-rgpu-trace.log" RGPU_SERVERS="127.0.0.1:$P/0" RGPU_TRANSPORT=tcp \
		RGPU_LOG_LEVEL=debug COMPAT_TORCH_SKIP=tensor_ops,matmul_f32,conv2d_cudnn,train \
		timeout 120 "$PYTHON" -X faulthandler "$here/torch_compat.py" check >"$L/torch-f16-rgpu.out" 2>&1
	say "--- 2. torch fp16 matmul through rgpu (tcp), client traced: rc $?"
	grep -a -E 'not supported|not served|Fatal|File "' "$L/torch-f16-rgpu.out" | head -12 | tee -a "$S"
	say "last 40 trace lines before the end:"
	grep -a -v 'cuDeviceGetAttribute\|cuCtxGetCurrent\|cuCtxGetDevice' "$L/torch-f16-rgpu-trace.log" | tail -40 |
		cut -c1-220 | tee -a "$S"
	# ---- 4. benchmark, no debug logging
	for m in direct tcp auto; do
		if [ $m = direct ]; then lib=$REAL; sv=; else lib=$CLIENTDIR; sv="127.0.0.1:$P/0"; fi
		env LD_LIBRARY_PATH="$lib:$CUDA_HOME/lib64" RGPU_SERVERS="$sv" RGPU_TRANSPORT=$m \
			timeout 120 "$PYTHON" "$here/torch_compat.py" bench >"$L/torch-bench-$m.out" 2>&1
		say "--- 4. torch bench $m: rc $?"
		grep -a '^BENCH' "$L/torch-bench-$m.out" | tee -a "$S"
	done
fi
kill "$DP" 2>/dev/null
wait "$DP" 2>/dev/null

# ---- 3. cuFFT direct, table entry arguments dumped
env LD_LIBRARY_PATH="$TRACER:$CUDA_HOME/lib64" RGPU_TRACE_REAL="$REAL/libcuda.so.1" \
	RGPU_TRACE_LOG="$L/cufft-direct-trace.log" timeout 60 "$BIN/cufft.static" >"$L/cufft-direct.out" 2>&1
say "--- 3. cufft direct traced: rc $?"
grep -a 'tbl_6e163fbe\|cuGetExportTable 6e163fbe' "$L/cufft-direct-trace.log" | cut -c1-600 |
	head -30 | tee -a "$S"

tar -C "$OUT_DIR" -czf "$OUT_DIR/diag-logs.tar.gz" diag-logs && rm -rf "$L"
