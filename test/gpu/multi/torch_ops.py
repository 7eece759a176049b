#!/usr/bin/env python3
"""What PyTorch users run beyond a linear layer, each part seeded and
deterministic, so that a run through rgpu can be compared with a local one:

  conv      a small conv net (cuDNN forward and backward), 5 SGD steps
  amp       bf16 autocast matmul and scaled dot-product attention (flash /
            memory-efficient kernels), forward and backward
  fft       torch.fft (cuFFT plans, real and complex)
  linalg    cholesky, solve, qr, eigh, svd values (cuSOLVER / cuBLAS)
  sparse    CSR matrix times dense (cuSPARSE)
  graph     a training step captured in a CUDA graph and replayed
  streams   pinned host memory, non_blocking copies on a side stream,
            events between streams
  compile   torch.compile (Inductor: Triton kernels loaded as cubins)

Prints "VAL part.name v ..." (floats, compared by the caller with a
relative tolerance), "CHECK part.name True|False" and, for a part that
cannot run here, "SKIPPART part why".  An exception in a part prints
"FAILPART part error" and the others go on; the exit status is 1 then.
"""
import sys
import traceback

import torch
import torch.nn as nn
import torch.nn.functional as F

dev = "cuda"
torch.backends.cudnn.deterministic = True
torch.backends.cudnn.benchmark = False
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
failed = []


def val(name, *xs):
    print("VAL %s %s" % (name, " ".join("%.9e" % float(x) for x in xs)), flush=True)


def check(name, ok):
    print("CHECK %s %s" % (name, bool(ok)), flush=True)


def gen(seed):
    return torch.Generator().manual_seed(seed)


def part_conv():
    torch.manual_seed(0)
    m = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).to(dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(64, 3, 64, 64, generator=gen(1)).to(dev)
    y = torch.randint(0, 10, (64,), generator=gen(2)).to(dev)
    for i in range(5):
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        val("conv.loss%d" % i, loss.item())


def part_amp():
    a = torch.randn(1024, 1024, generator=gen(3)).to(dev)
    b = torch.randn(1024, 1024, generator=gen(4)).to(dev)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        c = a @ b
    check("amp.matmul_dtype_bf16", c.dtype == torch.bfloat16)
    val("amp.matmul_sum", c.float().sum().item(), c.float().abs().sum().item())
    q, k, v = (torch.randn(4, 8, 256, 64, generator=gen(5 + i)).to(dev).to(torch.bfloat16).requires_grad_()
               for i in range(3))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    o.float().pow(2).sum().backward()
    val("amp.sdpa", o.float().sum().item(), q.grad.float().abs().sum().item())


def part_fft():
    x = torch.randn(8, 256, 256, generator=gen(8)).to(dev)
    f = torch.fft.rfft2(x)
    val("fft.rfft2", f.abs().sum().item())
    back = torch.fft.irfft2(f, s=x.shape[-2:])
    check("fft.roundtrip", torch.allclose(back, x, atol=1e-4))
    z = torch.fft.fft(torch.complex(x[0], x[1]))
    val("fft.c2c", z.real.sum().item(), z.imag.abs().sum().item())


def part_linalg():
    a = torch.randn(256, 256, generator=gen(9), dtype=torch.float64).to(dev)
    spd = a @ a.T + 256 * torch.eye(256, dtype=torch.float64, device=dev)
    L = torch.linalg.cholesky(spd)
    check("linalg.cholesky", torch.allclose(L @ L.T, spd, rtol=1e-10, atol=1e-8))
    b = torch.randn(256, 4, generator=gen(10), dtype=torch.float64).to(dev)
    xs = torch.linalg.solve(spd, b)
    check("linalg.solve", torch.allclose(spd @ xs, b, rtol=1e-10, atol=1e-10))
    q, r = torch.linalg.qr(a)
    check("linalg.qr", torch.allclose(q @ r, a, atol=1e-10))
    w = torch.linalg.eigvalsh(spd)
    s = torch.linalg.svdvals(a)
    val("linalg.eig_svd", w.min().item(), w.max().item(), s.max().item(), s.sum().item())


def part_sparse():
    d = torch.randn(512, 512, generator=gen(11))
    d[d.abs() < 1.5] = 0
    csr = d.to(dev).to_sparse_csr()
    x = torch.randn(512, 64, generator=gen(12)).to(dev)
    y = csr @ x
    check("sparse.nnz", csr.values().numel() == int((d != 0).sum()))
    check("sparse.matches_dense", torch.allclose(y, d.to(dev) @ x, rtol=1e-4, atol=1e-4))
    val("sparse.mm", y.sum().item(), y.abs().sum().item())


def part_graph():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 1)).to(dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    sx = torch.randn(256, 128, generator=gen(13)).to(dev)
    sy = torch.randn(256, 1, generator=gen(14)).to(dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm up on a side stream, as PyTorch asks
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            F.mse_loss(m(sx), sy).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        sl = F.mse_loss(m(sx), sy)
        sl.backward()
        opt.step()
    for i in range(5):
        sx.copy_(torch.randn(256, 128, generator=gen(20 + i)).to(dev))
        g.replay()
        val("graph.loss%d" % i, sl.item())


def part_streams():
    n = 1 << 22
    h = torch.arange(n, dtype=torch.float32).pin_memory()
    check("streams.pinned", h.is_pinned())
    side = torch.cuda.Stream()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(side):
        e0.record()
        d = h.to(dev, non_blocking=True)
        d.mul_(2).add_(1)
        e1.record()
    torch.cuda.current_stream().wait_event(e1)
    out = torch.empty_like(h).pin_memory()
    out.copy_(d, non_blocking=True)
    torch.cuda.current_stream().synchronize()
    check("streams.values", torch.equal(out, h * 2 + 1))
    check("streams.elapsed_positive", e0.elapsed_time(e1) > 0)
    free, total = torch.cuda.mem_get_info()
    check("streams.mem_get_info", 0 < free <= total)


def part_compile():
    try:
        import triton  # noqa: F401
    except ImportError as e:
        print("SKIPPART compile no triton (%s)" % e, flush=True)
        return

    def f(x, y):
        return torch.nn.functional.gelu(x @ y + 1).softmax(-1).sum(0)

    x = torch.randn(512, 512, generator=gen(15)).to(dev)
    y = torch.randn(512, 512, generator=gen(16)).to(dev)
    cf = torch.compile(f)
    out = cf(x, y)
    check("compile.matches_eager", torch.allclose(out, f(x, y), rtol=1e-4, atol=1e-5))
    val("compile.sum", out.sum().item())


PARTS = [part_conv, part_amp, part_fft, part_linalg, part_sparse, part_graph, part_streams, part_compile]
only = set(sys.argv[1:])
print("INFO torch %s cuda %s device %s" % (torch.__version__, torch.version.cuda, torch.cuda.get_device_name()),
      flush=True)
for p in PARTS:
    name = p.__name__[5:]
    if only and name not in only:
        continue
    try:
        p()
        torch.cuda.synchronize()
        print("DONEPART %s" % name, flush=True)
    except Exception as e:  # report and go on: one part's failure says which call
        failed.append(name)
        print("FAILPART %s %s: %s" % (name, type(e).__name__, str(e).splitlines()[0] if str(e) else ""),
              flush=True)
        traceback.print_exc()
sys.exit(1 if failed else 0)
