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
    # an event after each all-reduce (the current stream waits for NCCL's):
    # the GPU's time per all-reduce, gaps included, next to the host's time
    # to queue them (nccl-probe.sh: is the GPU or the host the bound, and
    # are the steps even or a few long?)
    marks = [torch.cuda.Event(enable_timing=True) for _ in range(reps + 1)]
    t0 = time.perf_counter()
    marks[0].record()
    for i in range(reps):
        dist.all_reduce(t)
        marks[i + 1].record()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / reps
    if r == 0:
        print(f"BUSBW {mib}MiB {(mib << 20) / dt / 1e9 * 2 * (w - 1) / w:.1f}", flush=True)
    steps = sorted(marks[i].elapsed_time(marks[i + 1]) * 1e3 for i in range(reps))
    mine = (r, (t1 - t0) / reps * 1e6, dt * 1e6, marks[0].elapsed_time(marks[reps]) * 1e3 / reps,
            steps[len(steps) // 10], steps[len(steps) // 2], steps[len(steps) * 9 // 10], steps[-1])
    every = [None] * w
    dist.all_gather_object(every, mine)
    if r == 0:
        for e in every:
            print(f"LOOP {mib}MiB rank {e[0]}: queued {e[1]:.0f} us, wall {e[2]:.0f} us, "
                  f"GPU {e[3]:.0f} us per all-reduce; GPU steps p10 {e[4]:.0f} p50 {e[5]:.0f} "
                  f"p90 {e[6]:.0f} max {e[7]:.0f} us", flush=True)
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
        # each rank's time holds its wait for the other to start; the rank
        # that started last waited least, so the least of the ranks' times
        # in a round is the all-reduce's own
        every = [None] * w
        dist.all_gather_object(every, times)
        own = sorted(min(e[i] for e in every) * 1e3 for i in range(len(times)))
        if r == 0:
            ranks = ", ".join(f"rank {k} {sorted(e)[len(e) // 2] * 1e3:.0f}" for k, e in enumerate(every))
            print(f"KERNEL {mib}MiB {own[len(own) // 2]:.0f} us "
                  f"(least of the ranks: min {own[0]:.0f}, max {own[-1]:.0f}; medians {ranks} us)",
                  flush=True)
if r == 0:
    print("CHECK allreduce_data", "ok" if ok else "WRONG", flush=True)
dist.destroy_process_group()
