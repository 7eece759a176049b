#!/bin/bash
# Builds and runs peer_copy.c on the GPU machine (two GPUs of one host):
# which way a migration's GPU-to-GPU copy runs fastest.
#   bash bench/migrate/peer_copy.sh [--out DIR]
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=/tmp/rgpu-peer-copy
[ "${1:-}" = --out ] && out=$2
mkdir -p "$out"
REAL=${RGPU_REAL_DRIVER_DIR:-/usr/local/nvidia/lib64}
CUDA=${CUDA_HOME:-/usr/local/cuda}
gcc -std=c11 -O2 -Wall -Wextra -I"$CUDA/include" "$here/peer_copy.c" -ldl -o "$out/peer_copy" || exit 1
LD_LIBRARY_PATH=$REAL${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} timeout 120 "$out/peer_copy" | tee "$out/peer_copy.log"
