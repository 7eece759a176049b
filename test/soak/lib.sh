# Shared by the metrics, soak and chaos tests (sourced): build-tree paths,
# free ports, starting and stopping rgpud, reading a process's resources.
#
# Environment: top_builddir (set by `make check`), PYTHON.
# Sets: RGPUD, SESS (rgpu_sessions), LOGDIR (./<suite>-logs).
# RGPU_E2E_DAEMON_BUILD: see below.

: "${top_builddir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${PYTHON:=python3}"
# RGPU_E2E_DAEMON_BUILD: another build tree whose rgpud and emulated device
# serve (the ASan/UBSan build: test/run-all.sh); the clients stay this tree's
DAEMON_BUILD=${RGPU_E2E_DAEMON_BUILD:-$top_builddir}
RGPUD=$DAEMON_BUILD/daemon/rgpud
SESS=$top_builddir/test/soak/rgpu_sessions
export RGPU_EMU_LIB=$DAEMON_BUILD/emu/.libs/librgpu-emu.so

t_need_build() {
	local m=""
	[ -x "$RGPUD" ] || m="$m $RGPUD"
	[ -x "$SESS" ] || m="$m $SESS"
	[ -e "$RGPU_EMU_LIB" ] || m="$m $RGPU_EMU_LIB"
	if [ -n "$m" ]; then
		echo "SKIP: not built:$m"
		exit 77
	fi
}

t_logdir() { # suite name
	LOGDIR=$PWD/$1-logs
	rm -rf "$LOGDIR"
	mkdir -p "$LOGDIR"
}

FAILS=0
t_ok() { echo "ok: $*"; }
t_fail() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }
t_check() { # description command...
	local what=$1
	shift
	if "$@"; then t_ok "$what"; else t_fail "$what"; fi
}

# rgpud serves --metrics (built with libmicrohttpd)
have_metrics() { grep -q '^#define HAVE_MICROHTTPD 1' "$DAEMON_BUILD/config.h" 2>/dev/null; }
need_metrics() {
	have_metrics && return 0
	echo "SKIP: rgpud was built without libmicrohttpd (no --metrics)"
	exit 77
}

free_port() {
	"$PYTHON" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

T_PIDS=""
t_cleanup() {
	local p
	for p in $T_PIDS; do kill "$p" 2>/dev/null; done
	for p in $T_PIDS; do wait "$p" 2>/dev/null; done
	T_PIDS=""
}
trap t_cleanup EXIT
trap 'exit 130' INT TERM

# start_rgpud NAME [ARGS...]: rgpud --emulated on a free loopback port,
# logging to $LOGDIR/NAME.log (appended: a restart keeps the first log).
# Sets PORT (reused when already set: a restart) and RGPUD_PID.
start_rgpud() {
	local name=$1 try
	shift
	for try in 1 2 3 4 5; do
		[ -n "${KEEP_PORT:-}" ] || PORT=$(free_port)
		"$RGPUD" --emulated --listen "127.0.0.1:$PORT" "$@" >>"$LOGDIR/$name.log" 2>&1 &
		RGPUD_PID=$!
		for _ in $(seq 1 100); do
			kill -0 "$RGPUD_PID" 2>/dev/null || break
			if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
				T_PIDS="$T_PIDS $RGPUD_PID"
				return 0
			fi
			sleep 0.1
		done
		kill "$RGPUD_PID" 2>/dev/null
		wait "$RGPUD_PID" 2>/dev/null
		[ -n "${KEEP_PORT:-}" ] && sleep 1
	done
	echo "FAIL: rgpud ($name) did not come up:"
	tail -20 "$LOGDIR/$name.log"
	exit 1
}

stop_rgpud() { # pid
	kill "$1" 2>/dev/null
	wait "$1" 2>/dev/null
}

# A process's threads, open descriptors and resident memory (KiB).
proc_threads() { awk '/^Threads:/ {print $2}' "/proc/$1/status"; }
proc_rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
proc_fds() { ls "/proc/$1/fd" | wc -l; }
proc_children() { # direct children of pid
	cat /proc/"$1"/task/*/children 2>/dev/null | tr ' ' '\n' | grep -c .
}

# wait_until SECONDS command...: polls every 0.1 s
wait_until() {
	local n=$(( $1 * 10 ))
	shift
	while [ $n -gt 0 ]; do
		"$@" && return 0
		sleep 0.1
		n=$((n - 1))
	done
	return 1
}

# start_munged: a private munged in $LOGDIR/munge (root only, as the lease
# tests do); exports RGPU_MUNGE_SOCKET.  Returns 1 when it cannot run here.
start_munged() {
	local m d=$LOGDIR/munge
	m=$(command -v munged || ls /usr/sbin/munged 2>/dev/null) || return 1
	[ "$(id -u)" = 0 ] || return 1
	mkdir -p "$d" && chmod 0755 "$d"
	head -c 1024 /dev/urandom >"$d/munge.key" && chmod 0600 "$d/munge.key"
	"$m" --foreground --key-file="$d/munge.key" --socket="$d/munge.socket" \
		--pid-file="$d/munged.pid" --log-file="$d/munged.log" --seed-file="$d/munged.seed" \
		</dev/null >/dev/null 2>&1 &
	MUNGED_PID=$!
	T_PIDS="$T_PIDS $MUNGED_PID"
	wait_until 10 test -S "$d/munge.socket" || return 1
	export RGPU_MUNGE_SOCKET=$d/munge.socket
}
