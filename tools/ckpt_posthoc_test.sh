#!/usr/bin/env bash
# The real ckpt binary's posthoc subcommand: outputs, --print-coefficients, byte-identical results
# under mpirun at 1-3 ranks, and bad inputs with their exit codes and messages.
#   ckpt_posthoc_test.sh CKPT MAKE_TEST_SNAPSHOTS MPI_RUN
set -uo pipefail
CKPT=$1
MAKE=$2
MPI_RUN=$3
TMP=$(mktemp -d "${TEST_TMPDIR:-/tmp}/ckpt_posthoc.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
source "$(dirname "$0")/cli_expect.sh"

ROOT=$TMP/run
# Snapshots of a run resumed at other world sizes: 1, 2, 3, then 2 ranks.
"$MAKE" "$ROOT" 100:1 200:2 300:3 400:2 || { echo "FAIL: make_test_snapshots"; exit 1; }

expect 0 "coefficient.*ema_pf_0.05.*post-hoc EMA sigma_rel 0.07 .*at step 400 from 8 snapshot profiles" -- \
  posthoc "$ROOT" --sigma-rel 0.07 -o "$TMP/one.safetensors" --print-coefficients
[ -s "$TMP/one.safetensors" ] || fail "one.safetensors not written"
expect 0 "sigma_rel 0.03 .*sigma_rel 0.15 .*sigma_rel 0.25 .*-sigma_rel_0.25.safetensors" -- \
  posthoc "$ROOT" --sigma-rel 0.03,0.15,0.25 -o "$TMP/multi/m.safetensors" --dtype bf16
for s in 0.03 0.15 0.25; do
  [ -s "$TMP/multi/m-sigma_rel_$s.safetensors" ] || fail "m-sigma_rel_$s.safetensors not written"
done
expect 0 "at step 200 from 4 snapshot profiles" -- \
  posthoc "$ROOT" --sigma-rel 0.07 --step-max 250 -o "$TMP/early.safetensors"
expect 0 "model-00001-of-0000[2-9].safetensors.*model.safetensors.index.json" -- \
  posthoc "$ROOT" --sigma-rel 0.07 -o "$TMP/split/model.safetensors" --max-file-size 300B

# Distributed: the same bytes at every world size (each rank writes its own shard ranges).
for n in 1 2 3; do
  out=$(MPI_TEST_TIMEOUT=120 "$MPI_RUN" "$n" "$CKPT" posthoc "$ROOT" --sigma-rel 0.07 \
        -o "$TMP/np$n/one.safetensors" 2>&1) || { fail "mpirun -np $n ckpt posthoc:"; echo "$out" | head -20; }
  if cmp -s "$TMP/one.safetensors" "$TMP/np$n/one.safetensors"; then
    echo "ok: mpirun -np $n ckpt posthoc is byte-identical to one process"
  else
    fail "mpirun -np $n ckpt posthoc differs from one process"
  fi
  out=$(MPI_TEST_TIMEOUT=120 "$MPI_RUN" "$n" "$CKPT" posthoc "$ROOT" --sigma-rel 0.07 \
        -o "$TMP/np$n/split/model.safetensors" --max-file-size 300B 2>&1) || fail "mpirun -np $n split"
  for f in "$TMP"/split/*; do
    cmp -s "$f" "$TMP/np$n/split/$(basename "$f")" || fail "mpirun -np $n: $(basename "$f") differs"
  done
done

# A sigma_rel far from the snapshots': written, with a warning naming the fit error (it was silent).
expect 0 "warning: sigma_rel 0.001: profile fit error [0-9.]* is above 0.10" -- \
  posthoc "$ROOT" --sigma-rel 0.001 -o "$TMP/far.safetensors"
# Bad inputs.
expect 2 "--sigma-rel is required" -- posthoc "$ROOT" -o "$TMP/x.safetensors"
expect 2 "'abc' in '0.1,abc' is not a number" -- posthoc "$ROOT" --sigma-rel 0.1,abc -o "$TMP/x.safetensors"
expect 2 "sigma_rel 0.3 is outside \(0, 0.288" -- posthoc "$ROOT" --sigma-rel 0.3 -o "$TMP/x.safetensors"
expect 2 "sigma_rel 0 is outside" -- posthoc "$ROOT" --sigma-rel 0 -o "$TMP/x.safetensors"
expect 2 "given twice" -- posthoc "$ROOT" --sigma-rel 0.1,0.1 -o "$TMP/x.safetensors"
expect 2 "--dtype" -- posthoc "$ROOT" --sigma-rel 0.1 --dtype f64 -o "$TMP/x.safetensors"
mkdir -p "$TMP/empty"
expect 3 "no EMA snapshots: '.*empty/ema_snapshots' does not exist" -- \
  posthoc "$TMP/empty" --sigma-rel 0.1 -o "$TMP/x.safetensors"
expect 3 "no snapshot at or before step 50 \(snapshot steps: 100, 200, 300, 400\)" -- \
  posthoc "$ROOT" --sigma-rel 0.1 --step-max 50 -o "$TMP/x.safetensors"
# A flipped byte in one snapshot's rank file: data loss (exit 4) naming the file, nothing written.
victim="$ROOT/ema_snapshots/step_00000300/rank_00002.bin"
printf '\x7f' | dd of="$victim" bs=1 seek=4100 conv=notrunc status=none
expect 4 "rank_00002.bin.*checksum mismatch" -- posthoc "$ROOT" --sigma-rel 0.07 -o "$TMP/bad.safetensors"
[ ! -e "$TMP/bad.safetensors" ] || fail "bad.safetensors written despite the corrupt snapshot"
out=$(MPI_TEST_TIMEOUT=120 "$MPI_RUN" 2 "$CKPT" posthoc "$ROOT" --sigma-rel 0.07 -o "$TMP/bad2.safetensors" 2>&1)
rc=$?
if [ "$rc" = 4 ] && grep -q "rank_00002.bin" <<<"$out"; then
  echo "ok: mpirun -np 2 on a corrupt snapshot -> 4"
else
  fail "mpirun -np 2 on a corrupt snapshot exited $rc:"; echo "$out" | head
fi
# A corrupt manifest is found by the listing already.
echo garbage >> "$ROOT/ema_snapshots/step_00000100/manifest.json"
expect 4 "step_00000100/manifest.json" -- posthoc "$ROOT" --sigma-rel 0.07 -o "$TMP/bad.safetensors"

if [ "$failures" -gt 0 ]; then echo "$failures failure(s)"; exit 1; fi
echo "all passed"
