# Shared by the TAP suites that start their own rgpud and munged
# (parent/run-parent.sh, migrate/run-migrate.sh), sourced once TMP (a
# private directory, removed at exit) and LOGDIR are set: free ports,
# starting rgpud, a private munged, and killing all of it at exit.
# Sets: PIDS (every rgpud started: SIGKILLed at exit), MUNGED_PID.

free_port() {
	python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

PIDS=""
MUNGED_PID=""
cleanup() {
	for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
	[ -n "$MUNGED_PID" ] && kill "$MUNGED_PID" 2>/dev/null
	wait 2>/dev/null
	rm -rf "$TMP"
}
trap cleanup EXIT

# start_rgpud NAME ARGS...: rgpud --emulated on a free loopback port,
# logging to $LOGDIR/NAME.log; sets PORT, PID, LOG.  0 once it serves,
# 1 if it died or did not serve within 10 s.
start_rgpud() {
	local name=$1
	shift
	PORT=$(free_port)
	LOG=$LOGDIR/$name.log
	"$RGPUD" --emulated --listen "127.0.0.1:$PORT" --log-level debug "$@" >"$LOG" 2>&1 &
	PID=$!
	PIDS="$PIDS $PID"
	for _ in $(seq 200); do
		grep -q "serving" "$LOG" 2>/dev/null && return 0
		kill -0 "$PID" 2>/dev/null || return 1
		sleep 0.05
	done
	return 1
}

# start_munged: a private munged (key and socket in $TMP, as
# test/lease/test_lease.c does); sets MUNGED_PID.  0 once its socket is
# there ($TMP/munge.socket), 2 with no munged installed, 1 if it did not
# start.
start_munged() {
	local munged
	munged=$(command -v munged || ls /usr/sbin/munged 2>/dev/null)
	[ -n "$munged" ] || return 2
	dd if=/dev/urandom of="$TMP/munge.key" bs=1024 count=1 2>/dev/null
	chmod 600 "$TMP/munge.key"
	"$munged" --foreground --key-file="$TMP/munge.key" --socket="$TMP/munge.socket" \
		--pid-file="$TMP/munged.pid" --log-file="$TMP/munged.log" \
		--seed-file="$TMP/munged.seed" >/dev/null 2>&1 &
	MUNGED_PID=$!
	for _ in $(seq 100); do [ -S "$TMP/munge.socket" ] && break; sleep 0.05; done
	[ -S "$TMP/munge.socket" ]
}
