#!/bin/bash
# Everything a fresh Debian 12 machine needs to build rgpu and run its whole
# test suite (no GPU needed): packages, build (-Werror), `make check`
# (unit tests, emulated-device end-to-end tests, lease tests), then the
# Slurm mini-cluster tests (root only: network namespaces).
#
#   test/run-all.sh                     # all of it (as root, or a user with sudo)
#   RGPU_SKIP_SLURM=1 test/run-all.sh   # without the Slurm cluster
#   RGPU_BUILD_ONLY=1 test/run-all.sh   # packages and build, no tests
#   RGPU_NO_APT=1 test/run-all.sh       # never install packages
#
# The packages and the Slurm cluster need root: run by a user, the script
# runs itself again through sudo when it needs root and sudo is there (a
# fresh Debian image used as root has no sudo, and needs none).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

if [ "$(id -u)" -ne 0 ] && { [ -z "${RGPU_SKIP_SLURM:-}" ] || [ -z "${RGPU_NO_APT:-}" ]; }; then
	if command -v sudo >/dev/null; then
		echo "== not root: running again through sudo (packages, Slurm cluster)"
		exec sudo --preserve-env=RGPU_SKIP_SLURM,RGPU_NO_APT,RGPU_BUILD_ONLY,RGPU_SKIP_SANITIZERS,CUDA_HOME \
			bash "$top/test/run-all.sh" "$@"
	fi
	echo "== not root and no sudo: no packages installed, Slurm tests skipped"
	RGPU_NO_APT=1
	RGPU_SKIP_SLURM=1
fi
if [ -z "${RGPU_NO_APT:-}" ] && command -v apt-get >/dev/null; then
	pkgs="build-essential autoconf automake libtool pkg-config python3
	      libjson-c-dev libmunge-dev munge libibverbs-dev libslurm-dev
	      slurmctld slurmd slurm-client slurmdbd mariadb-server iproute2 valgrind
	      libmicrohttpd-dev curl clang libclang-rt-14-dev"
	missing=$(dpkg-query -W -f='${Package} ${Status}\n' $pkgs 2>/dev/null |
		  awk '$NF != "installed" {print $1}'; for p in $pkgs; do
		  dpkg-query -W "$p" >/dev/null 2>&1 || echo "$p"; done)
	if [ -n "$(echo $missing)" ]; then
		echo "== installing: $(echo $missing | tr ' ' '\n' | sort -u | tr '\n' ' ')"
		apt-get update -qq
		# the packages' services stay stopped (a policy-rc.d of our own where
		# the machine has none): the Slurm tests start munge, MariaDB and the
		# Slurm daemons themselves, in a scratch directory
		own_policy=
		if [ ! -e /usr/sbin/policy-rc.d ]; then
			printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && own_policy=1
		fi
		arc=0
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(echo $missing | tr ' ' '\n' | sort -u) >/dev/null || arc=$?
		[ -z "$own_policy" ] || rm -f /usr/sbin/policy-rc.d
		[ $arc -eq 0 ] || exit $arc
	fi
fi
if [ ! -e /usr/local/cuda/include/cuda.h ] && [ -z "${CUDA_HOME:-}" ]; then
	echo "CUDA toolkit not found at /usr/local/cuda (set CUDA_HOME)" >&2
	exit 1
fi

# libFuzzer harnesses (test/fuzz) where clang can link them
fuzz_opt=""
if command -v clang >/dev/null &&
   echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }' |
   clang -x c -fsanitize=fuzzer,address,undefined -o /tmp/rgpu-fuzz-probe.$$ - >/dev/null 2>&1; then
	fuzz_opt=--enable-fuzz
fi
rm -f /tmp/rgpu-fuzz-probe.$$

echo "== build (in _build: autoreconf, configure, make; a few minutes the first time)"
autoreconf -fi >/dev/null
mkdir -p _build
cd _build
echo "   configure"
../configure --enable-werror $fuzz_opt ${CUDA_HOME:+--with-cuda=$CUDA_HOME} >configure.out ||
	{ tail -20 configure.out; echo "configure failed (_build/config.log)"; exit 1; }
# progress: a line per 25 files compiled or linked (the output in
# _build/make.out and make.err)
rm -f make.rc
( make -j"$(nproc)" >make.out 2>make.err; echo $? >make.rc ) &
make_pid=$!
shown=0
while kill -0 "$make_pid" 2>/dev/null; do
	n=$(grep -c -E '^ +(CC|CCLD|GEN) ' make.out 2>/dev/null || true)
	n=${n:-0}
	if [ "$n" -ge $((shown + 25)) ]; then
		shown=$n
		echo "   make: $n files built"
	fi
	sleep 1
done
wait "$make_pid" || true
if [ "$(cat make.rc 2>/dev/null)" != 0 ]; then
	grep -E -B2 -A6 'error|Error' make.err | tail -40
	echo "make failed (_build/make.out, _build/make.err)"
	exit 1
fi
echo "   make: done ($(grep -c -E '^ +(CC|CCLD|GEN) ' make.out || true) files built)"

# contrib/demo.sh uses this script for its setup only
[ -z "${RGPU_BUILD_ONLY:-}" ] || exit 0

# Counts, labelled per suite, then one closing line for all of them
# (test/tally.sh: a skip is never a pass)
. "$top/test/tally.sh"

echo "== make check (client runs repeated under valgrind)"
status=0
: >check-started.stamp
if ! RGPU_VALGRIND=1 make -j"$(nproc)" check; then
	status=1
	for f in $(find . -name '*.log' -path '*test*' -newer check-started.stamp); do
		grep -q -E '^(FAIL|ERROR)' "$f" 2>/dev/null && { echo "---- $f"; tail -50 "$f"; }
	done
fi
# automake's .trs files of this run (one result per unit program, one per
# end-to-end check)
read -r p f s x <<<"$(trs_counts $(find . -name '*.trs' -newer check-started.stamp))"
summary "make check (unit, end to end, leases)" "$p" "$f" "$s" "$x"

# make install into a scratch DESTDIR: the unit, the plugstack example, the
# man pages, the docs and the programs agree on every path, and the files
# they name are installed
echo "== installed paths (make install DESTDIR=..., test/install/check-paths.sh)"
bash "$top/test/install/check-paths.sh" "$PWD" >install-paths.log 2>&1 || status=1
sed -n -e 's/^ok [0-9]* - \(.*\)/PASS: install \1/p' -e 's/^not ok [0-9]* - \(.*\)/FAIL: install \1/p' \
       -e 's/^Bail out!\(.*\)/ERROR: install\1/p' install-paths.log
read -r p f s x <<<"$(tap_counts install-paths.log)"
summary "installed paths (_build/install-paths.log)" "$p" "$f" "$s" "$x"

# rgpud and the emulated device again, built with AddressSanitizer and
# UBSan, serving the whole end-to-end suite (the script fails on any
# sanitizer report in their logs)
if [ -z "${RGPU_SKIP_SANITIZERS:-}" ]; then
	echo "== end-to-end suite against rgpud built with ASan/UBSan"
	mkdir -p "$top/_build-san"
	( cd "$top/_build-san" &&
	  ../configure --enable-werror --enable-sanitizers ${CUDA_HOME:+--with-cuda=$CUDA_HOME} >/dev/null &&
	  make -j"$(nproc)" -C lib >/dev/null && make -j"$(nproc)" -C emu >/dev/null &&
	  make -j"$(nproc)" -C daemon rgpud >/dev/null ) || { echo "FAIL: sanitizer build"; status=1; }
	if [ -x "$top/_build-san/daemon/rgpud" ]; then
		# (ASan keeps its heap at 0x600000000000, the default shared window;
		# an instrumented worker per session is slow to start: t_fuzz opens
		# about 1,500 sessions, hence the longer per-test limit)
		RGPU_TEST_TIMEOUT=${RGPU_TEST_TIMEOUT:-360} \
		RGPU_E2E_DAEMON_BUILD=$top/_build-san RGPU_E2E_LOGDIR=$PWD/e2e-san-logs \
		   RGPU_VA_BASE=0x400000000000 \
		   ASAN_OPTIONS=detect_leaks=1 top_builddir=$PWD bash "$top/test/e2e/run-e2e.sh" > e2e-san.log 2>&1 ||
			status=1
		# each check, as make check shows them
		sed -n -e 's/^ok [0-9]* - \(.*\) # *SKIP\(.*\)/SKIP: san \1 -\2/p' \
		       -e 's/^not ok [0-9]* - \(.*\) # *TODO\(.*\)/XFAIL: san \1 -\2/p' \
		       -e '/# *SKIP\|# *TODO/!s/^ok [0-9]* - \(.*\)/PASS: san \1/p' \
		       -e '/# *TODO/!s/^not ok [0-9]* - \(.*\)/FAIL: san \1/p' \
		       -e 's/^Bail out!\(.*\)/ERROR: san\1/p' e2e-san.log
		read -r p f s x <<<"$(tap_counts e2e-san.log)"
		if [ "$f" -gt 0 ]; then
			grep -E '^#' e2e-san.log | tail -30
		fi
		# and the parent's tests (test/parent) against the same rgpud
		RGPU_PARENT_DAEMON_BUILD=$top/_build-san RGPU_PARENT_LOGDIR=$PWD/parent-san-logs \
		   RGPU_VA_BASE=0x400000000000 ASAN_OPTIONS=detect_leaks=1 top_builddir=$PWD \
		   bash "$top/test/parent/run-parent.sh" > parent-san.log 2>&1 || status=1
		sed -n -e 's/^ok [0-9]* - \(.*\) # *SKIP\(.*\)/SKIP: san \1 -\2/p' \
		       -e '/# *SKIP/!s/^ok [0-9]* - \(.*\)/PASS: san \1/p' \
		       -e 's/^not ok [0-9]* - \(.*\)/FAIL: san \1/p' parent-san.log
		read -r p2 f2 s2 x2 <<<"$(tap_counts parent-san.log)"
		if [ "$f2" -gt 0 ]; then
			grep -E '^#' parent-san.log | tail -30
		fi
		# migration and recovery (test/migrate) against the same rgpud
		# (the VMM window away from ASan's heap, as above)
		RGPU_MIGRATE_DAEMON_BUILD=$top/_build-san RGPU_MIGRATE_LOGDIR=$PWD/migrate-san-logs \
		   RGPU_VA_BASE=0x400000000000 \
		   ASAN_OPTIONS=detect_leaks=1 top_builddir=$PWD \
		   bash "$top/test/migrate/run-migrate.sh" > migrate-san.log 2>&1 || status=1
		sed -n -e 's/^ok [0-9]* - \(.*\) # *SKIP\(.*\)/SKIP: san \1 -\2/p' \
		       -e '/# *SKIP/!s/^ok [0-9]* - \(.*\)/PASS: san \1/p' \
		       -e 's/^not ok [0-9]* - \(.*\)/FAIL: san \1/p' migrate-san.log
		read -r p3 f3 s3 x3 <<<"$(tap_counts migrate-san.log)"
		if [ "$f3" -gt 0 ]; then
			grep -E '^#' migrate-san.log | tail -30
		fi
		summary "end to end, rgpud under ASan/UBSan (_build/e2e-san.log)" "$p" "$f" "$s" "$x"
		summary "rgpud parent, rgpud under ASan/UBSan (_build/parent-san.log)" "$p2" "$f2" "$s2" "$x2"
		summary "migration, rgpud under ASan/UBSan (_build/migrate-san.log)" "$p3" "$f3" "$s3" "$x3"
		# the metrics endpoint and damaged lease files too (test/metrics,
		# test/chaos), failing on any sanitizer report in rgpud's logs
		for t in metrics/run-metrics.sh chaos/state-files.sh sched/run-sched.sh; do
			n=$(basename "$t" .sh)
			mkdir -p "san-$n" && rm -rf "san-$n"/*
			trc=0
			( cd "san-$n" && RGPU_E2E_DAEMON_BUILD=$top/_build-san ASAN_OPTIONS=detect_leaks=1 \
			  top_builddir=$OLDPWD bash "$top/test/$t" > out.txt 2>&1 ) || trc=$?
			if [ $trc -eq 77 ]; then
				echo "SKIP: $n with rgpud under ASan/UBSan"
				summary "$n, rgpud under ASan/UBSan (_build/san-$n)" 0 0 1
			elif [ $trc -eq 0 ] && ! grep -rqE 'ERROR: [A-Za-z]+Sanitizer|runtime error:' "san-$n"; then
				echo "PASS: $n with rgpud under ASan/UBSan"
				summary "$n, rgpud under ASan/UBSan (_build/san-$n)" 1 0 0
			else
				echo "FAIL: $n with rgpud under ASan/UBSan:"
				tail -20 "san-$n/out.txt"
				grep -rE -m5 'ERROR: [A-Za-z]+Sanitizer|runtime error:' "san-$n"
				summary "$n, rgpud under ASan/UBSan (_build/san-$n)" 0 1 0
				status=1
			fi
		done
	else
		summary "end to end, rgpud under ASan/UBSan (not built)" 0 1 0
	fi
fi

# A short pass of every fuzz harness (docs/fuzzing.md); the long one is
# `make fuzz FUZZ_SECONDS=... FUZZ_JOBS=...` on a big machine.
if [ -n "$fuzz_opt" ]; then
	echo "== fuzz: ${RGPU_FUZZ_SECONDS:-10} s per harness (make fuzz)"
	frc=0
	make fuzz FUZZ_SECONDS="${RGPU_FUZZ_SECONDS:-10}" FUZZ_RESULTS="$PWD/fuzz-short" \
		> fuzz-short.log 2>&1 || frc=1
	grep -E '^(PASS|FAIL)' fuzz-short.log || tail -20 fuzz-short.log
	fp=$(grep -c '^PASS' fuzz-short.log || true)
	ff=$(grep -c '^FAIL' fuzz-short.log || true)
	# a run that failed before any harness ran still counts as a failure
	[ "$frc" -eq 0 ] || [ "$ff" -gt 0 ] || ff=1
	[ "$frc" -eq 0 ] || status=1
	summary "fuzz, short pass (_build/fuzz-short.log, _build/fuzz-short/)" "$fp" "$ff" 0
else
	echo "SKIP: fuzz short pass: clang cannot link libFuzzer here (Debian: clang libclang-rt-14-dev)"
	summary "fuzz, short pass (no clang with libFuzzer)" 0 0 1
fi

if [ -z "${RGPU_SKIP_SLURM:-}" ] && [ -x "$top/test/slurm/run.sh" ]; then
	echo "== Slurm mini-cluster"
	set +e
	top_builddir=$PWD top_srcdir=$top "$top/test/slurm/run.sh" 2>&1 | tee slurm-tests.log
	rc=${PIPESTATUS[0]}
	set -e
	# its results: "PASS  name", "FAIL  name: why", "SKIP  name: why", each
	# once live and once more in its closing list (after "----")
	read -r sp sf ss <<<"$(slurm_counts slurm-tests.log)"
	case $rc in
	77) ss=1; echo "SKIP: Slurm mini-cluster: $(grep '^SKIP' slurm-tests.log | tail -1)" ;;
	0) ;;
	*) status=1
	   # a run that ended without its list still counts as a failure
	   [ "$sf" -gt 0 ] || sf=1 ;;
	esac
	summary "Slurm mini-cluster (_build/slurm-tests.log)" "$sp" "$sf" "$ss"

	# the README's demo, on this build: a job on the GPU-less node runs a
	# kernel on each of its two remote GPUs, named apart, and it says so
	if [ $rc -ne 77 ]; then
		echo "== contrib/demo.sh"
		drc=0
		bash "$top/contrib/demo.sh" "$PWD" >demo.log 2>&1 || drc=$?
		if [ $drc -eq 0 ] &&
		   grep -q '^demo: PASSED: .*2 remote GPU(s), each ran vec_add' demo.log &&
		   [ "$(grep -c '^   | device [01]: rgpu emulated device 0 on gpu[12], at ' demo.log)" = 2 ] &&
		   [ "$(grep -c 'every one checked: correct' demo.log)" = 2 ]; then
			echo "PASS: demo"; summary "demo (_build/demo.log)" 1 0 0
		else
			tail -30 demo.log; echo "FAIL: demo (exit $drc)"; summary "demo (_build/demo.log)" 0 1 0
			status=1
		fi
	fi
fi

# The failing checks again, last, where a CI log cut in the middle still
# shows them: each failing make-check log's own failure lines
if [ "$status" -ne 0 ] || [ "$FAIL" -ne 0 ]; then
	echo "== failed checks"
	for f in $(find . -name '*.log' -path '*test*' -newer check-started.stamp 2>/dev/null); do
		grep -q -E '^(FAIL|ERROR)' "$f" 2>/dev/null || continue
		echo "-- $f"
		grep -E '^(FAIL|ERROR|not ok|Bail out)|^    ' "$f" | tail -15
	done
fi
echo "== summary"
printf '%s' "$SUMMARY"
[ "$FAIL" -eq 0 ] || status=1
final_line
exit $status
