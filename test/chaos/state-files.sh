#!/bin/bash
# Chaos: rgpud --leases starting on a damaged lease file (truncated,
# garbage, empty, wrong types).  Each time rgpud must start, say in its log
# which file it rejected and why, keep the damaged file aside for the
# administrator, start with no leases, and serve: a client gets an answer
# (refused without a credential; with a private munged, a lease granted
# afterwards is used).  A valid file is the control: its lease is loaded.
# Out-of-range numbers are chaos/lease-numbers.sh.
set -u
. "$(dirname "$0")/../soak/lib.sh"
t_need_build
t_logdir chaos-state
HAVE_MUNGE=""
start_munged && HAVE_MUNGE=1
echo "munged: ${HAVE_MUNGE:-not available (the sessions with a lease are skipped)}"

M_ON=""
have_metrics && M_ON=1
leases_is() { # number of live leases, from the metrics endpoint (if built)
	[ -z "$M_ON" ] && return 0
	[ "$(curl -sS -m 10 "http://127.0.0.1:$MPORT/metrics" | awk '$1 == "rgpud_leases" {print $2}')" = "$1" ]
}

# case NAME EXPECT(corrupt|loaded) REASON-REGEX: leases.json from stdin
run_case() {
	local name=$1 expect=$2 reason=$3 st=$LOGDIR/$1 log
	mkdir -p "$st"
	cat >"$st/leases.json"
	log=$LOGDIR/$name.log
	MPORT=$(free_port)
	start_rgpud "$name" --leases --state-dir="$st" ${M_ON:+--metrics=127.0.0.1:$MPORT}
	local d=$RGPUD_PID
	t_check "$name: rgpud starts and stays up" kill -0 "$d"
	if [ "$expect" = corrupt ]; then
		t_check "$name: the log names the file and why it was rejected" \
			grep -Eq "(error|warning): .*$st/leases.json.*($reason)" "$log"
		t_check "$name: the damaged file is kept aside" \
			bash -c "ls '$st'/leases.json.corrupt-* >/dev/null 2>&1"
		t_check "$name: no lease loaded" leases_is 0
	else
		t_check "$name: the lease is loaded" leases_is 1
	fi
	"$SESS" try 127.0.0.1 "$PORT" 4096 >"$LOGDIR/$name.try" 2>&1
	t_check "$name: a client without a credential gets an answer (refused)" \
		grep -q "^refused $((100002))" "$LOGDIR/$name.try"
	if [ -n "$HAVE_MUNGE" ]; then
		RGPU_SESSIONS_CRED=1 "$SESS" grant 127.0.0.1 "$PORT" 4242 0 0 $((64 << 20)) \
			>"$LOGDIR/$name.grant" 2>&1
		t_check "$name: a lease can be granted" grep -q "status 0" "$LOGDIR/$name.grant"
		SLURM_JOB_ID=4242 RGPU_SESSIONS_CRED=1 "$SESS" try 127.0.0.1 "$PORT" $((32 << 20)) \
			>"$LOGDIR/$name.use" 2>&1
		t_check "$name: a session of the job allocates within its quota" \
			grep -q "^ok" "$LOGDIR/$name.use"
	fi
	stop_rgpud "$d"
}

GOOD='{"version":1,"leases":[{"job_id":5,"uid":0,"gpu":0,"mem_limit":1048576,"expires":0}]}'
echo "$GOOD" | run_case valid loaded ""
printf '%s' "${GOOD:0:40}" | run_case truncated corrupt "not valid JSON"
head -c 4096 /dev/urandom | run_case garbage corrupt "not valid JSON|not a JSON object"
: | run_case empty corrupt "truncated or empty"
echo '{"version":1,"leases":[{"job_id":"five","uid":0,"gpu":0,"mem_limit":1,"expires":0}]}' |
	run_case wrong-type corrupt "not an integer"
echo '{"version":1,"leases":[{"job_id":5,"uid":0,"gpu":99999,"mem_limit":1,"expires":0}]}' |
	run_case bad-gpu corrupt "out of range"
echo '{"version":7,"leases":[]}' | run_case future-version corrupt "version"
# deep nesting: json-c's depth limit, not a crash
python3 -c 'print("[" * 100000 + "]" * 100000)' | run_case deep corrupt "not valid JSON|not a JSON object"

echo "$FAILS failure(s)"
[ $FAILS -eq 0 ]
