#!/bin/bash
# Build the compatibility corpus with nvcc: every .cu twice, default
# (static cudart) as NAME.static and with -cudart shared as NAME.shared.
# Usage: build.sh OUTDIR   (NVCC, NVCC_ARCH, CUDA_HOME override; -j via JOBS)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build.sh OUTDIR}
: "${CUDA_HOME:=/usr/local/cuda}"
: "${NVCC:=$CUDA_HOME/bin/nvcc}"
: "${NVCC_ARCH:=-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90}"
: "${JOBS:=4}"
mkdir -p "$out"
libs_for() {
	case $1 in
	cublas_*) echo -lcublas ;;
	cufft) echo -lcufft ;;
	curand) echo -lcurand ;;
	cusparse) echo -lcusparse ;;
	esac
}
jobs=()
for src in "$here"/*.cu; do
	name=$(basename "$src" .cu)
	for rt in static shared; do
		[ "$name" = cublas_bench ] && [ $rt = shared ] && continue
		# shellcheck disable=SC2086
		echo "$NVCC -O2 -std=c++17 $NVCC_ARCH -cudart $rt -I$here -o $out/$name.$rt $src -L$CUDA_HOME/lib64 $(libs_for "$name")"
	done
done | xargs -P "$JOBS" -I{} sh -c '{} || { echo "BUILD FAILED: {}"; exit 255; }'
ls "$out"
