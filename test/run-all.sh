#!/bin/bash
# Everything a fresh Debian 12 machine needs to build rgpu and run its whole
# test suite (no GPU needed): packages, build (-Werror), `make check`
# (unit tests, emulated-device end-to-end tests, lease tests), then the
# Slurm mini-cluster tests (root only: network namespaces).
#
#   sudo test/run-all.sh            # all of it
#   RGPU_SKIP_SLURM=1 test/run-all.sh   # without the Slurm cluster
#   RGPU_BUILD_ONLY=1 test/run-all.sh   # packages and build, no tests
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
if [ -z "${RGPU_NO_APT:-}" ] && command -v apt-get >/dev/null; then
	pkgs="build-essential autoconf automake libtool pkg-config python3
	      libjson-c-dev libmunge-dev munge libibverbs-dev libslurm-dev
	      slurmctld slurmd slurm-client iproute2 valgrind libmicrohttpd-dev curl"
	missing=$(dpkg-query -W -f='${Package} ${Status}\n' $pkgs 2>/dev/null |
		  awk '$NF != "installed" {print $1}'; for p in $pkgs; do
		  dpkg-query -W "$p" >/dev/null 2>&1 || echo "$p"; done)
	if [ -n "$(echo $missing)" ]; then
		echo "== installing: $(echo $missing | tr ' ' '\n' | sort -u | tr '\n' ' ')"
		$SUDO apt-get update -qq
		DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $(echo $missing | tr ' ' '\n' | sort -u) >/dev/null
	fi
fi
if [ ! -e /usr/local/cuda/include/cuda.h ] && [ -z "${CUDA_HOME:-}" ]; then
	echo "CUDA toolkit not found at /usr/local/cuda (set CUDA_HOME)" >&2
	exit 1
fi

echo "== build"
autoreconf -fi >/dev/null
mkdir -p _build
cd _build
../configure --enable-werror ${CUDA_HOME:+--with-cuda=$CUDA_HOME} >/dev/null
make -j"$(nproc)" >/dev/null

# contrib/demo.sh uses this script for its setup only
[ -z "${RGPU_BUILD_ONLY:-}" ] || exit 0

echo "== make check (client runs repeated under valgrind)"
status=0
if ! RGPU_VALGRIND=1 make -j"$(nproc)" check; then
	status=1
	for f in $(find . -name '*.log' -path '*test*' -newer config.status); do
		grep -q -E '^(FAIL|ERROR)' "$f" 2>/dev/null && { echo "---- $f"; tail -50 "$f"; }
	done
fi

# rgpud and the emulated device again, built with AddressSanitizer and
# UBSan, serving the whole end-to-end suite (the script fails on any
# sanitizer report in their logs)
if [ -z "${RGPU_SKIP_SANITIZERS:-}" ]; then
	echo "== rgpud under ASan/UBSan"
	mkdir -p "$top/_build-san"
	( cd "$top/_build-san" &&
	  ../configure --enable-werror --enable-sanitizers ${CUDA_HOME:+--with-cuda=$CUDA_HOME} >/dev/null &&
	  make -j"$(nproc)" -C lib >/dev/null && make -j"$(nproc)" -C emu >/dev/null &&
	  make -j"$(nproc)" -C daemon rgpud >/dev/null ) || { echo "sanitizer build failed"; status=1; }
	if [ -x "$top/_build-san/daemon/rgpud" ]; then
		# (ASan keeps its heap at 0x600000000000, the default shared window)
		if RGPU_E2E_DAEMON_BUILD=$top/_build-san RGPU_E2E_LOGDIR=$PWD/e2e-san-logs \
		   RGPU_VA_BASE=0x400000000000 \
		   ASAN_OPTIONS=detect_leaks=1 top_builddir=$PWD bash "$top/test/e2e/run-e2e.sh" > e2e-san.log 2>&1; then
			echo "PASS: e2e with rgpud under ASan/UBSan"
			san_pass=1
		else
			echo "FAIL: e2e with rgpud under ASan/UBSan:"
			tail -30 e2e-san.log
			san_fail=1
			status=1
		fi
		# the metrics endpoint and damaged lease files, too
		for t in metrics/run-metrics.sh chaos/state-files.sh; do
			n=$(basename "$t" .sh)
			mkdir -p "san-$n" && rm -rf "san-$n"/*
			if ( cd "san-$n" && RGPU_E2E_DAEMON_BUILD=$top/_build-san ASAN_OPTIONS=detect_leaks=1 \
			     top_builddir=$OLDPWD bash "$top/test/$t" > out.txt 2>&1 ) &&
			   ! grep -rqE 'ERROR: [A-Za-z]+Sanitizer|runtime error:' "san-$n"; then
				echo "PASS: $n with rgpud under ASan/UBSan"
				san_pass=$((${san_pass:-0} + 1))
			else
				echo "FAIL: $n with rgpud under ASan/UBSan:"
				tail -20 "san-$n/out.txt"
				grep -rE -m5 'ERROR: [A-Za-z]+Sanitizer|runtime error:' "san-$n"
				san_fail=$((${san_fail:-0} + 1))
				status=1
			fi
		done
	fi
fi

if [ -z "${RGPU_SKIP_SLURM:-}" ] && [ -x "$top/test/slurm/run.sh" ]; then
	echo "== Slurm mini-cluster"
	set +e
	top_builddir=$PWD top_srcdir=$top "$top/test/slurm/run.sh" 2>&1 | tee slurm-tests.log
	rc=${PIPESTATUS[0]}
	set -e
	# its closing line "N passed, M failed"
	last=$(grep -E '^[0-9]+ passed, [0-9]+ failed' slurm-tests.log | tail -1)
	slurm_pass=$(echo "$last" | awk '{print $1+0}')
	slurm_fail=$(echo "$last" | awk '{print $3+0}')
	case $rc in
	0) ;;
	77) echo "Slurm tests skipped (need root and iproute2)" ;;
	*) status=1 ;;
	esac
fi
# one closing line for every suite: automake's .trs files and the Slurm run
pass=$(cat $(find . -name '*.trs') 2>/dev/null | grep -c '^:test-result: \(PASS\|XFAIL\|SKIP\)' || true)
fail=$(cat $(find . -name '*.trs') 2>/dev/null | grep -c '^:test-result: \(FAIL\|XPASS\|ERROR\)' || true)
if [ -n "${slurm_pass:-}" ]; then
	pass=$((pass + slurm_pass))
	fail=$((fail + slurm_fail))
fi
pass=$((pass + ${san_pass:-0}))
fail=$((fail + ${san_fail:-0}))
echo "$pass passed, $fail failed"
exit $status
