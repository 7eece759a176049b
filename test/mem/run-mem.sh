#!/bin/bash
# The memory manager against the emulated device (issue 9), as TAP.
#
# Each case starts its own `rgpud --emulated --open` with one device (1 GiB
# for fail and swap, RGPU_EMU_MEM=1G, 320 MiB for the others; its workers
# share one pool, emu/pool.c) and drives
# t_oversub tenants (test/mem/t_oversub.c) through FIFOs:
#   fail       --memory-policy=fail: a second 600 MiB session is refused
#              while the first holds its memory, which stays intact
#   swap       the default policy: two 600 MiB sessions take turns on the
#              GPU, each swapped out while idle, data and a pointer stored
#              in device memory intact through several rounds
#   swap_pool  the same with the memory from stream-ordered pools
#              (T_OVERSUB_POOL=1: rgpud's pools, in the memory manager)
#   wait       --memory-policy=wait: the second allocation proceeds once the
#              first session frees its memory
#   grow       two sessions growing at once, each needing the other's
#              memory: both get it (no deadlock)
#   wait_bound --memory-wait=2: the second allocation times out with
#              CUDA_ERROR_OUT_OF_MEMORY after about 2 s
#   own_set    a session whose own working set exceeds the GPU still fails
#   bad_policy a bad --memory-policy value is refused, naming it
#   killed     a killed session worker's share of the pool comes back
#   metrics    resident and swapped-out bytes reach the parent's /metrics
#   alt        two alternating tenants (t_oversub alt, 1.5x the device
#              together, kernels that take time on a shared device clock):
#              both finish with their data intact; sessions are swapped
#              whole (no more evictions than restores plus sessions: no
#              piece-by-piece eviction); no session is evicted before it
#              had the GPU for the least quantum (--memory-quantum=1)
#              unless it gave way in a cycle; no restore waits longer than
#              the largest quantum (--memory-wait / 2) plus a GPU phase and
#              some slack; and they did take turns (each runs longer than
#              the largest quantum).  bench/oversubscribe/emu.sh measures
#              the time against running them one after the other.
#
# Environment: top_builddir (set by make check), PYTHON, RGPU_MEM_LOGDIR.
set -u
: "${top_builddir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${PYTHON:=python3}"
RGPUD=$top_builddir/daemon/rgpud
CLIENTDIR=$top_builddir/client/.libs
EMULIB=$top_builddir/emu/.libs/librgpu-emu.so
T=$top_builddir/test/mem/t_oversub
LOGDIR=${RGPU_MEM_LOGDIR:-$PWD/mem-logs}

for f in "$RGPUD" "$CLIENTDIR/libcuda.so.1" "$EMULIB" "$T"; do
	if [ ! -e "$f" ]; then
		echo "1..0 # SKIP not built: $f"
		exit 0
	fi
done
export RGPU_EMU_LIB=$EMULIB RGPU_EMU_DEVICES=1
unset RGPU_EMU_TAG RGPU_EMU_POOL
mkdir -p "$LOGDIR"
rm -f "$LOGDIR"/*

NTAP=0
FAIL=0
ok() { NTAP=$((NTAP + 1)); echo "ok $NTAP - $1"; }
notok() { NTAP=$((NTAP + 1)); FAIL=$((FAIL + 1)); echo "not ok $NTAP - $1${2:+ # $2}"; }
check() { if [ "$2" = 0 ]; then ok "$1"; else notok "$1" "${3:-}"; fi; }

free_port() {
	"$PYTHON" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

DPID=""
PIDS=""
cleanup() {
	for p in $PIDS $DPID; do kill "$p" 2>/dev/null; done
	for p in $PIDS $DPID; do wait "$p" 2>/dev/null; done
	return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start_daemon NAME ARGS... -> PORT, DPID
start_daemon() {
	local name=$1
	shift
	PORT=$(free_port)
	RGPU_EMU_MEM=${DMEM:-1G} "$RGPUD" --emulated --open --listen "127.0.0.1:$PORT" "$@" \
		>"$LOGDIR/$name.log" 2>&1 &
	DPID=$!
	for _ in $(seq 1 100); do
		if "$PYTHON" -c "import socket,sys; socket.create_connection(('127.0.0.1', $PORT), 1)" 2>/dev/null; then
			return 0
		fi
		kill -0 "$DPID" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

stop_all() {
	for p in $PIDS; do kill "$p" 2>/dev/null; done
	for p in $PIDS; do wait "$p" 2>/dev/null; done
	PIDS=""
	for v in ${!FD_@}; do
		eval "exec {$v}>&-" 2>/dev/null
		unset "$v"
	done
	if [ -n "$DPID" ]; then
		kill "$DPID" 2>/dev/null
		wait "$DPID" 2>/dev/null
	fi
	DPID=""
}

# tenant NAME SIZES: starts t_oversub with its stdin on a FIFO
tenant() {
	local name=$1 fifo=$LOGDIR/$1.in
	rm -f "$fifo"
	mkfifo "$fifo"
	LD_LIBRARY_PATH=$CLIENTDIR RGPU_SERVERS=127.0.0.1:$PORT/0 \
		timeout 120 "$T" "$2" <"$fifo" >"$LOGDIR/$name.out" 2>"$LOGDIR/$name.err" &
	eval "PID_$name=$!"
	PIDS="$PIDS $!"
	eval "exec {FD_$name}>\"$fifo\""
}
tell() { local v="FD_$1"; echo "$2" >&"${!v}"; }
# wait_for NAME REGEX SECONDS: 0 once the tenant printed a matching line
wait_for() {
	local n=$(($3 * 10))
	for _ in $(seq 1 "$n"); do
		grep -qE "$2" "$LOGDIR/$1.out" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}
# status_of NAME: ST = the tenant's exit status (waits for it)
status_of() { local v="PID_$1"; wait "${!v}"; ST=$?; }

# ---- fail: refused while the first holds its memory
if start_daemon fail --memory-policy=fail; then
	tenant fa 600
	wait_for fa '^READY' 30
	check "fail: first 600 MiB session allocates" $?
	tenant fb 600
	status_of fb; st=$ST
	check "fail: second 600 MiB session is refused (CUDA_ERROR_OUT_OF_MEMORY)" "$([ "$st" = 3 ] && echo 0 || echo 1)" "exit $st"
	tell fa go
	wait_for fa '^OK 1' 60
	check "fail: the first session's data is intact" $?
	tell fa quit
	status_of fa; st=$ST
	check "fail: first session exits cleanly" "$st"
else
	notok "fail: rgpud starts" "see $LOGDIR/fail.log"
fi
stop_all

# ---- swap: both complete, taking turns (swap_case LABEL: the checks'
# names begin with it; the caller's environment goes to the tenants)
swap_case() {
	local l=$1
	if start_daemon "$l"; then
		tenant sa 600
		wait_for sa '^READY' 30
		check "$l: first 600 MiB session allocates" $?
		tenant sb 600
		wait_for sb '^READY' 60
		check "$l: second 600 MiB session allocates (the idle first one is swapped out)" $?
		r=0
		for round in 1 2; do
			tell sa go
			wait_for sa "^OK $round" 60 || r=1
			tell sb go
			wait_for sb "^OK $round" 60 || r=1
		done
		check "$l: two rounds each, data and stored pointer intact" $r "$(tail -n 2 "$LOGDIR"/sa.err "$LOGDIR"/sb.err | tr '\n' ' ')"
		grep -q "swapped out" "$LOGDIR/$l.log"
		check "$l: rgpud logged the evictions" $?
		tell sa quit
		tell sb quit
		status_of sa; sta=$ST
		status_of sb; stb=$ST
		check "$l: both sessions exit cleanly" "$([ "$sta$stb" = 00 ] && echo 0 || echo 1)" "exit $sta $stb"
	else
		notok "$l: rgpud starts" "see $LOGDIR/$l.log"
	fi
	stop_all
}
swap_case swap
# the same with the memory from stream-ordered pools (rgpud's own, in the
# memory manager: swapped like cuMemAlloc memory)
T_OVERSUB_POOL=1 swap_case swap_pool


# The remaining cases use a 320 MiB device and 150 MiB sessions (a context
# costs 64 MiB): the same contention with a quarter of the copying.
DMEM=320M

# ---- wait: proceeds once the first frees
if start_daemon wait --memory-policy=wait --memory-wait=60; then
	tenant wa 150
	wait_for wa '^READY' 30
	check "wait: first 150 MiB session allocates" $?
	tenant wb 150
	sleep 1.5
	! grep -q READY "$LOGDIR/wb.out"
	check "wait: the second allocation waits while the first holds its memory" $?
	tell wa free
	wait_for wa '^FREED' 30
	wait_for wb '^READY' 30
	check "wait: the second proceeds once the first frees" $?
	tell wb go
	wait_for wb '^OK 1' 60
	check "wait: the second session's data is intact" $?
	tell wa quit
	tell wb quit
	status_of wa; sta=$ST
	status_of wb; stb=$ST
	check "wait: both sessions exit cleanly" "$([ "$sta$stb" = 00 ] && echo 0 || echo 1)" "exit $sta $stb"
else
	notok "wait: rgpud starts" "see $LOGDIR/wait.log"
fi
stop_all

# ---- two sessions growing at the same moment, each needing the other's
# memory: neither waits for the other forever (the younger gives way)
if start_daemon grow --memory-wait=30; then
	tenant ga 60
	tenant gb 60
	wait_for ga '^READY' 30 && wait_for gb '^READY' 30
	check "grow: two 60 MiB sessions allocate" $?
	tell ga "grow 50"
	tell gb "grow 50"
	r=0
	wait_for ga '^GREW' 40 || r=1
	wait_for gb '^GREW' 40 || r=1
	check "grow: both grow by 50 MiB at once (352 MiB in all on 320 MiB)" $r "$(cat "$LOGDIR"/ga.out "$LOGDIR"/gb.out | tr '\n' ' ')"
	tell ga go
	tell gb go
	r=0
	wait_for ga '^OK 1' 60 || r=1
	wait_for gb '^OK 1' 60 || r=1
	check "grow: both sessions' data intact" $r
	tell ga quit
	tell gb quit
	status_of ga
	status_of gb
else
	notok "grow: rgpud starts" "see $LOGDIR/grow.log"
fi
stop_all

# ---- bounded wait: times out
if start_daemon wait_bound --memory-policy=wait --memory-wait=2; then
	tenant ba 150
	wait_for ba '^READY' 30
	t0=$(date +%s.%N)
	tenant bb 150
	status_of bb; st=$ST
	t1=$(date +%s.%N)
	check "wait_bound: the waiting allocation fails with CUDA_ERROR_OUT_OF_MEMORY" "$([ "$st" = 3 ] && echo 0 || echo 1)" "exit $st"
	"$PYTHON" -c "import sys; d = $t1 - $t0; sys.exit(0 if 1.9 <= d < 20 else 1)"
	check "wait_bound: after the 2 s bound, not before" $?
	tell ba quit
	status_of ba
else
	notok "wait_bound: rgpud starts" "see $LOGDIR/wait_bound.log"
fi
stop_all

# ---- a session's own working set larger than the GPU
if start_daemon own_set; then
	tenant oa 150+150
	status_of oa; st=$ST
	check "own_set: a session's own 300 MiB (and its context) on a 320 MiB GPU fails under swap" "$([ "$st" = 3 ] && echo 0 || echo 1)" "exit $st"
else
	notok "own_set: rgpud starts" "see $LOGDIR/own_set.log"
fi
stop_all

# ---- bad policy
out=$("$RGPUD" --emulated --open --listen 127.0.0.1:1 --memory-policy=bogus 2>&1)
st=$?
[ "$st" = 2 ] && echo "$out" | grep -q "memory-policy.*'bogus'"
check "bad_policy: --memory-policy=bogus is refused, naming it" $? "exit $st: $out"

# ---- a killed session's pool share returns
if start_daemon killed --memory-policy=fail; then
	tenant ka 150
	wait_for ka '^READY' 30
	worker=$(pgrep -P "$DPID" -f -- --session-worker | head -1)
	[ -n "$worker" ] && kill -9 "$worker"
	check "killed: the holder's session worker is killed" $?
	# (the tenant itself only notices at its next CUDA call)
	kill "$PID_ka" 2>/dev/null
	wait "$PID_ka" 2>/dev/null
	r=1
	for _ in 1 2 3 4 5 6 7 8 9 10; do
		tenant kb 150
		if wait_for kb '^READY' 10; then
			r=0
			tell kb quit
			status_of kb
			break
		fi
		status_of kb
		sleep 0.5
	done
	check "killed: its 150 MiB come back to the pool" $r
else
	notok "killed: rgpud starts" "see $LOGDIR/killed.log"
fi
stop_all

# ---- metrics: resident and swapped-out bytes
MPORT=$(free_port)
if start_daemon metrics --metrics=127.0.0.1:$MPORT && sleep 0.3 &&
	"$PYTHON" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$MPORT/metrics', timeout=5)" 2>/dev/null; then
	tenant ma 150
	wait_for ma '^READY' 30
	tenant mb 150
	wait_for mb '^READY' 60
	m=$("$PYTHON" -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:$MPORT/metrics', timeout=5).read().decode())")
	echo "$m" | grep -qE '^rgpud_memory_swapped_bytes\{slurm_job="0"\} 1[5-6][0-9]{7}$'
	check "metrics: the 150 MiB swapped out reported" $? "$(echo "$m" | grep rgpud_memory_)"
	echo "$m" | grep -qE '^rgpud_memory_resident_bytes\{slurm_job="0"\} 1[5-6][0-9]{7}$'
	check "metrics: 150 MiB resident reported" $?
	tell ma quit
	tell mb quit
	status_of ma
	status_of mb
else
	echo "# metrics endpoint not available (built without libmicrohttpd?): skipped"
	ok "metrics: # SKIP no --metrics in this build"
fi
stop_all

# ---- alternating tenants: no thrashing (whole-session swaps, quanta)
DMEM=512M
export RGPU_EMU_KERNEL_NS=20000000 RGPU_EMU_CLOCK=$LOGDIR/devclock
rm -f "$RGPU_EMU_CLOCK"
# (--memory-wait=10: no quantum exceeds 5 s, shorter than a tenant's run,
# so the tenants must take turns)
if start_daemon alt --memory-quantum=1 --memory-wait=10; then
	alt_tenant() {
		LD_LIBRARY_PATH=$CLIENTDIR RGPU_SERVERS=127.0.0.1:$PORT/0 \
			timeout 120 "$T" alt 320 8 6 2 600 >"$LOGDIR/$1.out" 2>"$LOGDIR/$1.err" &
		eval "PID_$1=$!"
		PIDS="$PIDS $!"
	}
	alt_tenant aa
	sleep 0.3
	alt_tenant ab
	status_of aa; sta=$ST
	status_of ab; stb=$ST
	r=1
	[ "$sta$stb" = 00 ] && grep -q 'RESULT ok' "$LOGDIR/aa.out" && grep -q 'RESULT ok' "$LOGDIR/ab.out" && r=0
	check "alt: two alternating 320 MiB tenants on 512 MiB finish, data and stored addresses intact" \
		$r "exit $sta $stb: $(tail -n 1 "$LOGDIR"/aa.err "$LOGDIR"/ab.err | tr '\n' ' ')"
	stop_all
	# what the memory manager did, from its log
	out=$("$PYTHON" - "$LOGDIR/alt.log" <<'EOF'
import re, sys
ev, rs, early, slow, gave = 0, 0, [], [], 0
sess = set()
for l in open(sys.argv[1], errors="replace"):
    gave += "gives way" in l
    m = re.search(r"\]: info: (.*): swapped out \d+ bytes .*on the GPU for ([0-9.]+) s", l)
    if m:
        ev += 1
        sess.add(m.group(1))
        if float(m.group(2)) < 1.0 and not gave:
            early.append(m.group(2))
    m = re.search(r"\]: info: (.*): swapped in \d+ bytes .*waiting for room ([0-9.]+) s", l)
    if m:
        rs += 1
        sess.add(m.group(1))
        if float(m.group(2)) > 5 + 2 + 5:
            slow.append(m.group(2))
print(ev, rs, len(sess), "early:" + ",".join(early), "slow:" + ",".join(slow))
EOF
)
	set -- $out
	echo "# alt: $out"
	check "alt: whole-session swaps (${1:-?} evictions, ${2:-?} restores, ${3:-?} sessions)" \
		"$([ "${1:-99}" -le $((${2:-0} + ${3:-0})) ] && echo 0 || echo 1)"
	check "alt: nobody evicted before it had the GPU for its quantum" \
		"$([ "${4:-}" = early: ] && echo 0 || echo 1)" "${4:-}"
	check "alt: no restore waited longer than a largest quantum plus a phase" \
		"$([ "${5:-}" = slow: ] && echo 0 || echo 1)" "${5:-}"
	grep -q "swapped out" "$LOGDIR/alt.log"
	check "alt: the tenants did take turns (an eviction happened)" $?
else
	notok "alt: rgpud starts" "see $LOGDIR/alt.log"
fi
stop_all
unset RGPU_EMU_KERNEL_NS RGPU_EMU_CLOCK

echo "1..$NTAP"
[ "$FAIL" = 0 ]
