#!/usr/bin/env bash
# train_mlp refuses bad launches up front, on every rank, with a clear message and exit code:
#   1. ranks started with different arguments (MPMD launch, --lr differs on rank 1): exit 2
#      naming --lr, both values and the rank;
#   2. a model that cannot fit in memory (--layers 100000,100000): refused before allocating,
#      with the estimate and the available memory, within seconds (no abort, no paging).
# Usage: bad_launch_test.sh TRAIN_MLP MPI_RUN
set -uo pipefail
train="$1"; mpirun_sh="$2"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "bad_launch_test: FAIL: $*" >&2; exit 1; }
common=(--layers 6,9,3 --batch 8 --steps 3 --log-every 0)

echo "== 1. ranks with different --lr -> exit 2 naming the flag"
"$mpirun_sh" --mpmd -np 1 "$train" "${common[@]}" --lr 1e-3 : -np 1 "$train" "${common[@]}" \
  --lr 2e-3 >"$tmp/lr.out" 2>"$tmp/lr.err"
rc=$?
[ "$rc" = 2 ] || fail "different --lr: exit code $rc, expected 2; $(cat "$tmp/lr.err")"
grep -q -- '--lr is 0.001 on rank 0 but 0.002 on rank 1' "$tmp/lr.err" ||
  fail "different --lr: message does not name the flag and ranks: $(cat "$tmp/lr.err")"

echo "== 2. a model that cannot fit -> refused with the estimate"
"$mpirun_sh" 1 "$train" --layers 100000,100000 --steps 1 >"$tmp/big.out" 2>"$tmp/big.err"
rc=$?
[ "$rc" != 0 ] || fail "--layers 100000,100000 was accepted"
grep -q 'parameters' "$tmp/big.err" && grep -q 'is available' "$tmp/big.err" ||
  fail "--layers 100000,100000: no estimate in the error: $(cat "$tmp/big.err")"
echo "bad_launch_test: OK"
