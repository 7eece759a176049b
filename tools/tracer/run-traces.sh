#!/bin/bash
# Traces the runtime test, a cuBLAS SGEMM and a PyTorch matmul on a GPU
# machine, writing gzipped logs and a summary into $OUT.
#   TRACER_DIR: the tracer build (libcuda.so.1 and the test binaries t_runtime,
#   sgemm built with nvcc), default .devcarry/tracer
set -u
T=$(cd "${TRACER_DIR:-.devcarry/tracer}" && pwd)
OUT=${OUT:-/tmp/rgpu-traces}
mkdir -p "$OUT"
S=$OUT/summary.txt
CUDALIB=/usr/local/cuda/lib64
{ nvidia-smi -L; date; } > "$S" 2>&1

trace() {
	local name=$1
	shift
	local t0=$SECONDS
	RGPU_TRACE_LOG=/tmp/$name.log LD_LIBRARY_PATH=$T:$CUDALIB timeout 180 "$@" > /tmp/$name.out 2>&1
	local rc=$?
	echo "== $name rc=$rc $((SECONDS - t0))s: $*" >> "$S"
	tail -5 /tmp/$name.out >> "$S"
	[ -f /tmp/$name.log ] && grep -E 'integrity|cuGetExportTable' /tmp/$name.log | head -40 >> "$S"
	[ -f /tmp/$name.log ] && gzip -c /tmp/$name.log > "$OUT/$name.log.gz"
}

echo "== native" >> "$S"
LD_LIBRARY_PATH=$CUDALIB timeout 60 "$T/t_runtime" >> "$S" 2>&1; echo "t_runtime native rc=$?" >> "$S"
LD_LIBRARY_PATH=$CUDALIB timeout 60 "$T/sgemm" >> "$S" 2>&1; echo "sgemm native rc=$?" >> "$S"
trace t_runtime "$T/t_runtime"
trace sgemm "$T/sgemm"
trace torch python3 -c 'import torch
a = torch.randn(512, 512, device="cuda")
b = (a @ a).sum().item()
x = torch.randn(1, 3, 32, 32, device="cuda")
c = torch.nn.functional.conv2d(x, torch.randn(8, 3, 3, 3, device="cuda")).sum().item()
torch.cuda.synchronize()
print("torch ok", b, c)'
