#!/usr/bin/env bash
# Runs every gtest case of BINARY in its own mpirun of N ranks (tests/mpi_run.sh):
#   mpi_run_each.sh N BINARY [ARGS...]
# For tests whose cases end in a failure on purpose (a fault injected on one rank): after a
# failure a process may use MPI only to abort, because a collective it gave up cannot be
# cancelled and may still write into buffers the process has freed, so each case needs a fresh
# process. Runs every case (also after a failed one); exits non-zero when any case fails or no
# case is found. Bazel's XML report ($XML_OUTPUT_FILE) becomes the concatenation of the cases'
# reports (tools/test_results.sh reads it line by line).
set -uo pipefail
n="$1"; bin="$2"; shift 2
run="$(dirname "${BASH_SOURCE[0]}")/mpi_run.sh"
[ -x "$run" ] || run="tests/mpi_run.sh"  # in a Bazel test: the runfiles tree's copy
cases=$("$run" 1 "$bin" --gtest_list_tests "$@" | sed -e 's/^\[[0-9,]*\]<stdout>://' |
  awk '/^[^ ]/ {suite = $1} /^  [^ ]/ {print suite $1}')
if [ -z "$cases" ]; then
  echo "mpi_run_each.sh: no test cases listed by $bin" >&2
  exit 1
fi
xml="${XML_OUTPUT_FILE:-}"
rc=0 k=0 parts=()
for c in $cases; do
  k=$((k + 1))
  part=""
  [ -n "$xml" ] && part="$xml.case$k" && parts+=("$part")
  echo "== mpi_run_each.sh: $c ($n ranks)"
  XML_OUTPUT_FILE="$part" "$run" "$n" "$bin" --gtest_filter="$c" "$@" || rc=1
done
if [ -n "$xml" ]; then
  cat "${parts[@]}" > "$xml" 2>/dev/null
  rm -f "${parts[@]}"
fi
exit $rc
