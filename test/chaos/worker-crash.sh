#!/bin/bash
# Chaos: a session worker that crashes (SIGSEGV) while other sessions hold
# device memory.  Its crash is logged with a backtrace (where, for a bug
# report), the parent frees its session, the other sessions go on, and new
# sessions are served.
set -u
. "$(dirname "$0")/../soak/lib.sh"
t_need_build
t_logdir chaos-crash
MIB=$((1 << 20))

children() { cat /proc/"$1"/task/*/children 2>/dev/null | tr ' ' '\n' | grep .; }
hold() { # NAME N SIZE: sessions held in the background
	local name=$1 n=$2 size=$3
	mkfifo "$LOGDIR/$name.in"
	"$SESS" hold 127.0.0.1 "$PORT" "$n" "$size" <"$LOGDIR/$name.in" >"$LOGDIR/$name.out" 2>&1 &
	T_PIDS="$T_PIDS $!"
	exec {fd}>"$LOGDIR/$name.in"
	eval "HOLDFD_$name=$fd"
	wait_until 30 grep -q "^held $n" "$LOGDIR/$name.out"
}

start_rgpud crash --open
D=$RGPUD_PID
t_check "one session holds 64 MiB" hold a 1 $((64 * MIB))
WA=$(children "$D" | head -1)
t_check "another holds 64 MiB" hold b 1 $((64 * MIB))
WB=$(children "$D" | grep -vx "$WA" | head -1)
echo "parent $D, workers: $WA (crashes), $WB"
kill -SEGV "$WA"
t_check "the crash is logged with its signal" \
	wait_until 10 grep -q "worker crashed: signal 11 (SIGSEGV)" "$LOGDIR/crash.log"
t_check "... and a backtrace through rgpud" grep -q "rgpud(+0x[0-9a-f]*)" "$LOGDIR/crash.log"
t_check "the parent frees the session" wait_until 10 grep -q "worker $WA died of signal 11" "$LOGDIR/crash.log"
t_check "the other session's worker goes on" kill -0 "$WB"
"$SESS" try 127.0.0.1 "$PORT" $((64 * MIB)) >"$LOGDIR/after.try" 2>&1
t_check "a new session is served" grep -q "^ok" "$LOGDIR/after.try"
stop_rgpud "$D"
kill -9 $WA $WB 2>/dev/null

echo "$FAILS failure(s)"
[ $FAILS -eq 0 ]
