#!/usr/bin/env python3
"""Generates the PyTorch parity golden files for //examples:train_gpt.

Run with Debian's PyTorch:  /usr/bin/python3 examples/testdata/gen_gpt_golden.py
It writes, next to this script:
  gpt_parity_data.txt             the --data file (its bytes are the tokens)
  gpt_parity_init.safetensors     the model's state_dict after nanoGPT's init drawn by torch's RNG
                                  (the --init file; lm_head.weight included, equal to wte)
  gpt_parity_golden.safetensors   losses F32 [STEPS] (the training loss of each step), and after
                                  STEPS steps params/<name> and ema_0.9/<name> for every parameter
The run: a nanoGPT-shaped GPT (written out below: pre-LN blocks, LayerNorm eps 1e-5, tanh GELU,
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
import torch.nn as nn
import torch.nn.functional as F

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


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(N_EMBD, eps=1e-5)
        self.attn = nn.Module()
        self.attn.c_attn = nn.Linear(N_EMBD, 3 * N_EMBD)
        self.attn.c_proj = nn.Linear(N_EMBD, N_EMBD)
        self.ln_2 = nn.LayerNorm(N_EMBD, eps=1e-5)
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(N_EMBD, 4 * N_EMBD)
        self.mlp.c_proj = nn.Linear(4 * N_EMBD, N_EMBD)

    def attention(self, x):
        b, t, c = x.shape
        q, k, v = self.attn.c_attn(x).split(N_EMBD, dim=2)
        hs = c // N_HEAD
        q = q.view(b, t, N_HEAD, hs).transpose(1, 2)
        k = k.view(b, t, N_HEAD, hs).transpose(1, 2)
        v = v.view(b, t, N_HEAD, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.attn.c_proj(y)

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(V, N_EMBD),
            wpe=nn.Embedding(T, N_EMBD),
            h=nn.ModuleList([Block() for _ in range(N_LAYER)]),
            ln_f=nn.LayerNorm(N_EMBD, eps=1e-5),
        ))
        self.lm_head = nn.Linear(N_EMBD, V, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied
        # nanoGPT's init (drawn by torch's RNG here; train_gpt only reads it via --init).
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * N_LAYER))
            elif p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif "ln_" in name and name.endswith(".weight"):
                nn.init.ones_(p)
            else:
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(t))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits.view(-1, V), targets.view(-1))


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
    model = GPT()
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
        loss = model(idx, tgt)
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
