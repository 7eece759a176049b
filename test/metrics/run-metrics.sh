#!/bin/bash
# rgpud's Prometheus endpoint (--metrics), scraped with curl:
#  - live sessions and device memory per GPU and job while sessions hold
#    memory, back to 0 when they end; session and connection counters
#  - the text format: HELP and TYPE for every metric, counters end in _total
#  - 404 on other paths, 405 on other methods
#  - a refused client is counted by reason (auth, on an rgpud with --leases)
#  - a bare port listens on loopback; a bad address is refused at start
# Exit 77 (skip) when not built, or rgpud was built without libmicrohttpd
# (then --metrics is refused at start with a message saying so).
set -u
. "$(dirname "$0")/../soak/lib.sh"
t_need_build
need_metrics
command -v curl >/dev/null || { echo "SKIP: curl not installed"; exit 77; }
t_logdir metrics

MPORT=$(free_port)
start_rgpud d1 --open --metrics="127.0.0.1:$MPORT"
D1=$RGPUD_PID
URL=http://127.0.0.1:$MPORT/metrics

scrape() { # -> $LOGDIR/scrape.txt, headers in scrape.hdr; fails unless 200
	local code
	code=$(curl -sS -m 10 -D "$LOGDIR/scrape.hdr" -o "$LOGDIR/scrape.txt" -w '%{http_code}' "$URL")
	[ "$code" = 200 ]
}
value() { # exact series (name{labels}) -> its value, or nothing
	# (label values may hold spaces: the value is the last field)
	awk -v k="$1" '/^[^#]/ { s = $0; sub(/ [^ ]*$/, "", s); if (s == k) print $NF }' \
		"$LOGDIR/scrape.txt"
}
is() { # series expected
	local v
	v=$(value "$1")
	[ "$v" = "$2" ] || { echo "    $1 = '${v}', expected $2"; return 1; }
}
ge() { # series minimum
	local v
	v=$(value "$1")
	[ -n "$v" ] && awk -v v="$v" -v m="$2" 'BEGIN {exit !(v + 0 >= m + 0)}' ||
		{ echo "    $1 = '${v}', expected >= $2"; return 1; }
}
# Every sample belongs to a metric with HELP and TYPE lines before it,
# counters are named *_total, values are numbers.
well_formed() {
	awk '
	/^# HELP / { help[$3] = 1; next }
	/^# TYPE / { if (!help[$3]) { print "    TYPE before HELP: " $3; bad = 1 }
		     type[$3] = $4
		     if ($4 == "counter" && $3 !~ /_total$/) { print "    counter not *_total: " $3; bad = 1 }
		     if ($4 != "counter" && $4 != "gauge") { print "    odd type: " $0; bad = 1 }
		     next }
	/^#/ || /^$/ { next }
	{ series = $0; sub(/ [^ ]*$/, "", series); name = series; sub(/\{.*/, "", name)
	  if (!(name in type)) { print "    sample without TYPE: " $0; bad = 1 }
	  if ($NF !~ /^-?[0-9]+(\.[0-9]+)?$/) { print "    not a number: " $0; bad = 1 }
	  if (series ~ /\{/ && series !~ /^[a-z_]+\{([a-z_]+="([^"\\]|\\.)*",?)+\}$/) { print "    bad labels: " $0; bad = 1 } }
	END { exit bad }' "$LOGDIR/scrape.txt"
}

t_check "GET /metrics answers 200" scrape
t_check "content type is the Prometheus text format" \
	grep -qi '^Content-Type: text/plain; version=0.0.4' "$LOGDIR/scrape.hdr"
t_check "HELP/TYPE lines, counter names, numbers, labels" well_formed
t_check "no session yet" is rgpud_sessions_started_total 0
t_check "the emulated GPUs are listed" ge 'rgpud_gpu_memory_total_bytes{gpu="0",name="rgpu emulated device 0"}' 1

# three sessions, each holding SIZE bytes on GPU 0
SIZE=12345678
mkfifo "$LOGDIR/hold.in"
"$SESS" hold 127.0.0.1 "$PORT" 3 $SIZE <"$LOGDIR/hold.in" >"$LOGDIR/hold.out" 2>&1 &
HOLD=$!
exec 4>"$LOGDIR/hold.in"
if ! wait_until 30 grep -q '^held 3' "$LOGDIR/hold.out"; then
	t_fail "three sessions opened"; cat "$LOGDIR/hold.out"
fi
# rgpud's parent learns of admissions and allocations from its workers
# asynchronously: wait (bounded) until the scrape shows all three, and
# their GPU time has grown past 0.1 s
held() {
	scrape && [ "$(value 'rgpud_sessions{slurm_job="0"}')" = 3 ] &&
		[ "$(value 'rgpud_memory_used_bytes{gpu="0",slurm_job="0"}')" = $((3 * SIZE)) ] &&
		ge 'rgpud_gpu_session_seconds_total{gpu="0",slurm_job="0"}' 0.1 >/dev/null
}
wait_until 20 held || scrape
cp "$LOGDIR/scrape.txt" "$LOGDIR/scrape-held.txt"
t_check "3 live sessions of job 0" is 'rgpud_sessions{slurm_job="0"}' 3
t_check "3 live sessions on GPU 0" is 'rgpud_gpu_sessions{gpu="0",slurm_job="0"}' 3
t_check "memory in use on GPU 0 is 3 x $SIZE" is 'rgpud_memory_used_bytes{gpu="0",slurm_job="0"}' $((3 * SIZE))
t_check "3 sessions started" is rgpud_sessions_started_total 3
t_check "connections counted" ge rgpud_connections_accepted_total 3
t_check "GPU time is counted" ge 'rgpud_gpu_session_seconds_total{gpu="0",slurm_job="0"}' 0.1
t_check "still well formed with sessions" well_formed

# they end: gauges back to 0, counters keep what happened
exec 4>&-
wait $HOLD
ended() { scrape && [ "$(value rgpud_sessions_ended_total)" = 3 ]; }
t_check "3 sessions ended" wait_until 20 ended
t_check "no live session left" is 'rgpud_sessions{slurm_job="0"}' 0
t_check "no memory in use left" is 'rgpud_memory_used_bytes{gpu="0",slurm_job="0"}' 0
t_check "GPU time stays counted" ge 'rgpud_gpu_session_seconds_total{gpu="0",slurm_job="0"}' 0.1
t_check "no worker crash" is rgpud_worker_crashes_total 0

code() { curl -sS -m 10 -o /dev/null -w '%{http_code}' "$@"; }
t_check "404 on /" [ "$(code "http://127.0.0.1:$MPORT/")" = 404 ]
t_check "404 on /metricsx" [ "$(code "http://127.0.0.1:$MPORT/metricsx")" = 404 ]
t_check "404 on /metrics/x" [ "$(code "http://127.0.0.1:$MPORT/metrics/x")" = 404 ]
t_check "405 on POST" [ "$(code -X POST -d x=1 "$URL")" = 405 ]
t_check "HEAD /metrics answers 200" [ "$(code -I "$URL")" = 200 ]
stop_rgpud "$D1"

# refusals by reason: rgpud with --leases refuses a client without a credential
MPORT=$(free_port)
URL=http://127.0.0.1:$MPORT/metrics
start_rgpud d2 --leases --state-dir="$LOGDIR/state" --metrics="$MPORT"
D2=$RGPUD_PID
"$SESS" try 127.0.0.1 "$PORT" 4096 >"$LOGDIR/try.out" 2>&1
t_check "a client without a credential is refused" grep -q '^refused' "$LOGDIR/try.out"
scrape
t_check "the refusal is counted under reason auth" is 'rgpud_refusals_total{reason="auth"}' 1
t_check "a bare port listens on loopback" \
	grep -q "metrics on http://127.0.0.1:$MPORT/metrics" "$LOGDIR/d2.log"
stop_rgpud "$D2"

# bad addresses are refused at start, with a message naming the option
for bad in 0 70000 "nosuchhost.invalid:9" "x:y"; do
	timeout 20 "$RGPUD" --emulated --open --listen 127.0.0.1:0 --metrics="$bad" \
		>"$LOGDIR/bad.log" 2>&1
	rc=$?
	t_check "--metrics=$bad is refused at start (exit $rc)" \
		grep -q -- "--metrics=$bad" "$LOGDIR/bad.log"
done

echo "$FAILS failure(s)"
[ $FAILS -eq 0 ]
