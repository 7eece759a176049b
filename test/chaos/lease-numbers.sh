#!/bin/bash
# Chaos: numbers beyond 64 bits in the lease file (issue 16, item 10: they
# used to saturate to 2^64-1, an unlimited quota or a lease that never
# expires, and were accepted).  rgpud must start, say in its log that it
# rejected something in leases.json, serve, and hold no lease with a
# saturated number.  Expected to fail (XFAIL in test/Makefile.am) until
# the lease loader rejects them.
set -u
. "$(dirname "$0")/../soak/lib.sh"
t_need_build
need_metrics # (the lease view comes from the metrics endpoint)
t_logdir chaos-numbers
MAX=18446744073709551615

scrape() { curl -sS -m 10 "http://127.0.0.1:$MPORT/metrics" >"$LOGDIR/$1.metrics"; }

# case NAME FIELD VALUE
run_case() {
	local name=$1 field=$2 value=$3 st=$LOGDIR/$1
	local l='"job_id":5,"uid":0,"gpu":0,"mem_limit":1048576,"expires":0'
	mkdir -p "$st"
	l=$(echo "$l" | sed "s/\"$field\":[0-9]*/\"$field\":$value/")
	echo "{\"version\":1,\"leases\":[{$l}]}" >"$st/leases.json"
	MPORT=$(free_port)
	start_rgpud "$name" --leases --state-dir="$st" --metrics="127.0.0.1:$MPORT"
	local d=$RGPUD_PID
	t_check "$name: rgpud starts and stays up" kill -0 "$d"
	t_check "$name: the log says what it rejected in leases.json" \
		grep -Eq "(error|warning): .*$st/leases.json" "$LOGDIR/$name.log"
	scrape "$name"
	t_check "$name: no lease holds a saturated number" \
		bash -c "! grep -E '^rgpud_lease.*(slurm_job=\"$MAX\"| $MAX\$)' '$LOGDIR/$name.metrics'"
	"$SESS" try 127.0.0.1 "$PORT" 4096 >"$LOGDIR/$name.try" 2>&1
	t_check "$name: serves (a client without a credential is answered)" \
		grep -q "^refused" "$LOGDIR/$name.try"
	stop_rgpud "$d"
}

run_case huge-limit mem_limit 99999999999999999999999
run_case limit-2to64 mem_limit 18446744073709551616
run_case huge-expiry expires 99999999999999999999999
run_case huge-job job_id 18446744073709551616

echo "$FAILS failure(s)"
[ $FAILS -eq 0 ]
