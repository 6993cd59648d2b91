#!/usr/bin/env bash
# save_floor on a small file: its passes keep their schedule, write through both paths (straight
# from memory, and through the snapshot copy), remove their file, print the JSON line
# bench_pass_starts reads (checked on a step timeline laid around the real pass times), and a
# directory that cannot be written is a clear error.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=bench/bench_lib.sh
. "$here/bench_lib.sh"
floor="${1:?usage: save_floor_test.sh SAVE_FLOOR}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failures=0
expect() {  # NAME GOT WANT
  if [ "$2" = "$3" ]; then echo "ok   $1"; else echo "FAIL $1: got '$2', want '$3'"; failures=$((failures + 1)); fi
}

for copy in "" --copy; do
  start=$(($(date +%s%3N) + 50))
  "$floor" --bytes 3M --dir "$work" --start-unix-ms "$start" --period-ms 120 --passes 3 $copy \
    >"$work/out.json"
  # 3 passes, none before its time, each ended after it began, the file gone after each.
  expect "schedule $copy" "$(python3 -c 'import json, sys
j = json.loads(open(sys.argv[1]).read())
p, start = j["passes"], float(sys.argv[2])
ok = len(p) == 3 and j["bytes"] == 3 << 20 and j["copy"] == (sys.argv[3] == "--copy")
ok = ok and all(a >= start + 120 * k - 1 and b >= a for k, (a, b) in enumerate(p))
print("ok" if ok else json.dumps(j))' "$work/out.json" "$start" "$copy")" ok
  left=("$work"/save_floor_*)
  expect "no file left $copy" "${left[*]}" "$work/save_floor_*"
  # Steps every 10 ms from 1 s before the first pass: the passes begin at steps 100, 112, 124 (on
  # a loaded machine a late pass may come within 10 steps of the next: bench_pass_starts drops it).
  expect "pass starts $copy" "$(python3 -c 'import json, sys
p = json.loads(open(sys.argv[1]).read())["passes"]
t0 = p[0][0] - 1000.0
print(json.dumps({"steps_ms": [10.0] * 200, "steps_start_unix_ms": [t0 + 10 * i for i in range(200)]}))' \
    "$work/out.json" | bench_pass_starts 10 "$work/out.json")" "$(python3 -c 'import json, sys
p = json.loads(open(sys.argv[1]).read())["passes"]
out = []  # a pass that began within 10 steps of the previous kept one is left out (a late one)
for s in (int((a - p[0][0] + 1000.0) // 10) for a, _ in p):
    if not out or s >= out[-1] + 10:
        out.append(s)
print(",".join(map(str, out)))' "$work/out.json")"
done

if "$floor" --bytes 1M --dir "$work/missing" --passes 1 >"$work/out" 2>"$work/err"; then
  expect "missing directory fails" "exit 0" "non-zero exit"
else
  expect "missing directory named" "$(grep -c "not_found: open for writing '$work/missing/save_floor_" "$work/err")" 1
fi
if "$floor" --bytes 0 >"$work/out" 2>"$work/err"; then
  expect "zero bytes fails" "exit 0" "non-zero exit"
else
  expect "zero bytes named" "$(grep -c -- "--bytes: '0' is not a positive size" "$work/err")" 1
fi

[ "$failures" = 0 ] || { echo "save_floor_test: $failures failed"; exit 1; }
echo "save_floor_test: PASS"
