#!/bin/bash
# Slurm integration tests on a real Slurm (Debian's slurmctld, slurmd,
# munge): three nodes in network namespaces, two of them GPU nodes running
# `rgpud --emulated --leases`, and slurmdbd over MariaDB for sacct (see
# cluster.sh; RC_DBD=0 leaves the database out).  Exits 0 only if every
# scenario passed; 77 (skip) without root, iproute2 or Slurm.  Everything
# is torn down on exit, and the run is bounded (RGPU_SLURM_TIMEOUT, 540 s).
#
#   test/slurm/run.sh [BUILD_DIR]        (default: _build, then the source tree)
#   RC_KEEP=1 keeps the scratch directory (logs) for a failed run.
#   RGPU_SLURM_ONLY="t_pack_slices t_burst" runs only those scenarios.
#   RGPU_SLURM_SAMPLES=FILE keeps the burst's load samples.
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
		tail -n 15 "$RC_DIR"/slurmctld.log "$RC_DIR"/slurmdbd.log "$RC_DIR"/*/slurmd.log "$RC_DIR"/*/rgpud.log 2>/dev/null
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

# ---- admission that packs (issue 12)
LOAD=$HERE/rgpu_load.py
gpu_servers() { echo "$(rc_addr gpu1):$RC_RGPU_PORT $(rc_addr gpu2):$RC_RGPU_PORT"; }
# "reserved BYTES total BYTES leases N ctx_reserve BYTES" over both GPU nodes
gpu_load() { python3 -B "$LOAD" $(gpu_servers) 2>/dev/null; }
job_field() { scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n1; }
# Running (incl. configuring and completing) and pending among the given jobs
count_state() { local re=$1; shift; squeue -h -j "$(IFS=,; echo "$*")" -o %T 2>/dev/null | grep -cE "$re"; }

# 8. twelve 1 GiB slices on four 4 GiB GPUs: as many run as fit by memory,
#    the rest wait in the queue (reason Licenses), none fails
t_pack_slices() {
	local name=twelve_slices_pack
	need_stack $name || return
	local ids=() i j t r res fit=0 maxrun=0 over=0 reasons="" bad="" waited=0
	r=$(gpu_load) || { fail $name "cannot read the GPU servers' load"; return; }
	res=$(echo "$r" | awk '{print $8}')
	# slices of 1 GiB + the reserve per 4 GiB GPU, four GPUs
	fit=$(( 4 * (4096 / (1024 + res / 1048576)) ))
	[ $fit -gt 12 ] && fit=12
	for i in $(seq 1 12); do
		j=$(submit -s --rgpu-mem=1G --wrap "$PROBE --alloc $((128 << 20)) --hold 8") || { fail $name "sbatch refused"; drain_jobs; return; }
		ids+=("$j")
	done
	for t in $(seq 1 240); do
		local st run pend
		st=$(squeue -h -j "$(IFS=,; echo "${ids[*]}")" -o '%T %r' 2>/dev/null)
		[ -z "$st" ] && break
		run=$(echo "$st" | grep -c '^RUNNING')
		pend=$(echo "$st" | grep '^PENDING' | awk '{print $2}' | sort -u | tr '\n' ' ')
		[ "$run" -gt "$maxrun" ] && maxrun=$run
		[ "$run" -gt "$fit" ] && over=1
		[ -n "$pend" ] && reasons="$reasons $pend"
		sleep 0.5
	done
	for j in "${ids[@]}"; do
		if [ "$(job_field "$j" JobState)" != COMPLETED ] || ! out "$j" | grep -q "alloc $((128 << 20)) OK"; then
			bad="$bad $j($(job_field "$j" JobState): $(out "$j" | tr '\n' '|' | cut -c1-120))"
		fi
		job_field "$j" AdminComment | grep -q "waited=" && waited=$((waited + 1))
	done
	reasons=$(echo $reasons | tr ' ' '\n' | sort -u | tr '\n' ' ')
	echo "      12 slices of 1 GiB (reserve $((res >> 20)) MiB): at most $maxrun running at once (fit: $fit), pending reasons: ${reasons:-none}, $waited waited in the prolog"
	PACK_MAXRUN=$maxrun PACK_FIT=$fit PACK_WAITED=$waited
	if [ -n "$bad" ]; then fail $name "jobs failed:$bad"
	elif [ "$maxrun" -ne "$fit" ]; then fail $name "$maxrun ran at once, $fit fit by memory"
	elif [ $over = 1 ]; then fail $name "more than $fit ran at once"
	elif ! echo "$reasons" | grep -q Licenses; then fail $name "no job waited on Licenses: $reasons"
	else pass $name
	fi
}

# 9. a burst of 40 jobs (whole GPUs, 1 GiB and 3 GiB slices, random order):
#    none fails, and the GPUs' reserved memory is above 80% on average
#    whenever jobs wait for room.  A sample counts when a job of the burst
#    is pending with a reason (Slurm looked at it and found no room or a
#    higher-priority job ahead: Licenses, Priority, Resources) or is in its
#    prolog (CONFIGURING, or RUNNING with reason Prolog: it may wait there
#    for a GPU).  Samples before the first job of the burst left the queue
#    (Slurm had not looked at the burst yet: nothing admitted, nothing
#    placed) are left out and counted apart.  Reserved: what rgpud has granted (slices plus their
#    context reserves, whole GPUs) over the four GPUs' memory.
t_burst() {
	local name=mixed_burst_40
	need_stack $name || return
	local ids=() kinds=() i j k t bad="" samples=0 high=0 min=100 pend r res tot pct
	local lmin=100 lic lpct all="" lall="" st unlooked=0 started=
	RANDOM=12
	# 10 whole GPUs, 20 slices of 1 GiB, 10 of 3 GiB, shuffled (seeded)
	for i in $(seq 1 10); do kinds+=(whole); done
	for i in $(seq 1 20); do kinds+=(1G); done
	for i in $(seq 1 10); do kinds+=(3G); done
	mapfile -t kinds < <(printf '%s\n' "${kinds[@]}" | shuf --random-source=<(yes 12))
	local t0=$(date +%s)
	for k in "${kinds[@]}"; do
		local hold=$(( 6 + RANDOM % 7 )) opt
		case $k in whole) opt="--gres=rgpu:1" ;; *) opt="--rgpu-mem=$k" ;; esac
		j=$(submit -s $opt --wrap "$PROBE --alloc $((64 << 20)) --hold $hold") || { fail $name "sbatch $opt refused"; drain_jobs; return; }
		ids+=("$j")
	done
	: >"$RC_DIR/burst-samples.txt"
	for t in $(seq 1 600); do
		st=$(squeue -h -j "$(IFS=,; echo "${ids[*]}")" -o '%T %r' 2>/dev/null)
		[ -z "$st" ] && break
		# waiting for room: pending with a reason, or in the prolog
		pend=$(echo "$st" | grep -E '^(PENDING|CONFIGURING) |^RUNNING Prolog$' | grep -vc '^PENDING None$')
		[ "$(echo "$st" | grep -vc '^PENDING ')" -gt 0 ] && started=1
		if [ -z "$started" ]; then
			unlooked=$((unlooked + 1))
		elif [ "$pend" -gt 0 ] && r=$(gpu_load); then
			res=$(echo "$r" | awk '{print $2}') tot=$(echo "$r" | awk '{print $4}')
			pct=$(( res * 100 / tot ))
			# what Slurm has admitted: the rgpu license's use
			lic=$(scontrol show lic rgpu 2>/dev/null | tr ' ' '\n' | sed -n 's/^Used=//p;s/^Total=//p' | tr '\n' ' ')
			lpct=$(echo "$lic" | awk '{ if ($1 > 0) print int($2 * 100 / $1); else print 0 }')
			echo "$(( $(date +%s) - t0 )) waiting=$pend reserved=$pct% license=$lpct% ($(echo "$st" | awk '{print $1 "/" $2}' | sort | uniq -c | awk '{printf "%s %s, ", $1, $2}'))" >>"$RC_DIR/burst-samples.txt"
			samples=$((samples + 1)) all="$all $pct" lall="$lall $lpct"
			[ $pct -ge 80 ] && high=$((high + 1))
			[ $pct -lt $min ] && min=$pct
			[ $lpct -lt $lmin ] && lmin=$lpct
		fi
		sleep 1
	done
	local took=$(( $(date +%s) - t0 )) waited=0 maxw=0 w
	for j in "${ids[@]}"; do
		if [ "$(job_field "$j" JobState)" != COMPLETED ] || ! out "$j" | grep -q "alloc $((64 << 20)) OK"; then
			bad="$bad $j($(job_field "$j" JobState): $(out "$j" | tr '\n' '|' | cut -c1-120))"
		fi
		w=$(job_field "$j" AdminComment | sed -n 's/.*waited=\([0-9]*\).*/\1/p')
		if [ -n "$w" ]; then waited=$((waited + 1)); [ "$w" -gt "$maxw" ] && maxw=$w; fi
	done
	local mean=0 lmean=0 median=0
	if [ $samples -gt 0 ]; then
		mean=$(echo $all | tr ' ' '\n' | awk '{s += $1} END {printf "%.1f", s / NR}')
		lmean=$(echo $lall | tr ' ' '\n' | awk '{s += $1} END {printf "%.1f", s / NR}')
		median=$(echo $all | tr ' ' '\n' | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
	fi
	BURST="40 jobs in ${took} s; while jobs waited for room ($samples samples; $unlooked before the first job started left out): GPU memory reserved mean ${mean}%, median ${median}%, min ${min}%, >= 80% in $high; rgpu license used mean ${lmean}%, min ${lmin}%; $waited job(s) waited in the prolog (longest ${maxw} s)"
	echo "      $BURST"
	cp "$RC_DIR/burst-samples.txt" "${RGPU_SLURM_SAMPLES:-/dev/null}" 2>/dev/null
	if [ -n "$bad" ]; then fail $name "jobs failed:$bad"
	elif [ $samples -eq 0 ]; then fail $name "no job ever waited: the burst did not fill the GPUs"
	elif ! awk "BEGIN{exit !($mean > 80)}"; then fail $name "GPU memory reserved while jobs waited: mean ${mean}%, not above 80% (min ${min}%)"
	elif [ $maxw -gt 60 ]; then fail $name "a job waited ${maxw} s in its prolog"
	else pass $name
	fi
}

# 10. accounting: the allocation and, after the job, its peak device memory
#     and GPU time, where scontrol show job reads them
t_accounting() {
	local name=accounting_after_the_job
	need_stack $name || return
	local j lic ac peak gs res
	j=$(submit -s --rgpu-mem=1G --wrap "$PROBE --alloc $((300 << 20)) --hold 2") || { fail $name "sbatch refused"; return; }
	wait_gone "$j" 90 || { fail $name "job $j did not finish"; return; }
	for t in $(seq 1 20); do
		ac=$(job_field "$j" AdminComment)
		echo "$ac" | grep -q "gpu_s=" && break
		sleep 0.5
	done
	lic=$(job_field "$j" Licenses)
	peak=$(echo "$ac" | sed -n 's/.*;peak=\([0-9]*\).*/\1/p')
	gs=$(echo "$ac" | sed -n 's/.*;gpu_s=\([0-9.]*\).*/\1/p')
	res=$(gpu_load | awk '{print $8}')
	echo "      job $j: Licenses=$lic AdminComment=$ac"
	if ! echo "$lic" | grep -q "^rgpu:"; then fail $name "no rgpu license on the job: $lic"
	elif [ -z "$peak" ] || [ "$peak" -lt $(( (300 << 20) + ${res:-0} )) ]; then fail $name "peak memory $peak < 300 MiB + its context"
	elif [ -z "$gs" ] || ! awk "BEGIN{exit !($gs >= 1.5)}"; then fail $name "GPU time $gs s for a job that held its GPU 2 s"
	elif ! echo "$ac" | grep -q ";kernel_s=[0-9.]*$"; then fail $name "no kernel time recorded: $ac"
	else pass $name
	fi
}

# 11. accounting in slurmdbd: sacct lists a finished job's rgpu allocation
#     (the license TRES) and its AdminComment with peak memory and GPU time
t_sacct() {
	local name=sacct_after_the_job
	need_stack $name || return
	if [ "$RC_DBD_ON" != 1 ]; then skipped $name "no slurmdbd/mariadbd in this cluster (apt: slurmdbd mariadb-server)"; return; fi
	local j t line tres ac peak gs
	j=$(submit -s --rgpu-mem=1G --wrap "$PROBE --alloc $((300 << 20)) --hold 2") || { fail $name "sbatch refused"; return; }
	wait_gone "$j" 90 || { fail $name "job $j did not finish"; return; }
	# slurmctld sends the job's end to slurmdbd on its own schedule
	for t in $(seq 1 60); do
		line=$(sacct -n -P -j "$j" -X -o jobid,state,alloctres,admincomment 2>/dev/null | head -n1)
		echo "$line" | grep -q "|COMPLETED|.*gpu_s=" && break
		sleep 0.5
	done
	echo "      sacct -j $j -X -o jobid,state,alloctres,admincomment -P:"
	echo "        $line"
	tres=$(echo "$line" | cut -d'|' -f3)
	ac=$(echo "$line" | cut -d'|' -f4-)
	peak=$(echo "$ac" | sed -n 's/.*;peak=\([0-9]*\).*/\1/p')
	gs=$(echo "$ac" | sed -n 's/.*;gpu_s=\([0-9.]*\).*/\1/p')
	if [ -z "$line" ]; then fail $name "sacct does not know job $j: $(sacct -j "$j" -P 2>&1 | tr '\n' '|')"
	elif ! echo "$line" | grep -q "|COMPLETED|"; then fail $name "job $j not COMPLETED in sacct: $line"
	elif ! echo ",$tres," | grep -q ",license/rgpu=$(job_field "$j" Licenses | sed -n 's/^rgpu:\([0-9]*\).*/\1/p'),"; then
		fail $name "AllocTRES has not the job's rgpu license ($(job_field "$j" Licenses)): $tres"
	elif [ -z "$peak" ] || [ "$peak" -lt $((300 << 20)) ]; then fail $name "no peak memory of 300 MiB or more in sacct's AdminComment: $ac"
	elif [ -z "$gs" ] || ! awk "BEGIN{exit !($gs >= 1.5)}"; then fail $name "GPU time '$gs' s in sacct for a job that held its GPU 2 s"
	else pass $name
	fi
}

# RGPU_SLURM_ONLY="t_burst t_pack_slices" runs only those (while iterating)
for t in ${RGPU_SLURM_ONLY:-t_bad_options t_no_lease t_two_gpus t_quota t_share t_scancel t_busy \
	t_accounting t_sacct t_pack_slices t_burst}; do
	$t
	drain_jobs
done
