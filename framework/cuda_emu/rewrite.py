#!/usr/bin/env python3
"""Rewrites a CUDA source (.cu) into C++ for the CPU emulation of framework/cuda_emu/emulator.h.

Two rewrites, everything else kept as it is (a #line directive keeps the .cu file's line numbers
in compiler messages):
  k<<<grid, block[, smem[, stream]]>>>(args)  ->  ::shardema::cuda_emu::Launch("k (file:line)",
                                                   k, grid, block[, smem[, stream]])(args)
  extern __shared__ [__align__(n)] T name[];  ->  T* const name = reinterpret_cast<T*>(
                                                   ::shardema::cuda_emu::detail::DynamicShared());
The kernel expression before <<< is a name, optionally qualified (a::k) and with template
arguments (k<T, 4>). Exits 1 naming the line of a launch it cannot parse.

Usage: rewrite.py SOURCE.cu OUTPUT.cc
"""
import re
import sys

SHARED_RE = re.compile(
    r"extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s+)?([A-Za-z_][\w:]*)\s+"
    r"(?:__align__\s*\(\s*\d+\s*\)\s+)?([A-Za-z_]\w*)\s*\[\s*\]\s*;")


def kernel_start(text, end):
    """Index where the kernel expression ending just before `end` starts, or -1."""
    i = end
    while i > 0 and text[i - 1].isspace():
        i -= 1
    if i > 0 and text[i - 1] == ">":  # template arguments
        depth = 0
        while i > 0:
            i -= 1
            if text[i] == ">":
                depth += 1
            elif text[i] == "<":
                depth -= 1
                if depth == 0:
                    break
        if depth != 0:
            return -1
    j = i
    while j > 0 and (text[j - 1].isalnum() or text[j - 1] in "_:"):
        j -= 1
    return j if j < i else -1


def rewrite(text, path):
    out, pos = [], 0
    while True:
        k = text.find("<<<", pos)
        if k < 0:
            break
        line = text.count("\n", 0, k) + 1
        start = kernel_start(text, k)
        close = text.find(">>>", k)
        if start < pos or close < 0:
            raise ValueError("%s:%d: cannot parse this kernel launch" % (path, line))
        kernel = text[start:k].strip()
        config = text[k + 3:close]
        where = "%s (%s:%d)" % (re.sub(r"\s+", " ", kernel), path, line)
        out.append(text[pos:start])
        out.append('::shardema::cuda_emu::Launch("%s", %s, %s)' % (where, kernel, config))
        pos = close + 3
    out.append(text[pos:])
    body = SHARED_RE.sub(
        lambda m: "%s* const %s = reinterpret_cast<%s*>("
                  "::shardema::cuda_emu::detail::DynamicShared());" % (m.group(1), m.group(2),
                                                                      m.group(1)),
        "".join(out))
    if re.search(r"extern\s+__shared__", body):
        raise ValueError("%s: an extern __shared__ declaration this script cannot parse" % path)
    return '#line 1 "%s"\n%s' % (path, body)


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    with open(argv[1]) as f:
        text = f.read()
    try:
        result = rewrite(text, argv[1])
    except ValueError as e:
        sys.stderr.write("rewrite.py: %s\n" % e)
        return 1
    with open(argv[2], "w") as f:
        f.write(result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
