#!/usr/bin/env bash
# Checkpoints written before the training library (train/) moved out of examples/ (format 1, by
# train_mlp and train_gpt at c8d53cf, 2 ranks, step 4: testdata/v1_checkpoints) resume with
# today's binaries on 3 ranks (resharded) without --override-hparams, and end where a checkpoint
# written by today's binaries with the same flags ends: the same final eval table, bit for bit.
# Args: TRAIN_MLP TRAIN_GPT MPI_RUN CHECKPOINTS_DIR
set -euo pipefail
mlp="$1" gpt="$2" mpi_run="$3" old="$4"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# The flags the checkpoints were written with (the GPT's --data path as recorded: relative).
mlp_args=(--layers 6,9,3 --batch 12 --ema 0.9 --log-every 0 --seed 3)
gpt_args=(--data examples/testdata/gpt_parity_data.txt --n-layer 1 --n-head 2 --n-embd 16
          --block-size 8 --batch 6 --ema 0.9 --log-every 0)
table() { sed -e 's/^\[[0-9,]*\]<std[a-z]*>://' "$1" | grep -E '^(live|ema_0.9) '; }
for m in mlp gpt; do
  bin=$mlp; args=("${mlp_args[@]}")
  [ $m = gpt ] && bin=$gpt && args=("${gpt_args[@]}")
  cp -rL "$old/$m" "$tmp/old_$m"  # -L: real files, not links into the source tree
  "$mpi_run" 3 "$bin" "${args[@]}" --steps 8 --ckpt-dir "$tmp/old_$m" --resume \
    > "$tmp/old_$m.out" 2>&1 || fail "$m: resuming the v1 checkpoint: $(tail -5 "$tmp/old_$m.out")"
  grep -q "resumed from .* at step 4 (saved on 2 rank(s), resharded)" "$tmp/old_$m.out" ||
    fail "$m: no resharded resume at step 4"
  "$mpi_run" 2 "$bin" "${args[@]}" --steps 4 --ckpt-dir "$tmp/new_$m" > /dev/null 2>&1 ||
    fail "$m: today's 2-rank run"
  "$mpi_run" 3 "$bin" "${args[@]}" --steps 8 --ckpt-dir "$tmp/new_$m" --resume \
    > "$tmp/new_$m.out" 2>&1 || fail "$m: resuming today's checkpoint"
  [ -n "$(table "$tmp/old_$m.out")" ] || fail "$m: no final eval table"
  [ "$(table "$tmp/old_$m.out")" = "$(table "$tmp/new_$m.out")" ] ||
    fail "$m: final eval differs: v1 checkpoint $(table "$tmp/old_$m.out" | tr '\n' ' ') vs today's $(table "$tmp/new_$m.out" | tr '\n' ' ')"
  echo "$m: $(table "$tmp/old_$m.out" | tr '\n' ' ')"
done
echo PASS
