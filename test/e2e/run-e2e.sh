#!/bin/bash
# End-to-end suite against the emulated device.
#
# Starts `rgpud --emulated` twice on free 127.0.0.1 ports, runs every e2e
# program through the rgpu client (LD_LIBRARY_PATH=client/.libs), reports
# each check as a TAP line (`make check` runs it through automake's TAP
# driver, as e2e/e2e.tap, so each check is a test of its own: PASS, FAIL,
# SKIP, or XFAIL for a tolerated failure), and stops the daemons.
# RGPU_VALGRIND=1 runs the whole set a second time with the client side
# under valgrind.
#
# Exit: 0 nothing failed (t_runtime may fail: reported as XFAIL, TAP TODO),
# 1 a failure.  Nothing built yet: a TAP "1..0 # SKIP" and exit 0.
#
# Environment: top_builddir, top_srcdir (set by `make check`), PYTHON,
# RGPU_VALGRIND, RGPU_E2E_ONLY="t_vecadd t_matmul" (run a subset),
# RGPU_E2E_LOGDIR (default ./e2e-logs), RGPU_TEST_TIMEOUT (seconds, 120).

set -u
: "${top_builddir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${PYTHON:=python3}"
: "${RGPU_TEST_TIMEOUT:=120}"
LOGDIR=${RGPU_E2E_LOGDIR:-$PWD/e2e-logs}
E2E=$top_builddir/test/e2e
# RGPU_E2E_DAEMON_BUILD: another build tree whose rgpud and emulated device
# serve (a sanitizer build: test/run-all.sh); the clients stay this tree's
DAEMON_BUILD=${RGPU_E2E_DAEMON_BUILD:-$top_builddir}
RGPUD=$DAEMON_BUILD/daemon/rgpud
CLIENTDIR=$top_builddir/client/.libs
NVMLLIB=$top_builddir/nvml/.libs/libnvidia-ml.so.1
FAKE_NVML_DIR=$top_builddir/test/e2e/fake-nvml
EMULIB=$DAEMON_BUILD/emu/.libs/librgpu-emu.so

missing=""
[ -x "$RGPUD" ] || missing="$missing $RGPUD"
[ -e "$CLIENTDIR/libcuda.so.1" ] || missing="$missing $CLIENTDIR/libcuda.so.1"
[ -e "$EMULIB" ] || missing="$missing $EMULIB"
[ -x "$E2E/t_vecadd" ] || missing="$missing $E2E/t_vecadd(needs nvcc)"
if [ -n "$missing" ]; then
	echo "1..0 # SKIP not built:$missing"
	exit 0
fi
# rgpud finds the emulator next to itself once installed; in the build tree
# tell it where the library is.
export RGPU_EMU_LIB=$EMULIB

mkdir -p "$LOGDIR"
rm -f "$LOGDIR"/*.log "$LOGDIR"/*.out "$LOGDIR"/*.err

free_port() {
	"$PYTHON" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

# a per-session cap on client memory rgpud shares (and pins) for same-host
# copies; t_copy_proto checks it with the same value
export RGPUD_MAX_PINNED=${RGPUD_MAX_PINNED:-1G}
# every session logs where its worker's time went when it ends (checked
# once below, t_op_stats)
export RGPUD_OP_STATS=1

DAEMON_PIDS=""
cleanup() {
	for p in $DAEMON_PIDS; do
		kill "$p" 2>/dev/null
	done
	for p in $DAEMON_PIDS; do
		wait "$p" 2>/dev/null
	done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start_daemon NAME -> sets PORT; the daemon logs to $LOGDIR/NAME.log
start_daemon() {
	local name=$1 try pid
	for try in 1 2 3 4 5; do
		PORT=$(free_port) || { echo "Bail out! cannot pick a free port"; exit 1; }
		# (debug: each request the driver fails is logged, t_fault_logged)
		env ${DAEMON_ENV:-} "$RGPUD" --emulated --open --listen "127.0.0.1:$PORT" \
			--log-level=debug >"$LOGDIR/$name.log" 2>&1 &
		pid=$!
		# ready when it accepts a connection
		for _ in $(seq 1 100); do
			if ! kill -0 "$pid" 2>/dev/null; then
				break
			fi
			if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
				DAEMON_PIDS="$DAEMON_PIDS $pid"
				eval "PID_$name=$pid"
				return 0
			fi
			sleep 0.1
		done
		kill "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
		echo "# rgpud ($name) did not come up on 127.0.0.1:$PORT (try $try):"
		sed 's/^/#    /' "$LOGDIR/$name.log" | tail -20
	done
	echo "Bail out! cannot start rgpud --emulated"
	exit 1
}

start_daemon d1
P1=$PORT
start_daemon d2
P2=$PORT
echo "# rgpud --emulated on 127.0.0.1:$P1 (pid $PID_d1) and 127.0.0.1:$P2 (pid $PID_d2)"
ONE="127.0.0.1:$P1/0"
TWO="127.0.0.1:$P1/0,127.0.0.1:$P2/1"

PASS=0 FAIL=0 SKIPPED=0 XFAIL=0
FAILED=""
SUFFIX=""
WRAP=()

want() {
	[ -z "${RGPU_E2E_ONLY:-}" ] && return 0
	case " $RGPU_E2E_ONLY " in *" $1 "*) return 0 ;; esac
	return 1
}

# One TAP line per check: "ok N - name  0.12s", "not ok N - name (why)",
# "ok N - name # SKIP why", "not ok N - name # TODO why" (tolerated).
NTAP=0
report() { # name PASS|FAIL|SKIP|XFAIL seconds [note]
	NTAP=$((NTAP + 1))
	local t
	t=$(printf '%.2fs' "$3")
	case $2 in
	PASS) echo "ok $NTAP - $1  $t${4:+ $4}" ;;
	FAIL) echo "not ok $NTAP - $1  $t ${4:-}" ;;
	SKIP) echo "ok $NTAP - $1 # SKIP ${4:-}" ;;
	XFAIL) echo "not ok $NTAP - $1 # TODO ${4:-tolerated failure}" ;;
	esac
}

# run NAME SERVERS [xfail] -- [VAR=VALUE...] PROGRAM [ARGS...]
run() {
	local name=$1$SUFFIX servers=$2 xfail=""
	shift 2
	if [ "$1" = xfail ]; then xfail=1; shift; fi
	[ "$1" = -- ] && shift
	local envs=()
	while [ $# -gt 0 ] && [[ $1 == *=* ]]; do
		envs+=("$1")
		shift
	done
	want "$1" || return 0
	local prog=$1
	shift
	local out=$LOGDIR/$name.out err=$LOGDIR/$name.err t0 t1 rc secs
	t0=$(date +%s%N)
	RGPU_SERVERS=$servers LD_LIBRARY_PATH=$CLIENTDIR \
		env "${envs[@]}" timeout "$RGPU_TEST_TIMEOUT" "${WRAP[@]}" "$E2E/$prog" "$@" \
		>"$out" 2>"$err"
	rc=$?
	t1=$(date +%s%N)
	secs=$(( (t1 - t0) / 1000000 ))
	secs=$(printf '%d.%03d' $((secs / 1000)) $((secs % 1000)))
	LAST_RC=$rc
	if [ $rc -eq 0 ]; then
		PASS=$((PASS + 1)); report "$name" PASS "$secs"
	elif [ $rc -eq 77 ]; then
		SKIPPED=$((SKIPPED + 1)); report "$name" SKIP "$secs" "$(tail -1 "$out" | tr -d '#')"
	elif [ -n "$xfail" ]; then
		XFAIL=$((XFAIL + 1)); report "$name" XFAIL "$secs" "exit $rc, tolerated"
		sed 's/^/#    | /' "$err" | tail -5
	else
		FAIL=$((FAIL + 1)); FAILED="$FAILED $name"
		local why="exit $rc"
		[ $rc -eq 124 ] && why="timeout after ${RGPU_TEST_TIMEOUT}s"
		[ $rc -ge 128 ] && [ $rc -ne 124 ] && why="killed by signal $((rc - 128))"
		[ $rc -eq 99 ] && why="valgrind errors"
		report "$name" FAIL "$secs" "($why)"
		sed 's/^/#    | /' "$err" | tail -15
	fi
	return 0
}

# Pass/fail from a check in this script rather than a program's exit code.
verdict() { # name ok(0/1) message
	if [ "$2" -eq 0 ]; then
		PASS=$((PASS + 1)); report "$1" PASS 0
	else
		FAIL=$((FAIL + 1)); FAILED="$FAILED $1"
		report "$1" FAIL 0 "($(echo "$3" | tr -s '\n\t ' ' '))"
	fi
}

daemons_alive() {
	local p ok=0
	for p in $DAEMON_PIDS; do
		kill -0 "$p" 2>/dev/null || ok=1
	done
	return $ok
}

suite() {
	run t_device "$ONE" -- t_device
	run t_device_2 "$TWO" -- t_device
	run t_vecadd "$ONE" -- t_vecadd
	run t_vecadd_dev1 "$TWO" -- T_DEVICE=1 t_vecadd
	run t_matmul "$ONE" -- t_matmul
	run t_struct "$ONE" -- t_struct
	run t_globals "$ONE" -- t_globals
	run t_streams "$ONE" -- t_streams
	run t_async "$ONE" -- t_async
	run t_memory "$ONE" -- t_memory
	run t_library "$ONE" -- t_library
	run t_library_ctx_first "$ONE" -- T_LIBRARY_CTX_FIRST=1 t_library
	run t_multi "$TWO" -- t_multi
	run t_errors "$ONE" -- t_errors
	run t_managed "$ONE" -- t_managed
	run t_umhint "$ONE" -- t_umhint
	run t_memops "$ONE" -- t_memops
	run t_uobj "$ONE" -- t_uobj
	run t_ctxevent "$ONE" -- t_ctxevent
	run t_memcpy2d "$ONE" -- t_memcpy2d
	run t_array "$ONE" -- t_array
	run t_graph "$ONE" -- t_graph
	run t_hostfn "$ONE" -- t_hostfn
	run t_hostfn_managed "$ONE" -- t_hostfn managed
	run t_hostmem_live "$ONE" -- t_hostmem_live
	run t_attrs "$ONE" -- t_attrs
	run t_tensormap "$ONE" -- t_tensormap
	run t_graph_nodes "$ONE" -- t_graph_nodes
	run t_graph_memop "$ONE" -- t_graph_memop
	run t_green "$ONE" -- t_green
	run t_module_managed "$ONE" -- t_module_managed
	run t_legacy_launch "$ONE" -- t_legacy_launch
	run t_graph_hostcopy "$ONE" -- t_graph_hostcopy
	run t_link "$ONE" -- t_link
	run t_shm_parallel "$TWO" -- t_shm_parallel
	# many threads on one connection (fewer rounds under valgrind: its
	# threads run one at a time); one thread's long synchronisation does
	# not hold up another's calls (replies routed by id, client/rpc.c)
	run t_threads "$ONE" -- T_ITERS=$([ ${#WRAP[@]} -gt 0 ] && echo 3 || echo 12) t_threads
	run t_sync_threads "$ONE" -- t_sync_threads
	# application memory (issue 10): VMM, shareable handles between two
	# processes, pools, 2D memsets; peer copies between two GPUs of one
	# server, and between two servers (from one rgpud to the other, and
	# through the client with RGPU_PEER_PATH=client); with GPU 0 of
	# each of two servers, their memory in distinct ranges (each server
	# told which of the client's it is), except where a sanitizer build's
	# workers cannot have rgpud's fixed ranges at all
	run t_appmem "$ONE" -- t_appmem
	run t_appmem_peer "127.0.0.1:$P1/0,127.0.0.1:$P1/1" -- T_APPMEM_PEER=1 t_appmem
	run t_appmem_2srv "$TWO" -- T_APPMEM_PEER=0 RGPU_STATS=1 T_APPMEM_PATH=server t_appmem
	run t_appmem_2srv_client "$TWO" -- T_APPMEM_PEER=0 RGPU_STATS=1 RGPU_PEER_PATH=client \
		T_APPMEM_PATH=client t_appmem
	run t_appmem_2srv_gpu0 "127.0.0.1:$P1/0,127.0.0.1:$P2/0" -- T_APPMEM_PEER=0 \
		T_APPMEM_DISTINCT=$([ "$DAEMON_BUILD" = "$top_builddir" ] && echo 1 || echo 0) t_appmem
	# CUDA IPC between two processes of a job on one server
	run t_ipc "$ONE" -- t_ipc
	# rgpu's NVML lists exactly the GPUs of RGPU_SERVERS
	run t_nvml "$ONE" -- T_NVML_LIB="$NVMLLIB" t_nvml
	run t_nvml_2srv "$TWO" -- T_NVML_LIB="$NVMLLIB" T_NVML_SAME=0 t_nvml
	run t_nvml_peer "127.0.0.1:$P1/0,127.0.0.1:$P1/1" -- T_NVML_LIB="$NVMLLIB" T_NVML_SAME=1 t_nvml
	# NVLink as a server's NVML reports it (a stand-in NVML on its library
	# path: the emulated GPUs' buses are 18 and 19): GPU 0's link 0 to GPU 1
	if [ -z "${P_NVL:-}" ] && [ -e "$FAKE_NVML_DIR/libnvidia-ml.so.1" ]; then
		DAEMON_ENV="LD_LIBRARY_PATH=$FAKE_NVML_DIR FAKE_NVML_LINKS=18.0=00000000:19:00.0/0" \
			start_daemon dnvl
		P_NVL=$PORT
	fi
	if [ -n "${P_NVL:-}" ]; then
		run t_nvml_nvlink "127.0.0.1:$P_NVL/0,127.0.0.1:$P_NVL/1" -- T_NVML_LIB="$NVMLLIB" \
			T_NVML_SAME=1 T_NVML_NVLINK=peer t_nvml
		run t_nvml_nvlink_absent "127.0.0.1:$P_NVL/0" -- T_NVML_LIB="$NVMLLIB" \
			T_NVML_NVLINK=absent t_nvml
	fi

	# RGPU_STATS=1: the program checks the round trips of its calls; its
	# own totals must be what the library prints at exit; off, nothing
	if want t_stats; then
		# (requests are coalesced on sockets; through the same-host
		# shared-memory queues each goes at once: t_stats_shmq)
		# (a 10 ms window: launches under valgrind come more than the
		# default 50 us apart, and each would start a burst of its own)
		run t_stats "$ONE" -- RGPU_STATS=1 RGPU_SHM_CALLS=0 RGPU_COALESCE_US=10000 t_stats
		if [ "$LAST_RC" -eq 0 ]; then
			local o=$LOGDIR/t_stats$SUFFIX mine line
			mine=$(sed -n 's/^COUNTERS //p' "$o.out")
			line=$(sed -n 's/^rgpu stats: \(calls=.*\)/\1/p' "$o.err")
			[ -n "$mine" ] && [ "$mine" = "$line" ] &&
				grep -q "^rgpu stats:   CTX_SYNC count=[1-9][0-9]* wait_us=" "$o.err" &&
				grep -q "^rgpu stats:   STREAM_SYNC answered locally=[1-9]" "$o.err"
			verdict "t_stats_line$SUFFIX" $? "program counted '$mine', the library printed '$line'"
		fi
		run t_stats_nocoalesce "$ONE" -- RGPU_STATS=1 RGPU_COALESCE_US=0 RGPU_SHM_CALLS=0 t_stats
		# (the same-host queues: once, not again in the TCP pass)
		[ -z "$SUFFIX" ] &&
			run t_stats_shmq "$ONE" -- RGPU_STATS=1 RGPU_TRANSPORT=local RGPU_SHM_CALLS=1 T_COALESCED=0 t_stats
		run t_stats_off "$ONE" -- T_STATS_OFF=1 t_stats
		if [ "$LAST_RC" -eq 0 ]; then
			! grep -q "rgpu stats" "$LOGDIR/t_stats_off$SUFFIX.err"
			verdict "t_stats_off_silent$SUFFIX" $? "a stats line without RGPU_STATS"
		fi
	fi
	# RGPU_TRACE: a failing call is named with its error, calls that
	# succeed only with "all" (with their time), nothing when off
	if want t_trace; then
		local tf=$LOGDIR/t_trace_errors$SUFFIX failed
		# the line the failing call must have: "FAILED name address error"
		trace_line() {
			sed -n 's/^FAILED \([^ ]*\) \([^ ]*\) \([^ ]*\)$/\1(dptr=\2) -> \3 ([0-9]*)/p' "$1"
		}
		run t_trace_errors "$ONE" -- RGPU_TRACE=errors T_TRACED=1 t_trace
		if [ "$LAST_RC" = 0 ]; then
			failed=$(trace_line "$tf.out")
			[ -n "$failed" ] && grep -q "^rgpu trace: \[[0-9]*\] $failed\$" "$tf.err" &&
				! grep -q "cuMemAlloc_v2\|cuNoSuchCall\|cuGetProcAddress" "$tf.err"
			verdict "t_trace_errors_named$SUFFIX" $? "the trace did not name '$failed' alone (see $tf.err)"
		fi
		tf=$LOGDIR/t_trace_all$SUFFIX
		run t_trace_all "$ONE" -- RGPU_TRACE=all T_TRACED=1 t_trace
		if [ "$LAST_RC" = 0 ]; then
			failed=$(trace_line "$tf.out")
			[ -n "$failed" ] &&
				grep -q "^rgpu trace: \[[0-9]*\] cuMemAlloc_v2(dptr=0x[0-9a-f]*, bytesize=0x1000) -> CUDA_SUCCESS (0) [0-9.]* us\$" "$tf.err" &&
				grep -q "^rgpu trace: \[[0-9]*\] $failed [0-9.]* us\$" "$tf.err"
			verdict "t_trace_all_listed$SUFFIX" $? "the trace did not list every call (see $tf.err)"
		fi
		run t_trace_off "$ONE" -- t_trace
		if [ "$LAST_RC" = 0 ]; then
			! grep -q "rgpu trace" "$LOGDIR/t_trace_off$SUFFIX.err"
			verdict "t_trace_off_silent$SUFFIX" $? "a trace line without RGPU_TRACE"
		fi
	fi

	# waits for the GPU spin first where RGPU_SYNC_SPIN_US says, but not
	# in a CU_CTX_SCHED_BLOCKING_SYNC context; by default none spins
	if want t_sync_spin; then
		run t_sync_spin "$ONE" -- RGPU_STATS=1 RGPU_SYNC_SPIN_US=1000000 T_SPIN=1 t_sync_spin
		run t_sync_spin_off "$ONE" -- RGPU_STATS=1 T_SPIN=0 t_sync_spin
	fi

	# several clients at once on one daemon (and both daemons)
	if want t_concurrent; then
		local i pids=() bad=0 t0 ms
		t0=$(date +%s%N)
		for i in 1 2 3 4; do
			RGPU_SERVERS=$ONE LD_LIBRARY_PATH=$CLIENTDIR timeout "$RGPU_TEST_TIMEOUT" \
				"${WRAP[@]}" "$E2E/t_vecadd" >"$LOGDIR/t_concurrent$SUFFIX-$i.out" \
				2>"$LOGDIR/t_concurrent$SUFFIX-$i.err" &
			pids+=($!)
		done
		RGPU_SERVERS=$TWO LD_LIBRARY_PATH=$CLIENTDIR timeout "$RGPU_TEST_TIMEOUT" \
			"${WRAP[@]}" "$E2E/t_multi" >"$LOGDIR/t_concurrent$SUFFIX-5.out" \
			2>"$LOGDIR/t_concurrent$SUFFIX-5.err" &
		pids+=($!)
		for i in "${pids[@]}"; do
			wait "$i" || bad=$((bad + 1))
		done
		ms=$(( ($(date +%s%N) - t0) / 1000000 ))
		if [ $bad -eq 0 ]; then
			PASS=$((PASS + 1)); report "t_concurrent$SUFFIX" PASS "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
		else
			FAIL=$((FAIL + 1)); FAILED="$FAILED t_concurrent$SUFFIX"
			report "t_concurrent$SUFFIX" FAIL 0 "($bad of 5 concurrent clients failed)"
			cat "$LOGDIR"/t_concurrent$SUFFIX-*.err | sed 's/^/#    | /' | tail -15
		fi
	fi

	# a client killed mid-copy: rgpud frees its session at once
	# (issue 16 item 8: the shared-memory wait spun for 50 s)
	if want t_killcopy; then
		local kout=$LOGDIR/t_killcopy$SUFFIX.out kpid waited=0 freed=1
		RGPU_SERVERS=$ONE LD_LIBRARY_PATH=$CLIENTDIR "$E2E/t_killcopy" >"$kout" \
			2>"$LOGDIR/t_killcopy$SUFFIX.err" &
		kpid=$!
		for _ in $(seq 1 100); do
			grep -q READY "$kout" && break
			sleep 0.1
		done
		sleep 0.2
		kill -STOP "$kpid" 2>/dev/null # rgpud now waits for it mid-copy
		sleep 0.5
		kill -KILL "$kpid" 2>/dev/null
		wait "$kpid" 2>/dev/null
		# the session's name in the log (over TCP it names no pid)
		local sname
		sname=$(sed -n "s/^rgpud\[[0-9]*\]: info: \(.*\): session opened by pid $kpid .*/\1/p" \
			"$LOGDIR/d1.log" | tail -1)
		while [ -n "$sname" ] && [ $waited -lt 30 ]; do
			if grep -qF "$sname: disconnected" "$LOGDIR/d1.log"; then
				freed=0
				break
			fi
			sleep 0.1
			waited=$((waited + 1))
		done
		verdict "t_killcopy$SUFFIX" $freed "the session of a client killed mid-copy was not freed within 3 s"
	fi

	# a kernel fault, then another client on the same rgpud
	if want t_fault; then
		local nf
		nf=$(grep -c "failed: CUDA_ERROR_ILLEGAL_ADDRESS" "$LOGDIR/d1.log")
		run t_fault "$ONE" -- t_fault
		run t_fault_then_vecadd "$ONE" -- t_vecadd
		# rgpud --log-level=debug names the request the fault failed
		[ "$(grep -c "failed: CUDA_ERROR_ILLEGAL_ADDRESS" "$LOGDIR/d1.log")" -gt "$nf" ]
		verdict "t_fault_logged$SUFFIX" $? "no new 'failed: CUDA_ERROR_ILLEGAL_ADDRESS' in d1.log"
	fi

	# no server: cuInit fails and the log names host:port
	if want t_noserver; then
		local closed
		closed=$(free_port)
		run t_noserver "127.0.0.1:$closed/0" -- t_noserver
		if [ "$LAST_RC" -eq 0 ]; then
			grep -q "127.0.0.1:$closed" "$LOGDIR/t_noserver$SUFFIX.err"
			verdict "t_noserver_log$SUFFIX" $? "stderr does not name 127.0.0.1:$closed"
		fi
	fi

	# the runtime API (static cudart): tolerated failure until the client
	# serves cuGetProcAddress and cudart's export tables
	# (not under valgrind: static cudart alone gives valgrind reports)
	if [ -x "$E2E/t_runtime" ] && [ -z "$SUFFIX" ]; then
		run t_runtime "$ONE" -- t_runtime
	fi
	# a __managed__ variable through cudart (both transports; not under
	# valgrind, as t_runtime)
	if [ -x "$E2E/t_runtime_managed" ] && [ "$SUFFIX" != _vg ]; then
		run t_runtime_managed "$ONE" -- t_runtime_managed
	fi
}

# first the same-host path (Unix socket, shared memory: the default for a
# server on this node), then the network path forced with RGPU_TRANSPORT=tcp
suite
echo "# --- again over TCP (RGPU_TRANSPORT=tcp)"
export RGPU_TRANSPORT=tcp
SUFFIX=_tcp
suite
SUFFIX=""
unset RGPU_TRANSPORT

# `rgpu status` outside Slurm against an open rgpud: the GPUs are listed
# whether munged runs or not (a credential when munge works, none
# otherwise, as the client does); what is wrong is said; --json always
# writes JSON to stdout
RGPU=$top_builddir/tools/rgpu
json_check() { # file python-expression-on-d
	"$PYTHON" -c 'import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(0 if eval("(" + sys.argv[2] + ")") else 1)' "$1" "$2" 2>>"$1.why"
}
if want t_rgpu_status && [ -x "$RGPU" ]; then
	o=$LOGDIR/t_rgpu_status
	env -u SLURM_JOB_ID -u RGPU_JOB_ID RGPU_SERVERS=$TWO "$RGPU" status >"$o.out" 2>&1
	rc=$?
	[ $rc -eq 0 ] &&
		grep -q "^0 .*127\.0\.0\.1:$P1 .* 0 *rgpu emulated device" "$o.out" &&
		grep -q "^1 .*127\.0\.0\.1:$P2 .* 1 *rgpu emulated device" "$o.out" &&
		! grep -qiE "unreachable|error|munge" "$o.out"
	verdict t_rgpu_status $? "exit $rc: $(tail -1 "$o.out")"

	env -u SLURM_JOB_ID -u RGPU_JOB_ID RGPU_SERVERS=$TWO "$RGPU" status --json \
		>"$o-json.out" 2>"$o-json.err"
	rc=$?
	[ $rc -eq 0 ] && json_check "$o-json.out" 'len(d["gpus"]) == 2 and
all(g["reachable"] and "error" not in g and g["name"].startswith("rgpu emulated device")
    for g in d["gpus"]) and d["gpus"][1]["port"] == '"$P2"
	verdict t_rgpu_status_json $? "exit $rc: $(head -c 300 "$o-json.out")"

	env -u RGPU_SERVERS "$RGPU" status --json >"$o-noservers.out" 2>"$o-noservers.err"
	rc=$?
	[ $rc -eq 1 ] && json_check "$o-noservers.out" 'd["gpus"] == [] and "RGPU_SERVERS" in d["error"]' &&
		grep -q "RGPU_SERVERS is not set" "$o-noservers.err"
	verdict t_rgpu_status_json_no_servers $? "exit $rc, stdout: $(head -c 200 "$o-noservers.out")"

	# a munge socket named but absent: the line says munge and the socket
	env -u SLURM_JOB_ID -u RGPU_JOB_ID RGPU_MUNGE_SOCKET=$LOGDIR/no-munged.socket \
		RGPU_SERVERS=$ONE "$RGPU" status >"$o-munge.out" 2>&1
	rc=$?
	[ $rc -eq 1 ] && grep -q "^0 .*error: munge.*no-munged.socket" "$o-munge.out"
	verdict t_rgpu_status_bad_munge_socket $? "exit $rc: $(tail -1 "$o-munge.out")"

	# nothing listening: the line names the server and why, JSON says so too
	closed=$(free_port)
	env -u SLURM_JOB_ID -u RGPU_JOB_ID RGPU_SERVERS=127.0.0.1:$closed/0 "$RGPU" status --json \
		>"$o-closed.out" 2>"$o-closed.err"
	rc=$?
	[ $rc -eq 1 ] && json_check "$o-closed.out" 'not d["gpus"][0]["reachable"] and
"refused" in d["gpus"][0]["error"].lower()'
	verdict t_rgpu_status_closed_port $? "exit $rc: $(head -c 300 "$o-closed.out")"
fi

# RGPU_TRANSPORT=verbs on a machine without RDMA: cuInit fails and says why
# (auto mode falls back to TCP: every run above)
if want t_verbs_required; then
	run t_verbs_required "$ONE" -- RGPU_TRANSPORT=verbs t_noserver
	if [ "$LAST_RC" -eq 0 ]; then
		grep -qi "verbs" "$LOGDIR/t_verbs_required.err"
		verdict t_verbs_required_log $? "stderr does not say why verbs is unavailable"
	fi
fi

# Peers that are not a working rgpud: one that accepts and never answers
# (a hung rgpud, another service), one that answers HTTP, and one that
# answers the handshake and then nothing (hung after it).  cuInit fails
# within RGPU_HANDSHAKE_TIMEOUT_MS and the log names the server and why.
# start_peer MODE -> PEER_PORT, PEER_PID
start_peer() {
	local pf=$LOGDIR/peer-$1.port
	rm -f "$pf"
	"$PYTHON" -c 'import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(8)
print(s.getsockname()[1], flush=True)
import struct
def exactly(c, n):
    b = b""
    while len(b) < n:
        k = c.recv(n - len(b))
        if not k:
            raise OSError("closed")
        b += k
    return b
held = []
while True:
    c, _ = s.accept()
    held.append(c)
    try:
        if sys.argv[1] == "foreign":
            c.recv(4096)
            c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        elif sys.argv[1] == "hung":
            # answers HELLO as rgpud does (one GPU), then never again
            magic, ver, op, flags, n, rid = struct.unpack("<IHHIIQ", exactly(c, 24))
            exactly(c, n)
            sid = b"hung-test\0"
            body = struct.pack("<iI", 0, len(sid)) + sid + struct.pack("<I", 1)
            c.sendall(struct.pack("<IHHIIQ", magic, ver, op, 1, len(body), rid) + body)
    except OSError:
        pass' "$1" >"$pf" 2>"$LOGDIR/peer-$1.err" &
	PEER_PID=$!
	for _ in $(seq 1 50); do
		PEER_PORT=$(head -1 "$pf" 2>/dev/null)
		[ -n "$PEER_PORT" ] && return 0
		sleep 0.1
	done
	stop_peer
	echo "FAIL: cannot start the $1 test peer"; exit 1
}
stop_peer() {
	kill "$PEER_PID" 2>/dev/null
	wait "$PEER_PID" 2>/dev/null
}
if want t_silent_peer; then
	start_peer silent
	t0=$(date +%s%N)
	run t_silent_peer "127.0.0.1:$PEER_PORT/0" -- RGPU_TRANSPORT=tcp RGPU_HANDSHAKE_TIMEOUT_MS=1000 t_noserver
	ms=$(( ($(date +%s%N) - t0) / 1000000 ))
	if [ "$LAST_RC" -eq 0 ]; then
		grep "127.0.0.1:$PEER_PORT" "$LOGDIR/t_silent_peer.err" | grep -q "no answer to the handshake within 1000 ms"
		verdict t_silent_peer_log $? "stderr does not name 127.0.0.1:$PEER_PORT and the missing answer"
		[ "$ms" -lt 5000 ]
		verdict t_silent_peer_bounded $? "cuInit took $ms ms with RGPU_HANDSHAKE_TIMEOUT_MS=1000"
	fi
	stop_peer
fi
if want t_foreign_peer; then
	start_peer foreign
	run t_foreign_peer "127.0.0.1:$PEER_PORT/0" -- RGPU_TRANSPORT=tcp RGPU_HANDSHAKE_TIMEOUT_MS=5000 t_noserver
	if [ "$LAST_RC" -eq 0 ]; then
		grep "127.0.0.1:$PEER_PORT" "$LOGDIR/t_foreign_peer.err" | grep -q "is not an rgpud"
		verdict t_foreign_peer_log $? "stderr does not say that 127.0.0.1:$PEER_PORT is not an rgpud"
		! grep -q "No such file or directory" "$LOGDIR/t_foreign_peer.err"
		verdict t_foreign_peer_no_stale_errno $? "a stale errno in the message"
	fi
	stop_peer
fi

if want t_hung_peer; then
	start_peer hung
	t0=$(date +%s%N)
	run t_hung_peer "127.0.0.1:$PEER_PORT/0" -- RGPU_TRANSPORT=tcp RGPU_HANDSHAKE_TIMEOUT_MS=1000 t_noserver
	ms=$(( ($(date +%s%N) - t0) / 1000000 ))
	if [ "$LAST_RC" -eq 0 ]; then
		grep "127.0.0.1:$PEER_PORT" "$LOGDIR/t_hung_peer.err" | grep -q "no answer in time"
		verdict t_hung_peer_log $? "stderr does not name 127.0.0.1:$PEER_PORT and the missing answer"
		[ "$ms" -lt 5000 ]
		verdict t_hung_peer_bounded $? "cuInit took $ms ms with RGPU_HANDSHAKE_TIMEOUT_MS=1000"
	fi
	stop_peer
fi

# bad client settings fail cuInit, naming the variable and what it takes
# (against a working server: nothing else is wrong)
if want t_bad_settings; then
	i=0
	for bad in RGPU_LOG_LEVEL=loud RGPU_CONNECT_TIMEOUT_MS=abc RGPU_CHUNK_KB=-5 \
		   RGPU_CHUNK_KB=99999 RGPU_HANDSHAKE_TIMEOUT_MS=0 RGPU_KEEPALIVE_S=1x \
		   RGPU_VA_BASE=0x1234 RGPU_WRITE_TRACKING=yes RGPU_TRANSPORT=udp; do
		i=$((i + 1))
		run "t_bad_setting_$i" "$ONE" -- "$bad" t_noserver
		if [ "$LAST_RC" -eq 0 ]; then
			grep -qF "$bad is not valid: expected" "$LOGDIR/t_bad_setting_$i.err"
			verdict "t_bad_setting_${i}_log" $? "stderr does not say why $bad is refused"
		fi
	done
	# and good values of the same are taken
	run t_good_settings "$ONE" -- RGPU_LOG_LEVEL=debug RGPU_CONNECT_TIMEOUT_MS=2000 \
		RGPU_CHUNK_KB=64 RGPU_HANDSHAKE_TIMEOUT_MS=3000 RGPU_KEEPALIVE_S=30 \
		RGPU_VA_BASE=0x500000000000 RGPU_WRITE_TRACKING=0 RGPU_TRANSPORT=tcp t_vecadd
fi

# a client killed mid-session: its worker frees what it held, and the
# daemon goes on serving
if want t_killed_client && [ -z "${RGPU_E2E_ONLY:-}" ]; then
	out=$LOGDIR/t_killed_client.out
	RGPU_SERVERS=$ONE LD_LIBRARY_PATH=$CLIENTDIR "$E2E/t_hold" >"$out" 2>&1 &
	hp=$!
	for i in $(seq 1 100); do
		grep -q held "$out" 2>/dev/null && break
		sleep 0.1
	done
	kill -KILL "$hp" 2>/dev/null
	wait "$hp" 2>/dev/null
	ok=1
	for i in $(seq 1 50); do
		# the worker logs what it freed when the connection drops
		if grep -q "67137536 bytes of device memory freed" "$LOGDIR/d1.log"; then
			ok=0
			break
		fi
		sleep 0.1
	done
	verdict t_killed_client $ok "rgpud did not report freeing the killed client's 64 MiB + 7 pages (see $LOGDIR/d1.log)"
	run t_killed_client_then_vecadd "$ONE" -- t_vecadd
fi

# the copy requests' failure paths and the cap on shared client memory,
# in raw frames over the same-host socket
if want t_copy_proto; then
	run t_copy_proto "" -- t_copy_proto "$P1"
fi
# wrapping sizes and a full host-region table (once: thousands of
# allocations are slow under valgrind)
if want t_sizes; then
	run t_sizes "$ONE" -- RGPU_TRANSPORT=auto t_sizes
fi

# raw-protocol abuse, not through the client (never under valgrind)
if want t_malformed; then
	run t_malformed "" -- t_malformed 127.0.0.1 "$P1"
	run t_malformed_then_vecadd "$ONE" -- t_vecadd
fi
# random requests of every kind: answered or dropped, never a hang, and no
# session worker may die of a signal
# the session worker over the raw protocol: deferred errors, stale
# functions, syncs overtaken, 200 KB of device printf, bad images
if want t_worker; then
	run t_worker "" -- t_worker 127.0.0.1 "$P1"
	run t_worker_then_vecadd "$ONE" -- t_vecadd
fi

# a lease's quota counts contexts, limits and globals (its own munged and
# rgpud --leases)
if want t_quota; then
	run t_quota "" -- t_quota "$RGPUD"
fi

# RGPUD_OP_STATS=1: a session that launched kernels says how many and how
# long their handling took
if want t_vecadd; then
	grep -qE "op stats: [0-9]+ requests, .*LAUNCH [0-9]+ x [0-9.]+ us" "$LOGDIR/d1.log"
	verdict t_op_stats $? "no op stats line with launches in $LOGDIR/d1.log"
fi
# over TCP, after a sync answered at once the worker spins for the
# client's next call (RGPUD_SPIN_US): t_sync_spin launches right after each
# of its syncs, so spins catch calls
if want t_sync_spin; then
	grep -qE "op stats: .*after syncs, [1-9][0-9]* spins caught the next call" "$LOGDIR/d1.log"
	verdict t_op_stats_spin $? "no spin after a sync caught a call in $LOGDIR/d1.log"
fi

if want t_fuzz; then
	run t_fuzz "" -- t_fuzz 127.0.0.1 "$P1" 3000
	! grep -q "died of signal" "$LOGDIR/d1.log"
	verdict t_fuzz_no_worker_crash $? "a session worker died (see $LOGDIR/d1.log)"
	run t_fuzz_then_vecadd "$ONE" -- t_vecadd
fi

if [ "${RGPU_VALGRIND:-0}" = 1 ]; then
	if command -v valgrind >/dev/null; then
		echo "# --- again with the client under valgrind"
		SUFFIX=_vg
		RGPU_TEST_TIMEOUT=$((RGPU_TEST_TIMEOUT * 5))
		WRAP=(valgrind -q --error-exitcode=99 --leak-check=full
		      --errors-for-leak-kinds=definite --track-origins=yes
		      --suppressions=/dev/null)
		export T_BUSY_MS=200
		suite
		unset T_BUSY_MS
		SUFFIX=""
		# the client's locking, checked: threads sharing a connection
		# under helgrind (over TCP: the copy path's own threads are the
		# same-host path's; without managed memory, whose coherence
		# fetches rewrite regions other threads read)
		WRAP=(valgrind -q --tool=helgrind --error-exitcode=99)
		run t_threads_helgrind "$ONE" -- T_THREADS=4 T_ITERS=2 T_MANAGED=0 RGPU_TRANSPORT=tcp t_threads
		WRAP=()
	else
		verdict valgrind_installed 1 "RGPU_VALGRIND=1 but valgrind is not installed"
	fi
fi

daemons_alive
verdict daemons_survived $? "an rgpud exited during the run (see $LOGDIR/d1.log, d2.log)"
for d in d1 d2; do
	if grep -qE 'AddressSanitizer|runtime error:|LeakSanitizer' "$LOGDIR/$d.log"; then
		verdict "rgpud_${d}_sanitizers" 1 "sanitizer report in $LOGDIR/$d.log"
	fi
done

echo "1..$NTAP"
echo "# e2e: $PASS passed, $FAIL failed, $XFAIL tolerated (xfail), $SKIPPED skipped; logs in $LOGDIR"
[ $FAIL -eq 0 ] || { echo "# failed:$FAILED"; exit 1; }
exit 0
