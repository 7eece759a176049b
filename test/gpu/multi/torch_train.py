#!/usr/bin/env python3
"""A small PyTorch training loop (seeded): LOSS lines.  With
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True PyTorch's allocator uses
the VMM API (cuMemCreate/cuMemMap/cuMemSetAccess)."""
import torch
import torch.nn as nn

torch.manual_seed(0)
torch.backends.cudnn.deterministic = True
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = "cuda"
m = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).to(dev)
opt = torch.optim.SGD(m.parameters(), lr=0.05)
g = torch.Generator().manual_seed(1)
x = torch.randn(2048, 256, generator=g).to(dev)
y = torch.randint(0, 10, (2048,), generator=g).to(dev)
for i in range(20):
    opt.zero_grad()
    l = nn.functional.cross_entropy(m(x), y)
    l.backward()
    opt.step()
    print(f"LOSS {i} {l.item():.7f}", flush=True)
