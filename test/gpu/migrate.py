#!/usr/bin/env python3
"""A PyTorch training run for test/gpu/migrate.sh (issue 8).

  migrate.py STEPS

Seeded and deterministic: an MLP trained with SGD on a fixed synthetic
data set kept on the GPU (about DATA_MB MiB of device memory, so that a
move has something to carry).  Prints "step I LOSS MS" for every step
(LOSS with 9 significant digits, MS the step's wall time), then
"final LOSS", "median_ms M", "reserved_bytes B".  The test moves or kills
the server while it runs: the run must not notice but for a pause.

MIG_GRAPH=1: the whole training step (forward, backward, optimizer) is
captured once into a CUDA graph (torch.cuda.graph, after three warm-up
steps on a side stream, as PyTorch's documentation does it) and replayed
every step on static input buffers: a move must carry the graph."""
import os
import sys
import time

import torch
import torch.nn as nn

steps = int(sys.argv[1])
data_mb = int(os.environ.get("DATA_MB", "1024"))

torch.manual_seed(1234)
torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
dev = torch.device("cuda")
width, batch = 4096, 2048  # about 10 ms a step in fp32 on an H100
nsamples = max(batch, data_mb * 1024 * 1024 // (width * 4))
g = torch.Generator(device="cpu").manual_seed(99)
x_all = torch.randn(nsamples, width, generator=g).to(dev)
w_true = torch.randn(width, 16, generator=g).to(dev)
y_all = (x_all @ w_true).argmax(dim=1)
model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                      nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 16)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
lossf = nn.CrossEntropyLoss()
graph = None
if os.environ.get("MIG_GRAPH") == "1":
    static_x = x_all[:batch].clone()
    static_y = y_all[:batch].clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            lossf(model(static_x), static_y).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = lossf(model(static_x), static_y)
        static_loss.backward()
        opt.step()
times = []
loss_v = float("nan")
for i in range(steps):
    t0 = time.perf_counter()
    lo = (i * batch) % (nsamples - batch + 1)
    xb, yb = x_all[lo:lo + batch], y_all[lo:lo + batch]
    if graph is not None:
        static_x.copy_(xb)
        static_y.copy_(yb)
        graph.replay()
        loss_v = static_loss.item()
    else:
        opt.zero_grad(set_to_none=True)
        loss = lossf(model(xb), yb)
        loss.backward()
        opt.step()
        loss_v = loss.item()  # a synchronisation every step
    ms = (time.perf_counter() - t0) * 1000
    times.append(ms)
    print(f"step {i} {loss_v:.9g} {ms:.3f}", flush=True)
print(f"final {loss_v:.9g}", flush=True)
s = sorted(times)
print(f"median_ms {s[len(s) // 2]:.3f}", flush=True)
try:
    print(f"reserved_bytes {torch.cuda.memory_reserved()}", flush=True)
except RuntimeError:  # (an allocator backend that keeps no such count)
    print("reserved_bytes ?", flush=True)
