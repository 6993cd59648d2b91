#!/usr/bin/env python3
"""Generates the PyTorch parity golden files for //examples:train_mlp.

Run with Debian's PyTorch:  /usr/bin/python3 examples/testdata/gen_parity_golden.py
It writes, next to this script:
  parity_data.safetensors    x F32 [N, D0], y F32 [N, DL]          (the --data file)
  parity_init.safetensors    layers.{i}.weight / layers.{i}.bias   (the --init file)
  parity_golden.safetensors  after T steps: params/<name>, ema_0.9/<name>, ema_0.99/<name>,
                             and losses F32 [T] (the training loss of each step)
The run: MLP 6-9-7-3 with gelu, MSE loss, global batch 8 taking rows (s*B + j) mod N,
torch.optim.AdamW(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, foreach=False),
global-norm clipping at 1.0 (torch.nn.utils.clip_grad_norm_), and two constant EMA slots updated
after every step with ema.lerp_(p, 1 - d) (= d*ema + (1-d)*p), initialised from the initial weights.
The test suite compares against these files; it never needs PyTorch.
"""
import os

import torch

from safetensors_io import save_safetensors

HERE = os.path.dirname(os.path.abspath(__file__))
LAYERS = [6, 9, 7, 3]
N, B, T = 20, 8, 12
LR, BETAS, EPS, WD, CLIP = 1e-2, (0.9, 0.95), 1e-8, 0.1, 1.0
DECAYS = ["0.9", "0.99"]


def main():
    torch.manual_seed(1234)
    x = torch.randn(N, LAYERS[0])
    y = torch.randn(N, LAYERS[-1])
    layers = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(LAYERS[:-1], LAYERS[1:]))
    init = {k: v.detach().clone() for k, v in layers.state_dict().items()}
    init = {"layers." + k: v for k, v in init.items()}

    def forward(inp):
        h = inp
        for i, lin in enumerate(layers):
            h = lin(h)
            if i + 1 < len(layers):
                h = torch.nn.functional.gelu(h)
        return h

    opt = torch.optim.AdamW(layers.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD, foreach=False)
    emas = {d: [p.detach().clone() for p in layers.parameters()] for d in DECAYS}
    losses = []
    for s in range(T):
        rows = torch.tensor([(s * B + j) % N for j in range(B)])
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(forward(x[rows]), y[rows])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(layers.parameters(), CLIP)
        opt.step()
        with torch.no_grad():
            for d in DECAYS:
                for e, p in zip(emas[d], layers.parameters()):
                    e.lerp_(p, 1.0 - float(d))
        losses.append(loss.item())

    names = ["layers." + k for k, _ in layers.named_parameters()]
    golden = {"losses": torch.tensor(losses, dtype=torch.float32)}
    for n, p in zip(names, layers.parameters()):
        golden["params/" + n] = p.detach().clone()
    for d in DECAYS:
        for n, e in zip(names, emas[d]):
            golden["ema_%s/%s" % (d, n)] = e
    save_safetensors(os.path.join(HERE, "parity_data.safetensors"), {"x": x, "y": y})
    save_safetensors(os.path.join(HERE, "parity_init.safetensors"), init)
    save_safetensors(os.path.join(HERE, "parity_golden.safetensors"), golden)
    print("wrote parity files; final loss %.6f" % losses[-1])


if __name__ == "__main__":
    main()
