#!/usr/bin/env python3
"""Checks README.md's shape: at most 250 lines, no line over 120 characters outside fenced code
blocks, and no date (2026-11-28) or time of day (07:20) anywhere: a README states what holds, and
dated measurements live in bench/results/.

Two exceptions, both written by tools rather than by hand:
  - the block between "<!-- gpu-table -->" and "<!-- /gpu-table -->", which
    tools/gpu_report_table.py generates from the newest GPU session report (its own test keeps it
    equal to that report, date and all);
  - a date inside a results file's name (bench/results/comm_bench_w2_2026-11-28T013915Z.json):
    a figure is quoted with the file it comes from, and those names carry the date.

Usage:
  tools/check_readme.py [README]   problems as "README.md:LINE: ...", exit 1 when there is one
  tools/check_readme.py --self-test   proves each rule fails a bad file and passes a good one
Only the Python standard library is used.
"""

import os
import re
import sys
import tempfile

MAX_LINES = 250
MAX_WIDTH = 120
GENERATED_BEGIN, GENERATED_END = "<!-- gpu-table -->", "<!-- /gpu-table -->"
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
DATE = re.compile(r"(?<!\d)\d{4}-\d{2}-\d{2}(?!\d)")
TIME = re.compile(r"(?<![\d:])\d{1,2}:\d{2}(?::\d{2})?(?![\d:])")
# A file name that carries a date, e.g. gpu_session_2026-11-28T050632Z.json or
# sanitizer_runs_2026-11-28.txt: removed before the date and time checks.
DATED_FILE = re.compile(r"[\w.-]*\d{4}-\d{2}-\d{2}[\w.-]*\.(?:json|log|txt|csv)\b")


def check(path):
    """Returns the problems of the file at `path` as "path:line: message" strings."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the text after the final newline is no line
    name = os.path.relpath(path)
    problems = []
    if len(lines) > MAX_LINES:
        problems.append("%s:%d: %d lines, at most %d" % (name, MAX_LINES + 1, len(lines), MAX_LINES))
    fence = None  # the opening fence's characters while inside a code block
    generated = False
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped == GENERATED_BEGIN:
            generated = True
            continue
        if stripped == GENERATED_END:
            generated = False
            continue
        m = FENCE.match(line)
        in_code = fence is not None
        if m:
            mark = m.group(1)
            if fence is None:
                fence = mark
            elif mark[0] == fence[0] and len(mark) >= len(fence) and stripped == mark:
                fence = None
            in_code = True
        if generated:
            continue
        if not in_code and len(line) > MAX_WIDTH:
            problems.append("%s:%d: %d characters, at most %d outside code blocks"
                            % (name, number, len(line), MAX_WIDTH))
        text = DATED_FILE.sub("", line)
        for rule, pattern in (("a date", DATE), ("a time of day", TIME)):
            found = pattern.search(text)
            if found:
                problems.append("%s:%d: %s, '%s' (dated figures belong in bench/results/)"
                                % (name, number, rule, found.group(0)))
    if generated:
        problems.append("%s:%d: '%s' without '%s'" % (name, len(lines), GENERATED_BEGIN,
                                                     GENERATED_END))
    return problems


def self_test():
    good = "\n".join([
        "# t", "", "x" * MAX_WIDTH, "a ratio of 3:1 and ppr:4:node, step 100/300",
        "see bench/results/comm_bench_w2_2026-11-28T013915Z.json", "```sh",
        "y" * (MAX_WIDTH + 30), "```", GENERATED_BEGIN,
        "From `r.json` (2026-11-28T05:08:39Z): " + "z" * MAX_WIDTH, GENERATED_END, ""])
    bad = {
        "long": "x" * (MAX_WIDTH + 1) + "\n",
        "lines": "a\n" * (MAX_LINES + 1),
        "date": "measured on 2026-11-28\n",
        "time": "```\nat 07:20 it ran\n```\n",
        "in code": "```\n```text\n" + "x" * (MAX_WIDTH + 1) + "\n",
    }
    ok = True
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "README.md")
        with open(path, "w") as f:
            f.write(good)
        if check(path):
            ok = False
            print("self-test: a good README failed:", check(path))
        for what, text in bad.items():
            with open(path, "w") as f:
                f.write(text)
            if what == "in code":  # inside a code block: allowed
                if check(path):
                    ok = False
                    print("self-test: a long line inside a code block failed")
            elif not check(path):
                ok = False
                print("self-test: a README with a bad %s passed" % what)
    print("check_readme self-test: %s" % ("PASSED" if ok else "FAILED"))
    return 0 if ok else 1


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) > 2 or (len(argv) == 2 and argv[1].startswith("-")):
        print(__doc__, file=sys.stderr)
        return 2
    here = os.path.dirname(os.path.abspath(__file__))
    path = argv[1] if len(argv) == 2 else os.path.join(here, "..", "README.md")
    path = os.path.normpath(path)
    problems = check(path)
    for p in problems:
        print(p)
    if problems:
        print("check_readme: %d problem(s) in %s" % (len(problems), path))
        return 1
    print("check_readme: %s is within %d lines and %d columns, without dates"
          % (path, MAX_LINES, MAX_WIDTH))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
