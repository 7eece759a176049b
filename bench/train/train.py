#!/usr/bin/env python3
"""Training steps of realistic size, for bench/train/run.sh.

  train.py [--models gpt,cnn,gpt-compile] [--steps N] [--warmup N]
           [--label NAME] [--rep N] [--json PATH] [--serve]

gpt          a small GPT-style decoder (6 layers, d=512, 8 heads, sequence
             256, batch 32, vocabulary 8192), AdamW, bf16 autocast, batches
             from a DataLoader with pin_memory and two workers, copied with
             non_blocking=True; loss.item() every step (as a training loop
             that logs its loss does)
gpt-compile  the same model through torch.compile (default mode)
cnn          a ResNet-style convolutional network on 3x64x64 images,
             batch 128, SGD with momentum, bf16 autocast, the same loader

Each model: --warmup steps untimed, then --steps steps each timed on its
own (wall clock, from taking the batch to loss.item() returning).  One
JSON line per model: median and spread of the step time, and, through the
rgpu client with RGPU_STATS=1, the round trips (synchronous requests),
requests and bytes per timed step read from rgpu_stats_counter.  Under the
real driver those fields are null.

--serve: one process for a whole run (bench/train/run.sh starts one per
target and keeps it), so that Python, `import torch`, CUDA and cuBLAS start
once rather than once per repetition (that start-up, 20-30 s a process,
was most of a repetition's time).  The process starts CUDA, prints
`ready`, then reads commands from stdin, one a line: `rep N` runs every
model of --models once, exactly as a run without --serve does (the same
JSON line per model, with "rep": N), then prints `done N`.  After each
repetition it frees what the repetition held (the models, optimizers and
loaders are gone; garbage collection, torch.compile's caches, the CUDA
caching allocator's blocks), so that an idle process keeps no memory the
other targets' processes need, and each repetition compiles its model
afresh as a new process would.  The rgpu counters are read around each
model's timed steps, so their per-step values do not depend on what the
process ran before.  End of stdin ends the process: exit status 0 when
every model of every repetition ran, else 1.
"""
import argparse
import ctypes
import gc
import json
import math
import os
import statistics
import sys
import time
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F


def rgpu_counters():
    """the rgpu client's counters, or None under another libcuda"""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        f = lib.rgpu_stats_counter
    except (OSError, AttributeError):
        return None
    f.restype = ctypes.c_ulonglong
    f.argtypes = [ctypes.c_char_p]
    names = ["calls", "sync", "async", "sent", "received"]
    # the request kinds, for the round trips per step by kind
    proto = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lib",
                         "proto.h")
    try:
        import re
        ops = re.findall(r"X\((\w+), \d+,", open(proto).read())
    except OSError:
        ops = []

    def read():
        d = {n: int(f(n.encode())) for n in names}
        d["ops"] = {o: int(f(o.encode())) for o in ops}
        return d
    return read


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n, seq, vocab):
        self.n, self.seq, self.vocab = n, seq, vocab

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randint(0, self.vocab, (self.seq + 1,), generator=g)
        return x[:-1], x[1:]


class Images(torch.utils.data.Dataset):
    def __init__(self, n, size, classes):
        self.n, self.size, self.classes = n, size, classes

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(3, self.size, self.size, generator=g), i % self.classes


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.h = h

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q = q.view(b, t, self.h, d // self.h).transpose(1, 2)
        k = k.view(b, t, self.h, d // self.h).transpose(1, 2)
        v = v.view(b, t, self.h, d // self.h).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab=8192, seq=256, d=512, h=8, layers=6):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList([Block(d, h) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


class ResBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.skip = None
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return F.relu(y + (x if self.skip is None else self.skip(x)))


class ConvNet(nn.Module):
    def __init__(self, classes=100):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU())
        self.layers = nn.Sequential(ResBlock(64, 64, 1), ResBlock(64, 128, 2),
                                    ResBlock(128, 256, 2), ResBlock(256, 512, 2))
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def loader(ds, batch):
    return torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=2,
                                       pin_memory=True, drop_last=True,
                                       persistent_workers=True, prefetch_factor=4)


def run_model(name, steps, warmup, counters):
    dev = torch.device("cuda")
    torch.manual_seed(0)
    n = (steps + warmup + 2) * 128
    if name.startswith("gpt"):
        model = GPT().to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
        dl = loader(Tokens(n, 256, 8192), 32)

        def loss_of(x, y):
            return F.cross_entropy(model_fn(x).view(-1, 8192), y.view(-1))
    else:
        model = ConvNet().to(dev).to(memory_format=torch.channels_last)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        dl = loader(Images(n, 64, 100), 128)

        def loss_of(x, y):
            return F.cross_entropy(model_fn(x.to(memory_format=torch.channels_last)), y)
    model_fn = torch.compile(model) if name.endswith("-compile") else model
    it = iter(dl)
    times = []
    before = None
    for i in range(warmup + steps):
        if i == warmup:
            torch.cuda.synchronize()
            before = counters() if counters else None
        t0 = time.perf_counter()
        x, y = next(it)
        x = x.to(dev, non_blocking=True)
        y = y.to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_of(x, y)
        loss.backward()
        opt.step()
        lv = loss.item()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    after = counters() if counters else None
    if not math.isfinite(lv):
        raise RuntimeError(f"{name}: loss is {lv}")
    med = statistics.median(times)
    res = {"model": name, "steps": steps, "median_ms": med * 1e3,
           "min_ms": min(times) * 1e3, "max_ms": max(times) * 1e3,
           "p10_ms": sorted(times)[len(times) // 10] * 1e3,
           "p90_ms": sorted(times)[(len(times) * 9) // 10] * 1e3, "loss": lv}
    for k in ("sync", "calls", "async", "sent", "received"):
        res[f"{k}_per_step"] = ((after[k] - before[k]) / steps) if counters else None
    if counters:
        res["sync_by_kind_per_step"] = {o: (v - before["ops"][o]) / steps
                                        for o, v in after["ops"].items()
                                        if v != before["ops"][o]}
    del dl, it
    return res


def run_rep(a, rep, counters, out):
    """every model of --models once: one JSON line each; 0 when all ran"""
    status = 0
    for m in a.models.split(","):
        t0 = time.time()
        try:
            r = run_model(m, a.steps, a.warmup, counters)
            r["ok"] = True
        except Exception as e:  # reported, and the other models still run
            traceback.print_exc()
            r = {"model": m, "ok": False, "error": f"{type(e).__name__}: {e}"[:300]}
            status = 1
        r.update(target=a.label, rep=rep, wall_s=round(time.time() - t0, 2))
        line = json.dumps(r)
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()
    return status


def release():
    """what a repetition held, given back before the process idles"""
    dynamo = sys.modules.get("torch._dynamo")  # imported by torch.compile
    if dynamo is not None:
        dynamo.reset()  # the compiled graphs and their guards on the old model
    gc.collect()
    torch.cuda.empty_cache()


def serve(a, counters, out):
    """--serve: `rep N` lines from stdin until its end"""
    # the start-up that every repetition would otherwise pay: the CUDA
    # context, cuBLAS (a matrix product), the caching allocator
    x = torch.ones(64, 64, device="cuda")
    (x @ x).sum().item()
    del x
    release()
    print("ready", flush=True)
    status = 0
    for line in iter(sys.stdin.readline, ""):
        w = line.split()
        if not w:
            continue
        if len(w) == 2 and w[0] == "rep" and w[1].isdigit():
            n = int(w[1])
            status |= run_rep(a, n, counters, out)
            release()
            print(f"done {n}", flush=True)
        else:
            print(f"train.py: unknown command {line.strip()!r}", file=sys.stderr, flush=True)
            status = 1
    return status


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="gpt,cnn")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--label", default="local")
    ap.add_argument("--rep", type=int, default=0)
    ap.add_argument("--json")
    ap.add_argument("--serve", action="store_true",
                    help="run the models once per `rep N` line on stdin (see above)")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    # no autotuning: it runs every convolution algorithm at start-up (a
    # second locally, ten through rgpu) and picks by a noisy clock
    torch.backends.cudnn.benchmark = False
    counters = rgpu_counters()
    out = open(a.json, "a") if a.json else None
    if a.serve:
        return serve(a, counters, out)
    return run_rep(a, a.rep, counters, out)


if __name__ == "__main__":
    sys.exit(main())
