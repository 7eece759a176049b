#!/usr/bin/env python3
"""DDP training (torchrun, 2 processes, NCCL): rank 0 prints LOSS lines."""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
r = dist.get_rank()
torch.cuda.set_device(r)
torch.manual_seed(0)
torch.backends.cuda.matmul.allow_tf32 = False
m = DDP(nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).cuda(), device_ids=[r])
opt = torch.optim.SGD(m.parameters(), lr=0.05)
g = torch.Generator().manual_seed(10 + r)
x = torch.randn(1024, 256, generator=g).cuda()
y = torch.randint(0, 10, (1024,), generator=g).cuda()
for i in range(20):
    opt.zero_grad()
    l = nn.functional.cross_entropy(m(x), y)
    l.backward()
    opt.step()
    lt = l.detach().clone()
    dist.all_reduce(lt)
    if r == 0:
        print(f"LOSS {i} {lt.item() / 2:.6f}", flush=True)
dist.destroy_process_group()
