#!/usr/bin/env bash
# bench/gpu_gpt_bench.sh without a GPU: its argument errors exit 2, and a CPU dry run of its
# plumbing at a tiny shape (a CPU train_gpt, $1) prints the summary line with ours' figures and
# writes the results file; without torch (PYTHON naming no interpreter) the peer's figures read
# na and the run still passes. Where this machine's python3 imports torch and numpy (Debian's
# python3-torch), the peer runs too, from the source tree the test's files link to, and its
# figures and the ratio are numbers.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
train="$(realpath "${1:?usage: gpu_gpt_bench_test.sh TRAIN_GPT}")"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*" >&2; exit 1; }
driver="$here/gpu_gpt_bench.sh"

# 1. Argument errors.
for args in "--batch 0" "--batch auto --device cpu" "--max-batch 0" "--probe-timeout x" \
  "--steps x" "--warmup -1" "--device tpu" "--attention flash" \
  "--torch-dtype f16" "--n-embd 100 --n-head 12" "--vocab-size 70000" "--ema 0.9;1" \
  "--bogus 1" "--steps" "--train-gpt $tmp/none"; do
  # shellcheck disable=SC2086  # each case is a list of arguments
  out=$("$driver" --train-gpt "$train" $args 2>&1)
  [ $? = 2 ] || fail "'$args' did not exit 2: $out"
  echo "$out" | grep -q '^gpu_gpt_bench: ' || fail "'$args': no message: $out"
done

# 2. The dry run without torch.
tiny=(--device cpu --n-layer 1 --n-head 2 --n-embd 32 --block-size 16 --vocab-size 300
      --batch 2 --steps 2 --warmup 1 --gemm-size 32 --ours-flags "")
out=$(PYTHON="$tmp/no-python" "$driver" --train-gpt "$train" "${tiny[@]}" --json "$tmp/r.json" \
        --build "built here" 2>&1) || fail "dry run: $out"
line=$(echo "$out" | tail -1)
[[ "$line" =~ ^summary:\ ours_ms=[0-9.]+\ torch_ms=na\ ratio=na\ ours_tokens_per_s=[0-9.]+\  ]] ||
  fail "summary: $line"
for kv in mfu_ours=na gemm_tflops=na compile=not_tried batch=2 block_size=16 vocab_padded=320 \
  steps=2 warmup=1 device=cpu ours_attention=cpu torch_attention=sdpa ours_ops_ms=na batch_source=flag \
  ours_top_ops=na ours_lt_matmuls=none; do
  echo "$line" | grep -q " $kv\( \|$\)" || fail "no $kv in: $line"
done
python3 - "$tmp/r.json" <<'PY' || fail "results file: $(cat "$tmp/r.json")"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["name"] == "gpu_gpt_bench" and r["build"] == "built here", r
assert r["summary"]["ours_ms"] > 0 and r["summary"]["torch_ms"] == "na", r["summary"]
assert r["ours"]["batch"] == 2 and r["ours"]["timed_steps"] == 2 and r["torch"] is None, r
assert r["summary"]["ours_tokens_per_s"] > 0 and r["date"].endswith("Z"), r
# The profiled run: one timed step, its own step time.
assert r["ours_profile"]["timed_steps"] == 1 and r["summary"]["ours_profiled_ms"] > 0, r
PY

# 2b. Ours' per-op device times (a stand-in train_gpt printing a GPU run's --bench-json line):
# the table with the GEMMs' TFLOP/s, the "other" rest, and the summary's ops keys.
cat > "$tmp/fake_gpt" <<'G'
#!/bin/sh
echo '{"step_ms": 10.0, "batch": 2, "timed_steps": 2, "attention": "cudnn 9.19.0", "gpu_ops": [{"name": "fwd gemm qkv", "ms": 4.0, "count": 1}, {"name": "bwd attention", "ms": 2.5, "count": 1}, {"name": "cross entropy", "ms": 1.0, "count": 1}], "lt_matmuls": {"none": 0, "bias": 12, "bias_gelu_aux": 4, "dgelu": 4}}'
G
chmod +x "$tmp/fake_gpt"
out=$(PYTHON="$tmp/no-python" "$driver" --train-gpt "$tmp/fake_gpt" "${tiny[@]}" 2>&1) ||
  fail "fake ours: $out"
echo "$out" | grep -qE '^#   fwd gemm qkv +1 x +4\.000 ms +[0-9.]+ TFLOP/s$' || fail "op table: $out"
echo "$out" | grep -qE '^#   cross entropy +1 x +1\.000 ms$' || fail "op table (no FLOPs): $out"
echo "$out" | grep -qE '^#   other +2\.500 ms$' || fail "op table other: $out"
line=$(echo "$out" | tail -1)
for kv in ours_ops_ms=7.5 ours_top_ops=fwd_gemm_qkv:4,bwd_attention:2.5,cross_entropy:1 \
  ours_attention=cudnn_9.19.0 ours_lt_matmuls=bias:12,bias_gelu_aux:4,dgelu:4 ours_profiled_ms=10; do
  echo "$line" | grep -q " $kv\( \|$\)" || fail "no $kv in: $line"
done

# 3. The peer, where python3 imports torch (run from the source tree: the peer imports
# examples/testdata/gpt_torch.py by its path).
py=""
for p in python3 /usr/bin/python3; do
  if "$p" -c 'import torch, numpy' > /dev/null 2>&1; then py="$p"; break; fi
done
if [ -z "$py" ]; then
  echo "PASS (parts 1 and 2; no python3 here imports torch: the peer's dry run not run)"
  exit 0
fi
src="$(dirname "$(readlink -f "$driver")")"
# --attention naive: Debian's torch 1.13 has no F.scaled_dot_product_attention.
out=$(PYTHON="$py" "$src/gpu_gpt_bench.sh" --train-gpt "$train" "${tiny[@]}" --attention naive 2>&1) ||
  fail "dry run with torch: $out"
line=$(echo "$out" | tail -1)
[[ "$line" =~ ^summary:\ ours_ms=[0-9.]+\ torch_ms=[0-9.]+\ ratio=[0-9.]+\  ]] ||
  fail "summary with torch: $line"
echo "PASS"
