#!/usr/bin/env bash
# train_mlp refuses bad launches up front, on every rank, with a clear message and exit code:
#   1. ranks started with different arguments (MPMD launch, --lr differs on rank 1): exit 2
#      naming --lr, both values and the rank;
#   2. a model that cannot fit in memory (--layers 100000,100000): refused before allocating,
#      with the estimate and the available memory, within seconds (no abort, no paging);
#   3. a rank stopped with SIGSTOP mid-run: its peer gives up after --collective-timeout and
#      aborts the job, which exits non-zero naming the collective and the step;
#   4. --async-save on a rank that may run on one core only (taskset, as mpirun's default binding
#      does): a warning naming --bind-to none; none when the rank has more than one core.
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
echo "== 3. a stopped rank -> the job aborts after --collective-timeout"
"$mpirun_sh" 2 "$train" --layers 32,32,4 --batch 8 --steps 100000000 --seed 424242 \
  --collective-timeout 3 >"$tmp/stop.out" 2>"$tmp/stop.err" &
job=$!
ranks=""
for _ in $(seq 600); do  # up to 60 s for both ranks to be training
  ranks=$(ps -eo pid=,comm=,args= | awk '$2 == "train_mlp" && /--seed 424242/ { print $1 }')
  [ "$(echo "$ranks" | wc -w)" = 2 ] && grep -q 'step 2/' "$tmp/stop.err" && break
  sleep 0.1
done
[ "$(echo "$ranks" | wc -w)" = 2 ] || { kill -9 $ranks 2>/dev/null; fail "the 2-rank job did not start"; }
victim=$(echo "$ranks" | sort -n | tail -1)
kill -STOP "$victim"
rc=""
for _ in $(seq 1200); do  # the job must end well within 120 s (timeout 3 s + abort)
  if ! kill -0 "$job" 2>/dev/null; then wait "$job"; rc=$?; break; fi
  sleep 0.1
done
kill -9 $ranks 2>/dev/null
[ -n "$rc" ] || { kill -9 "$job" 2>/dev/null; fail "stopped rank: the job did not exit within 120 s"; }
[ "$rc" != 0 ] || fail "stopped rank: the job exited 0"
grep -q 'collective timeout' "$tmp/stop.err" ||
  fail "stopped rank: no 'collective timeout' error: $(tail -5 "$tmp/stop.err")"
grep -Eq 'step [0-9]+' "$tmp/stop.err" || fail "stopped rank: the error does not name the step"
echo "== 4. --async-save bound to one core -> a warning; unbound -> none"
if [ "$(nproc)" -lt 2 ]; then
  echo "bad_launch_test: case 4 needs 2 CPUs, this machine has $(nproc): not checked"
else
  cpu=$(taskset -pc $$ | sed 's/.*: //; s/[,-].*//')
  taskset -c "$cpu" "$mpirun_sh" 1 "$train" "${common[@]}" --ckpt-dir "$tmp/bound" --async-save \
    >"$tmp/bound.out" 2>"$tmp/bound.err" || fail "bound --async-save run failed: $(tail -5 "$tmp/bound.err")"
  grep -q 'async-save: rank 0 may run on one core only.*--bind-to none' "$tmp/bound.err" ||
    fail "bound to CPU $cpu: no warning: $(cat "$tmp/bound.err")"
  "$mpirun_sh" 1 "$train" "${common[@]}" --ckpt-dir "$tmp/free" --async-save \
    >"$tmp/free.out" 2>"$tmp/free.err" || fail "unbound --async-save run failed: $(tail -5 "$tmp/free.err")"
  if grep -q 'may run on one core only' "$tmp/free.err"; then
    fail "unbound: warned anyway: $(cat "$tmp/free.err")"
  fi
fi
echo "bad_launch_test: OK"
