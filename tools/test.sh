#!/usr/bin/env bash
# Runs every shardema test from a clean clone:
#   1. tools/setup.sh (installs what is missing),
#   2. bazel test //...  (unit tests and the multi-rank tests, which run under real mpirun
#      with 1-4 ranks through tests/mpi_run.sh),
#   3. tools/check_layers.py --self-test and on the tree (each counts as one test),
#   4. when nvcc exists: bazel build --config=cuda //... (compiles the CUDA path for sm_90) and
#      bazel test --config=cuda of the GPU tests (they skip cleanly without a GPU).
# Ends with one line "N passed, M failed" and exits non-zero on any failure.
# Extra arguments go to both bazel commands (e.g. --test_output=all).
set -uo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh || { echo "0 passed, 1 failed"; exit 1; }

BAZEL=(bazel)
[ -n "${SHARDEMA_BAZEL_ROOT:-}" ] && BAZEL=(bazel "--output_user_root=$SHARDEMA_BAZEL_ROOT")
log=$(mktemp /tmp/shardema-test.XXXXXX)
passed=0
failed=0

count_results() {  # parses bazel's per-target summary lines
  local p f
  p=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$1" || true)
  f=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD|INCOMPLETE|FLAKY)' "$1" || true)
  passed=$((passed + p))
  failed=$((failed + f))
}

echo "== layer order (tools/check_layers.py: includes against README's layer block)"
for step in "--self-test" ""; do
  if python3 tools/check_layers.py $step; then
    passed=$((passed + 1)); echo "check_layers ${step:-tree}: PASSED"
  else
    failed=$((failed + 1)); echo "check_layers ${step:-tree}: FAILED"
  fi
done

echo "== bazel test //... (CPU build, multi-rank tests under mpirun)"
"${BAZEL[@]}" test --test_summary=short //... "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
count_results "$log"
if [ "$rc" != 0 ] && [ "$(grep -cE '^//' "$log")" = 0 ]; then
  echo "bazel test failed before running tests (build error above)"
  failed=$((failed + 1))
fi

if command -v nvcc >/dev/null 2>&1 || [ -n "${CUDA_PATH:-}" ]; then
  echo "== bazel build --config=cuda //... (CUDA path, sm_90)"
  if "${BAZEL[@]}" build --config=cuda //... "$@" 2>&1 | tee "$log"; then
    passed=$((passed + 1))
    echo "cuda build: PASSED"
    echo "== GPU tests (--config=cuda; skip cleanly without a GPU)"
    "${BAZEL[@]}" test --config=cuda --test_summary=short --test_tag_filters=gpu //... "$@" 2>&1 | tee "$log"
    count_results "$log"
  else
    failed=$((failed + 1))
    echo "cuda build: FAILED"
  fi
else
  echo "== no nvcc: skipping the CUDA build"
fi
rm -f "$log"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ] && [ "$passed" -gt 0 ]
