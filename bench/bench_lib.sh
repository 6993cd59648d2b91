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
