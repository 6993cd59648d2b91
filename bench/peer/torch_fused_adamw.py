#!/usr/bin/env python3
"""PyTorch peer for bench/gpu_optimizer_bench: fused AdamW + EMA lerp on one GPU.

  python3 bench/peer/torch_fused_adamw.py --numel 268435456 --iters 20 > /tmp/torch.json
  bazel-bin/bench/gpu_optimizer_bench --numel 268435456 --torch-json /tmp/torch.json

--numel f32 parameter elements on cuda:0, as one parameter (default) or --tensors parameters of
(nearly) equal size, each with a gradient; torch.optim.AdamW(fused=True, lr=1e-4,
weight_decay=0.01). For k = 0, 1, 2 EMA lists, one timed call is opt.step() followed by
torch._foreach_lerp_(ema_j, params, 1 - beta_j) for j < k (betas 0.999 and 0.9999, as in
gpu_optimizer_bench). Calls are timed with CUDA events, round-robin over k after --warmup calls
each; the median over --iters rounds is reported.

Prints one JSON line on stdout:
  {"0": ms, "1": ms, "2": ms, "numel": N, "tensors": T, "device": "<GPU>", "torch": "<version>"}
Exits with a message on stderr (status 1) when PyTorch, CUDA or fused AdamW is unavailable.
"""
import argparse
import json
import statistics
import sys

BETAS = (0.999, 0.9999)
MAX_SLOTS = len(BETAS)


def fail(msg):
    sys.exit("torch_fused_adamw.py: " + msg)


def split(numel, parts):
    base, extra = divmod(numel, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--numel", type=int, default=256 << 20)
    p.add_argument("--tensors", type=int, default=1, help="split --numel into this many parameters")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    args = p.parse_args()
    if args.numel < 1 or args.tensors < 1 or args.tensors > args.numel or args.iters < 1:
        fail("need --numel >= --tensors >= 1 and --iters >= 1")

    try:
        import torch
    except ImportError as e:
        fail("PyTorch is not installed (%s); install torch >= 2.0 with CUDA" % e)
    if not torch.cuda.is_available():
        fail("needs a CUDA GPU: torch.cuda.is_available() is False (torch %s, built for CUDA %s)"
             % (torch.__version__, torch.version.cuda))
    if not hasattr(torch, "_foreach_lerp_"):
        fail("torch %s has no torch._foreach_lerp_; use torch >= 2.0" % torch.__version__)

    dev = torch.device("cuda", 0)
    torch.manual_seed(0)
    params = []
    for n in split(args.numel, args.tensors):
        t = torch.nn.Parameter(torch.empty(n, device=dev, dtype=torch.float32).uniform_(-1, 1))
        t.grad = torch.empty_like(t).normal_(0, 1e-3)
        params.append(t)
    try:
        opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, fused=True)
    except (TypeError, RuntimeError, ValueError) as e:
        fail("torch.optim.AdamW(fused=True) is unavailable in torch %s: %s"
             % (torch.__version__, e))
    with torch.no_grad():
        emas = [[q.detach().clone() for q in params] for _ in range(MAX_SLOTS)]
        plain = [q.detach() for q in params]

    def call(k):
        opt.step()
        with torch.no_grad():
            for j in range(k):
                torch._foreach_lerp_(emas[j], plain, 1.0 - BETAS[j])

    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    for k in range(MAX_SLOTS + 1):
        for _ in range(args.warmup):
            call(k)
    torch.cuda.synchronize()
    times = {k: [] for k in range(MAX_SLOTS + 1)}
    for _ in range(args.iters):
        for k in range(MAX_SLOTS + 1):
            start.record()
            call(k)
            end.record()
            end.synchronize()
            times[k].append(start.elapsed_time(end))

    out = {str(k): statistics.median(times[k]) for k in times}
    out.update({"numel": args.numel, "tensors": args.tensors,
                "device": torch.cuda.get_device_name(dev), "torch": torch.__version__})
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
