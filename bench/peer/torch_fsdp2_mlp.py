#!/usr/bin/env python3
"""FSDP2 peer for bench/step_bench: train_mlp's MLP and step, in current PyTorch.

  bench/peer/.venv/bin/python bench/peer/torch_fsdp2_mlp.py --world 2 \
      --layers 1024,1024,1024,1024,16 --batch 32 --steps 20 --ema 2 --threads 1

Spawns --world processes (gloo, CPU). The model is train_mlp's: Linear, GELU (exact erf), ...,
Linear, MSE loss over the global batch. Each Linear is one FSDP2 unit
(torch.distributed.fsdp.fully_shard, parameters sharded 1/W, reshard after forward), the root is
wrapped too. Every step does what train_mlp's step does: forward/backward of the rank's
batch/W rows, the loss all-reduced, the global gradient norm, AdamW (fused, else foreach) on the
shards, and --ema EMA copies of the shards updated with torch._foreach_lerp_.
Threads per rank: --threads (torch.set_num_threads). Timing: after a barrier, wall and process
CPU time of each step; the median over the timed steps, the slowest rank's.
Prints one JSON line from rank 0: {"world", "step_ms", "cpu_ms", "peak_rss_mib" (per rank,
getrusage maxrss), "base_rss_mib" (per rank, after `import torch` and the process group, before
the model), "state_bytes_per_rank" (parameter + AdamW + EMA shards), "params", "torch",
"blas"}.
"""
import argparse
import json
import os
import resource
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.fsdp import fully_shard


def blas_name():
    cfg = torch.__config__.show()
    for name in ("mkl", "openblas", "blis"):
        if ("BLAS_INFO=" + name) in cfg or ("USE_" + name.upper() + "=ON") in cfg:
            return name
    return "unknown"


def current_rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2.0**20


def run(rank, args, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(max(1, args.threads))
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    base_rss = current_rss_mib()
    dims = [int(d) for d in args.layers.split(",")]
    torch.manual_seed(0)
    mods = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        mods.append(torch.nn.Linear(a, b))
        if i + 2 < len(dims):
            mods.append(torch.nn.GELU())
    model = torch.nn.Sequential(*mods)
    for m in model:
        if isinstance(m, torch.nn.Linear):
            fully_shard(m)
    fully_shard(model)
    params = list(model.parameters())
    try:
        opt = torch.optim.AdamW(params, lr=1e-3, fused=True)
        opt_kind = "fused"
    except (RuntimeError, ValueError):
        opt = torch.optim.AdamW(params, lr=1e-3, foreach=True)
        opt_kind = "foreach"
    shards = [p.to_local() for p in params]
    emas = [[s.detach().clone() for s in shards] for _ in range(args.ema)]
    local = args.batch // args.world
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(local, dims[0], generator=g)
    y = torch.randn(local, dims[-1], generator=g)
    walls, cpus = [], []
    for step in range(args.warmup + args.steps):
        dist.barrier()
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=False)
        # Sum over the local rows / global rows: the gradients sum to the global mean's.
        loss = torch.nn.functional.mse_loss(model(x), y, reduction="sum") / (args.batch * dims[-1])
        loss.backward()
        total = loss.detach().clone()
        dist.all_reduce(total)
        norm = torch.nn.utils.clip_grad_norm_(params, float("inf"))
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        norm.item()
        opt.step()
        with torch.no_grad():
            for e in emas:
                torch._foreach_lerp_(e, shards, 1.0 - 0.999)
        t, c = time.perf_counter() - t0, time.process_time() - c0
        if step >= args.warmup:
            walls.append(t)
            cpus.append(c)
    med = torch.tensor([statistics.median(walls), statistics.median(cpus)])
    dist.all_reduce(med, op=dist.ReduceOp.MAX)
    rss = torch.zeros(2, args.world)
    rss[0, rank] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    rss[1, rank] = base_rss
    dist.all_reduce(rss)
    n = sum(p.numel() for p in params)
    local_n = sum(s.numel() for s in shards)
    state = 4 * local_n * (3 + args.ema)
    if rank == 0:
        print(json.dumps({"world": args.world, "step_ms": med[0].item() * 1e3,
                          "cpu_ms": med[1].item() * 1e3,
                          "peak_rss_mib": [round(v, 1) for v in rss[0].tolist()],
                          "base_rss_mib": [round(v, 1) for v in rss[1].tolist()],
                          "state_bytes_per_rank": state, "params": n,
                          "torch": torch.__version__, "blas": blas_name(),
                          "adamw": opt_kind}), flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--layers", default="1024,1024,1024,1024,16")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--ema", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--port", type=int, default=29533)
    args = p.parse_args()
    if args.batch % args.world:
        raise SystemExit("--batch %d is not divisible by --world %d" % (args.batch, args.world))
    mp.spawn(run, args=(args, args.port), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
