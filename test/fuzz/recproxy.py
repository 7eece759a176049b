#!/usr/bin/env python3
"""A recording TCP proxy for seed corpora (record-seeds.sh).

    recproxy.py LISTEN_PORT SERVER_HOST SERVER_PORT OUTDIR

Forwards every connection to the server and writes what the client sent,
byte for byte, to OUTDIR/conn-N.bin (N counts connections).  The port it
listens on is printed on stdout once it listens (LISTEN_PORT 0: any free
one).  Stops on SIGTERM.
"""
import os
import selectors
import signal
import socket
import sys
import threading


def pump(client, server, out):
    sel = selectors.DefaultSelector()
    sel.register(client, selectors.EVENT_READ, server)
    sel.register(server, selectors.EVENT_READ, client)
    open_ends = 2
    while open_ends:
        for key, _ in sel.select():
            src, dst = key.fileobj, key.data
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                sel.unregister(src)
                open_ends -= 1
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                continue
            if src is client:
                out.write(data)
            dst.sendall(data)
    client.close()
    server.close()
    out.close()


def main():
    port, host, sport, outdir = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
    os.makedirs(outdir, exist_ok=True)
    lsock = socket.socket()
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind(("127.0.0.1", port))
    lsock.listen(64)
    print(lsock.getsockname()[1], flush=True)
    signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
    n = 0
    while True:
        c, _ = lsock.accept()
        s = socket.create_connection((host, sport))
        out = open(os.path.join(outdir, "conn-%d.bin" % n), "wb")
        n += 1
        threading.Thread(target=pump, args=(c, s, out), daemon=True).start()


if __name__ == "__main__":
    main()
