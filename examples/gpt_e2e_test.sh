#!/bin/bash
# train_gpt end to end under real mpirun: 2 ranks with async saves, EMA and --sample -> resume on
# 3 ranks (reshard) -> export the EMA slot with the ckpt CLI (lm_head.weight written as the tied
# wte) -> flag / data / device errors with their exit codes.
# Usage: gpt_e2e_test.sh TRAIN_GPT CKPT MPI_RUN_SH DATA_TXT
set -euo pipefail
train="$1"
ckpt="$2"
mpi_run="$3"
data="$4"
tmp="${TEST_TMPDIR:-$(mktemp -d)}/gpt_e2e"
rm -rf "$tmp"
mkdir -p "$tmp"
fail() { echo "gpt_e2e_test: FAIL: $*" >&2; exit 1; }
args=(--data "$data" --n-layer 2 --n-head 2 --n-embd 16 --block-size 8 --batch 6 --lr 3e-3
      --ema 0.9 --seed 3 --log-every 5)

echo "== 1. 2 ranks, async saves, samples"
"$mpi_run" 2 "$train" "${args[@]}" --steps 20 --ckpt-dir "$tmp/run" --async-save --save-every 10 \
  --sample 40 > "$tmp/run.out"
grep -q "final eval (step 20" "$tmp/run.out" || fail "no final eval: $(cat "$tmp/run.out")"
grep -q "ema_0.9  *[0-9]" "$tmp/run.out" || fail "no EMA row in the eval table: $(cat "$tmp/run.out")"
grep -q -- "---- sample (live) ----" "$tmp/run.out" || fail "no live sample"
grep -q -- "---- sample (ema_0.9) ----" "$tmp/run.out" || fail "no EMA sample"
[ "$(grep -c '"loss"' "$tmp/run/metrics.jsonl")" = 20 ] || fail "metrics.jsonl: not 20 step lines"

echo "== 2. resume on 3 ranks (reshard) to step 30"
"$mpi_run" 3 "$train" "${args[@]}" --steps 30 --ckpt-dir "$tmp/run" --resume > "$tmp/resume.out" \
  2> "$tmp/resume.err"
grep -q "resumed from .*step_00000020 at step 20 (saved on 2 rank(s), resharded)" "$tmp/resume.err" \
  || fail "no reshard resume: $(cat "$tmp/resume.err")"
grep -q "final eval (step 30" "$tmp/resume.out" || fail "resume did not train to 30"
[ "$(grep -c '"loss"' "$tmp/run/metrics.jsonl")" = 30 ] || fail "metrics.jsonl: not 30 step lines"

echo "== 3. export the EMA slot: lm_head.weight is there (tied to wte)"
"$ckpt" export "$tmp/run" --slot ema_0.9 -o "$tmp/ema.safetensors" > /dev/null
head -c 4000 "$tmp/ema.safetensors" | grep -aq '"lm_head.weight"' || fail "no lm_head.weight in the export"
head -c 4000 "$tmp/ema.safetensors" | grep -aq '"transformer.wte.weight"' || fail "no wte in the export"

echo "== 4. errors: bad flags -> 2, missing data -> 3, --device cuda -> 1"
set +e
"$mpi_run" 1 "$train" "${args[@]}" --n-embd 30 --n-head 4 > /dev/null 2> "$tmp/flag.err"
rc=$?
[ "$rc" = 2 ] || fail "bad shape: exit $rc, expected 2"
grep -q "n-embd 30 is not divisible by --n-head 4" "$tmp/flag.err" || fail "$(cat "$tmp/flag.err")"
"$mpi_run" 2 "$train" "${args[@]}" --data "$tmp/missing.txt" > /dev/null 2> "$tmp/data.err"
rc=$?
[ "$rc" = 3 ] || fail "missing --data: exit $rc, expected 3; $(cat "$tmp/data.err")"
grep -q "missing.txt" "$tmp/data.err" || fail "the message does not name the file: $(cat "$tmp/data.err")"
"$mpi_run" 1 "$train" "${args[@]}" --steps 1 --device cuda > /dev/null 2> "$tmp/cuda.err"
rc=$?
set -e
[ "$rc" = 1 ] || fail "--device cuda: exit $rc, expected 1; $(cat "$tmp/cuda.err")"

echo "gpt_e2e_test: PASS"
