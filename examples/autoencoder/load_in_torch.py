#!/usr/bin/env python3
"""Loads an exported train_autoencoder slot into its PyTorch twin with strict=True and prints the
mean squared reconstruction error over every row of the data (standardised as the trainer does).

  load_in_torch.py WEIGHTS.safetensors DATA.csv HIDDEN
Exit 77 when torch is missing (the test reports itself skipped), 1 on any mismatch.
"""
import json
import struct
import sys

try:
    import torch
    from torch import nn
except ImportError:
    print("load_in_torch: no torch", file=sys.stderr)
    sys.exit(77)


class TiedAutoencoder(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.enc = nn.Linear(d, h)
        self.dec_bias = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return torch.relu(self.enc(x)) @ self.enc.weight + self.dec_bias


def read_safetensors(path):
    """The F32 tensors of a safetensors file (its format: u64 header size, JSON header, data)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (name, t["dtype"])
        a, b = t["data_offsets"]
        out[name] = torch.frombuffer(bytearray(blob[8 + n + a:8 + n + b]),
                                     dtype=torch.float32).reshape(t["shape"])
    return out


def main():
    weights, data, hidden = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(data) as f:
        rows = [line.strip().split(",") for line in f]
    x = torch.tensor([[float(v) for v in r[:-1]] for r in rows[1:]], dtype=torch.float64)
    x = ((x - x.mean(0)) / x.std(0, unbiased=False)).float()
    model = TiedAutoencoder(x.shape[1], hidden)
    model.load_state_dict(read_safetensors(weights), strict=True)
    with torch.no_grad():
        print("%.7f" % torch.mean((model(x) - x) ** 2).item())


if __name__ == "__main__":
    main()
