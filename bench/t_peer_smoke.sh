#!/bin/bash
# `make check`: peer-remote.sh against two `rgpud --emulated`, small copies:
# copies between the two servers go server to server by default and
# through the client with RGPU_PEER_PATH=client, with the right data both
# ways (peer-remote.sh checks both).  No timing assertion: the emulator's
# numbers mean nothing.
here=$(cd "$(dirname "$0")" && pwd)
OUT=${RGPU_PEER_SMOKE_DIR:-$PWD/peer-smoke-results}
rm -rf "$OUT"
bash "$here/peer-remote.sh" --emulated --size 12M --reps 2 --out "$OUT"
