#!/bin/bash
# The alternating-tenants case of run.sh (alt2) on the emulated device: no
# GPU needed, so the swap policy can be judged anywhere (issue 9).
#
#   bash bench/oversubscribe/emu.sh --out DIR [--rgpud PATH] [--tenants N]
#        [--mib MIB] [--iters N] [--kernels N] [--host-ms MS] [--gap S]
#        [--reps N] [-- RGPUD_ARGS...]
#
# Starts `rgpud --emulated` with one device of RGPU_EMU_MEM (default 1G)
# whose kernels take RGPU_EMU_KERNEL_NS each (default 20 ms) on a device
# clock the workers share (a device runs one kernel at a time), then runs
# N tenants (test/mem/t_oversub alt: MIB in 8 pieces, ITERS x (GPU phase of
# KERNELS rounds over every piece, host phase of HOST_MS ms)) one after the
# other and then at once, GAP seconds apart, REPS times.  With the defaults
# two tenants of 704 MiB plus their 64 MiB contexts ask for 1.5x the
# device, as alt2 does on the GPU.  Prints and writes DIR/summary.txt: each
# repetition's times and ratio (at once / one after another; the target on
# the GPU is <= 1.2), whether every tenant's data was intact, and what the
# memory manager did (switches.py: evictions, restores, waits).
# --rgpud runs another build's rgpud (to compare before/after; its
# t_oversub is still this tree's).  Exit 0 when every tenant's data was
# intact, 1 otherwise, 77 when the tree is not built.
set -u
OUT="" RGPUD="" N=2 MIB=704 ITERS=3 KERNELS=2 HOST_MS=800 GAP=0.3 REPS=1
while [ $# -gt 0 ]; do
	case $1 in
	--out) OUT=$2; shift 2 ;;
	--rgpud) RGPUD=$2; shift 2 ;;
	--tenants) N=$2; shift 2 ;;
	--mib) MIB=$2; shift 2 ;;
	--iters) ITERS=$2; shift 2 ;;
	--kernels) KERNELS=$2; shift 2 ;;
	--host-ms) HOST_MS=$2; shift 2 ;;
	--gap) GAP=$2; shift 2 ;;
	--reps) REPS=$2; shift 2 ;;
	--) shift; break ;;
	*) echo "usage: $0 --out DIR [--rgpud PATH] [--tenants N] [--mib MIB] [--iters N] [--kernels N] [--host-ms MS] [--gap S] [--reps N] [-- RGPUD_ARGS...]" >&2; exit 2 ;;
	esac
done
[ -n "$OUT" ] || { echo "usage: $0 --out DIR ..." >&2; exit 2; }
mkdir -p "$OUT"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
B=${top_builddir:-$SRC/_build}
RGPUD=${RGPUD:-$B/daemon/rgpud}
T=$B/test/mem/t_oversub
EMULIB=$B/emu/.libs/librgpu-emu.so
CLIENTDIR=$B/client/.libs
S=$OUT/summary.txt
: >"$S"
say() { echo "$*" | tee -a "$S"; }
for f in "$RGPUD" "$T" "$EMULIB" "$CLIENTDIR/libcuda.so.1"; do
	[ -e "$f" ] || { say "SKIP: not built: $f (make, then make -C test mem/t_oversub)"; exit 77; }
done

export RGPU_EMU_LIB=$EMULIB RGPU_EMU_DEVICES=1
export RGPU_EMU_MEM=${RGPU_EMU_MEM:-1G} RGPU_EMU_KERNEL_NS=${RGPU_EMU_KERNEL_NS:-20000000}
export RGPU_EMU_CLOCK=$OUT/devclock
unset RGPU_EMU_TAG RGPU_EMU_POOL
rm -f "$RGPU_EMU_CLOCK"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
DPID=""
stop() { [ -n "$DPID" ] && kill "$DPID" 2>/dev/null && wait "$DPID" 2>/dev/null; DPID=""; }
trap 'stop; kill $(jobs -p) 2>/dev/null' EXIT

# tenants NAME MODE(seq|conc): wall seconds in WALL, failures in BAD
tenants() {
	local name=$1 mode=$2 i p pids="" t0 t1
	BAD=0
	t0=$(date +%s.%N)
	for i in $(seq 1 "$N"); do
		LD_LIBRARY_PATH=$CLIENTDIR RGPU_SERVERS=127.0.0.1:$PORT/0 \
			timeout 300 "$T" alt "$MIB" 8 "$ITERS" "$KERNELS" "$HOST_MS" >"$OUT/$name-$i.out" 2>&1 &
		if [ "$mode" = seq ]; then
			wait $! || BAD=$((BAD + 1))
		else
			pids="$pids $!"
			sleep "$GAP"
		fi
	done
	for p in $pids; do wait "$p" || BAD=$((BAD + 1)); done
	t1=$(date +%s.%N)
	WALL=$(python3 -c "print('%.2f' % ($t1 - $t0))")
	for i in $(seq 1 "$N"); do
		grep -q "RESULT ok" "$OUT/$name-$i.out" ||
			{ BAD=$((BAD + 1)); say "  $name-$i: $(tail -n 2 "$OUT/$name-$i.out" | tr '\n' ' ')"; }
	done
}

say "emulated device: RGPU_EMU_MEM=$RGPU_EMU_MEM, kernels $((RGPU_EMU_KERNEL_NS / 1000000)) ms each; $N tenants x $MIB MiB (+64 MiB context each), $ITERS x (GPU phase of $KERNELS x 8 kernels, $HOST_MS ms host phase), arriving $GAP s apart; rgpud $RGPUD $*"
RC=0
for rep in $(seq 1 "$REPS"); do
	PORT=$(free_port)
	LOG=$OUT/rgpud-$rep.log
	: >"$LOG"
	# appending: the marker written between the two parts stays
	"$RGPUD" --emulated --open --listen "127.0.0.1:$PORT" "$@" >>"$LOG" 2>&1 &
	DPID=$!
	for _ in $(seq 1 100); do
		python3 -c "import socket; socket.create_connection(('127.0.0.1', $PORT), 1)" 2>/dev/null && break
		sleep 0.1
	done
	tenants "seq$rep" seq
	seq=$WALL bad=$BAD
	echo "---- at once" >>"$LOG"
	tenants "conc$rep" conc
	conc=$WALL bad=$((bad + BAD))
	stop
	ratio=$(python3 -c "print('%.2f' % ($conc / $seq))")
	phases=$(cat "$OUT"/conc"$rep"-*.out | awk '/^PHASE/ {printf "%s ", $4}')
	say "rep $rep: one after another $seq s, at once $conc s: ratio $ratio$([ $bad = 0 ] && echo ', data intact' || echo ", $bad FAILED"); GPU phases at once: $phases"
	python3 "$SRC/bench/oversubscribe/switches.py" --after "---- at once" "$LOG" | sed 's/^/  /' | tee -a "$S"
	[ $bad = 0 ] || RC=1
done
exit $RC
