#!/bin/bash
# Application memory and several GPUs through rgpud, against the local
# driver, on the GPU machine (issue 10):
#
#   bash test/gpu/multi-gpu.sh --out DIR
#
# One GPU (always): t_appmem (VMM, shareable handles between two processes,
# pools, 2D memsets) directly and through rgpud (TCP and the same-host
# path); PyTorch training with expandable segments (its allocator then uses
# the VMM API); a jitted JAX training step; CuPy results with the default
# and the stream-ordered memory pool; a CUDA tensor sent to another process
# with torch.multiprocessing (IPC memory and event handles); PyTorch's
# libraries (cuDNN, cuFFT, cuSOLVER, cuSPARSE, bf16 attention, CUDA graphs,
# torch.compile: torch_ops.py).  Each compares
# the results through rgpud with the local run.
# Two GPUs or more (skipped with a message otherwise): peer copy bandwidth
# (torch, 256 MiB), t_appmem's peer part, an NCCL all-reduce with
# torch.distributed (2 processes) and torchrun DDP losses, each through
# rgpud against local; the NVML drop-in listing the GPUs of RGPU_SERVERS.
#
# Prints "RESULT name PASS|FAIL|SKIP detail" and "RATIO name x" lines (rgpu
# / local), then "multi-gpu: N passed, N failed, N skipped".  Needs the
# tree built (_build, with `make check` programs), python3 with torch, jax,
# cupy.  Each part has its own time limit; the whole stays under 8 minutes
# (MULTI_GPU_BUDGET seconds for all parts, 450; parts with no time left are
# reported as failed with "(no time left)" in their log).
set -u
OUT=""
while [ $# -gt 0 ]; do
	case $1 in
	--out) OUT=$2; shift 2 ;;
	--out=*) OUT=${1#--out=}; shift ;;
	*) echo "usage: $0 --out DIR" >&2; exit 2 ;;
	esac
done
[ -n "$OUT" ] || { echo "usage: $0 --out DIR" >&2; exit 2; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
B=${top_builddir:-$src/_build}
M=$src/test/gpu/multi
REAL=${RGPU_REAL_DRIVER_DIR:-/usr/local/nvidia/lib64}
CLIENT=$B/client/.libs
NVML=$B/nvml/.libs
RGPUD=$B/daemon/rgpud
E2E=$B/test/e2e
PY=${PYTHON:-python3}
T0=$(date +%s)
PASS=0 FAIL=0 SKIP=0

result() { # name PASS|FAIL|SKIP detail
	echo "RESULT $1 $2 ${3:-}"
	case $2 in PASS) PASS=$((PASS + 1)) ;; FAIL) FAIL=$((FAIL + 1)) ;; *) SKIP=$((SKIP + 1)) ;; esac
}

free_port() {
	$PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# the time left of the whole (MULTI_GPU_BUDGET seconds, default 450), for
# a part that wants up to $1 seconds
budget() {
	local left=$((${MULTI_GPU_BUDGET:-450} - ($(date +%s) - T0)))
	[ "$left" -lt "$1" ] && echo "$left" || echo "$1"
}

NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
echo "multi-gpu: $NGPU GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c | tr -s ' ' | tr '\n' ';')"
if [ "$NGPU" -lt 1 ] || [ ! -x "$RGPUD" ] || [ ! -e "$CLIENT/libcuda.so.1" ]; then
	echo "multi-gpu: needs a GPU and the built tree ($RGPUD, $CLIENT/libcuda.so.1)"
	exit 1
fi

PORT=$(free_port)
# (debug: each request the driver fails is logged with its name)
LD_LIBRARY_PATH=$REAL${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$RGPUD" --open --listen "127.0.0.1:$PORT" \
	--log-level=debug >"$OUT/rgpud.log" 2>&1 &
RPID=$!
trap 'kill $RPID 2>/dev/null; wait $RPID 2>/dev/null' EXIT
for _ in $(seq 1 100); do
	(exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
	sleep 0.1
done
ONE="127.0.0.1:$PORT/0"
TWOG="127.0.0.1:$PORT/0,127.0.0.1:$PORT/1"

# run NAME SECONDS WHERE cmd...: output in $OUT/NAME.log; its exit status.
# WHERE: "local" (the real driver first on the library path) or the
# RGPU_SERVERS of a run through rgpud (the client library first).
run() {
	local name=$1 t where=$3
	t=$(budget "$2")
	shift 3
	if [ "$t" -le 5 ]; then
		echo "(no time left)" >"$OUT/$name.log"
		return 124
	fi
	if [ "$where" = local ]; then
		timeout -k 5 "$t" env LD_LIBRARY_PATH="$REAL${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@" \
			>"$OUT/$name.log" 2>&1
	else
		timeout -k 5 "$t" env RGPU_SERVERS="$where" \
			LD_LIBRARY_PATH="$CLIENT:$NVML${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@" >"$OUT/$name.log" 2>&1
	fi
}

# same LINE-prefix lines in two logs? (LOSS, RESULT, CHECK)
same_lines() { # a b prefix
	local a b
	a=$(grep "^$3 " "$1" | sort)
	b=$(grep "^$3 " "$2" | sort)
	[ -n "$a" ] && [ "$a" = "$b" ]
}

# nvml_list NAME SERVERS "I J ...": nvidia-smi -L with rgpu's NVML first
# on the path lists exactly the local GPUs I J ..., in that order (UUIDs
# compared with the real driver's list); RGPU_NVML_DEBUG logs what
# nvidia-smi asks of the library's private table.
nvml_list() {
	local name=$1 where=$2 want="" i got
	for i in $3; do
		want="$want$(nvidia-smi -L | grep "^GPU $i:" | grep -o 'GPU-[0-9a-f-]*') "
	done
	run "$name" 30 "$where" env RGPU_NVML_DEBUG=1 \
		LD_LIBRARY_PATH="$NVML:$CLIENT${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" nvidia-smi -L
	got=$(grep '^GPU [0-9]*:' "$OUT/$name.log" | grep -o 'GPU-[0-9a-f-]*' | tr '\n' ' ')
	if [ -n "$got" ] && [ "$got" = "$want" ]; then
		result "$name" PASS "nvidia-smi -L through rgpu's NVML: $(grep -c '^GPU' "$OUT/$name.log") GPU(s), UUIDs $got"
	else
		result "$name" FAIL "nvidia-smi -L listed '$got', want '$want': $(grep -v 'rgpu NVML' "$OUT/$name.log" | head -3 | tr '\n' ' ')"
	fi
}

# nvml_query NAME SERVERS "I J ...": nvidia-smi --query-gpu (what job
# scripts and monitoring ask) with rgpu's NVML first on the path gives the
# index, name, UUID and PCI bus id the real NVML gives GPUs I J ... (as
# rgpu's devices 0, 1, ...); memory and utilisation are logged, not
# compared (a job's view of them is its share)
nvml_query() {
	local name=$1 where=$2 want="" i k=0 got q=index,name,uuid,pci.bus_id
	for i in $3; do
		want="$want$(nvidia-smi -i "$i" --query-gpu=$q --format=csv,noheader | sed "s/^[0-9]*,/$k,/")
"
		k=$((k + 1))
	done
	run "$name" 30 "$where" env LD_LIBRARY_PATH="$NVML:$CLIENT${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
		nvidia-smi --query-gpu=$q,memory.total,memory.used,utilization.gpu --format=csv,noheader
	got=$(grep -E '^[0-9]+, ' "$OUT/$name.log" | cut -d, -f1-4)
	if [ -n "$got" ] && [ "$got" = "$(printf %s "$want" | sed '/^$/d')" ]; then
		result "$name" PASS "nvidia-smi --query-gpu through rgpu's NVML: $(grep -E '^[0-9]+, ' "$OUT/$name.log" | tr '\n' ';')"
	else
		result "$name" FAIL "nvidia-smi --query-gpu gave '$(head -3 "$OUT/$name.log" | tr '\n' ';')', want '$(printf %s "$want" | tr '\n' ';')'"
	fi
}

# largest relative difference between LOSS lines of two logs
loss_diff() {
	$PY - "$1" "$2" <<'EOF'
import sys
def losses(p):
    return {l.split()[1]: float(l.split()[2]) for l in open(p) if l.startswith("LOSS ")}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
if not a or set(a) != set(b):
    print("missing"); sys.exit()
print("%.2e" % max(abs(a[k] - b[k]) / max(abs(a[k]), 1e-12) for k in a))
EOF
}

compare_losses() { # name local.log rgpu.log
	local d
	d=$(loss_diff "$2" "$3")
	if [ "$d" = missing ]; then
		result "$1" FAIL "losses missing (see $2, $3)"
	elif same_lines "$2" "$3" LOSS; then
		result "$1" PASS "losses identical to local"
	elif $PY -c "import sys; sys.exit(0 if float('$d') < 1e-5 else 1)"; then
		result "$1" PASS "losses within $d of local (relative)"
	else
		result "$1" FAIL "losses differ from local by $d (relative)"
	fi
}

# ---------------------------------------------------------------- 1 GPU
echo "== one GPU"
if [ -x "$E2E/t_appmem" ]; then
	run appmem-local 60 local "$E2E/t_appmem"; l=$?
	run appmem-rgpu-tcp 60 "$ONE" env RGPU_TRANSPORT=tcp "$E2E/t_appmem"; r1=$?
	run appmem-rgpu-auto 60 "$ONE" "$E2E/t_appmem"; r2=$?
	if [ $l -ne 0 ]; then
		result t_appmem FAIL "fails on the local driver: $(tail -1 "$OUT/appmem-local.log")"
	elif [ $r1 -eq 0 ] && [ $r2 -eq 0 ]; then
		result t_appmem PASS "VMM, shareable handles, pools, 2D memsets through rgpud (TCP, same host)"
	else
		result t_appmem FAIL "through rgpud: tcp exit $r1, auto exit $r2: $(grep -h FAIL "$OUT"/appmem-rgpu-*.log | head -2 | tr '\n' ' ')"
	fi
else
	result t_appmem SKIP "$E2E/t_appmem not built (make check builds it)"
fi

if $PY -c 'import torch' 2>/dev/null; then
	run torch-local 90 local env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True $PY "$M/torch_train.py"; l=$?
	run torch-rgpu 120 "$ONE" env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True $PY "$M/torch_train.py"; r=$?
	if [ $l -ne 0 ]; then
		result torch_vmm FAIL "local run failed (exit $l)"
	elif [ $r -ne 0 ]; then
		result torch_vmm FAIL "through rgpud: exit $r: $(grep -v '^LOSS' "$OUT/torch-rgpu.log" | tail -2 | tr '\n' ' ')"
	else
		compare_losses torch_vmm "$OUT/torch-local.log" "$OUT/torch-rgpu.log"
	fi
else
	result torch_vmm SKIP "no torch"
fi

if $PY -c 'import jax' 2>/dev/null; then
	# XLA would take 75% of the GPU up front: not needed here
	JENV="XLA_PYTHON_CLIENT_PREALLOCATE=false"
	run jax-local 90 local env $JENV $PY "$M/jax_step.py"; l=$?
	run jax-rgpu 150 "$ONE" env $JENV $PY "$M/jax_step.py"; r=$?
	if [ $l -ne 0 ]; then
		result jax_step FAIL "local run failed (exit $l)"
	elif [ $r -ne 0 ]; then
		result jax_step FAIL "through rgpud: exit $r: $(grep -iE 'error|not supported' "$OUT/jax-rgpu.log" | head -3 | tr '\n' ' ')"
		# what fails besides XLA's command buffers (CUDA graphs built
		# node by node): the same without them
		run jax-rgpu-nocmdbuf 120 "$ONE" env $JENV XLA_FLAGS=--xla_gpu_enable_command_buffer= \
			$PY "$M/jax_step.py" &&
			compare_losses jax_step_without_command_buffers "$OUT/jax-local.log" "$OUT/jax-rgpu-nocmdbuf.log" ||
			result jax_step_without_command_buffers FAIL "$(grep -iE 'error|not supported' "$OUT/jax-rgpu-nocmdbuf.log" | head -3 | tr '\n' ' ')"
	else
		compare_losses jax_step "$OUT/jax-local.log" "$OUT/jax-rgpu.log"
		same_lines "$OUT/jax-local.log" "$OUT/jax-rgpu.log" RESULT &&
			echo "INFO jax final parameters identical to local" ||
			echo "INFO jax final parameters differ from local (see the RESULT lines)"
	fi
else
	result jax_step SKIP "no jax"
fi

# what PyTorch users run beyond a linear layer (cuDNN, bf16 attention,
# cuFFT, cuSOLVER, cuSPARSE, CUDA graphs, streams, torch.compile): each
# part's values within a relative 1e-4 of local (2e-2 for bf16), its
# checks true, every part that ran locally done
if $PY -c 'import torch' 2>/dev/null; then
	run torchops-local 150 local env TRITON_CACHE_DIR="$OUT/triton-local" TORCHINDUCTOR_CACHE_DIR="$OUT/inductor-local" \
		$PY "$M/torch_ops.py"
	run torchops-rgpu 200 "$ONE" env TRITON_CACHE_DIR="$OUT/triton-rgpu" TORCHINDUCTOR_CACHE_DIR="$OUT/inductor-rgpu" \
		$PY "$M/torch_ops.py"
	d=$($PY "$M/compare_vals.py" "$OUT/torchops-local.log" "$OUT/torchops-rgpu.log")
	case $d in
	ok*) result torch_ops PASS "${d#ok } as local" ;;
	*) result torch_ops FAIL "${d#FAIL }" ;;
	esac
else
	result torch_ops SKIP "no torch"
fi

# CUDA tensors sent to another process (torch.multiprocessing: IPC memory
# and event handles), against the local driver
run torchipc-local 90 local $PY "$M/torch_ipc.py"; l=$?
run torchipc-rgpu 120 "$ONE" $PY "$M/torch_ipc.py"; r=$?
if [ $l != 0 ]; then
	result torch_ipc FAIL "local run failed (exit $l): $(tail -2 "$OUT/torchipc-local.log" | tr '\n' ' ')"
elif [ $r != 0 ]; then
	result torch_ipc FAIL "through rgpud: exit $r: $(tail -2 "$OUT/torchipc-rgpu.log" | tr '\n' ' ')"
elif same_lines "$OUT/torchipc-local.log" "$OUT/torchipc-rgpu.log" RESULT &&
	grep -q "^CHECK child_sum_matches True" "$OUT/torchipc-rgpu.log"; then
	result torch_ipc PASS "a CUDA tensor sent to another process (IPC memory and event handles): its sum there and the child's writes as local"
else
	result torch_ipc FAIL "results differ: $(diff <(grep -E '^(RESULT|CHECK)' "$OUT/torchipc-local.log") <(grep -E '^(RESULT|CHECK)' "$OUT/torchipc-rgpu.log") | grep '^[<>]' | head -4 | tr '\n' ' ')"
fi
if $PY -c 'import cupy' 2>/dev/null; then
	run cupy-local 60 local $PY "$M/cupy_check.py"; l=$?
	run cupy-rgpu 90 "$ONE" $PY "$M/cupy_check.py"; r=$?
	if [ $l -ne 0 ]; then
		result cupy FAIL "local run failed (exit $l)"
	elif [ $r -ne 0 ]; then
		result cupy FAIL "through rgpud: exit $r: $(tail -2 "$OUT/cupy-rgpu.log" | tr '\n' ' ')"
	elif same_lines "$OUT/cupy-local.log" "$OUT/cupy-rgpu.log" RESULT; then
		result cupy PASS "$(grep -c '^RESULT' "$OUT/cupy-rgpu.log") results identical to local (default and async pool)"
	else
		result cupy FAIL "results differ: $(diff <(grep ^RESULT "$OUT/cupy-local.log") <(grep ^RESULT "$OUT/cupy-rgpu.log") | grep '^[<>]' | head -4 | tr '\n' ' ')"
	fi
else
	result cupy SKIP "no cupy"
fi

# ---------------------------------------------------------------- 2 GPUs
echo "== two GPUs of one server"
if [ "$NGPU" -lt 2 ]; then
	for t in p2p_bandwidth t_appmem_peer nccl_allreduce ddp_losses nvml_list; do
		result $t SKIP "this machine has $NGPU GPU; the part needs two GPUs of one host"
	done
else
	run p2p-local 60 local $PY "$M/p2p_bw.py"
	run p2p-rgpu 90 "$TWOG" $PY "$M/p2p_bw.py"
	for d in 0to1 1to0; do
		a=$(awk -v d=$d '$1=="BW" && $2==d {print $3}' "$OUT/p2p-local.log")
		b=$(awk -v d=$d '$1=="BW" && $2==d {print $3}' "$OUT/p2p-rgpu.log")
		if [ -n "$a" ] && [ -n "$b" ] && grep -q "CHECK p2p_data ok" "$OUT/p2p-rgpu.log"; then
			echo "RATIO p2p_$d $($PY -c "print('%.3f' % ($b / $a))") (rgpu $b GB/s, local $a GB/s)"
			$PY -c "import sys; sys.exit(0 if $b >= 0.9 * $a else 1)" &&
				result p2p_$d PASS "$b GB/s through rgpud, $a GB/s local" ||
				result p2p_$d FAIL "$b GB/s through rgpud, $a GB/s local (< 90%)"
		else
			result p2p_$d FAIL "no measurement (see p2p-*.log)"
		fi
	done

	if [ -x "$E2E/t_appmem" ]; then
		run appmem-peer-rgpu 60 "$TWOG" env T_APPMEM_PEER=1 "$E2E/t_appmem" &&
			result t_appmem_peer PASS "peer access and copies between two GPUs through rgpud" ||
			result t_appmem_peer FAIL "$(grep FAIL "$OUT/appmem-peer-rgpu.log" | head -2)"
	fi

	# NVLink as NCCL will see it: the real NVML's links between the two
	# GPUs, and the drop-in's (same far ends; no link, no P2P transport)
	run nvlink-local 30 local env LD_LIBRARY_PATH="$REAL${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" $PY "$M/nvlink_view.py"
	run nvlink-rgpu 30 "$TWOG" env LD_LIBRARY_PATH="$NVML:$CLIENT${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" $PY "$M/nvlink_view.py"
	nl=$(grep -c '^LINK' "$OUT/nvlink-local.log"); nr=$(grep -c '^LINK' "$OUT/nvlink-rgpu.log")
	if same_lines "$OUT/nvlink-local.log" "$OUT/nvlink-rgpu.log" LINK || { [ "$nl" = 0 ] && [ "$nr" = 0 ]; }; then
		result nvml_nvlink PASS "the drop-in NVML reports the $nl active NVLink(s) the real one does"
	else
		result nvml_nvlink FAIL "real NVML: $nl active links, drop-in: $nr; $(grep FAILS "$OUT/nvlink-rgpu.log") (local: $(grep FAILS "$OUT/nvlink-local.log"))"
	fi

	NENV="NCCL_NVLS_ENABLE=0 NCCL_DEBUG=WARN"
	TR="$PY -m torch.distributed.run --nproc_per_node=2"
	run nccl-local 90 local env $NENV NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,P2P $TR --master_port="$(free_port)" "$M/nccl_allreduce.py"
	# (NCCL says which transports and memory it chose: where a fault is)
	run nccl-rgpu 120 "$TWOG" env $NENV RGPU_LOG_LEVEL=info NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,P2P,SHM,ALLOC,PROXY NCCL_TOPO_DUMP_FILE="$OUT/nccl-topo-rgpu.xml" \
		$TR --master_port="$(free_port)" "$M/nccl_allreduce.py"
	for s in 64MiB 256MiB; do
		a=$(awk -v s=$s '$1=="BUSBW" && $2==s {print $3}' "$OUT/nccl-local.log")
		b=$(awk -v s=$s '$1=="BUSBW" && $2==s {print $3}' "$OUT/nccl-rgpu.log")
		if [ -n "$a" ] && [ -n "$b" ] && grep -q "CHECK allreduce_data ok" "$OUT/nccl-rgpu.log"; then
			echo "RATIO nccl_allreduce_$s $($PY -c "print('%.3f' % ($b / $a))") (rgpu $b GB/s, local $a GB/s bus bandwidth)"
			$PY -c "import sys; sys.exit(0 if $b >= 0.9 * $a else 1)" &&
				result nccl_allreduce_$s PASS "bus bandwidth $b GB/s through rgpud, $a local" ||
				result nccl_allreduce_$s FAIL "bus bandwidth $b GB/s through rgpud, $a local (< 90%)"
		else
			result nccl_allreduce_$s FAIL "no measurement: $(grep -iE 'error|warn' "$OUT/nccl-rgpu.log" | head -3 | tr '\n' ' ')"
		fi
	done
	# where the time goes, each rank: queueing, wall, GPU per all-reduce
	grep -h ^LOOP "$OUT/nccl-local.log" | sed 's/^/local /'
	grep -h ^LOOP "$OUT/nccl-rgpu.log" | sed 's/^/rgpu /'

	run ddp-local 90 local env $NENV $TR --master_port="$(free_port)" "$M/ddp_train.py"; l=$?
	run ddp-rgpu 120 "$TWOG" env $NENV $TR --master_port="$(free_port)" "$M/ddp_train.py"; r=$?
	if [ $l -ne 0 ]; then
		result ddp_losses FAIL "local torchrun failed (exit $l)"
	elif [ $r -ne 0 ]; then
		result ddp_losses FAIL "through rgpud: exit $r: $(grep -iE 'error' "$OUT/ddp-rgpu.log" | head -3 | tr '\n' ' ')"
	else
		compare_losses ddp_losses "$OUT/ddp-local.log" "$OUT/ddp-rgpu.log"
	fi

	if [ -e "$NVML/libnvidia-ml.so.1" ]; then
		# exactly the GPUs named, in their order: both, then the second alone
		nvml_list nvml_list "$TWOG" "0 1"
		nvml_list nvml_list_second "127.0.0.1:$PORT/1" "1"
		nvml_query nvml_query "$TWOG" "0 1"
		# the default table too (informational: what else nvidia-smi asks)
		run nvml-table 30 "$TWOG" env RGPU_NVML_DEBUG=1 \
			LD_LIBRARY_PATH="$NVML:$CLIENT${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" nvidia-smi
		echo "nvidia-smi (table) through rgpu's NVML: exit $?, $(grep -c 'private entry' "$OUT/nvml-table.log") private calls"
	else
		result nvml_list SKIP "$NVML/libnvidia-ml.so.1 not built"
	fi
fi

# the NVML drop-in on one GPU too
if [ -e "$NVML/libnvidia-ml.so.1" ] && [ "$NGPU" -lt 2 ]; then
	nvml_list nvml_list_one "$ONE" "0"
	nvml_query nvml_query_one "$ONE" "0"
	# the common fields (informational: which rgpu's NVML lacks)
	F=driver_version,count,name,serial,uuid,pci.bus_id,pci.device_id,pcie.link.gen.current,pcie.link.width.current,index,display_mode,persistence_mode,vbios_version,fan.speed,pstate,memory.total,memory.used,memory.free,compute_mode,compute_cap,utilization.gpu,utilization.memory,ecc.mode.current,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.max.sm,mig.mode.current
	run nvml-fields-local 30 local nvidia-smi --query-gpu=$F --format=csv
	run nvml-fields-rgpu 30 "$ONE" env LD_LIBRARY_PATH="$NVML:$CLIENT${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
		nvidia-smi --query-gpu=$F --format=csv
	echo "nvidia-smi --query-gpu of $(echo $F | tr ',' '\n' | wc -l) fields: local: $(grep -c . "$OUT/nvml-fields-local.log") lines; through rgpu's NVML: $(tail -1 "$OUT/nvml-fields-rgpu.log" | grep -o 'Function Not Found' | wc -l) not found"
	paste -d'\n' "$OUT/nvml-fields-local.log" "$OUT/nvml-fields-rgpu.log"
	# the default table (informational: what else nvidia-smi asks)
	run nvml-table-one 30 "$ONE" env RGPU_NVML_DEBUG=1 \
		LD_LIBRARY_PATH="$NVML:$CLIENT${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" nvidia-smi
	echo "nvidia-smi (table) through rgpu's NVML: exit $?, $(grep -c 'private entry' "$OUT/nvml-table-one.log") private calls"
fi

kill -0 $RPID 2>/dev/null || result rgpud_alive FAIL "rgpud exited during the run"
echo "multi-gpu: $PASS passed, $FAIL failed, $SKIP skipped in $(( $(date +%s) - T0 )) s (logs in $OUT)"
[ $FAIL -eq 0 ]
