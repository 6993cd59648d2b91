#!/usr/bin/env python3
"""FSDP2 peer for bench/step_bench: train_mlp's MLP and step, in current PyTorch.

  bench/peer/.venv/bin/python bench/peer/torch_fsdp2_mlp.py --world 2 \
      --layers 1024,1024,1024,1024,16 --batch 32 --steps 20 --ema 2 --threads 1

The model is train_mlp's: Linear, GELU (exact erf), ..., Linear, MSE loss over the global batch
(each rank's batch/W rows). Each Linear is one FSDP2 unit (parameters sharded 1/W, reshard after
forward), the root is wrapped too. AdamW (lr 1e-3). The rest of the step (loss all-reduce, grad
norm, EMA slots, timing, memory, the JSON line): bench/peer/fsdp2_step.py.
"""
import argparse

import torch

import fsdp2_step


def worker(rank, args):
    dims = [int(d) for d in args.layers.split(",")]
    torch.manual_seed(0)
    mods = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        mods.append(torch.nn.Linear(a, b))
        if i + 2 < len(dims):
            mods.append(torch.nn.GELU())
    model = torch.nn.Sequential(*mods)
    model, wrap = fsdp2_step.shard(model, [m for m in model if isinstance(m, torch.nn.Linear)])
    params = list(model.parameters())
    opt, kind = fsdp2_step.make_adamw(params, lr=1e-3)
    local = args.batch // args.world
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(local, dims[0], generator=g)
    y = torch.randn(local, dims[-1], generator=g)

    def local_loss():
        # Sum over the local rows / global rows: the gradients sum to the global mean's.
        out = model(x)
        return torch.nn.functional.mse_loss(out, y, reduction="sum") / (args.batch * dims[-1])

    fsdp2_step.train_loop(rank, args, model, params, opt, local_loss, {"adamw": kind, "wrap": wrap})


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    fsdp2_step.add_common_flags(p)
    p.add_argument("--layers", default="1024,1024,1024,1024,16")
    args = p.parse_args()
    fsdp2_step.spawn(worker, args)


if __name__ == "__main__":
    main()
