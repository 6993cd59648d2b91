#!/usr/bin/env bash
# bench_lib.sh's helpers on inputs with known answers: medians (with "na"), ratios, rounding,
# JSON fields (lists, missing keys, not JSON) and save_stall_bench's in-run cost per save on a
# synthetic run whose saves add a known bump to the steps after them.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=bench/bench_lib.sh
. "$here/bench_lib.sh"
failures=0
expect() {  # NAME GOT WANT
  if [ "$2" = "$3" ]; then echo "ok   $1"; else echo "FAIL $1: got '$2', want '$3'"; failures=$((failures + 1)); fi
}

expect "median odd" "$(bench_median 3 1 2)" 2
expect "median even" "$(bench_median 4 1 3 2)" 2.5
expect "median skips na" "$(bench_median na 5 na 7)" 6
expect "median of nothing" "$(bench_median na na)" na
expect "ratio" "$(bench_ratio 1 4)" 0.250
expect "ratio na" "$(bench_ratio na 4)" na
expect "round" "$(bench_round 2.46)" 2.5
expect "field" "$(bench_field '{"a": 3, "b": [1, 2]}' a)" 3
expect "field missing" "$(bench_field '{"a": 3}' b)" na
expect "field not JSON" "$(bench_field 'oops' a)" na
expect "field max of a list" "$(bench_field_max '{"rss": [320.5, 321.25, 300]}' rss)" 321.25
expect "field max of a number" "$(bench_field_max '{"rss": 7}' rss)" 7

# 48 steps of 10 ms, a save every 12 (after steps 12, 24, 36): each adds 5 ms to the step after
# it and 2 ms to the next, so the in-run cost is 7 ms; a no-save run (the control) costs 0.
steps() {  # BUMP(0|1) -> the steps_ms JSON line
  python3 -c 'import json, sys
t = [10.0] * 48
if sys.argv[1] == "1":
    for s in (12, 24, 36):
        t[s] += 5.0  # step s+1 (index s)
        t[s + 1] += 2.0
print(json.dumps({"steps_ms": t}))' "$1"
}
expect "save cost" "$(steps 1 | bench_save_step_cost 12)" 7.0
expect "save cost, control" "$(steps 0 | bench_save_step_cost 12)" 0.0
expect "save cost, a window outside the run" "$(steps 1 | bench_save_step_cost 40)" 0
expect "save cost, K < 4" "$(steps 1 | bench_save_step_cost 3)" 0
expect "save cost, no steps_ms" "$(echo '{"loop_ms": 1}' | bench_save_step_cost 12)" na
# A slower stretch of the run shifts both sides of a save's window alike: still 7 ms.
expect "save cost, drift" "$(python3 -c 'import json
t = [10.0] * 24 + [14.0] * 24
for s in (12, 24, 36):
    t[s] += 5.0
    t[s + 1] += 2.0
print(json.dumps({"steps_ms": t}))' | bench_save_step_cost 12)" 7.0


# save_floor's passes: rank 0's steps start every 10 ms from t = 1000; two ranks' pass files on
# one schedule. Pass 0 starts at 1124.5 (the earlier file's) during step index 12; pass 1 at 1305
# during index 30; pass 2 at 1310 is dropped (within K = 12 steps of pass 1), as are a pass
# before the loop and one after its last step's start.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo '{"bytes":4096,"copy":false,"passes":[[990,995],[1125,1180],[1305.5,1350],[1310,1330],[2000,2001]]}' >"$work/r0.json"
echo '{"bytes":4096,"copy":false,"passes":[[991,996],[1124.5,1170],[1305,1340],[1311,1331],[2000,2001]]}' >"$work/r1.json"
timeline() {  # -> a 48-step JSON line with steps_start_unix_ms, bumps after indices 12 and 30
  python3 -c 'import json
t = [10.0] * 48
for s in (12, 30):
    t[s] += 5.0
    t[s + 1] += 2.0
print(json.dumps({"steps_ms": t, "steps_start_unix_ms": [1000.0 + 10 * i for i in range(48)]}))'
}
expect "pass starts" "$(timeline | bench_pass_starts 12 "$work/r0.json" "$work/r1.json")" 12,30
expect "pass starts, one file" "$(timeline | bench_pass_starts 12 "$work/r0.json")" 12,30
expect "pass starts, no step starts" "$(steps 1 | bench_pass_starts 12 "$work/r0.json")" ""
expect "pass cost" "$(timeline | bench_save_step_cost 12 12,30)" 7.0
expect "pass cost, control" "$(steps 0 | bench_save_step_cost 12 12,30)" 0.0
expect "pass cost, no pass inside" "$(timeline | bench_save_step_cost 12 "")" na
expect "pass cost, a pass too late" "$(timeline | bench_save_step_cost 12 40)" na

[ "$failures" = 0 ] || { echo "bench_lib_test: $failures failed"; exit 1; }
echo "bench_lib_test: PASS"
