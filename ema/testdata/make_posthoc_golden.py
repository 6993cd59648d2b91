#!/usr/bin/env python3
"""Golden values for ema/posthoc_solve_test.cc, from the EDM2 post-hoc EMA formulas
(written out in ema/README.md "Post-hoc EMA"), computed independently of the C++ code:

  gamma(sigma_rel)  largest real root of g^3 + 7 g^2 + (16 - s^-2) g + (12 - s^-2)
  <p_a, p_b>        (ga+1)(gb+1)(ta/tb)^e / ((ga+gb+1) max(ta,tb)), e = gb if ta < tb else -ga
  A x_j = b_j       A_ik = <p_i,p_k>, b_ij = <p_i,q_j>; each column x_j divided by its sum.

Everything is computed with mpmath at 60 significant digits (the reference); numpy float64
(np.linalg.solve, as EDM2 does) is computed too and its largest deviation is recorded, so a
reader sees how far double precision is from the reference on each case.
Usage: python3 make_posthoc_golden.py > posthoc_golden.json   (needs numpy and mpmath; the test
suite only reads the JSON).
"""
import json

import mpmath as mp
import numpy as np

mp.mp.dps = 60


def gamma_of(sigma_rel):
    s = mp.mpf(sigma_rel)
    q = 1 / (s * s)
    roots = mp.polyroots([1, 7, 16 - q, 12 - q], maxsteps=200, extraprec=200)
    return max(mp.re(r) for r in roots if abs(mp.im(r)) < mp.mpf(10) ** -40)


def dot(ta, ga, tb, gb):
    e = gb if ta < tb else -ga
    return (ga + 1) * (gb + 1) * (ta / tb) ** e / ((ga + gb + 1) * max(ta, tb))


def solve(ins, outs):
    a = mp.matrix(len(ins), len(ins))
    for i, (ti, gi) in enumerate(ins):
        for k, (tk, gk) in enumerate(ins):
            a[i, k] = dot(ti, gi, tk, gk)
    cols = []
    for tj, gj in outs:
        b = mp.matrix([dot(ti, gi, tj, gj) for ti, gi in ins])
        x = mp.lu_solve(a, b)
        col = [x[i] for i in range(len(ins))]
        s = sum(col)
        cols.append([c / s for c in col])
    return cols


def solve_numpy(ins, outs):
    ti = np.float64([t for t, _ in ins]).reshape(-1, 1)
    gi = np.float64([float(g) for _, g in ins]).reshape(-1, 1)
    to = np.float64([t for t, _ in outs]).reshape(1, -1)
    go = np.float64([float(g) for _, g in outs]).reshape(1, -1)

    def corr(ta, ga, tb, gb):
        e = np.where(ta < tb, gb, -ga)
        return (ga + 1) * (gb + 1) * (ta / tb) ** e / ((ga + gb + 1) * np.maximum(ta, tb))

    a = corr(ti, gi, ti.T, gi.T)
    b = corr(ti, gi, to, go)
    x = np.linalg.solve(a, b)
    return (x / np.sum(x, axis=0)).T


def case(name, snap_steps, in_sigmas, out_t, out_sigmas):
    ins = [(mp.mpf(t), gamma_of(s)) for t in snap_steps for s in in_sigmas]
    outs = [(mp.mpf(out_t), gamma_of(s)) for s in out_sigmas]
    x = solve(ins, outs)
    xn = solve_numpy(ins, outs)
    dev = max(abs(float(x[j][i]) - xn[j][i]) for j in range(len(outs)) for i in range(len(ins)))
    return {
        "name": name,
        "inputs": [{"t": float(t), "gamma": float(g)} for t, g in ins],
        "outputs": [{"t": float(t), "gamma": float(g), "sigma_rel": s} for (t, g), s in zip(outs, out_sigmas)],
        "coefficients": [[float(c) for c in col] for col in x],
        "numpy_float64_max_abs_deviation": dev,
    }


def main():
    cases = [
        case("edm2_pair_4_snapshots", [25, 50, 75, 100], [0.05, 0.10], 100, [0.02, 0.07, 0.15]),
        case("edm2_pair_8_snapshots", [50 * k for k in range(1, 9)], [0.05, 0.10], 400, [0.03, 0.08, 0.20]),
        case("single_profile_6_snapshots", [10, 20, 40, 80, 160, 320], [0.10], 320, [0.05, 0.12]),
        case("target_between_snapshots", [100, 200, 300], [0.05, 0.15], 250, [0.10]),
        case("tracked_profile_is_one_hot", [100, 200, 300], [0.05, 0.10], 300, [0.10]),
    ]
    sigmas = [0.01, 0.05, 0.10, 0.20, 0.28]
    out = {
        "generator": "ema/testdata/make_posthoc_golden.py (mpmath, 60 digits)",
        "sigma_rel_to_gamma": [{"sigma_rel": s, "gamma": float(gamma_of(s))} for s in sigmas],
        "cases": cases,
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
