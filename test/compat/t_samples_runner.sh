#!/bin/bash
# The cuda-samples peer suite's runner (cuda-samples.sh), without a GPU:
# stand-in "samples" (shell scripts) that pass, are waived, fail everywhere,
# or fail only through rgpud, an rgpud whose "real driver" is the emulated
# device, and a stand-in nvidia-smi.  Checks the verdicts, the counts, the
# table's order with several samples at once (SAMPLES_JOBS), and the list
# of samples failing only through rgpud at the end of the output.
set -u
: "${top_builddir:=$(cd "$(dirname "$0")/../.." && pwd)}"
src=$(cd "$(dirname "$0")/../.." && pwd)
EMU=$top_builddir/emu/.libs/librgpu-emu.so
for f in "$EMU" "$top_builddir/daemon/rgpud" "$top_builddir/client/.libs/libcuda.so.1"; do
	[ -e "$f" ] || { echo "SKIP: $f not built"; exit 77; }
done
T=$(mktemp -d /tmp/rgpu-samples-runner.XXXXXX)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/real" "$T/bin" "$T/path" "$T/out"
ln -s "$EMU" "$T/real/libcuda.so.1"
printf '#!/bin/sh\necho "GPU 0: stand-in"\n' >"$T/path/nvidia-smi"
chmod +x "$T/path/nvidia-smi"
# name exit-direct exit-through-rgpu [message through rgpu]
sample() {
	mkdir -p "$T/bin/$1"
	cat >"$T/bin/$1/$1" <<EOS
#!/bin/sh
sleep 0.2
if [ -n "\${RGPU_SERVERS:-}" ]; then echo "${4:-}"; exit $3; fi
exit $2
EOS
	chmod +x "$T/bin/$1/$1"
	printf '%s\tcat\tbuilt\t\n' "$1" >>"$T/bin/manifest.tsv"
}
sample alpha 0 0
sample bravo 2 2
sample charlie 1 1
sample delta 0 5 "cuFoo is not supported by rgpu"
sample echo 0 0
sample foxtrot 0 0
printf 'golf\tcat\tskip\tneeds OpenGL\n' >>"$T/bin/manifest.tsv"

out=$(PATH=$T/path:$PATH RGPU_REAL_DRIVER_DIR=$T/real SAMPLES_JOBS=3 SAMPLE_TIMEOUT=20 \
	top_builddir=$top_builddir timeout 120 bash "$src/test/compat/cuda-samples.sh" \
	--out "$T/out" --bin "$T/bin" 2>&1)
rc=$?
R=$T/out/cuda-samples-results.md
fail=0
check() { if eval "$2"; then echo "PASS: $1"; else echo "FAIL: $1"; fail=1; fi; }
check "the runner exits 0" '[ $rc = 0 ]'
check "counts: 6 run, 4 pass directly, 3 of them through rgpud both ways" \
	'grep -q "cuda-samples: 6 run; direct 4, tcp 3, local 3; 3 of 4 direct passes pass both ways" <<<"$out"'
check "the last lines name the sample failing only through rgpud, and why" \
	'tail -2 <<<"$out" | grep -q "THROUGH RGPU FAILS: delta: tcp fail(5), same host fail(5) (tcp: unsupported: cuFoo; local: unsupported: cuFoo)"'
check "no other sample is listed as failing through rgpud" '[ "$(grep -c "THROUGH RGPU FAILS" <<<"$out")" = 1 ]'
check "the table keeps the manifest's order" \
	'[ "$(awk -F" [|] " "/^[|] [a-z]+ [|] cat [|]/ { sub(/^[|] /, \"\"); print \$1 }" "$R" | tr "\n" " ")" = "alpha bravo charlie delta echo foxtrot " ]'
check "verdicts: waived and failing everywhere" \
	'grep -q "^| bravo | cat | waived | waived | waived |" "$R" && grep -q "^| charlie | cat | fail(1) | fail(1) | fail(1) |" "$R"'
check "samples not built are listed with their reason" 'grep -q "golf (cat): skip needs OpenGL" "$R"'
[ $fail = 0 ] || { echo "--- output"; echo "$out"; echo "--- table"; cat "$R"; }
exit $fail
