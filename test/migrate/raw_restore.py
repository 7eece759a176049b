#!/usr/bin/env python3
"""Bad session state and forged tokens, in raw protocol (run-migrate.sh).

  raw_restore.py PORT

Each case opens a session on rgpud at 127.0.0.1:PORT (--open) and sends
what a broken or hostile peer might: the server must answer with an error
that says what is wrong and end that session only.  Prints "ok NAME" or
"FAIL NAME: why" per case; exit 0 when all passed."""
import os
import socket
import struct
import sys

PORT = int(sys.argv[1])
MAGIC, VERSION = 0x55504752, 1
OP_HELLO, OP_RESTORE = 1, 209
F_REPLY, F_NOREPLY = 1, 2
fails = 0
nid = 0


def frame(op, payload, flags=0):
    global nid
    nid += 1
    return struct.pack("<IHHIIQ", MAGIC, VERSION, op, flags, len(payload), nid) + payload


def recv_all(s, n):
    b = b""
    while len(b) < n:
        k = s.recv(n - len(b))
        if not k:
            raise EOFError("connection closed")
        b += k
    return b


def reply(s):
    h = recv_all(s, 24)
    _, _, op, flags, ln, _ = struct.unpack("<IHHIIQ", h)
    body = recv_all(s, ln)
    st = struct.unpack("<i", body[:4])[0]
    msg = ""
    if st and len(body) >= 8:
        n = struct.unpack("<I", body[4:8])[0]
        msg = body[8:8 + n].rstrip(b"\0").decode(errors="replace")
    return op, st, msg


def string(v):
    b = v.encode() + b"\0"
    return struct.pack("<I", len(b)) + b


def session(token=None):
    s = socket.create_connection(("127.0.0.1", PORT), timeout=10)
    p = struct.pack("<I", VERSION) + string("raw_restore.py") + struct.pack("<I", 0)
    if token is not None:
        p += struct.pack("<I", len(token)) + token
    s.sendall(frame(OP_HELLO, p))
    return s, reply(s)


def rec(tag, payload):
    return struct.pack("<IIQ", tag, 0, len(payload)) + payload


def header():
    return rec(1, b"RGPUSNAP" + struct.pack("<IIIQQI", 1, 0, 0, 0, 0, 0))


def case(name, stream, want, frames=None):
    global fails
    try:
        s, (_, st, msg) = session()
        if st:
            raise RuntimeError(f"HELLO refused: {msg}")
        s.sendall(frames if frames is not None else
                  frame(OP_RESTORE, struct.pack("<Ii", 0, -1) + stream))
        op, st, msg = reply(s)
        closed = s.recv(1) == b""
        if st == 0 or want not in msg or not closed:
            raise RuntimeError(f"status {st}, message {msg!r}, session ended: {closed}")
        print(f"ok {name}: {msg}")
    except Exception as e:  # noqa: BLE001 - report every failure the same way
        fails += 1
        print(f"FAIL {name}: {e}")


case("garbage", b"this is not a session state at all", "not a session state")
case("truncated", header(), "ended early")
case("unknown_record", header() + rec(99, b"x" * 8), "malformed session state (record 99)")
create = struct.pack("<HHIQQQ", 208, 0, 0, 0, 0, 0)
case("forged_request", header() + rec(3, create), "malformed session state (request 208)")
case("short_end", header() + rec(5, struct.pack("<Q", 7)), "session state of 7 records")
mem = struct.pack("<QQQII", 0x7e0000000000, 16, 1 << 32 | 5, 0, 0) + b"\0" * 16
case("memory_without_context", header() + rec(4, mem), "names no restored context")
# the records of a move whose objects went ahead (SYNC, LAST)
case("sync_with_data", header() + rec(7, b"x"), "malformed session state (sync)")
case("last_short", header() + rec(8, b"x" * 4), "malformed session state (last)")
# what comes after the state's end, and a frame that is not part of the
# stream
case("data_after_end", header() + rec(5, struct.pack("<Q", 1)) + b"more", "data after the end")
NOREPLY = 2  # RGPU_F_NOREPLY
case("foreign_frame", None, "ended early",
     frames=frame(OP_RESTORE, struct.pack("<Ii", 0, -1) + header(), NOREPLY) +
     frame(OP_HELLO, b"\0" * 16))
# the handles a graph request makes (IDS): counted, sized, one at a time
case("ids_empty", header() + rec(10, struct.pack("<I", 0)), "malformed session state (0 ids)")
case("ids_length", header() + rec(10, struct.pack("<IQ", 2, 1 << 32 | 1)),
     "malformed session state (2 ids)")
case("ids_huge", header() + rec(10, struct.pack("<I", 65537) + b"\0" * 8),
     "malformed session state (65537 ids)")
one_id = rec(10, struct.pack("<IQ", 1, 1 << 32 | 1))
case("ids_twice", header() + one_id + one_id, "malformed session state (ids)")
# memory by reference (PEER, a move between GPUs of one rgpud)
def peer(dptr, size, va, length):
    return rec(6, struct.pack("<QQQII", dptr, size, 1 << 32 | 5, 0, 0) + os.urandom(16) +
               struct.pack("<QQ", va, length))


case("peer_short", header() + rec(6, b"x" * 8), "malformed session state (peer record)")
case("peer_outside_its_mapping", header() + peer(0x7e0000200000, 16, 0x7e0000000000, 2 << 20),
     "malformed session state (peer record)")
case("peer_overflow", header() + peer(0x7e0000000010, 2**64 - 8, 0x7e0000000000, 2 << 20),
     "malformed session state (peer record)")
case("peer_without_context", header() + peer(0x7e0000000000, 16, 0x7e0000000000, 2 << 20),
     "names no restored context")
# a pool block (POOL_ADOPT, 187) naming memory the state never made, or
# cut short
adopt = struct.pack("<QQQI", 0, 0x7e0000000000, 4096, 1)
case("adopt_without_memory", header() + rec(3, struct.pack("<HHIQQQ", 187, 0, len(adopt), 0, 0, 0) + adopt),
     "re-creating an object (POOL_ADOPT) failed: CUDA_ERROR_INVALID_VALUE")
case("adopt_short", header() + rec(3, struct.pack("<HHIQQQ", 187, 0, 8, 0, 0, 0) + adopt[:8]),
     "re-creating an object (POOL_ADOPT) failed: malformed request")
# a token nobody parked
try:
    s, (_, st, msg) = session(os.urandom(16))
    if st == 0 or "no moved session waits here" not in msg:
        raise RuntimeError(f"status {st}, message {msg!r}")
    print(f"ok forged_token: {msg}")
except Exception as e:  # noqa: BLE001
    fails += 1
    print(f"FAIL forged_token: {e}")
# the server still serves
s, (_, st, msg) = session()
if st:
    fails += 1
    print(f"FAIL still_serving: {msg}")
else:
    print("ok still_serving")
sys.exit(1 if fails else 0)
