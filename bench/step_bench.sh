#!/usr/bin/env bash
# step_bench: one training step of the same MLP, shardema (train_mlp: sharded store, fused AdamW
# + 2 EMA slots, MPI) vs PyTorch FSDP2 (bench/peer/torch_fsdp2_mlp.py: fully_shard per Linear over
# gloo, fused AdamW, 2 EMA copies of the shards via _foreach_lerp_, grad norm, loss all-reduce),
# at several world sizes, interleaved, on the CPU.
#
#   bazel run //bench:step_bench -- [--layers 256,1024,768,256,16] [--batch 48] [--steps 20]
#       [--warmup 5] [--worlds "1 2 4"] [--repeats 3] [--threads 1] [--comm-thread]
#   (or bench/step_bench.sh TRAIN_MLP FSDP2_PEER STEP_ROOFLINE [flags] outside Bazel)
#
# Both sides: the same layer sizes, global batch, GELU (exact erf) after all layers but the last,
# MSE loss, AdamW, 2 EMA copies per step, --threads compute threads per rank (ours
# --compute-threads/--optimizer-threads, torch.set_num_threads) and OMP/MKL threads alike.
# Ranks start with mpirun directly (not tests/mpi_run.sh, which turns off OpenMPI's single-copy
# shared-memory transport), --bind-to none like torch's spawned processes.
# Step time: each rank's median over the timed steps (after a barrier), max over ranks; per world
# size the two sides alternate --repeats times and the medians of those runs are reported: wall
# ms, process CPU ms (all threads), ratio ours/torch, and peak RSS per rank (max over ranks; torch's
# includes its ~0.3-0.7 GB of libraries, "torch_base" is its RSS before the model).
# Roofline (STEP_ROOFLINE, bench/step_roofline.cc): the same GEMM shapes through the same nn
# code, the step's collectives and the optimizer pass, each alone; bound = max(compute, comm) +
# optimizer; step_efficiency = bound / our step time. serial = compute + comm + optimizer, the
# bound when the ranks' own cores move the collectives (shared-memory MPI with a rank per core:
# nothing is left to overlap them with compute); eff_serial = serial / our step time.
# PyTorch: $PYTHON, else bench/peer/.venv/bin/python, created with `python3 -m venv` and
# `pip install torch numpy safetensors` when missing (the test suite never needs it); without a
# working `import torch` the torch columns read na.
# --comm-thread: each repeat also runs ours with train_mlp --comm-thread (a progress thread per
# rank moves the collectives, CommOptions::progress_thread), interleaved with the rest; two more
# columns (ct_ms, eff_ct = bound / ct_ms) and, per world size, summary keys ct_ms_wN,
# ct_efficiency_wN and ct_vs_ours_wN = ct_ms / ours_ms. It can only gain where cores are left
# idle by the ranks.
# Ends with `summary: ours_ms_wN=... torch_ms_wN=... step_ratio_wN=... step_efficiency_wN=...
# ours_rss_mib_wN=... torch_rss_mib_wN=... eff_serial_wN=... [ct_ms_wN=... ...]` for each world
# size.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${BUILD_WORKSPACE_DIRECTORY:-$(cd "$here/.." && pwd)}"  # the source tree (`bazel run` too)
# shellcheck source=bench/bench_lib.sh
. "$root/bench/bench_lib.sh"

train="${1:?usage: step_bench.sh TRAIN_MLP FSDP2_PEER STEP_ROOFLINE [flags]}"
peer="${2:?}"
roofline="${3:?}"
shift 3
layers=256,1024,768,256,16
batch=48
steps=20
warmup=5
worlds="1 2 4"
repeats=3
threads=1
comm_thread=0
while [ $# -gt 0 ]; do
  case "$1" in
    --layers) layers="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --worlds) worlds="$2"; shift 2 ;;
    --repeats) repeats="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --comm-thread) comm_thread=1; shift ;;
    *) echo "step_bench: unknown flag $1" >&2; exit 2 ;;
  esac
done
cores="$(nproc --all)"
export OMP_NUM_THREADS="$threads" MKL_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads"
# A rank waiting in MPI yields its core instead of spinning (as gloo's blocking sockets do):
# this matters with more ranks than cores or on a shared machine.
export OMPI_MCA_mpi_yield_when_idle="${OMPI_MCA_mpi_yield_when_idle:-1}"
mpirun_=(mpirun --oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && mpirun_+=(--allow-run-as-root)

# PyTorch: an explicit $PYTHON, or the peer's own venv (created on first use).
python="$(bench_peer_python "$root/bench/peer")" || python=""
have_torch=0 torch_info=na
if [ -n "$python" ]; then
  torch_info="$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null)" && have_torch=1
fi
[ "$have_torch" = 1 ] || echo "# torch: no working 'import torch'; PyTorch columns read na"

# The last JSON line of a run's output ('{}' when the run failed: its columns read na).
json_line() { sed 's/^\[[0-9,]*\]<stdout>://' | { grep '^{' || echo '{}'; } | tail -1; }

ours() {  # world [train_mlp flags] -> one JSON line
  local w="$1"
  shift
  "${mpirun_[@]}" -np "$w" "$train" --layers "$layers" --batch "$batch" --activation gelu \
    --loss mse --optim adamw --ema 0.999,0.9999 --steps $((steps + warmup)) \
    --bench-warmup "$warmup" --bench-json --log-every 0 --no-comm-checks \
    --compute-threads "$threads" --optimizer-threads "$threads" "$@" 2>/dev/null | json_line || true
}
theirs() {  # world -> one JSON line
  [ "$have_torch" = 1 ] || { echo '{}'; return; }
  "$python" "$peer" --world "$1" --layers "$layers" --batch "$batch" --steps "$steps" \
    --warmup "$warmup" --ema 2 --threads "$threads" --port $((29500 + RANDOM % 2000)) \
    2>/dev/null | json_line || true
}
bound() {  # world -> one JSON line
  "${mpirun_[@]}" -np "$1" "$roofline" --layers "$layers" --batch "$batch" \
    --threads "$threads" --repeats 10 2>/dev/null | json_line || true
}

echo "# step_bench: MLP $layers, global batch $batch, gelu, mse, AdamW, 2 EMA slots; $steps timed steps after $warmup; $repeats interleaved repeats; $threads thread(s) per rank; $cores cores; torch ${torch_info:-na}"
echo "# load before: $(uptime | sed 's/.*load/load/')"
row='%5s %9s %9s %7s %8s %8s %9s %9s %9s %8s %8s %9s %10s %8s'
ct_head=""
[ "$comm_thread" = 1 ] && row+=' %8s %8s' && ct_head="ct_ms eff_ct"
# shellcheck disable=SC2059,SC2086
printf "$row\n" world ours_ms torch_ms ratio ours_cpu torch_cpu ours_rss torch_rss torch_base \
  bound_ms eff serial_ms eff_serial isa $ct_head
summary=""
for w in $worlds; do
  if [ $((batch % w)) -ne 0 ]; then
    echo "step_bench: --batch $batch is not divisible by world $w" >&2
    exit 2
  fi
  om=() tm=() oc=() tc=() orss=() trss=() tbase=() bm=() sm=() cm=()
  isa=na
  for _ in $(seq "$repeats"); do
    j="$(ours "$w")"
    om+=("$(bench_field_max "$j" step_ms)") oc+=("$(bench_field_max "$j" cpu_ms)")
    orss+=("$(bench_field_max "$j" peak_rss_mib)")
    isa="$(bench_field "$j" cpu_isa)"
    if [ "$comm_thread" = 1 ]; then
      j="$(ours "$w" --comm-thread)"
      cm+=("$(bench_field_max "$j" step_ms)")
    fi
    j="$(theirs "$w")"
    tm+=("$(bench_field_max "$j" step_ms)") tc+=("$(bench_field_max "$j" cpu_ms)")
    trss+=("$(bench_field_max "$j" peak_rss_mib)")
    tbase+=("$(bench_field_max "$j" base_rss_mib)")
    j="$(bound "$w")"
    bm+=("$(bench_field_max "$j" bound_ms)") sm+=("$(bench_field_max "$j" serial_ms)")
  done
  o="$(bench_median "${om[@]}")" t="$(bench_median "${tm[@]}")" b="$(bench_median "${bm[@]}")"
  sb="$(bench_median "${sm[@]}")"
  ratio="$(bench_ratio "$o" "$t")" eff="$(bench_ratio "$b" "$o")" effs="$(bench_ratio "$sb" "$o")"
  ors="$(bench_median "${orss[@]}")" trs="$(bench_median "${trss[@]}")"
  ct_cols=()
  if [ "$comm_thread" = 1 ]; then
    c="$(bench_median "${cm[@]}")"
    ct_cols=("$(bench_round "$c")" "$(bench_ratio "$b" "$c")")
  fi
  # shellcheck disable=SC2059
  printf "$row\n" "$w" \
    "$(bench_round "$o")" "$(bench_round "$t")" "$ratio" \
    "$(bench_round "$(bench_median "${oc[@]}")")" "$(bench_round "$(bench_median "${tc[@]}")")" \
    "$(bench_round "$ors")" "$(bench_round "$trs")" \
    "$(bench_round "$(bench_median "${tbase[@]}")")" "$(bench_round "$b")" "$eff" \
    "$(bench_round "$sb")" "$effs" "$isa" "${ct_cols[@]}"
  runs="ours ${om[*]} | torch ${tm[*]} | bound ${bm[*]}"
  echo "#   runs (wall ms): $runs${cm[*]:+ | comm thread ${cm[*]}}"
  summary+=" ours_ms_w${w}=$(bench_round "$o") torch_ms_w${w}=$(bench_round "$t")"
  summary+=" step_ratio_w${w}=${ratio} step_efficiency_w${w}=${eff}"
  summary+=" ours_rss_mib_w${w}=$(bench_round "$ors") torch_rss_mib_w${w}=$(bench_round "$trs")"
  summary+=" eff_serial_w${w}=${effs}"
  if [ "$comm_thread" = 1 ]; then
    summary+=" ct_ms_w${w}=${ct_cols[0]} ct_efficiency_w${w}=${ct_cols[1]}"
    summary+=" ct_vs_ours_w${w}=$(bench_ratio "$c" "$o")"
  fi
done
echo "# load after: $(uptime | sed 's/.*load/load/')"
echo "summary:${summary}"
