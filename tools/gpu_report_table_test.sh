#!/usr/bin/env bash
# tools/gpu_report_table.py: the newest report's table (by date), --write then --check, a stale
# block fails --check, no report says so, and the repository's README is in sync with its
# bench/results/.
#   gpu_report_table_test.sh SCRIPT README
set -uo pipefail
script="$1" readme="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*" >&2; exit 1; }
mkdir -p "$tmp/results"
stage='{"name": "%s", "status": "%s", "passed": %d, "failed": 0, "skipped": %d, "seconds": 3, "timeout_s": 60, "checks": [], "summaries": [%s]}'
{
  printf '{"date": "2026-12-01T10:00:00Z", "host": "h", "card": "NVIDIA H100 80GB HBM3", "driver": "580.1", "build": "built from abc1234", "budget_s": 300, "stages": ['
  printf "$stage, " one_rank passed 20 0 ''
  printf "$stage, " bench passed 1 0 '"summary: fused_vs_copy=0.91"'
  printf '{"name": "shared_2", "status": "timeout", "passed": 0, "failed": 0, "skipped": 0, "seconds": 60, "timeout_s": 60, "checks": ["PASS a np=2  2 cases", "FAIL b np=2   exit 124", "SKIP c np=2  why"], "summaries": []}'
  printf '], "not_run": ["kill"]}\n'
} > "$tmp/results/gpu_session_new.json"
printf '{"date": "2026-11-30T10:00:00Z", "host": "h", "card": "old", "driver": "1", "build": "b", "budget_s": 300, "stages": [], "not_run": []}\n' \
  > "$tmp/results/gpu_session_old.json"
out=$(python3 "$script" --results "$tmp/results") || fail "render: $out"
echo "$out" | grep -q 'gpu_session_new.json.*NVIDIA H100 80GB HBM3, driver 580.1; built from abc1234' ||
  fail "header: $out"
echo "$out" | grep -q '^| one_rank | passed | 20 | 0 | 0 | 3 | - |$' || fail "stage row: $out"
echo "$out" | grep -q '^| bench | passed | 1 | 0 | 0 | 3 | fused_vs_copy=0.91 |$' || fail "summary: $out"
echo "$out" | grep -q '^Stages not run: kill.$' || fail "not run: $out"
# A stage that timed out: the checks it recorded are counted, and failures listed.
echo "$out" | grep -q '^| shared_2 | timeout after 3 checks | 1 | 1 | 1 | 60 | - |$' || fail "timeout: $out"
echo "$out" | grep -q '^- shared_2: FAIL b np=2 exit 124$' || fail "failure line: $out"
printf 'intro\n<!-- gpu-table -->\nstale\n<!-- /gpu-table -->\nend\n' > "$tmp/README.md"
python3 "$script" --results "$tmp/results" --readme "$tmp/README.md" --check 2>/dev/null &&
  fail "a stale block passed --check"
python3 "$script" --results "$tmp/results" --readme "$tmp/README.md" --write || fail "--write"
python3 "$script" --results "$tmp/results" --readme "$tmp/README.md" --check || fail "--check after --write"
[ "$(head -1 "$tmp/README.md")" = intro ] && [ "$(tail -1 "$tmp/README.md")" = end ] || fail "around the block"
mkdir -p "$tmp/none"
python3 "$script" --results "$tmp/none" | grep -q '^No GPU session report yet' || fail "no report"
# The repository: README's block is its newest report's (bench/results beside the README).
python3 "$script" --results "$(dirname "$readme")/bench/results" --readme "$readme" --check ||
  fail "README.md's GPU table is stale: run tools/gpu_report_table.py --write"
echo PASS
