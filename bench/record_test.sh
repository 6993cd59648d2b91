#!/usr/bin/env bash
# bench/record.sh: the results file holds the summary (numbers as numbers), the command and the
# machine; a command without a summary line, a failing command and a bad name are reported.
set -uo pipefail
rec="$(dirname "$0")/record.sh"
[ -f "$rec" ] || rec="bench/record.sh"
export SHARDEMA_RESULTS_DIR="$(mktemp -d)"
trap 'rm -rf "$SHARDEMA_RESULTS_DIR"' EXIT
fail=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi; }

out="$("$rec" demo --note "a test" -- bash -c 'echo line1; echo "summary: ratio=0.912 n=3 mode=ring"' 2>&1)"
check "a summarised run exits 0" "[ $? = 0 ]"
check "the output passes through" "grep -q '^line1$' <<<\"\$out\""
f=$(ls "$SHARDEMA_RESULTS_DIR"/demo_*.json 2>/dev/null | head -1)
check "one results file named demo_<time>.json" "[ -n \"$f\" ]"
check "its fields" "python3 - \"$f\" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d['summary'] == {'ratio': 0.912, 'n': 3, 'mode': 'ring'}, d['summary']
assert d['name'] == 'demo' and d['note'] == 'a test' and d['exit_code'] == 0
assert d['command'].startswith('bash -c'), d['command']
assert d['machine']['cores'] >= 1 and d['date'].endswith('Z') and d['output_tail'][0] == 'line1'
PY"

sleep 1
"$rec" nosum -- echo no summary here >/dev/null 2>&1
check "no summary line: exit 3" "[ $? = 3 ]"
"$rec" failing -- bash -c 'echo "summary: x=1"; exit 5' >/dev/null 2>&1
check "a failing command's status is kept" "[ $? = 5 ]"
check "and its file written" "ls \"$SHARDEMA_RESULTS_DIR\"/failing_*.json >/dev/null 2>&1"
"$rec" 'bad/name' -- true >/dev/null 2>&1
check "a bad name: exit 2" "[ $? = 2 ]"
"$rec" nocmd >/dev/null 2>&1
check "no command: exit 2" "[ $? = 2 ]"
exit $fail
