#!/usr/bin/env python3
"""FSDP2 peer for bench/gpt_step_bench.sh: train_gpt's model and step, in current PyTorch.

  bench/peer/.venv/bin/python bench/peer/torch_fsdp2_gpt.py --world 2 --n-layer 4 --n-head 4 \
      --n-embd 128 --block-size 64 --batch 16 --steps 10 --ema 2 --threads 1

The model is train_gpt's (examples/testdata/gpt_torch.py, the one the parity golden uses), byte
vocabulary; loss = mean cross-entropy over all B*T targets of the global
batch (each rank's B/W sequences of T random tokens). Each block is one FSDP2 unit, the root
(wte, wpe, ln_f, the tied lm_head) another, as train_gpt's embed/ln_f units. AdamW with nanoGPT's
groups (weight decay 0.1 on >= 2-D parameters) and betas (0.9, 0.95). The rest of the step
(loss all-reduce, grad norm, EMA slots, timing, the JSON line): bench/peer/fsdp2_step.py.
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F

import fsdp2_step

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples", "testdata"))
from gpt_torch import GPT  # noqa: E402  (train_gpt's model, shared with the parity golden)


def worker(rank, args):
    torch.manual_seed(0)
    model = GPT(args.n_layer, args.n_head, args.n_embd, args.block_size, 256)
    model, wrap = fsdp2_step.shard(model, list(model.transformer.h))
    params = list(model.parameters())  # the tied weight once
    decay = [p for p in params if p.dim() >= 2]
    nodecay = [p for p in params if p.dim() < 2]
    opt, kind = fsdp2_step.make_adamw(
        [{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
        lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    local = args.batch // args.world
    g = torch.Generator().manual_seed(rank)
    idx = torch.randint(0, 256, (local, args.block_size), generator=g)
    tgt = torch.randint(0, 256, (local, args.block_size), generator=g)

    def local_loss():
        # The local mean: FSDP2 and DDP average the gradients over the ranks' equal batches,
        # which gives the global mean's.
        return F.cross_entropy(model(idx).view(-1, 256), tgt.view(-1))

    fsdp2_step.train_loop(rank, args, model, params, opt, local_loss,
                          {"adamw": kind, "wrap": wrap, "n_layer": args.n_layer,
                           "n_head": args.n_head, "n_embd": args.n_embd,
                           "block_size": args.block_size, "batch": args.batch})


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    fsdp2_step.add_common_flags(p)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--block-size", type=int, default=64)
    args = p.parse_args()
    fsdp2_step.spawn(worker, args)


if __name__ == "__main__":
    main()
