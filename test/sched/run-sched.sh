#!/bin/bash
# The scheduler (daemon/sched/, issue 11) on the emulated device, with its
# time model (emu/README.md: RGPU_EMU_CLOCK, a device that runs one kernel
# at a time across the workers):
#  - bad --sched, --sched-quantum, --mps values are refused, naming the option
#  - fair: two tenants with shares 75 and 25 (RGPU_SHARE) get about 3:1 of
#    the device, in kernels run and in attained GPU time (rgpu top --json);
#    fifo: about 1:1
#  - rgpu top --json lists the live sessions with job, uid, gpu, memory,
#    share, gpu_time_ms; rgpu top without a server says so
#  - a tenant whose kernel faults ends alone: the one beside it completes
#    with correct results
#  - /metrics exports the attained GPU time (when built with libmicrohttpd)
#  - --mps=job: without the control program sessions run as before; with a
#    stand-in for it, one daemon per uid (outside a job) is started with its
#    pipe and log directories and told to quit after the last session; and
#    the gate weighs each launch's grid: tenants that fit side by side
#    run, full grids take turns (the heavier one gets more)
# Exit 77 (skip) when not built (t_tenant needs nvcc).
set -u
. "$(dirname "$0")/../soak/lib.sh"
t_need_build
TENANT=$top_builddir/test/sched/t_tenant
RGPU=$top_builddir/tools/rgpu
CLIENTDIR=$top_builddir/client/.libs
[ -x "$TENANT" ] || { echo "SKIP: $TENANT not built (needs nvcc)"; exit 77; }
[ -x "$RGPU" ] || { echo "SKIP: $RGPU not built"; exit 77; }
t_logdir sched

# A private munged (root): every client and `rgpu top` then name their uid
# (root's top sees every session).  Without one, clients over TCP run as
# nobody: all run over TCP, and the test of who may list is skipped.
HAVE_MUNGE=0
if start_munged; then
	HAVE_MUNGE=1
else
	export RGPU_TRANSPORT=tcp
	unset RGPU_MUNGE_SOCKET
	echo "    (no private munged: clients over TCP without a credential)"
fi

export RGPU_EMU_DEVICES=1
export RGPU_EMU_CLOCK=$LOGDIR/emu-clock
# (workers of clients without a credential run as nobody: all may use it)
: >"$RGPU_EMU_CLOCK" && chmod 666 "$RGPU_EMU_CLOCK"

# ---- bad options, refused with a message naming them
refused() { # option-text args...
	local want=$1 out rc
	shift
	out=$("$RGPUD" --emulated --open --listen 127.0.0.1:1 "$@" 2>&1)
	rc=$?
	[ $rc = 2 ] && grep -q -- "$want" <<<"$out" || { echo "    rc $rc: $out"; return 1; }
}
t_check "--sched=bogus refused naming --sched" refused "--sched: 'bogus'" --sched=bogus
t_check "--sched=FAIR refused (names are lower case)" refused "--sched" --sched=FAIR
t_check "--sched-quantum=0 refused" refused "--sched-quantum" --sched-quantum=0
t_check "--mps=always refused naming --mps" refused "--mps: 'always'" --mps=always
t_check "--mps-dir=relative refused" refused "--mps-dir" --mps-dir=relative
no_server() {
	local out
	out=$(env -u RGPU_SERVERS "$RGPU" top --json 2>&1)
	[ $? = 2 ] && grep -q "RGPU_SERVERS" <<<"$out"
}
t_check "rgpu top without a server or RGPU_SERVERS says so" no_server
tenant() { # name share seconds_ms [VAR=VALUE...]: runs in the background
	local name=$1 share=$2 ms=$3
	shift 3
	env RGPU_SERVERS="127.0.0.1:$PORT/0" LD_LIBRARY_PATH="$CLIENTDIR" RGPU_SHARE="$share" \
		T_KERNEL_US=2000 T_SECONDS_MS="$ms" T_DEPTH=4 "$@" "$TENANT" \
		>"$LOGDIR/$name.out" 2>"$LOGDIR/$name.err" &
	eval "TPID_$name=$!"
}
kernels() { sed -n 's/^TENANT kernels=\([0-9]*\).*/\1/p' "$LOGDIR/$1.out"; }
# pair WHAT A B MS [VAR=VALUE...]: tenants A (share 75) and B (25) at once
# for MS ms; their exit statuses in PAIR_RC ("00": both fine), their
# kernels in KA and KB
pair() {
	local what=$1 a=$2 b=$3 ms=$4 ra rb
	shift 4
	tenant "$a" 75 "$ms" "$@"
	tenant "$b" 25 "$ms" "$@"
	eval "wait \"\$TPID_$a\""; ra=$?
	eval "wait \"\$TPID_$b\""; rb=$?
	PAIR_RC=$ra$rb KA=$(kernels "$a") KB=$(kernels "$b")
	echo "    $what: tenant 75 ran ${KA:-?} kernels, tenant 25 ${KB:-?}"
}
ratio_in() { # a b lo hi
	awk -v a="$1" -v b="$2" -v lo="$3" -v hi="$4" \
		'BEGIN { r = b > 0 ? a / b : 0; printf "    ratio %.2f (want %s..%s)\n", r, lo, hi; exit !(r >= lo && r <= hi) }'
}

# ---- fair, shares 75:25
start_rgpud fair --open --sched=fair
FAIR_PID=$RGPUD_PID
bad_share() {
	local out
	out=$(RGPU_SHARE=250 RGPU_SERVERS=127.0.0.1:$PORT/0 LD_LIBRARY_PATH=$CLIENTDIR "$TENANT" 2>&1)
	[ $? != 0 ] && grep -q "RGPU_SHARE=250" <<<"$out" || { echo "    $out"; return 1; }
}
t_check "RGPU_SHARE=250 refused by the client, naming it" bad_share
tenant a 75 3000
tenant b 25 3000
# rgpu top while both run: sampled until it has seen both sessions for a
# while (a loaded machine starts the tenants late), the last such sample kept
# (one taken as a tenant frees its memory on the way out shows 0 bytes: a
# sample counts only while both hold memory, so none qualifies if rgpu top
# never reports it)
sleep 1.5
TOPRC=1
for _ in $(seq 1 40); do
	kill -0 "$TPID_a" 2>/dev/null && kill -0 "$TPID_b" 2>/dev/null || break
	"$RGPU" top --server "127.0.0.1:$PORT" --json >"$LOGDIR/top.sample" 2>"$LOGDIR/top.err" || continue
	if "$PYTHON" -c 'import json, sys
s = json.load(open(sys.argv[1]))["sessions"]
sys.exit(0 if len(s) == 2 and all(x["gpu_time_ms"] > 200 and x["memory_bytes"] > 0
                                  for x in s) else 1)' "$LOGDIR/top.sample"; then
		cp "$LOGDIR/top.sample" "$LOGDIR/top.json"
		TOPRC=0
	fi
	sleep 0.2
done
[ -s "$LOGDIR/top.json" ] || cp "$LOGDIR/top.sample" "$LOGDIR/top.json" 2>/dev/null
wait "$TPID_a"; RA=$?
wait "$TPID_b"; RB=$?
t_check "fair: both tenants completed with correct results" test "$RA$RB" = 00
KA=$(kernels a) KB=$(kernels b)
echo "    fair: tenant 75 ran ${KA:-?} kernels, tenant 25 ${KB:-?}"
# (kernels over the whole run, on a loaded CI machine: a wider band than
# the attained time the scheduler steers by)
t_check "fair: kernels run about 3:1" ratio_in "${KA:-0}" "${KB:-0}" 2.0 4.5
top_json() {
	[ $TOPRC = 0 ] || { cat "$LOGDIR/top.err"; return 1; }
	"$PYTHON" - "$LOGDIR/top.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
s = d["sessions"]
assert len(s) == 2, s
for k in ("job", "uid", "gpu", "pid", "memory_bytes", "share", "weight", "gpu_time_ms",
          "busy_ms", "resident_bytes", "swapped_bytes"):
    assert all(k in x for x in s), k
w = sorted(x["weight"] for x in s)
assert w == [25, 75], w
assert all(x["gpu_time_ms"] > 0 for x in s), s
assert all(x["memory_bytes"] > 0 for x in s), s
assert d["servers"][0]["policy"] == "fair", d["servers"]
hi = [x for x in s if x["weight"] == 75][0]["gpu_time_ms"]
lo = [x for x in s if x["weight"] == 25][0]["gpu_time_ms"]
print("    rgpu top: gpu_time_ms %.1f and %.1f, ratio %.2f" % (hi, lo, hi / lo))
assert 2.2 <= hi / lo <= 3.8, hi / lo
EOF
}
t_check "rgpu top --json: two sessions, weights 75/25, attained GPU time about 3:1" top_json
# who may list: a user sees their own sessions, root every one
if [ $HAVE_MUNGE = 1 ] && command -v setpriv >/dev/null; then
	tenant j 50 2500
	env RGPU_SERVERS="127.0.0.1:$PORT/0" LD_LIBRARY_PATH="$CLIENTDIR" T_KERNEL_US=2000 \
		T_SECONDS_MS=2500 setpriv --reuid=65534 --regid=65534 --clear-groups "$TENANT" \
		>"$LOGDIR/k.out" 2>"$LOGDIR/k.err" &
	TPID_k=$!
	sleep 1.2
	"$RGPU" top --server "127.0.0.1:$PORT" --json >"$LOGDIR/top-root.json" 2>&1
	setpriv --reuid=65534 --regid=65534 --clear-groups "$RGPU" top --server "127.0.0.1:$PORT" \
		--json >"$LOGDIR/top-nobody.json" 2>&1
	wait "$TPID_j" "$TPID_k"
	who_lists() {
		"$PYTHON" - "$LOGDIR/top-root.json" "$LOGDIR/top-nobody.json" <<'EOF'
import json, sys
root = json.load(open(sys.argv[1]))["sessions"]
nob = json.load(open(sys.argv[2]))["sessions"]
uids = sorted(x["uid"] for x in root)
assert uids == [0, 65534], ("root sees", uids)
assert [x["uid"] for x in nob] == [65534], ("nobody sees", nob)
print("    root sees uids %s, nobody sees %s" % (uids, [x["uid"] for x in nob]))
EOF
	}
	t_check "rgpu top: root sees every session, another user only their own" who_lists
fi
top_table() {
	local out
	out=$("$RGPU" top --server "127.0.0.1:$PORT" --count 1 2>&1) &&
		grep -q "scheduler fair" <<<"$out" && grep -q "no sessions" <<<"$out" ||
		{ echo "$out"; return 1; }
}
t_check "rgpu top (table, --count 1): the policy, no sessions left" top_table
stop_rgpud "$FAIR_PID"

# ---- two GPUs, two sessions each admitted to both (RGPU_SERVERS names
# both, as for two ranks of a job) and each with a context on both (as
# for peer access), running kernels on one: they are not each other's
# tenants, so neither is gated nor timed (NCCL's ranks must not wait on
# each other's turns)
RGPU_EMU_DEVICES=2 start_rgpud two --open --sched=fair
TWO_PID=$RGPUD_PID
for x in 0 1; do
	env RGPU_SERVERS="127.0.0.1:$PORT/$x,127.0.0.1:$PORT/$((1 - x))" LD_LIBRARY_PATH="$CLIENTDIR" \
		T_KERNEL_US=2000 T_SECONDS_MS=2500 T_DEPTH=4 T_OTHER_CTX=1 "$TENANT" \
		>"$LOGDIR/two$x.out" 2>"$LOGDIR/two$x.err" &
	eval "TPID_two$x=$!"
done
sleep 1.2
"$RGPU" top --server "127.0.0.1:$PORT" --json >"$LOGDIR/two-top.json" 2>"$LOGDIR/two-top.err"
wait "$TPID_two0"; R0=$?
wait "$TPID_two1"; R1=$?
t_check "two GPUs, one each: both completed" test "$R0$R1" = 00
two_alone() {
	"$PYTHON" - "$LOGDIR/two-top.json" <<'EOF2'
import json, sys
s = [x for x in json.load(open(sys.argv[1]))["sessions"] if x["memory_bytes"] > 0]
print("    sessions (gpu, GPU time ms):", [(x["gpu"], x["gpu_time_ms"]) for x in s])
# each on its own GPU, and nothing timed: no GPU had two tenants
assert len(s) == 2 and sorted(x["gpu"] for x in s) == [0, 1], s
assert all(x["gpu_time_ms"] == 0 for x in s), s
EOF2
}
t_check "two GPUs, one each: not each other's tenants (nothing gated or timed)" two_alone
stop_rgpud "$TWO_PID"

# ---- fifo: shares ignored
start_rgpud fifo --open --sched=fifo
FIFO_PID=$RGPUD_PID
pair fifo c d 2000
t_check "fifo: both completed" test "$PAIR_RC" = 00
t_check "fifo: no shares, about 1:1 (not 3:1)" ratio_in "${KA:-0}" "${KB:-0}" 0.5 2.0
stop_rgpud "$FIFO_PID"

# ---- a faulting tenant beside a running one; metrics
MARGS=()
if have_metrics; then
	MPORT=$(free_port)
	MARGS=(--metrics="127.0.0.1:$MPORT")
fi
start_rgpud fault --open "${MARGS[@]}"
FAULT_PID=$RGPUD_PID
tenant e 50 2000
tenant f 50 2000 T_FAULT_MS=1000
wait "$TPID_e"; RE=$?
wait "$TPID_f"; RF=$?
t_check "the faulting tenant saw its fault" grep -q "faulted=1" "$LOGDIR/f.out"
t_check "the tenant beside it completed with correct results" test "$RE" = 0 -a -n "$(kernels e)"
if have_metrics && command -v curl >/dev/null; then
	attained() {
		sleep 0.5 # (the workers' exits reach the parent)
		curl -sS -m 10 "http://127.0.0.1:$MPORT/metrics" >"$LOGDIR/metrics.txt" &&
			awk '/^rgpud_gpu_attained_seconds_total\{gpu="0",slurm_job="0"\}/ { f = 1; v = $NF }
			     END { printf "    attained %s s\n", v; exit !(f && v + 0 > 0.5) }' "$LOGDIR/metrics.txt"
	}
	t_check "/metrics: rgpud_gpu_attained_seconds_total counts the kernels' time" attained
fi
stop_rgpud "$FAULT_PID"

# ---- --mps=job without the control program: sessions run time-sliced,
# and the log says so once
start_rgpud mps-none --open --mps=job --mps-dir="$LOGDIR/mps-none" \
	--mps-control="$LOGDIR/no-such-mps-control"
tenant i 50 300
wait "$TPID_i"; RI=$?
t_check "--mps=job without nvidia-cuda-mps-control: the session ran" test "$RI" = 0
t_check "  and the log says why" grep -q "MPS: cannot start" "$LOGDIR/mps-none.log"
stop_rgpud "$RGPUD_PID"
# with a stand-in for nvidia-cuda-mps-control that writes down how it was
# called (the emulated device ignores the MPS variables the workers get)
FAKE=$LOGDIR/fake-mps-control
{
	echo '#!/bin/sh'
	echo "echo \"\$* pipe=\$CUDA_MPS_PIPE_DIRECTORY log=\$CUDA_MPS_LOG_DIRECTORY input=\$(cat | tr '\\n' ' ')\" >>'$LOGDIR/fake-mps.log'"
} >"$FAKE"
chmod +x "$FAKE"
start_rgpud mps --open --mps=job --mps-dir="$LOGDIR/mps" --mps-control="$FAKE"
MPS_PID=$RGPUD_PID
tenant g 50 600
tenant h 50 600
# a session whose lease gives no share runs capped to --mps-default-share,
# 75 by default: its worker is started with the MPS variable
mps_default_pct() {
	local p
	for p in $(cat /proc/"$MPS_PID"/task/*/children 2>/dev/null); do
		tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null
	done | grep -qx "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=75"
}
wait_until 5 mps_default_pct; RPCT=$?
t_check "--mps=job: a session without a share is capped to the default 75% of the threads" \
	test "$RPCT" = 0
wait "$TPID_g"; RG=$?
wait "$TPID_h"; RH=$?
t_check "--mps=job: the sessions ran" test "$RG$RH" = 00
# (the daemon is told to quit once the parent has seen both workers exit)
wait_until 10 grep -q "input=quit" "$LOGDIR/fake-mps.log"
mps_calls() {
	local n u
	u=$(id -u)
	n=$(grep -c "^-d pipe=$LOGDIR/mps/uid$u/pipe log=$LOGDIR/mps/uid$u/log" "$LOGDIR/fake-mps.log")
	[ "$n" -ge 1 ] && grep -q "input=quit" "$LOGDIR/fake-mps.log" &&
		test -d "$LOGDIR/mps/uid$u/pipe" || { cat "$LOGDIR/fake-mps.log"; return 1; }
}
t_check "--mps=job: a control daemon per uid started with its directories, quit after" mps_calls
stop_rgpud "$MPS_PID"

# ---- under MPS the gate weighs what each launch needs of the GPU (the
# emulated device: 132 SMs, 32 blocks of 32 threads each at once): with
# shares of 75% of the threads, tenants of one-block grids fit side by
# side; tenants of grids that fill the GPU do not fit (75 + 75) and take
# turns, the weights (75:25) deciding who gets more.  (The emulated device
# runs one kernel at a time even under MPS, while the MPS charge divides
# a kernel's time among the tenants busy beside it: the split is not the
# GPU's, which bench/sharing measures; these check that both paths run,
# nobody starves, and turns follow the weights.)
start_rgpud mps-demand --open --mps=job --mps-dir="$LOGDIR/mps-demand" --mps-control="$FAKE" \
	--mps-default-share=75
MD_PID=$RGPUD_PID
pair "MPS, one-block grids" m n 3000
t_check "MPS, grids that fit side by side: both completed" test "$PAIR_RC" = 00
t_check "  neither starved" ratio_in "${KA:-0}" "${KB:-0}" 0.33 4.5
pair "MPS, full grids" o p 3000 T_BLOCKS=4224
t_check "MPS, full grids (75% + 75%): both completed" test "$PAIR_RC" = 00
t_check "  taking turns, the heavier tenant gets more" ratio_in "${KA:-0}" "${KB:-0}" 1.15 4.5
stop_rgpud "$MD_PID"

[ $FAILS = 0 ] || { echo "$FAILS check(s) failed; logs in $LOGDIR"; exit 1; }
echo "all passed"
