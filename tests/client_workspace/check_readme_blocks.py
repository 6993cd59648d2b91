#!/usr/bin/env python3
"""check_readme_blocks.py README.md DIR: README's section "Depending on shardema from another
Bazel workspace" shows DIR's WORKSPACE, .bazelrc and main.cc, in that order, as its fenced blocks.
Each is compared from its first line that is neither blank nor a comment (the files have header
comments, the README blocks a title comment). Prints a diff and exits 1 when one differs."""

import difflib
import os
import sys

TITLE = "## Depending on shardema from another Bazel workspace"
FILES = ["WORKSPACE", ".bazelrc", "main.cc"]


def fenced_blocks(lines):
    blocks, block = [], None
    for line in lines:
        if block is None and line.startswith("```") and len(line) > 3:
            block = []
        elif block is not None and line == "```":
            blocks.append(block)
            block = None
        elif block is not None:
            block.append(line)
    return blocks


def body(lines):
    """The lines from the first that is not blank or a comment (# or //; #include is code)."""
    i = 0
    while i < len(lines) and (lines[i] == "" or lines[i].startswith("//") or
                              (lines[i].startswith("#") and not lines[i].startswith("#include"))):
        i += 1
    lines = lines[i:]
    while lines and lines[-1] == "":
        lines = lines[:-1]
    return lines


def main():
    readme, here = sys.argv[1], sys.argv[2]
    text = open(readme).read()
    if TITLE not in text:
        print("README.md has no section '%s'" % TITLE)
        return 1
    section = text.split(TITLE, 1)[1].split("\n## ", 1)[0].split("\n")
    blocks = fenced_blocks(section)
    if len(blocks) != len(FILES):
        print("README's section '%s' has %d fenced blocks, expected %d (%s)"
              % (TITLE[3:], len(blocks), len(FILES), ", ".join(FILES)))
        return 1
    ok = True
    for name, block in zip(FILES, blocks):
        mine = body(open(os.path.join(here, name)).read().split("\n"))
        if body(block) != mine:
            ok = False
            for line in difflib.unified_diff(body(block), mine, "README.md (%s block)" % name,
                                             "tests/client_workspace/" + name, lineterm=""):
                print(line)
    if ok:
        print("README's WORKSPACE, .bazelrc and main.cc blocks are tests/client_workspace's files")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
