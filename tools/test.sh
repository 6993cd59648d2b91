#!/usr/bin/env bash
# Runs every shardema test from a clean clone:
#   1. tools/setup.sh (installs what is missing),
#   2. tools/check_layers.py --self-test and on the tree (each counts as one test), and the same
#      two runs of tools/check_format.sh (skipped without clang-format 14),
#   3. bazel test //...  (unit tests and the multi-rank tests, which run under real mpirun
#      with 1-4 ranks through tests/mpi_run.sh), then tests/client_workspace/run.sh (one test:
#      a separate Bazel workspace depending on @shardema builds a training binary and README's
#      C++ blocks and runs them against the in-tree train_mlp; its own output base, so its first
#      build is cold: 4.5 minutes on 2 cores; limit $SHARDEMA_CLIENT_TIMEOUT, default 1200 s);
#      right after bazel test, tools/check_readme.py, tools/flags_doc.sh --check and
#      tools/bench_tables.py --check (README's shape, docs/flags.md against the built binaries'
#      --help, bench/README.md's generated tables; one test each),
#   4. when nvcc exists: bazel build --config=cuda //... (compiles the CUDA path for sm_90) and
#      bazel test --config=cuda of the GPU tests (they skip cleanly without a GPU); then, with or
#      without nvcc, the same GPU tests under --config=cuda_emu: on the CPU emulation of
#      framework/cuda_emu (kernels on fibers, runtime/cuBLAS on the host, NCCL over shared memory,
#      an emulated device per rank, device code under AddressSanitizer + UBSan),
#   5. a short fuzz run (tools/fuzz.sh, $SHARDEMA_FUZZ_SECONDS = 30 s per target, 3 targets):
#      each target counts as one test; without clang++ they are reported as skipped,
#   6. with SHARDEMA_CI_ASAN=1: AddressSanitizer + UndefinedBehaviorSanitizer (--config=asan) over
#      ASAN_CI_PACKAGES (checkpoint, EMA, optimizer).
# tools/test.sh --sanitize instead runs the sanitizer suites only: the whole CPU suite under
# --config=asan and the tests tagged "threads" (async writer, background deleter, rank-file I/O
# thread, EMA offloader, optimizer threads, progress watcher) under --config=tsan. Leak and race
# reports from inside OpenMPI are suppressed by tools/sanitizers/*.supp (OpenMPI's libraries only).
# A test target that skipped any test case (its gtest XML report says so: no GPU, too few ranks)
# counts as skipped, never as passed (tools/test_results.sh); the skipped targets are listed.
# Ends with one line "N passed, M failed, K skipped" and exits non-zero on any failure.
# Extra arguments go to every bazel command (e.g. --test_output=all).
set -uo pipefail
cd "$(dirname "$0")/.."
sanitize=0
if [ "${1:-}" = "--sanitize" ]; then
  sanitize=1
  shift
fi
ASAN_CI_PACKAGES=(//checkpoint/... //ema/... //optim/...)

tools/setup.sh || { echo "0 passed, 1 failed, 0 skipped"; exit 1; }

BAZEL=(bazel)
[ -n "${SHARDEMA_BAZEL_ROOT:-}" ] && BAZEL=(bazel "--output_user_root=$SHARDEMA_BAZEL_ROOT")
log=$(mktemp /tmp/shardema-test.XXXXXX)
source tools/test_results.sh  # count_results, with its counters passed, failed, skipped

# The sanitizers' suppression files, by absolute path (tests run from their runfiles tree).
supp="$(pwd)/tools/sanitizers"
SAN_ENV=(--test_env="LSAN_OPTIONS=suppressions=$supp/lsan.supp:print_suppressions=0"
         --test_env="TSAN_OPTIONS=suppressions=$supp/tsan.supp:halt_on_error=1:second_deadlock_stack=1")

finish() {
  rm -f "$log"
  if [ "$skipped" -gt 0 ]; then
    echo "== skipped (not counted as passed):"
    printf '  %s\n' "${skipped_list[@]}"
  fi
  echo "$passed passed, $failed failed, $skipped skipped"
  [ "$failed" = 0 ] && [ "$passed" -gt 0 ]
  exit
}

# LABEL CONFIG_ARGS -- TEST_ARGS...: runs bazel test, counts its per-target results.
run_tests() {
  local label="$1" rc cfg=()
  shift
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do cfg+=("$1"); shift; done
  shift
  echo "== $label"
  "${BAZEL[@]}" test --test_summary=short "${cfg[@]}" "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  count_results "$log" "$("${BAZEL[@]}" info "${cfg[@]}" bazel-testlogs 2>/dev/null)"
  if [ "$rc" != 0 ] && [ "$(grep -cE '^//' "$log")" = 0 ]; then
    echo "$label: bazel test failed before running tests (build error above)"
    failed=$((failed + 1))
  fi
}

if [ "$sanitize" = 1 ]; then
  # --build_tests_only: build the tests that run, not the benchmarks and binaries beside them
  # (without it the tag filter still compiles all of //... under the sanitizer).
  run_tests "asan: bazel test --config=asan //... (AddressSanitizer + UBSan, CPU suite)" \
    --config=asan -- "${SAN_ENV[@]}" --build_tests_only //... "$@"
  run_tests "tsan: bazel test --config=tsan of the tests tagged threads" \
    --config=tsan -- "${SAN_ENV[@]}" --build_tests_only --test_tag_filters=threads //... "$@"
  finish
fi

echo "== layer order (tools/check_layers.py: includes against README's layer block)"
for step in "--self-test" ""; do
  if python3 tools/check_layers.py $step; then
    passed=$((passed + 1)); echo "check_layers ${step:-tree}: PASSED"
  else
    failed=$((failed + 1)); echo "check_layers ${step:-tree}: FAILED"
  fi
done

echo "== format (tools/check_format.sh: sources against .clang-format)"
for step in "--self-test" ""; do
  tools/check_format.sh $step
  case $? in
    0) passed=$((passed + 1)); echo "check_format ${step:-tree}: PASSED" ;;
    77) skipped=$((skipped + 1)); skipped_list+=("check_format ${step:-tree} (no clang-format 14)")
        echo "check_format ${step:-tree}: SKIPPED" ;;
    *) failed=$((failed + 1)); echo "check_format ${step:-tree}: FAILED" ;;
  esac
done

run_tests "bazel test //... (CPU build, multi-rank tests under mpirun)" -- //... "$@"

echo "== docs (README's shape; docs/flags.md is --help; bench/README.md's tables are the newest results)"
for check in "python3 tools/check_readme.py" "tools/flags_doc.sh --check" \
  "python3 tools/bench_tables.py --check"; do
  if $check; then
    passed=$((passed + 1)); echo "$check: PASSED"
  else
    failed=$((failed + 1)); echo "$check: FAILED"
  fi
done

echo "== client workspace (tests/client_workspace/run.sh: shardema from another Bazel workspace)"
client_timeout="${SHARDEMA_CLIENT_TIMEOUT:-1200}"
timeout --kill-after=30 "$client_timeout" tests/client_workspace/run.sh 2>&1 | tee "$log"
crc=${PIPESTATUS[0]}
if [ "$crc" = 0 ]; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  # run.sh prints its own verdict line unless it was killed.
  grep -q '^client_workspace: FAILED' "$log" ||
    echo "client_workspace: FAILED (exit $crc; 124 or 137: timed out after $client_timeout s)"
fi

if command -v nvcc >/dev/null 2>&1 || [ -n "${CUDA_PATH:-}" ]; then
  echo "== bazel build --config=cuda //... (CUDA path, sm_90)"
  if "${BAZEL[@]}" build --config=cuda //... "$@" 2>&1 | tee "$log"; then
    passed=$((passed + 1))
    echo "cuda build: PASSED"
    run_tests "GPU tests (--config=cuda; skip cleanly without a GPU)" \
      --config=cuda -- --test_tag_filters=gpu //... "$@"
  else
    failed=$((failed + 1))
    echo "cuda build: FAILED"
  fi
else
  echo "== no nvcc: skipping the CUDA build"
fi
# No output suffix: the targets that do not use CUDA are the CPU build's (.bazelrc).
run_tests "GPU tests on the CPU emulation (--config=cuda_emu; ASan + UBSan in device code)" \
  --config=cuda_emu -- "${SAN_ENV[@]}" --build_tests_only --test_tag_filters=gpu //... "$@"

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

# The sanitizer run of ASAN_CI_PACKAGES is opt-in (SHARDEMA_CI_ASAN=1): a cold ASan build of
# those packages (54 test targets) repeats the whole CPU compile under the sanitizer, more than
# the default run (itself mostly compiles: CPU, CUDA, emulation) can add within CI's limit of
# well under 30 minutes on 2 cores.
# tools/test.sh --sanitize runs the whole CPU suite under ASan and the threaded tests under TSan.
if [ "${SHARDEMA_CI_ASAN:-0}" = 1 ]; then
  run_tests "asan: bazel test --config=asan ${ASAN_CI_PACKAGES[*]}" \
    --config=asan -- "${SAN_ENV[@]}" --build_tests_only "${ASAN_CI_PACKAGES[@]}" "$@"
fi
finish
