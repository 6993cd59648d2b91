#!/usr/bin/env bash
# bench/gpt_autocast_parity.sh without a GPU: its argument errors exit 2, and its CPU dry run at
# a tiny shape (a CPU train_gpt, $1; the PyTorch twin on the CPU, 50 steps) passes with its f32
# curves in agreement far inside --tol-f32 (the init, data order, optimizer and LR schedule
# replicated) and writes its results file; a run whose train_gpt drops the weight decay
# (--ours-flags "--weight-decay 0": the last value wins) fails it (exit 1, pass=0). Needs an
# interpreter that imports torch and numpy ($PYTHON, python3, or Debian's /usr/bin/python3 with
# python3-torch); without one it is reported as skipped (a skipped case in $XML_OUTPUT_FILE).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
train="$(realpath "${1:?usage: gpt_autocast_parity_test.sh TRAIN_GPT}")"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*" >&2; exit 1; }
skip() {
  echo "SKIPPED: $*"
  if [ -n "${XML_OUTPUT_FILE:-}" ]; then
    printf '<testsuites><testsuite name="gpt_autocast_parity_test" tests="1">\n<testcase %s>%s\n</testcase></testsuite></testsuites>\n' \
      'name="CpuDryRun" status="run" result="skipped"' "<skipped message=\"$*\"/>" \
      > "$XML_OUTPUT_FILE"
  fi
  exit 0
}
driver="$here/gpt_autocast_parity.sh"

# 1. Argument errors (checked before torch is looked for).
for args in "--steps 0" "--batch x" "--device tpu" "--n-embd 100 --n-head 12" \
  "--vocab-size 70000" "--tol-f32 abc" "--warmup-steps 60" "--bogus 1" "--steps" \
  "--train-gpt $tmp/none"; do
  # shellcheck disable=SC2086  # each case is a list of arguments
  out=$("$driver" --train-gpt "$train" $args 2>&1)
  [ $? = 2 ] || fail "'$args' did not exit 2: $out"
  echo "$out" | grep -q '^gpt_autocast_parity: ' || fail "'$args': no message: $out"
done
out=$(PYTHON="$tmp/no-python" "$driver" --train-gpt "$train" --device cpu 2>&1)
[ $? = 3 ] || fail "no torch: not exit 3: $out"

py=""
for p in ${PYTHON:-} python3 /usr/bin/python3; do
  if "$p" -c 'import torch, numpy' > /dev/null 2>&1; then py="$p"; break; fi
done
[ -n "$py" ] || skip "no python3 here imports torch and numpy (python3-torch)"

# 2. The CPU dry run.
tiny=(--device cpu --n-layer 2 --n-head 2 --n-embd 64 --block-size 64 --vocab-size 300
      --batch 4 --steps 50)
out=$(PYTHON="$py" "$driver" --train-gpt "$train" "${tiny[@]}" --json "$tmp/r.json" \
        --build "built here" 2>&1) || fail "dry run: $out"
line=$(echo "$out" | tail -1)
[[ "$line" =~ ^summary:\ max_rel_diff_bf16=[0-9.e+-]+\ max_rel_diff_f32=[0-9.e+-]+\  ]] ||
  fail "summary: $line"
for kv in steps=50 device=cpu pass=1 tol_bf16=0.02 tol_f32=0.001; do
  echo "$line" | grep -q " $kv\( \|$\)" || fail "no $kv in: $line"
done
"$py" - "$tmp/r.json" <<'PY' || fail "results file: $(cat "$tmp/r.json")"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["name"] == "gpt_autocast_parity" and r["build"] == "built here", r
s = r["summary"]
assert s["pass"] == 1 and s["steps"] == 50, s
# The same f32 arithmetic on both sides: agreement to f32 rounding, far inside the tolerance.
assert s["max_rel_diff_f32"] < 1e-5, s
assert s["max_rel_diff_bf16"] <= 0.02 and s["ours_bf16_vs_f32"] > 0, s
assert all(len(v) == 50 for v in r["losses"].values()), r["losses"]
assert r["torch"]["vocab_padded"] == 320 and r["date"].endswith("Z"), r["torch"]
PY

# 3. A replication error the bf16 tolerance alone would miss: the f32 comparison fails.
out=$(PYTHON="$py" "$driver" --train-gpt "$train" "${tiny[@]}" --ours-flags "--weight-decay 0" \
        2>&1)
[ $? = 1 ] || fail "no weight decay: not exit 1: $out"
echo "$out" | grep -q '^# f32 within tol_f32: NO$' || fail "no weight decay: $out"
echo "$out" | tail -1 | grep -q ' pass=0$' || fail "no weight decay: $(echo "$out" | tail -1)"
echo "PASS"
