#!/usr/bin/env python3
"""PyTorch peer for bench/step_bench: the same MLP trained with DDP over gloo.

  /usr/bin/python3 bench/peer/torch_ddp_mlp.py --world 2 --layers 1024,1024,1024,1024,1024 \
      --batch 64 --steps 30 --ema 2

Spawns --world processes (gloo, CPU), each holding a full replica: parameters, AdamW state
(foreach=True) and --ema EMA copies updated with torch._foreach_lerp_ (mul_+add_ before 2.0) after every step.
Prints one JSON line from rank 0: {"world", "step_ms" (median over timed steps, max over ranks),
"state_bytes_per_rank" (params + exp_avg + exp_avg_sq + EMA copies), "params"}.
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, args, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(max(1, args.threads))
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    dims = [int(d) for d in args.layers.split(",")]
    torch.manual_seed(0)
    mods = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        mods.append(torch.nn.Linear(a, b))
        if i + 2 < len(dims):
            mods.append(torch.nn.GELU())
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(*mods))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    params = list(model.parameters())
    emas = [[p.detach().clone() for p in params] for _ in range(args.ema)]
    local = args.batch // args.world
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(local, dims[0], generator=g)
    y = torch.randn(local, dims[-1], generator=g)
    times = []
    for step in range(args.warmup + args.steps):
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        with torch.no_grad():
            detached = [p.detach() for p in params]
            for e in emas:
                if hasattr(torch, "_foreach_lerp_"):
                    torch._foreach_lerp_(e, detached, 1.0 - 0.999)
                else:  # PyTorch < 2.0: the same update as two foreach kernels
                    torch._foreach_mul_(e, 0.999)
                    torch._foreach_add_(e, detached, alpha=1.0 - 0.999)
        t = time.perf_counter() - t0
        if step >= args.warmup:
            times.append(t)
    med = torch.tensor([statistics.median(times)])
    dist.all_reduce(med, op=dist.ReduceOp.MAX)
    n = sum(p.numel() for p in params)
    state = 4 * n + 8 * n + 4 * n * args.ema
    if rank == 0:
        print(json.dumps({"world": args.world, "step_ms": med.item() * 1e3,
                          "state_bytes_per_rank": state, "params": n}), flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--layers", default="1024,1024,1024,1024,1024")
    p.add_argument("--batch", type=int, default=64)
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
