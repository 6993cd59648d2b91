#!/usr/bin/env python3
"""PyTorch peer of bench/gpu_gpt_bench.sh: train_gpt's GPT and training step on one GPU, eager
(or torch.compile), bf16 autocast, and a large bf16 GEMM for the MFU reference.

  python3 bench/peer/torch_gpt_gpu.py --data TOKENS.bin [--device cuda] [--n-layer 12]
      [--n-head 12] [--n-embd 768] [--block-size 1024] [--vocab-size 50257] [--batch 8]
      [--steps 5] [--warmup 2] [--ema 0.999,0.9999] [--lr 6e-4] [--dtype bf16|fp32]
      [--attention naive|sdpa] [--compile] [--gemm-size 8192] [--gemm-iters 10]
  python3 bench/peer/torch_gpt_gpu.py --probe-batch MAX [the model and optimizer flags]

The model is train_gpt's twin (examples/testdata/gpt_torch.py, imported by its path relative to
this file, as bench/peer/torch_fsdp2_gpt.py does) with the vocabulary padded as train_gpt pads it
(bench/peer/gpt_flops.py padded_vocab: 50257 -> 50304; no target is ever a padding token).
--attention sdpa (the default) replaces the twin's own attention by
F.scaled_dot_product_attention(is_causal=True), PyTorch's fused attention (train_gpt's CUDA
attention is fused too); naive keeps the twin's (the T x T probabilities materialised).
The tokens: --data, a nanoGPT-style raw uint16 .bin (the file train_gpt reads), taken in
train_gpt's --data-order sequential: step s's sequence j starts at ((s*B + j)*T) mod (N - T),
inputs tokens[o:o+T], targets tokens[o+1:o+T+1] (the whole file is put on the device once).
One step: zero_grad(set_to_none), forward under autocast(--dtype) with fp32 master weights,
mean cross-entropy over the B*T targets, backward, the global gradient norm clipped to 1
(train_gpt's --clip-norm 1), AdamW (nanoGPT's groups: weight decay 0.1 on >= 2-D parameters,
betas 0.9,0.95; fused=True on CUDA, else foreach), and one EMA copy per --ema decay updated with
torch._foreach_lerp_ (a per-tensor lerp_ where this torch has none). No host sync inside a step.
(The timing, AdamW, EMA and memory pieces: bench/peer/gpu_peer_lib.py, shared with
torch_mlp_gpu.py.)
Timing: a CUDA event at each step's start and one after the last; a step is from its start to
the next's (as train_gpt's --bench-json); median and mean over the --steps after --warmup.
Memory: torch.cuda.max_memory_allocated and max_memory_reserved over the training (before the
GEMM), and peak_device_used_mib, the device memory in use (torch.cuda.mem_get_info: total -
free, the CUDA context included) read at each step's end, as train_gpt's --bench-json reads it.
GEMM: torch.matmul of two --gemm-size square bf16 matrices of N(0, 1) values (cuBLASLt), after
3 warm-up products, --gemm-iters timed by CUDA events; gemm_tflops = 2 n^3 / mean time.
MFU (bench/peer/gpt_flops.py: 6 N + 12 L T C FLOPs per token): against the data-sheet dense
bf16 peak of the card (mfu_peak; "na" for a card not in its table) and against gemm_tflops
(mfu_gemm).
--device cpu (with --dtype fp32, a tiny shape and --gemm-size small) is the plumbing's dry run
without a GPU: CPU wall clock instead of events, no device memory.
Prints one JSON line (stdout): the settings, step_ms, step_ms_mean, steps_ms, timed_steps,
tokens_per_s, params, flops_per_token, tflops, peak_tflops, peak_source, mfu_peak, gemm_tflops,
mfu_gemm, max_memory_allocated_mib, max_memory_reserved_mib, peak_device_used_mib, loss_first,
loss_last, adamw, ema_update, compile_s (the first step's time when --compile), torch, device_name.
--probe-batch MAX (no --data: random tokens): the largest power of two B <= MAX at which two
training steps of the same model, optimizer and EMA run on the GPU without running out of memory,
trying MAX, MAX/2, ... in one process (the device cache emptied after each failure); prints one
JSON line {"probe_batch": B, "tried": {B: "fits" or "oom"}} (B 0 when none fits).
Exit: 0, 2 for bad arguments, 1 on any failure (e.g. torch.compile failing: the driver reports
it as unavailable).
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "..", "examples", "testdata"))
import gpt_flops  # noqa: E402
from gpu_peer_lib import Clock, Ema, cuda_memory, make_adamw, run_steps  # noqa: E402
from gpt_torch import GPT, Block  # noqa: E402  (train_gpt's model, shared with the parity golden)


def sdpa_attention(self, x):
    """Block.attention through F.scaled_dot_product_attention (the same math, fused)."""
    b, t, c = x.shape
    q, k, v = self.attn.c_attn(x).split(c, dim=2)
    hs = c // self.n_head
    q, k, v = (z.view(b, t, self.n_head, hs).transpose(1, 2) for z in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return self.attn.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


def gemm_tflops(n, iters, device):
    """Mean TFLOP/s of torch.matmul of two n x n bf16 matrices (None when n is 0)."""
    if n <= 0:
        return None
    g = torch.Generator(device=device).manual_seed(1)
    dtype = torch.bfloat16
    a = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=g)
    for _ in range(3):
        c = torch.matmul(a, b)
    clock = Clock(device == "cuda")
    if device == "cuda":
        torch.cuda.synchronize()
    clock.mark()
    for _ in range(iters):
        c = torch.matmul(a, b)
    clock.mark()
    ms = clock.intervals_ms()[0] / iters
    del a, b, c
    return 2.0 * n ** 3 / (ms * 1e-3) / 1e12


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data")
    p.add_argument("--probe-batch", type=int, default=0)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--n-layer", type=int, default=12)
    p.add_argument("--n-head", type=int, default=12)
    p.add_argument("--n-embd", type=int, default=768)
    p.add_argument("--block-size", type=int, default=1024)
    p.add_argument("--vocab-size", type=int, default=50257)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=5, help="timed steps, after --warmup")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--ema", default="0.999,0.9999")
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    p.add_argument("--attention", default="sdpa", choices=["naive", "sdpa"])
    p.add_argument("--compile", action="store_true")
    p.add_argument("--gemm-size", type=int, default=8192)
    p.add_argument("--gemm-iters", type=int, default=10)
    a = p.parse_args()
    if a.steps < 1 or a.warmup < 0 or a.batch < 1 or a.block_size < 1:
        p.error("--steps >= 1, --warmup >= 0, --batch >= 1 and --block-size >= 1")
    if a.n_embd % a.n_head:
        p.error("--n-embd %d is not divisible by --n-head %d" % (a.n_embd, a.n_head))
    try:
        decays = [float(d) for d in a.ema.split(",") if d]
    except ValueError:
        p.error("--ema: decays d1,d2,...")
    if not a.data and a.probe_batch <= 0:
        p.error("--data is required (or --probe-batch MAX)")
    if a.probe_batch > 0 and a.device != "cuda":
        p.error("--probe-batch probes the GPU's memory: --device cuda")
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise SystemExit("torch_gpt_gpu: torch %s sees no CUDA device" % torch.__version__)

    T, B, V = a.block_size, a.batch, a.vocab_size
    Vp = gpt_flops.padded_vocab(V)
    if a.probe_batch > 0:  # random tokens, enough for any batch (sequences wrap around)
        tokens = np.random.default_rng(0).integers(0, V, size=64 * T + 1).astype("<u2")
    else:
        tokens = np.fromfile(a.data, dtype="<u2")
    if tokens.size < T + 1:
        raise SystemExit("torch_gpt_gpu: %s has %d tokens, fewer than --block-size + 1"
                         % (a.data, tokens.size))
    if int(tokens.max()) >= V:
        raise SystemExit("torch_gpt_gpu: a token of %s is >= --vocab-size %d" % (a.data, V))

    torch.manual_seed(0)
    if cuda:
        torch.cuda.set_device(0)
        # gpt_torch.py makes its position ids and causal mask with torch.arange / torch.ones:
        # the default device puts them (and the model) on the GPU.
        torch.set_default_device("cuda")
    if a.attention == "sdpa":
        Block.attention = sdpa_attention
    model = GPT(a.n_layer, a.n_head, a.n_embd, T, Vp).to(a.device)
    params = list(model.parameters())  # the tied weight once
    n_params = sum(q.numel() for q in params)
    decay = [q for q in params if q.dim() >= 2]
    nodecay = [q for q in params if q.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}]
    opt, adamw = make_adamw(groups, cuda, lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    ema = Ema(params, decays)
    ema_update = ema.kind

    data = torch.from_numpy(tokens.astype(np.int64)).to(a.device)
    N = data.numel()
    offs = torch.arange(T, device=a.device)
    fwd = torch.compile(model) if a.compile else model
    amp = torch.autocast(device_type=a.device, dtype=torch.bfloat16, enabled=a.dtype == "bf16")

    def make_step(b):
        seqs = torch.arange(b, device=a.device)

        def step(s):
            starts = ((s * b + seqs) * T) % (N - T)  # on the device: no copy, no host wait
            rows = starts[:, None] + offs[None, :]
            x, y = data[rows], data[rows + 1]
            opt.zero_grad(set_to_none=True)
            with amp:
                logits = fwd(x)
            loss = F.cross_entropy(logits.float().reshape(-1, Vp), y.reshape(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            ema.update()
            return loss.detach()
        return step

    if a.probe_batch > 0:
        tried, b = {}, 1 << (a.probe_batch.bit_length() - 1)
        while b >= 1:
            try:
                st = make_step(b)
                st(0)
                st(1)
                torch.cuda.synchronize()
                tried[b] = "fits"
                break
            except torch.cuda.OutOfMemoryError:
                tried[b] = "oom"
                st = None
                opt.zero_grad(set_to_none=True)
                torch.cuda.empty_cache()
                b //= 2
        print(json.dumps({"probe_batch": b if b >= 1 else 0, "tried": tried}), flush=True)
        return
    step = make_step(B)

    t_first = time.perf_counter()
    first_s = None

    def after(s):  # --compile: the first step's time (the compilation) on the host clock
        nonlocal first_s
        if s == 0 and a.compile:
            if cuda:
                torch.cuda.synchronize()
            first_s = time.perf_counter() - t_first

    steps_ms, timed, losses, used_peak = run_steps(step, a.warmup, a.steps, cuda, after)
    step_ms = statistics.median(timed)
    mem = cuda_memory(used_peak) if cuda else {}
    loss_first, loss_last = float(losses[0]), float(losses[-1])
    if not (math.isfinite(loss_first) and math.isfinite(loss_last)):
        raise SystemExit("torch_gpt_gpu: non-finite loss %s, %s" % (loss_first, loss_last))
    del ema, opt, model, fwd
    if cuda:
        torch.cuda.empty_cache()
    gemm = gemm_tflops(a.gemm_size, a.gemm_iters, a.device)
    name = torch.cuda.get_device_name(0) if cuda else "cpu"
    out = {"side": "torch", "device": a.device, "device_name": name, "torch": torch.__version__,
           "dtype": a.dtype, "attention": a.attention, "compile": a.compile, "adamw": adamw,
           "ema_update": ema_update, "ema": decays, "n_layer": a.n_layer, "n_head": a.n_head,
           "n_embd": a.n_embd, "block_size": T, "vocab": V, "vocab_padded": Vp, "batch": B,
           "params": n_params, "step_ms": round(step_ms, 4),
           "step_ms_mean": round(statistics.mean(timed), 4),
           "steps_ms": [round(t, 4) for t in steps_ms], "timed_steps": len(timed),
           "gemm_tflops": round(gemm, 2) if gemm else "na",
           "gemm_shape": [a.gemm_size] * 3 if gemm else "na",
           "loss_first": round(loss_first, 5), "loss_last": round(loss_last, 5)}
    if first_s is not None:
        out["compile_s"] = round(first_s, 2)
    out.update(mem)
    out.update(gpt_flops.figures(a.n_layer, a.n_embd, T, V, B, step_ms, name, gemm))
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
