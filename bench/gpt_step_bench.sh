#!/usr/bin/env bash
# gpt_step_bench: one training step of the same GPT and batch through shardema's train_gpt
# (sharded store, unit runner, fused AdamW + EMA slots, MPI) and through PyTorch's FSDP2 over
# gloo on the CPU (bench/peer/torch_fsdp2_gpt.py; DDP when fully_shard does not run), at several
# world sizes, in the same run.
#
#   bench/gpt_step_bench.sh [--n-layer 4] [--n-head 4] [--n-embd 128] [--block-size 64]
#       [--batch 16] [--steps 10] [--warmup 3] [--worlds "1 2 4"] [--repeats 3] [--threads 1]
#       [--train-gpt PATH]
#   (or `bazel run //bench:gpt_step_bench -- [flags]`)
#
# Both sides per step: forward + backward of the rank's B/W sequences of T tokens, the loss
# all-reduced, the global gradient norm computed and read, AdamW (nanoGPT's decay groups, betas
# 0.9,0.95), two EMA slots (decays 0.999, 0.9999) updated; --threads compute threads per rank
# (ours --compute-threads, torch.set_num_threads and OMP_NUM_THREADS). Step time: each rank's step
# wall time after a barrier, median over the timed steps, max over ranks. The two sides alternate
# (ours, torch, for each world, for each repeat); the median over the repeats is reported.
# Our ranks run under `mpirun` directly (--oversubscribe; --allow-run-as-root as root) with
# OMPI_MCA_mpi_yield_when_idle=1 (unless set): a waiting rank yields its core, as gloo's blocking
# sockets do. Tokens: ours read a file of random bytes, the peer draws random tokens; the work is
# the same. State bytes per rank: master + moments + EMA shards (ours: the store's
# StateBytesPerRank; torch: the FSDP2 shards of parameters, AdamW moments and EMA copies).
# The peer runs in bench/peer/.venv (created with `pip install torch numpy safetensors` when
# missing); when that fails the torch columns read "na" and the ratios are skipped.
# Prints a table and ends with
#   summary: step_ratio_w1=... step_ratio_w2=... step_ratio_w4=... state_bytes_per_rank=...
# (ours / torch per world; state_bytes_per_rank: ours at the largest world; more key=value pairs
# follow: the milliseconds and torch's state bytes per world).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${BUILD_WORKSPACE_DIRECTORY:-$(cd "$here/.." && pwd)}"
# shellcheck source=bench/bench_lib.sh
. "$here/bench_lib.sh"

n_layer=4 n_head=4 n_embd=128 block=64 batch=16 steps=10 warmup=3 worlds="1 2 4" repeats=3
threads=1 train=""
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
    *) echo "gpt_step_bench: unknown flag $1" >&2; exit 2 ;;
  esac
done
for w in $worlds; do
  if [ $((batch % w)) -ne 0 ]; then
    echo "gpt_step_bench: --batch $batch is not divisible by world $w" >&2
    exit 2
  fi
done
if [ -z "$train" ]; then
  (cd "$root" && bazel build //examples:train_gpt >&2)
  train="$root/bazel-bin/examples/train_gpt"
fi
train="$(realpath "$train" 2>/dev/null || echo "$train")"
[ -x "$train" ] || { echo "gpt_step_bench: no train_gpt at $train" >&2; exit 2; }
cores="$(nproc --all)"
export OMP_NUM_THREADS="$threads" MKL_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads"

peer_python=""
if peer_python="$(bench_peer_python "$root/bench/peer")"; then :; else peer_python=""; fi
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
    --compute-threads "$threads" --optimizer-threads "$threads" --log-every 0 --eval-batch 64 \
    2>/dev/null |
    grep '"step_ms"' | tail -1 || true
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
declare -A ours_ms torch_ms ours_state torch_state wrap
for _ in $(seq "$repeats"); do
  for w in $worlds; do
    j="$(ours "$w")"
    ours_ms[$w]+=" $(bench_round "$(bench_field "$j" step_ms)")"
    ours_state[$w]="$(bench_field "$j" state_bytes_per_rank)"
    j="$(torch_peer "$w")"
    torch_ms[$w]+=" $(bench_round "$(bench_field "$j" step_ms)")"
    torch_state[$w]="$(bench_field "$j" state_bytes_per_rank)"
    wrap[$w]="$(bench_field "$j" wrap)"
  done
done

printf '%6s %10s %10s %7s %14s %14s %6s\n' world ours_ms torch_ms ratio ours_state_B torch_state_B torch
summary=""
last_state=na
for w in $worlds; do
  # shellcheck disable=SC2086
  o="$(bench_median ${ours_ms[$w]})"
  # shellcheck disable=SC2086
  t="$(bench_median ${torch_ms[$w]})"
  ratio="$(bench_ratio "$o" "$t")"
  o="$(bench_round "$o")" t="$(bench_round "$t")"
  printf '%6s %10s %10s %7s %14s %14s %6s\n' "$w" "$o" "$t" "$ratio" "${ours_state[$w]}" \
    "${torch_state[$w]}" "${wrap[$w]}"
  echo "#   runs (ms): ours${ours_ms[$w]} | torch${torch_ms[$w]}"
  summary+=" step_ratio_w${w}=${ratio}"
  last_state="${ours_state[$w]}"
done
details=""
for w in $worlds; do
  # shellcheck disable=SC2086
  details+=" ours_ms_w${w}=$(bench_round "$(bench_median ${ours_ms[$w]})")"
  # shellcheck disable=SC2086
  details+=" torch_ms_w${w}=$(bench_round "$(bench_median ${torch_ms[$w]})")"
  details+=" torch_state_bytes_per_rank_w${w}=${torch_state[$w]}"
done
echo "summary:${summary} state_bytes_per_rank=${last_state}${details}"
