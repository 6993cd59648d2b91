#!/usr/bin/env python3
"""The README's GPU table, generated from the newest tools/gpu_session.sh report, so that no GPU
figure is typed by hand.

  tools/gpu_report_table.py [--results DIR] [--readme README.md] [--write | --check]

Reads the newest bench/results/gpu_session_*.json (by its "date" field), renders a Markdown
table (one row per stage: status, counts, seconds, its benchmark summaries) with the card,
driver, build and the stages not run, and prints it; --write replaces the block between the
README's "<!-- gpu-table -->" and "<!-- /gpu-table -->" lines with it, --check exits 1 when that
block differs (tools/test.sh runs the check through its test). Without a report the table says
so. Only the Python standard library is used.
"""

import argparse
import glob
import json
import os
import sys

BEGIN, END = "<!-- gpu-table -->", "<!-- /gpu-table -->"


def newest_report(results):
    reports = []
    for path in glob.glob(os.path.join(results, "gpu_session_*.json")):
        with open(path) as f:
            reports.append((json.load(f).get("date", ""), path))
    return max(reports)[1] if reports else None


def render(path):
    if path is None:
        return ("No GPU session report yet: a lent device session runs tools/gpu_session.sh and "
                "commits its report to bench/results/.\n")
    with open(path) as f:
        r = json.load(f)
    lines = [
        "From `%s` (%s; %s, driver %s; %s):" % (os.path.basename(path), r["date"], r["card"],
                                               r["driver"], r["build"]),
        "",
        "| stage | status | passed | failed | skipped | seconds | summaries |",
        "|---|---|---|---|---|---|---|",
    ]
    notes = []
    for s in r["stages"]:
        summaries = "; ".join(x.replace("summary: ", "") for x in s.get("summaries", []))
        checks = s.get("checks", [])
        counts = (s["passed"], s["failed"], s["skipped"])
        status = s["status"]
        if status == "timeout":  # no count line: the checks recorded before the stage's timeout
            counts = tuple(sum(1 for c in checks if c.startswith(k)) for k in ("PASS", "FAIL", "SKIP"))
            status = "timeout after %d checks" % len(checks)
        lines.append("| %s | %s | %d | %d | %d | %d | %s |" % (
            s["name"], status, counts[0], counts[1], counts[2], s["seconds"], summaries or "-"))
        notes += ["%s: %s" % (s["name"], " ".join(c.split())) for c in checks
                  if c.startswith("FAIL")]
    lines.append("")
    for n in notes:
        lines.append("- " + n)
    if notes:
        lines.append("")
    lines.append("Stages not run: %s." % (", ".join(r["not_run"]) or "none"))
    return "\n".join(lines) + "\n"


def replace_block(text, table):
    if BEGIN not in text or END not in text:
        raise ValueError("the README has no %s ... %s block" % (BEGIN, END))
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return head + BEGIN + "\n" + table + END + tail


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", default=os.path.join(here, "..", "bench", "results"))
    ap.add_argument("--readme", default=os.path.join(here, "..", "README.md"))
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    args = ap.parse_args()
    table = render(newest_report(args.results))
    if not (args.write or args.check):
        sys.stdout.write(table)
        return 0
    with open(args.readme) as f:
        text = f.read()
    updated = replace_block(text, table)
    if args.check:
        if updated != text:
            print("gpu_report_table: %s's GPU table is not the newest report's; run "
                  "tools/gpu_report_table.py --write" % args.readme, file=sys.stderr)
            return 1
        return 0
    with open(args.readme, "w") as f:
        f.write(updated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
