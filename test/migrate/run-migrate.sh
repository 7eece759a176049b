#!/bin/bash
# Sessions that survive their server, on the emulated device (issue 8).
#
# Two (or three) `rgpud --emulated --open` on free loopback ports, a
# private munged (rgpu migrate needs an admin credential), and
# migrate/t_migrate as the application: it builds state, prints READY, and
# checks all of it after the test has moved its session or killed its
# server.  Each check is a TAP line:
#   t_migrate_keeps_data        rgpu migrate A -> B, A killed, data and handles intact
#                               (RGPUD_MIGRATE_AHEAD=0: everything in the pause)
#   t_migrate_second_gpu        rgpu migrate A -> B/1 (another GPU), same checks
#   t_migrate_same_server_peer  rgpu migrate A -> A/1: device memory handed to
#                               the new worker (made ready there before the
#                               pause) and copied GPU to GPU as the pause's
#                               records come (the logs say how much), same checks
#   t_migrate_same_gpu_worker   rgpu migrate A -> A/0 from GPU 0: a fresh worker
#                               on the same GPU, memory by reference too
#   t_migrate_vmm               a session with application VMM memory (mapped,
#                               one handle released) -> another server
#   t_migrate_vmm_changed       the same while VMM memory is made and let go:
#                               it went ahead, changed, so the whole state goes
#   t_migrate_vmm_same_server   the same -> the other GPU of its server
#   t_migrate_graphs            a session with CUDA graphs (captured, explicit, an
#                               executable updated, a graph and an event it used
#                               destroyed) -> another server: they run as before
#   t_migrate_graphs_same_server  the same -> the other GPU of its server
#   t_migrate_pools             a session with stream-ordered pools (default and
#                               created, a cached block, a destroyed pool's live
#                               allocation) -> another server: same addresses,
#                               attributes and sizes, the cached block reused
#   t_migrate_pools_same_server the same -> the other GPU of its server
#   t_migrate_hostfn            a session that ran host functions moves, runs more
#   t_standby_vmm               the standby case with application VMM memory
#   t_standby_graphs            the standby case with CUDA graphs
#   t_standby_pools             the standby case with pools: allocations after the
#                               checkpoint replayed at the same addresses
#   t_standby_capture_deferred  checkpoints due during a stream capture are
#                               deferred, not given up: recovered after, with
#                               the capture's graph (and the deferral logged)
#   t_migrate_memory_churn      the same while the application frees and
#                               allocates memory all through the move (made
#                               ready ahead, then gone, or new since): every
#                               buffer left holds its data
#   t_migrate_same_server_bytes the same with RGPUD_MIGRATE_NO_PEER: streamed
#   t_migrate_objects_ahead     the default: objects re-created on B before
#                               the pause, then the rest; same checks
#   t_migrate_ahead_changed     the same while the application destroys an
#                               object sent ahead: the whole state goes instead
#   t_standby_after_sigkill     RGPU_STANDBY=B, A's parent and workers SIGKILLed
#   t_lost_without_standby_fails  no standby: a clear error, no hang
#   t_migrate_needs_admin       a user's credential is refused
#   t_unmovable_stays           a session holding VMM memory exported for another
#                               process: refused, goes on
#   t_unmovable_ipc_event       an event exported for another process: refused, goes on
#   t_unmovable_vmm_part        VMM physical memory mapped in part: refused, goes on
#   t_unmovable_graph_memory    a graph with a memory node: refused, goes on
#   t_unmovable_capture         a stream capture under way: refused, the capture goes on
#   t_bad_state_refused         garbage, truncated and forged state, forged tokens
#                               (raw_restore.py): refused with a reason, server unharmed
#   t_drain                     rgpu drain A --to B: moved, then A refuses new sessions
#   t_restart_keeps_jobs        rgpud restarted (SIGKILL) with standby: the job goes on
#   t_worker_layout             workers run without address randomisation
#                               (/proc/PID/personality), with it under
#                               --worker-layout=random; a bad value is refused
#   t_daemons_clean             no sanitizer report in any rgpud log
# Environment: top_builddir, RGPU_MIGRATE_LOGDIR (default ./migrate-logs),
# RGPU_MIGRATE_DAEMON_BUILD (another build tree whose rgpud and emulated
# device serve: the sanitizer build, test/run-all.sh).
set -u
: "${top_builddir:=$(cd "$(dirname "$0")/../.." && pwd)}"
DAEMON_BUILD=${RGPU_MIGRATE_DAEMON_BUILD:-$top_builddir}
RGPUD=$DAEMON_BUILD/daemon/rgpud
RGPU=$top_builddir/tools/rgpu
PROG=$top_builddir/test/migrate/t_migrate
EMULIB=$DAEMON_BUILD/emu/.libs/librgpu-emu.so
CLIENTDIR=$top_builddir/client/.libs
LOGDIR=${RGPU_MIGRATE_LOGDIR:-$PWD/migrate-logs}
for f in "$RGPUD" "$RGPU" "$PROG" "$EMULIB" "$CLIENTDIR/libcuda.so.1"; do
	[ -e "$f" ] || { echo "1..0 # SKIP $f not built"; exit 0; }
done
export RGPU_EMU_LIB=$EMULIB
mkdir -p "$LOGDIR"
rm -f "$LOGDIR"/*
TMP=$(mktemp -d /tmp/rgpu-migrate.XXXXXX)
chmod 755 "$TMP"

# an application that died leaves its stdin fifo without a reader: the
# check that follows fails, rather than SIGPIPE ending the whole suite
trap '' PIPE

n=0 failed=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
ko() {
	n=$((n + 1)); failed=$((failed + 1))
	echo "not ok $n - $1"
	[ -n "${2:-}" ] && printf '%s\n' "$2" | tail -15 | sed 's/^/#   /'
}
sk() { n=$((n + 1)); echo "ok $n - $1 # SKIP ${2:-}"; }
check() { if eval "$2"; then ok "$1"; else ko "$1" "${3:-}"; fi; }

. "$(dirname "$0")/../lib-daemon.sh"

# a private munged: `rgpu migrate` authenticates as root
if [ "$(id -u)" -ne 0 ]; then
	munged_rc=2
else
	start_munged
	munged_rc=$?
fi
case $munged_rc in
0) ;;
1) echo "1..0 # SKIP munged did not start"; exit 0 ;;
*) echo "1..0 # SKIP needs root and munged (rgpu migrate needs an admin credential)"; exit 0 ;;
esac
export RGPU_MUNGE_SOCKET=$TMP/munge.socket

echo "1..34"

# every server here is open: the checks are about moving sessions, not
# who may have one (lib-daemon.sh: PORT, PID, LOG)
start_open_rgpud() {
	start_rgpud "$@" --open
}
# a parent and its workers, all at once (a crash of the whole rgpud)
kill_all() {
	local kids
	kids=$(cat /proc/"$1"/task/*/children 2>/dev/null)
	kill -9 "$1" $kids 2>/dev/null
	wait "$1" 2>/dev/null
}

# run_app NAME SERVER [args...]: t_migrate in the background, its stdin a
# fifo held open on fd 3; waits for READY (0) or its end (1)
run_app() {
	local name=$1 server=$2
	shift 2
	rm -f "$TMP/go"
	mkfifo "$TMP/go"
	RGPU_SERVERS=$server RGPU_TRANSPORT=tcp RGPU_LOG_LEVEL=${MIG_CLIENT_LOG:-info} LD_LIBRARY_PATH=$CLIENTDIR \
		timeout 120 "$PROG" "$@" <"$TMP/go" >"$LOGDIR/$name.out" 2>"$LOGDIR/$name.err" &
	APP=$!
	exec 3>"$TMP/go"
	for _ in $(seq 600); do
		grep -q READY "$LOGDIR/$name.out" 2>/dev/null && return 0
		kill -0 "$APP" 2>/dev/null || return 1
		sleep 0.05
	done
	return 1
}
# go NAME: lets the application go on; its exit status in APP_RC
go() {
	echo go >&3
	exec 3>&-
	wait "$APP"
	APP_RC=$?
}
detail() { cat "$LOGDIR/$1.out" "$LOGDIR/$1.err" 2>/dev/null; }
# personality PARENT: the personality flags of PARENT's session worker
personality() {
	local w
	w=$(pgrep -P "$1" -f -- --session-worker | head -1)
	[ -n "$w" ] && cat "/proc/$w/personality" 2>/dev/null
}
no_aslr() { [ -n "$1" ] && [ $((0x$1 & 0x0040000)) != 0 ]; }

# ---- rgpu migrate: to another server, then the old one dies (the whole
# state in the pause, as with RGPUD_MIGRATE_AHEAD=0) ----
RGPUD_MIGRATE_AHEAD=0 start_open_rgpud a1 && A=$PORT AP=$PID
start_open_rgpud b1 && B=$PORT BP=$PID
if run_app migrate "127.0.0.1:$A"; then
	PERS_FIXED=$(personality "$AP")
	# no munge: root on the same host is vouched for by the kernel (Unix socket)
	env -u RGPU_MUNGE_SOCKET "$RGPU" migrate --from "127.0.0.1:$A" --to "127.0.0.1:$B" \
		>"$LOGDIR/migrate.cmd" 2>&1
	kill_all "$AP"
	go migrate
	check t_migrate_keeps_data \
		'[ "$APP_RC" = 0 ] && grep -q "^OK" "$LOGDIR/migrate.out" && grep -q "1 moved, 0 failed" "$LOGDIR/migrate.cmd" && grep -q "client attached" "$LOGDIR/b1.log" && ! grep -q "before the pause" "$LOGDIR/a1.log"' \
		"$(cat "$LOGDIR/migrate.cmd"; detail migrate; tail -5 "$LOGDIR/b1.log")"
else
	ko t_migrate_keeps_data "$(detail migrate)"
fi
kill_all "$BP"

# ---- objects ahead of the pause (the default) ----
# ahead NAME [t_migrate mode]: moves t_migrate from a source that sends
# the session's objects before pausing it to another server
ahead() {
	local name=$1
	shift
	APP_RC=x
	start_open_rgpud "$name-a" && A=$PORT AP=$PID ALOG=$LOG
	start_open_rgpud "$name-b" && B=$PORT BP=$PID BLOG=$LOG
	if run_app "$name" "127.0.0.1:$A" "$@"; then
		case ${1:-} in churn | vmmchurn) echo churn >&3 ;; esac
		env -u RGPU_MUNGE_SOCKET "$RGPU" migrate --from "127.0.0.1:$A" --to "127.0.0.1:$B" \
			>"$LOGDIR/$name.cmd" 2>&1
		kill_all "$AP"
		go "$name"
	fi
	kill_all "$BP"
}
ahead ahead
check t_migrate_objects_ahead \
	'[ "$APP_RC" = 0 ] && grep -q "^OK" "$LOGDIR/ahead.out" && grep -q "1 moved, 0 failed" "$LOGDIR/ahead.cmd" && grep -q "re-created there before the pause" "$ALOG" && grep -q "client attached" "$BLOG"' \
	"$(cat "$LOGDIR/ahead.cmd"; detail ahead; grep -E "moved|ahead" "$ALOG")"
# an object sent ahead goes before the pause: the whole state goes then
ahead churn churn
check t_migrate_ahead_changed \
	'[ "$APP_RC" = 0 ] && grep -q "^OK" "$LOGDIR/churn.out" && grep -q "1 moved, 0 failed" "$LOGDIR/churn.cmd" && grep -q "changed or went meanwhile; moving it at once" "$ALOG"' \
	"$(cat "$LOGDIR/churn.cmd"; detail churn; grep -E "moved|ahead|meanwhile" "$ALOG")"

# application VMM memory (cuMemCreate, cuMemMap, cuMemSetAccess; one
# handle released while mapped): to another server, objects ahead
ahead vmm vmm
check t_migrate_vmm \
	'[ "$APP_RC" = 0 ] && grep -q "^OK" "$LOGDIR/vmm.out" && grep -q "1 moved, 0 failed" "$LOGDIR/vmm.cmd" && grep -q "client attached" "$BLOG"' \
	"$(cat "$LOGDIR/vmm.cmd"; detail vmm; grep -E "moved|restor|ahead" "$ALOG" "$BLOG")"
# its VMM memory goes ahead of the pause too; made and let go again and
# again meanwhile: the whole state goes at once instead
ahead vmmchurn vmmchurn
check t_migrate_vmm_changed \
	'[ "$APP_RC" = 0 ] && grep -q "^OK" "$LOGDIR/vmmchurn.out" && grep -q "1 moved, 0 failed" "$LOGDIR/vmmchurn.cmd" && grep -q "its VMM memory, sent ahead, changed meanwhile; moving it at once" "$ALOG"' \
	"$(cat "$LOGDIR/vmmchurn.cmd"; detail vmmchurn; grep -E "moved|ahead|meanwhile" "$ALOG")"

# CUDA graphs (captured and explicit, an executable updated, the captured
# graph and an event it recorded destroyed): made again on the target by
# replaying what built them
ahead graph graph
check t_migrate_graphs \
	'[ "$APP_RC" = 0 ] && grep -q "^OK" "$LOGDIR/graph.out" && grep -q "1 moved, 0 failed" "$LOGDIR/graph.cmd" && grep -q "client attached" "$BLOG" && grep -q "its graphs made again from \([1-9][0-9]*\) requests in [0-9.]* ms (\1 of them in the pause)" "$BLOG"' \
	"$(cat "$LOGDIR/graph.cmd"; detail graph; grep -E "moved|restor|ahead|graph" "$ALOG" "$BLOG")"

# stream-ordered pools (default and created, a cached block, a pool gone
# with an allocation live): their blocks at the same addresses, the
# cached one served again
ahead pools pool
check t_migrate_pools \
	'[ "$APP_RC" = 0 ] && grep -q "^OK" "$LOGDIR/pools.out" && grep -q "1 moved, 0 failed" "$LOGDIR/pools.cmd" && grep -q "client attached" "$BLOG"' \
	"$(cat "$LOGDIR/pools.cmd"; detail pools; grep -E "moved|restor|ahead" "$ALOG" "$BLOG")"

# a session that ran a host function (none under way at the pause), and
# runs more after the move
ahead hostfn hostfn
check t_migrate_hostfn \
	'[ "$APP_RC" = 0 ] && grep -q "^OK" "$LOGDIR/hostfn.out" && grep -q "1 moved, 0 failed" "$LOGDIR/hostfn.cmd" && grep -q "client attached" "$BLOG"' \
	"$(cat "$LOGDIR/hostfn.cmd"; detail hostfn; grep -E "moved|restor|ahead" "$ALOG" "$BLOG")"

# ---- to the second GPU of another server ----
start_open_rgpud a2 --worker-layout=random && A=$PORT AP=$PID
start_open_rgpud b2 && B=$PORT BP=$PID
if run_app gpu1 "127.0.0.1:$A"; then
	PERS_RANDOM=$(personality "$AP")
	"$RGPU" migrate --from "127.0.0.1:$A" --to "127.0.0.1:$B/1" >"$LOGDIR/gpu1.cmd" 2>&1
	kill_all "$AP"
	go gpu1
	check t_migrate_second_gpu \
		'[ "$APP_RC" = 0 ] && grep -q "^OK" "$LOGDIR/gpu1.out" && grep -q "session restored on GPU 1 " "$LOGDIR/b2.log"' \
		"$(cat "$LOGDIR/gpu1.cmd"; detail gpu1; grep restored "$LOGDIR/b2.log")"
else
	ko t_migrate_second_gpu "$(detail gpu1)"
fi
kill_all "$BP"

# ---- to the second GPU of the same server: GPU to GPU, then streamed ----
# same_server NAME: moves t_migrate from GPU 0 to GPU 1 of one rgpud (the
# caller's environment goes to that rgpud); its log lines about the move
# in $LOGDIR/NAME.moved, the application's exit status in APP_RC
same_server() {
	local name=$1
	shift
	APP_RC=x
	: >"$LOGDIR/$name.moved"
	start_open_rgpud "$name" || return 1
	A=$PORT AP=$PID
	if run_app "$name" "127.0.0.1:$A" "$@"; then
		[ "${1:-}" = memchurn ] && echo churn >&3
		"$RGPU" migrate --from "127.0.0.1:$A" --to "127.0.0.1:$A/${MOVE_GPU:-1}" >"$LOGDIR/$name.cmd" 2>&1
		go "$name"
		grep -E "session moved to|session restored on" "$LOG" >"$LOGDIR/$name.moved"
	fi
	kill_all "$AP"
}
same_server peer
check t_migrate_same_server_peer \
	'[ "$APP_RC" = 0 ] && grep -q "^OK" "$LOGDIR/peer.out" && grep -q "1 moved, 0 failed" "$LOGDIR/peer.cmd" && grep -q "session restored on GPU 1 .*[1-9][0-9]* of them copied GPU to GPU.*before the pause [1-9][0-9]* bytes of memory made ready in [0-9.]* s, [1-9][0-9]* of them still in use.* [1-9][0-9]* bytes copied as their records came" "$LOGDIR/peer.moved" && grep -q "session moved to .*(another GPU).*of them device memory copied GPU to GPU" "$LOGDIR/peer.moved"' \
	"$(cat "$LOGDIR/peer.cmd" "$LOGDIR/peer.moved"; detail peer)"
# to a fresh worker on the same GPU of the same server (a worker replaced
# under a live session): its memory by reference as well
MOVE_GPU=0 same_server samegpu
check t_migrate_same_gpu_worker \
	'[ "$APP_RC" = 0 ] && grep -q "^OK" "$LOGDIR/samegpu.out" && grep -q "1 moved, 0 failed" "$LOGDIR/samegpu.cmd" && grep -q "session restored on GPU 0 .*[1-9][0-9]* of them copied GPU to GPU" "$LOGDIR/samegpu.moved"' \
	"$(cat "$LOGDIR/samegpu.cmd" "$LOGDIR/samegpu.moved"; detail samegpu)"
# application VMM memory to the other GPU of the same server: made there,
# its access given to that GPU
# (the mapped handle's bytes GPU to GPU as well: more of them than in the
# same move without VMM memory; the released one's go by value)
same_server vmmgpu vmm
gpu2gpu() { sed -n 's/.*session restored on GPU 1 .* \([0-9]*\) of them copied GPU to GPU.*/\1/p' "$LOGDIR/$1.moved" | tail -1; }
check t_migrate_vmm_same_server \
	'[ "$APP_RC" = 0 ] && grep -q "^OK" "$LOGDIR/vmmgpu.out" && grep -q "1 moved, 0 failed" "$LOGDIR/vmmgpu.cmd" && [ "$(gpu2gpu vmmgpu)" -gt "$(gpu2gpu peer)" ] && grep -q "[1-9][0-9]* bytes of VMM memory mapped from the source before the pause" "$LOGDIR/vmmgpu.moved"' \
	"$(cat "$LOGDIR/vmmgpu.cmd" "$LOGDIR/vmmgpu.moved"; detail vmmgpu)"
# graphs to the other GPU of their server: made there ahead of the pause
# (the memory they name is made ahead too)
same_server graphgpu graph
check t_migrate_graphs_same_server \
	'[ "$APP_RC" = 0 ] && grep -q "^OK" "$LOGDIR/graphgpu.out" && grep -q "1 moved, 0 failed" "$LOGDIR/graphgpu.cmd" && grep -q "session restored on GPU 1.*its graphs made again from [1-9][0-9]* requests in [0-9.]* ms (0 of them in the pause)" "$LOGDIR/graphgpu.moved"' \
	"$(cat "$LOGDIR/graphgpu.cmd" "$LOGDIR/graphgpu.moved"; detail graphgpu)"
# pools to the other GPU of their server (blocks by reference)
same_server poolgpu pool
check t_migrate_pools_same_server \
	'[ "$APP_RC" = 0 ] && grep -q "^OK" "$LOGDIR/poolgpu.out" && grep -q "1 moved, 0 failed" "$LOGDIR/poolgpu.cmd" && grep -q "session restored on GPU 1 .*[1-9][0-9]* of them copied GPU to GPU" "$LOGDIR/poolgpu.moved"' \
	"$(cat "$LOGDIR/poolgpu.cmd" "$LOGDIR/poolgpu.moved"; detail poolgpu)"
# memory freed and allocated while the move's memory is made ready ahead
# (the buffers go one a millisecond, the target makes ready in tens of
# them: some of what was made ready is gone by the pause)
same_server memchurn memchurn
read -r READY_B INUSE_B <<<"$(sed -n 's/.*before the pause \([0-9]*\) bytes of memory made ready in [0-9.]* s, \([0-9]*\) of them still in use.*/\1 \2/p' "$LOGDIR/memchurn.moved")"
check t_migrate_memory_churn \
	'[ "$APP_RC" = 0 ] && grep -q "^OK" "$LOGDIR/memchurn.out" && grep -q "1 moved, 0 failed" "$LOGDIR/memchurn.cmd" && grep -q "session restored on GPU 1 .*copied GPU to GPU" "$LOGDIR/memchurn.moved" && [ "${INUSE_B:-0}" -gt 0 ] && [ "$INUSE_B" -lt "${READY_B:-0}" ]' \
	"$(cat "$LOGDIR/memchurn.cmd" "$LOGDIR/memchurn.moved"; detail memchurn)"
RGPUD_MIGRATE_NO_PEER=1 same_server bytes
check t_migrate_same_server_bytes \
	'[ "$APP_RC" = 0 ] && grep -q "^OK" "$LOGDIR/bytes.out" && grep -q "session restored on GPU 1 " "$LOGDIR/bytes.moved" && ! grep -q "GPU to GPU" "$LOGDIR/bytes.moved"' \
	"$(cat "$LOGDIR/bytes.cmd" "$LOGDIR/bytes.moved"; detail bytes)"

bad=$("$RGPUD" --emulated --open --worker-layout=sometimes 2>&1)
BADRC=$?
check t_worker_layout \
	'no_aslr "${PERS_FIXED:-}" && [ -n "${PERS_RANDOM:-}" ] && ! no_aslr "$PERS_RANDOM" && [ $BADRC = 2 ] && echo "$bad" | grep -q "worker-layout.*sometimes"' \
	"fixed: ${PERS_FIXED:-?} random: ${PERS_RANDOM:-?} bad value: exit $BADRC: $bad"

# ---- a standby: the whole server SIGKILLed ----
# standby_case NAME TEST MODE: t_migrate MODE on a checkpointing server
# with a standby, the server SIGKILLed at READY; B, BP stay the standby's
standby_case() {
	local name=$1 test=$2 mode=$3
	start_open_rgpud "a-$name" --checkpoint-interval=1 && A=$PORT AP=$PID
	start_open_rgpud "b-$name" && B=$PORT BP=$PID
	export RGPU_STANDBY=127.0.0.1:$B
	if run_app "$name" "127.0.0.1:$A" "$mode"; then
		kill_all "$AP"
		go "$name"
		check "$test" \
			'[ "$APP_RC" = 0 ] && grep -q "^OK" "$LOGDIR/$name.out" && grep -q "recovered on" "$LOGDIR/$name.err" && [ "$(grep -c "checkpoint of" "$LOGDIR/$name.err")" -ge 2 ]' \
			"$(detail "$name"; tail -5 "$LOGDIR/b-$name.log")"
	else
		ko "$test" "$(detail "$name")"
	fi
}
standby_case standby t_standby_after_sigkill standby
kill_all "$BP"
# the same with application VMM memory in the checkpoint
standby_case vmmsb t_standby_vmm vmmstandby
kill_all "$BP"
# and with CUDA graphs in it
standby_case graphsb t_standby_graphs graphstandby
kill_all "$BP"
# and with pools, allocations after the last checkpoint replayed at the
# addresses the application holds
standby_case poolsb t_standby_pools poolstandby
kill_all "$BP"
# a capture under way when checkpoints come due: deferred (not given up),
# the one after it carries the graph, which runs again on the standby
standby_case capsb t_standby_capture_deferred capturestandby
grep -q "checkpoint deferred: a stream capture is under way" "$LOGDIR/a-capsb.log" ||
	ko t_standby_capture_deferred_logged "$(grep -i checkpoint "$LOGDIR/a-capsb.log" | tail -3)"
grep -q "checkpoint deferred: a stream capture is under way" "$LOGDIR/a-capsb.log" &&
	ok t_standby_capture_deferred_logged
unset RGPU_STANDBY

# ---- no standby: a clear error, never a hang ----
start_open_rgpud a4 && A=$PORT AP=$PID
if run_app lost "127.0.0.1:$A"; then
	kill_all "$AP"
	go lost
	check t_lost_without_standby_fails \
		'[ "$APP_RC" != 0 ] && [ "$APP_RC" != 124 ] && grep -q "CUDA_ERROR_DEVICE_UNAVAILABLE\|lost connection" "$LOGDIR/lost.err"' \
		"rc $APP_RC; $(detail lost)"
else
	ko t_lost_without_standby_fails "$(detail lost)"
fi

# ---- only root or the SlurmUser moves sessions ----
if command -v setpriv >/dev/null; then
	setpriv --reuid=4242 --regid=4242 --clear-groups \
		"$RGPU" migrate --from "127.0.0.1:$B" --to "127.0.0.1:$B" >"$LOGDIR/user.cmd" 2>&1
	URC=$?
	check t_migrate_needs_admin '[ "$URC" = 2 ] && grep -q "needs root or the SlurmUser" "$LOGDIR/user.cmd"' \
		"$(cat "$LOGDIR/user.cmd")"
else
	sk t_migrate_needs_admin "no setpriv"
fi

# ---- what cannot move stays, unharmed ----
# unmovable NAME TEST MODE REASON: t_migrate MODE on a fresh server; the
# move to B is refused with REASON (a grep pattern) and the run goes on
unmovable() {
	local name=$1 test=$2 mode=$3 reason=$4 prc
	start_open_rgpud "u-$name" && A=$PORT AP=$PID
	if run_app "$name" "127.0.0.1:$A" "$mode"; then
		"$RGPU" migrate --from "127.0.0.1:$A" --to "127.0.0.1:$B" >"$LOGDIR/$name.cmd" 2>&1
		prc=$?
		go "$name"
		check "$test" \
			'[ "$prc" = 1 ] && grep -q "0 moved, 1 failed" "$LOGDIR/$name.cmd" && grep -q "$reason" "$LOGDIR/$name.cmd" && [ "$APP_RC" = 0 ] && grep -q "^OK" "$LOGDIR/$name.out"' \
			"rc $prc; $(cat "$LOGDIR/$name.cmd"; detail "$name")"
	else
		ko "$test" "$(detail "$name")"
	fi
	kill_all "$AP"
}
unmovable shared t_unmovable_stays vmmshared "shares application VMM memory with another process"
# an event exported for another process (cuIpcGetEventHandle)
unmovable ipcev t_unmovable_ipc_event ipcevent "shares an event with another process"
# VMM physical memory mapped in part only
unmovable vmmpart t_unmovable_vmm_part vmmpart "not mapped whole"
# a graph with a memory node (its address is the driver's choice)
unmovable graphmem t_unmovable_graph_memory graphmem "graph memory"
# a stream capture under way (a drain would end it): refused, the capture
# ends after and its graph runs
unmovable capturing t_unmovable_capture capturing "stream capture is under way"

# ---- bad state, forged tokens ----
python3 "$(dirname "$0")/raw_restore.py" "$B" >"$LOGDIR/raw.out" 2>&1
RRC=$?
check t_bad_state_refused '[ "$RRC" = 0 ] && kill -0 "$BP"' "$(cat "$LOGDIR/raw.out")"

# ---- rgpu drain: the session moves, new ones are refused ----
start_open_rgpud a5 && A=$PORT AP=$PID
if run_app drain "127.0.0.1:$A"; then
	"$RGPU" drain "127.0.0.1:$A" --to "127.0.0.1:$B" >"$LOGDIR/drain.cmd" 2>&1
	DRC=$?
	go drain
	setpriv --reuid=4242 --regid=4242 --clear-groups env RGPU_SERVERS="127.0.0.1:$A" \
		RGPU_TRANSPORT=tcp LD_LIBRARY_PATH=$CLIENTDIR timeout 30 "$PROG" \
		</dev/null >"$LOGDIR/drain2.out" 2>"$LOGDIR/drain2.err"
	check t_drain \
		'[ "$DRC" = 0 ] && [ "$APP_RC" = 0 ] && grep -q "^OK" "$LOGDIR/drain.out" && grep -q "draining" "$LOGDIR/drain2.err"' \
		"drain rc $DRC; $(cat "$LOGDIR/drain.cmd"; detail drain; detail drain2)"
else
	ko t_drain "$(detail drain)"
fi
kill_all "$AP"

# ---- a restart (the service manager's SIGKILL included) with a standby ----
# The restarted rgpud is the standby: the job reconnects to the same port.
start_open_rgpud a6 --checkpoint-interval=3600 && A=$PORT AP=$PID
export RGPU_STANDBY=127.0.0.1:$A
if run_app restart "127.0.0.1:$A" standby; then
	kill_all "$AP"
	"$RGPUD" --emulated --open --listen "127.0.0.1:$A" --log-level debug \
		--checkpoint-interval=3600 >"$LOGDIR/a6-restarted.log" 2>&1 &
	PIDS="$PIDS $!"
	for _ in $(seq 200); do grep -q serving "$LOGDIR/a6-restarted.log" 2>/dev/null && break; sleep 0.05; done
	go restart
	check t_restart_keeps_jobs '[ "$APP_RC" = 0 ] && grep -q "^OK" "$LOGDIR/restart.out"' \
		"$(detail restart; tail -5 "$LOGDIR/a6-restarted.log")"
else
	ko t_restart_keeps_jobs "$(detail restart)"
fi
unset RGPU_STANDBY
kill_all "$BP"
check t_daemons_clean '! grep -qE "ERROR: [A-Za-z]+Sanitizer|runtime error:" "$LOGDIR"/*.log' \
	"$(grep -hE -A5 "ERROR: [A-Za-z]+Sanitizer|runtime error:" "$LOGDIR"/*.log | head -30)"
exit $((failed > 0))
