#!/bin/bash
# `make install DESTDIR=...` from a configured build, then: the systemd unit,
# the plugstack example, the man pages, the docs and the programs name the
# same paths, and every installed file they name exists in the installed
# tree.  TAP output (one line per check); exit 1 on a failure.
#
#   test/install/check-paths.sh [BUILD_DIR]     (default: _build)
#
# Paths a fresh install does not hold by design are allowed: the options
# file the administrator writes ($sysconfdir/default/rgpud) and what the
# programs write at run time under the state directory.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
B=$(cd "${1:-$HERE/../../_build}" && pwd) || { echo "Bail out! no build dir"; exit 1; }
D=$(mktemp -d "${TMPDIR:-/tmp}/rgpu-install.XXXXXX")
trap 'rm -rf "$D"' EXIT

N=0 FAILS=0
ok() { # name status(0 ok) why
	N=$((N + 1))
	if [ "$2" -eq 0 ]; then echo "ok $N - $1"
	else echo "not ok $N - $1 ($3)"; FAILS=$((FAILS + 1)); fi
}

if ! make -C "$B" install DESTDIR="$D" >"$D.install.log" 2>&1; then
	sed 's/^/# /' "$D.install.log" | tail -20
	rm -f "$D.install.log"
	echo "Bail out! make install DESTDIR=$D failed"
	exit 1
fi
rm -f "$D.install.log"

# configure's directories, as make expands them
dir() { make -s --no-print-directory -C "$B" -f Makefile -f - "print-$1" <<<'print-%: ; @echo $($*)'; }
prefix=$(dir prefix) sbindir=$(dir sbindir) bindir=$(dir bindir) sysconfdir=$(dir sysconfdir)
docdir=$(dir docdir) mandir=$(dir mandir) clientdir=$(dir clientdir) spankdir=$(dir spankdir)
statedir=$(dir rgpustatedir) unitdir=$(dir systemdsystemunitdir)
echo "# prefix $prefix, state $statedir, installed into $D"
for v in prefix sbindir bindir sysconfdir docdir mandir clientdir spankdir statedir unitdir; do
	[ -n "${!v}" ] || { echo "Bail out! cannot read $v from $B/Makefile"; exit 1; }
done

unit=$D$unitdir/rgpud.service
plug=$D$docdir/examples/plugstack.conf.example
deflt=$D$docdir/examples/rgpud.default
admin=$D$docdir/admin.md
man8=$D$mandir/man8/rgpud.8
man1=$D$mandir/man1/rgpu.1
for f in "$unit" "$plug" "$deflt" "$admin" "$man8" "$man1" "$D$sbindir/rgpud" "$D$bindir/rgpu" \
	 "$D$clientdir/libcuda.so.1" "$D$clientdir/libnvidia-ml.so.1" "$D$docdir/README.md"; do
	[ -e "$f" ]; ok "installed: ${f#$D}" $? "missing"
done
[ -d "$D$statedir" ]; ok "installed: state directory $statedir" $? "missing"
# spank_rgpu.so only where the Slurm headers were found
have_spank=0
grep -q '^spank_LTLIBRARIES' "$B/spank/Makefile" && have_spank=1

# the unit
val() { sed -n "s/^$1=//p" "$unit" | head -1; }
exe=$(val ExecStart | awk '{print $1}')
[ "$exe" = "$sbindir/rgpud" ] && [ -x "$D$exe" ]
ok "unit ExecStart runs the installed rgpud" $? "ExecStart=$exe, rgpud is $sbindir/rgpud"
[ "$(val EnvironmentFile)" = "-$sysconfdir/default/rgpud" ]
ok "unit EnvironmentFile is \$sysconfdir/default/rgpud" $? "$(val EnvironmentFile)"
docs=$(val Documentation | grep -o 'file://[^ ]*' | sed 's|^file://||')
[ -n "$docs" ] && [ -e "$D$docs" ]
ok "unit Documentation names the installed admin.md" $? "file://$docs not installed"
! grep -q 'StateDirectory=' "$unit" || grep -q "^StateDirectory=${statedir#/var/lib/}\$" "$unit"
ok "unit StateDirectory (if any) is the state directory" $? "$(grep StateDirectory= "$unit")"

# the plugstack example: the plugin and the client directory
line=$(grep -E '^(required|optional)' "$plug" | head -1)
so=$(echo "$line" | awk '{print $2}')
cdir=$(echo "$line" | grep -o 'client_dir=[^ ]*' | cut -d= -f2)
[ "$so" = "$spankdir/spank_rgpu.so" ] && { [ $have_spank = 0 ] || [ -e "$D$so" ]; }
ok "plugstack example names the installed plugin" $? "$so (plugin is $spankdir/spank_rgpu.so)"
[ "$cdir" = "$clientdir" ] && [ -e "$D$cdir/libcuda.so.1" ]
ok "plugstack example client_dir holds the client" $? "client_dir=$cdir (client in $clientdir)"
grep -q "(default $statedir)" "$plug"
ok "plugstack example state_dir default is the state directory" $? "$(grep -o '(default [^)]*lib[^)]*)' "$plug" | tr '\n' ' ')"

# the programs' own defaults
help_state=$("$D$sbindir/rgpud" --help 2>&1 | sed -n 's/.*--state-dir.*(default \(.*\)).*/\1/p')
[ "$help_state" = "$statedir" ]
ok "rgpud --help state dir default" $? "'$help_state'"
rgpu_state=$("$D$bindir/rgpu" --help 2>&1 | sed -n 's/.*default DIR \([^)]*\)).*/\1/p')
[ "$rgpu_state" = "$statedir" ]
ok "rgpu --help state dir default" $? "'$rgpu_state'"

# the man pages and the docs say the same
grep -q "default $statedir)" "$man8"
ok "rgpud(8) --state-dir default" $? "$(grep -n 'state' "$man8" | head -2 | tr '\n' ' ')"
grep -qF "$statedir/snapshot.json" "$man1" && grep -qF "$statedir" "$man1"
ok "rgpu(1) state directory" $? "no $statedir in rgpu.1"
for p in "$spankdir/spank_rgpu.so" "$clientdir" "$sbindir/rgpud" "$statedir" \
	 "$sysconfdir/default/rgpud" "$unitdir/rgpud.service"; do
	grep -qF "$p" "$admin"
	ok "admin.md names $p" $? "missing"
done
grep -F "client_dir=" "$admin" | grep -qF "$spankdir/spank_rgpu.so client_dir=$clientdir"
ok "admin.md plugstack line is the example's" $? "$(grep -F client_dir= "$admin" | head -1)"

# every path under the prefix (or /etc, /var) named by these files exists
# in the installed tree, except the allowed ones; nothing names another
# layout (/usr/lib/x86_64-linux-gnu, /var/lib/rgpud, ...)
allowed() {
	case $1 in
	"$sysconfdir/default/rgpud") return 0 ;;
	"$statedir"/*) return 0 ;;   # written at run time
	/etc/slurm/*) return 0 ;;    # Slurm's own files
	/usr|/etc|/var) return 0 ;;  # configure's --prefix=/usr ... advice
	esac
	return 1
}
bad=""
for f in "$unit" "$plug" "$deflt" "$admin" "$man8" "$man1" "$D$docdir"/examples/*; do
	for p in $(grep -oE '(^|[^A-Za-z0-9_.~/-])/+(usr|var|etc|opt|lib|sbin|bin)(/[A-Za-z0-9_.%+@-]+)*' "$f" |
		   sed -E 's|^[^/]*||; s|^/+|/|; s|[.]+$||' | sort -u); do
		allowed "$p" && continue
		case $p in
		"$prefix"/*|"$sysconfdir"/*|"$statedir") [ -e "$D$p" ] || bad="$bad ${f#$D}:$p(missing)" ;;
		*) bad="$bad ${f#$D}:$p(outside-the-install)" ;;
		esac
	done
done
[ -z "$bad" ]
ok "every path the unit, examples, man pages and admin.md name is installed" $? "${bad# }"

echo "1..$N"
[ $FAILS -eq 0 ]
