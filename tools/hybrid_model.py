#!/usr/bin/env python3
"""Step-time model of full sharding vs hybrid sharding (fsdp/HYBRID.md).

Per optimizer step and per rank: bytes sent inside the node and across nodes, the number of
sequential ring steps, the modelled collective time, the compute time and the step time without
and with perfect overlap, for nodes of G GPUs (default 1, 8 and 64 nodes of 8) and two GPT shapes.
Nothing here is measured: the link bandwidths and the achieved FLOP/s are ASSUMPTIONS (printed).

  python3 tools/hybrid_model.py              # assumptions, table, summary line
  python3 tools/hybrid_model.py --markdown   # the table section pasted into fsdp/HYBRID.md

Model (the formulas of fsdp/HYBRID.md):
  * P parameters; the GPT units are embed {wte, wpe}, L blocks, ln_f (examples/gpt_model.h). The
    runner's schedule (fsdp/unit_runner.h) uses embed again as the tied lm_head; with
    reshard_after_forward every use gathers its unit, except the last use, kept for the backward:
    per micro-batch 2L+5 all-gathers of 2P + P_embed elements in all, and L+2 reduce-scatters
    of P elements (one per unit).
  * ring collectives over n ranks of N total bytes: all-gather and reduce-scatter send
    (n-1)/n*N per rank in n-1 steps; all-reduce sends 2(n-1)/n*N per rank in 2(n-1) steps.
  * a collective takes as long as its slowest link: bytes on that link / its bandwidth.
  * collectives run one after another (comm = their sum); compute = 6*P*tokens / FLOP/s.
"""
import argparse

SHAPES = [  # name, layers L, width C, vocabulary V (padded to a multiple of 64), positions T
    ("gpt2-small", 12, 768, 50257, 1024),
    ("gpt-1.3b", 24, 2048, 50257, 1024),
]


def param_counts(layers, width, vocab, positions):
    """(P, P_embed, 12*L*C^2) for nanoGPT's GPT with biases and a tied lm_head."""
    padded = (vocab + 63) // 64 * 64  # GptShape::padded_vocab()
    block = 12 * width * width + 13 * width  # c_attn, c_proj, c_fc, mlp.c_proj, 2 LayerNorms
    embed = padded * width + positions * width
    return layers * block + embed + 2 * width, embed, 12 * layers * width * width


def ring_ag(n, nbytes):
    """(bytes sent per rank, ring steps) of an all-gather or reduce-scatter of nbytes."""
    return (n - 1) / n * nbytes, n - 1


def ring_ar(n, nbytes):
    """(bytes sent per rank, ring steps) of an all-reduce of nbytes."""
    return 2 * (n - 1) / n * nbytes, 2 * (n - 1)


def model(a, layers, p, p_embed, nodes):
    """Rows for one shape and node count: dicts with the table's columns."""
    g = a.gpus_per_node
    w = nodes * g
    nvl, ib = a.nvlink_gbs * 1e9, a.ib_gbs * 1e9  # bytes/s per GPU
    lat = a.step_latency_us * 1e-6
    n_ag, n_rs = 2 * layers + 5, layers + 2  # collectives per micro-batch
    ag_bytes = a.compute_bytes * (2 * p + p_embed) * a.microbatches
    rs_bytes = a.reduce_bytes * p * a.microbatches
    compute = 6 * p * a.tokens_per_gpu / (a.tflops * 1e12)
    rows = []

    def row(kind, intra, inter, steps, comm):
        comm += steps * lat
        rows.append(dict(kind=kind, nodes=nodes, intra=intra, inter=inter, steps=steps,
                         comm=comm, compute=compute, serial=compute + comm,
                         overlap=max(compute, comm)))

    # Full sharding: one group of W ranks.
    x_ag, s_ag = ring_ag(w, ag_bytes)
    x_rs, s_rs = ring_ag(w, rs_bytes)
    x = x_ag + x_rs
    steps = n_ag * a.microbatches * s_ag + n_rs * a.microbatches * s_rs
    if nodes == 1:
        row("full", x, 0.0, steps, x / nvl)
    else:
        # Ranks numbered node by node: 1 ring hop in g crosses a node boundary, so a rank sends
        # on average (g-1)/g of its bytes over NVLink and 1/g over its NIC.
        intra, inter = x * (g - 1) / g, x / g
        # One ring: the hop that leaves the node carries the rank's whole x over one NIC.
        row("full, 1 ring", intra, inter, steps, x / ib)
        # g rings, one per NIC: each carries x/g; each node boundary uses all g NICs.
        row("full, %d rings" % g, intra, inter, steps, max(intra / nvl, inter / ib))
    if nodes == 1:
        row("hybrid", x, 0.0, steps, x / nvl)  # S = W: the same collectives
        return rows
    # Hybrid: shard group of S = g ranks (one node), R = W/S replicas (one rank per node).
    s, r = g, w // g
    y_ag, t_ag = ring_ag(s, ag_bytes)
    y_rs, t_rs = ring_ag(s, rs_bytes)
    # Replica all-reduce of the reduced gradient shard (P/S elements) per unit, over R ranks.
    z, t_ar = ring_ar(r, a.reduce_bytes * p / s * a.microbatches)
    steps = n_ag * a.microbatches * t_ag + n_rs * a.microbatches * (t_rs + t_ar)
    row("hybrid", y_ag + y_rs, z, steps, (y_ag + y_rs) / nvl + z / ib)
    return rows


def assumptions(a):
    return [
        "ASSUMED NVLink bandwidth for collectives: %g GB/s per GPU (bus bandwidth, H100/H200 "
        "class by default; not measured here)" % a.nvlink_gbs,
        "ASSUMED inter-node bandwidth: %g GB/s per GPU (default: one 400 Gb/s InfiniBand NIC per "
        "GPU; not measured here)" % a.ib_gbs,
        "ASSUMED achieved compute: %g TFLOP/s bf16 per GPU (default 400: about 40%% of an H100's "
        "dense bf16 peak); no GPU step time of these shapes exists in bench/results/" % a.tflops,
        "ASSUMED full sharding across nodes: '1 ring' = the issue's model (the ring's node-"
        "boundary hop paces it: bytes/rank / inter-node bandwidth per GPU); '%d rings' = one ring "
        "per NIC, each crossing every node boundary once (a node's boundary traffic spread over "
        "its %d NICs)" % (a.gpus_per_node, a.gpus_per_node),
        "ASSUMED collectives run one after another (comm = sum); hybrid's in-group and replica "
        "collectives do not overlap each other",
        "per-ring-step latency: %g us (0 = bandwidth only; the 'ring steps' column times it)"
        % a.step_latency_us,
        "compute %g B/element (bf16), reduce %g B/element (f32), %d micro-batch(es) of %d tokens "
        "per GPU, %d GPUs per node; MB = 1e6 bytes" % (a.compute_bytes, a.reduce_bytes,
                                                      a.microbatches, a.tokens_per_gpu,
                                                      a.gpus_per_node),
        "compute = 6 * P * tokens / FLOP/s (attention's extra FLOPs and recomputation left out)",
    ]


def table(a, results):
    out = ["| shape | nodes | sharding | intra-node MB/rank | inter-node MB/rank | ring steps "
           "| comm ms | compute ms | step ms, no overlap | step ms, overlap |",
           "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, rows in results:
        for q in rows:
            out.append("| %s | %d | %s | %.0f | %.0f | %d | %.2f | %.2f | %.2f | %.2f |" % (
                name, q["nodes"], q["kind"], q["intra"] / 1e6, q["inter"] / 1e6, q["steps"],
                q["comm"] * 1e3, q["compute"] * 1e3, q["serial"] * 1e3, q["overlap"] * 1e3))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true", help="print only the table section")
    ap.add_argument("--nodes", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--gpus-per-node", type=int, default=8, help="= the shard group size S")
    ap.add_argument("--nvlink-gbs", type=float, default=360.0, help="assumed, GB/s per GPU")
    ap.add_argument("--ib-gbs", type=float, default=50.0, help="assumed, GB/s per GPU")
    ap.add_argument("--tflops", type=float, default=400.0, help="assumed achieved TFLOP/s")
    ap.add_argument("--step-latency-us", type=float, default=0.0, help="per ring step")
    ap.add_argument("--compute-bytes", type=float, default=2.0, help="gathered dtype (bf16)")
    ap.add_argument("--reduce-bytes", type=float, default=4.0, help="reduce dtype (f32)")
    ap.add_argument("--tokens-per-gpu", type=int, default=8 * 1024, help="per micro-batch")
    ap.add_argument("--microbatches", type=int, default=1, help="per optimizer step")
    a = ap.parse_args()

    results, counts = [], []
    for name, layers, width, vocab, positions in SHAPES:
        p, p_embed, approx = param_counts(layers, width, vocab, positions)
        counts.append((name, layers, width, vocab, positions, p, p_embed, approx))
        rows = []
        for nodes in a.nodes:
            rows += model(a, layers, p, p_embed, nodes)
        results.append((name, rows))

    if a.markdown:
        print("\n".join(table(a, results)))
        return
    print("# hybrid_model: full sharding vs hybrid sharding, per rank per optimizer step")
    for name, layers, width, vocab, positions, p, p_embed, approx in counts:
        print("# %s: L=%d C=%d V=%d (padded %d) T=%d: P = %d (12*L*C^2 = %d, embed unit %d)" % (
            name, layers, width, vocab, (vocab + 63) // 64 * 64, positions, p, approx, p_embed))
    for line in assumptions(a):
        print("# " + line)
    print()
    print("\n".join(table(a, results)))
    print()
    keys = ["p_%s=%d" % (c[0], c[5]) for c in counts]
    last = max(a.nodes)
    for name, rows in results:
        by = {q["kind"]: q for q in rows if q["nodes"] == last}
        if "hybrid" not in by or len(by) < 3:
            continue
        h = by["hybrid"]
        for kind, tag in (("full, 1 ring", "1ring"), ("full, %d rings" % a.gpus_per_node,
                                                       "%drings" % a.gpus_per_node)):
            f = by[kind]
            keys.append("%s_%dn_hybrid_vs_full_%s_step=%.3f" % (name, last, tag,
                                                                h["serial"] / f["serial"]))
            keys.append("%s_%dn_hybrid_vs_full_%s_comm=%.3f" % (name, last, tag,
                                                                h["comm"] / f["comm"]))
        keys.append("%s_%dn_ring_steps_full_vs_hybrid=%.1f" % (
            name, last, by["full, 1 ring"]["steps"] / h["steps"]))
    print("summary: " + " ".join(keys))


if __name__ == "__main__":
    main()
