"""nanoGPT-shaped GPT in PyTorch with train_gpt's names, shapes and math (examples/gpt_model.h):
pre-LN blocks, LayerNorm eps 1e-5, tanh GELU, causal attention with q, k, v the three C-wide
chunks of c_attn and heads of C/n_head consecutive columns, lm_head tied to wte, no dropout,
nanoGPT's init drawn by torch's RNG. Used by gen_gpt_golden.py (the parity golden), by
bench/peer/torch_fsdp2_gpt.py and torch_gpt_gpu.py (the benchmark peers) and by
bench/peer/torch_gpt_parity.py (bench/gpt_autocast_parity.sh's bf16 autocast check).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(c, eps=1e-5)
        self.attn = nn.Module()
        self.attn.c_attn = nn.Linear(c, 3 * c)
        self.attn.c_proj = nn.Linear(c, c)
        self.ln_2 = nn.LayerNorm(c, eps=1e-5)
        self.mlp = nn.Module()
        self.mlp.c_fc = nn.Linear(c, 4 * c)
        self.mlp.c_proj = nn.Linear(4 * c, c)

    def attention(self, x):
        b, t, c = x.shape
        q, k, v = self.attn.c_attn(x).split(c, dim=2)
        hs = c // self.n_head
        q, k, v = (z.view(b, t, self.n_head, hs).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.attn.c_proj(y)

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, n_layer, n_head, c, block_size, vocab):
        super().__init__()
        self.vocab = vocab
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, c),
            wpe=nn.Embedding(block_size, c),
            h=nn.ModuleList([Block(c, n_head) for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(c, eps=1e-5),
        ))
        self.lm_head = nn.Linear(c, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer))
            elif p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif "ln_" in name and name.endswith(".weight"):
                nn.init.ones_(p)
            else:
                nn.init.zeros_(p)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(t))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))
