#!/usr/bin/env python3
"""Checks that no #include goes against the layer order written in README.md.

The order is the fenced block that follows the line "<!-- layers -->" in README.md: one folder
per line, lowest layer first. A folder not listed belongs to the entry of its nearest listed
parent (optim/cuda is optim). A `#include "X/..."` in a non-test source (.h, .cc, .cu, .cu.h
tracked by git, not *_test.cc) in folder F is allowed iff entry(X) == entry(F) or entry(X) comes
earlier in the list. Headers from outside the tree (<...> or a first path component that is no
top-level folder of the repository) are not checked. Listed folders need not exist.

Usage:
  tools/check_layers.py [--root DIR] [--graph]   violations as "file:line: F includes X (...)",
                                                 exit 1 when there is one; --graph also prints
                                                 the include graph between layer entries
  tools/check_layers.py --self-test              proves the checker fails on an upward include
                                                 and on a two-folder cycle, passes a clean tree
Only the Python standard library is used.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

MARKER = "<!-- layers -->"
SOURCE_SUFFIXES = (".h", ".cc", ".cu", ".cu.h")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def parse_layers(readme_text):
    """The folder list of the fenced block after MARKER; raises ValueError when missing."""
    lines = readme_text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == MARKER:
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            if j == len(lines):
                break
            layers = []
            for body in lines[j + 1:]:
                if body.startswith("```"):
                    return layers
                name = body.strip().strip("/")
                if name:
                    if name in layers:
                        raise ValueError("layer '%s' is listed twice" % name)
                    layers.append(name)
            break
    raise ValueError("no fenced layer block after '%s' in README.md" % MARKER)


def entry_of(folder, layers):
    """The listed entry a folder belongs to (itself or its nearest listed parent), or None."""
    parts = folder.split("/")
    for n in range(len(parts), 0, -1):
        candidate = "/".join(parts[:n])
        if candidate in layers:
            return candidate
    return None


def tracked_sources(root):
    try:
        out = subprocess.run(["git", "ls-files"], cwd=root, check=True, capture_output=True,
                             text=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        out = []
        for d, _, files in os.walk(root):
            for f in files:
                out.append(os.path.relpath(os.path.join(d, f), root))
    return sorted(p for p in out if p.endswith(SOURCE_SUFFIXES) and not p.endswith("_test.cc")
                  and "/" in p)


def check(root):
    """Returns (violations, edges, problems): violation lines, {(from, to): count} between
    entries, and configuration problems (unlisted folders)."""
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        layers = parse_layers(f.read())
    rank = {name: i for i, name in enumerate(layers)}
    top_dirs = {p for p in os.listdir(root) if os.path.isdir(os.path.join(root, p))}
    violations, problems, edges = [], [], {}
    for path in tracked_sources(root):
        src_entry = entry_of(os.path.dirname(path), layers)
        if src_entry is None:
            if path.split("/")[0] != "third_party":
                problems.append("%s: folder '%s' is in no layer of README.md" %
                                (path, os.path.dirname(path)))
            continue
        try:
            with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
                text = f.read().splitlines()
        except OSError as e:
            problems.append("%s: %s" % (path, e))
            continue
        for lineno, line in enumerate(text, 1):
            m = INCLUDE_RE.match(line)
            if not m or "/" not in m.group(1):
                continue
            inc_dir = os.path.dirname(m.group(1))
            if inc_dir.split("/")[0] not in top_dirs:
                continue  # a header from outside the tree
            inc_entry = entry_of(inc_dir, layers)
            if inc_entry is None:
                if inc_dir.split("/")[0] != "third_party":
                    problems.append("%s:%d: includes '%s' from a folder in no layer" %
                                    (path, lineno, m.group(1)))
                continue
            if inc_entry != src_entry:
                edges[(src_entry, inc_entry)] = edges.get((src_entry, inc_entry), 0) + 1
            if rank[inc_entry] > rank[src_entry]:
                violations.append("%s:%d: %s includes %s (layer %s is below %s)" %
                                  (path, lineno, src_entry, inc_entry, src_entry, inc_entry))
    return violations, edges, problems


def run(root, graph):
    try:
        violations, edges, problems = check(root)
    except (OSError, ValueError) as e:
        print("check_layers: %s" % e)
        return 1
    if graph:
        print("include graph between layer entries (from -> to: includes):")
        for (a, b), n in sorted(edges.items()):
            print("  %s -> %s: %d" % (a, b, n))
    for line in problems + violations:
        print(line)
    if violations or problems:
        print("check_layers: %d violation(s), %d problem(s)" % (len(violations), len(problems)))
        return 1
    print("check_layers: OK (%d folder edges, all downward)" % len(edges))
    return 0


def self_test():
    readme = "# t\n\n%s\n```\nlow\nmid\nhigh\n```\n" % MARKER
    cases = {
        "clean": ({"low/a.h": "", "mid/b.h": '#include "low/a.h"\n',
                   "mid/sub/c.cc": '#include "mid/b.h"\n#include <vector>\n',
                   "high/d.cc": '#include "mid/sub/c.h"\n#include "low/a.h"\n',
                   "low/up_test.cc": '#include "high/d.h"\n'}, 0),
        "upward": ({"low/a.h": '#include "mid/b.h"\n', "mid/b.h": ""}, 1),
        "cycle": ({"low/a.h": '#include "mid/b.h"\n', "mid/b.h": '#include "low/a.h"\n'}, 1),
        "subfolder_upward": ({"low/cuda/k.cu": '#include "high/d.h"\n', "high/d.h": ""}, 1),
    }
    failures = 0
    for name, (files, want) in sorted(cases.items()):
        with tempfile.TemporaryDirectory() as root:
            with open(os.path.join(root, "README.md"), "w") as f:
                f.write(readme)
            for path, text in files.items():
                os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
                with open(os.path.join(root, path), "w") as f:
                    f.write(text)
            subprocess.run(["git", "init", "-q"], cwd=root, check=True)
            subprocess.run(["git", "add", "-A"], cwd=root, check=True)
            violations, _, problems = check(root)
            got = 1 if violations or problems else 0
            status = "ok" if got == want else "FAILED"
            failures += got != want
            print("self-test %-17s want exit %d, got %d (%d violations): %s" %
                  (name, want, got, len(violations), status))
    try:
        parse_layers("# no block\n")
        print("self-test missing_block: FAILED (no error)")
        failures += 1
    except ValueError:
        print("self-test missing_block    error as expected: ok")
    print("check_layers self-test: %s" % ("PASSED" if failures == 0 else "FAILED"))
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   ".."))
    ap.add_argument("--graph", action="store_true")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    return run(os.path.abspath(args.root), args.graph)


if __name__ == "__main__":
    sys.exit(main())
