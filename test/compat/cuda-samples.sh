#!/bin/bash
# NVIDIA's cuda-samples as a standing peer suite: every sample that builds
# headless on Linux, run three ways on the GPU machine:
#   direct  the real driver
#   tcp     the rgpu client -> rgpud on 127.0.0.1 over TCP
#   local   the rgpu client -> the same rgpud, same-host path (auto)
# A run passes when the sample exits 0 (2 is NVIDIA's "waived": the sample
# cannot run on this machine, e.g. it needs two GPUs).  For an rgpu run that
# fails, the table names the call: the first entry point the client logged
# as unsupported, else the client's first error line, else the program's
# last line.
#
# Usage: cuda-samples.sh --out DIR [--bin DIR] [--only REGEX]
#   --bin DIR   built samples (test/compat/cuda-samples-build.py --out DIR);
#               default: $CUDA_SAMPLES_BIN, else the tarball
#               .devcarry/cuda-samples/samples.tar.xz (unpacked under the out
#               dir), else built here from $CUDA_SAMPLES_SRC (a checkout) or
#               from .devcarry/cuda-samples/src.tar.xz (the sources,
#               cuda-samples-build.py --export-src)
#   --only RE   samples whose name matches RE (default: $SAMPLES_ONLY, so
#               that test/gpu/device-run.sh can run a subset as a part)
# Environment: top_builddir (default _build), RGPU_REAL_DRIVER_DIR
#   (/usr/local/nvidia/lib64), CUDA_HOME (/usr/local/cuda), SAMPLE_TIMEOUT (seconds per run, 30;
#   over TCP SAMPLE_TIMEOUT_TCP, 90: bandwidth-bound samples move their data at
#   loopback TCP's few GB/s there, not PCIe's tens),
#   SAMPLES_DEADLINE (seconds for all, 450: later samples are reported as
#   not run), SAMPLES_JOBS (samples run at once, 1; each sample's three runs
#   stay one after another), SAMPLES_RGPUD_ARGS (more rgpud options),
#   SAMPLES_TRACE (RGPU_TRACE of the runs through rgpud, default errors:
#   the table names the last driver call a failing sample saw fail).
# Writes DIR/cuda-samples-results.md (the table and the counts), and
# DIR/logs/ (each run's output and the client's log).  Exit: 0 the run
# completed (verdicts in the table), 1 an error, 77 no GPU or no samples.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top_srcdir=$(cd "$here/../.." && pwd)
: "${top_builddir:=$top_srcdir/_build}"
: "${SAMPLE_TIMEOUT:=30}"
: "${SAMPLE_TIMEOUT_TCP:=90}"
: "${SAMPLES_DEADLINE:=450}"
: "${SAMPLES_JOBS:=1}"
: "${SAMPLES_TRACE:=errors}"
: "${CUDA_HOME:=/usr/local/cuda}"
REAL=${RGPU_REAL_DRIVER_DIR:-/usr/local/nvidia/lib64}
RGPUD=$top_builddir/daemon/rgpud
CLIENTDIR=$top_builddir/client/.libs
OUT=""
BIN=${CUDA_SAMPLES_BIN:-}
ONLY=${SAMPLES_ONLY:-}
while [ $# -gt 0 ]; do
	case $1 in
	--out) OUT=$2; shift ;;
	--bin) BIN=$2; shift ;;
	--only) ONLY=$2; shift ;;
	*) echo "cuda-samples.sh: unknown option $1 (--out DIR, --bin DIR, --only REGEX)" >&2; exit 1 ;;
	esac
	shift
done
[ -n "$OUT" ] || { echo "cuda-samples.sh: --out DIR is needed" >&2; exit 1; }
mkdir -p "$OUT/logs" || exit 1
OUT=$(cd "$OUT" && pwd)
L=$OUT/logs
R=$OUT/cuda-samples-results.md

if [ ! -e "$REAL/libcuda.so.1" ] || ! nvidia-smi -L >/dev/null 2>&1; then
	echo "cuda-samples.sh: no GPU here ($REAL/libcuda.so.1, nvidia-smi)"
	exit 77
fi
if [ -z "$BIN" ]; then
	tarball=$top_srcdir/.devcarry/cuda-samples/samples.tar.xz
	srcball=$top_srcdir/.devcarry/cuda-samples/src.tar.xz
	if [ -f "$tarball" ]; then
		mkdir -p "$OUT/bin" && tar -C "$OUT/bin" -xJf "$tarball" || exit 1
		BIN=$OUT/bin/cuda-samples
	elif [ -f "$srcball" ] || [ -n "${CUDA_SAMPLES_SRC:-}" ]; then
		# the sources carried (cuda-samples-build.py --export-src): built
		# here, on every core
		if [ -z "${CUDA_SAMPLES_SRC:-}" ]; then
			mkdir -p "$OUT/src" && tar -C "$OUT/src" -xJf "$srcball" || exit 1
			CUDA_SAMPLES_SRC=$OUT/src/cuda-samples-src
		fi
		t0b=$(date +%s)
		python3 "$here/cuda-samples-build.py" --src "$CUDA_SAMPLES_SRC" --out "$OUT/bin" \
			${ONLY:+--only "$ONLY"} --jobs "$(nproc)" >"$L/build.txt" 2>&1 || exit 1
		echo "built: $(tail -1 "$L/build.txt") in $(( $(date +%s) - t0b )) s"
		BIN=$OUT/bin
	else
		echo "cuda-samples.sh: no samples: give --bin, CUDA_SAMPLES_BIN, CUDA_SAMPLES_SRC," \
			"or put samples.tar.xz or src.tar.xz in .devcarry/cuda-samples/"
		exit 77
	fi
fi
[ -f "$BIN/manifest.tsv" ] || { echo "cuda-samples.sh: $BIN/manifest.tsv missing"; exit 77; }
# sessions of --open over TCP run as nobody: the samples must be readable
chmod -R a+rX "$BIN" 2>/dev/null

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# (SAMPLES_RGPUD_ARGS: more rgpud options, e.g. --log-level=debug to log
# each request the driver fails)
LD_LIBRARY_PATH=$REAL${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$RGPUD" --open --listen "127.0.0.1:$port" \
	${SAMPLES_RGPUD_ARGS:-} >"$L/rgpud.log" 2>&1 &
RGPUD_PID=$!
trap 'kill $RGPUD_PID 2>/dev/null; wait $RGPUD_PID 2>/dev/null' EXIT
for _ in $(seq 1 100); do
	(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
	kill -0 $RGPUD_PID 2>/dev/null || { echo "rgpud did not start:"; tail -5 "$L/rgpud.log"; exit 1; }
	sleep 0.1
done

# every GPU of this machine through rgpud, as the direct run sees them all
# (the multi-GPU samples waive with one)
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
SERVERS=""
for ((g = 0; g < (NGPU > 0 ? NGPU : 1); g++)); do
	SERVERS="$SERVERS${SERVERS:+,}127.0.0.1:$port/$g"
done

# run NAME MODE: exit status of the sample run that way, output in the log
run() {
	local name=$1 mode=$2 dir=$BIN/$1 log=$L/$1.$2
	local env=(env) libs=$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	case $mode in
	direct) env+=(LD_LIBRARY_PATH=$REAL:$libs) ;;
	tcp) env+=(RGPU_SERVERS=$SERVERS RGPU_TRANSPORT=tcp LD_LIBRARY_PATH=$CLIENTDIR:$libs
		   RGPU_LOG_LEVEL=warn RGPU_TRACE=$SAMPLES_TRACE) ;;
	local) env+=(RGPU_SERVERS=$SERVERS LD_LIBRARY_PATH=$CLIENTDIR:$libs RGPU_LOG_LEVEL=warn
		     RGPU_TRACE=$SAMPLES_TRACE) ;;
	esac
	local limit=$SAMPLE_TIMEOUT
	[ "$mode" = tcp ] && limit=$SAMPLE_TIMEOUT_TCP
	(cd "$dir" && "${env[@]}" timeout -k 5 "$limit" "./$name" </dev/null >"$log.out" 2>&1)
}

verdict() { # exit status -> word
	case $1 in
	0) echo pass ;;
	2) echo waived ;;
	124|137) echo timeout ;;
	*) [ "$1" -gt 128 ] && echo "crash(sig $(($1 - 128)))" || echo "fail($1)" ;;
	esac
}

# the call an rgpu run failed on, from its output (the client logs there),
# and the last driver call that failed (RGPU_TRACE=errors)
why() {
	local f=$1.out c t
	c=$(grep -o '[a-zA-Z_0-9]* is not supported by rgpu' "$f" | head -1 | awk '{print $1}')
	[ -n "$c" ] && { echo "unsupported: $c"; return; }
	t=$(grep '^rgpu trace: ' "$f" | tail -1 | sed 's/^rgpu trace: \[[0-9]*\] //' | cut -c1-100)
	c=$(grep -v '^rgpu trace: ' "$f" | grep -m1 -i 'rgpu.*\(error\|fail\)\|CUDA_ERROR\|error' | cut -c1-120)
	[ -z "$c" ] && c=$(grep -v '^rgpu trace: ' "$f" | tail -1 | cut -c1-120)
	echo "$c${t:+ [last failed driver call: $t]}"
}

# one sample, its three runs one after another: its verdicts in $RES/NAME
one_sample() {
	local name=$1 cat=$2 m w=""
	declare -A v=()
	for m in direct tcp local; do
		run "$name" "$m"
		v[$m]=$(verdict $?)
	done
	if [ "${v[direct]}" = pass ]; then
		[ "${v[tcp]}" != pass ] && w="tcp: $(why "$L/$name.tcp")"
		[ "${v[local]}" != pass ] && w="${w:+$w; }local: $(why "$L/$name.local")"
	fi
	w=${w//|/\\|}
	printf '%s\t%s\t%s\t%s\t%s\n' "${v[direct]}" "${v[tcp]}" "${v[local]}" "$cat" "$w" >"$RES/$name"
	echo "$name: direct ${v[direct]}, tcp ${v[tcp]}, local ${v[local]}${w:+ ($w)}"
}

# SAMPLES_JOBS samples at a time (each sample's own runs stay in order);
# the table keeps the manifest's order
RES=$L/.verdicts
mkdir -p "$RES"
t0=$(date +%s)
names=() pids=()
# samples still running (rgpud is a job of this shell too: not counted)
running() {
	local p c=0
	for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && c=$((c + 1)); done
	echo "$c"
}
while IFS=$'\t' read -r name cat status note; do
	[ "$status" = built ] || continue
	[ -n "$ONLY" ] && ! [[ $name =~ $ONLY ]] && continue
	names+=("$name")
	[ $(( $(date +%s) - t0 )) -ge "$SAMPLES_DEADLINE" ] && continue
	while [ "$(running)" -ge "$SAMPLES_JOBS" ]; do sleep 0.1; done
	one_sample "$name" "$cat" &
	pids+=($!)
done <"$BIN/manifest.tsv"
[ ${#pids[@]} = 0 ] || wait "${pids[@]}"
declare -A n=([direct]=0 [tcp]=0 [local]=0)
both=0 eligible=0 ran=0 notrun=0
rows=""
for name in "${names[@]}"; do
	if [ ! -s "$RES/$name" ]; then
		notrun=$((notrun + 1))
		rows+="| $name | $(awk -F'\t' -v n="$name" '$1 == n { print $2 }' "$BIN/manifest.tsv") | not run (deadline) | | | |"$'\n'
		continue
	fi
	IFS=$'\t' read -r vd vt vl cat w <"$RES/$name"
	ran=$((ran + 1))
	[ "$vd" = pass ] && n[direct]=$((n[direct] + 1))
	[ "$vt" = pass ] && n[tcp]=$((n[tcp] + 1))
	[ "$vl" = pass ] && n[local]=$((n[local] + 1))
	if [ "$vd" = pass ]; then
		eligible=$((eligible + 1))
		[ "$vt" = pass ] && [ "$vl" = pass ] && both=$((both + 1))
	fi
	rows+="| $name | $cat | $vd | $vt | $vl | $w |"$'\n'
done

{
	echo "# NVIDIA cuda-samples through rgpu"
	echo
	echo "$(date -u '+%Y-%m-%d %H:%M UTC'); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1);"
	# (the build's own record first: the checkout on the GPU machine may
	# be older than the build carried there)
	echo "rgpu $(cat "$top_builddir/revision.txt" 2>/dev/null ||
		git -C "$top_srcdir" describe --always --dirty 2>/dev/null || echo '?')."
	echo "Samples built headless with nvcc -arch=sm_90 (test/compat/cuda-samples-build.py);"
	echo "each run directly, through rgpud over TCP and over the same-host path;"
	echo "pass = exit 0, waived = exit 2 (the sample cannot run here)."
	echo
	echo "- samples run: $ran (not run, deadline: $notrun)"
	echo "- pass directly: ${n[direct]}; over TCP: ${n[tcp]}; same host: ${n[local]}"
	echo "- of the $eligible passing directly, $both pass through rgpud both ways"
	echo
	echo "| sample | category | direct | tcp | same host | failing call (rgpu runs) |"
	echo "|---|---|---|---|---|---|"
	printf '%s' "$rows"
	echo
	echo "Not built (manifest):"
	echo
	awk -F'\t' '$3 != "built" { printf "- %s (%s): %s %s\n", $1, $2, $3, $4 }' "$BIN/manifest.tsv"
} >"$R"
# the samples that pass directly but not through rgpud, last (where a
# summary that keeps only the tail of the output still has them)
for name in "${names[@]}"; do
	[ -s "$RES/$name" ] || continue
	IFS=$'\t' read -r vd vt vl cat w <"$RES/$name"
	if [ "$vd" = pass ] && { [ "$vt" != pass ] || [ "$vl" != pass ]; }; then
		echo "THROUGH RGPU FAILS: $name: tcp $vt, same host $vl${w:+ ($w)}"
	fi
done
echo "cuda-samples: $ran run; direct ${n[direct]}, tcp ${n[tcp]}, local ${n[local]};" \
	"$both of $eligible direct passes pass both ways through rgpud; table: $R"
exit 0
