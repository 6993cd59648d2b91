# Shell helpers of the step benchmarks (source it): JSON fields, medians, ratios, the PyTorch
# peer's virtual environment.

# One field of a one-line JSON object ("na" when missing or not JSON).
bench_field() {
  "${BENCH_PYTHON:-python3}" -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' \
    "$1" "$2" 2>/dev/null || echo na
}

# One field of a one-line JSON object, a list's largest element for a list such as
# "peak_rss_mib": [320.5, 320.6] ("na" when missing or not JSON).
bench_field_max() {
  "${BENCH_PYTHON:-python3}" -c 'import json,sys
v = json.loads(sys.argv[1])[sys.argv[2]]
print(max(v) if isinstance(v, list) else v)' "$1" "$2" 2>/dev/null || echo na
}

# Median of the arguments, "na" ignored ("na" when none is left).
bench_median() {
  printf '%s\n' "$@" | { grep -v '^na$' || true; } | sort -g |
    awk '{a[NR]=$1} END {if (NR==0) print "na"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'
}

# a / b with 3 decimals, "na" when either is "na".
bench_ratio() {
  if [ "$1" = na ] || [ "$2" = na ]; then echo na; return; fi
  awk -v a="$1" -v b="$2" 'BEGIN{printf "%.3f", a/b}'
}

# $1 with 1 decimal ("na" stays).
bench_round() {
  if [ "$1" = na ]; then echo na; return; fi
  awk -v a="$1" 'BEGIN{printf "%.1f", a}'
}

# What each save costs the steps after it, inside one run (save_stall_bench's in-run figure):
# reads train_mlp --bench-json's line on stdin ("steps_ms": rank 0's time of every step, step 1
# first) and, for every mid-run save at step s = K, 2K, ... with K = $1 (--save-every) and
# h = K/2, sums over steps s+1..s+h the step time minus the median of steps s+h+1..s+K-1 (the
# same run's steps away from the save); prints the median over the saves whose window lies
# inside the run (0 when none does, or K < 4; "na" when the line has no steps_ms).
# With $2, a comma-separated list of s values (0-based: the window starts at steps_ms[s]), those
# replace the save steps, e.g. bench_pass_starts's floor passes ("na" when none lies inside).
bench_save_step_cost() {
  "${BENCH_PYTHON:-python3}" -c '
import json, statistics, sys
t, K = json.loads(sys.stdin.read())["steps_ms"], int(sys.argv[1])
h = K // 2
given = len(sys.argv) > 2
starts = [int(x) for x in sys.argv[2].split(",") if x] if given else range(K, len(t) - K + 2, K)
costs = [sum(t[s + k - 1] for k in range(1, h + 1)) - h * statistics.median(t[s + h:s + K - 1])
         for s in starts if K <= s <= len(t) - K + 1] if K >= 4 else []
print(statistics.median(costs) if costs else ("na" if given else 0))' "$@" 2>/dev/null || echo na
}

# The steps at which save_floor's passes began: reads train_mlp --bench-json's line on stdin
# ("steps_start_unix_ms": when each of rank 0's steps began) and the JSON lines save_floor printed
# into the files $2... (one per rank, passes on the same schedule). Pass k starts at the earliest
# of the files' k-th starts, and s is the step running then (0-based: the largest s whose start
# is not later). Prints, comma-separated, the s of each pass that began during the loop (not
# before the first step's start nor after the last step's end) at least K = $1 steps after the
# previous one kept (so its window and baseline stay clean); "" when none did (or the line has no
# step starts).
bench_pass_starts() {
  "${BENCH_PYTHON:-python3}" -c '
import bisect, json, sys
line = json.loads(sys.stdin.read())
K, st, end = int(sys.argv[1]), line["steps_start_unix_ms"], 0
if st:
    end = st[-1] + line["steps_ms"][-1]
runs = [json.loads(open(f).read().split("\n")[0])["passes"] for f in sys.argv[2:]]
out = []
for k in range(min(len(r) for r in runs) if runs else 0):
    a = min(r[k][0] for r in runs)
    s = bisect.bisect_right(st, a) - 1
    if s >= 0 and a < end and (not out or s >= out[-1] + K):
        out.append(s)
print(",".join(map(str, out)))' "$@" 2>/dev/null || true
}

# The PyTorch peer's interpreter: $PYTHON when set, else DIR/.venv/bin/python, creating the venv
# with `pip install torch numpy safetensors` when it is missing. Prints the path; returns 1 (with
# the reason on stderr) when it cannot be made or cannot import torch.
bench_peer_python() {
  if [ -n "${PYTHON:-}" ]; then
    "$PYTHON" -c 'import torch' 2>/dev/null || { echo "# $PYTHON: import torch fails" >&2; return 1; }
    echo "$PYTHON"
    return
  fi
  local venv="$1/.venv"
  if [ ! -x "$venv/bin/python" ]; then
    echo "# creating $venv (pip install torch numpy safetensors)" >&2
    python3 -m venv "$venv" >&2 && "$venv/bin/pip" install --quiet torch numpy safetensors >&2 ||
      { echo "# could not create $venv" >&2; return 1; }
  fi
  "$venv/bin/python" -c 'import torch' 2>/dev/null || { echo "# $venv: import torch fails" >&2; return 1; }
  echo "$venv/bin/python"
}
