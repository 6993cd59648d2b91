#!/usr/bin/env bash
# End to end under real mpirun (examples/BUILD :e2e_test):
#   1. a straight 4-rank run of 40 steps (the reference trajectory);
#   2. 4 ranks, 20 steps, --async-save every 5 steps; 2b. 3 ranks with and without --comm-thread
#      (the progress thread): bit-identical rank files;
#   3. --resume on 3 ranks (the loader reshards) to 40 steps;
#   4. export an EMA slot with the checkpoint export API, read it back and compare it bit for bit
#      with the slot's shards in the rank files;
#   5. the resumed loss continues the straight run's trajectory (not reset);
#   6. an exported model loads back with --init and evaluates to the checkpoint's live loss;
#   7. errors: a corrupt latest checkpoint with --resume (exit 4, names the file) and an --init
#      whose shapes do not match --layers (exit 2, names the tensor, expected vs found), and
#      --ema 1 (exit 2: a constant decay must be in (0, 1));
#   8. --device cuda on 1 rank: trains where a CUDA build sees a GPU, else exits 1 (unavailable)
#      saying why.
# Usage: e2e_test.sh TRAIN_MLP E2E_CHECK MPI_RUN_SH
set -euo pipefail
train="$1"
check="$2"
mpi_run="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
args=(--layers 12,24,24,6 --activation gelu --batch 24 --lr 1e-2 --clip-norm 1.0
      --ema 0.99,0.999 --ema-sigma-rel 0.1 --seed 11 --synthetic-rows 96 --log-every 10)

fail() { echo "e2e_test: FAIL: $*" >&2; exit 1; }
expect_info() {  # CKPT "step=S world=W"
  local got
  got="$("$check" ckpt-info "$1")"
  [ "$got" = "$2" ] || fail "checkpoint $1: expected '$2', found '$got'"
}
final_live() { awk '$1 == "live" { print $2 }' "$1"; }

echo "== 1. straight reference: 4 ranks, 40 steps"
"$mpi_run" 4 "$train" "${args[@]}" --steps 40 --ckpt-dir "$tmp/straight" > "$tmp/straight.out"
expect_info "$tmp/straight" "step=40 world=4"

echo "== 2. 4 ranks, 20 steps, async saves every 5"
"$mpi_run" 4 "$train" "${args[@]}" --steps 20 --ckpt-dir "$tmp/run" --async-save --save-every 5 \
  --keep 2 > "$tmp/first.out"
expect_info "$tmp/run" "step=20 world=4"
[ -d "$tmp/run/step_00000015" ] || fail "the async save of step 15 was not kept (--keep 2)"
[ ! -d "$tmp/run/step_00000010" ] || fail "step 10 should have been dropped (--keep 2)"

echo "== 2b. --comm-thread: the same bits on 3 ranks (sizes that 3 does not divide)"
for m in off on; do
  extra=()
  [ "$m" = on ] && extra=(--comm-thread)
  "$mpi_run" 3 "$train" "${args[@]}" --steps 20 --ckpt-dir "$tmp/thread_$m" --async-save \
    --save-every 5 "${extra[@]}" > "$tmp/thread_$m.out"
done
for r in 0 1 2; do
  f="step_00000020/rank_0000$r.bin"
  cmp -s "$tmp/thread_off/$f" "$tmp/thread_on/$f" || fail "--comm-thread changed $f"
done

echo "== 3. resume on 3 ranks (reshard) to 40 steps"
"$mpi_run" 3 "$train" "${args[@]}" --steps 40 --ckpt-dir "$tmp/run" --resume --async-save \
  --save-every 10 > "$tmp/resumed.out" 2> "$tmp/resumed.err"
grep -q "resumed from .*step_00000020 at step 20 (saved on 4 rank(s), resharded)" "$tmp/resumed.err" \
  || fail "no resharded resume in the log: $(cat "$tmp/resumed.err")"
expect_info "$tmp/run" "step=40 world=3"

echo "== 4. export ema_0.999 and compare with the shards"
"$check" export-compare "$tmp/run" ema_0.999 "$tmp/ema_0.999.safetensors"

echo "== 5. the loss continues after the resume"
"$check" metrics-compare "$tmp/straight/metrics.jsonl" "$tmp/run/metrics.jsonl" 20 1e-4
want="$(final_live "$tmp/straight.out")"
got="$(final_live "$tmp/resumed.out")"
awk -v a="$want" -v b="$got" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-4 * a) }' \
  || fail "final live eval loss $got after the resume vs $want straight"

echo "== 6. an exported model loads back with --init"
"$check" export-compare "$tmp/run" params "$tmp/params.safetensors" > /dev/null
"$mpi_run" 2 "$train" "${args[@]}" --steps 0 --init "$tmp/params.safetensors" > "$tmp/init.out"
[ "$(final_live "$tmp/init.out")" = "$got" ] \
  || fail "eval of the exported params $(final_live "$tmp/init.out") vs the checkpoint's $got"

echo "== 7a. corrupt latest checkpoint -> exit 4 naming the file"
cp -r "$tmp/run" "$tmp/corrupt"
victim="$tmp/corrupt/step_00000040/rank_00001.bin"
printf '\xde\xad\xbe\xef' | dd of="$victim" bs=1 seek=4200 conv=notrunc status=none
set +e
"$mpi_run" 2 "$train" "${args[@]}" --steps 50 --ckpt-dir "$tmp/corrupt" --resume \
  > "$tmp/corrupt.out" 2> "$tmp/corrupt.err"
rc=$?
set -e
[ "$rc" = 4 ] || fail "corrupt checkpoint: exit code $rc, expected 4 (data loss); $(cat "$tmp/corrupt.err")"
grep -q "data_loss.*rank_00001.bin" "$tmp/corrupt.err" || fail "message does not name the file: $(cat "$tmp/corrupt.err")"
[ ! -d "$tmp/corrupt/step_00000050" ] || fail "a corrupt resume must not train on"

echo "== 7b. --init with shapes that do not match --layers -> exit 2 naming the tensor"
set +e
"$mpi_run" 2 "$train" --layers 12,24,20,6 --steps 1 --batch 24 --init "$tmp/params.safetensors" \
  > "$tmp/init_bad.out" 2> "$tmp/init_bad.err"
rc=$?
set -e
[ "$rc" = 2 ] || fail "bad --init: exit code $rc, expected 2; $(cat "$tmp/init_bad.err")"
grep -q "layers.1.weight': expected shape \[20, 24\], found \[24, 24\]" "$tmp/init_bad.err" \
  || fail "message does not name the tensor: $(cat "$tmp/init_bad.err")"

echo "== 7c. --ema 1 (a constant decay outside (0, 1)) -> exit 2 naming the slot and range"
set +e
"$mpi_run" 1 "$train" "${args[@]}" --steps 1 --ema 1 > "$tmp/ema1.out" 2> "$tmp/ema1.err"
rc=$?
set -e
[ "$rc" = 2 ] || fail "--ema 1: exit code $rc, expected 2; $(cat "$tmp/ema1.err")"
grep -q "ema_1': decay 1 is outside (0, 1)" "$tmp/ema1.err" \
  || fail "--ema 1: the message does not give the slot and range: $(cat "$tmp/ema1.err")"

echo "== 8. --device cuda: trains on a GPU, or exits 1 (unavailable) saying why"
set +e
"$mpi_run" 1 "$train" "${args[@]}" --steps 2 --device cuda > "$tmp/cuda.out" 2> "$tmp/cuda.err"
rc=$?
set -e
if [ "$rc" = 0 ]; then
  grep -q "final eval (step 2" "$tmp/cuda.out" || fail "--device cuda: no final eval: $(cat "$tmp/cuda.out")"
else
  [ "$rc" = 1 ] || fail "--device cuda: exit code $rc, expected 0 or 1; $(cat "$tmp/cuda.err")"
  grep -q "unavailable.*--device cuda.*\(built without CUDA\|no CUDA device is visible\)" "$tmp/cuda.err" \
    || fail "--device cuda: the message does not say why: $(cat "$tmp/cuda.err")"
fi

echo "e2e_test: PASS"
