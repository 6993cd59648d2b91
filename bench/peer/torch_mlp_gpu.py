#!/usr/bin/env python3
"""PyTorch peer of tools/gpu_check.sh's train_mlp_step check: train_mlp's MLP and training step
on one GPU, eager, in f32 (or bf16 autocast, train_mlp's --precision bf16).

  python3 bench/peer/torch_mlp_gpu.py [--device cuda|cpu] [--layers 1024,4096,4096,1024]
      [--activation relu|gelu] [--loss cross_entropy|mse] [--batch 256] [--synthetic-rows 8192]
      [--steps 50] [--warmup 10] [--lr 1e-3] [--betas 0.9,0.999] [--eps 1e-8]
      [--weight-decay 0.01] [--ema ""] [--dtype fp32|bf16] [--allow-tf32] [--seed 0]

The model is train_mlp's (examples/mlp_model.h, as bench/peer/torch_fsdp2_mlp.py builds it):
Linear(D0->D1), act, ..., Linear(D(L-1)->DL), torch.nn.Linear's own init; act relu or exact-erf
GELU; the loss the mean over the batch (cross_entropy: of -log softmax[label]; mse: of the
squared error over rows and outputs). The defaults are train_mlp's (--activation relu, AdamW lr
1e-3, betas 0.9,0.999, eps 1e-8, weight decay 0.01 on every parameter, no EMA, f32 without TF32)
except the shape and --loss, which are the check's (tools/gpu_check.sh STEP_FLAGS).
The data: train_mlp's synthetic task drawn by torch's RNG (not the same numbers): --synthetic-rows
inputs x ~ N(0, 1) and a teacher MLP of the same layers and activation (weights
U(-sqrt(3/in), sqrt(3/in)), biases U(-0.1, 0.1)); mse regresses its outputs, cross_entropy
predicts their argmax. All rows live on the device; step s uses rows (s*B + j) mod N, j < B,
indexed on the device (no copy, no host wait), as train_mlp reads them.
One step: zero_grad(set_to_none), forward (under autocast(bf16) for --dtype bf16, f32 master
weights), the loss, backward, the global gradient norm on the device (train_mlp's optimizer
computes it every step for its non-finite check; nothing is clipped: --clip-norm 0), AdamW
(fused=True on CUDA, else foreach), and one EMA copy per --ema decay updated with
torch._foreach_lerp_ (bench/peer/gpu_peer_lib.py: the timing, AdamW, EMA and memory pieces,
shared with torch_gpt_gpu.py).
Timing: a CUDA event at each step's start and one after the last; a step is from its start to
the next's (as train_mlp's --bench-json); median and mean over the --steps after --warmup.
Memory: torch.cuda.max_memory_allocated / max_memory_reserved, and peak_device_used_mib (total -
free, the CUDA context included, at each step's end, as --bench-json reads it).
--device cpu (a small shape) is the plumbing's dry run without a GPU: the host clock, no device
memory.
Prints one JSON line (stdout): the settings, step_ms, step_ms_mean, steps_ms, timed_steps,
params, max_memory_allocated_mib, max_memory_reserved_mib, peak_device_used_mib, loss_first,
loss_last, adamw, ema_update, torch, device_name.
Exit: 0, 2 for bad arguments, 3 when torch cannot be imported or (--device cuda) sees no CUDA
device (the check reports the peer as unavailable), 1 on any other failure.
"""
import argparse
import json
import math
import os
import statistics
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print("torch_mlp_gpu: cannot import torch: %s" % e, file=sys.stderr)
    sys.exit(3)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_peer_lib import Ema, cuda_memory, make_adamw, run_steps  # noqa: E402


def mlp(dims, activation):
    """train_mlp's model: Linear, act, ..., Linear (no activation after the last)."""
    mods = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        mods.append(torch.nn.Linear(a, b))
        if i + 2 < len(dims):
            mods.append(torch.nn.ReLU() if activation == "relu" else torch.nn.GELU())
    return torch.nn.Sequential(*mods)


@torch.no_grad()
def synthetic(dims, activation, loss, rows, device, gen):
    """train_mlp's synthetic task (see the doc): x [rows, D0] and its targets, on `device`."""
    x = torch.randn(rows, dims[0], generator=gen).to(device)
    h = x
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        bound = math.sqrt(3.0 / a)
        w = (torch.rand(b, a, generator=gen) * 2 - 1).mul_(bound).to(device)
        bias = (torch.rand(b, generator=gen) * 0.2 - 0.1).to(device)
        h = F.linear(h, w, bias)
        if i + 2 < len(dims):
            h = F.relu(h) if activation == "relu" else F.gelu(h)
    return x, (h.argmax(dim=1) if loss == "cross_entropy" else h)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--layers", default="1024,4096,4096,1024")
    p.add_argument("--activation", default="relu", choices=["relu", "gelu"])
    p.add_argument("--loss", default="cross_entropy", choices=["cross_entropy", "mse"])
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--synthetic-rows", type=int, default=8192)
    p.add_argument("--steps", type=int, default=50, help="timed steps, after --warmup")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--betas", default="0.9,0.999")
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--ema", default="", help="EMA decays d1,d2,... (train_mlp's --ema)")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--allow-tf32", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    try:
        dims = [int(d) for d in a.layers.split(",")]
        betas = tuple(float(b) for b in a.betas.split(","))
        decays = [float(d) for d in a.ema.split(",") if d]
    except ValueError:
        p.error("--layers D0,D1,..., --betas b1,b2, --ema d1,d2,...: numbers")
    if len(dims) < 2 or min(dims) < 1 or len(betas) != 2:
        p.error("--layers: at least two positive sizes; --betas: two numbers")
    if a.steps < 1 or a.warmup < 0 or a.batch < 1 or a.synthetic_rows < 1:
        p.error("--steps >= 1, --warmup >= 0, --batch >= 1 and --synthetic-rows >= 1")
    if a.loss == "cross_entropy" and dims[-1] < 2:
        p.error("--loss cross_entropy needs at least 2 classes")
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("torch_mlp_gpu: torch %s sees no CUDA device" % torch.__version__, file=sys.stderr)
        sys.exit(3)
    if cuda:
        torch.cuda.set_device(0)
        torch.backends.cuda.matmul.allow_tf32 = a.allow_tf32  # train_mlp: off unless --allow-tf32
        torch.backends.cudnn.allow_tf32 = a.allow_tf32

    torch.manual_seed(a.seed)
    model = mlp(dims, a.activation).to(a.device)
    params = list(model.parameters())
    n_params = sum(q.numel() for q in params)
    opt, adamw = make_adamw(params, cuda, lr=a.lr, betas=betas, eps=a.eps,
                            weight_decay=a.weight_decay)
    ema = Ema(params, decays)
    x, y = synthetic(dims, a.activation, a.loss, a.synthetic_rows, a.device,
                     torch.Generator().manual_seed(a.seed + 1))
    N, B = a.synthetic_rows, a.batch
    seqs = torch.arange(B, device=a.device)
    amp = torch.autocast(device_type=a.device, dtype=torch.bfloat16, enabled=a.dtype == "bf16")
    foreach_norm = getattr(torch, "_foreach_norm", None)

    def step(s):
        rows = (s * B + seqs) % N  # on the device: no copy, no host wait
        opt.zero_grad(set_to_none=True)
        with amp:
            out = model(x[rows])
        if a.loss == "cross_entropy":
            loss = F.cross_entropy(out.float(), y[rows])
        else:
            loss = F.mse_loss(out.float(), y[rows])
        loss.backward()
        grads = [q.grad for q in params]
        norms = foreach_norm(grads) if foreach_norm else [g.norm() for g in grads]
        torch.linalg.vector_norm(torch.stack(norms))  # the global norm, left on the device
        opt.step()
        ema.update()
        return loss.detach()

    steps_ms, timed, losses, used_peak = run_steps(step, a.warmup, a.steps, cuda)
    loss_first, loss_last = float(losses[0]), float(losses[-1])
    if not (math.isfinite(loss_first) and math.isfinite(loss_last)):
        raise SystemExit("torch_mlp_gpu: non-finite loss %s, %s" % (loss_first, loss_last))
    out = {"side": "torch", "device": a.device,
           "device_name": torch.cuda.get_device_name(0) if cuda else "cpu",
           "torch": torch.__version__, "dtype": a.dtype, "allow_tf32": a.allow_tf32,
           "adamw": adamw, "ema_update": ema.kind, "ema": decays, "layers": dims,
           "activation": a.activation, "loss": a.loss, "batch": B, "synthetic_rows": N,
           "params": n_params, "step_ms": round(statistics.median(timed), 4),
           "step_ms_mean": round(statistics.mean(timed), 4),
           "steps_ms": [round(t, 4) for t in steps_ms], "timed_steps": len(timed),
           "loss_first": round(loss_first, 5), "loss_last": round(loss_last, 5)}
    if cuda:
        out.update(cuda_memory(used_peak))
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
