#!/usr/bin/env bash
# record.sh NAME [--note TEXT] -- COMMAND...: runs one benchmark command, passes its output
# through, and writes bench/results/NAME_<UTC time>.json, the file docs quote figures from:
#   {"name", "date" (UTC, ISO 8601), "machine": {"cpu", "cores", "mem_gib", "load_avg_before",
#    "load_avg_after", "host"}, "commit", "dirty" (uncommitted changes under the source tree),
#    "command", "note", "seconds", "exit_code", "summary": {key: value, ...} (the command's last
#    `summary: key=value ...` line, numbers as numbers), "output_tail": [its last 80 lines]}.
# $SHARDEMA_RESULTS_DIR replaces bench/results (tests).
# Exits with the command's status (the file is written either way; a missing summary line is
# recorded as {} and makes the exit non-zero when the command itself succeeded).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${BUILD_WORKSPACE_DIRECTORY:-$(cd "$here/.." && pwd)}"
name="${1:?usage: record.sh NAME [--note TEXT] -- COMMAND...}"
shift
note=""
if [ "${1:-}" = "--note" ]; then note="$2"; shift 2; fi
[ "${1:-}" = "--" ] || { echo "record.sh: expected -- before the command" >&2; exit 2; }
shift
[ $# -gt 0 ] || { echo "record.sh: no command" >&2; exit 2; }
case "$name" in *[!A-Za-z0-9_.-]*) echo "record.sh: NAME '$name': letters, digits, _ . - only" >&2; exit 2 ;; esac
results="${SHARDEMA_RESULTS_DIR:-$root/bench/results}"
mkdir -p "$results"
stamp=$(date -u +%Y-%m-%dT%H%M%SZ)
out="$results/${name}_${stamp}.json"
log=$(mktemp /tmp/shardema-record.XXXXXX)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(date +%s.%N)
"$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
t1=$(date +%s.%N)
NAME="$name" NOTE="$note" RC="$rc" T0="$t0" T1="$t1" LOAD0="$load0" STAMP="$stamp" ROOT="$root" \
python3 - "$log" "$out" "$@" <<'PY'
import json, os, re, subprocess, sys
log, out, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
lines = open(log, errors="replace").read().splitlines()
summary = {}
for line in reversed(lines):
    if line.startswith("summary:"):
        for kv in line[len("summary:"):].split():
            if "=" not in kv:
                continue
            k, v = kv.split("=", 1)
            try:
                summary[k] = int(v) if re.fullmatch(r"-?\d+", v) else float(v)
            except ValueError:
                summary[k] = v
        break
def sh(*a):
    try:
        return subprocess.run(a, capture_output=True, text=True, cwd=os.environ["ROOT"]).stdout.strip()
    except OSError:
        return ""
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "")
mem = next((int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal")), 0)
s = os.environ["STAMP"]
doc = {
    "name": os.environ["NAME"],
    "date": f"{s[:10]}T{s[11:13]}:{s[13:15]}:{s[15:17]}Z",
    "machine": {"cpu": cpu, "cores": os.cpu_count(), "mem_gib": round(mem / 2**20, 1),
                "load_avg_before": os.environ["LOAD0"],
                "load_avg_after": open("/proc/loadavg").read().split()[:3], "host": os.uname().nodename},
    "commit": sh("git", "rev-parse", "HEAD"),
    "dirty": bool(sh("git", "status", "--porcelain", "--untracked-files=no")),
    "command": " ".join(cmd),
    "note": os.environ["NOTE"],
    "seconds": round(float(os.environ["T1"]) - float(os.environ["T0"]), 1),
    "exit_code": int(os.environ["RC"]),
    "summary": summary,
    "output_tail": lines[-80:],
}
with open(out, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
print(f"record: {out}" + ("" if summary else " (no summary line)"), file=sys.stderr)
sys.exit(0 if summary else 3)
PY
prc=$?
rm -f "$log"
[ "$rc" != 0 ] && exit "$rc"
exit "$prc"
