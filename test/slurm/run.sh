#!/bin/bash
# Slurm integration tests on a real Slurm (Debian's slurmctld, slurmd,
# munge): three nodes in network namespaces, two of them GPU nodes running
# `rgpud --emulated --leases` (see cluster.sh).  Exits 0 only if every
# scenario passed; 77 (skip) without root, iproute2 or Slurm.  Everything
# is torn down on exit, and the run is bounded (RGPU_SLURM_TIMEOUT, 540 s).
#
#   test/slurm/run.sh [BUILD_DIR]        (default: _build, then the source tree)
#   RC_KEEP=1 keeps the scratch directory (logs) for a failed run.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
BUILD=${1:-${RGPU_BUILD:-}}
if [ -z "$BUILD" ]; then
	if [ -e "$SRC/_build/spank/.libs/spank_rgpu.so" ]; then BUILD=$SRC/_build; else BUILD=$SRC; fi
fi
BUILD=$(cd "$BUILD" && pwd)

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces, slurmd)"
command -v ip >/dev/null || skip "no ip command (iproute2)"
for c in slurmctld slurmd sbatch squeue scontrol munged nsenter runuser gcc; do
	command -v $c >/dev/null || skip "no $c"
done
[ -e "$BUILD/spank/.libs/spank_rgpu.so" ] || skip "no $BUILD/spank/.libs/spank_rgpu.so (build first)"

# One run at a time: the bridge and namespace names are fixed.
exec 9>/run/rgpu-slurm-test.lock
flock -n 9 || { echo "another test/slurm run holds /run/rgpu-slurm-test.lock"; exit 1; }

. "$HERE/cluster.sh"

PASSED=0 FAILED=0 SKIPPED=0
RESULTS=()
pass() { PASSED=$((PASSED + 1)); RESULTS+=("PASS  $1"); echo "PASS  $1"; }
fail() { FAILED=$((FAILED + 1)); RESULTS+=("FAIL  $1: $2"); echo "FAIL  $1: $2"; }
skipped() { SKIPPED=$((SKIPPED + 1)); RESULTS+=("SKIP  $1: $2"); echo "SKIP  $1: $2"; }

finish() {
	local rc=$?
	trap - EXIT INT TERM
	if [ -n "${WATCHDOG:-}" ]; then
		kill $(pgrep -P "$WATCHDOG") "$WATCHDOG" 2>/dev/null
	fi
	if [ "$FAILED" -gt 0 ] && [ -n "${RC_DIR:-}" ]; then
		echo "---- logs (last lines) ----"
		tail -n 15 "$RC_DIR"/slurmctld.log "$RC_DIR"/*/slurmd.log "$RC_DIR"/*/rgpud.log 2>/dev/null
	fi
	rc_down
	echo "----"
	printf '%s\n' "${RESULTS[@]}"
	[ "$SKIPPED" -gt 0 ] && echo "$SKIPPED skipped"
	echo "$PASSED passed, $((FAILED + SKIPPED)) failed"
	if [ "$FAILED" -eq 0 ] && [ "$SKIPPED" -eq 0 ] && [ "$PASSED" -gt 0 ]; then exit 0; fi
	[ "$rc" -ne 0 ] && [ "$rc" -ne 1 ] && exit "$rc"
	exit 1
}
trap finish EXIT
trap 'echo "interrupted or out of time"; FAILED=$((FAILED + 1)); exit 1' INT TERM

# Watchdog: the whole run, teardown included, stays under 10 minutes.
# (fd 9 and the output closed: a lingering sleep must hold neither the lock
# nor a caller's pipe open.)
( exec 9>&- >/dev/null 2>&1; sleep "${RGPU_SLURM_TIMEOUT:-540}"; kill -TERM $$ ) &
WATCHDOG=$!

RGPUD_OK=1 CLIENT_OK=1
[ -x "$BUILD/daemon/rgpud" ] || RGPUD_OK=0
[ -e "$BUILD/client/.libs/libcuda.so.1" ] || CLIENT_OK=0

echo "bringing up the mini-cluster (build: $BUILD)"
rc_up "$SRC" "$BUILD" 9>&- || { fail cluster "the mini-cluster did not come up"; exit 1; }
W=$RC_DIR/work
PROBE=$RC_DIR/rgpu_probe
RGPU=$BUILD/tools/rgpu
gcc -std=gnu11 -O1 -o "$PROBE" "$HERE/rgpu_probe.c" -ldl || { fail build "rgpu_probe"; exit 1; }
chmod 755 "$PROBE"
for n in $RC_GPU_NODES; do
	for t in $(seq 1 20); do
		rc_in $n bash -c "exec 3<>/dev/tcp/$(rc_addr $n)/$RC_RGPU_PORT" 2>/dev/null && break
		sleep 0.5
	done
done

# ---- helpers
submit() { sbatch --parsable --uid=nobody --chdir="$W" -o "$W/%j.out" -e "$W/%j.out" "$@"; }
job_state() { squeue -h -j "$1" -o %T 2>/dev/null; }
wait_running() {
	local t
	for t in $(seq 1 $((${2:-30} * 2))); do
		[ "$(job_state "$1")" = RUNNING ] && return 0
		sleep 0.5
	done
	return 1
}
wait_gone() {
	local t
	for t in $(seq 1 $((${2:-60} * 2))); do
		[ -z "$(job_state "$1")" ] && return 0
		sleep 0.5
	done
	return 1
}
out() { cat "$W/$1.out" 2>/dev/null; }
servers_of() { out "$1" | sed -n 's/^SERVERS=//p' | head -n1; }
admin_comment() { scontrol show job "$1" 2>/dev/null | sed -n 's/.*AdminComment=rgpu;servers=\([^;]*\);.*/\1/p'; }
need_stack() {
	if [ $RGPUD_OK = 0 ]; then skipped "$1" "no rgpud built ($BUILD/daemon/rgpud)"; return 1; fi
	if [ $CLIENT_OK = 0 ]; then skipped "$1" "no client library ($BUILD/client/.libs/libcuda.so.1)"; return 1; fi
	return 0
}
drain_jobs() {
	scancel -u nobody 2>/dev/null
	local t
	for t in $(seq 1 60); do
		[ -z "$(squeue -h -u nobody 2>/dev/null)" ] && return 0
		sleep 0.5
	done
}

# ---- 1. wrong input is refused at submission, with a message
t_bad_options() {
	local name=bad_options_refused e ok=1 why=""
	e=$(submit --rgpu-mem=abc --wrap true 2>&1) && { ok=0; why="--rgpu-mem=abc accepted"; }
	echo "$e" | grep -q "not a size" || { ok=0; why="$why; --rgpu-mem=abc: no clear message: $e"; }
	e=$(srun --uid=nobody --rgpu-mem=abc true 2>&1) && { ok=0; why="$why; srun --rgpu-mem=abc accepted"; }
	echo "$e" | grep -q "not a size" || { ok=0; why="$why; srun --rgpu-mem=abc: no clear message"; }
	if [ $RGPUD_OK = 1 ]; then
		e=$(submit --rgpu-mem=64G --wrap true 2>&1) && { ok=0; why="$why; --rgpu-mem=64G accepted"; }
		echo "$e" | grep -q "larger than any GPU" || { ok=0; why="$why; --rgpu-mem=64G: $e"; }
	fi
	# --rgpu-share: a percentage 1..100 (the plugin), with a slice (job_submit.lua)
	e=$(submit --rgpu-mem=1G --rgpu-share=0 --wrap true 2>&1) && { ok=0; why="$why; --rgpu-share=0 accepted"; }
	echo "$e" | grep -q "rgpu-share=0" || { ok=0; why="$why; --rgpu-share=0: no clear message: $e"; }
	e=$(srun --uid=nobody --rgpu-mem=1G --rgpu-share=150 true 2>&1) && { ok=0; why="$why; srun --rgpu-share=150 accepted"; }
	echo "$e" | grep -q "rgpu-share=150" || { ok=0; why="$why; srun --rgpu-share=150: no clear message"; }
	e=$(submit --rgpu-share=50 --wrap true 2>&1) && { ok=0; why="$why; --rgpu-share without --rgpu-mem accepted"; }
	echo "$e" | grep -q "goes with --rgpu-mem" || { ok=0; why="$why; --rgpu-share alone: $e"; }
	e=$(submit --gres=rgpu:99 --wrap true 2>&1) && { ok=0; why="$why; --gres=rgpu:99 accepted"; }
	echo "$e" | grep -q "more GPUs than the cluster has" || { ok=0; why="$why; --gres=rgpu:99: $e"; }
	e=$(submit --gres=rgpu:0 --wrap true 2>&1) && { ok=0; why="$why; --gres=rgpu:0 accepted"; }
	[ -z "$(squeue -h -u nobody)" ] || { ok=0; why="$why; a refused job is queued"; }
	drain_jobs
	[ $ok = 1 ] && pass $name || fail $name "${why#; }"
}

# ---- 2. a connection without a valid lease is refused
t_no_lease() {
	local name=no_lease_refused
	need_stack $name || return
	local ok=1 why="" e
	local s0="$(rc_addr gpu1):$RC_RGPU_PORT/0"
	e=$(cd "$W" && runuser -u nobody -- env -u SLURM_JOB_ID RGPU_SERVERS=$s0 \
		LD_LIBRARY_PATH=$BUILD/client/.libs timeout 30 "$PROBE" 2>&1)
	[ $? -ne 0 ] || { ok=0; why="outside any job: the probe ran: $e"; }
	e=$(cd "$W" && runuser -u nobody -- env SLURM_JOB_ID=424242 RGPU_SERVERS=$s0 \
		LD_LIBRARY_PATH=$BUILD/client/.libs timeout 30 "$PROBE" 2>&1)
	[ $? -ne 0 ] || { ok=0; why="$why; with a job id holding no lease: the probe ran: $e"; }
	grep -qiE "refus|lease" "$RC_DIR"/gpu1/rgpud.log || { ok=0; why="$why; rgpud logged no refusal"; }
	[ $ok = 1 ] && pass $name || fail $name "${why#; }"
}

# ---- 3. two GPUs for a job on the GPU-less node, one from each GPU node
t_two_gpus() {
	local name=two_gpus_on_gpuless_node
	need_stack $name || return
	local j s
	j=$(submit -w cpu1 --gres=rgpu:2 --wrap \
		"echo SERVERS=\$RGPU_SERVERS; $RGPU status; $PROBE") || { fail $name "sbatch refused"; return; }
	wait_gone "$j" 90 || { fail $name "job $j did not finish: $(job_state "$j")"; return; }
	s=$(servers_of "$j")
	if ! out "$j" | grep -q "^devices 2"; then fail $name "probe: $(out "$j" | tr '\n' '|')"
	elif ! echo "$s" | grep -q "$(rc_addr gpu1):" || ! echo "$s" | grep -q "$(rc_addr gpu2):"; then
		fail $name "not one GPU per GPU node: RGPU_SERVERS=$s"
	elif out "$j" | grep -q "error"; then fail $name "probe error: $(out "$j" | tr '\n' '|')"
	elif ! out "$j" | grep -q " whole "; then fail $name "rgpu status: $(out "$j" | tr '\n' '|')"
	else
		echo "      job $j: RGPU_SERVERS=$s"
		pass $name
	fi
}

# ---- 4. a --rgpu-mem quota is enforced and reported by cuMemGetInfo
t_quota() {
	local name=rgpu_mem_quota
	need_stack $name || return
	local j o
	j=$(submit -w cpu1 --rgpu-mem=1G --wrap \
		"echo SERVERS=\$RGPU_SERVERS; $PROBE --alloc $((1536 << 20)); $PROBE --alloc $((512 << 20)); $RGPU status --json") \
		|| { fail $name "sbatch refused"; return; }
	wait_gone "$j" 90 || { fail $name "job $j did not finish"; return; }
	o=$(out "$j")
	if ! echo "$o" | grep -q "meminfo_total=1073741824"; then fail $name "cuMemGetInfo total is not 1 GiB: $(echo "$o" | tr '\n' '|')"
	elif ! echo "$o" | grep -q "alloc 1610612736 CUDA_ERROR_OUT_OF_MEMORY"; then fail $name "1.5 GiB allocation not refused: $(echo "$o" | tr '\n' '|')"
	elif ! echo "$o" | grep -q "alloc 536870912 OK"; then fail $name "512 MiB allocation failed: $(echo "$o" | tr '\n' '|')"
	elif ! echo "$o" | grep -q '"quota": 1073741824'; then fail $name "rgpu status --json: no quota: $(echo "$o" | tr '\n' '|')"
	else pass $name
	fi
}

# ---- 5. two jobs share one GPU (slices)
t_share() {
	local name=two_jobs_share_a_gpu
	need_stack $name || return
	local a b sa sb
	a=$(submit -w cpu1 --rgpu-mem=512M --wrap \
		"echo SERVERS=\$RGPU_SERVERS; $PROBE --alloc $((256 << 20)) --hold 8") || { fail $name "sbatch refused"; return; }
	wait_running "$a" 30 || { fail $name "job $a not running"; return; }
	b=$(submit -w cpu1 --rgpu-mem=512M --wrap \
		"echo SERVERS=\$RGPU_SERVERS; $PROBE --alloc $((256 << 20)) --hold 2") || { fail $name "sbatch refused"; return; }
	wait_gone "$a" 90 && wait_gone "$b" 90 || { fail $name "jobs did not finish"; return; }
	sa=$(servers_of "$a") sb=$(servers_of "$b")
	if [ -z "$sa" ] || [ "$sa" != "$sb" ]; then fail $name "different GPUs: $sa vs $sb"
	elif [ "$(out "$a" "$b" | grep -c 'alloc 268435456 OK')" != 1 ] || ! out "$b" | grep -q 'alloc 268435456 OK'; then
		fail $name "allocations: $(out "$a" | tr '\n' '|') / $(out "$b" | tr '\n' '|')"
	else
		echo "      jobs $a and $b both on $sa"
		pass $name
	fi
}

# ---- 6. scancel frees the lease
t_scancel() {
	local name=scancel_frees_lease
	need_stack $name || return
	local j s st t
	j=$(submit -w cpu1 --gres=rgpu:1 --wrap "sleep 300") || { fail $name "sbatch refused"; return; }
	wait_running "$j" 30 || { fail $name "job $j not running"; return; }
	for t in $(seq 1 20); do s=$(admin_comment "$j"); [ -n "$s" ] && break; sleep 0.5; done
	[ -n "$s" ] || { fail $name "no GPUs recorded for job $j"; scancel "$j"; return; }
	st=$(RGPU_SERVERS=$s RGPU_JOB_ID=$j "$RGPU" status --json 2>&1)
	echo "$st" | grep -q '"leased": true' || { fail $name "no lease while running: $st"; scancel "$j"; return; }
	scancel "$j"
	wait_gone "$j" 60 || { fail $name "job $j still there"; return; }
	for t in $(seq 1 30); do
		st=$(RGPU_SERVERS=$s RGPU_JOB_ID=$j "$RGPU" status --json 2>&1)
		echo "$st" | grep -q '"leased": false' && { pass $name; return; }
		sleep 0.5
	done
	fail $name "lease still held after scancel: $st"
}

# ---- 7. a busy cluster queues the job (reason Licenses) and runs it later
t_busy() {
	local name=busy_cluster_queues
	need_stack $name || return
	local a b r t
	a=$(submit -w cpu1 --gres=rgpu:4 --wrap "sleep 300") || { fail $name "sbatch refused"; return; }
	wait_running "$a" 30 || { fail $name "job $a not running"; scancel "$a"; return; }
	b=$(submit -w cpu1 --gres=rgpu:1 --wrap "echo SERVERS=\$RGPU_SERVERS; $PROBE") || { fail $name "sbatch refused"; scancel "$a"; return; }
	for t in $(seq 1 20); do
		r=$(squeue -h -j "$b" -o '%T %r')
		[ "$r" = "PENDING Licenses" ] && break
		sleep 0.5
	done
	if [ "$r" != "PENDING Licenses" ]; then fail $name "second job is '$r', not pending on Licenses"; scancel "$a" "$b"; return; fi
	echo "      job $b: $(squeue -h -j "$b" -o '%T (%r)') while job $a holds every GPU"
	scancel "$a"
	wait_gone "$b" 120 || { fail $name "queued job $b never ran"; scancel "$b"; return; }
	out "$b" | grep -q "^devices 1" && pass $name || fail $name "queued job's probe: $(out "$b" | tr '\n' '|')"
}

t_bad_options
t_no_lease
t_two_gpus
t_quota
t_share
t_scancel
t_busy
drain_jobs
