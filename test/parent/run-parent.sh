#!/bin/bash
# The rgpud parent against hostile and careless clients (issue 16, parts of
# 14 and 15): starts `rgpud --emulated` on free loopback ports, with a
# private munged for credentials, and checks one behaviour per test line.
#
# It speaks TAP (make check runs it as test/parent/parent.tap through
# automake's TAP driver): one "ok"/"not ok" per check; checks that need root
# (other uids, workers dropping to them) or munged are "# SKIP" without
# them; "1..0 # SKIP" when rgpud or the emulated device is not built.
# Exit: 0 all passed, 1 a failure.
#
# Environment: top_builddir, top_srcdir (set by `make check`),
# RGPU_PARENT_LOGDIR (default ./parent-logs).
set -u
: "${top_builddir:=$(cd "$(dirname "$0")/../.." && pwd)}"
# RGPU_PARENT_DAEMON_BUILD: another build tree whose rgpud and emulated
# device are tested (a sanitizer build: test/run-all.sh)
DAEMON_BUILD=${RGPU_PARENT_DAEMON_BUILD:-$top_builddir}
RGPUD=$DAEMON_BUILD/daemon/rgpud
TP=$top_builddir/daemon/t_parent
EMULIB=$DAEMON_BUILD/emu/.libs/librgpu-emu.so
CLIENTLIB=$top_builddir/client/.libs/libcuda.so.1
LOGDIR=${RGPU_PARENT_LOGDIR:-$PWD/parent-logs}
for f in "$RGPUD" "$TP" "$EMULIB"; do
	[ -e "$f" ] || { echo "1..0 # SKIP $f not built"; exit 0; }
done
export RGPU_EMU_LIB=$EMULIB
mkdir -p "$LOGDIR"
rm -f "$LOGDIR"/*
TMP=$(mktemp -d /tmp/rgpu-parent.XXXXXX)
chmod 755 "$TMP"

pass=0 fail=0 skip=0 tapn=0
ok() { tapn=$((tapn + 1)); echo "ok $tapn - $1"; pass=$((pass + 1)); }
ko() {
	tapn=$((tapn + 1))
	echo "not ok $tapn - $1"
	[ -n "${2:-}" ] && printf '%s\n' "$2" | sed 's/^/#   /'
	fail=$((fail + 1))
}
sk() { tapn=$((tapn + 1)); echo "ok $tapn - $1 # SKIP ${2:-}"; skip=$((skip + 1)); }
check() { # name, condition (evaluated), detail on failure
	if eval "$2"; then ok "$1"; else ko "$1" "${3:-}"; fi
}

. "$(dirname "$0")/../lib-daemon.sh"

stop_rgpud() {
	kill "$1" 2>/dev/null
	wait "$1" 2>/dev/null
}
val() { sed -n "s/^$1 //p" "$2" | head -1; }
workers_of() { cat /proc/"$1"/task/*/children 2>/dev/null; }

# ---- a private munged (as test/lease/test_lease.c does) ----
HAVE_MUNGE=0
start_munged && HAVE_MUNGE=1
M="RGPU_MUNGE_SOCKET=$TMP/munge.socket"
ROOT=0
[ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null && ROOT=1
# as another uid (no passwd entry needed: munge encodes the uid)
as_uid() { local u=$1; shift; setpriv --reuid="$u" --regid="$u" --clear-groups "$@"; }

# ---- 16.3: deny by default ----
if start_rgpud default; then
	"$TP" hello 127.0.0.1 "$PORT" >"$LOGDIR/default.out" 2>&1
	check t_default_refuses_without_credential \
		'[ "$(val status "$LOGDIR/default.out")" = 100002 ] && grep -q "requires a munge credential" "$LOGDIR/default.out"' \
		"$(cat "$LOGDIR/default.out")"
	check t_default_refusal_logged 'grep -q "refused.*requires a munge credential" "$LOG"'
	if [ -e "$CLIENTLIB" ]; then
		env RGPU_SERVERS="127.0.0.1:$PORT" RGPU_TRANSPORT=tcp "$TP" cuinit "$CLIENTLIB" \
			>"$LOGDIR/default-cuinit.out" 2>&1
		check t_default_cuinit_fails_and_says_why \
			'! grep -q "^cuinit 0$" "$LOGDIR/default-cuinit.out" && grep -q "requires a munge credential" "$LOGDIR/default-cuinit.out"' \
			"$(cat "$LOGDIR/default-cuinit.out")"
	else
		sk t_default_cuinit_fails_and_says_why "client library not built"
	fi
	stop_rgpud "$PID"
else
	ko t_default_starts "$(tail -3 "$LOG")"
fi
if start_rgpud open --open; then
	"$TP" hello 127.0.0.1 "$PORT" >"$LOGDIR/open.out" 2>&1
	check t_open_serves_without_credential '[ "$(val status "$LOGDIR/open.out")" = 0 ]' \
		"$(cat "$LOGDIR/open.out")"
	check t_open_loopback_no_warning '! grep -q "anyone who can reach" "$LOG"'
	stop_rgpud "$PID"
fi
# --open beyond loopback is said in the log
P2=$(free_port)
timeout 2 "$RGPUD" --emulated --open --listen "0.0.0.0:$P2" >"$LOGDIR/open-any.log" 2>&1
check t_open_beyond_loopback_warns 'grep -q "warn.*--open on 0.0.0.0.*without authentication" "$LOGDIR/open-any.log"'
"$RGPUD" --emulated --open --leases --listen "127.0.0.1:$P2" >"$LOGDIR/open-leases.log" 2>&1
rc=$?
check t_open_and_leases_refused '[ $rc = 2 ] && grep -q "exclude each other" "$LOGDIR/open-leases.log"'

if [ "$HAVE_MUNGE" = 1 ] && [ "$ROOT" = 1 ]; then
	export RGPU_MUNGE_SOCKET=$TMP/munge.socket
	if start_rgpud allow --allow-users=54321; then
		"$TP" hello 127.0.0.1 "$PORT" cred >"$LOGDIR/allow-root.out" 2>&1
		check t_allow_root_served '[ "$(val status "$LOGDIR/allow-root.out")" = 0 ]' \
			"$(cat "$LOGDIR/allow-root.out")"
		as_uid 54321 "$TP" hello 127.0.0.1 "$PORT" cred >"$LOGDIR/allow-user.out" 2>&1
		check t_allowed_user_served '[ "$(val status "$LOGDIR/allow-user.out")" = 0 ]' \
			"$(cat "$LOGDIR/allow-user.out")"
		as_uid 54322 "$TP" hello 127.0.0.1 "$PORT" cred >"$LOGDIR/allow-other.out" 2>&1
		check t_other_user_refused \
			'[ "$(val status "$LOGDIR/allow-other.out")" = 100002 ] && grep -q "uid 54322 is not allowed" "$LOGDIR/allow-other.out"' \
			"$(cat "$LOGDIR/allow-other.out")"
		stop_rgpud "$PID"
	fi
	unset RGPU_MUNGE_SOCKET
else
	sk t_allowed_user_served "needs root and munged"
	sk t_other_user_refused "needs root and munged"
fi

# ---- 16.1 quota against huge sizes; 16.10 LEASE_LIST; 16.7 restart ----
if [ "$HAVE_MUNGE" = 1 ]; then
	export RGPU_MUNGE_SOCKET=$TMP/munge.socket
	mkdir -p "$TMP/state"
	if start_rgpud leases --leases --ctx-reserve=512M --state-dir="$TMP/state" --slurm-user="$(id -u)"; then
		LPORT=$PORT LPID=$PID
		"$TP" grant 127.0.0.1 "$PORT" 4242 "$(id -u)" 0 $((1 << 30)) 0 >"$LOGDIR/grant.out" 2>&1
		check t_lease_granted '[ "$(val status "$LOGDIR/grant.out")" = 0 ]' "$(cat "$LOGDIR/grant.out")"
		SLURM_JOB_ID=4242 "$TP" quota 127.0.0.1 "$PORT" 0x8000000000000000 0xffffffffffffffff \
			0xffffffffc0000000 $((768 << 20)) $((512 << 20)) >"$LOGDIR/quota.out" 2>&1
		check t_quota_refuses_2pow63 'grep -q "^alloc 0x8000000000000000 2$" "$LOGDIR/quota.out"' "$(cat "$LOGDIR/quota.out")"
		check t_quota_refuses_u64max 'grep -q "^alloc 0xffffffffffffffff 2$" "$LOGDIR/quota.out"'
		check t_quota_refuses_overflowing 'grep -q "^alloc 0xffffffffc0000000 2$" "$LOGDIR/quota.out"'
		check t_quota_admits_within 'grep -q "^alloc $((768 << 20)) 0$" "$LOGDIR/quota.out"'
		check t_quota_refuses_beyond 'grep -q "^alloc $((512 << 20)) 2$" "$LOGDIR/quota.out"'
		# LEASE_LIST's used counts the session's context too (the
		# --ctx-reserve, 512 MiB: every context is charged to the lease)
		CTXR=$((512 << 20))
		check t_quota_lease_list_true_usage '[ "$(val used "$LOGDIR/quota.out")" = $(((768 << 20) + CTXR)) ]' \
			"used $(val used "$LOGDIR/quota.out")"

		# 16.7: SIGKILL of the parent during a session
		SLURM_JOB_ID=4242 "$TP" hold 127.0.0.1 "$PORT" $((768 << 20)) >"$LOGDIR/hold.out" 2>&1 &
		HOLD=$!
		for _ in $(seq 100); do grep -q held "$LOGDIR/hold.out" && break; sleep 0.05; done
		W=$(workers_of "$LPID")
		kill -9 "$LPID"
		wait "$LPID" 2>/dev/null
		gone=1
		for _ in $(seq 50); do
			gone=1
			for w in $W; do kill -0 "$w" 2>/dev/null && gone=0; done
			[ $gone = 1 ] && break
			sleep 0.1
		done
		check t_sigkill_parent_ends_workers '[ -n "$W" ] && [ $gone = 1 ]' "workers: $W"
		wait "$HOLD" 2>/dev/null
		check t_sigkill_parent_closes_sessions 'grep -q "^closed$" "$LOGDIR/hold.out"'
		PIDS="$PIDS"
		"$RGPUD" --emulated --listen "127.0.0.1:$LPORT" --leases --ctx-reserve=512M --state-dir="$TMP/state" \
			--slurm-user="$(id -u)" >"$LOGDIR/leases-restarted.log" 2>&1 &
		LPID=$!
		PIDS="$PIDS $LPID"
		for _ in $(seq 100); do grep -q serving "$LOGDIR/leases-restarted.log" 2>/dev/null && break; sleep 0.05; done
		SLURM_JOB_ID=4242 "$TP" quota 127.0.0.1 "$LPORT" $((768 << 20)) $((512 << 20)) \
			>"$LOGDIR/quota2.out" 2>&1
		check t_restart_quota_not_spent_twice \
			'grep -q "^alloc $((768 << 20)) 0$" "$LOGDIR/quota2.out" && grep -q "^alloc $((512 << 20)) 2$" "$LOGDIR/quota2.out" && [ "$(val used "$LOGDIR/quota2.out")" = $(((768 << 20) + CTXR)) ]' \
			"$(cat "$LOGDIR/quota2.out")"
		stop_rgpud "$LPID"
	else
		ko t_leases_starts "$(tail -3 "$LOG")"
	fi

	# 16.10: a LEASE_LIST reply over 256 KiB (10,000 leases)
	mkdir -p "$TMP/state2"
	python3 - "$TMP/state2/leases.json" <<'EOF'
import json, sys
json.dump({"version": 1, "leases": [{"job_id": i + 1, "uid": 1000 if i < 9999 else 1001,
	"gpu": 0, "mem_limit": 1, "expires": 0} for i in range(10000)]}, open(sys.argv[1], "w"))
EOF
	if start_rgpud biglist --leases --state-dir="$TMP/state2"; then
		"$TP" list 127.0.0.1 "$PORT" >"$LOGDIR/biglist.out" 2>&1
		check t_lease_list_over_256k \
			'[ "$(val leases "$LOGDIR/biglist.out")" = 10000 ] && [ "$(val reply_bytes "$LOGDIR/biglist.out")" -gt 262144 ]' \
			"$(cat "$LOGDIR/biglist.out")"
		if [ "$ROOT" = 1 ]; then
			as_uid 1000 env SLURM_JOB_ID=7 "$TP" list 127.0.0.1 "$PORT" >"$LOGDIR/list-user.out" 2>&1
			check t_lease_list_user_sees_own_only '[ "$(val leases "$LOGDIR/list-user.out")" = 9999 ]' \
				"$(cat "$LOGDIR/list-user.out")"
			as_uid 1001 env SLURM_JOB_ID=10000 "$TP" list 127.0.0.1 "$PORT" >"$LOGDIR/list-other.out" 2>&1
			check t_lease_list_other_user_sees_own_only '[ "$(val leases "$LOGDIR/list-other.out")" = 1 ]' \
				"$(cat "$LOGDIR/list-other.out")"
			# another uid's job: refused before a worker is spawned
			nw=$(grep -c "served by worker" "$LOG")
			as_uid 1001 env SLURM_JOB_ID=5 "$TP" hello 127.0.0.1 "$PORT" cred >"$LOGDIR/otherjob.out" 2>&1
			sleep 0.2
			check t_other_uids_job_refused_before_worker \
				'[ "$(val status "$LOGDIR/otherjob.out")" = 100002 ] && [ "$(grep -c "served by worker" "$LOG")" = "$nw" ]' \
				"$(cat "$LOGDIR/otherjob.out")"
		fi
		stop_rgpud "$PID"
	fi

	# 15.4: --daemon --leases expires leases
	mkdir -p "$TMP/state3"
	P3=$(free_port)
	"$RGPUD" --emulated --daemon --pidfile="$TMP/d.pid" --listen "127.0.0.1:$P3" --leases \
		--state-dir="$TMP/state3" --slurm-user="$(id -u)" --lease-check-interval=1 \
		--log-level debug >"$LOGDIR/daemon.log" 2>&1
	for _ in $(seq 100); do [ -s "$TMP/d.pid" ] && break; sleep 0.05; done
	DPID=$(cat "$TMP/d.pid" 2>/dev/null)
	PIDS="$PIDS $DPID"
	"$TP" grant 127.0.0.1 "$P3" 99 "$(id -u)" 0 $((1 << 30)) $(( $(date +%s) + 2 )) >"$LOGDIR/dgrant.out" 2>&1
	sleep 4
	"$TP" list 127.0.0.1 "$P3" >"$LOGDIR/dlist.out" 2>&1
	check t_daemon_expires_leases \
		'[ "$(val status "$LOGDIR/dgrant.out")" = 0 ] && [ "$(val leases "$LOGDIR/dlist.out")" = 0 ] && grep -q "expired" "$LOGDIR/daemon.log"' \
		"$(cat "$LOGDIR/dgrant.out" "$LOGDIR/dlist.out")"
	kill "$DPID" 2>/dev/null
	unset RGPU_MUNGE_SOCKET
else
	sk t_quota_refuses_2pow63 "munged not found"
	sk t_restart_quota_not_spent_twice "munged not found"
	sk t_daemon_expires_leases "munged not found"
fi

# ---- 16.4: bounded resources before authentication ----
if start_rgpud silent --open --hello-timeout=2 --max-pending-per-host=64; then
	# from 127.0.0.2: the per-host cap must not shut out other hosts
	T_PARENT_SRC=127.0.0.2 "$TP" silent 127.0.0.1 "$PORT" 200 6 >"$LOGDIR/silent.out" 2>&1 &
	SIL=$!
	for _ in $(seq 100); do grep -q open_after_connect "$LOGDIR/silent.out" && break; sleep 0.05; done
	threads=$(awk '/^Threads:/ {print $2}' /proc/"$PID"/status)
	rss=$(awk '/^VmRSS:/ {print $2}' /proc/"$PID"/status)
	"$TP" hello 127.0.0.1 "$PORT" >"$LOGDIR/silent-hello.out" 2>&1
	wait "$SIL"
	check t_silent_connections_capped_per_host '[ "$(val open_after_connect "$LOGDIR/silent.out")" -le 64 ]' \
		"$(cat "$LOGDIR/silent.out")"
	check t_silent_connections_no_thread_each '[ "$threads" -le 4 ]' "threads $threads"
	check t_silent_connections_bounded_memory '[ "$rss" -lt 65536 ]' "rss ${rss} kB"
	check t_silent_connections_closed_by_deadline \
		'[ "$(val closed_by_server "$LOGDIR/silent.out")" = "$(val open_after_connect "$LOGDIR/silent.out")" ]' \
		"$(cat "$LOGDIR/silent.out")"
	check t_served_while_flooded '[ "$(val status "$LOGDIR/silent-hello.out")" = 0 ]'
	"$TP" bighello 127.0.0.1 "$PORT" >"$LOGDIR/bighello.out" 2>&1
	check t_hello_size_capped '[ "$(val dropped "$LOGDIR/bighello.out")" = 1 ] && grep -q "HELLO too long" "$LOG"'
	# 16.9: requests right behind HELLO reach the worker
	"$TP" pipeline 127.0.0.1 "$PORT" >"$LOGDIR/pipeline.out" 2>&1
	check t_pipelined_requests_behind_hello '[ "$(val replies "$LOGDIR/pipeline.out")" = 2 ]' \
		"$(cat "$LOGDIR/pipeline.out")"
	stop_rgpud "$PID"
fi
# EMFILE: accept() without descriptors must not spin
if start_rgpud emfile --open; then
	prlimit --pid "$PID" --nofile=12:12 2>/dev/null
	# the connections stay while the CPU time is measured: accept() keeps failing
	"$TP" silent 127.0.0.1 "$PORT" 30 4 >/dev/null 2>&1 &
	S=$!
	sleep 1
	t0=$(awk '{print $14 + $15}' /proc/"$PID"/stat)
	sleep 2
	t1=$(awk '{print $14 + $15}' /proc/"$PID"/stat)
	wait "$S"
	n=$(grep -c "accept:" "$LOG")
	check t_emfile_no_spin '[ $((t1 - t0)) -lt 20 ] && [ "$n" -le 2 ] && grep -q "Too many open files: not accepting for now" "$LOG"' \
		"cpu ticks $((t1 - t0)), $n accept lines"
	stop_rgpud "$PID"
fi

# ---- 16.2: the same-host socket ----
if [ "$ROOT" = 1 ]; then
	SP=$(free_port)
	as_uid 54323 "$TP" squat "$SP" 6 >"$LOGDIR/squat.out" 2>&1 &
	SQ=$!
	for _ in $(seq 100); do grep -q squatting "$LOGDIR/squat.out" && break; sleep 0.05; done
	"$RGPUD" --emulated --open --listen "127.0.0.1:$SP" >"$LOGDIR/squatted.log" 2>&1
	rc=$?
	check t_rgpud_refuses_squatted_socket '[ $rc = 1 ] && grep -q "another process holds that name" "$LOGDIR/squatted.log"' \
		"$(cat "$LOGDIR/squatted.log")"
	if [ -e "$CLIENTLIB" ] && [ "$HAVE_MUNGE" = 1 ]; then
		env RGPU_MUNGE_SOCKET="$TMP/munge.socket" RGPU_SERVERS="127.0.0.1:$SP" RGPU_LOG_LEVEL=info \
			"$TP" cuinit "$CLIENTLIB" >"$LOGDIR/squat-client.out" 2>&1
	fi
	wait "$SQ"
	check t_squatter_gets_no_credential '[ "$(val squat_cred "$LOGDIR/squat.out")" = 0 ] && [ "$(val squat_bytes "$LOGDIR/squat.out")" = 0 ]' \
		"$(cat "$LOGDIR/squat.out")"
	if [ -e "$LOGDIR/squat-client.out" ]; then
		check t_client_names_the_squatter 'grep -q "held by uid 54323" "$LOGDIR/squat-client.out"' \
			"$(cat "$LOGDIR/squat-client.out")"
	fi
	# 16.6: a worker runs as the uid it serves (same-host: SO_PEERCRED)
	if start_rgpud drop --open; then
		as_uid 54324 "$TP" hold local "$PORT" 4096 >"$LOGDIR/drop.out" 2>&1 &
		H=$!
		for _ in $(seq 100); do grep -q held "$LOGDIR/drop.out" && break; sleep 0.05; done
		W=$(workers_of "$PID" | awk '{print $1}')
		wuid=$(awk '/^Uid:/ {print $2 "," $3 "," $4}' /proc/"$W"/status 2>/dev/null)
		check t_worker_runs_as_client_uid '[ "$wuid" = "54324,54324,54324" ]' "worker $W uid $wuid"
		check t_worker_not_dumpable '[ "$(stat -c %u /proc/"$W"/mem 2>/dev/null)" = 0 ]'
		stop_rgpud "$PID"
		wait "$H" 2>/dev/null
	fi
	# the same-host shared-memory path with a worker that dropped root
	# (it opens the client's /proc/PID/fd as the client's uid)
	E2E=$top_builddir/test/e2e
	if [ -x "$E2E/t_memory" ] && [ -e "$CLIENTLIB" ] && start_rgpud drop-shm --open; then
		(cd "$TMP" && as_uid 54325 env RGPU_SERVERS="127.0.0.1:$PORT" RGPU_TRANSPORT=local \
			RGPU_LOG_LEVEL=info LD_LIBRARY_PATH="$(dirname "$CLIENTLIB")" "$E2E/t_memory") \
			>"$LOGDIR/drop-shm.out" 2>&1
		rc=$?
		check t_dropped_worker_same_host_shared_memory \
			'[ $rc = 0 ] && grep -q "shared memory" "$LOGDIR/drop-shm.out" && grep -q "worker runs as uid 54325" "$LOG"' \
			"rc $rc: $(tail -3 "$LOGDIR/drop-shm.out")"
		stop_rgpud "$PID"
	else
		sk t_dropped_worker_same_host_shared_memory "e2e programs or client not built"
	fi
else
	sk t_squatter_gets_no_credential "needs root"
	sk t_worker_runs_as_client_uid "needs root"
fi

# ---- 14.2: the probe's real error ----
P4=$(free_port)
RGPU_EMU_DEVICES=99 "$RGPUD" --emulated --listen "127.0.0.1:$P4" >"$LOGDIR/probe-emu.log" 2>&1
check t_probe_error_emulated 'grep -q "cuInit failed" "$LOGDIR/probe-emu.log" && ! grep -q "reports no GPUs" "$LOGDIR/probe-emu.log"' \
	"$(cat "$LOGDIR/probe-emu.log")"
"$RGPUD" --driver=/nonexistent/libcuda.so.1 --listen "127.0.0.1:$P4" >"$LOGDIR/probe-nodrv.log" 2>&1
check t_probe_error_no_driver 'grep -q "cannot load CUDA driver /nonexistent/libcuda.so.1" "$LOGDIR/probe-nodrv.log"' \
	"$(cat "$LOGDIR/probe-nodrv.log")"

# no sanitizer report from any rgpud (parent or worker)
if grep -lE 'AddressSanitizer|runtime error:|LeakSanitizer' "$LOGDIR"/*.log >/dev/null 2>&1; then
	ko rgpud_sanitizers "$(grep -lE 'AddressSanitizer|runtime error:|LeakSanitizer' "$LOGDIR"/*.log | tr '\n' ' ')"
else
	ok rgpud_sanitizers
fi

echo "1..$tapn"
echo "# parent: $pass passed, $fail failed, $skip skipped; logs in $LOGDIR"
[ "$fail" = 0 ] || exit 1
exit 0
