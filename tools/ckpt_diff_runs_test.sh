#!/usr/bin/env bash
# `ckpt diff` as a bit-exactness check on real trainings: two identical 2-rank runs written to
# different folders compare identical (exit 0; the run locations are notes), a run with one
# hyperparameter changed differs (exit 1), and --slots-only ignores meta-only differences.
#   ckpt_diff_runs_test.sh CKPT TRAIN_MLP MPI_RUN_SH
set -uo pipefail
CKPT=$1
TRAIN=$2
MPI_RUN=$3
TMP=$(mktemp -d "${TEST_TMPDIR:-/tmp}/ckpt_diff_runs.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
args=(--layers 6,12,4 --batch 8 --steps 6 --seed 3 --synthetic-rows 32 --ema 0.9 --log-every 0)
for run in a b; do
  "$MPI_RUN" 2 "$TRAIN" "${args[@]}" --ckpt-dir "$TMP/$run" > "$TMP/$run.log" 2>&1 \
    || { echo "FAIL: training $run"; tail "$TMP/$run.log"; exit 1; }
done
"$MPI_RUN" 2 "$TRAIN" "${args[@]}" --lr 0.002 --ckpt-dir "$TMP/c" > "$TMP/c.log" 2>&1 \
  || { echo "FAIL: training c"; tail "$TMP/c.log"; exit 1; }
# Same slots, other meta (--eval-every is not a hyperparameter of the state).
"$MPI_RUN" 2 "$TRAIN" "${args[@]}" --eval-every 3 --ckpt-dir "$TMP/d" > "$TMP/d.log" 2>&1 \
  || { echo "FAIL: training d"; tail "$TMP/d.log"; exit 1; }

failures=0
check() {  # WANT_CODE PATTERN ARGS...
  local want=$1 pattern=$2 out rc
  shift 2
  out=$("$CKPT" "$@" 2>&1)
  rc=$?
  if [ "$rc" != "$want" ] || ! tr '\n' ' ' <<<"$out" | grep -qE -- "$pattern"; then
    echo "FAIL: ckpt $* exited $rc (expected $want) or does not match /$pattern/:"; echo "$out" | tail -20
    failures=$((failures + 1))
  else
    echo "ok: ckpt $* -> $rc"
  fi
}
check 0 "notes \(run locations.*lineage.runs.*ckpt_dir.*identical" diff "$TMP/a" "$TMP/b"
check 1 "different: .*slots" diff "$TMP/a" "$TMP/c"
check 1 "different: meta" diff "$TMP/a" "$TMP/d"
check 0 "identical slot values" diff --slots-only "$TMP/a" "$TMP/d"
check 1 "different" diff --slots-only "$TMP/a" "$TMP/c"
[ "$failures" = 0 ] || { echo "$failures check(s) failed"; exit 1; }
echo "all checks passed"
