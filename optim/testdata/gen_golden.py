#!/usr/bin/python3
"""Generates the golden files the optimizer, EMA and LR-schedule tests compare against.

Run from the repository root with Debian's PyTorch (apt-get install python3-torch):

    /usr/bin/python3 optim/testdata/gen_golden.py

Writes, next to this script:
  golden_optim.json + golden_optim.bin  torch.optim.AdamW / SGD (foreach=False) for 10 steps on
      three tensors of odd sizes, each followed by EMA updates done with torch ops
      (`ema.lerp_(p, 1 - beta)`), the decays coming from the published schedule formulas below.
      The .bin holds the expected final arrays as little-endian float32, at the element offsets
      the .json lists; every array covers all tensors concatenated in order.
  golden_schedules.json  EMA decay sequences (float64, from the formulas as published by timm /
      diffusers / TF / EDM2), sigma_rel <-> gamma pairs (EDM2's np.roots recipe), and LR values
      from torch.optim.lr_scheduler.

Inputs are not stored: initial parameters and gradients come from a counter-based generator
(splitmix64, below) that the C++ tests replicate bit for bit (optim/golden_reader.h).
"""

import json
import os
import warnings

import numpy as np
import torch

OUT_DIR = os.path.dirname(os.path.abspath(__file__))
SIZES = [5, 67, 2500]  # odd sizes: vector tails, a tensor crossing the 2048-element block size
STEPS = 10
MASK64 = (1 << 64) - 1


# ---- Inputs: counter-based uniform generator (exact in float32). ----

def splitmix64(x):
    z = (x + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def uniform(stream, n):
    """n values in [-0.5, 0.5): top 24 bits of splitmix64((stream << 32) | i) * 2^-24 - 0.5."""
    return np.array([(splitmix64((stream << 32) | i) >> 40) * 2.0**-24 - 0.5 for i in range(n)],
                    dtype=np.float32)


def initial_params():
    return [torch.from_numpy(2 * uniform(1000 + j, n)) for j, n in enumerate(SIZES)]


def grads_for_step(step):
    # Tensor j gets magnitudes around 2^(j-1): 0.5, 1, 2 (exact powers of two).
    return [torch.from_numpy(uniform(step * 16 + j, n) * np.float32(2.0 ** (j - 1)))
            for j, n in enumerate(SIZES)]


# ---- EMA decay schedules, as published (t = steps since the slot started). ----

def decay_constant(c, t):
    return c["decay"]


def decay_warmup(c, t):
    # TF ExponentialMovingAverage(num_updates) / Praxis / diffusers (use_ema_warmup=False):
    # min(decay, (1 + t) / (10 + t)).
    return min(c["decay"], (1 + t) / (10 + t))


def decay_power_warmup(c, t):
    # timm ModelEmaV3.get_decay (use_warmup=True) == diffusers EMAModel.get_decay (use_ema_warmup).
    step = max(0, t - c["update_after_step"] - 1)
    if step <= 0:
        return 0.0
    decay = 1 - (1 + step / c["inv_gamma"]) ** -c["power"]
    return max(min(decay, c["decay"]), c["min_decay"])


def decay_power_function(c, t):
    # EDM2 training/phema.py power_function_beta with t_delta = 1 step: (1 - 1/t)^(gamma + 1).
    return (1 - 1 / t) ** (c["gamma"] + 1)


def decay_half_life(c, t):
    # EDM2 training/training_loop.py TraditionalEMA, in steps (batch = 1 step):
    # h = min(half_life, t * rampup) when rampup is set; beta = 0.5 ** (1 / max(h, 1e-8)).
    h = c["half_life_steps"]
    if c["rampup"] > 0:
        h = min(h, t * c["rampup"])
    return 0.5 ** (1 / max(h, 1e-8))


SCHEDULES = {
    "constant": decay_constant,
    "warmup": decay_warmup,
    "power_warmup": decay_power_warmup,
    "power_function": decay_power_function,
    "half_life": decay_half_life,
}

EMA_DEFAULTS = {
    "kind": "constant", "decay": 0.999, "inv_gamma": 1.0, "power": 2.0 / 3.0, "min_decay": 0.0,
    "update_after_step": 0, "gamma": 6.94, "half_life_steps": 1000.0, "rampup": 0.0,
    "start_step": 0, "interval": 1, "correct_interval": True, "buffer_rules": [],
}


def ema_config(name, **kw):
    c = dict(EMA_DEFAULTS)
    c.update(kw)
    c["name"] = name
    return c


def ema_due(c, step):
    return step >= c["start_step"] and (step - c["start_step"]) % c["interval"] == 0


def ema_decay(c, step):
    """Decay applied after completed step `step` (> start_step). With the interval correction the
    decay is the product of the per-step decays of the k steps since the last update (= beta^k for
    a constant schedule), so the horizon in steps does not depend on k."""
    f = SCHEDULES[c["kind"]]
    t = step - c["start_step"]
    if c["interval"] == 1 or not c["correct_interval"]:
        return f(c, t)
    prod = 1.0
    for j in range(t - c["interval"] + 1, t + 1):
        prod *= f(c, j)
    return prod


# ---- Optimizer cases. ----

def run_case(case):
    params = [torch.nn.Parameter(p.clone()) for p in initial_params()]
    if case["optimizer"] == "adamw":
        opt = torch.optim.AdamW(params, lr=case["lr"], betas=(case["beta1"], case["beta2"]),
                                eps=case["eps"], weight_decay=case["weight_decay"], foreach=False)
    else:
        opt = torch.optim.SGD(params, lr=case["lr"], momentum=case["momentum"],
                              dampening=case["dampening"], weight_decay=case["weight_decay"],
                              nesterov=case["nesterov"], foreach=False)
    emas = [[p.detach().clone() for p in params] for _ in case["emas"]]  # start_step 0: copies
    betas = [[] for _ in case["emas"]]
    for step in range(1, STEPS + 1):
        for p, g in zip(params, grads_for_step(step)):
            p.grad = g * case["grad_scale"] if case["grad_scale"] != 1.0 else g
        opt.step()
        with torch.no_grad():
            for k, c in enumerate(case["emas"]):
                if not ema_due(c, step):
                    continue
                beta = ema_decay(c, step)
                betas[k].append([step, beta])
                for e, p in zip(emas[k], params):
                    e.lerp_(p, 1 - beta)
    out = {"master": [p.detach() for p in params]}
    for i, p in enumerate(params):
        st = opt.state[p]
        for key in ("exp_avg", "exp_avg_sq", "momentum_buffer"):
            if key in st and st[key] is not None:
                out.setdefault(key, []).append(st[key])
    for k, c in enumerate(case["emas"]):
        out["ema:" + c["name"]] = emas[k]
    return out, betas


CASES = [
    dict(name="adamw_wd", optimizer="adamw", lr=1e-3, weight_decay=0.1, beta1=0.9, beta2=0.999,
         eps=1e-8, grad_scale=1.0,
         emas=[ema_config("ema_0.99", decay=0.99),
               ema_config("ema_warmup", kind="warmup", decay=0.999),
               ema_config("ema_interval3", decay=0.9, interval=3),
               ema_config("ema_phema", kind="power_function", gamma=6.94),
               ema_config("ema_power_warmup", kind="power_warmup", decay=0.9999, power=0.75),
               ema_config("ema_half", kind="half_life", half_life_steps=2.0, rampup=0.5)]),
    dict(name="adamw_scaled", optimizer="adamw", lr=3e-4, weight_decay=0.01, beta1=0.8,
         beta2=0.95, eps=1e-6, grad_scale=0.37, emas=[]),
    dict(name="adamw_no_wd", optimizer="adamw", lr=2e-2, weight_decay=0.0, beta1=0.9,
         beta2=0.99, eps=1e-8, grad_scale=1.0,
         emas=[ema_config("ema_0.5", decay=0.5), ema_config("ema_0.3", decay=0.3)]),
    dict(name="sgd_nesterov_wd", optimizer="sgd", lr=0.05, momentum=0.9, dampening=0.0,
         nesterov=True, weight_decay=1e-4, grad_scale=1.0,
         emas=[ema_config("ema_0.999", decay=0.999)]),
    dict(name="sgd_momentum_dampening", optimizer="sgd", lr=0.1, momentum=0.5, dampening=0.3,
         nesterov=False, weight_decay=0.0, grad_scale=0.5, emas=[]),
    dict(name="sgd_plain", optimizer="sgd", lr=0.01, momentum=0.0, dampening=0.0,
         nesterov=False, weight_decay=0.0, grad_scale=1.0, emas=[]),
    dict(name="sgd_wd_no_momentum", optimizer="sgd", lr=0.01, momentum=0.0, dampening=0.0,
         nesterov=False, weight_decay=0.05, grad_scale=1.0, emas=[]),
]


def write_optim_golden():
    blob = bytearray()
    cases = []
    for case in CASES:
        arrays, betas = run_case(case)
        offsets = {}
        for key, tensors in arrays.items():
            flat = torch.cat([t.reshape(-1) for t in tensors]).numpy().astype("<f4")
            offsets[key] = len(blob) // 4
            blob += flat.tobytes()
        entry = {k: v for k, v in case.items() if k != "emas"}
        entry["emas"] = case["emas"]
        entry["ema_betas"] = {c["name"]: b for c, b in zip(case["emas"], betas)}
        entry["arrays"] = offsets
        cases.append(entry)
    doc = {
        "about": "torch.optim AdamW/SGD (foreach=False) + ema.lerp_(p, 1-beta); see gen_golden.py",
        "torch_version": torch.__version__,
        "sizes": SIZES,
        "steps": STEPS,
        "inputs": "params: 2*uniform(1000+j); grads at step s: uniform(16*s+j) * 2^(j-1)",
        "cases": cases,
    }
    with open(os.path.join(OUT_DIR, "golden_optim.bin"), "wb") as f:
        f.write(bytes(blob))
    with open(os.path.join(OUT_DIR, "golden_optim.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


# ---- Schedules. ----

EMA_SCHEDULE_CASES = [
    ema_config("constant", decay=0.999),
    ema_config("warmup", kind="warmup", decay=0.9999),
    ema_config("power_warmup_timm", kind="power_warmup", decay=0.9999),
    ema_config("power_warmup_after", kind="power_warmup", decay=0.999, power=0.75,
               update_after_step=5, min_decay=0.5, inv_gamma=2.0),
    ema_config("power_function_0.10", kind="power_function", gamma=6.94),
    ema_config("power_function_0.05", kind="power_function", gamma=16.97),
    ema_config("half_life", kind="half_life", half_life_steps=500.0),
    ema_config("half_life_rampup", kind="half_life", half_life_steps=500.0, rampup=0.09),
    ema_config("constant_interval4", decay=0.99, interval=4, start_step=10),
    ema_config("constant_interval4_uncorrected", decay=0.99, interval=4, start_step=10,
               correct_interval=False),
    ema_config("warmup_interval3", kind="warmup", decay=0.999, interval=3, start_step=2),
    ema_config("power_function_interval5", kind="power_function", gamma=6.94, interval=5),
]
EMA_STEPS = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 18, 20, 22, 26, 30, 50, 100,
             1000, 10000, 31623, 100000, 1000000]


def ema_schedule_golden():
    out = []
    for c in EMA_SCHEDULE_CASES:
        rows = []
        for step in EMA_STEPS:
            due = ema_due(c, step)
            starts = step == c["start_step"]
            row = {"step": step, "due": due, "starts": starts}
            if due and not starts:
                row["decay"] = ema_decay(c, step)
            rows.append(row)
        out.append({"config": c, "rows": rows})
    return out


def sigma_rel_golden():
    # EDM2 training/phema.py std_to_exp: np.roots([1, 7, 16 - s^-2, 12 - s^-2]).real.max().
    rows = []
    for s in [0.01, 0.02, 0.05, 0.08, 0.10, 0.15, 0.2, 0.25, 0.28]:
        g = float(np.roots([1, 7, 16 - s ** -2, 12 - s ** -2]).real.max())
        rows.append({"sigma_rel": s, "gamma": g})
    return rows


def lr_torch(base_lr, make_scheduler, steps):
    """lr used by optimizer steps 1..steps (1-based), stepping the scheduler after each step."""
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=base_lr)
    sched = make_scheduler(opt)
    lrs = []
    for _ in range(steps):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


def lr_schedule_golden():
    sch = torch.optim.lr_scheduler
    out = []

    # Warmup + cosine: lr(s) = base * s / W for s <= W, then cosine from base (s = W) to min_lr
    # (s = T). Equal to SequentialLR(LinearLR(1/W, 1, W-1), CosineAnnealingLR(T-W, min_lr),
    # milestones=[W-1]) up to T.
    for base, w, t, min_lr in [(1e-3, 10, 100, 1e-5), (3e-4, 1, 50, 0.0), (0.1, 7, 20, 0.01)]:
        def make(opt, w=w, t=t, min_lr=min_lr):
            if w == 1:
                return sch.CosineAnnealingLR(opt, T_max=t - w, eta_min=min_lr)
            return sch.SequentialLR(opt, [
                sch.LinearLR(opt, start_factor=1.0 / w, end_factor=1.0, total_iters=w - 1),
                sch.CosineAnnealingLR(opt, T_max=t - w, eta_min=min_lr)], milestones=[w - 1])
        lrs = lr_torch(base, make, t)
        out.append({"config": {"kind": "cosine", "base_lr": base, "warmup_steps": w,
                               "total_steps": t, "min_lr": min_lr},
                    "lr": [[s + 1, v] for s, v in enumerate(lrs)]})

    # Constant with warmup: LinearLR(1/W, 1, W-1) then constant.
    for base, w in [(1e-3, 5), (2e-4, 1)]:
        def make(opt, w=w):
            return sch.LinearLR(opt, start_factor=1.0 / w, end_factor=1.0, total_iters=max(w - 1, 0))
        lrs = lr_torch(base, make, 12)
        out.append({"config": {"kind": "constant", "base_lr": base, "warmup_steps": w},
                    "lr": [[s + 1, v] for s, v in enumerate(lrs)]})
    return out


def write_schedule_golden():
    doc = {
        "about": "EMA decays (float64, published formulas), EDM2 sigma_rel->gamma, "
                 "torch.optim.lr_scheduler values; see gen_golden.py",
        "torch_version": torch.__version__,
        "ema_schedules": ema_schedule_golden(),
        "sigma_rel": sigma_rel_golden(),
        "lr_schedules": lr_schedule_golden(),
    }
    with open(os.path.join(OUT_DIR, "golden_schedules.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    # SequentialLR steps its schedulers with an explicit epoch, which torch 1.13 warns about.
    warnings.filterwarnings("ignore", category=UserWarning, module="torch.optim.lr_scheduler")
    torch.manual_seed(0)
    write_optim_golden()
    write_schedule_golden()
    print("wrote", OUT_DIR)
