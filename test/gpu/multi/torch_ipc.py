#!/usr/bin/env python3
"""CUDA tensors shared between processes (torch.multiprocessing), for
test/gpu/multi-gpu.sh: PyTorch sends a CUDA tensor to another process by
CUDA IPC, a memory handle (cuIpcGetMemHandle) and an interprocess event
(cuIpcGetEventHandle) the receiver's stream waits for.  The parent fills a
tensor with a long chain of kernels and sends it at once (the event is what
orders the child's reads after them); the child sums it, writes into it,
and the parent reads the child's writes.  Prints RESULT lines to compare
with a run on the local driver."""
import torch
import torch.multiprocessing as mp


def child(q_in, q_out):
    x = q_in.get()
    q_out.put(("sum", float(x.double().sum().item())))
    q_in.get()  # the parent has read the tensor too: now write it
    x.mul_(2)
    torch.cuda.synchronize()
    q_out.put(("done", None))
    q_in.get()  # the parent is done with the tensor


def main():
    ctx = mp.get_context("spawn")
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=child, args=(q_in, q_out))
    p.start()
    n = 1 << 24
    x = torch.arange(n, dtype=torch.float32, device="cuda") % 1000
    for _ in range(200):  # work still queued when the tensor goes
        x = x * 1.0001 + 0.5
    q_in.put(x)
    tag, got = q_out.get(timeout=120)
    want = float(x.double().sum().item())
    print(f"RESULT child_sum {got:.6e}", flush=True)
    print(f"CHECK child_sum_matches {abs(got - want) <= 1e-6 * abs(want)}", flush=True)
    q_in.put("write")
    tag, _ = q_out.get(timeout=120)
    torch.cuda.synchronize()
    print(f"RESULT after_child {float(x.double().sum().item()):.6e}", flush=True)
    q_in.put(None)
    p.join(60)
    print(f"RESULT child_exit {p.exitcode}", flush=True)


if __name__ == "__main__":
    main()
