#!/usr/bin/env bash
# The real ckpt binary: usage errors, missing and corrupt checkpoints, exit codes and messages.
#   ckpt_cli_test.sh CKPT MAKE_TEST_CHECKPOINT
set -uo pipefail
CKPT=$1
MAKE=$2
TMP=$(mktemp -d "${TEST_TMPDIR:-/tmp}/ckpt_cli.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
source "$(dirname "$0")/cli_expect.sh"

# Usage errors: exit 2, naming what is wrong.
expect 2 "A subcommand is required" -- 
expect 2 "unknown subcommand 'frobnicate'" -- frobnicate
expect 2 "unknown subcommand 'frobnicate'" -- frobnicate --help
expect 2 "DIR is required" -- inspect
expect 2 "--output is required" -- export "$TMP"
expect 2 "--world is required" -- reshard "$TMP" -o "$TMP/x"
expect 2 "DIR2 is required" -- diff "$TMP"
expect 2 "Could not convert: --world = abc" -- reshard "$TMP" --world abc -o "$TMP/x"
expect 2 "--all excludes --step|--step excludes --all" -- verify "$TMP" --all --step 3
expect 2 "not expected: --bogus|--bogus" -- inspect "$TMP" --bogus

# Help: exit 0 everywhere, exit codes documented.
expect 0 "Exit codes: 0 success" -- --help
for sub in inspect verify export reshard; do
  expect 0 "Usage: ckpt $sub .*Exit codes: 0 success" -- "$sub" --help
done
expect 0 "Exit codes: 0 identical, 1 different" -- diff --help

# The global --no-progress after any subcommand's options (posthoc refused it: issue 33 item 5).
expect 3 "not_found: no EMA snapshots" -- posthoc "$TMP/nope" --sigma-rel 0.05 -o "$TMP/p.st" --no-progress
# A failed posthoc leaves no output folder behind (it created one: issue 33 item 5).
expect 2 "sigma_rel 0.5 is outside" -- posthoc "$TMP/nope" --sigma-rel 0.5 -o "$TMP/ph/sub/out.st"
[ ! -e "$TMP/ph" ] || { echo "FAIL: posthoc left $TMP/ph behind"; exit 1; }

# Not found: exit 3 naming the path.
expect 3 "not_found: .*$TMP/nope" -- inspect "$TMP/nope"
expect 3 "not_found: .*$TMP/nope" -- verify "$TMP/nope"
expect 3 "not_found: '$TMP/empty' holds neither manifest.json .* nor 'latest'" -- inspect "$(mkdir -p "$TMP/empty" && echo "$TMP/empty")"

# A real checkpoint (3 ranks, step 42) and one at step 50 in another root.
"$MAKE" "$TMP/a" 3 42 >/dev/null || { echo "FAIL: make_test_checkpoint"; exit 1; }
"$MAKE" "$TMP/c" 2 50 >/dev/null || { echo "FAIL: make_test_checkpoint"; exit 1; }

# Invalid values after parsing: exit 2 naming the flag and the value.
expect 2 "invalid_argument: --max-file-size: '5XB' is not a valid size" -- \
  export "$TMP/a" -o "$TMP/x.safetensors" --max-file-size 5XB
expect 2 "invalid_argument: --max-file-size: '-1' is not a valid size" -- \
  export "$TMP/a" -o "$TMP/x.safetensors" --max-file-size=-1
expect 2 "invalid_argument: --dtype: unknown dtype 'f64'" -- export "$TMP/a" -o "$TMP/x.safetensors" --dtype f64
expect 2 "invalid_argument: reshard: --world must be >= 1, got 0" -- reshard "$TMP/a" --world 0 -o "$TMP/r"
expect 3 "not_found: slot 'ema_0.9' is not in .*slots: params, exp_avg, ema_0.999, ema_bf16" -- \
  export "$TMP/a" --slot ema_0.9 -o "$TMP/x.safetensors"
expect 3 "no committed checkpoint of step 7 .*committed steps: 42" -- inspect "$TMP/a" --step 7
# An EMA slot that never started (its values are the zero fill): exit 1 naming the slot, its
# counters, its start and what to do; nothing written. Its started sibling still exports.
"$MAKE" "$TMP/late" 2 42 --not-started ema_bf16 100 >/dev/null || { echo "FAIL: make_test_checkpoint"; exit 1; }
expect 1 "failed_precondition: export: slot 'ema_bf16' .*never started: its counters say num_updates=0, started_at=-1.*starts after step 100.*Export slot 'params'" -- \
  export "$TMP/late" --slot ema_bf16 -o "$TMP/late_out/x.safetensors"
[ ! -e "$TMP/late_out" ] || { echo "FAIL: a refused export created $TMP/late_out"; failures=$((failures + 1)); }
expect 0 "exported slot 'ema_0.999'" -- export "$TMP/late" --slot ema_0.999 -o "$TMP/late_out/x.safetensors"

# The happy path.
expect 0 "world size  3 ranks" -- inspect "$TMP/a"
expect 0 '"world_size": 3' -- inspect "$TMP/a" --json
expect 0 "OK  $TMP/a/step_00000042  step 42, 3 rank files" -- verify "$TMP/a"
expect 0 "model-00004-of-00004.safetensors" -- \
  export "$TMP/a" --slot ema_0.999 --dtype bf16 -o "$TMP/out/model.safetensors" --max-file-size 0.2KB
[ -f "$TMP/out/model.safetensors.index.json" ] || { echo "FAIL: no index file"; failures=$((failures + 1)); }
expect 0 "from 3 to 2 ranks" -- reshard "$TMP/a" --world 2 -o "$TMP/b"
expect 0 "identical \(world sizes 3 and 2\)" -- diff "$TMP/a" "$TMP/b"
expect 1 "different: step, 4 slots, 2 buffers" -- diff "$TMP/a" "$TMP/c"
# Global flags anywhere on the line, and listed in every subcommand's help.
expect 0 "OK  $TMP/a/step_00000042" -- verify "$TMP/a" --no-progress
expect 0 "OK  $TMP/a/step_00000042" -- --no-progress verify "$TMP/a"
for sub in inspect verify export reshard diff; do
  expect 0 "--no-progress .*global" -- "$sub" --help
done
# diff --step on both sides, --step1/--step2 per side.
"$MAKE" "$TMP/d" 2 42 >/dev/null && "$MAKE" "$TMP/d" 2 50 >/dev/null || { echo "FAIL: make_test_checkpoint"; exit 1; }
expect 0 "--step1" -- diff --help
expect 0 "identical \(world sizes 3 and 2\)" -- diff "$TMP/a" "$TMP/d" --step 42
expect 0 "identical" -- diff "$TMP/c" "$TMP/d" --step2 50
expect 1 "different: step" -- diff "$TMP/d" "$TMP/d" --step1 42
expect 3 "no committed checkpoint of step 7" -- diff "$TMP/a" "$TMP/d" --step 7
# Reshard: never into (or around) its source; world size bounded by the largest unit.
expect 2 "overlaps the source" -- reshard "$TMP/a" --world 1 -o "$TMP/a"
expect 2 "overlaps the source" -- reshard "$TMP/a" --world 1 -o "$TMP/a/inner"
expect 2 "overlaps the source" -- reshard "$TMP/a/step_00000042" --world 1 -o "$TMP"
ln -s "$TMP/a" "$TMP/alias"
expect 2 "overlaps the source" -- reshard "$TMP/a" --world 1 -o "$TMP/alias"
expect 0 "OK  $TMP/a/step_00000042" -- verify "$TMP/a"
expect 2 "exceeds the checkpoint's largest unit" -- reshard "$TMP/a" --world 1000000 -o "$TMP/big"
[ ! -e "$TMP/big/step_00000042" ] || { echo "FAIL: reshard --world 1000000 wrote"; failures=$((failures + 1)); }
# A re-run of a finished reshard verifies and keeps it.
expect 0 "from 3 to 2 ranks" -- reshard "$TMP/a" --world 2 -o "$TMP/b"
# A missing `latest` (a crash before its first update): the newest committed step is found.
mkdir -p "$TMP/nolatest" && cp -r "$TMP/d/step_00000042" "$TMP/d/step_00000050" "$TMP/nolatest/"
expect 0 "is missing; using the newest committed .*step_00000050.*step +50" -- inspect "$TMP/nolatest"

# Not a terminal: no progress bar, stderr stays empty.
err=$("$CKPT" verify "$TMP/a" 2>&1 >/dev/null)
[ -z "$err" ] || { echo "FAIL: stderr not empty without a terminal: $err"; failures=$((failures + 1)); }

# Corruption: a flipped byte in rank 1's params slot, then a truncated rank 2: exit 4 naming the file.
f1="$TMP/b/step_00000042/rank_00001.bin"
printf '\x5a' | dd of="$f1" bs=1 seek=4100 conv=notrunc status=none
expect 4 "data_loss: .*rank_00001.bin.*checksum mismatch" -- verify "$TMP/b"
expect 4 "data_loss: .*rank_00001.bin" -- diff "$TMP/a" "$TMP/b"
expect 4 "data_loss: .*rank_00001.bin" -- export "$TMP/b" -o "$TMP/y.safetensors"
f2="$TMP/a/step_00000042/rank_00002.bin"
truncate -s -100 "$f2"
expect 4 "data_loss: .*rank_00002.bin" -- verify "$TMP/a"
expect 4 "data_loss: .*1 of 1 checkpoints failed" -- verify "$TMP/a" --all

if [ "$failures" != 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"
