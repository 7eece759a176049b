#!/usr/bin/env python3
"""NCCL all-reduce bus bandwidth with torch.distributed (run by torchrun
with 2 processes, one GPU each), and a data check: BUSBW lines."""
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
r, w = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(r)
if os.environ.get("NCCL_PROBE_TOUCH_ALL") == "1":
    # a context on every GPU in each rank (nccl-probe.sh: does a second
    # process's context on a GPU slow the all-reduce?)
    for d in range(torch.cuda.device_count()):
        torch.zeros(1, device=f"cuda:{d}")
    torch.cuda.synchronize()
x = torch.full((1 << 20,), float(r + 1), device="cuda")
dist.all_reduce(x)
ok = bool(torch.all(x == w * (w + 1) / 2))
for mib in (64, 256):
    t = torch.ones((mib << 20) // 4, device="cuda")
    for _ in range(3):
        dist.all_reduce(t)
    torch.cuda.synchronize()
    # about 100 ms of all-reduces per size, so launch and wait costs
    # cannot hide behind a short loop
    reps = max(10, 25600 // mib)
    t0 = time.perf_counter()
    for _ in range(reps):
        dist.all_reduce(t)
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / reps
    if r == 0:
        print(f"BUSBW {mib}MiB {(mib << 20) / dt / 1e9 * 2 * (w - 1) / w:.1f}", flush=True)
    if os.environ.get("NCCL_PROBE_KERNEL_TIME") == "1":
        # the all-reduce's own GPU time, the host's launches hidden: the
        # stream sleeps ~20 ms first (both ranks), so everything is queued
        # before the start event runs (nccl-probe.sh: are the kernels
        # slower, or the gaps between them?)
        times = []
        for _ in range(10):
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(40_000_000)
            e0.record()
            dist.all_reduce(t)
            e1.record()
            torch.cuda.synchronize()
            times.append(e0.elapsed_time(e1))
        times.sort()
        if r == 0:
            print(f"KERNEL {mib}MiB {times[len(times) // 2] * 1e3:.0f} us "
                  f"(min {times[0] * 1e3:.0f}, max {times[-1] * 1e3:.0f})", flush=True)
if r == 0:
    print("CHECK allreduce_data", "ok" if ok else "WRONG", flush=True)
dist.destroy_process_group()
