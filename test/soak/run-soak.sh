#!/bin/bash
# Soak: many sessions opened and closed, and many at once, against one
# rgpud --emulated on loopback; its parent must not grow (threads,
# descriptors, resident memory) and its metrics must add up.
#
#   SOAK_SESSIONS   sessions opened and closed one batch after another
#                   (default 1500: the CI run, well under a minute on two
#                   cores; the recorded run uses 10000)
#   SOAK_BATCH      sessions per batch in that phase (default 16)
#   SOAK_AT_ONCE    sessions open at the same time in the second phase
#                   (default 256), done SOAK_ROUNDS times (default 3)
#   SOAK_SIZE       device memory each session allocates (default 1 MiB)
#   SOAK_RSS_SLACK_KB  allowed growth of the parent's resident memory over
#                   phase 1 (default 2048)
#   SOAK_RSS_PEAK_SLACK_KB  and over the rounds of phase 2 after the held
#                   one (default 4096: after peaks of 256 threads glibc's
#                   arenas wander within about 2 MiB, trimmed now and then;
#                   20 rounds stayed within 7.3-9.5 MiB, see
#                   docs/soak-chaos-results.md)
# Figures go to stdout and soak-logs/figures.txt.  Bounded: every step
# has a timeout, and the test stops rgpud when it ends.
set -u
. "$(dirname "$0")/lib.sh"
t_need_build
t_logdir soak
: "${SOAK_SESSIONS:=1500}" "${SOAK_BATCH:=16}" "${SOAK_AT_ONCE:=256}" "${SOAK_ROUNDS:=3}"
: "${SOAK_SIZE:=1048576}" "${SOAK_RSS_SLACK_KB:=2048}" "${SOAK_RSS_PEAK_SLACK_KB:=4096}"
FIG=$LOGDIR/figures.txt
fig() { echo "$*" | tee -a "$FIG"; }

# the emulated device has one memory pool per device shared by every
# session (as a GPU does), and each session's context costs 64 MiB of it:
# SOAK_AT_ONCE sessions need more than the default 16 GiB
export RGPU_EMU_MEM=${RGPU_EMU_MEM:-64G}

# the client side holds SOAK_AT_ONCE connections, the parent a thread and
# a control socket per session
ulimit -n 4096 2>/dev/null || ulimit -n "$(ulimit -Hn)"

METRICS=""
if have_metrics; then
	MPORT=$(free_port)
	start_rgpud d --open --metrics="127.0.0.1:$MPORT"
	METRICS=http://127.0.0.1:$MPORT/metrics
else
	start_rgpud d --open # built without libmicrohttpd: no metrics checks
fi
D=$RGPUD_PID
metric() {
	curl -sS -m 10 "$METRICS" | awk -v k="$1" '/^[^#]/ { s = $0; sub(/ [^ ]*$/, "", s); if (s == k) print $NF }'
}
settled() { # no worker left, only the accept loop and the metrics thread
	[ "$(proc_children "$D")" = 0 ] && [ "$(proc_threads "$D")" -le "$BASE_THREADS" ]
}
snapshot() { # label
	fig "$1: threads $(proc_threads "$D"), fds $(proc_fds "$D"), rss $(proc_rss_kb "$D") KiB, workers $(proc_children "$D")"
}

fig "soak $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -n): $(nproc) CPUs, $(awk '/MemTotal/ {print int($2/1024) " MiB"}' /proc/meminfo)"
fig "rgpud $("$RGPUD" --version | head -1), emulated device, loopback TCP"
snapshot "start"
BASE_THREADS=$(proc_threads "$D")

# warm-up: the parent's allocator arenas and thread stacks reach their
# working size before the baseline is taken
"$SESS" cycle 127.0.0.1 "$PORT" "$SOAK_AT_ONCE" "$SOAK_AT_ONCE" "$SOAK_SIZE" >"$LOGDIR/warmup.out" 2>&1 ||
	t_fail "warm-up sessions: $(tail -3 "$LOGDIR/warmup.out")"
wait_until 60 settled || t_fail "workers of the warm-up ended"
snapshot "baseline (after $SOAK_AT_ONCE warm-up sessions)"
B_FDS=$(proc_fds "$D") B_RSS=$(proc_rss_kb "$D") B_THREADS=$(proc_threads "$D")
TOTAL=$SOAK_AT_ONCE

# phase 1: SOAK_SESSIONS opened and closed
t0=$(date +%s.%N)
if timeout 1200 "$SESS" cycle 127.0.0.1 "$PORT" "$SOAK_SESSIONS" "$SOAK_BATCH" "$SOAK_SIZE" >"$LOGDIR/cycle.out" 2>&1; then
	t_ok "$SOAK_SESSIONS sessions opened and closed, $SOAK_BATCH at a time"
else
	t_fail "$SOAK_SESSIONS sessions opened and closed: $(tail -3 "$LOGDIR/cycle.out")"
fi
fig "phase 1: $(cat "$LOGDIR/cycle.out" | tail -1)"
TOTAL=$((TOTAL + SOAK_SESSIONS))
wait_until 60 settled || t_fail "workers of phase 1 ended"
snapshot "after phase 1"
A_RSS=$(proc_rss_kb "$D")

# phase 2: SOAK_AT_ONCE sessions at the same time, SOAK_ROUNDS times; the
# first round is held open and counted by the metrics endpoint
mkfifo "$LOGDIR/hold.in"
"$SESS" hold 127.0.0.1 "$PORT" "$SOAK_AT_ONCE" "$SOAK_SIZE" <"$LOGDIR/hold.in" >"$LOGDIR/hold.out" 2>&1 &
HOLD=$!
exec 4>"$LOGDIR/hold.in"
if wait_until 120 grep -q "^held $SOAK_AT_ONCE" "$LOGDIR/hold.out"; then
	t_ok "$SOAK_AT_ONCE sessions open at once"
	snapshot "holding $SOAK_AT_ONCE sessions"
	if [ -n "$METRICS" ]; then
		t_check "metrics: $SOAK_AT_ONCE live sessions" [ "$(metric 'rgpud_sessions{slurm_job="0"}')" = "$SOAK_AT_ONCE" ]
		t_check "metrics: $SOAK_AT_ONCE x $SOAK_SIZE bytes in use" \
			[ "$(metric 'rgpud_memory_used_bytes{gpu="0",slurm_job="0"}')" = "$((SOAK_AT_ONCE * SOAK_SIZE))" ]
	fi
else
	t_fail "$SOAK_AT_ONCE sessions open at once: $(tail -3 "$LOGDIR/hold.out")"
fi
exec 4>&-
wait $HOLD
TOTAL=$((TOTAL + SOAK_AT_ONCE))
wait_until 60 settled || t_fail "workers of the held sessions ended"
# a peak of threads leaves glibc's stack cache and arenas at their high-water
# mark: later rounds are compared with this one, so a leak shows as growth
# from round to round
snapshot "after the held round"
P_RSS=$(proc_rss_kb "$D")
t1=$(date +%s.%N)
for r in $(seq 2 "$SOAK_ROUNDS"); do
	"$SESS" cycle 127.0.0.1 "$PORT" "$SOAK_AT_ONCE" "$SOAK_AT_ONCE" "$SOAK_SIZE" >>"$LOGDIR/rounds.out" 2>&1 ||
		t_fail "round $r of $SOAK_AT_ONCE at once: $(tail -3 "$LOGDIR/rounds.out")"
	TOTAL=$((TOTAL + SOAK_AT_ONCE))
	wait_until 60 settled || t_fail "workers of round $r ended"
	snapshot "after round $r"
done
[ -s "$LOGDIR/rounds.out" ] && fig "phase 2: $(tail -1 "$LOGDIR/rounds.out") (x$((SOAK_ROUNDS - 1)), after one held round)"
wait_until 60 settled || t_fail "workers of phase 2 ended"
t2=$(date +%s.%N)
snapshot "end ($TOTAL sessions in all)"

E_FDS=$(proc_fds "$D") E_RSS=$(proc_rss_kb "$D") E_THREADS=$(proc_threads "$D")
t_check "no descriptor growth ($B_FDS -> $E_FDS)" [ "$E_FDS" -le "$B_FDS" ]
t_check "no thread growth ($B_THREADS -> $E_THREADS)" [ "$E_THREADS" -le "$B_THREADS" ]
t_check "phase 1: resident memory growth within $SOAK_RSS_SLACK_KB KiB ($B_RSS -> $A_RSS KiB)" \
	[ $((A_RSS - B_RSS)) -le "$SOAK_RSS_SLACK_KB" ]
t_check "phase 2: resident memory growth within $SOAK_RSS_PEAK_SLACK_KB KiB over $((SOAK_ROUNDS - 1)) rounds ($P_RSS -> $E_RSS KiB)" \
	[ $((E_RSS - P_RSS)) -le "$SOAK_RSS_PEAK_SLACK_KB" ]
if [ -n "$METRICS" ]; then
	t_check "metrics: $TOTAL sessions started" [ "$(metric rgpud_sessions_started_total)" = "$TOTAL" ]
	t_check "metrics: $TOTAL sessions ended" [ "$(metric rgpud_sessions_ended_total)" = "$TOTAL" ]
	t_check "metrics: no memory left in use" [ "$(metric 'rgpud_memory_used_bytes{gpu="0",slurm_job="0"}')" = 0 ]
	t_check "metrics: no worker crash" [ "$(metric rgpud_worker_crashes_total)" = 0 ]
fi
t_check "rgpud logged no error" bash -c "! grep -E ': (error|warning): ' '$LOGDIR/d.log'"
fig "time: phase 1 and the held round $(echo "$t1 $t0" | awk '{printf "%.1f", $1 - $2}') s, the other rounds $(echo "$t2 $t1" | awk '{printf "%.1f", $1 - $2}') s"
stop_rgpud "$D"
fig "$FAILS failure(s)"
[ $FAILS -eq 0 ]
