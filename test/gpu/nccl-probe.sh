#!/bin/bash
# Where NCCL's all-reduce loses bandwidth through rgpud (two GPUs of one
# host): the same nccl_allreduce.py locally and through rgpud, with the
# scheduler's gate (fair) and without (fifo), with NCCL's cuMem buffers and
# with its legacy IPC ones.  Prints "PROBE name BUSBW 64MiB x 256MiB y".
#   bash test/gpu/nccl-probe.sh [--out DIR]
# "LOOP" lines: for each rank, the host's time to queue an all-reduce, the
# wall time, the GPU's time per all-reduce and the spread of its steps.
# PROBE_ONLY picks one part instead of all: ktime (the all-reduce's own GPU
# time, "KERNEL" lines: the least of the two ranks' times in each round, as
# a rank's time holds its wait for the other), hostmem (NCCL without cuMem host memory, and its
# copy-engine P2P), p2p (the transports NCCL sets up, P2P read off,
# PyTorch's expandable segments), one (a single rank, as a check of the probe).
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
OUT=/tmp/rgpu-nccl-probe
[ "${1:-}" = --out ] && OUT=$2
mkdir -p "$OUT"
B=${top_builddir:-$src/_build}
REAL=${RGPU_REAL_DRIVER_DIR:-/usr/local/nvidia/lib64}
# (the libraries the GPU machine lacks, carried beside the build)
[ -d "$src/.devcarry/lib" ] && export LD_LIBRARY_PATH=$src/.devcarry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
PY=${PYTHON:-python3}
TR="$PY -m torch.distributed.run --nproc_per_node=2"
free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=""
trap 'kill $pids 2>/dev/null; wait 2>/dev/null' EXIT
start() { # name args -> PORT
	local name=$1
	shift
	PORT=$(free_port)
	LD_LIBRARY_PATH=$REAL${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$B/daemon/rgpud" --open \
		--listen "127.0.0.1:$PORT" "$@" >"$OUT/rgpud-$name.log" 2>&1 &
	pids="$pids $!"
	sleep 1.5
}
probe() { # name where env...
	local name=$1 where=$2
	shift 2
	if [ "$where" = local ]; then
		timeout 90 env LD_LIBRARY_PATH="$REAL${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NCCL_NVLS_ENABLE=0 "$@" \
			$TR --master_port="$(free_port)" "$src/test/gpu/multi/nccl_allreduce.py" >"$OUT/$name.log" 2>&1
	else
		timeout 90 env RGPU_SERVERS="$where" NCCL_NVLS_ENABLE=0 \
			LD_LIBRARY_PATH="$B/client/.libs:$B/nvml/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@" \
			$TR --master_port="$(free_port)" "$src/test/gpu/multi/nccl_allreduce.py" >"$OUT/$name.log" 2>&1
	fi
	echo "PROBE $name $(grep ^BUSBW "$OUT/$name.log" | tr '\n' ' ') $(grep -c 'CHECK allreduce_data ok' "$OUT/$name.log")" \
		"$(grep ^KERNEL "$OUT/$name.log" | tr '\n' ' ')"
	grep ^LOOP "$OUT/$name.log" | sed "s/^/  $name /"
}
start fair --sched=fair
F=$PORT
# PROBE_ONLY=one: one rank on GPU 0, both ways (the probe's own check on a
# machine of one GPU: its LOOP and KERNEL lines, no bus bandwidth)
if [ "${PROBE_ONLY:-}" = one ]; then
	TR="$PY -m torch.distributed.run --nproc_per_node=1"
	probe one-local local NCCL_PROBE_KERNEL_TIME=1
	probe one-rgpu "127.0.0.1:$F/0" NCCL_PROBE_KERNEL_TIME=1
	exit 0
fi
# PROBE_ONLY=ktime: only the all-reduces' own GPU time, both ways
if [ "${PROBE_ONLY:-}" = ktime ]; then
	probe local-ktime local NCCL_PROBE_KERNEL_TIME=1
	probe rgpu-ktime "127.0.0.1:$F/0,127.0.0.1:$F/1" NCCL_PROBE_KERNEL_TIME=1
	probe local-ktime-again local NCCL_PROBE_KERNEL_TIME=1
	probe rgpu-ktime-again "127.0.0.1:$F/0,127.0.0.1:$F/1" NCCL_PROBE_KERNEL_TIME=1
	exit 0
fi
# PROBE_ONLY=p2p: the transports NCCL set up (INIT,P2P), P2P read off,
# and PyTorch's expandable segments (its tensors in VMM memory, as rgpud
# maps a session's), both ways
if [ "${PROBE_ONLY:-}" = p2p ]; then
	probe local-p2plog local NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P
	probe rgpu-p2plog "127.0.0.1:$F/0,127.0.0.1:$F/1" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P
	probe local-expandable local PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
	probe local-noread local NCCL_P2P_READ_ENABLE=0
	probe rgpu-noread "127.0.0.1:$F/0,127.0.0.1:$F/1" NCCL_P2P_READ_ENABLE=0
	for n in local-p2plog rgpu-p2plog; do
		echo "== $n: channels and transports"
		grep -o "Channel [0-9]*/[0-9]* : [0-9]*\[[0-9]*\] -> [0-9]*\[[0-9]*\] via .*" "$OUT/$n.log" |
			sed 's/Channel [0-9]*\/[0-9]* : //' | sort | uniq -c
		grep -h "P2P\|p2p" "$OUT/$n.log" | grep -v "Channel" | sed -E 's/^[^ ]+ //' | sort | uniq -c | head -12
	done
	exit 0
fi
# PROBE_ONLY=hostmem: NCCL's host memory without cuMem (rgpu refuses
# cuMemCreate of host memory, so NCCL falls back to cudaHostAlloc there)
# and its copy-engine P2P, both ways
if [ "${PROBE_ONLY:-}" = hostmem ]; then
	probe local local
	probe local-nocumemhost local NCCL_CUMEM_HOST_ENABLE=0
	probe rgpu "127.0.0.1:$F/0,127.0.0.1:$F/1"
	probe local-p2pce local NCCL_P2P_USE_CUDA_MEMCPY=1
	probe rgpu-p2pce "127.0.0.1:$F/0,127.0.0.1:$F/1" NCCL_P2P_USE_CUDA_MEMCPY=1
	exit 0
fi
# (the requests each rank's session served, and the time they took, in
# this rgpud's log at the sessions' end)
RGPUD_OP_STATS=1 start fifo --sched=fifo
Q=$PORT
probe local local
probe rgpu-fair "127.0.0.1:$F/0,127.0.0.1:$F/1"
probe rgpu-fifo "127.0.0.1:$Q/0,127.0.0.1:$Q/1"
probe local-nocumem local NCCL_CUMEM_ENABLE=0
probe rgpu-fifo-nocumem "127.0.0.1:$Q/0,127.0.0.1:$Q/1" NCCL_CUMEM_ENABLE=0
probe rgpu-fifo-ce "127.0.0.1:$Q/0,127.0.0.1:$Q/1" NCCL_PROTO=Simple
probe local-ce local NCCL_PROTO=Simple
# the kernels' launch attributes (memory sync domain, thread-block
# clusters): if the local run falls to rgpu's rate without one, rgpu's
# launches lose it
probe local-nodomain local NCCL_MEM_SYNC_DOMAIN=0
probe local-nocga local NCCL_CGA_CLUSTER_SIZE=0
probe rgpu-fifo-nodomain "127.0.0.1:$Q/0,127.0.0.1:$Q/1" NCCL_MEM_SYNC_DOMAIN=0
probe local-again local
# a context on both GPUs in each rank, as an rgpud session that enables
# peer access makes: if the local run falls to rgpu's rate with it, the
# second context is where the time goes
probe local-touch local NCCL_PROBE_TOUCH_ALL=1
# what NCCL chose for each all-reduce (algorithm, protocol, channels) both
# ways: 64 MiB runs at local speed through rgpud, 256 MiB at 83-87%
# (2026-11-28): a different choice for the large one would say why
probe local-coll local NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL,TUNING
probe rgpu-coll "127.0.0.1:$Q/0,127.0.0.1:$Q/1" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL,TUNING
for n in local-coll rgpu-coll; do
	echo "== $n: the all-reduces NCCL ran (count, bytes, algorithm, protocol, channels)"
	grep -o "AllReduce: opCount [0-9a-f]* sendbuff [^ ]* recvbuff [^ ]* count [0-9]* .*" "$OUT/$n.log" |
		sed -E 's/opCount [0-9a-f]* sendbuff [^ ]* recvbuff [^ ]* //; s/comm 0x[0-9a-f]* //; s/stream 0x[0-9a-f]*//' |
		sort | uniq -c | sort -rn | head -8
	grep -h "Algo\|algorithm\|proto" "$OUT/$n.log" | grep -v "^$" | sort | uniq -c | sort -rn | head -6
done
kill $pids 2>/dev/null
wait 2>/dev/null
pids=""
echo "== the fifo rgpud's sessions (RGPUD_OP_STATS)"
grep -h "op stats\|served\|LAUNCH\|SYNC\|EVENT" "$OUT/rgpud-fifo.log" | head -40
