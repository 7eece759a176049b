#!/usr/bin/env python3
"""A PyTorch training run for test/gpu/migrate.sh (issue 8).

  migrate.py STEPS

Seeded and deterministic: an MLP trained with SGD on a fixed synthetic
data set kept on the GPU (about DATA_MB MiB of device memory, so that a
move has something to carry).  Prints "step I LOSS MS" for every step
(LOSS with 9 significant digits, MS the step's wall time), then
"final LOSS", "median_ms M", "reserved_bytes B".  The test moves or kills
the server while it runs: the run must not notice but for a pause."""
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
times = []
loss_v = float("nan")
for i in range(steps):
    t0 = time.perf_counter()
    lo = (i * batch) % (nsamples - batch + 1)
    xb, yb = x_all[lo:lo + batch], y_all[lo:lo + batch]
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
print(f"reserved_bytes {torch.cuda.memory_reserved()}", flush=True)
