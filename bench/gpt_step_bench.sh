#!/usr/bin/env bash
# gpt_step_bench: one training step of the same GPT and batch through shardema's train_gpt
# (sharded store, unit runner, fused AdamW + EMA slots, MPI) and through PyTorch's FSDP2 over
# gloo on the CPU (bench/peer/torch_fsdp2_gpt.py; DDP when fully_shard does not run), at several
# world sizes, in the same run.
#
#   bench/gpt_step_bench.sh [--n-layer 4] [--n-head 4] [--n-embd 128] [--block-size 64]
#       [--batch 16] [--steps 10] [--warmup 3] [--worlds "1 2 4"] [--repeats 3] [--threads 1]
#       [--train-gpt PATH] [--roofline PATH]
#   (or `bazel run //bench:gpt_step_bench -- [flags]`)
#
# Both sides per step: forward + backward of the rank's B/W sequences of T tokens, the loss
# all-reduced, the global gradient norm computed and read, AdamW (nanoGPT's decay groups, betas
# 0.9,0.95), two EMA slots (decays 0.999, 0.9999) updated; --threads compute threads per rank
# (ours --compute-threads, torch.set_num_threads and OMP_NUM_THREADS). Step time: each rank's step
# wall time after a barrier, median over the timed steps, max over ranks. The two sides alternate
# (ours, torch, roofline, for each world, for each repeat); the median over the repeats is
# reported: wall ms, process CPU ms, and peak RSS per rank (max over ranks; torch's includes its
# libraries). Roofline (examples/gpt_roofline.cc, bench/roofline.h): the model's forward + backward
# alone, the collectives its W-rank step makes alone, the optimizer pass alone; bound =
# max(compute, comm) + optimizer, step_efficiency = bound / our step time; serial = their sum,
# eff_serial = serial / our step time (the bound when the ranks' own cores move the collectives).
# Our ranks run under `mpirun` directly (--oversubscribe; --allow-run-as-root as root) with
# OMPI_MCA_mpi_yield_when_idle=1 (unless set): a waiting rank yields its core, as gloo's blocking
# sockets do. Tokens: ours read a file of random bytes, the peer draws random tokens; the work is
# the same. Ours evaluates once after the run (not timed) in chunks of the rank's training batch
# (--eval-batch B/W), so that its peak RSS is the training's, as the peer's (which has no
# evaluation) is. State bytes per rank: master + moments + EMA shards (ours: the store's
# StateBytesPerRank; torch: the FSDP2 shards of parameters, AdamW moments and EMA copies).
# The peer runs in $PYTHON when set, else in bench/peer/.venv (created with `pip install torch
# numpy safetensors` when missing); when that fails the torch columns read "na" and the ratios
# are skipped.
# Prints a table and ends with
#   summary: step_ratio_w1=... step_ratio_w2=... step_ratio_w4=... state_bytes_per_rank=...
# (ours / torch per world; state_bytes_per_rank: ours at the largest world; more key=value pairs
# follow per world: the milliseconds, step_efficiency, eff_serial, peak RSS per rank of both and
# torch's state bytes).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${BUILD_WORKSPACE_DIRECTORY:-$(cd "$here/.." && pwd)}"  # the source tree (`bazel run` too)
# shellcheck source=bench/bench_lib.sh
. "$root/bench/bench_lib.sh"

n_layer=4 n_head=4 n_embd=128 block=64 batch=16 steps=10 warmup=3 worlds="1 2 4" repeats=3
threads=1 train="" roofline=""
while [ $# -gt 0 ]; do
  case "$1" in
    --n-layer) n_layer="$2"; shift 2 ;;
    --n-head) n_head="$2"; shift 2 ;;
    --n-embd) n_embd="$2"; shift 2 ;;
    --block-size) block="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --worlds) worlds="$2"; shift 2 ;;
    --repeats) repeats="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --train-gpt) train="$2"; shift 2 ;;
    --roofline) roofline="$2"; shift 2 ;;
    *) echo "gpt_step_bench: unknown flag $1" >&2; exit 2 ;;
  esac
done
for w in $worlds; do
  if [ $((batch % w)) -ne 0 ]; then
    echo "gpt_step_bench: --batch $batch is not divisible by world $w" >&2
    exit 2
  fi
done
if [ -z "$train" ] || [ -z "$roofline" ]; then
  (cd "$root" && bazel build //examples:train_gpt //examples:gpt_roofline >&2)
  train="${train:-$root/bazel-bin/examples/train_gpt}"
  roofline="${roofline:-$root/bazel-bin/examples/gpt_roofline}"
fi
train="$(realpath "$train" 2>/dev/null || echo "$train")"
roofline="$(realpath "$roofline" 2>/dev/null || echo "$roofline")"
[ -x "$train" ] || { echo "gpt_step_bench: no train_gpt at $train" >&2; exit 2; }
[ -x "$roofline" ] || { echo "gpt_step_bench: no gpt_roofline at $roofline" >&2; exit 2; }
cores="$(nproc --all)"
export OMP_NUM_THREADS="$threads" MKL_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads"

peer_python="$(bench_peer_python "$root/bench/peer")" || peer_python=""
mpirun_flags=(--oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && mpirun_flags+=(--allow-run-as-root)

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
head -c 32768 /dev/urandom > "$work/tokens.bin"

ours() {  # world -> one JSON line
  OMPI_MCA_mpi_yield_when_idle="${OMPI_MCA_mpi_yield_when_idle:-1}" \
    mpirun "${mpirun_flags[@]}" -np "$1" "$train" --data "$work/tokens.bin" \
    --n-layer "$n_layer" --n-head "$n_head" --n-embd "$n_embd" --block-size "$block" \
    --batch "$batch" --steps $((steps + warmup)) --bench-warmup "$warmup" --bench-json \
    --optim adamw --betas 0.9,0.95 --weight-decay 0.1 --lr 3e-4 --ema 0.999,0.9999 \
    --compute-threads "$threads" --optimizer-threads "$threads" --log-every 0 \
    --eval-batch $((batch / $1)) \
    2>/dev/null |
    grep '"step_ms"' | tail -1 || true
}

bound() {  # world -> one JSON line
  OMPI_MCA_mpi_yield_when_idle="${OMPI_MCA_mpi_yield_when_idle:-1}" \
    mpirun "${mpirun_flags[@]}" -np "$1" "$roofline" --n-layer "$n_layer" --n-head "$n_head" \
    --n-embd "$n_embd" --block-size "$block" --batch "$batch" --threads "$threads" \
    --repeats 10 2>/dev/null | grep '"bound_ms"' | tail -1 || true
}

torch_peer() {  # world -> one JSON line
  [ -n "$peer_python" ] || { echo '{}'; return; }
  "$peer_python" "$root/bench/peer/torch_fsdp2_gpt.py" --world "$1" --n-layer "$n_layer" \
    --n-head "$n_head" --n-embd "$n_embd" --block-size "$block" --batch "$batch" \
    --steps "$steps" --warmup "$warmup" --ema 2 --threads "$threads" \
    --port $((29500 + RANDOM % 2000)) 2>/dev/null | tail -1 || echo '{}'
}

echo "# gpt_step_bench: GPT n_layer $n_layer n_head $n_head n_embd $n_embd block $block," \
  "global batch $batch x $block tokens; AdamW + 2 EMA slots; $steps timed steps after $warmup;" \
  "$repeats interleaved repeats; $threads thread(s) per rank; $cores cores"
declare -A ours_ms torch_ms ours_cpu torch_cpu ours_rss torch_rss bound_ms serial_ms
declare -A ours_state torch_state wrap
for _ in $(seq "$repeats"); do
  for w in $worlds; do
    j="$(ours "$w")"
    ours_ms[$w]+=" $(bench_round "$(bench_field "$j" step_ms)")"
    ours_cpu[$w]+=" $(bench_round "$(bench_field "$j" cpu_ms)")"
    ours_rss[$w]+=" $(bench_round "$(bench_field_max "$j" peak_rss_mib)")"
    ours_state[$w]="$(bench_field "$j" state_bytes_per_rank)"
    j="$(torch_peer "$w")"
    torch_ms[$w]+=" $(bench_round "$(bench_field "$j" step_ms)")"
    torch_cpu[$w]+=" $(bench_round "$(bench_field "$j" cpu_ms)")"
    torch_rss[$w]+=" $(bench_round "$(bench_field_max "$j" peak_rss_mib)")"
    torch_state[$w]="$(bench_field "$j" state_bytes_per_rank)"
    wrap[$w]="$(bench_field "$j" wrap)"
    j="$(bound "$w")"
    bound_ms[$w]+=" $(bench_field "$j" bound_ms)"
    serial_ms[$w]+=" $(bench_field "$j" serial_ms)"
  done
done

printf '%6s %9s %9s %7s %8s %9s %9s %9s %8s %7s %9s %10s %12s %12s %6s\n' world ours_ms \
  torch_ms ratio ours_cpu torch_cpu ours_rss torch_rss bound_ms eff serial_ms eff_serial \
  ours_state_B torch_state_B torch
summary=""
last_state=na
details=""
for w in $worlds; do
  # shellcheck disable=SC2086
  o="$(bench_median ${ours_ms[$w]})" t="$(bench_median ${torch_ms[$w]})"
  # shellcheck disable=SC2086
  b="$(bench_median ${bound_ms[$w]})" sb="$(bench_median ${serial_ms[$w]})"
  # shellcheck disable=SC2086
  orss="$(bench_median ${ours_rss[$w]})" trss="$(bench_median ${torch_rss[$w]})"
  ratio="$(bench_ratio "$o" "$t")" eff="$(bench_ratio "$b" "$o")" effs="$(bench_ratio "$sb" "$o")"
  # shellcheck disable=SC2086
  printf '%6s %9s %9s %7s %8s %9s %9s %9s %8s %7s %9s %10s %12s %12s %6s\n' "$w" \
    "$(bench_round "$o")" "$(bench_round "$t")" "$ratio" \
    "$(bench_round "$(bench_median ${ours_cpu[$w]})")" \
    "$(bench_round "$(bench_median ${torch_cpu[$w]})")" "$(bench_round "$orss")" \
    "$(bench_round "$trss")" "$(bench_round "$b")" "$eff" "$(bench_round "$sb")" "$effs" \
    "${ours_state[$w]}" "${torch_state[$w]}" "${wrap[$w]}"
  echo "#   runs (ms): ours${ours_ms[$w]} | torch${torch_ms[$w]} | bound${bound_ms[$w]}"
  summary+=" step_ratio_w${w}=${ratio}"
  last_state="${ours_state[$w]}"
  details+=" ours_ms_w${w}=$(bench_round "$o") torch_ms_w${w}=$(bench_round "$t")"
  details+=" step_efficiency_w${w}=${eff} eff_serial_w${w}=${effs}"
  details+=" ours_rss_mib_w${w}=$(bench_round "$orss") torch_rss_mib_w${w}=$(bench_round "$trss")"
  details+=" torch_state_bytes_per_rank_w${w}=${torch_state[$w]}"
done
echo "summary:${summary} state_bytes_per_rank=${last_state}${details}"
