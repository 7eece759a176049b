#!/bin/bash
# `make check`: run-bench.sh against `rgpud --emulated` with small sizes and
# short measurements, then check that bench.json exists and every line is a
# JSON object with the expected kinds.  No timing assertion: the emulator's
# numbers mean nothing.  Exit 77 (SKIP) when rgpud or the client is not built.
set -u
here=$(cd "$(dirname "$0")" && pwd)
: "${PYTHON:=python3}"
OUT=${RGPU_BENCH_SMOKE_DIR:-$PWD/smoke-results}
rm -rf "$OUT"
bash "$here/run-bench.sh" --emulated --max 16M --min-time 0.01 --out "$OUT"
rc=$?
[ $rc -eq 77 ] && exit 77
if [ $rc -ne 0 ]; then
	echo "FAIL: run-bench.sh --emulated exited $rc"
	exit 1
fi
"$PYTHON" - "$OUT/bench.json" <<'PY'
import json, sys
path = sys.argv[1]
kinds = {}
with open(path) as fh:
    for n, line in enumerate(fh, 1):
        o = json.loads(line)          # raises on a malformed line
        assert isinstance(o, dict), "line %d is not an object" % n
        kinds[o.get("kind")] = kinds.get(o.get("kind"), 0) + 1
targets = set()
with open(path) as fh:
    for line in fh:
        o = json.loads(line)
        if o.get("kind") in ("bw", "lat"):
            targets.add(o["target"])
need = {"meta", "bw", "lat", "cmp_bw", "cmp_lat", "bar"}
missing = need - set(kinds)
assert not missing, "no %s lines in %s" % (sorted(missing), path)
assert {"rgpud", "raw_tcp"} <= targets, "targets: %s" % sorted(targets)
print("bench.json: %s" % ", ".join("%d %s" % (kinds[k], k) for k in sorted(kinds)))
PY
