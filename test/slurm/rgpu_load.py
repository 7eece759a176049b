#!/usr/bin/env python3
"""GPU load of rgpud servers, for the Slurm tests: LEASE_LIST (lib/proto.h)
with a munge credential of the caller (root: an admin), summed over servers.

    rgpu_load.py HOST:PORT...
prints one line: "reserved BYTES total BYTES leases N ctx_reserve BYTES"
(reserved: slices plus their context reserves, or the whole GPU when
leased whole).  Exit 1 if a server does not answer.
"""
import socket
import struct
import subprocess
import sys

MAGIC, VERSION = 0x55504752, 1
OP_HELLO, OP_LEASE_LIST = 1, 82
F_REPLY, F_MORE = 1, 4


def frame(op, payload, rid):
    return struct.pack("<IHHIIQ", MAGIC, VERSION, op, 0, len(payload), rid) + payload


def recv_exact(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            raise OSError("connection closed")
        b += c
    return b


def call(s, op, payload, rid):
    s.sendall(frame(op, payload, rid))
    body = b""
    while True:
        magic, ver, rop, flags, ln, r = struct.unpack("<IHHIIQ", recv_exact(s, 24))
        if magic != MAGIC:
            raise OSError("not an rgpud")
        body += recv_exact(s, ln)
        if not flags & F_MORE:
            return body


class Rd:
    def __init__(self, b):
        self.b, self.o = b, 0

    def u32(self):
        v = struct.unpack_from("<I", self.b, self.o)[0]
        self.o += 4
        return v

    def i32(self):
        v = struct.unpack_from("<i", self.b, self.o)[0]
        self.o += 4
        return v

    def u64(self):
        v = struct.unpack_from("<Q", self.b, self.o)[0]
        self.o += 8
        return v

    def bytes_(self):
        n = self.u32()
        v = self.b[self.o:self.o + n]
        self.o += n
        return v

    def left(self):
        return len(self.b) - self.o


def load(addr):
    # a credential decodes once (munged refuses a replay): one per server
    cred = subprocess.run(["munge", "-s", "rgpu-job=0"], capture_output=True,
                          check=True).stdout.strip()
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=5)
    try:
        name = b"rgpu_load\0"
        hello = struct.pack("<I", VERSION) + struct.pack("<I", len(name)) + name + \
            struct.pack("<I", len(cred)) + cred
        r = Rd(call(s, OP_HELLO, hello, 1))
        if r.i32() != 0:
            raise OSError("HELLO refused")
        r = Rd(call(s, OP_LEASE_LIST, b"", 2))
        if r.i32() != 0:
            raise OSError("LEASE_LIST refused")
        reserved = total = 0
        for _ in range(r.u32()):
            r.u32()
            r.bytes_()
            t, res = r.u64(), r.u64()
            r.u32()
            total += t
            reserved += res
        nl = r.u32()
        for _ in range(nl):
            r.u64(); r.u32(); r.u32(); r.u64(); r.u64(); r.u64()
        ctx = 0
        if r.left() >= 4:  # appended: the leases' shares, then the reserve
            for _ in range(r.u32()):
                r.u32()
            ctx = r.u64() if r.left() >= 8 else 0
        return reserved, total, nl, ctx
    finally:
        s.close()


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    res = tot = nl = ctx = 0
    for a in sys.argv[1:]:
        try:
            r, t, n, c = load(a)
        except (OSError, struct.error, subprocess.CalledProcessError) as e:
            print("rgpu_load: %s: %s" % (a, e), file=sys.stderr)
            return 1
        res, tot, nl, ctx = res + r, tot + t, nl + n, max(ctx, c)
    print("reserved %d total %d leases %d ctx_reserve %d" % (res, tot, nl, ctx))
    return 0


if __name__ == "__main__":
    sys.exit(main())
