#!/usr/bin/env bash
# check_format: fails when a tracked C++ source differs from what the repo's .clang-format makes
# of it (the style is applied, not just written down).
#
#   tools/check_format.sh              every tracked .h/.cc/.cu/.cuh outside third_party/;
#                                      lists the files that need `clang-format -i`, exit 1
#   tools/check_format.sh --self-test  proves the check fails on a misformatted file and passes
#                                      a formatted one
# Exit 77 (skipped) when clang-format 14 is missing: other major versions format some
# constructs differently, so their verdict would be noise (tools/setup.sh installs it).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v clang-format >/dev/null 2>&1; then
  echo "check_format: clang-format is not installed" >&2
  exit 77
fi
version="$(clang-format --version | sed -n 's/.*version \([0-9]*\)\..*/\1/p')"
if [ "$version" != 14 ]; then
  echo "check_format: clang-format $version found; the style is pinned to version 14" >&2
  exit 77
fi

# Prints the names among "$@" that clang-format would change; exit 1 if any.
misformatted() {
  local bad=0 f
  clang-format --style=file --dry-run -Werror "$@" >/dev/null 2>&1 && return 0
  for f in "$@"; do
    if ! clang-format --style=file --dry-run -Werror "$f" >/dev/null 2>&1; then
      echo "$f"
      bad=1
    fi
  done
  return $bad
}

if [ "${1:-}" = "--self-test" ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  cp .clang-format "$tmp/"
  printf 'int  f( int x ){return x+1;}\n' >"$tmp/bad.cc"
  printf 'int f(int x) { return x + 1; }\n' >"$tmp/good.cc"
  if misformatted "$tmp/bad.cc" >/dev/null; then
    echo "check_format --self-test: a misformatted file passed" >&2
    exit 1
  fi
  if ! misformatted "$tmp/good.cc" >/dev/null; then
    echo "check_format --self-test: a formatted file failed" >&2
    exit 1
  fi
  exit 0
fi

mapfile -t files < <(git ls-files '*.h' '*.cc' '*.cu' '*.cuh' | grep -v '^third_party/')
if ! out="$(misformatted "${files[@]}")"; then
  echo "check_format: these files differ from .clang-format (run clang-format -i on them):" >&2
  printf '  %s\n' $out >&2
  exit 1
fi
echo "check_format: ${#files[@]} files formatted"
