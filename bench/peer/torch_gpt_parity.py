#!/usr/bin/env python3
"""PyTorch side of bench/gpt_autocast_parity.sh: train_gpt's GPT trained by PyTorch from a shared
initial model on shared tokens, per-step losses at f32 and under torch.autocast(bf16).

  python3 bench/peer/torch_gpt_parity.py --data TOKENS.bin --init-out INIT.safetensors
      [--device cuda|cpu] [--n-layer 4] [--n-head 4] [--n-embd 128] [--block-size 128]
      [--vocab-size 512] [--batch 8] [--steps 60] [--lr 3e-3] [--lr-schedule cosine|constant]
      [--warmup-steps 5] [--min-lr 3e-4] [--betas 0.9,0.95] [--eps 1e-8] [--weight-decay 0.1]
      [--clip-norm 1] [--precisions fp32,bf16] [--seed 0]

The model: examples/testdata/gpt_torch.py (train_gpt's twin, imported by its path relative to
this file, as torch_gpt_gpu.py does), built on the CPU from torch.manual_seed(--seed) (nanoGPT's
init), its vocabulary padded as train_gpt pads it (gpt_flops.padded_vocab: to a multiple of
64) with the padding rows of the tied wte / lm_head set to 0 (as train_gpt's --init of V real
rows leaves them). --init-out: that state_dict (lm_head.weight included, equal to wte; the
padded rows, a shape train_gpt's --init takes) as safetensors (examples/testdata/safetensors_io.py),
written before any training: the --init of train_gpt's runs.
The tokens: --data, a nanoGPT-style raw uint16 .bin, in train_gpt's --data-order sequential
(examples/gpt_data.cc SequenceOrder::Start): step s's sequence j starts at
o = ((s*B + j)*T) mod (N - T); inputs tokens[o:o+T], targets tokens[o+1:o+T+1].
One step, as train_gpt's (and examples/testdata/gen_gpt_golden.py, the CPU parity golden):
the learning rate of 1-based step s set by hand to optim/lr_schedule.h's LrAt (linear warmup
from 0 over --warmup-steps, then constant or cosine to --min-lr at --steps), zero_grad, forward
(under torch.autocast(device, bfloat16) for bf16; nothing for fp32, TF32 off), the loss = mean
cross-entropy over the B*T targets of the logits taken as f32 and restricted to the V real
columns (train_gpt masks the padding columns out of the softmax), backward,
clip_grad_norm_(--clip-norm; 0: off), torch.optim.AdamW(betas, eps, foreach=False) with
--weight-decay on the >= 2-D parameters (the embeddings included) and 0 on the others
(train_gpt's rule), step. No EMA (train_gpt's EMA slots never touch the loss).
Each precision starts from the same initial state with a fresh optimizer.
Prints one JSON line (stdout): the settings, torch, device_name, autocast, and losses
{precision: [loss of step 1, ..., loss of step S]}. Exit 0; 2 for bad arguments; 1 otherwise.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "..", "examples", "testdata"))
import gpt_flops  # noqa: E402
from gpt_torch import GPT  # noqa: E402  (train_gpt's model, shared with the parity golden)
from safetensors_io import save_safetensors  # noqa: E402


def lr_at(a, s):
    """optim/lr_schedule.h LrAt: 1-based step s, warmup from 0."""
    if a.warmup_steps > 0 and s <= a.warmup_steps:
        return a.lr * s / a.warmup_steps
    if a.lr_schedule == "constant":
        return a.lr
    if s > a.steps:
        return a.min_lr
    p = (s - a.warmup_steps) / (a.steps - a.warmup_steps)
    return a.min_lr + (a.lr - a.min_lr) * (1 + math.cos(math.pi * p)) / 2


def train(a, init, data, precision, device):
    """The per-step losses of --steps steps from `init` at `precision`."""
    T, B, V = a.block_size, a.batch, a.vocab_size
    model = GPT(a.n_layer, a.n_head, a.n_embd, T, gpt_flops.padded_vocab(V))
    model.load_state_dict(init)
    model.to(device)
    params = list(model.parameters())  # the tied weight once
    decay = [p for p in params if p.dim() >= 2]
    nodecay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": nodecay, "weight_decay": 0.0}],
                            lr=a.lr, betas=a.betas, eps=a.eps, foreach=False)
    amp = torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=precision == "bf16")
    n = data.numel()
    offs = torch.arange(T, device=device)
    losses = []
    for s in range(a.steps):
        starts = torch.tensor([((s * B + j) * T) % (n - T) for j in range(B)], device=device)
        rows = starts[:, None] + offs[None, :]
        x, y = data[rows], data[rows + 1]
        for g in opt.param_groups:
            g["lr"] = lr_at(a, s + 1)
        opt.zero_grad(set_to_none=True)
        with amp:
            logits = model(x)
        loss = F.cross_entropy(logits.float()[..., :V].reshape(-1, V), y.reshape(-1))
        loss.backward()
        if a.clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, a.clip_norm)
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True)
    p.add_argument("--init-out", required=True)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--vocab-size", type=int, default=512)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--lr-schedule", default="cosine", choices=["cosine", "constant"])
    p.add_argument("--warmup-steps", type=int, default=5)
    p.add_argument("--min-lr", type=float, default=3e-4)
    p.add_argument("--betas", default="0.9,0.95")
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--clip-norm", type=float, default=1.0)
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    try:
        a.betas = tuple(float(b) for b in a.betas.split(","))
        assert len(a.betas) == 2
    except (ValueError, AssertionError):
        p.error("--betas: b1,b2")
    precisions = [q for q in a.precisions.split(",") if q]
    if not precisions or any(q not in ("fp32", "bf16") for q in precisions):
        p.error("--precisions: fp32 and/or bf16")
    if a.steps < 1 or a.batch < 1 or a.block_size < 1 or a.n_embd % a.n_head:
        p.error("--steps, --batch, --block-size >= 1 and --n-head dividing --n-embd")
    if a.lr_schedule == "cosine" and a.steps <= a.warmup_steps:
        p.error("--lr-schedule cosine needs --steps > --warmup-steps")
    device = a.device
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("torch_gpt_parity: torch %s sees no CUDA device" % torch.__version__)

    tokens = np.fromfile(a.data, dtype="<u2")
    if tokens.size < a.block_size + 1 or int(tokens.max()) >= a.vocab_size:
        raise SystemExit("torch_gpt_parity: %s: %d tokens (>= --block-size + 1 needed), max %d "
                         "(< --vocab-size %d needed)" % (a.data, tokens.size, int(tokens.max()),
                                                         a.vocab_size))
    # The initial model, on the CPU (the same draws on any device).
    torch.manual_seed(a.seed)
    Vp = gpt_flops.padded_vocab(a.vocab_size)
    model = GPT(a.n_layer, a.n_head, a.n_embd, a.block_size, Vp)
    with torch.no_grad():
        model.transformer.wte.weight[a.vocab_size:] = 0  # train_gpt's padding rows
    init = {k: v.detach().clone() for k, v in model.state_dict().items()}
    save_safetensors(a.init_out, init)
    del model

    # Plain f32 products: no TF32 (train_gpt's f32 run has no --allow-tf32).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if device == "cuda":
        torch.cuda.set_device(0)
        # gpt_torch.py makes its position ids and causal mask with torch.arange / torch.ones:
        # the default device puts them on the GPU (as in torch_gpt_gpu.py).
        torch.set_default_device("cuda")
    data = torch.from_numpy(tokens.astype(np.int64)).to(device)
    losses = {}
    for q in precisions:
        losses[q] = train(a, init, data, q, device)
        if not all(math.isfinite(v) for v in losses[q]):
            raise SystemExit("torch_gpt_parity: a non-finite %s loss: %s" % (q, losses[q]))
    out = {"side": "torch", "device": device, "torch": torch.__version__,
           "device_name": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
           "autocast": "torch.autocast(%r, dtype=torch.bfloat16)" % device,
           "n_layer": a.n_layer, "n_head": a.n_head, "n_embd": a.n_embd,
           "block_size": a.block_size, "vocab": a.vocab_size, "vocab_padded": Vp,
           "batch": a.batch, "steps": a.steps, "lr": a.lr, "lr_schedule": a.lr_schedule,
           "warmup_steps": a.warmup_steps, "min_lr": a.min_lr, "betas": list(a.betas),
           "eps": a.eps, "weight_decay": a.weight_decay, "clip_norm": a.clip_norm,
           "adamw": "torch.optim.AdamW(foreach=False)", "losses": losses}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
