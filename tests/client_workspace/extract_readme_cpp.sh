#!/usr/bin/env bash
# extract_readme_cpp.sh README.md OUT1 OUT2: writes the ```cpp blocks of README's section "Using
# the library in your own training loop", in order, to OUT1, OUT2 (one block each; a different
# number of blocks is an error, so a new or removed block updates this test too). Each file starts
# with a #line directive: compiler errors name README.md's own lines.
# extract_readme_cpp.sh --first FILE OUT: the first ```cpp block of FILE, whatever its section.
set -euo pipefail
if [ "$1" = --first ]; then
  awk -v name="$2" '
    /^```cpp$/ && !done { printf "#line %d \"%s\"\n", NR + 1, name; in_block = 1; next }
    in_block && /^```$/ { in_block = 0; done = 1; next }
    in_block { print }
    END { if (!done) { print "extract_readme_cpp.sh: no ```cpp block in " name > "/dev/stderr"; exit 1 } }
  ' "$2" >"$3"
  exit
fi
readme="$1"
shift
awk -v nout=$# -v outs="$*" '
  BEGIN { split(outs, out, " ") }
  /^## / { in_section = ($0 == "## Using the library in your own training loop") }
  in_section && /^```cpp$/ { n++; if (n <= nout) printf "#line %d \"README.md\"\n", NR + 1 > out[n]; in_block = 1; next }
  in_block && /^```$/ { in_block = 0; next }
  in_block && n <= nout { print > out[n] }
  END {
    if (n != nout) {
      printf "extract_readme_cpp.sh: README section \"Using the library in your own training loop\" has %d ```cpp blocks, expected %d\n", n, nout > "/dev/stderr"
      exit 1
    }
  }
' "$readme"
