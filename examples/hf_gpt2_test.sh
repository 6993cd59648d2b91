#!/usr/bin/env bash
# train_gpt against Hugging Face's GPT2LMHeadModel (transformers), under real mpirun:
#   1. a randomly initialised GPT2LMHeadModel (vocabulary 300: padded to 320 here) saved by
#      save_pretrained is train_gpt's --init (its Conv1D weights transposed on load), on tokens in
#      nanoGPT's train.bin format: our first step's loss equals transformers' on the same batch;
#   2. after 3 steps at 2 ranks, `ckpt export --layout hf` of the live weights loads into
#      GPT2LMHeadModel with strict=True and gives our final eval loss.
# Tolerance: relative 1e-5 (f32 forward on both sides; transformers' logits taken in double for
# the loss). Reported as skipped (a skipped case in $XML_OUTPUT_FILE) without torch and
# transformers ($PYTHON, or python3 on PATH: pip install torch transformers safetensors).
# Args: TRAIN_GPT CKPT MPI_RUN HF_CHECK_PY
set -euo pipefail
train="$1" ckpt="$2" mpi_run="$3" check="$4"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
skip() {
  echo "SKIPPED: $*"
  if [ -n "${XML_OUTPUT_FILE:-}" ]; then
    printf '<testsuites><testsuite name="hf_gpt2_test" tests="1">\n<testcase %s>%s\n</testcase></testsuite></testsuites>\n' \
      'name="MatchesTransformers" status="run" result="skipped"' "<skipped message=\"$*\"/>" \
      > "$XML_OUTPUT_FILE"
  fi
  exit 0
}
py=""
for p in ${PYTHON:-} python3; do
  if "$p" -c "import torch, transformers, safetensors" 2>/dev/null; then py="$p"; break; fi
done
[ -n "$py" ] || skip "no torch + transformers (pip install torch transformers safetensors)"
close() { python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); \
sys.exit(0 if abs(a - b) <= 1e-5 * abs(b) else 1)" "$1" "$2"; }
# The loss of step 1 and the final eval row of `weights` (mpirun's output tags stripped).
strip() { sed -e 's/^\[[0-9,]*\]<std[a-z]*>://' -e 's/^\[rank [0-9/]*\] [A-Z] [0-9:.]* [a-z_.:0-9]*\] //' "$1"; }

"$py" "$check" make "$tmp/hf" || fail "making the transformers model"
args=(--data "$tmp/hf/train.bin" --vocab-size 300 --n-layer 2 --n-head 2 --n-embd 32
      --block-size 16 --batch 8 --data-order sequential --lr 1e-3 --log-every 1
      --init "$tmp/hf/model.safetensors")
"$mpi_run" 2 "$train" "${args[@]}" --steps 3 --ckpt-dir "$tmp/run" > "$tmp/run.out" 2>&1 ||
  fail "train_gpt: $(tail -5 "$tmp/run.out")"
ours=$(strip "$tmp/run.out" | awk '$1 == "step" && $2 == "1/3" {print $4}')
theirs=$("$py" "$check" batch "$tmp/hf" "$tmp/hf/train.bin" 8 16)
[ -n "$ours" ] || fail "no step-1 loss in: $(cat "$tmp/run.out")"
close "$ours" "$theirs" || fail "first loss: train_gpt $ours, transformers $theirs"
echo "first loss: train_gpt $ours, transformers $theirs"

"$ckpt" export "$tmp/run" --slot params --layout hf -o "$tmp/live.safetensors" > /dev/null ||
  fail "ckpt export --layout hf"
ours=$(strip "$tmp/run.out" | awk '$1 == "live" {print $2}')
theirs=$("$py" "$check" eval "$tmp/live.safetensors" "$tmp/hf/train.bin" 16) ||
  fail "the export does not load with strict=True"
[ -n "$ours" ] || fail "no final eval in: $(cat "$tmp/run.out")"
close "$ours" "$theirs" || fail "final eval: train_gpt $ours, transformers $theirs"
echo "final eval: train_gpt $ours, transformers $theirs"
echo "PASS"
