#!/bin/bash
# Chaos: SIGKILL of the rgpud parent while sessions hold device memory, then
# a restart on the same port (issue 16, item 7).
#  open mode:  the killed parent's workers end (their memory is freed with
#              them), their clients see the sessions close, and the
#              restarted rgpud serves new sessions.
#  leases:     (with a private munged) a job holding most of its quota when
#              the parent dies can, after the restart, allocate that much
#              again only because the old worker and its memory are gone:
#              the job never holds more than its quota on the device, and
#              the lease still refuses what is over it.
# Expected to fail (XFAIL in test/Makefile.am) until workers die with their
# parent.
set -u
. "$(dirname "$0")/../soak/lib.sh"
t_need_build
need_metrics # (the lease view comes from the metrics endpoint)
t_logdir chaos-kill
MIB=$((1 << 20))

children() { cat /proc/"$1"/task/*/children 2>/dev/null; }
all_gone() { local p; for p in "$@"; do kill -0 "$p" 2>/dev/null && return 1; done; return 0; }
hold() { # NAME N SIZE [env...]: sessions held in the background until close_hold NAME
	local name=$1 n=$2 size=$3
	shift 3
	mkfifo "$LOGDIR/$name.in"
	env "$@" "$SESS" hold 127.0.0.1 "$PORT" "$n" "$size" <"$LOGDIR/$name.in" >"$LOGDIR/$name.out" 2>&1 &
	eval "HOLD_$name=$!"
	T_PIDS="$T_PIDS $!"
	exec {fd}>"$LOGDIR/$name.in"
	eval "HOLDFD_$name=$fd"
	wait_until 30 grep -q "^held $n" "$LOGDIR/$name.out"
}
metric() {
	curl -sS -m 10 "http://127.0.0.1:$MPORT/metrics" |
		awk -v k="$1" '/^[^#]/ { s = $0; sub(/ [^ ]*$/, "", s); if (s == k) print $NF }'
}

# ---- open mode
MPORT=$(free_port)
start_rgpud open --open --metrics="127.0.0.1:$MPORT"
D=$RGPUD_PID
t_check "open: two sessions hold 64 MiB each" hold a 2 $((64 * MIB))
W=$(children "$D")
echo "parent $D, workers: $W"
kill -9 "$D"
{ wait "$D"; } 2>/dev/null
t_check "open: the workers end with their parent" wait_until 10 all_gone $W
t_check "open: their clients see the sessions end" wait_until 10 grep -q "^lost 2" "$LOGDIR/a.out"
KEEP_PORT=1 start_rgpud open --open --metrics="127.0.0.1:$MPORT"
D=$RGPUD_PID
"$SESS" try 127.0.0.1 "$PORT" $((64 * MIB)) >"$LOGDIR/open-after.try" 2>&1
t_check "open: the restarted rgpud serves a new session" grep -q "^ok" "$LOGDIR/open-after.try"
stop_rgpud "$D"
all_gone $W || kill -9 $W 2>/dev/null

# ---- leases: the quota is not spent twice
if ! start_munged; then
	echo "munged not available: the lease part is skipped"
else
	ST=$LOGDIR/state
	unset KEEP_PORT
	MPORT=$(free_port)
	start_rgpud leases --leases --ctx-reserve=512M --state-dir="$ST" --metrics="127.0.0.1:$MPORT"
	D=$RGPUD_PID
	RGPU_SESSIONS_CRED=1 "$SESS" grant 127.0.0.1 "$PORT" 77 0 0 $((64 * MIB)) >"$LOGDIR/grant.out" 2>&1
	t_check "leases: job 77 gets a 64 MiB lease" grep -q "status 0" "$LOGDIR/grant.out"
	t_check "leases: job 77 holds 48 MiB" hold b 1 $((48 * MIB)) SLURM_JOB_ID=77 RGPU_SESSIONS_CRED=1
	W=$(children "$D")
	kill -9 "$D"
	{ wait "$D"; } 2>/dev/null
	KEEP_PORT=1 start_rgpud leases --leases --ctx-reserve=512M --state-dir="$ST" --metrics="127.0.0.1:$MPORT"
	D=$RGPUD_PID
	t_check "leases: the lease survives the restart" [ "$(metric rgpud_leases)" = 1 ]
	t_check "leases: the old worker is gone (its 48 MiB freed)" wait_until 10 all_gone $W
	t_check "leases: job 77 holds 48 MiB again after the restart" \
		hold c 1 $((48 * MIB)) SLURM_JOB_ID=77 RGPU_SESSIONS_CRED=1
	old=0
	all_gone $W || old=48
	t_check "leases: job 77 holds at most its quota on the device ($old + 48 MiB <= 64 MiB)" \
		[ $((old + 48)) -le 64 ]
	SLURM_JOB_ID=77 RGPU_SESSIONS_CRED=1 "$SESS" try 127.0.0.1 "$PORT" $((32 * MIB)) \
		>"$LOGDIR/over.try" 2>&1
	t_check "leases: 32 MiB more is over the quota and refused" grep -q "^refused" "$LOGDIR/over.try"
	# (the lease is charged the session's context too: the 512 MiB
	# --ctx-reserve, which a slice holds besides its quota)
	t_check "leases: the lease's use is 48 MiB and one context" \
		[ "$(metric 'rgpud_lease_used_bytes{gpu="0",slurm_job="77",uid="0"}')" = $((48 * MIB + 512 * MIB)) ]
	stop_rgpud "$D"
	all_gone $W || kill -9 $W 2>/dev/null
fi

echo "$FAILS failure(s)"
[ $FAILS -eq 0 ]
