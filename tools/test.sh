#!/usr/bin/env bash
# Runs every shardema test from a clean clone:
#   1. tools/setup.sh (installs what is missing),
#   2. bazel test //...  (unit tests and the multi-rank tests, which run under real mpirun
#      with 1-4 ranks through tests/mpi_run.sh),
#   3. when nvcc exists: bazel build --config=cuda //... (compiles the CUDA path for sm_90) and
#      bazel test --config=cuda of the GPU tests (they skip cleanly without a GPU),
#   4. AddressSanitizer + UndefinedBehaviorSanitizer (--config=asan) over ASAN_CI_PACKAGES, the
#      packages CI can afford under asan on 2 cores (checkpoint, EMA, optimizer).
# tools/test.sh --sanitize instead runs the sanitizer suites only: the whole CPU suite under
# --config=asan and the tests tagged "threads" (async writer, background deleter, rank-file I/O
# thread, EMA offloader, optimizer threads, progress watcher) under --config=tsan. Leak and race
# reports from inside OpenMPI are suppressed by tools/sanitizers/*.supp (OpenMPI's libraries only).
# Ends with one line "N passed, M failed" and exits non-zero on any failure.
# Extra arguments go to every bazel command (e.g. --test_output=all).
set -uo pipefail
cd "$(dirname "$0")/.."
sanitize=0
if [ "${1:-}" = "--sanitize" ]; then
  sanitize=1
  shift
fi
ASAN_CI_PACKAGES=(//checkpoint/... //ema/... //optim/...)

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

# The sanitizers' suppression files, by absolute path (tests run from their runfiles tree).
supp="$(pwd)/tools/sanitizers"
SAN_ENV=(--test_env="LSAN_OPTIONS=suppressions=$supp/lsan.supp:print_suppressions=0"
         --test_env="TSAN_OPTIONS=suppressions=$supp/tsan.supp:halt_on_error=1:second_deadlock_stack=1")

run_tests() {  # LABEL BAZEL_TEST_ARGS...: runs bazel test, counts its per-target results
  local label="$1" rc
  shift
  echo "== $label"
  "${BAZEL[@]}" test --test_summary=short "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  count_results "$log"
  if [ "$rc" != 0 ] && [ "$(grep -cE '^//' "$log")" = 0 ]; then
    echo "$label: bazel test failed before running tests (build error above)"
    failed=$((failed + 1))
  fi
}

if [ "$sanitize" = 1 ]; then
  run_tests "asan: bazel test --config=asan //... (AddressSanitizer + UBSan, CPU suite)" \
    --config=asan "${SAN_ENV[@]}" //... "$@"
  run_tests "tsan: bazel test --config=tsan of the tests tagged threads" \
    --config=tsan "${SAN_ENV[@]}" --test_tag_filters=threads //... "$@"
  rm -f "$log"
  echo "$passed passed, $failed failed"
  [ "$failed" = 0 ] && [ "$passed" -gt 0 ]
  exit
fi

run_tests "bazel test //... (CPU build, multi-rank tests under mpirun)" //... "$@"

if command -v nvcc >/dev/null 2>&1 || [ -n "${CUDA_PATH:-}" ]; then
  echo "== bazel build --config=cuda //... (CUDA path, sm_90)"
  if "${BAZEL[@]}" build --config=cuda //... "$@" 2>&1 | tee "$log"; then
    passed=$((passed + 1))
    echo "cuda build: PASSED"
    run_tests "GPU tests (--config=cuda; skip cleanly without a GPU)" \
      --config=cuda --test_tag_filters=gpu //... "$@"
  else
    failed=$((failed + 1))
    echo "cuda build: FAILED"
  fi
else
  echo "== no nvcc: skipping the CUDA build"
fi

run_tests "asan: bazel test --config=asan ${ASAN_CI_PACKAGES[*]}" \
  --config=asan "${SAN_ENV[@]}" "${ASAN_CI_PACKAGES[@]}" "$@"
rm -f "$log"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ] && [ "$passed" -gt 0 ]
