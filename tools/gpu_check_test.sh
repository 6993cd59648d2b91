#!/usr/bin/env bash
# tools/gpu_check.sh's run mode on a fake package: skipped checks are never passes, a machine
# without a GPU skips everything and exits 0, a failing test makes the script exit 1, --only
# selects checks, a sanitizer run with nothing to check is a SKIP (after a pass only), and the
# benchmark checks put their summary lines (and the GPT benchmark and the GPT autocast parity
# check their results files) in the report.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*" >&2; exit 1; }

make_package() {  # $1: folder
  local p="$1"
  rm -rf "$p" && mkdir -p "$p/bin" "$p/root"
  cp "$here/gpu_check.sh" "$here/test_results.sh" "$here/shared_gpu_rank.sh" "$p/"
  echo ': # no runtime in the fake package' > "$p/env.sh"
  echo "built by gpu_check_test" > "$p/BUILD_INFO"
  # A gtest-like binary: writes its XML report (--gtest_output=xml:FILE) as $MODE says.
  cat > "$p/bin/fake_test" <<'B'
#!/usr/bin/env bash
xml="${1#--gtest_output=xml:}"
case "$(basename "$0")" in
  ran_test) r=completed ;;
  skip_test) r=skipped ;;
  bad_test) echo '<testsuites><testcase name="a" status="run" result="completed"><failure message="x"/></testcase></testsuites>' > "$xml"; exit 1 ;;
esac
echo "<testsuites><testcase name=\"a\" status=\"run\" result=\"$r\"><skipped message=\"no CUDA device visible\"/></testcase></testsuites>" > "$xml"
B
  chmod +x "$p/bin/fake_test"
  for t in ran_test skip_test; do cp "$p/bin/fake_test" "$p/bin/$t"; done
  printf '#!/bin/sh\necho "summary: fused_vs_copy=1.0"\n' > "$p/bin/gpu_optimizer_bench"
  chmod +x "$p/bin/gpu_optimizer_bench"
  printf 'single ran_test //x:ran_test\nsingle skip_test //x:skip_test\n' > "$p/MANIFEST"
  printf 'tool gpu_optimizer_bench //bench:gpu_optimizer_bench\n' >> "$p/MANIFEST"
}

# 1. No GPU: every check skipped, none run, exit 0, a clear line.
make_package "$tmp/a"
out=$(GPU_CHECK_GPUS=0 "$tmp/a/gpu_check.sh" --report "$tmp/a_report.txt" 2>&1)
rc=$?
[ "$rc" = 0 ] || fail "no GPU: exit $rc: $out"
echo "$out" | grep -q '^no GPU: ' || fail "no 'no GPU' line: $out"
# 2 tests + 3 sanitizer tools x (2 tests + train_mlp) + 4 benches + 2 peers + 2 kills = 19
# checks.
[ "$(echo "$out" | tail -1)" = "0 passed, 0 failed, 19 skipped" ] || fail "no GPU counts: $out"
[ "$(tail -1 "$tmp/a_report.txt")" = "0 passed, 0 failed, 19 skipped" ] || fail "report"

# 2. One GPU: a test with a skipped case is SKIP, not PASS; no sanitizer, no second GPU (and no
# shared-GPU runs: case 7).
export GPU_CHECK_SHARED=0
out=$(GPU_CHECK_GPUS=1 GPU_CHECK_SANITIZER=none "$tmp/a/gpu_check.sh" --report "$tmp/b.txt" 2>&1)
rc=$?
[ "$rc" = 0 ] || fail "one GPU: exit $rc: $out"
echo "$out" | grep -qE '^PASS ran_test +1 cases' || fail "ran_test: $out"
echo "$out" | grep -qE '^SKIP skip_test +1 of 1 cases skipped: no CUDA device visible' || fail "skip: $out"
echo "$out" | grep -qE '^SKIP train_mlp np=2 .*needs 2 GPUs' || fail "kill test: $out"
echo "$out" | grep -qE '^PASS gpu_optimizer_bench' || fail "bench: $out"
echo "$out" | grep -qE '^SKIP torch_fsdp2_mlp.py, 2 ranks .* +not in this package' || fail "peer: $out"
grep -q '^  summary: fused_vs_copy=1.0' "$tmp/b.txt" || fail "bench summary not in the report"
echo "$out" | grep -qE '^SKIP gpu_gpt_bench +not in this package' || fail "gpt bench: $out"
echo "$out" | grep -qE '^SKIP gpt_autocast_parity +not in this package' || fail "parity: $out"
[ "$(echo "$out" | tail -1)" = "2 passed, 0 failed, 17 skipped" ] || fail "one GPU counts: $out"

# 2b. The train_mlp step check: the --bench-json step time goes into the report, with the
# PyTorch peer's keys "unavailable" when the package has no peer or its interpreter no torch with
# CUDA (exit 3), its step time and our speedup when it runs; a failing peer FAILs the check.
cat > "$tmp/a/bin/train_mlp" <<'B'
#!/bin/sh
echo '{"device":"cuda","step_ms":2.5,"peak_device_used_mib":[700.25]}'
B
chmod +x "$tmp/a/bin/train_mlp"
step_summary='^  summary: train_mlp_cuda_step_ms=2.5 timing=cuda_events layers=1024,4096,4096,1024 batch=256 ranks=1 '
out=$(GPU_CHECK_GPUS=1 GPU_CHECK_SANITIZER=none "$tmp/a/gpu_check.sh" --report "$tmp/b2.txt" \
        --only '^train_mlp_step$' 2>&1) || fail "train_mlp_step: $out"
grep -q "${step_summary}torch_ms=unavailable ours_speedup_vs_torch=unavailable$" "$tmp/b2.txt" ||
  fail "step summary: $(cat "$tmp/b2.txt")"
echo "$out" | grep -qE '^PASS train_mlp_step +log: .*PyTorch peer unavailable: not in this package' ||
  fail "step without a peer: $out"
mkdir -p "$tmp/a/peer/bench/peer"
echo '# a fake peer: the fake interpreter below answers for it' > "$tmp/a/peer/bench/peer/torch_mlp_gpu.py"
cat > "$tmp/fakepy" <<'B'
#!/bin/sh
case "$1 $*" in
  */peer/bench/peer/torch_mlp_gpu.py*" --device cuda --layers 1024,4096,4096,1024 --activation relu --loss cross_entropy --batch 256 "*) ;;
  *) echo "bad args: $*" >&2; exit 1 ;;
esac
[ "${PEER_EXIT:-0}" = 3 ] && { echo "torch_mlp_gpu: torch 2.5 sees no CUDA device" >&2; exit 3; }
[ "${PEER_EXIT:-0}" = 0 ] || { echo "peer crashed" >&2; exit "$PEER_EXIT"; }
echo '{"step_ms": 5.0, "step_ms_mean": 5.1, "peak_device_used_mib": 900.5, "max_memory_allocated_mib": 300.5, "adamw": "fused"}'
B
chmod +x "$tmp/fakepy"
out=$(GPU_CHECK_GPUS=1 GPU_CHECK_SANITIZER=none GPU_CHECK_PYTHON="$tmp/fakepy" "$tmp/a/gpu_check.sh" \
        --report "$tmp/b2p.txt" --only '^train_mlp_step$' 2>&1) || fail "step with the peer: $out"
grep -q "${step_summary}torch_ms=5.0 ours_speedup_vs_torch=2.0000 ours_device_mib=700.25 torch_device_mib=900.5 torch_allocated_mib=300.5 torch_adamw=fused$" \
  "$tmp/b2p.txt" || fail "step summary with the peer: $(cat "$tmp/b2p.txt")"
out=$(PEER_EXIT=3 GPU_CHECK_GPUS=1 GPU_CHECK_SANITIZER=none GPU_CHECK_PYTHON="$tmp/fakepy" \
        "$tmp/a/gpu_check.sh" --report "$tmp/b2q.txt" --only '^train_mlp_step$' 2>&1) ||
  fail "step, peer without CUDA: $out"
echo "$out" | grep -qE '^PASS train_mlp_step +log: .*PyTorch peer unavailable: .*sees no CUDA device' ||
  fail "step, peer without CUDA: $out"
grep -q "${step_summary}torch_ms=unavailable ours_speedup_vs_torch=unavailable$" "$tmp/b2q.txt" ||
  fail "step summary, peer without CUDA: $(cat "$tmp/b2q.txt")"
out=$(PEER_EXIT=1 GPU_CHECK_GPUS=1 GPU_CHECK_SANITIZER=none GPU_CHECK_PYTHON="$tmp/fakepy" \
        "$tmp/a/gpu_check.sh" --report "$tmp/b2r.txt" --only '^train_mlp_step$' 2>&1)
[ $? = 1 ] || fail "step, failing peer: exit: $out"
echo "$out" | grep -qE '^FAIL train_mlp_step +the PyTorch peer failed \(exit 1\)' ||
  fail "step, failing peer: $out"
rm "$tmp/a/bin/train_mlp" "$tmp/a/peer/bench/peer/torch_mlp_gpu.py"

# 2d. The GPU GPT benchmark: the driver gets the package's train_gpt, the peer's interpreter and
# its flags; its summary line and its results file go into the report; a failing driver FAILs.
mkdir -p "$tmp/a/peer/bench"
printf '#!/bin/sh\n' > "$tmp/a/bin/train_gpt"
chmod +x "$tmp/a/bin/train_gpt"
cat > "$tmp/a/peer/bench/gpu_gpt_bench.sh" <<'B'
json=""
while [ $# -gt 0 ]; do
  case "$1" in --json) json="$2" ;; --train-gpt) gpt="$2" ;; --batch) batch="$2" ;; esac
  shift 2
done
[ -x "$gpt" ] && [ "$batch" = auto ] && [ "$PYTHON" = fakepython ] || { echo "bad args" >&2; exit 1; }
echo '{"name": "gpu_gpt_bench", "summary": {"ours_ms": 90}}' > "$json"
echo "summary: ours_ms=90 torch_ms=45 ratio=0.5"
exit "${GPT_BENCH_EXIT:-0}"
B
out=$(GPU_CHECK_GPUS=1 GPU_CHECK_SANITIZER=none GPU_CHECK_PYTHON=fakepython "$tmp/a/gpu_check.sh" \
        --report "$tmp/b4.txt" --only '^gpu_gpt_bench$' 2>&1) || fail "gpu_gpt_bench: $out"
echo "$out" | grep -qE '^PASS gpu_gpt_bench +log: ' || fail "gpu_gpt_bench: $out"
grep -q '^  summary: ours_ms=90 torch_ms=45 ratio=0.5$' "$tmp/b4.txt" || fail "gpt summary: $(cat "$tmp/b4.txt")"
res=$(sed -n 's/^  results: //p' "$tmp/b4.txt")
python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["summary"]["ours_ms"] == 90' "$res" ||
  fail "gpt results file: $(cat "$tmp/b4.txt")"
out=$(GPT_BENCH_EXIT=1 GPU_CHECK_GPUS=1 GPU_CHECK_SANITIZER=none GPU_CHECK_PYTHON=fakepython \
        "$tmp/a/gpu_check.sh" --report "$tmp/b5.txt" --only '^gpu_gpt_bench$' 2>&1)
[ $? = 1 ] || fail "gpt bench failing: exit: $out"
echo "$out" | grep -qE '^FAIL gpu_gpt_bench +exit 1' || fail "gpt bench failing: $out"

# 2e. The GPT autocast parity check: the driver gets the package's train_gpt, the peer's
# interpreter, --device cuda and its time limits; its summary line and its results file go into
# the report; exit 1 FAILs, exit 3 (no torch) SKIPs.
cat > "$tmp/a/peer/bench/gpt_autocast_parity.sh" <<'B'
json=""
while [ $# -gt 0 ]; do
  case "$1" in --json) json="$2" ;; --train-gpt) gpt="$2" ;; --device) dev="$2" ;;
    --ours-timeout) ot="$2" ;; esac
  shift 2
done
[ -x "$gpt" ] && [ "$dev" = cuda ] && [ "$ot" = 25 ] && [ "$PYTHON" = fakepython ] ||
  { echo "bad args" >&2; exit 1; }
[ "${PARITY_EXIT:-0}" = 3 ] && exit 3
echo '{"name": "gpt_autocast_parity", "summary": {"max_rel_diff_bf16": 0.004}}' > "$json"
echo "summary: max_rel_diff_bf16=4.0e-03 max_rel_diff_f32=2.0e-06 steps=60 pass=1"
exit "${PARITY_EXIT:-0}"
B
for rc in 1 3 0; do  # the passing run last: its results file stays in the shared logs folder
  out=$(PARITY_EXIT=$rc GPU_CHECK_GPUS=1 GPU_CHECK_SANITIZER=none GPU_CHECK_PYTHON=fakepython \
          "$tmp/a/gpu_check.sh" --report "$tmp/b6_$rc.txt" --only '^gpt_autocast_parity$' 2>&1)
  got=$?
  case "$rc" in
    0) want='^PASS gpt_autocast_parity +max_rel_diff_bf16=4.0e-03 max_rel_diff_f32=2.0e-06; log: '
       [ "$got" = 0 ] || fail "parity: exit $got: $out" ;;
    1) want='^FAIL gpt_autocast_parity +exit 1; log: '
       [ "$got" = 1 ] || fail "parity failing: exit $got: $out" ;;
    3) want='^SKIP gpt_autocast_parity +fakepython cannot import torch'
       [ "$got" = 0 ] || fail "parity without torch: exit $got: $out" ;;
  esac
  echo "$out" | grep -qE "$want" || fail "parity exit $rc: $out"
done
grep -q '^  summary: max_rel_diff_bf16=4.0e-03 max_rel_diff_f32=2.0e-06 steps=60 pass=1$' \
  "$tmp/b6_0.txt" || fail "parity summary: $(cat "$tmp/b6_0.txt")"
res=$(sed -n 's/^  results: //p' "$tmp/b6_0.txt")
python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["name"] == "gpt_autocast_parity"' \
  "$res" || fail "parity results file: $(cat "$tmp/b6_0.txt")"
rm -r "$tmp/a/bin/train_gpt" "$tmp/a/peer"

# 2c. --check-timeout: a test binary that hangs FAILs after it, naming the case it was in, and the
# checks after it still run.
printf '#!/bin/sh\necho "[ RUN      ] Suite.Hangs"\nexec sleep 30\n' > "$tmp/a/bin/hang_test"
chmod +x "$tmp/a/bin/hang_test"
echo 'single hang_test //x:hang_test' >> "$tmp/a/MANIFEST"
out=$(GPU_CHECK_GPUS=1 GPU_CHECK_SANITIZER=none "$tmp/a/gpu_check.sh" --report "$tmp/b3.txt" \
        --check-timeout 1 --only '^(hang_test|ran_test)$' 2>&1)
[ $? = 1 ] || fail "hang: exit: $out"
echo "$out" | grep -qE '^FAIL hang_test +exit 124 \(timeout after 1 s, in Suite.Hangs\)' ||
  fail "hang: $out"
[ "$(echo "$out" | tail -1)" = "1 passed, 1 failed, 0 skipped" ] || fail "hang counts: $out"
sed -i '/hang_test/d' "$tmp/a/MANIFEST"

# 3. A failing test: FAIL, exit 1.
cp "$tmp/a/bin/fake_test" "$tmp/a/bin/bad_test"
echo 'single bad_test //x:bad_test' >> "$tmp/a/MANIFEST"
out=$(GPU_CHECK_GPUS=1 GPU_CHECK_SANITIZER=none "$tmp/a/gpu_check.sh" --report "$tmp/c.txt" 2>&1)
rc=$?
[ "$rc" = 1 ] || fail "failing test: exit $rc"
echo "$out" | grep -qE '^FAIL bad_test +exit 1' || fail "bad_test: $out"
[ "$(echo "$out" | tail -1)" = "2 passed, 1 failed, 20 skipped" ] || fail "failing counts: $out"
# 4. --only: just the matching checks; a pattern that matches none is an error.
out=$(GPU_CHECK_GPUS=1 GPU_CHECK_SANITIZER=none "$tmp/a/gpu_check.sh" --report "$tmp/d.txt" \
        --only '^(ran_test|bad_test)$' 2>&1)
rc=$?
[ "$rc" = 1 ] || fail "--only: exit $rc: $out"
[ "$(echo "$out" | tail -1)" = "1 passed, 1 failed, 0 skipped" ] || fail "--only counts: $out"
out=$(GPU_CHECK_GPUS=1 "$tmp/a/gpu_check.sh" --report "$tmp/e.txt" --only 'no_such_check' 2>&1)
[ $? = 2 ] && echo "$out" | grep -q "matches no check" || fail "--only with no match: $out"

# 5. A sanitizer run of a binary that makes no CUDA call (compute-sanitizer exits 255 after it
# passed): SKIP with the reason; the same message after failed cases stays a FAIL.
cat > "$tmp/sanitizer" <<'B'
#!/usr/bin/env bash
while [[ "$1" == --* ]]; do shift 2; done
"$@"
echo "========= Error: Target application terminated before first instrumented API call"
exit 255
B
chmod +x "$tmp/sanitizer"
out=$(GPU_CHECK_GPUS=1 GPU_CHECK_SANITIZER="$tmp/sanitizer" "$tmp/a/gpu_check.sh" \
        --report "$tmp/f.txt" --only '^compute-sanitizer memcheck (ran|bad)_test$' 2>&1)
echo "$out" | grep -qE '^SKIP compute-sanitizer memcheck ran_test +the binary passed without a CUDA call' ||
  fail "sanitizer, no CUDA call: $out"
echo "$out" | grep -qE '^FAIL compute-sanitizer memcheck bad_test' || fail "sanitizer, failed: $out"
[ "$(echo "$out" | tail -1)" = "0 passed, 1 failed, 1 skipped" ] || fail "sanitizer counts: $out"
# 6. The FSDP2 step peers: a peer that prints its JSON line is a PASS naming its wrap, one that
# fails is a FAIL; without torch both are SKIP.
mkdir -p "$tmp/a/peer/bench/peer"
printf 'echo progress\necho %s\n' "'{\"world\": 2, \"step_ms\": 1.5, \"wrap\": \"fsdp2\"}'" \
  > "$tmp/a/peer/bench/peer/torch_fsdp2_mlp.py"
printf 'echo Traceback >&2\nexit 1\n' > "$tmp/a/peer/bench/peer/torch_fsdp2_gpt.py"
printf '#!/usr/bin/env bash\n[ "$1" = -c ] && exit 0\nexec bash "$@"\n' > "$tmp/fakepy"
chmod +x "$tmp/fakepy"
out=$(GPU_CHECK_GPUS=1 GPU_CHECK_PYTHON="$tmp/fakepy" "$tmp/a/gpu_check.sh" \
        --report "$tmp/g.txt" --only 'torch_fsdp2' 2>&1)
rc=$?
[ "$rc" = 1 ] || fail "peers: exit $rc: $out"
echo "$out" | grep -qE '^PASS torch_fsdp2_mlp.py, 2 ranks .* +wrap fsdp2$' || fail "peer pass: $out"
echo "$out" | grep -qE '^FAIL torch_fsdp2_gpt.py, 2 ranks .* +exit 1, no JSON line' ||
  fail "peer fail: $out"
[ "$(echo "$out" | tail -1)" = "1 passed, 1 failed, 0 skipped" ] || fail "peer counts: $out"
out=$(GPU_CHECK_GPUS=1 GPU_CHECK_PYTHON=none "$tmp/a/gpu_check.sh" --report "$tmp/h.txt" \
        --only 'torch_fsdp2' 2>&1)
[ "$(echo "$out" | tail -1)" = "0 passed, 0 failed, 2 skipped" ] || fail "peers without torch: $out"

# 7. More ranks than GPUs: a multi-rank test runs on the shared GPU through shared_gpu_rank.sh
# (its own NCCL_HOSTID per rank, loopback sockets, CUDA_VISIBLE_DEVICES = local rank mod GPUs),
# reported as such, up to 4 ranks; 8 ranks SKIP. A stand-in mpirun runs rank 1 of the job.
unset GPU_CHECK_SHARED
mkdir -p "$tmp/fakempi"
cat > "$tmp/fakempi/mpirun" <<'B'
#!/usr/bin/env bash
while [ "$1" != -np ]; do shift; done
shift 2
OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_LOCAL_RANK=1 exec "$@"
B
cat > "$tmp/a/bin/rank_env_test" <<'B'
#!/usr/bin/env bash
# Passes when the rank's environment is that of a shared GPU (EXPECT_SHARED=1: 1 GPU) or not.
xml="${1#--gtest_output=xml:}"
env="${NCCL_HOSTID:-} ${NCCL_SOCKET_IFNAME:-} ${NCCL_IB_DISABLE:-} ${CUDA_VISIBLE_DEVICES:-}"
want="   "
[ "$EXPECT_SHARED" = 1 ] && want="shardema-shared-gpu-rank-1 lo 1 0"
failure=""
[ "$env" = "$want" ] || failure="<failure message=\"env '$env', want '$want'\"/>"
echo "<testsuites><testcase name=\"a\" status=\"run\" result=\"completed\">$failure</testcase></testsuites>" > "$xml"
[ -z "$failure" ]
B
chmod +x "$tmp/fakempi/mpirun" "$tmp/a/bin/rank_env_test"
echo 'mpi rank_env_test //x:rank_env_test' >> "$tmp/a/MANIFEST"
out=$(PATH="$tmp/fakempi:$PATH" EXPECT_SHARED=0 GPU_CHECK_GPUS=2 "$tmp/a/gpu_check.sh" \
        --report "$tmp/i.txt" --only '^rank_env_test np=2$' 2>&1)
[ "$(echo "$out" | tail -1)" = "1 passed, 0 failed, 0 skipped" ] || fail "own GPUs: $out"
out=$(PATH="$tmp/fakempi:$PATH" EXPECT_SHARED=1 GPU_CHECK_GPUS=1 "$tmp/a/gpu_check.sh" \
        --report "$tmp/j.txt" --only '^rank_env_test np=[248]$' 2>&1)
echo "$out" | grep -qE '^PASS rank_env_test np=4 \(shared GPU, socket transport\) +1 cases' ||
  fail "shared GPU at 4 ranks: $out"
echo "$out" | grep -qE '^SKIP rank_env_test np=8 .*shared runs up to 4 ranks' || fail "8 ranks: $out"
[ "$(echo "$out" | tail -1)" = "2 passed, 0 failed, 1 skipped" ] || fail "shared counts: $out"
echo PASS
