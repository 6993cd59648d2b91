#!/usr/bin/env bash
# Exports with //checkpoint:export_py_fixture, then checks the files with the reference Python
# safetensors reader (skips cleanly when python3 or the safetensors package is missing).
set -euo pipefail
fixture="$1"
script="$2"
out="${TEST_TMPDIR:-$(mktemp -d)}/export_py"
rm -rf "$out" && mkdir -p "$out"
"$fixture" "$out"
PY="${SHARDEMA_PYTHON:-python3}"
if ! command -v "$PY" >/dev/null 2>&1; then
  echo "SKIP: $PY not found"
  exit 0
fi
"$PY" "$script" "$out/expected.json"
