#!/usr/bin/env python3
"""Generates the PyTorch parity golden files for //examples:train_gpt.

Run with Debian's PyTorch:  /usr/bin/python3 examples/testdata/gen_gpt_golden.py
It writes, next to this script:
  gpt_parity_data.txt             the --data file (its bytes are the tokens)
  gpt_parity_init.safetensors     the model's state_dict after nanoGPT's init drawn by torch's RNG
                                  (the --init file; lm_head.weight included, equal to wte)
  gpt_parity_golden.safetensors   losses F32 [STEPS] (the training loss of each step), and after
                                  STEPS steps params/<name> and ema_0.9/<name> for every parameter
The run: a nanoGPT-shaped GPT (gpt_torch.py: pre-LN blocks, LayerNorm eps 1e-5, tanh GELU,
causal attention with q, k, v the three C-wide chunks of c_attn, heads of C/n_head consecutive
columns, lm_head tied to wte, no dropout) with n_layer 2, n_head 2, n_embd 16, block size 8,
vocab 256; --batch 12 sequences per step in the sequential order: sequence j of step s starts at
((s*B + j)*T) mod (N - T); loss = mean cross-entropy over all B*T targets;
torch.optim.AdamW(betas=(0.9, 0.95), eps=1e-8, foreach=False) with weight decay 0.1 on the >= 2-D
parameters and 0 on the others (nanoGPT's groups), the learning rate of step s (1-based) set by
hand to optim/lr_schedule.h's linear warmup (3 steps) + cosine to 1e-3 over 12 steps from 1e-2,
global-norm clipping at 1.0 (clip_grad_norm_), and one constant EMA (decay 0.9, lerp_) of the
parameters, initialised from the initial weights. The test suite never needs PyTorch.
"""
import math
import os

import torch
import torch.nn.functional as F

from gpt_torch import GPT
from safetensors_io import save_safetensors

HERE = os.path.dirname(os.path.abspath(__file__))
N_LAYER, N_HEAD, N_EMBD, T, V = 2, 2, 16, 8, 256
B, STEPS = 12, 12
LR, MIN_LR, WARMUP = 1e-2, 1e-3, 3
BETAS, EPS, WD, CLIP, DECAY = (0.9, 0.95), 1e-8, 0.1, 1.0, 0.9

TEXT = (
    "A sharded parameter store keeps one slice of every weight on each rank. Before a block runs "
    "forward, its slices are gathered into the full tensors; afterwards they are released again, "
    "so that no rank ever holds the whole model at once. The backward pass gathers the blocks in "
    "reverse order, and each gradient is reduce-scattered back into slices, averaged over ranks. "
    "The optimizer then updates the slice it owns, and the moving averages of the weights are "
    "updated in the same pass, one slice per rank, without any extra communication at all.\n"
)


def lr_at(s):
    """optim/lr_schedule.h, 1-based step s."""
    if s <= WARMUP:
        return LR * s / WARMUP
    p = (s - WARMUP) / (STEPS - WARMUP)
    return MIN_LR + (LR - MIN_LR) * (1 + math.cos(math.pi * p)) / 2


def main():
    torch.manual_seed(1234)
    tokens = torch.tensor(list(TEXT.encode()), dtype=torch.int64)
    n = len(tokens)
    model = GPT(N_LAYER, N_HEAD, N_EMBD, T, V)
    init = {k: v.clone() for k, v in model.state_dict().items()}
    named = list(model.named_parameters())  # unique parameters: lm_head.weight is wte
    decay = [p for _, p in named if p.dim() >= 2]
    nodecay = [p for _, p in named if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS, foreach=False)
    ema = [p.detach().clone() for _, p in named]
    losses = []
    for s in range(STEPS):
        starts = [((s * B + j) * T) % (n - T) for j in range(B)]
        idx = torch.stack([tokens[o:o + T] for o in starts])
        tgt = torch.stack([tokens[o + 1:o + T + 1] for o in starts])
        for g in opt.param_groups:
            g["lr"] = lr_at(s + 1)
        opt.zero_grad()
        loss = F.cross_entropy(model(idx).view(-1, V), tgt.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        with torch.no_grad():
            for e, (_, p) in zip(ema, named):
                e.lerp_(p, 1.0 - DECAY)
        losses.append(loss.item())

    golden = {"losses": torch.tensor(losses, dtype=torch.float32)}
    for (name, p), e in zip(named, ema):
        golden["params/" + name] = p.detach().clone()
        golden["ema_0.9/" + name] = e
    with open(os.path.join(HERE, "gpt_parity_data.txt"), "wb") as f:
        f.write(TEXT.encode())
    save_safetensors(os.path.join(HERE, "gpt_parity_init.safetensors"), init)
    save_safetensors(os.path.join(HERE, "gpt_parity_golden.safetensors"), golden)
    print("wrote gpt parity files: %d tokens; losses %.6f -> %.6f" % (n, losses[0], losses[-1]))


if __name__ == "__main__":
    main()
