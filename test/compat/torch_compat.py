#!/usr/bin/env python3
"""PyTorch part of the compatibility corpus (test/compat/README.md).

  torch_compat.py check   tensor ops, matmul, conv2d (cuDNN), 20 seeded SGD
                          steps of a small CNN; RESULT lines (compared
                          between direct and rgpu) and INFO lines
  torch_compat.py bench   item 4: median training-step time of a small CNN
                          and of an MLP (batch on the GPU, after warm-up);
                          BENCH lines
Exit 0 when every check passed."""
import sys, time, traceback
import torch
import torch.nn as nn
import torch.nn.functional as F

fail = 0
SKIP = set(filter(None, __import__("os").environ.get("COMPAT_TORCH_SKIP", "").split(",")))


def stage(name):
    """print a STAGE marker; False when COMPAT_TORCH_SKIP names the stage"""
    if name in SKIP:
        print(f"STAGE {name} skipped", flush=True)
        return False
    print(f"STAGE {name}", flush=True)
    return True


def res(name, val):
    print(f"RESULT {name} {val}", flush=True)


def info(msg):
    print(f"INFO {msg}", flush=True)


def verdict(name, err, tol):
    global fail
    ok = err <= tol
    res(name, "within-tol" if ok else "OUT-OF-TOL")
    info(f"{name} maxrelerr={err:.3e} tol={tol:.1e}")
    if not ok:
        fail = 1


def digest(t):
    """exact digest of the bits of t, computed on the CPU without numpy"""
    b = t.detach().cpu().contiguous().flatten().view(torch.int32).long()
    w = torch.arange(b.numel(), dtype=torch.int64) % 1000003 + 1
    return f"{int((b * w).sum()) & 0xffffffffffffffff:016x}"


def sig(x, n=5):
    return f"{x:.{n - 1}e}"


def check():
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")
    info(f"torch {torch.__version__} cuda {torch.version.cuda} cudnn {torch.backends.cudnn.version()} "
         f"device {torch.cuda.get_device_name(0)} count {torch.cuda.device_count()}")
    res("device_count", torch.cuda.device_count())

    # tensor ops: integer/exact ones hashed, float ones with a tolerance
    g = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(1000, 1000, generator=g)
    b = torch.randn(1000, 1000, generator=g)
    x = torch.randn(8, 16, 32, 32, generator=g)
    w = torch.randn(32, 16, 3, 3, generator=g)
    ad = a.to(dev)
    if stage("tensor_ops"):
        tensor_ops(a, ad, dev)
    if stage("matmul_f32"):
        ref = a.double() @ b.double()
        c = (ad @ b.to(dev)).cpu().double()
        verdict("matmul_f32", ((c - ref).abs() / ref.abs().clamp(min=1)).max().item(), 1e-4)
    if stage("matmul_f16"):
        ref16 = a.half().double() @ b.half().double()
        c16 = (ad.half() @ b.to(dev).half()).cpu().double()
        verdict("matmul_f16", ((c16 - ref16).abs().max() / ref16.abs().max()).item(), 1e-2)
    if stage("conv2d_cudnn"):
        ref = F.conv2d(x.double(), w.double(), padding=1)
        y = F.conv2d(x.to(dev), w.to(dev), padding=1).cpu().double()
        verdict("conv2d_cudnn", ((y - ref).abs() / ref.abs().clamp(min=1)).max().item(), 1e-4)
    if stage("train"):
        train(dev)


def tensor_ops(a, ad, dev):
    res("copy_roundtrip", digest(ad.cpu()) == digest(a))
    i = torch.arange(1 << 20, device=dev, dtype=torch.int64)
    res("int_ops", digest(((i * 7 + 3) % 1009).cumsum(0)))
    res("sort", digest(torch.sort(ad.flatten())[0]) == digest(torch.sort(a.flatten())[0]))
    res("argmax", ad.argmax(dim=1).sum().item())
    e = (torch.exp(ad.double()).sum() - torch.exp(a.double()).sum()).abs().item() / torch.exp(a.double()).sum().item()
    verdict("exp_sum", e, 1e-12)
    gd = torch.Generator(device=dev).manual_seed(123)
    r = torch.rand(1 << 20, device=dev, generator=gd)
    res("cuda_rng", digest(r))


def train(dev):
    global fail
    # training: seeded small CNN, SGD, 20 steps; losses compared
    torch.manual_seed(1)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
                          nn.Flatten(), nn.Linear(512, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    gx = torch.Generator(device="cpu").manual_seed(2)
    X = torch.randn(64, 3, 32, 32, generator=gx).to(dev)
    Y = torch.randint(0, 10, (64,), generator=gx).to(dev)
    losses = []
    for step in range(20):
        opt.zero_grad()
        loss = F.cross_entropy(model(X), Y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    info("losses " + " ".join(f"{l:.9g}" for l in losses))
    # rounded to 4 significant digits: the comparison tolerates last-bit
    # differences from algorithm choices, not a wrong computation
    res("train_losses", " ".join(sig(l, 4) for l in losses))
    if not losses[-1] < losses[0]:
        info("loss did not decrease")
        fail = 1


def bench():
    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = False

    def measure(name, model, X, Y, warm=10, n=50):
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        ts = []
        for s in range(warm + n):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(X), Y)
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
            if s >= warm:
                ts.append(time.perf_counter() - t0)
        ts.sort()
        print(f"BENCH {name} median_ms={ts[len(ts) // 2] * 1e3:.3f} min_ms={ts[0] * 1e3:.3f} "
              f"max_ms={ts[-1] * 1e3:.3f} steps={n}", flush=True)

    torch.manual_seed(0)
    cnn = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Flatten(), nn.Linear(64 * 8 * 8, 256), nn.ReLU(), nn.Linear(256, 10)).to(dev)
    if stage("bench_cnn"):
        measure("torch_cnn_train_step_b128", cnn, torch.randn(128, 3, 32, 32, device=dev),
                torch.randint(0, 10, (128,), device=dev))
    if stage("bench_mlp"):
        mlp = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                            nn.Linear(2048, 10)).to(dev)
        measure("torch_mlp_train_step_b256", mlp, torch.randn(256, 1024, device=dev),
                torch.randint(0, 10, (256,), device=dev))


if __name__ == "__main__":
    what = sys.argv[1:] or ["check"]
    try:
        if "check" in what:
            check()
        if "bench" in what:
            bench()
    except Exception as ex:
        print(f"FAIL {type(ex).__name__}: {ex}", flush=True)
        traceback.print_exc()
        sys.exit(1)
    print("FAILED" if fail else "OK")
    sys.exit(fail)
