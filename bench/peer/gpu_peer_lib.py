"""Shared pieces of the one-GPU PyTorch peers (bench/peer/torch_gpt_gpu.py, torch_mlp_gpu.py).

  - Clock: step marks, CUDA events on the GPU (no host wait inside a step), the host clock on
    the CPU (the dry run); a step is from its mark to the next one's, as --bench-json times ours.
  - make_adamw: torch.optim.AdamW, fused=True on CUDA where this torch has it, else foreach.
  - Ema: one EMA copy of the parameters per decay, updated with torch._foreach_lerp_ (a
    per-tensor lerp_ where this torch has none).
  - run_steps: the timed training loop (a Clock mark at each step's start and after the last,
    the device memory in use read at each step's end).
  - device_used_mib / cuda_memory: the device memory figures of the peers' JSON lines.
"""
import time

import torch


class Clock:
    """Step marks: CUDA events on the GPU, the host clock (after a sync) on the CPU."""

    def __init__(self, cuda):
        self.cuda, self.marks = cuda, []

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.marks.append(e)
        else:
            self.marks.append(time.perf_counter())

    def intervals_ms(self):
        if self.cuda:
            self.marks[-1].synchronize()
            return [a.elapsed_time(b) for a, b in zip(self.marks, self.marks[1:])]
        return [(b - a) * 1e3 for a, b in zip(self.marks, self.marks[1:])]


def make_adamw(groups, cuda, **kw):
    """AdamW over `groups` (fused=True on CUDA where this torch takes it, else foreach=True);
    returns (the optimizer, "fused" or "foreach")."""
    if cuda:
        try:
            return torch.optim.AdamW(groups, fused=True, **kw), "fused"
        except (TypeError, RuntimeError):
            pass
    return torch.optim.AdamW(groups, foreach=True, **kw), "foreach"


class Ema:
    """One EMA copy of `params` per decay d: e = lerp(e, p, 1 - d) after each optimizer step."""

    def __init__(self, params, decays):
        self.params, self.decays = params, list(decays)
        self.copies = [[q.detach().clone() for q in params] for _ in self.decays]
        self.lerp = getattr(torch, "_foreach_lerp_", None)
        self.kind = "foreach_lerp" if self.lerp else "lerp_loop"

    @torch.no_grad()
    def update(self):
        for ema, d in zip(self.copies, self.decays):
            if self.lerp:
                self.lerp(ema, self.params, 1.0 - d)
            else:
                for e, q in zip(ema, self.params):
                    e.lerp_(q, 1.0 - d)


def device_used_mib():
    """The device memory in use (total - free, the CUDA context included), in MiB."""
    free, total = torch.cuda.mem_get_info()
    return (total - free) / 2.0**20


def cuda_memory(used_peak_mib):
    """max_memory_allocated / max_memory_reserved so far and `used_peak_mib`, in MiB."""
    return {"max_memory_allocated_mib": round(torch.cuda.max_memory_allocated() / 2.0**20, 1),
            "max_memory_reserved_mib": round(torch.cuda.max_memory_reserved() / 2.0**20, 1),
            "peak_device_used_mib": round(used_peak_mib, 1)}


def run_steps(step, warmup, steps, cuda, after=None):
    """Runs step(s) for s < warmup + steps (each returning its loss, left on the device), with a
    Clock mark at each step's start and after the last, then after(s) when given, then (CUDA)
    the device memory in use. Returns (every step's ms, the ms of the steps after `warmup`, the
    losses, the peak device memory in use in MiB)."""
    clock = Clock(cuda)
    used_peak = 0.0
    losses = []
    for s in range(warmup + steps):
        clock.mark()
        losses.append(step(s))
        if after:
            after(s)
        if cuda:
            used_peak = max(used_peak, device_used_mib())
    clock.mark()
    steps_ms = clock.intervals_ms()
    return steps_ms, steps_ms[warmup:], losses, used_peak
