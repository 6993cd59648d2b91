#!/usr/bin/env bash
# gpu_check.sh: the one command that proves the CUDA path on a machine with one or more GPUs.
#
#   tools/gpu_check.sh --package DIR [--with-cuda-libs]
#       In the repository: builds with --config=cuda and assembles DIR, a folder that runs on its
#       own (no Bazel, no MPI install): every gpu-tagged test binary (the NCCL/store/optimizer/
#       trainer multi-rank ones included), train_mlp, train_gpt, gpu_optimizer_bench, their data
#       files, the CPU builds of train_mlp and step_roofline with the step benchmark and its
#       PyTorch peers (for --step-bench and check 3b), the train_mlp step's PyTorch peer
#       (bench/peer/torch_mlp_gpu.py, check 3c), the GPU GPT benchmark
#       (bench/gpu_gpt_bench.sh with bench/peer/torch_gpt_gpu.py and gpt_flops.py, check 3d;
#       both GPU peers with bench/peer/gpu_peer_lib.py),
#       the GPT autocast parity check (bench/gpt_autocast_parity.sh with
#       bench/peer/torch_gpt_parity.py and examples/testdata/safetensors_io.py, check 3e; both
#       drivers with bench/gpt_driver_lib.sh),
#       the OpenMPI runtime (mpirun, orted, libraries, MCA components, PMIx, help files) copied
#       from this machine's install, the other shared libraries they need, env.sh (PATH,
#       LD_LIBRARY_PATH, OPAL_PREFIX and the other install-dir variables) and this script.
#       Left out unless --with-cuda-libs (they are ~800 MiB): libnccl and libcublas/Lt, which
#       env.sh finds on the GPU machine (LD_LIBRARY_PATH, /usr/local/cuda*/lib64, the system
#       library folders, pip's nvidia-* packages); the driver (libcuda) always comes from there.
#       Binaries and libraries are stripped, and DIR is also packed into DIR.tar.gz, what travels
#       to a device machine (unpack it there: tar -xzf DIR.tar.gz); that archive must fit the
#       device's carry limit (64 MiB): --package fails (exit 2), listing the package's largest
#       files, when it does not (with --with-cuda-libs it only says so).
#   DIR/gpu_check.sh [--report FILE] [--max-ranks N] [--kill-bound S] [--check-timeout S]
#                    [--only REGEX]
#       In a package: runs every check below (--only: those whose report name matches the
#       extended regex) and writes the report (default DIR/gpu_check_report.txt). Each test
#       binary run (1., 2.) is ended after --check-timeout seconds (default 900) and FAILs, so a
#       hung test costs that long and the checks after it still run.
#   DIR/gpu_check.sh --runtime-check
#       In a package, on any machine (no GPU needed): proves the packaged MPI runtime works
#       (2-rank MPI start-up and finalize of a test binary, a 2-rank and a singleton
#       train_mlp --device cpu run); prints "runtime check: ok" or what failed. Not a GPU check.
#   DIR/gpu_check.sh --step-bench [bench/step_bench.sh flags]
#       In a package, on any machine: the CPU step benchmark (ours vs the PyTorch FSDP2 peer, with
#       the roofline) with the package's CPU builds of train_mlp and step_roofline (cpu/, built
#       without CUDA) and its OpenMPI, CMA single copy where a 2-rank probe shows it works, the
#       peer under $PYTHON (default python3). For a machine with more cores than this one, e.g.
#       the GPU machines' (bench/README.md). Not a GPU check.
#   DIR/gpu_check.sh --save-bench [bench/save_stall_bench.sh flags]
#       In a package, on any machine: what a checkpoint save costs the package's CPU train_mlp,
#       sync vs async, and the floor of any save there (bench/save_stall_bench.sh), with the
#       same MPI set-up as --step-bench, the checkpoints in $TMPDIR. Not a GPU check.
#   tools/gpu_check.sh [run options]
#       In the repository: --package into a temporary folder, then runs it.
#
# The checks (each is one line of the report: PASS, FAIL or SKIP with the reason):
#   1. every gpu-tagged single-process test binary (gtest; a binary that skipped any test case
#      is SKIP, never PASS: tools/test_results.sh);
#   2. every gpu-tagged multi-rank test binary at 1, 2, 3, 4 and 8 ranks, one GPU per rank; with
#      more ranks than GPUs (up to 4 ranks) the ranks share the GPUs, each with its own
#      NCCL_HOSTID so NCCL connects them through its socket transport over loopback
#      (shared_gpu_rank.sh; reported as "(shared GPU, socket transport)": it proves the
#      multi-rank code paths, never their speed); beyond 4 ranks SKIP;
#   3. gpu_optimizer_bench (its summary line goes into the report), against the PyTorch peer
#      (torch_fused_adamw.py) where the machine's python3 has torch with CUDA;
#   3b. the CPU step benchmarks' PyTorch FSDP2 peers (bench/peer/torch_fsdp2_{mlp,gpt}.py), a
#      2-rank step of a tiny model each, on the CPU while a GPU is visible (PASS when the peer
#      prints its JSON line; SKIP when the machine's python3 has no torch);
#   3c. train_mlp_step: a 1-rank train_mlp --device cuda step timed with CUDA events (--bench-json)
#      at layers 1024,4096,4096,1024, batch 256, against its PyTorch peer (eager f32, fused AdamW:
#      bench/peer/torch_mlp_gpu.py) where the peers' python3 has torch with CUDA (else its keys
#      read "unavailable"); the summary line (train_mlp_cuda_step_ms, torch_ms,
#      ours_speedup_vs_torch, ...) goes into the report; FAIL when ours fails, or the peer fails
#      where torch with CUDA imports;
#   3d. gpu_gpt_bench: bench/gpu_gpt_bench.sh, the GPT-2 small shape (12 layers, 12 heads, C 768,
#      T 1024, vocabulary 50257 padded to 50304), batch auto (the largest power of two up to 64
#      at which PyTorch eager trains) x 1024, AdamW + EMA 0.999,0.9999, ours (then a short run
#      of it with --profile for its op table): train_gpt --device cuda at one rank against
#      PyTorch eager bf16 (and torch.compile, within 80 s) on the same tokens, with a large bf16
#      GEMM for the MFU reference; 2 warm-up and 5 timed steps. Its summary line and its results
#      file (a `results:` line) go into the report; SKIP when the package has no train_gpt, FAIL
#      when the driver exits non-zero (ours failed, or the peer failed where torch imports);
#   3e. gpt_autocast_parity (issue 31 item 3's acceptance check, run before 3d):
#      bench/gpt_autocast_parity.sh --device cuda, a small GPT (4 layers, 4 heads, C 128, T 128,
#      vocabulary 512, batch 8) trained 60 steps by train_gpt --precision bf16 and by PyTorch
#      under torch.autocast(bf16) from the same initial model on the same tokens with the same
#      AdamW, clipping and LR schedule: PASS when the per-step losses agree within 2e-2 relative
#      and the f32 runs (fp32 without TF32 on both sides) within 1e-3; its summary line
#      (max_rel_diff_bf16, max_rel_diff_f32, pass) and its results file (every loss) go into the
#      report; SKIP when the package has no train_gpt or the peers' python3 has no torch, FAIL
#      otherwise when the driver exits non-zero (a run failed or a comparison is out of bounds);
#   4. a 2-rank and a 4-rank train_mlp --device cuda run in which one rank is killed (SIGKILL)
#      once training runs: PASS when the job exits, non-zero, within --kill-bound seconds
#      (default 60); on GPUs shared as in 2. where the ranks outnumber them;
#   5. compute-sanitizer memcheck, racecheck and synccheck over each binary of 1. and over a
#      short 1-rank train_mlp --device cuda (SKIP when compute-sanitizer is not installed, or
#      when it refuses the device, as on some virtualised GPUs); the slowest checks, run last.
# Without a GPU every check is SKIP ("no GPU" line first) and the script exits 0; any FAIL makes
# it exit 1. Last line: "N passed, M failed, K skipped". For tests of this script only,
# GPU_CHECK_GPUS=N overrides the GPU count, GPU_CHECK_SANITIZER=none hides compute-sanitizer and
# GPU_CHECK_PYTHON names the peers' interpreter ("none" hides it), GPU_CHECK_SHARED=0 turns the
# shared-GPU runs off (such checks SKIP).
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
self="$here/$(basename "${BASH_SOURCE[0]}")"

die() { echo "gpu_check: $*" >&2; exit 2; }

# ---------------------------------------------------------------------------------------------
# Run mode (in a package)

passed=0 failed=0 skipped=0
report=""
record() {  # $1: PASS|FAIL|SKIP, $2: check, $3: detail
  case "$1" in PASS) passed=$((passed + 1)) ;; FAIL) failed=$((failed + 1)) ;; *) skipped=$((skipped + 1)) ;; esac
  local line
  line=$(printf '%-4s %-58s %s' "$1" "$2" "${3:-}")
  echo "$line"
  echo "$line" >> "$report"
}

gpu_count() {
  if [ -n "${GPU_CHECK_GPUS:-}" ]; then echo "$GPU_CHECK_GPUS"; return; fi  # tests of this script
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true
  else
    ls /dev/nvidia[0-9]* 2>/dev/null | wc -l
  fi
}

mpirun_cmd() {  # $1: ranks; the package's mpirun with the flags every run needs
  local args=(--bind-to none --oversubscribe -np "$1")
  [ "$(id -u)" = 0 ] && args=(--allow-run-as-root "${args[@]}")
  echo "mpirun ${args[*]}"
}

SHARED="(shared GPU, socket transport)"
MAX_SHARED_RANKS=4
# How $1 ranks run on $gpus GPUs: "own" (a GPU each), "shared" (shared_gpu_rank.sh) or "skip".
placement() {
  if [ "$1" -le "$gpus" ]; then
    echo own
  elif [ "$1" -le "$MAX_SHARED_RANKS" ] && [ "${GPU_CHECK_SHARED:-1}" != 0 ]; then
    echo shared
  else
    echo skip
  fi
}
# The launch of $1 ranks: mpirun, and the shared-GPU wrapper where the ranks share the GPUs.
rank_launch() {
  local launch
  launch=$(mpirun_cmd "$1")
  [ "$(placement "$1")" = shared ] && launch+=" $pkg/shared_gpu_rank.sh $gpus"
  echo "$launch"
}

logs=""
# A sanitizer run that failed with nothing checked: compute-sanitizer cannot instrument this
# device (some virtualised GPUs), or the binary passed without making a CUDA call (the error
# code tests). Prints why, which makes the check a SKIP rather than a FAIL.
sanitizer_refused() {  # $1: check name, $2: log, $3: the run's gtest verdict ("" for none)
  [[ "$1" == compute-sanitizer* ]] || return 1
  local line
  if line=$(grep -m1 -E 'Device not supported|Failed to initialize the profiler' "$2"); then
    echo "compute-sanitizer refused the device: $line"
  elif [ "${3:-}" = passed ] && grep -q 'terminated before first instrumented API call' "$2"; then
    echo "the binary passed without a CUDA call: nothing for compute-sanitizer to check"
  else
    return 1
  fi
}

run_gtest() {  # $1: check name, $2: timeout s, rest: command. Records the verdict of its XML.
  local check="$1" limit="$2"; shift 2
  local slug xml log rc verdict run sk fl
  slug=$(printf '%s' "$check" | tr -c 'A-Za-z0-9_.-' '_')
  xml="$logs/$slug.xml" log="$logs/$slug.log"
  rm -f "$xml"
  # A fresh TEST_TMPDIR per run, as Bazel gives each test (the ranks inherit it from mpirun): the
  # tests' checkpoint directories must not hold an earlier run's (e.g. the same test at 1 rank).
  local tmp
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")
  # stdin from /dev/null: mpirun would otherwise forward (and consume) the plan being read.
  (cd "$pkg/root" && TEST_TMPDIR="$tmp" timeout --kill-after=5 "$limit" "$@" \
    --gtest_output="xml:$xml") < /dev/null > "$log" 2>&1
  rc=$?
  rm -rf "$tmp"
  read -r verdict run sk fl < <(xml_verdict "$xml")
  local refused
  if [ "$rc" != 0 ] && refused=$(sanitizer_refused "$check" "$log" "$verdict"); then
    record SKIP "$check" "$refused"
  elif [ "$rc" != 0 ]; then
    local hung=""
    [ "$rc" = 124 ] || [ "$rc" = 137 ] &&
      hung=" (timeout after ${limit} s, in $(grep -a '\[ RUN' "$log" | tail -1 | sed 's/.*RUN[^A-Za-z]*//'))"
    record FAIL "$check" "exit $rc$hung; log: $log"
  elif [ ! -s "$xml" ]; then
    record FAIL "$check" "no gtest report; log: $log"
  elif [ "$verdict" = skipped ]; then
    record SKIP "$check" "$sk of $run cases skipped: $(xml_skip_reason "$xml")"
  else
    record PASS "$check" "$run cases"
  fi
  # A test's own figures (e.g. the trainer's host waits on quiet steps) go into the report.
  grep -a '^summary:' "$log" 2>/dev/null | sed 's/^/  /' | tee -a "$report"
}

run_plain() {  # $1: check name, $2: timeout s, rest: command; PASS on exit 0
  local check="$1" limit="$2"; shift 2
  local log rc
  log="$logs/$(printf '%s' "$check" | tr -c 'A-Za-z0-9_.-' '_').log"
  (cd "$pkg/root" && timeout "$limit" "$@") < /dev/null > "$log" 2>&1
  rc=$?
  local refused
  if [ "$rc" != 0 ] && refused=$(sanitizer_refused "$check" "$log"); then
    record SKIP "$check" "$refused"
  elif [ "$rc" != 0 ]; then
    record FAIL "$check" "exit $rc; log: $log"
  elif grep -q '^summary:.*skipped=1' "$log"; then  # a benchmark that found no GPU
    record SKIP "$check" "$(grep '^summary:' "$log" | head -1)"
  else
    record PASS "$check" "log: $log"
  fi
}

# 3c. A 1-rank train_mlp --device cuda step timed by --bench-json (CUDA events, no per-step
# synchronisation) against its PyTorch peer (bench/peer/torch_mlp_gpu.py: the same MLP, shape,
# batch, loss and AdamW, eager f32 without TF32 as ours, no EMA as ours, fused AdamW, the same
# CUDA-event timing after as many warm-up steps). The peer runs under GPU_CHECK_PYTHON (as for
# 3b; "none": not run), default python3, ended after MLP_PEER_TIMEOUT s. Where that interpreter
# has no torch or its torch sees no CUDA device (the peer's exit 3), or the package has no peer,
# the peer's keys read "unavailable" and the check is ours alone; a peer that fails otherwise
# FAILs the check. The summary line: train_mlp_cuda_step_ms (ours' median), timing, layers,
# batch, ranks, then torch_ms (the peer's median), ours_speedup_vs_torch (torch_ms / ours' ms:
# > 1 when ours is faster), ours_device_mib and torch_device_mib (the device memory in use at a
# step's end, the CUDA context included, read the same way on both sides), torch_allocated_mib
# (max_memory_allocated) and torch_adamw (fused or foreach).
STEP_LAYERS=1024,4096,4096,1024 STEP_BATCH=256
STEP_SHAPE=(--layers "$STEP_LAYERS" --activation relu --loss cross_entropy --batch "$STEP_BATCH"
            --synthetic-rows 8192)
STEP_FLAGS=(--device cuda "${STEP_SHAPE[@]}" --steps 60 --bench-warmup 10 --bench-json
            --log-every 0)
MLP_PEER_FLAGS=(--device cuda "${STEP_SHAPE[@]}" --steps 50 --warmup 10 --dtype fp32)
MLP_PEER_TIMEOUT=35
json_num() {  # $1: key, $2: file -> the first number of "key": N (or "key": [N, ...]) in it
  grep -o "\"$1\": *\[\?[0-9.eE+-]*" "$2" 2>/dev/null | head -1 | sed 's/.*: *\[\?//'
}
train_mlp_step() {
  local name="$1" log="$logs/$1.log" rc ms
  if [ ! -x "$pkg/bin/train_mlp" ]; then
    record SKIP "$name" "not in this package"
    return
  fi
  (cd "$pkg/root" && timeout 180 "$pkg/bin/train_mlp" "${STEP_FLAGS[@]}") < /dev/null > "$log" 2>&1
  rc=$?
  ms=$(json_num step_ms "$log")
  if [ "$rc" != 0 ] || [ -z "$ms" ]; then
    record FAIL "$name" "exit $rc$([ "$rc" = 0 ] && echo ', no step_ms'); log: $log"
    return
  fi
  # The peer (see above).
  local python="${GPU_CHECK_PYTHON:-python3}" script="$pkg/peer/bench/peer/torch_mlp_gpu.py"
  local pjson="$logs/torch_mlp_gpu.json" plog="$logs/torch_mlp_gpu.log" prc torch_ms="" note=""
  local keys="torch_ms=unavailable ours_speedup_vs_torch=unavailable"
  if [ ! -f "$script" ]; then
    note="not in this package"
  elif [ "$python" = none ]; then
    note="no interpreter (GPU_CHECK_PYTHON=none)"
  else
    PYTHONDONTWRITEBYTECODE=1 timeout --kill-after=5 "$MLP_PEER_TIMEOUT" "$python" "$script" \
      "${MLP_PEER_FLAGS[@]}" < /dev/null > "$pjson" 2> "$plog"
    prc=$?
    torch_ms=$(json_num step_ms "$pjson")
    case "$prc" in
      0) [ -n "$torch_ms" ] || { prc="0, no step_ms"; torch_ms=""; } ;;
      3 | 126 | 127) torch_ms="" note="$(tail -1 "$plog") ($python)" ;;
      *) torch_ms="" ;;
    esac
  fi
  if [ -n "$torch_ms" ]; then
    local speedup od td ta adamw
    speedup=$(awk -v t="$torch_ms" -v o="$ms" 'BEGIN { printf "%.4f", t / o }')
    od=$(json_num peak_device_used_mib "$log") td=$(json_num peak_device_used_mib "$pjson")
    ta=$(json_num max_memory_allocated_mib "$pjson")
    adamw=$(sed -n 's/.*"adamw": *"\([a-z]*\)".*/\1/p' "$pjson")
    keys="torch_ms=$torch_ms ours_speedup_vs_torch=$speedup ours_device_mib=${od:-na}"
    keys+=" torch_device_mib=${td:-na} torch_allocated_mib=${ta:-na} torch_adamw=${adamw:-na}"
    record PASS "$name" "log: $log; PyTorch peer: $pjson"
  elif [ -n "$note" ]; then
    record PASS "$name" "log: $log; PyTorch peer unavailable: ${note:0:160}"
  else
    record FAIL "$name" "the PyTorch peer failed (exit $prc$([ "$prc" = 124 ] &&
      echo ", timeout after $MLP_PEER_TIMEOUT s")); log: $plog"
  fi
  echo "  summary: train_mlp_cuda_step_ms=$ms timing=cuda_events layers=$STEP_LAYERS" \
    "batch=$STEP_BATCH ranks=1 $keys" | tee -a "$report"
}

# 3d and 3e: the GPT driver peer/bench/$2 of the package with its train_gpt, its results file
# ($logs/$1.json) and its build line, the flags after $4, ended after $3 s; the peer's interpreter
# as for 3b (GPU_CHECK_PYTHON, "none": none). $4 records the verdict: a function called with the
# check name, the driver's exit status, its summary line, its log and that interpreter. Then the
# summary line and the results file go into the report. SKIP when the package has no train_gpt
# or no driver.
gpt_driver_check() {
  local name="$1" script="$pkg/peer/bench/$2" limit="$3" verdict="$4" log="$logs/$1.log"
  local json="$logs/$1.json" python="${GPU_CHECK_PYTHON:-python3}" rc line
  shift 4
  if [ ! -x "$pkg/bin/train_gpt" ] || [ ! -f "$script" ]; then
    record SKIP "$name" "not in this package"
    return
  fi
  [ "$python" = none ] && python="$pkg/no-python"
  rm -f "$json"
  PYTHON="$python" timeout --kill-after=10 "$limit" bash "$script" \
    --train-gpt "$pkg/bin/train_gpt" --json "$json" \
    --build "$(head -1 "$pkg/BUILD_INFO" 2>/dev/null)" "$@" < /dev/null > "$log" 2>&1
  rc=$?
  line=$(grep '^summary:' "$log" | tail -1)
  "$verdict" "$name" "$rc" "$line" "$log" "$python"
  [ -n "$line" ] && echo "  $line" | tee -a "$report"
  [ -s "$json" ] && echo "  results: $json" | tee -a "$report"
}

# 3d. The GPU GPT benchmark (bench/gpu_gpt_bench.sh; the header's 3d): its summary line and its
# results file go into the report. The peer's interpreter: GPU_CHECK_PYTHON (as for 3b; "none":
# no torch, its figures na), default python3. The driver's own time limits (the batch probe 40 s,
# ours 80 s and its profiled run (at most 45 s) 100 s together, the peer 75 s, torch.compile
# 80 s: 295 s in all) end it within its 330 s here and gpu_session's gpt_bench stage (400 s, with
# 3e's 105 s before it).
GPT_BENCH_FLAGS=(--batch auto --max-batch 64 --probe-timeout 40 --steps 5 --warmup 2
                 --ema "0.999,0.9999" --gemm-size 8192 --ours-timeout 80 --torch-timeout 75
                 --compile-timeout 80)
gpu_gpt_bench_verdict() {  # gpt_driver_check's verdict: PASS on exit 0
  if [ "$2" != 0 ]; then
    record FAIL "$1" "exit $2; log: $4"
  else
    record PASS "$1" "log: $4"
  fi
}
gpu_gpt_bench() {
  gpt_driver_check "$1" gpu_gpt_bench.sh 330 gpu_gpt_bench_verdict "${GPT_BENCH_FLAGS[@]}"
}

# 3e. The GPT autocast parity check (bench/gpt_autocast_parity.sh; the header's 3e) at its
# defaults on the GPU: its summary line and its results file go into the report. Its exit: 0
# pass, 1 a failed run or comparison (FAIL), 3 no torch for the peer (SKIP). The peer's
# interpreter as for 3d. Its own limits (the peer 45 s, each of ours' two runs 25 s; the whole
# ends after 105 s) fit in gpu_session's gpt_bench stage beside 3d's; it should need about half
# a minute (an estimate, not yet run on a GPU: torch's import and CUDA start-up, 120 PyTorch and
# 120 train_gpt steps of a 0.9M-parameter model).
GPT_PARITY_FLAGS=(--device cuda --steps 60 --torch-timeout 45 --ours-timeout 25)
gpt_autocast_parity_verdict() {  # gpt_driver_check's verdict: the driver's exit 0, 1 or 3
  if [ "$2" = 3 ]; then
    record SKIP "$1" "$5 cannot import torch and numpy: nothing compared"
  elif [ "$2" != 0 ]; then
    record FAIL "$1" "exit $2$([ "$2" = 124 ] && echo ' (timeout after 105 s)'); log: $4"
  else
    record PASS "$1" "$(echo "$3" | grep -o 'max_rel_diff_bf16=[^ ]* max_rel_diff_f32=[^ ]*'); log: $4"
  fi
}
gpt_autocast_parity() {
  gpt_driver_check "$1" gpt_autocast_parity.sh 105 gpt_autocast_parity_verdict \
    "${GPT_PARITY_FLAGS[@]}"
}

TRAIN_FLAGS=(--device cuda --layers 64,128,128,10 --loss cross_entropy --batch 64 --log-every 1
             --synthetic-rows 4096)

# Every check with its plan, so that a machine without a GPU lists the same checks as skipped.
plan_checks() {
  local kind name label np tool
  while read -r kind name label; do
    [ "$kind" = single ] && echo "test $name"
  done < "$pkg/MANIFEST"
  while read -r kind name label; do
    [ "$kind" = mpi ] || continue
    for np in 1 2 3 4 8; do echo "mpi $name $np"; done
  done < "$pkg/MANIFEST"
  # The quick checks first, the slow sanitizer runs last.
  echo "bench gpu_optimizer_bench"
  echo "bench train_mlp_step"
  echo "bench gpt_autocast_parity"
  echo "bench gpu_gpt_bench"
  echo "peer torch_fsdp2_mlp"
  echo "peer torch_fsdp2_gpt"
  echo "kill train_mlp 2"
  echo "kill train_mlp 4"
  for tool in memcheck racecheck synccheck; do
    while read -r kind name label; do
      [ "$kind" = single ] && echo "sanitize $tool $name"
    done < "$pkg/MANIFEST"
    echo "sanitize $tool train_mlp"
  done
}

check_name() {  # plan line -> report name
  case "$1" in
    test) echo "$2" ;;
    mpi) echo "$2 np=$3" ;;
    sanitize) echo "compute-sanitizer $2 $3" ;;
    bench) echo "$2" ;;
    peer) echo "$2.py, 2 ranks on the CPU beside the GPU" ;;
    kill) echo "train_mlp np=$3 --device cuda, one rank killed" ;;
  esac
}

kill_test() {  # $1 ranks of training, SIGKILL to one, the job must end within $kill_bound s
  local check log start pid ranks victim waited rc np="$1"
  check=$(check_name kill train_mlp "$np")
  [ "$(placement "$np")" = shared ] && check+=" $SHARED"
  log="$logs/kill_test_np$np.log"
  start=$(date +%s)
  # shellcheck disable=SC2046
  (cd "$pkg/root" && exec setsid $(rank_launch "$np") "$pkg/bin/train_mlp" "${TRAIN_FLAGS[@]}" \
      --steps 100000000) < /dev/null > "$log" 2>&1 &
  pid=$!
  # Wait until training runs (a step line), at most 120 s.
  for _ in $(seq 1 240); do
    grep -q 'step [0-9]*/' "$log" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  if ! kill -0 "$pid" 2>/dev/null; then
    wait "$pid"; rc=$?
    record FAIL "$check" "the job ended (exit $rc) before a rank was killed; log: $log"
    return
  fi
  if ! grep -q 'step [0-9]*/' "$log"; then
    kill -KILL -- "-$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    record FAIL "$check" "no training step within 120 s; log: $log"
    return
  fi
  # The ranks are mpirun's children (this script started mpirun; its pid is $pid).
  ranks=$(pgrep -P "$pid" -f train_mlp || true)
  victim=$(echo "$ranks" | tail -1)
  if [ -z "$victim" ]; then
    kill -KILL -- "-$pid" 2>/dev/null
    record FAIL "$check" "could not find the rank processes of mpirun $pid"
    return
  fi
  local vrank
  vrank=$(tr '\0' '\n' < "/proc/$victim/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
  kill -KILL "$victim"
  local killed_at
  killed_at=$(date +%s)
  waited=0
  while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt "$kill_bound" ]; do
    sleep 1
    waited=$(($(date +%s) - killed_at))
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL -- "-$pid" 2>/dev/null  # the process group this script created with setsid
    wait "$pid" 2>/dev/null
    record FAIL "$check" "the job still ran ${kill_bound} s after rank pid $victim was killed; log: $log"
    return
  fi
  wait "$pid"; rc=$?
  # The job must say which rank died (mpirun's notice, or a rank's error naming it).
  local named
  named=$(grep -m1 -E "rank ${vrank:-?}[^0-9]" "$log" | grep -iE 'exited|killed|failed|signal')
  if [ "$rc" = 0 ]; then
    record FAIL "$check" "the job exited 0 after a rank was killed; log: $log"
  elif [ -z "$vrank" ] || [ -z "$named" ]; then
    record FAIL "$check" "no line of the job names the killed rank (${vrank:-unknown}); log: $log"
  else
    record PASS "$check" "exited $rc ${waited} s after the kill (bound ${kill_bound} s), naming rank $vrank: ${named:0:120}"
  fi
}

# 3b: a CPU step peer (bench/peer), 2 ranks of a tiny model, on a machine where a GPU is visible.
# GPU_CHECK_PYTHON: the interpreter (tests of this script; "none" hides it), default python3.
peer_check() {  # $1: check name, $2: peer (torch_fsdp2_mlp or torch_fsdp2_gpt)
  local python="${GPU_CHECK_PYTHON:-python3}" script="$pkg/peer/bench/peer/$2.py"
  local log="$logs/$2.log" args rc line
  if [ ! -f "$script" ]; then
    record SKIP "$1" "not in this package"
    return
  fi
  if [ "$python" = none ] || ! "$python" -c 'import torch' > /dev/null 2>&1; then
    record SKIP "$1" "$python cannot import torch"
    return
  fi
  args=(--world 2 --steps 2 --warmup 1 --port $((29500 + RANDOM % 2000)))
  case "$2" in
    torch_fsdp2_mlp) args+=(--layers 16,32,8 --batch 8) ;;
    *) args+=(--n-layer 1 --n-head 2 --n-embd 32 --block-size 16 --batch 4) ;;
  esac
  timeout 300 "$python" "$script" "${args[@]}" < /dev/null > "$log" 2>&1
  rc=$?
  line=$(grep '^{' "$log" | tail -1)
  if [ "$rc" != 0 ] || [ -z "$line" ]; then
    record FAIL "$1" "exit $rc$([ -z "$line" ] && echo ', no JSON line'); log: $log"
  else
    record PASS "$1" "wrap $(echo "$line" | sed -n 's/.*"wrap": *"\([a-z0-9]*\)".*/\1/p')"
  fi
}

runtime_check() {
  pkg="$here"
  # shellcheck source=/dev/null
  source "$pkg/env.sh"
  local ok=1 out
  local flags=(--device cpu --layers 8,16,2 --loss mse --batch 8 --steps 2 --log-every 1)
  # shellcheck disable=SC2046
  if ! out=$(cd "$pkg/root" && timeout 120 $(mpirun_cmd 2) "$pkg/bin/nccl_communicator_test_bin"               --gtest_list_tests 2>&1); then
    echo "$out" | tail -20; echo "runtime check: 2-rank MPI start-up failed"; ok=0
  fi
  # shellcheck disable=SC2046
  if ! out=$(cd "$pkg/root" && timeout 120 $(mpirun_cmd 2) "$pkg/bin/train_mlp" "${flags[@]}" 2>&1); then
    echo "$out" | tail -20; echo "runtime check: 2-rank train_mlp --device cpu failed"; ok=0
  fi
  if ! out=$(cd "$pkg/root" && timeout 120 "$pkg/bin/train_mlp" "${flags[@]}" 2>&1); then
    echo "$out" | tail -20; echo "runtime check: singleton train_mlp --device cpu failed"; ok=0
  fi
  echo "mpirun: $(command -v mpirun)"
  if [ "$ok" = 1 ]; then echo "runtime check: ok"; exit 0; fi
  exit 1
}

# The CPU benchmarks' MPI: the package's, with OpenMPI's single copy (CMA) unless set (env.sh
# turns it off for the checks, but a benchmark must not run without it: tests/mpi_run.sh's note),
# where a 2-rank probe shows it works.
bench_mpi() {
  pkg="$here"
  export OMPI_MCA_btl_vader_single_copy_mechanism="${OMPI_MCA_btl_vader_single_copy_mechanism:-cma}"
  # shellcheck source=/dev/null
  source "$pkg/env.sh"
  # shellcheck disable=SC2046
  if ! (cd "$pkg/root" && timeout 120 $(mpirun_cmd 2) "$pkg/cpu/train_mlp" --layers 8,16,2 \
          --loss mse --batch 8 --steps 2 --log-every 0) < /dev/null > /dev/null 2>&1; then
    echo "# single copy '$OMPI_MCA_btl_vader_single_copy_mechanism' failed a 2-rank probe: none"
    export OMPI_MCA_btl_vader_single_copy_mechanism=none
  fi
  echo "# single copy: $OMPI_MCA_btl_vader_single_copy_mechanism; $(nproc --all) cores;" \
    "$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)"
}

# --step-bench: bench/step_bench.sh with the package's binaries and MPI (see the header).
step_bench() {
  bench_mpi
  PYTHON="${PYTHON:-python3}" exec bash "$pkg/peer/bench/step_bench.sh" "$pkg/cpu/train_mlp" \
    "$pkg/peer/bench/peer/torch_fsdp2_mlp.py" "$pkg/cpu/step_roofline" "$@"
}

run_checks() {
  local report_arg="" max_ranks=8 only=""
  kill_bound=60 check_timeout=900
  while [ $# -gt 0 ]; do
    case "$1" in
      --report) report_arg="$2"; shift 2 ;;
      --max-ranks) max_ranks="$2"; shift 2 ;;
      --kill-bound) kill_bound="$2"; shift 2 ;;
      --check-timeout) check_timeout="$2"; shift 2 ;;
      --only) only="$2"; shift 2 ;;
      --runtime-check) runtime_check ;;
      --step-bench) shift; step_bench "$@" ;;
      --save-bench) shift; bench_mpi; exec bash "$pkg/peer/bench/save_stall_bench.sh" \
        "$pkg/cpu/train_mlp" "$pkg/cpu/save_floor" "$@" ;;
      -h|--help) sed -n '2,50p' "$self"; exit 0 ;;
      *) die "unknown argument $1 (see --help)" ;;
    esac
  done
  pkg="$here"
  # shellcheck source=/dev/null
  source "$pkg/env.sh"
  # shellcheck source=tools/test_results.sh
  source "$pkg/test_results.sh"
  report="${report_arg:-$pkg/gpu_check_report.txt}"
  logs="$(dirname "$report")/gpu_check_logs"
  mkdir -p "$logs" || die "cannot write $logs"
  : > "$report" || die "cannot write $report"
  {
    echo "gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
    cat "$pkg/BUILD_INFO" 2>/dev/null
  } | tee -a "$report"

  local gpus
  gpus=$(gpu_count)
  local plan
  plan=$(plan_checks)
  if [ -n "$only" ]; then  # the checks whose report name matches; the others are not listed
    local kept="" line
    while read -r line; do
      # shellcheck disable=SC2086
      check_name $line | grep -qE -- "$only" && kept+="$line"$'\n'
    done <<< "$plan"
    plan="${kept%$'\n'}"
    [ -n "$plan" ] || die "--only '$only' matches no check"
  fi
  if [ "${gpus:-0}" = 0 ]; then
    echo "no GPU: nvidia-smi lists none (or no /dev/nvidiaN); every check is skipped, none has run" \
      | tee -a "$report"
    while read -r -a p; do record SKIP "$(check_name "${p[@]}")" "no GPU"; done <<< "$plan"
    finish
    return
  fi
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>/dev/null \
    | sed 's/^/gpu: /' | tee -a "$report"
  echo "$gpus GPU(s)" | tee -a "$report"

  # Preflight: every binary's shared libraries resolve (libnccl/libcublas come from the machine).
  local missing="" b
  for b in "$pkg"/bin/*; do
    missing+=$(ldd "$b" 2>/dev/null | awk '/not found/ {print $1}')
    missing+=" "
  done
  missing=$(echo $missing | tr ' ' '\n' | sort -u | tr '\n' ' ')
  if [ -n "${missing// /}" ]; then
    echo "missing shared libraries: $missing(install CUDA/NCCL, add their folder to LD_LIBRARY_PATH, or package with --with-cuda-libs)" | tee -a "$report"
  fi

  local sanitizer="${GPU_CHECK_SANITIZER:-}"  # "none" in tests of this script
  [ -z "$sanitizer" ] && sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer \
              /usr/local/cuda*/compute-sanitizer/compute-sanitizer 2>/dev/null | head -1)
  [ "$sanitizer" = none ] && sanitizer=""

  local -a p
  while read -r -a p; do
    local name
    name=$(check_name "${p[@]}")
    case "${p[0]}" in
      test) run_gtest "$name" "$check_timeout" "$pkg/bin/${p[1]}" ;;
      mpi)
        if [ "$(placement "${p[2]}")" = skip ] || [ "${p[2]}" -gt "$max_ranks" ]; then
          record SKIP "$name" "needs ${p[2]} GPUs, the machine has $gpus (shared runs up to \
$MAX_SHARED_RANKS ranks; --max-ranks $max_ranks)"
        else
          [ "$(placement "${p[2]}")" = shared ] && name+=" $SHARED"
          # shellcheck disable=SC2046
          run_gtest "$name" "$check_timeout" $(rank_launch "${p[2]}") "$pkg/bin/${p[1]}"
        fi ;;
      sanitize)
        if [ -z "$sanitizer" ]; then
          record SKIP "$name" "compute-sanitizer not found (install the CUDA toolkit)"
        elif [ "${p[2]}" = train_mlp ]; then
          # API errors are not reported here: NCCL's start-up probes its kernels with
          # cudaFuncGetAttributes and handles the "no kernel image" answers itself (seen
          # on an H100). Every CUDA call of ours is checked and fails the run on its own.
          run_plain "$name" 900 "$sanitizer" --tool "${p[1]}" --error-exitcode 97 \
            --report-api-errors no "$pkg/bin/train_mlp" "${TRAIN_FLAGS[@]}" --steps 3
        else
          run_gtest "$name" 1800 "$sanitizer" --tool "${p[1]}" --error-exitcode 97 \
            "$pkg/bin/${p[2]}"
        fi ;;
      bench)
        if [ "${p[1]}" = train_mlp_step ]; then
          train_mlp_step "$name"
          continue
        fi
        if [ "${p[1]}" = gpt_autocast_parity ]; then
          gpt_autocast_parity "$name"
          continue
        fi
        if [ "${p[1]}" = gpu_gpt_bench ]; then
          gpu_gpt_bench "$name"
          continue
        fi
        # The PyTorch peer (fused AdamW + lerp) where the machine's python3 has torch with CUDA;
        # without it the summary says fused_vs_torch=na.
        local torch_args=()
        if (cd "$pkg/root" && timeout 300 python3 "$pkg/torch_fused_adamw.py") \
             > "$logs/torch_fused_adamw.json" 2> "$logs/torch_fused_adamw.log"; then
          torch_args=(--torch-json "$logs/torch_fused_adamw.json")
        else
          echo "  PyTorch peer not run: $(tail -1 "$logs/torch_fused_adamw.log")" | tee -a "$report"
        fi
        run_plain "$name" 600 "$pkg/bin/gpu_optimizer_bench" "${torch_args[@]}"
        grep '^summary:' "$logs/gpu_optimizer_bench.log" 2>/dev/null | sed 's/^/  /' | tee -a "$report" ;;
      peer) peer_check "$name" "${p[1]}" ;;
      kill)
        if [ "$(placement "${p[2]}")" = skip ]; then
          record SKIP "$name" "needs ${p[2]} GPUs (one rank per GPU), the machine has $gpus"
        else
          kill_test "${p[2]}"
        fi ;;
    esac
  done <<< "$plan"
  finish
}

finish() {
  local line="$passed passed, $failed failed, $skipped skipped"
  echo "report: $report"
  echo "$line" | tee -a "$report"
  [ "$failed" = 0 ]
  exit $?
}

# ---------------------------------------------------------------------------------------------

with_cuda_libs=0
if [ "${1:-}" = "--package" ]; then
  [ -n "${2:-}" ] || die "--package needs a folder"
  target=$(realpath -m "$2"); shift 2
  [ "${1:-}" = "--with-cuda-libs" ] && { with_cuda_libs=1; shift; }
  [ $# = 0 ] || die "unexpected arguments after --package: $*"
  # shellcheck source=tools/gpu_package.sh
  . "$here/gpu_package.sh" || die "no $here/gpu_package.sh (--package runs in the repository)"
  package "$target"
  exit 0
fi
if [ -f "$here/MANIFEST" ]; then
  run_checks "$@"
fi
# In the repository without --package: package into a temporary folder and run it there.
tmp=$(mktemp -d /tmp/shardema-gpu-check.XXXXXX)
"$self" --package "$tmp/pkg" || exit 2
exec "$tmp/pkg/gpu_check.sh" "$@"
