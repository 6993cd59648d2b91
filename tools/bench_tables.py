#!/usr/bin/env python3
"""bench/README.md's tables, generated from the results files under bench/results/, so that no
benchmark figure there is typed by hand (tools/gpu_report_table.py does the same for the main
README's GPU table).

  tools/bench_tables.py [--results DIR] [--readme bench/README.md] [--write | --check]

A results file is a JSON file: bench/record.sh's (name, date, machine, commit, command, summary:
the benchmark's last `summary: key=value ...` line as a dict), gemm_backend_bench's own (bench,
date, machine, commit, command, summary as the line itself, step_share) or a
tools/gpu_session.sh report (date, card, driver, build, stages with their benchmark summary
lines). For each benchmark below, the files that belong to it (by name, or by a summary key for
the GPU session reports) are grouped by run name and machine; the newest of each group (by its
"date" field) is rendered as a Markdown table, followed by the file it comes from (date,
machine, commit, command). A benchmark without a results file says so.

In bench/README.md each benchmark's table sits between
  <!-- bench_tables:begin NAME -->  and  <!-- bench_tables:end NAME -->
lines. Without --write or --check every block is printed; --write rewrites the blocks, --check
exits 1 when a block differs from what --write would put there, a known benchmark has no block,
or a block names no known benchmark (the test suite runs `python3 tools/bench_tables.py
--check`). Only the Python standard library is used.
"""

import argparse
import glob
import json
import os
import re
import sys

BEGIN, END = "<!-- bench_tables:begin %s -->", "<!-- bench_tables:end %s -->"
BLOCK = re.compile(r"<!-- bench_tables:(begin|end) ([A-Za-z0-9_.-]+) -->")


# ---- reading results files ----------------------------------------------------------------

def parse_summary(value):
    """A summary as a dict: record.sh's dict as is, a `summary: k=v ...` line parsed the way
    record.sh parses it (integers and floats as numbers, anything else as text)."""
    if isinstance(value, dict):
        return dict(value)
    out = {}
    if not isinstance(value, str):
        return out
    line = value.strip()
    if line.startswith("summary:"):
        line = line[len("summary:"):]
    for kv in line.split():
        if "=" not in kv:
            continue
        k, v = kv.split("=", 1)
        try:
            out[k] = int(v) if re.fullmatch(r"-?\d+", v) else float(v)
        except ValueError:
            out[k] = v
    return out


def flatten(prefix, value, into):
    if isinstance(value, dict):
        for k, v in value.items():
            flatten("%s.%s" % (prefix, k) if prefix else k, v, into)
    elif not isinstance(value, list):
        into[prefix] = value


def run_name(path, r):
    name = r.get("name") or r.get("bench")
    if name:
        return name
    base = os.path.basename(path)[:-len(".json")]
    return re.split(r"_\d{4}-\d\d-\d\d", base)[0]


def machine_of(r):
    """(group key, description) of the machine a result was taken on."""
    if "card" in r:  # a gpu_session report
        return r["card"], "%s, driver %s" % (r["card"], r.get("driver", "?"))
    m = r.get("machine") or {}
    if not isinstance(m, dict):
        return str(m), str(m)
    cpu = m.get("cpu") or m.get("model_name") or "unknown CPU"
    desc = m.get("lscpu_model") or cpu
    cores = m.get("cores") or m.get("hardware_threads")
    if cores and "cores" not in desc:
        desc += ", %s cores" % cores
    if m.get("cpu_isa_auto"):
        desc += ", auto variant %s" % m["cpu_isa_auto"]
    load = m.get("load_avg_before") or r.get("load_avg_start")
    if load:
        desc += ", load %s before" % load
    return cpu, desc


def load_results(results):
    out = []
    for path in sorted(glob.glob(os.path.join(results, "*.json"))):
        try:
            with open(path) as f:
                r = json.load(f)
        except (OSError, ValueError) as e:
            raise SystemExit("bench_tables: %s: %s" % (path, e))
        if isinstance(r, dict) and r.get("date"):
            out.append((path, r))
    return out


def source_line(path, r, what=None):
    parts = [r["date"], machine_of(r)[1]]
    if r.get("build"):
        parts.append(r["build"])
    if r.get("commit"):
        c = "commit %s" % r["commit"][:7]
        if r.get("dirty"):
            c += " with uncommitted changes"
        if r.get("binary_commit"):
            c += ", binary built at %s" % r["binary_commit"][:7]
        parts.append(c)
    if r.get("exit_code"):
        parts.append("exit code %s" % r["exit_code"])
    line = "Source: `bench/results/%s` (%s)" % (os.path.basename(path), "; ".join(parts))
    if what:
        line += ", " + what
    elif r.get("command"):
        line += ": `%s`" % r["command"].replace("`", "'").replace("\n", " ")
    return line + "."


# ---- what belongs to a benchmark ----------------------------------------------------------

def recorded(prefix):
    """Files whose run name is PREFIX or PREFIX_...: their summary, the other figures flattened
    (step_share.gpt_w1.gemm_share_of_compute, ...), grouped by run name and machine."""
    def pick(path, r):
        name = run_name(path, r)
        if name != prefix and not name.startswith(prefix + "_"):
            return None
        ctx = {}
        for k, v in r.items():
            if k not in ("summary", "output_tail", "machine", "variants", "note"):
                flatten(k, v, ctx)
        ctx.update(parse_summary(r.get("summary")))
        if not parse_summary(r.get("summary")):
            return None
        return (name, machine_of(r)[0]), name, ctx, None
    return pick


def session_summary(marker, bench):
    """A tools/gpu_session.sh report's benchmark summary line holding MARKER=, grouped by card;
    or a record.sh file of BENCH (grouped by the summary's device)."""
    rec = recorded(bench)

    def pick(path, r):
        if "stages" not in r:
            got = rec(path, r)
            if got is None or marker not in got[2]:
                return None
            key, name, ctx, _ = got
            device = str(ctx.get("device", key[1])).replace("_", " ")
            return (device,), device, ctx, None
        for s in r["stages"]:
            for line in s.get("summaries", []):
                ctx = parse_summary(line)
                if marker in ctx:
                    return ((r.get("card", "?"),), r.get("card", "?"), ctx,
                            "the `%s` stage of `tools/gpu_session.sh`" % s["name"])
        return None
    return pick


# ---- rendering -----------------------------------------------------------------------------

def fmt(v):
    """A figure as its results file has it; floats with more than 4 decimals rounded to 4."""
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        s = repr(v)
        if "e" in s or len(s.split(".")[1]) > 4:
            s = ("%.4f" % v).rstrip("0")
            s = s + "0" if s.endswith(".") else s
        return s
    return str(v)


PLACEHOLDER = re.compile(r"\{([^{}]+)\}")


def cell(template, ctx):
    """TEMPLATE with {key} replaced by the figure; "-" when a key is missing."""
    missing = []

    def sub(m):
        if m.group(1) not in ctx:
            missing.append(m.group(1))
            return ""
        return fmt(ctx[m.group(1)])
    s = PLACEHOLDER.sub(sub, template)
    return "-" if missing else s


class Table:
    """A Markdown table: HEADERS, and ROWS, a list (or a function of the figures giving one) of
    (label cells, value templates); rows whose values are all missing are left out, and so are
    value columns missing in every row."""

    def __init__(self, headers, rows, labels=1):
        self.headers, self.rows, self.labels = headers, rows, labels

    def render(self, ctxs):
        body = []
        for ctx in ctxs:
            for label, values in (self.rows(ctx) if callable(self.rows) else self.rows):
                cells = [cell(t, ctx) for t in values]
                if any(c != "-" for c in cells):
                    body.append(([cell(t, ctx) for t in label], cells))
        if not body:
            return []
        nvals = len(self.headers) - self.labels
        keep = [i for i in range(nvals) if any(b[1][i] != "-" for b in body)]
        heads = self.headers[:self.labels] + [self.headers[self.labels + i] for i in keep]
        lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
        for label, cells in body:
            lines.append("| " + " | ".join(list(label) + [cells[i] for i in keep]) + " |")
        return lines + [""]


class Line:
    def __init__(self, template):
        self.template = template

    def render(self, ctxs):
        out = []
        for ctx in ctxs:
            s = cell(self.template, ctx)
            out += [] if s == "-" else [s, ""]
        return out


def per_world(columns):
    """Rows W = 1, 2, 4, ...: the worlds found in keys *_wN, columns' templates with %W."""
    def rows(ctx):
        worlds = sorted({int(m.group(1)) for k in ctx for m in [re.search(r"_w(\d+)$", k)] if m})
        return [((str(w),), [c.replace("%W", str(w)) for c in columns]) for w in worlds]
    return rows


GEMM_MODELS = [("gpt", "834k GPT, 1 rank"), ("gpt_w4", "834k GPT, 4 ranks"),
               ("gpt10m", "10.8M GPT, 1 rank"), ("mlp", "1.25M MLP, 1 rank"),
               ("mlp_w4", "1.25M MLP, 4 ranks")]


def gemm_rows(ctx):
    rows = []
    for variant in ("native", "v2", "v3", "v4"):
        pre = "" if variant == "native" else variant + "_"
        for model, label in GEMM_MODELS:
            rows.append(((variant, label), [
                "{%s%s_openblas_vs_eigen}" % (pre, model), "{%s%s_blis_vs_eigen}" % (pre, model),
                "{%s%s_best_per_op_vs_eigen}" % (pre, model), "{best_%s_%s}" % (variant, model)]))
    return rows


STEP_COLUMNS = ["{ours_ms_w%W}", "{torch_ms_w%W}", "{step_ratio_w%W}", "{step_efficiency_w%W}",
                "{eff_serial_w%W}", "{ours_rss_mib_w%W}", "{torch_rss_mib_w%W}"]
STEP_HEADERS = ["W", "ours ms", "FSDP2 ms", "ours / FSDP2 (goal <= 0.5)",
                "bound / ours (goal >= 0.7)", "serial / ours", "peak RSS/rank ours MiB",
                "peak RSS/rank FSDP2 MiB"]

# name: (what belongs to it, items rendered per newest file, whether the files share one table
# with a first "run" column)
BENCHES = {
    "step_bench": (recorded("step_bench"), [Table(
        STEP_HEADERS + ["--comm-thread ms", "bound / --comm-thread", "--comm-thread / ours"],
        per_world(STEP_COLUMNS + ["{ct_ms_w%W}", "{ct_efficiency_w%W}", "{ct_vs_ours_w%W}"]))],
        False),
    "gpt_step_bench": (recorded("gpt_step_bench"), [
        Table(STEP_HEADERS + ["FSDP2 state bytes/rank"],
              per_world(STEP_COLUMNS + ["{torch_state_bytes_per_rank_w%W}"])),
        Line("Our state bytes per rank at the largest world: {state_bytes_per_rank}.")], False),
    "comm_bench": (recorded("comm_bench"), [Table(
        ["ranks", "collective", "ours busbw GB/s", "ours / MPI non-blocking (goal >= 0.95)",
         "ours / MPI blocking", "elements wrong (all)"],
        [(("{ranks}", "reduce_scatter"), ["{rs_busbw_gbs}", "{rs_busbw_ratio}",
                                          "{rs_vs_blocking}", "{wrong}"]),
         (("{ranks}", "all_gather"), ["{ag_busbw_gbs}", "{ag_busbw_ratio}", "{ag_vs_blocking}",
                                      "{wrong}"]),
         (("{ranks}", "all_reduce"), ["{ar_busbw_gbs}", "{ar_busbw_ratio}", "{ar_vs_blocking}",
                                      "{wrong}"]),
         (("{ranks}", "reduce_scatter, our ring"), ["{rs_ring_busbw_gbs}", "{rs_ring_vs_mpi}",
                                                    "-", "{wrong}"]),
         (("{ranks}", "reduce_scatter, our ring at {rs_ring_vs_mpi_min_bytes} bytes (its lowest "
                       "ratio over the sizes)"), ["-", "{rs_ring_vs_mpi_min}", "-", "{wrong}"])],
        labels=2)], True),
    "ckpt_bench": (recorded("ckpt_bench"), [Table(
        ["run", "save / sequential write (goal >= 0.8)", "async stall / sync (goal <= 0.05)",
         "in-place async stall / sync", "export extra peak MiB (goal <= 64)"],
        [(("{name}",), ["{save_vs_seqwrite}", "{async_stall_ratio}",
                        "{async_inplace_stall_ratio}", "{export_peak_mib}"])])], True),
    "save_stall_bench": (recorded("save_stall_bench"), [Table(
        ["mode", "loop cost per save ms", "loop cost / sync's (goal <= 0.10)",
         "in-run cost per save ms", "in-run cost / sync's", "blocked per save ms",
         "CPU per save core-ms", "peak RSS MiB (largest rank)"],
        [(("none (control)",), ["-", "-", "{none_step_cost_ms}", "-", "-", "-",
                                "{none_rss_mib}"]),
         (("sync",), ["{sync_loop_ms}", "-", "{sync_inrun_ms}", "-", "{sync_block_ms}",
                      "{sync_cpu_ms}", "{sync_rss_mib}"])] +
        [((mode,), ["{%s_loop_ms}" % mode, "{%s_loop_ratio}" % mode, "{%s_inrun_ms}" % mode,
                    "{%s_inrun_ratio}" % mode, "{%s_block_ms}" % mode, "{%s_cpu_ms}" % mode,
                    "{%s_rss_mib}" % mode])
         for mode in ("async", "inplace", "floor", "copy")])], False),
    "checksum_bench": (recorded("checksum_bench"), [Table(
        ["run", "copy_and_hash / memcpy time", "two passes / copy_and_hash",
         "hash GB/s (variant in use)", "hash GB/s (SSE2)", "memcpy GB/s", "variant"],
        [(("{name}",), ["{copy_and_hash_vs_memcpy}", "{copy_and_hash_vs_two_pass}",
                        "{hash_gbps}", "{hash_sse2_gbps}", "{memcpy_gbps}", "{isa}"])])], True),
    "optimizer_bench": (recorded("optimizer_bench"), [Table(
        ["run", "fused / triad GB/s", "separate EMA pass / fused time", "EMA slot bytes/elem",
         "fused + 1 EMA GB/s", "triad GB/s", "threads", "elements"],
        [(("{name}",), ["{fused_vs_triad}", "{fused_vs_separate}", "{ema_slot_bytes}",
                        "{fused_ema1_GBps}", "{triad_GBps}", "{threads}", "{numel}"])])], True),
    "gemm_backend_bench": (recorded("gemm_backend_bench"), [
        Table(["variant", "model (step GEMMs)", "OpenBLAS", "BLIS", "fastest per product",
               "fastest"], gemm_rows, labels=2),
        Table(["model, 1 rank, native", "Eigen GEMMs' share of compute",
               "compute speedup with OpenBLAS", "compute speedup with BLIS"],
              [((label,), ["{step_share.%s_w1.gemm_share_of_compute}" % m,
                           "{step_share.%s_w1.with_openblas_compute_speedup}" % m,
                           "{step_share.%s_w1.with_blis_compute_speedup}" % m])
               for m, label in GEMM_MODELS if not m.endswith("_w4")])], False),
    "gpu_optimizer_bench": (session_summary("fused_vs_copy", "gpu_optimizer_bench"), [
        Table(["EMA slots", "fused / copy of the same bytes (goal >= 0.85)",
               "PyTorch ms / fused ms (goal >= 1.3 at 2)"],
              [((str(k),), ["{fused_vs_copy_ema%d}" % k, "{fused_vs_torch_ema%d}" % k])
               for k in range(3)]),
        Line("Fused AdamW + 1 EMA slot {fused_ema1_GBps} GB/s, device copy {copy_GBps} GB/s, "
             "{numel} f32 elements per array.")], False),
    "gpu_train_step": (session_summary("train_mlp_cuda_step_ms", "gpu_train_step"), [Table(
        ["layers", "global batch", "ranks", "step ms", "timing"],
        [((), ["{layers}", "{batch}", "{ranks}", "{train_mlp_cuda_step_ms}", "{timing}"])],
        labels=0)], False),
    "gpu_gpt_bench": (session_summary("mfu_ours", "gpu_gpt_bench"), [
        Table(["batch x T", "ours ms", "PyTorch ms", "tokens/s ours / PyTorch",
               "ours tokens/s", "PyTorch tokens/s", "MFU ours", "MFU PyTorch",
               "ours / GEMM", "PyTorch / GEMM", "torch.compile ms"],
              [((), ["{batch} x {block_size}", "{ours_ms}", "{torch_ms}", "{ratio}",
                     "{ours_tokens_per_s}", "{torch_tokens_per_s}", "{mfu_ours}", "{mfu_torch}",
                     "{mfu_gemm_ours}", "{mfu_gemm_torch}", "{torch_compile_ms}"])], labels=0),
        Line("{n_layer} layers, C {n_embd}, vocabulary padded to {vocab_padded}; attention: "
             "ours {ours_attention}, PyTorch {torch_attention}; {steps} timed steps after "
             "{warmup}. MFU against the "
             "data-sheet dense bf16 peak, {peak_tflops} TFLOP/s, and against the measured bf16 "
             "GEMM, {gemm_tflops} TFLOP/s. Device memory in use: ours {ours_device_mib} MiB "
             "(allocated {ours_allocated_mib} MiB), PyTorch {torch_device_mib} MiB "
             "(max_memory_allocated {torch_allocated_mib} MiB).")],
        False),
}


def newest(pick, results):
    groups = {}
    for path, r in results:
        got = pick(path, r)
        if got is None:
            continue
        key, name, ctx, what = got
        ctx = dict(ctx, name=name)
        if key not in groups or r["date"] > groups[key][0]:
            groups[key] = (r["date"], path, r, ctx, what)
    return [groups[k] for k in sorted(groups)]


def render(name, results):
    pick, items, combined = BENCHES[name]
    found = newest(pick, results)
    if not found:
        return ("No results file under bench/results/ has this benchmark's figures.\n")
    lines = []
    if combined:  # one table of every newest file, then the files
        for item in items:
            lines += item.render([ctx for _, _, _, ctx, _ in found])
        for _, path, r, ctx, what in found:
            lines += [source_line(path, r, what), ""]
    else:  # per newest file: its tables, then the file
        for _, path, r, ctx, what in found:
            for item in items:
                lines += item.render([ctx])
            lines += [source_line(path, r, what), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


# ---- the README's blocks -------------------------------------------------------------------

def replace_blocks(text, tables):
    """TEXT with each block's content replaced; raises ValueError on unknown, unbalanced or
    missing blocks."""
    out, pos, seen = [], 0, []
    marks = list(BLOCK.finditer(text))
    if len(marks) % 2:
        raise ValueError("unbalanced bench_tables markers")
    for begin, end in zip(marks[::2], marks[1::2]):
        if begin.group(1) != "begin" or end.group(1) != "end" or begin.group(2) != end.group(2):
            raise ValueError("marker %r is not closed by its end marker" % begin.group(0))
        name = begin.group(2)
        if name not in tables:
            raise ValueError("block %r names no benchmark tools/bench_tables.py knows" % name)
        if name in seen:
            raise ValueError("block %r appears twice" % name)
        seen.append(name)
        out.append(text[pos:begin.end()])
        out.append("\n" + tables[name])
        pos = end.start()
    out.append(text[pos:])
    missing = [n for n in tables if n not in seen]
    if missing:
        raise ValueError("no block for %s (add %s ... %s lines)" % (
            ", ".join(missing), BEGIN % missing[0], END % missing[0]))
    return "".join(out)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default=os.path.join(here, "..", "bench", "results"))
    ap.add_argument("--readme", default=os.path.join(here, "..", "bench", "README.md"))
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    args = ap.parse_args()
    results = load_results(args.results)
    tables = {name: render(name, results) for name in BENCHES}
    if not (args.write or args.check):
        for name in BENCHES:
            sys.stdout.write("%s\n%s%s\n\n" % (BEGIN % name, tables[name], END % name))
        return 0
    with open(args.readme) as f:
        text = f.read()
    try:
        updated = replace_blocks(text, tables)
    except ValueError as e:
        print("bench_tables: %s: %s" % (args.readme, e), file=sys.stderr)
        return 1
    if args.check:
        if updated != text:
            print("bench_tables: %s's tables are not the newest results files'; run "
                  "tools/bench_tables.py --write" % args.readme, file=sys.stderr)
            return 1
        return 0
    with open(args.readme, "w") as f:
        f.write(updated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
