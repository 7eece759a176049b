#!/usr/bin/env python3
"""Peer copy bandwidth between GPU 0 and GPU 1 (256 MiB, both ways, after
warm-up): BW lines in GB/s, and a data check."""
import time

import torch

n = 256 << 20
print("INFO canAccessPeer", torch.cuda.can_device_access_peer(0, 1), flush=True)
a = torch.arange(n // 4, dtype=torch.int32, device="cuda:0")
b = torch.empty(n // 4, dtype=torch.int32, device="cuda:1")
for src, dst, name in [(a, b, "0to1"), (b, a, "1to0")]:
    dst.copy_(src)
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)
    reps = 20
    t0 = time.perf_counter()
    for _ in range(reps):
        dst.copy_(src)
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)
    dt = time.perf_counter() - t0
    print(f"BW {name} {n * reps / dt / 1e9:.1f}", flush=True)
ok = torch.equal(a.cpu(), torch.arange(n // 4, dtype=torch.int32))
print("CHECK p2p_data", "ok" if ok else "WRONG")
