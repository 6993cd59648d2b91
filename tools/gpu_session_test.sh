#!/usr/bin/env bash
# tools/gpu_session.sh's run mode on a fake package (no GPU needed): the stages in order with
# their counts and statuses in one JSON report, a machine without a GPU skips every stage, a
# failing check fails its stage and the exit, --budget leaves out the stages that no longer fit
# (listed as not run), --only runs one stage, the GPT autocast parity check and the GPT
# benchmark run in one stage with their results files embedded, bad arguments exit 2.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*" >&2; exit 1; }
p="$tmp/pkg"
mkdir -p "$p/bin" "$p/root"
cp "$here/gpu_session.sh" "$here/gpu_check.sh" "$here/test_results.sh" "$here/shared_gpu_rank.sh" "$p/"
echo ': # no runtime in the fake package' > "$p/env.sh"
echo "built 2026-11-27T00:00Z from abc1234" > "$p/BUILD_INFO"
printf '#!/usr/bin/env bash\necho "<testsuites><testcase name=\\"a\\" status=\\"run\\" result=\\"completed\\"/></testsuites>" > "${1#--gtest_output=xml:}"\n' \
  > "$p/bin/ran_test"
printf '#!/bin/sh\necho "summary: fused_vs_copy=0.9"\n' > "$p/bin/gpu_optimizer_bench"
cp "$p/bin/ran_test" "$p/bin/ring_test_bin"  # a multi-rank test binary, named as packaged
chmod +x "$p/bin/"*
printf 'single ran_test //x:ran_test\nmpi ring_test_bin //x:ring_test_bin\n' > "$p/MANIFEST"
printf 'tool gpu_optimizer_bench //bench:gpu_optimizer_bench\n' >> "$p/MANIFEST"
export GPU_CHECK_SANITIZER=none GPU_CHECK_PYTHON=none GPU_CHECK_SHARED=0
field() {  # $1: report, $2: python expression on the report `r`
  python3 -c "import json, sys; r = json.load(open(sys.argv[1])); print($2)" "$1"
}

# 1. No GPU: every stage skipped, exit 0, a valid report naming the build (a --budget that fits
# every stage's timeout: 820 s; the default 300 s leaves gpt_bench, 400 s, out).
out=$(GPU_CHECK_GPUS=0 "$p/gpu_session.sh" --budget 820 --report "$tmp/a.json" 2>&1) ||
  fail "no GPU: $out"
[ "$(field "$tmp/a.json" "[s['name'] + ':' + s['status'] for s in r['stages']]")" = \
  "['one_rank:skipped', 'shared_2:skipped', 'shared_4:skipped', 'kill:skipped', 'bench:skipped', 'gpt_bench:skipped']" ] ||
  fail "no GPU stages: $(cat "$tmp/a.json")"
[ "$(field "$tmp/a.json" "(r['build'], r['not_run'], r['card'])")" = \
  "('built 2026-11-27T00:00Z from abc1234', [], 'none')" ] || fail "no GPU fields: $(cat "$tmp/a.json")"
echo "$out" | grep -q '^stages not run: none' || fail "summary: $out"

[ "$(field "$tmp/a.json" "[s['skipped'] for s in r['stages']]")" = "[2, 1, 1, 2, 2, 2]" ] ||
  fail "no GPU counts: $(cat "$tmp/a.json")"

# 2. One GPU (shared runs off): the 1-rank stage (a test, the multi-rank test under mpirun at
# 1 rank) and the benchmark pass, its summary line in the report.
out=$(GPU_CHECK_GPUS=1 "$p/gpu_session.sh" --report "$tmp/b.json" 2>&1) || fail "one GPU: $out"
[ "$(field "$tmp/b.json" "[(s['name'], s['status'], s['passed']) for s in r['stages'] if s['passed']]")" = \
  "[('one_rank', 'passed', 2), ('bench', 'passed', 1)]" ] || fail "one GPU: $(cat "$tmp/b.json")"
[ "$(field "$tmp/b.json" "r['stages'][4]['summaries']")" = "['summary: fused_vs_copy=0.9']" ] ||
  fail "bench summary: $(cat "$tmp/b.json")"

# 3. --budget 95: one_rank (90 s) fits, the 100 s stages do not and are listed as not run, the
# later ones run in what is left (kill 45 s, bench 75 s; gpt_bench, 400 s, does not).
out=$(GPU_CHECK_GPUS=1 "$p/gpu_session.sh" --budget 95 --report "$tmp/c.json" 2>&1) || fail "budget: $out"
[ "$(field "$tmp/c.json" "([s['name'] for s in r['stages']], r['not_run'])")" = \
  "(['one_rank', 'kill', 'bench'], ['shared_2', 'shared_4', 'gpt_bench'])" ] || fail "budget: $(cat "$tmp/c.json")"
echo "$out" | grep -q '^stages not run: shared_2 shared_4 gpt_bench' || fail "budget summary: $out"

# 4. --only one stage; a failing check fails its stage and the exit.
out=$(GPU_CHECK_GPUS=1 "$p/gpu_session.sh" --only bench --report "$tmp/d.json" 2>&1) || fail "--only: $out"
[ "$(field "$tmp/d.json" "[s['name'] for s in r['stages']]")" = "['bench']" ] || fail "--only"
printf '#!/bin/sh\nexit 3\n' > "$p/bin/gpu_optimizer_bench"
out=$(GPU_CHECK_GPUS=1 "$p/gpu_session.sh" --only bench --report "$tmp/e.json" 2>&1)
[ $? = 1 ] || fail "failing stage exit: $out"
[ "$(field "$tmp/e.json" "(r['stages'][0]['status'], r['stages'][0]['failed'])")" = "('failed', 1)" ] ||
  fail "failing stage: $(cat "$tmp/e.json")"

# 4b. The gpt_bench stage: the parity check's and the benchmark's summary lines and results files
# (named by the checks' `results:` lines) in the report, the parity check first.
mkdir -p "$p/peer/bench"
printf '#!/bin/sh\n' > "$p/bin/train_gpt"
chmod +x "$p/bin/train_gpt"
cat > "$p/peer/bench/gpu_gpt_bench.sh" <<'B'
while [ $# -gt 0 ]; do [ "$1" = --json ] && json="$2"; shift 2; done
echo '{"name": "gpu_gpt_bench", "summary": {"ours_ms": 90, "mfu_ours": 0.1}}' > "$json"
echo "summary: ours_ms=90 mfu_ours=0.1"
B
cat > "$p/peer/bench/gpt_autocast_parity.sh" <<'B'
while [ $# -gt 0 ]; do [ "$1" = --json ] && json="$2"; shift 2; done
echo '{"name": "gpt_autocast_parity", "summary": {"pass": 1}}' > "$json"
echo "summary: max_rel_diff_bf16=4e-03 pass=1"
B
out=$(GPU_CHECK_GPUS=1 "$p/gpu_session.sh" --only gpt_bench --report "$tmp/g.json" 2>&1) ||
  fail "gpt_bench: $out"
[ "$(field "$tmp/g.json" "(r['stages'][0]['name'], r['stages'][0]['status'], \
  r['stages'][0]['passed'], r['stages'][0]['summaries'], \
  [x['summary'] for x in r['stages'][0]['results']])")" = \
  "('gpt_bench', 'passed', 2, ['summary: max_rel_diff_bf16=4e-03 pass=1', 'summary: ours_ms=90 mfu_ours=0.1'], [{'pass': 1}, {'ours_ms': 90, 'mfu_ours': 0.1}])" ] ||
  fail "gpt_bench report: $(cat "$tmp/g.json")"

# 5. Bad arguments.
"$p/gpu_session.sh" --only nope > /dev/null 2>&1; [ $? = 2 ] || fail "--only nope"
"$p/gpu_session.sh" --budget x > /dev/null 2>&1; [ $? = 2 ] || fail "--budget x"
echo PASS
