#!/usr/bin/env bash
# step_bench: one training step of the same MLP, shardema (train_mlp --bench-json: sharded store,
# fused AdamW + EMA slots, MPI) vs PyTorch DDP over gloo (bench/peer/torch_ddp_mlp.py: full
# replicas, AdamW foreach, EMA foreach lerp), at several world sizes, in the same run.
#
#   bazel run //bench:step_bench -- [--layers 1024,1024,1024,1024,1024] [--batch 64]
#       [--activation gelu] [--steps 30] [--warmup 5] [--worlds "2 4"] [--repeats 3]
#   (or bench/step_bench.sh TRAIN_MLP TORCH_PEER MPI_RUN_SH [flags] outside Bazel)
#
# Both sides: AdamW, 2 EMA slots updated every step, the same layer sizes, global batch and
# activation (all layers but the last), one compute thread per rank (Eigen is single-threaded in
# this build; torch.set_num_threads(1) and OMP_NUM_THREADS=1). Step time = median over the timed
# steps of each rank's step wall time (after a barrier), max over ranks; each side runs --repeats
# times alternately and the median of those is reported. Our ranks run with
# OMPI_MCA_mpi_yield_when_idle=1 (unless set): a rank waiting in MPI yields its core instead of
# spinning, as gloo's blocking sockets do — which matters with more ranks than cores, or on a
# machine shared with other work.
# State memory per rank = parameters + optimizer moments + EMA copies (ours: the store's
# StateBytesPerRank, a 1/W shard each; torch: full replicas).
# Prints a table and ends with `summary: step_ratio_w2=... step_ratio_w4=... state_mem_ratio=...`
# (ours/torch; state_mem_ratio at the largest world size, per world as state_mem_ratio_wN).
# Without a working `import torch` the torch columns read "na" and the ratios are skipped.
set -euo pipefail

train="${1:?usage: step_bench.sh TRAIN_MLP TORCH_PEER MPI_RUN_SH [flags]}"
peer="${2:?}"
mpi_run="${3:?}"
shift 3
layers=1024,1024,1024,1024,1024
batch=64
activation=gelu
steps=30
warmup=5
worlds="2 4"
repeats=3
while [ $# -gt 0 ]; do
  case "$1" in
    --layers) layers="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --activation) activation="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --worlds) worlds="$2"; shift 2 ;;
    --repeats) repeats="$2"; shift 2 ;;
    *) echo "step_bench: unknown flag $1" >&2; exit 2 ;;
  esac
done
python="${PYTHON:-/usr/bin/python3}"
cores="$(nproc --all)"  # before OMP_NUM_THREADS, which nproc honours
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

# One JSON field of a one-line JSON object.
field() { "$python" -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2" 2>/dev/null || echo na; }
median() { printf '%s\n' "$@" | grep -v '^na$' | sort -g | awk '{a[NR]=$1} END {if (NR==0) print "na"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

have_torch=1
if ! "$python" -c 'import torch' 2>/dev/null; then
  have_torch=0
  echo "# torch: skipped ('$python -c \"import torch\"' failed); PyTorch columns read na"
fi

ours() {  # world -> one JSON line
  local w="$1"
  OMPI_MCA_mpi_yield_when_idle="${OMPI_MCA_mpi_yield_when_idle:-1}" "$mpi_run" "$w" "$train" --layers "$layers" --batch "$batch" \
    --activation "$activation" --optim adamw --ema 0.999,0.9999 --steps $((steps + warmup)) \
    --bench-warmup "$warmup" --bench-json --log-every 0 --no-comm-checks 2>/dev/null \
    | sed 's/^\[[0-9,]*\]<stdout>://' | grep '"step_ms"' | tail -1
}

torch_peer() {  # world -> one JSON line
  local w="$1"
  [ "$have_torch" = 1 ] || { echo '{}'; return; }
  "$python" "$peer" --world "$w" --layers "$layers" --batch "$batch" --steps "$steps" \
    --warmup "$warmup" --ema 2 --threads 1 --port $((29500 + RANDOM % 2000)) 2>/dev/null | tail -1
}

echo "# step_bench: MLP $layers, global batch $batch, $activation, AdamW, 2 EMA slots; $steps timed steps after $warmup; $repeats repeats; 1 thread per rank; $cores cores"
[ "$activation" = gelu ] || echo "# note: the PyTorch peer always uses GELU"
printf '%7s %10s %10s %8s %18s %18s %9s\n' world ours_ms torch_ms ratio ours_state_B/rank torch_state_B/rank mem_ratio
summary=""
last_mem="na"
for w in $worlds; do
  if [ $((batch % w)) -ne 0 ]; then
    echo "step_bench: --batch $batch is not divisible by world $w" >&2
    exit 2
  fi
  ours_ms=() torch_ms=()
  ours_state=na torch_state=na
  for _ in $(seq "$repeats"); do
    j="$(ours "$w")"
    ours_ms+=("$(field "$j" step_ms)")
    ours_state="$(field "$j" state_bytes_per_rank)"
    j="$(torch_peer "$w")"
    torch_ms+=("$(field "$j" step_ms)")
    torch_state="$(field "$j" state_bytes_per_rank)"
  done
  o="$(median "${ours_ms[@]}")"
  t="$(median "${torch_ms[@]}")"
  ratio=na mem=na
  if [ "$t" != na ] && [ "$o" != na ]; then ratio="$(awk -v a="$o" -v b="$t" 'BEGIN{printf "%.3f", a/b}')"; fi
  if [ "$torch_state" != na ] && [ "$ours_state" != na ]; then mem="$(awk -v a="$ours_state" -v b="$torch_state" 'BEGIN{printf "%.3f", a/b}')"; fi
  o2="$( [ "$o" = na ] && echo na || printf '%.2f' "$o")"
  t2="$( [ "$t" = na ] && echo na || printf '%.2f' "$t")"
  printf '%7s %10s %10s %8s %18s %18s %9s\n' "$w" "$o2" "$t2" "$ratio" "$ours_state" "$torch_state" "$mem"
  echo "#   runs (ms): ours $(printf '%.1f ' "${ours_ms[@]}")| torch $(printf '%s ' "${torch_ms[@]}" | awk '{for(i=1;i<=NF;i++) printf ($i=="na"?"na ":"%.1f "), $i}')"
  summary+=" step_ratio_w${w}=${ratio} ours_ms_w${w}=${o2} torch_ms_w${w}=${t2} state_mem_ratio_w${w}=${mem}"
  last_mem="$mem"
done
echo "summary:${summary} state_mem_ratio=${last_mem}"
