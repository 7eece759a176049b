#!/bin/bash
# Records real client traffic and turns it into the seed corpora in
# corpus/ (run by hand after protocol changes; the result is committed).
#
#   top_builddir=_build test/fuzz/record-seeds.sh [OUTDIR]
#
# Starts `rgpud --emulated --open` on a free loopback port with a recording
# proxy (recproxy.py) in front of it, runs the end-to-end programs through
# the proxy over TCP, then cuts each recorded connection into seeds:
#   fuzz_frame/     the client's byte stream as sent (frames kept whole)
#   fuzz_dispatch/  the same without its HELLO (the harness sends its own)
#   fuzz_wire/      one request payload per opcode, behind a null script
#   fuzz_dispatch/op-NNN  t_vecadd's first context, then opcode NNN (each
#                         opcode lib/proto.h defines)
# Frames over 64 KiB (bulk copies) are left out and a seed stops at
# 96 KiB, so the corpus stays small.  OUTDIR defaults to test/fuzz/corpus.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
: "${top_builddir:=$here/../../_build}"
top_builddir=$(cd "$top_builddir" && pwd)
out=${1:-$here/corpus}
E2E=$top_builddir/test/e2e
RGPUD=$top_builddir/daemon/rgpud
export RGPU_EMU_LIB=$top_builddir/emu/.libs/librgpu-emu.so
for f in "$RGPUD" "$RGPU_EMU_LIB" "$top_builddir/client/.libs/libcuda.so.1" "$E2E/t_vecadd"; do
	[ -e "$f" ] || { echo "not built: $f" >&2; exit 1; }
done
tmp=$(mktemp -d)
pids=""
trap 'for p in $pids; do kill $p 2>/dev/null; done; wait 2>/dev/null; rm -rf "$tmp"' EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$RGPUD" --emulated --open --listen "127.0.0.1:$port" > "$tmp/rgpud.log" 2>&1 &
pids="$pids $!"
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done

for prog in t_device t_vecadd t_matmul t_struct t_globals t_streams t_async t_memory \
	    t_library t_errors t_managed t_memcpy2d t_graph t_hold t_array t_attrs t_ctxevent \
	    t_graph_nodes t_graph_memop t_green t_hostfn t_link t_memops t_umhint t_uobj \
	    t_tensormap t_appmem; do
	[ -x "$E2E/$prog" ] || continue
	python3 "$here/recproxy.py" 0 127.0.0.1 "$port" "$tmp/rec-$prog" > "$tmp/proxy-$prog.port" &
	ppid=$!
	for _ in $(seq 50); do [ -s "$tmp/proxy-$prog.port" ] && break; sleep 0.1; done
	pport=$(cat "$tmp/proxy-$prog.port")
	# TCP through the proxy (the HELLO's credential is cut out below)
	RGPU_SERVERS=127.0.0.1:$pport/0 RGPU_TRANSPORT=tcp \
		LD_LIBRARY_PATH=$top_builddir/client/.libs timeout 120 "$E2E/$prog" \
		> "$tmp/$prog.out" 2>&1 || { echo "($prog exited $?: recorded anyway)"; tail -3 "$tmp/$prog.out"; }
	sleep 0.3
	kill $ppid 2>/dev/null; wait $ppid 2>/dev/null || true
done

python3 - "$tmp" "$out" "$here/../../lib/proto.h" <<'PY'
import hashlib, os, re, struct, sys
tmp, out, proto = sys.argv[1], sys.argv[2], sys.argv[3]
MAXFRAME, MAXSEED = 64 * 1024, 96 * 1024
for h in ("fuzz_frame", "fuzz_dispatch", "fuzz_wire"):
    os.makedirs(os.path.join(out, h), exist_ok=True)
def frames(b):
    off = 0
    while off + 24 <= len(b):
        magic, ver, op, flags, ln, rid = struct.unpack_from("<IHHIIQ", b, off)
        if off + 24 + ln > len(b):
            break
        yield op, b[off:off + 24 + ln], b[off + 24:off + 24 + ln]
        off += 24 + ln
def no_cred(fr):
    # HELLO (op 1): version, client name, credential -> empty credential
    magic, ver, op, flags, ln, rid = struct.unpack_from("<IHHIIQ", fr, 0)
    p = fr[24:]
    slen = struct.unpack_from("<I", p, 4)[0]
    body = p[:8 + slen] + struct.pack("<I", 0)
    return struct.pack("<IHHIIQ", magic, ver, op, flags, len(body), rid) + body
def save(h, name, data):
    if data:
        with open(os.path.join(out, h, name), "wb") as f:
            f.write(data)
seen_wire = set()
for d in sorted(os.listdir(tmp)):
    if not d.startswith("rec-"):
        continue
    prog = d[4:]
    for conn in sorted(os.listdir(os.path.join(tmp, d))):
        raw = open(os.path.join(tmp, d, conn), "rb").read()
        whole, body = b"", b""
        for i, (op, fr, payload) in enumerate(frames(raw)):
            if len(fr) > MAXFRAME:
                continue
            if op == 1:
                fr = no_cred(fr)
                payload = fr[24:]
            if len(whole) + len(fr) <= MAXSEED:
                whole += fr
                if i > 0:
                    body += fr
            key = hashlib.sha1(bytes([op]) + payload[:64]).hexdigest()
            if op not in seen_wire and 0 < len(payload) <= 4096:
                seen_wire.add(op)
                save("fuzz_wire", "%s-op%d" % (prog, op), b"\0" + payload)
        tag = prog + ("" if conn == "conn-0.bin" else "-" + conn[:-4])
        save("fuzz_frame", tag, whole)
        save("fuzz_dispatch", tag, body)
# each opcode once, behind t_vecadd's first context: its first field is
# that context's handle, the rest zeros (the harness cuts the payload to
# the input, so the fuzzer finds each request's length by trimming)
vec = os.path.join(out, "fuzz_dispatch", "t_vecadd")
if os.path.exists(vec):
    setup, ctx = b"", None
    for op, fr, payload in frames(open(vec, "rb").read()):
        if ctx is None:
            setup += fr
        if op == 40:  # LAUNCH: its first field is the context
            ctx = payload[:8]
            break
        if op == 10 and ctx is None:  # CTX_CREATE: stop the set-up here
            ctx = b""
    ctx = ctx or b"\0" * 8
    # every opcode lib/proto.h defines (X(NAME, number, ...))
    ops = sorted({int(n) for n in re.findall(r"X\(\s*[A-Z0-9_]+\s*,\s*(\d+)\s*,", open(proto).read())})
    for op in (o for o in ops if o >= 2):
        pl = ctx + b"\0" * 56
        save("fuzz_dispatch", "op-%03d" % op,
             setup + struct.pack("<IHHIIQ", 0x55504752, 1, op, 0, len(pl), 1000 + op) + pl)
for h in ("fuzz_frame", "fuzz_dispatch", "fuzz_wire"):
    d = os.path.join(out, h)
    print("%s: %d seeds, %d bytes" % (h, len(os.listdir(d)),
          sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))))
PY
