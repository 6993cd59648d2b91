#!/usr/bin/env bash
# Runs every shardema test from a clean clone:
#   1. tools/setup.sh (installs what is missing),
#   2. bazel test //...  (unit tests and the multi-rank tests, which run under real mpirun
#      with 1-4 ranks through tests/mpi_run.sh),
#   3. tools/check_layers.py --self-test and on the tree (each counts as one test),
#   4. when nvcc exists: bazel build --config=cuda //... (compiles the CUDA path for sm_90) and
#      bazel test --config=cuda of the GPU tests (they skip cleanly without a GPU),
#   5. a short fuzz run (tools/fuzz.sh, $SHARDEMA_FUZZ_SECONDS = 30 s per target, 3 targets):
#      each target counts as one test; without clang++ they are reported as skipped.
# A test target that skipped any test case (its gtest XML report says so: no GPU, too few ranks)
# counts as skipped, never as passed (tools/test_results.sh); the skipped targets are listed.
# Ends with one line "N passed, M failed, K skipped" and exits non-zero on any failure.
# Extra arguments go to both bazel commands (e.g. --test_output=all).
set -uo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh || { echo "0 passed, 1 failed, 0 skipped"; exit 1; }

BAZEL=(bazel)
[ -n "${SHARDEMA_BAZEL_ROOT:-}" ] && BAZEL=(bazel "--output_user_root=$SHARDEMA_BAZEL_ROOT")
log=$(mktemp /tmp/shardema-test.XXXXXX)
source tools/test_results.sh  # count_results, with its counters passed, failed, skipped

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
count_results "$log" "$("${BAZEL[@]}" info bazel-testlogs 2>/dev/null)"
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
    count_results "$log" "$("${BAZEL[@]}" info --config=cuda bazel-testlogs 2>/dev/null)"
  else
    failed=$((failed + 1))
    echo "cuda build: FAILED"
  fi
else
  echo "== no nvcc: skipping the CUDA build"
fi
echo "== fuzz: short run of the parser fuzz targets (tools/fuzz.sh)"
tools/fuzz.sh "${SHARDEMA_FUZZ_SECONDS:-30}" 2>&1 | tee "$log"
frc=${PIPESTATUS[0]}
if [ "$frc" = 77 ]; then
  echo "fuzz: 3 targets SKIPPED (clang++ with libFuzzer is not installed; tools/setup.sh tries to)"
  skipped=$((skipped + 3))
  skipped_list+=("fuzz targets (no clang++ with libFuzzer)")
else
  fp=$(grep -cE '^fuzz: [a-z_]+: PASSED' "$log" || true)
  ff=$(grep -cE '^fuzz: [a-z_]+: FAILED' "$log" || true)
  [ "$frc" != 0 ] && [ "$ff" = 0 ] && ff=1  # failed before any target ran (build error above)
  passed=$((passed + fp))
  failed=$((failed + ff))
fi
rm -f "$log"
if [ "$skipped" -gt 0 ]; then
  echo "== skipped (not counted as passed):"
  printf '  %s\n' "${skipped_list[@]}"
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ] && [ "$passed" -gt 0 ]
