# Mini-cluster on one machine: munge, slurmctld and three slurmd, each slurmd
# in its own network namespace on a private bridge, plus rgpud (emulated GPUs,
# leases on) on the two GPU nodes.  Sourced by test/slurm/run.sh and
# contrib/demo.sh; needs root and iproute2.
#
#   cpu1  10.77.0.11  no GPUs
#   gpu1  10.77.0.12  rgpud, 2 emulated GPUs
#   gpu2  10.77.0.13  rgpud, 2 emulated GPUs
#   slurmctld on the bridge address 10.77.0.1 (root namespace)
#   slurmdbd beside it (port 16819) over MariaDB on 127.0.0.1:16820, both
#   plain processes whose data lives in the scratch directory; when
#   slurmdbd or mariadbd is not installed the cluster keeps no accounting
#   (RC_DBD=auto, the default; 1 requires it, 0 never starts it)
#
# Traffic stays on the bridge: nothing is routed out of it.

RC_BR=rgpubr0
RC_NET=10.77.0
RC_NODES="cpu1 gpu1 gpu2"
RC_GPU_NODES="gpu1 gpu2"
RC_CTLD_PORT=16817
RC_SLURMD_PORT=16818
RC_RGPU_PORT=7420
RC_DBD_PORT=16819
RC_DB_PORT=16820
: "${RC_DBD:=auto}"
: "${RC_EMU_DEVICES:=2}"
: "${RC_EMU_MEM:=4G}"
# Hooks for a machine whose Slurm is not installed in the usual places
# (test/slurm/gpu-machine.sh); they change nothing when unset.  RC_RGPUD_ARGS
# replaces --emulated (e.g. --driver=PATH for a real GPU), RC_SLURMD_ARGS is
# added to slurmd's command line (e.g. -d PATH/slurmstepd), RC_CONF_EXTRA
# (lines) is appended to slurm.conf (e.g. PluginDir=...).
: "${RC_RGPUD_ARGS=--emulated}"
: "${RC_SLURMD_ARGS=}"
: "${RC_CONF_EXTRA=}"

rc_log() { echo "[cluster] $*" >&2; }

# Closes every descriptor above 2 of the calling (sub)shell: a daemon must
# not inherit the caller's lock (flock /tmp/rgpu-slurm.lock ...) or pipes, or
# it holds them as long as it lives.
rc_nofds() {
	local fd
	for fd in /proc/$BASHPID/fd/*; do
		fd=${fd##*/}
		[ "$fd" -gt 2 ] 2>/dev/null && eval "exec $fd>&-"
	done
	return 0
}

rc_addr() {
	case $1 in
	cpu1) echo $RC_NET.11 ;; gpu1) echo $RC_NET.12 ;; gpu2) echo $RC_NET.13 ;;
	esac
}

rc_ns() { echo "rgpu-$1"; }

# Run a command inside a node's network namespace.  nsenter, not
# `ip netns exec`: the latter remounts /sys and slurmd then finds no cgroups.
rc_in() {
	local n=$1; shift
	nsenter --net=/run/netns/"$(rc_ns "$n")" "$@"
}

# $1: repository root, $2: build dir.  Sets RC_DIR (scratch), exports
# SLURM_CONF so sbatch/squeue/scontrol talk to this cluster.
rc_up() {
	RC_SRC=$1
	RC_BUILD=$2
	RC_DIR=$(mktemp -d /tmp/rgpu-slurm.XXXXXX)
	chmod 755 "$RC_DIR"
	mkdir -p "$RC_DIR/work" "$RC_DIR/state"
	chmod 1777 "$RC_DIR/work"
	export SLURM_CONF=$RC_DIR/slurm.conf
	rc_net_up || return 1
	rc_munge_up || return 1
	rc_dbd_wanted || return 1
	rc_write_conf || return 1
	if [ "$RC_DBD_ON" = 1 ]; then rc_dbd_up || return 1; fi
	rc_rgpud_up || return 1
	rc_slurm_up || return 1
}

rc_net_up() {
	rc_net_down 2>/dev/null
	ip link add $RC_BR type bridge || return 1
	ip addr add $RC_NET.1/24 dev $RC_BR
	ip link set $RC_BR up
	local n i=0
	for n in $RC_NODES; do
		i=$((i + 1))
		ip netns add "$(rc_ns $n)" || return 1
		ip link add "rgpuv$i" type veth peer name "rgpuv${i}p" || return 1
		ip link set "rgpuv${i}p" netns "$(rc_ns $n)"
		ip link set "rgpuv$i" master $RC_BR up
		ip -n "$(rc_ns $n)" link set lo up
		ip -n "$(rc_ns $n)" link set "rgpuv${i}p" name eth0
		ip -n "$(rc_ns $n)" addr add "$(rc_addr $n)/24" dev eth0
		ip -n "$(rc_ns $n)" link set eth0 up
	done
}

rc_net_down() {
	local n i=0
	for n in $RC_NODES; do
		i=$((i + 1))
		ip link del "rgpuv$i" 2>/dev/null
		ip netns del "$(rc_ns $n)" 2>/dev/null
	done
	ip link del $RC_BR 2>/dev/null
	return 0
}

# Reuse a running munged (it may serve a real Slurm); start one otherwise
# and remember that we did.
rc_munge_up() {
	RC_MUNGE_STARTED=
	if munge -n </dev/null >/dev/null 2>&1; then
		return 0
	fi
	mkdir -p /run/munge && chown munge:munge /run/munge && chmod 755 /run/munge
	( rc_nofds; exec runuser -u munge -- /usr/sbin/munged ) || { rc_log "munged failed to start"; return 1; }
	RC_MUNGE_STARTED=1
	local t
	for t in 1 2 3 4 5 6 7 8 9 10; do
		munge -n </dev/null >/dev/null 2>&1 && return 0
		sleep 0.3
	done
	rc_log "munged does not answer"
	return 1
}

rc_munge_down() {
	[ -n "${RC_MUNGE_STARTED:-}" ] || return 0
	local pid
	pid=$(cat /run/munge/munged.pid 2>/dev/null)
	[ -n "$pid" ] && kill "$pid" 2>/dev/null
	RC_MUNGE_STARTED=
}

rc_write_conf() {
	local host
	host=$(hostname -s)
	local ngpu=0 n mib
	for n in $RC_GPU_NODES; do ngpu=$((ngpu + RC_EMU_DEVICES)); done
	# the license counts GPU memory in MiB (job_submit.lua)
	case $RC_EMU_MEM in
	*G) mib=$(( ${RC_EMU_MEM%G} * 1024 )) ;; *M) mib=${RC_EMU_MEM%M} ;; *) mib=$RC_EMU_MEM ;;
	esac
	# The same shape as contrib/slurm.conf.example, with per-node paths
	# because every slurmd shares this file system.
	cat >"$RC_DIR/slurm.conf" <<EOF
ClusterName=rgputest
SlurmctldHost=$host($RC_NET.1)
SlurmctldPort=$RC_CTLD_PORT
SlurmdPort=$RC_SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$RC_DIR/state
SlurmctldPidFile=$RC_DIR/slurmctld.pid
SlurmctldLogFile=$RC_DIR/slurmctld.log
SlurmdPidFile=$RC_DIR/%n/slurmd.pid
SlurmdSpoolDir=$RC_DIR/%n/spool
SlurmdLogFile=$RC_DIR/%n/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
$(rc_acct_conf)
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=10
InactiveLimit=0
KillWait=5
MinJobAge=300
PlugStackConfig=$RC_DIR/plugstack.conf
PrologFlags=Alloc
JobSubmitPlugins=lua
GresTypes=rgpu
Licenses=rgpu:$((ngpu * mib)),rgpushare:$((ngpu * 100))
NodeName=cpu1 NodeAddr=$(rc_addr cpu1) NodeHostname=cpu1 CPUs=2 RealMemory=1000 State=UNKNOWN
NodeName=gpu1 NodeAddr=$(rc_addr gpu1) NodeHostname=gpu1 CPUs=2 RealMemory=1000 Gres=rgpu:$RC_EMU_DEVICES State=UNKNOWN
NodeName=gpu2 NodeAddr=$(rc_addr gpu2) NodeHostname=gpu2 CPUs=2 RealMemory=1000 Gres=rgpu:$RC_EMU_DEVICES State=UNKNOWN
PartitionName=main Nodes=cpu1,gpu1,gpu2 Default=YES MaxTime=30 State=UP OverSubscribe=YES
EOF
	[ -z "$RC_CONF_EXTRA" ] || printf '%s\n' "$RC_CONF_EXTRA" >>"$RC_DIR/slurm.conf"
	cat >"$RC_DIR/gres.conf" <<EOF
NodeName=gpu[1-2] Name=rgpu Count=$RC_EMU_DEVICES
EOF
	cp "$RC_SRC/contrib/job_submit.lua" "$RC_DIR/job_submit.lua" || return 1
	cat >"$RC_DIR/plugstack.conf" <<EOF
required $RC_BUILD/spank/.libs/spank_rgpu.so client_dir=$RC_BUILD/client/.libs port=$RC_RGPU_PORT state_dir=$RC_DIR/rgpu-state/%n ttl=30
EOF
	for n in $RC_NODES; do mkdir -p "$RC_DIR/$n/spool"; done
}

# Accounting: RC_DBD_ON=1 when slurmdbd and MariaDB are to run (RC_DBD=1,
# or auto and both installed).
rc_dbd_wanted() {
	RC_DBD_ON=0
	[ "$RC_DBD" = 0 ] && return 0
	if command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null &&
	   command -v mariadb-install-db >/dev/null && command -v sacctmgr >/dev/null; then
		RC_DBD_ON=1
		return 0
	fi
	[ "$RC_DBD" = auto ] && { rc_log "no slurmdbd or mariadbd: no accounting database"; return 0; }
	rc_log "RC_DBD=1 but slurmdbd, sacctmgr, mariadbd or mariadb-install-db is missing"
	return 1
}

# slurm.conf's accounting lines.  The license TRES make sacct show each
# job's rgpu allocation (AllocTRES); slurmctld refuses them without slurmdbd.
rc_acct_conf() {
	if [ "${RC_DBD_ON:-0}" = 1 ]; then
		cat <<EOF
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$RC_NET.1
AccountingStoragePort=$RC_DBD_PORT
AccountingStorageTRES=license/rgpu,license/rgpushare
EOF
	else
		echo "AccountingStorageType=accounting_storage/none"
	fi
}

# MariaDB and slurmdbd, as plain processes of this run (no systemd, no
# /etc/mysql: --no-defaults everywhere): the data directory, socket and
# logs are in $RC_DIR/db, and the server listens on 127.0.0.1 only, on its
# own port, so a MariaDB the machine already runs is left alone.  mariadbd
# runs as root (--user=root) like every daemon of this cluster.
rc_dbd_up() {
	local db=$RC_DIR/db t
	mkdir -p "$db"
	# small InnoDB logs: the default 96 MiB file is written out in full
	mariadb-install-db --no-defaults --datadir="$db/data" --user=root \
		--auth-root-authentication-method=socket --skip-test-db \
		--innodb-log-file-size=8M >"$db/install.log" 2>&1 ||
		{ rc_log "mariadb-install-db failed:"; tail -n 5 "$db/install.log" >&2; return 1; }
	( rc_nofds; exec mariadbd --no-defaults --datadir="$db/data" --user=root \
		--socket="$db/mysql.sock" --pid-file="$db/mariadbd.pid" \
		--bind-address=127.0.0.1 --port=$RC_DB_PORT --skip-name-resolve \
		--innodb-log-file-size=8M --innodb-lock-wait-timeout=900 \
		--log-error="$db/mariadbd.log" ) >/dev/null 2>&1 &
	echo $! >"$db/mariadbd.dpid"
	for t in $(seq 1 60); do
		mariadb --no-defaults --socket="$db/mysql.sock" -u root -e 'select 1' >/dev/null 2>&1 && break
		kill -0 "$(cat "$db/mariadbd.dpid")" 2>/dev/null ||
			{ rc_log "mariadbd exited:"; tail -n 5 "$db/mariadbd.log" >&2; return 1; }
		sleep 0.5
	done
	# root logs in through the socket as the OS user; slurmdbd over TCP,
	# with a password of this run
	RC_DB_PASS=rgpu$$$RANDOM
	mariadb --no-defaults --socket="$db/mysql.sock" -u root -e "
		CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$RC_DB_PASS';
		GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" 2>"$db/grant.err" ||
		{ rc_log "mariadb: cannot create the slurm user: $(cat "$db/grant.err")"; return 1; }
	# slurmdbd reads slurmdbd.conf beside $SLURM_CONF; it must be 0600 and
	# owned by SlurmUser (root)
	cat >"$RC_DIR/slurmdbd.conf" <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdPort=$RC_DBD_PORT
SlurmUser=root
LogFile=$RC_DIR/slurmdbd.log
PidFile=$RC_DIR/slurmdbd.pid
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$RC_DB_PORT
StorageUser=slurm
StoragePass=$RC_DB_PASS
StorageLoc=slurm_acct_db
EOF
	chmod 600 "$RC_DIR/slurmdbd.conf"
	( rc_nofds; exec slurmdbd -D ) >"$RC_DIR/slurmdbd.out" 2>&1 &
	echo $! >"$RC_DIR/slurmdbd.dpid"
	# ready once it answers; then the cluster, an account and the test's
	# users, so every job has an association
	for t in $(seq 1 60); do
		sacctmgr -n -P show cluster >/dev/null 2>&1 && break
		kill -0 "$(cat "$RC_DIR/slurmdbd.dpid")" 2>/dev/null ||
			{ rc_log "slurmdbd exited:"; tail -n 5 "$RC_DIR/slurmdbd.out" >&2; return 1; }
		sleep 0.5
	done
	sacctmgr -i add cluster rgputest >"$RC_DIR/sacctmgr.out" 2>&1 &&
	sacctmgr -i add account rgputest cluster=rgputest >>"$RC_DIR/sacctmgr.out" 2>&1 &&
	sacctmgr -i add user root,nobody account=rgputest cluster=rgputest >>"$RC_DIR/sacctmgr.out" 2>&1 ||
		{ rc_log "sacctmgr failed:"; tail -n 5 "$RC_DIR/sacctmgr.out" >&2; return 1; }
}

rc_rgpud_up() {
	local n bin=$RC_BUILD/daemon/rgpud
	if [ ! -x "$bin" ]; then
		rc_log "no $bin: GPU nodes run without rgpud"
		return 0
	fi
	for n in $RC_GPU_NODES; do
		mkdir -p "$RC_DIR/$n/rgpud"
		( rc_nofds; RGPU_EMU_DEVICES=$RC_EMU_DEVICES RGPU_EMU_MEM=$RC_EMU_MEM RGPU_EMU_TAG=$n \
			exec nsenter --net=/run/netns/"$(rc_ns $n)" "$bin" --listen "$(rc_addr $n):$RC_RGPU_PORT" \
			$RC_RGPUD_ARGS --leases --state-dir "$RC_DIR/$n/rgpud" \
			--slurm-user root ) >"$RC_DIR/$n/rgpud.log" 2>&1 &
		echo $! >"$RC_DIR/$n/rgpud.pid"
	done
}

rc_slurm_up() {
	( rc_nofds; exec slurmctld -D -i -f "$RC_DIR/slurm.conf" ) >"$RC_DIR/slurmctld.out" 2>&1 &
	echo $! >"$RC_DIR/slurmctld.dpid"
	local n
	for n in $RC_NODES; do
		( rc_nofds; exec nsenter --net=/run/netns/"$(rc_ns $n)" slurmd -D -N $n $RC_SLURMD_ARGS -f "$RC_DIR/slurm.conf" ) >"$RC_DIR/$n/slurmd.out" 2>&1 &
		echo $! >"$RC_DIR/$n/slurmd.dpid"
	done
	# Nodes come up idle within a few seconds.
	local t idle
	for t in $(seq 1 60); do
		idle=$(sinfo -h -N -o '%N %t' 2>/dev/null | grep -c ' idle')
		[ "$idle" = 3 ] && return 0
		if ! kill -0 "$(cat "$RC_DIR/slurmctld.dpid")" 2>/dev/null; then
			rc_log "slurmctld exited:"
			tail -n 5 "$RC_DIR/slurmctld.log" >&2
			return 1
		fi
		sleep 1
	done
	rc_log "nodes did not come up idle:"
	sinfo -N -o '%N %t %E' >&2
	return 1
}

# Stop one daemon by the pid we recorded, then wait for it.
rc_kill_pidfile() {
	local f=$1 pid
	[ -f "$f" ] || return 0
	pid=$(cat "$f")
	[ -n "$pid" ] && kill "$pid" 2>/dev/null
	local t
	for t in 1 2 3 4 5 6 7 8 9 10; do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.3
	done
	kill -9 "$pid" 2>/dev/null
	rm -f "$f"
}

# Tear everything down; safe to call twice and after a partial rc_up.
rc_down() {
	[ -n "${RC_DIR:-}" ] || { rc_net_down; return 0; }
	if [ -f "$RC_DIR/slurmctld.dpid" ]; then
		# Jobs first, so no slurmstepd outlives its slurmd.
		scancel -u root >/dev/null 2>&1
		scancel -u nobody >/dev/null 2>&1
		local t
		for t in $(seq 1 20); do
			[ -z "$(squeue -h -t R,CG 2>/dev/null)" ] && break
			sleep 0.5
		done
	fi
	local n
	for n in $RC_NODES; do
		rc_kill_pidfile "$RC_DIR/$n/slurmd.dpid"
		rc_kill_pidfile "$RC_DIR/$n/rgpud.pid"
	done
	rc_kill_pidfile "$RC_DIR/slurmctld.dpid"
	rc_kill_pidfile "$RC_DIR/slurmdbd.dpid"
	rc_kill_pidfile "$RC_DIR/db/mariadbd.dpid"
	rc_munge_down
	rc_net_down
	if [ -z "${RC_KEEP:-}" ]; then
		rm -rf "$RC_DIR"
	else
		rc_log "kept $RC_DIR"
	fi
	RC_DIR=
}
