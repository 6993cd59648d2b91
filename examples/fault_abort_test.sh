#!/usr/bin/env bash
# A failure on one rank ends the whole job: with a fault injected on one rank
# (SHARDEMA_INJECT_FAULT, framework/fault_injection.h) just before a collective its peers may
# already wait in, every rank exits non-zero well within the bound (60 s, while
# --collective-timeout is 600 s: a hang is not rescued by the timeout), no rank process is left,
# and the output names the failing rank and call, on the failing rank and (through its failure
# notice, Communicator::AnnounceFailure) on its peers:
#   store.gather         (the unit buffer allocation of a gather), train_mlp, 3 ranks; again
#                        with --comm-thread (the progress thread) and units over 64 KiB
#   store.unit_grads     (the gradient buffer allocation), train_mlp, 3 ranks
#   clip.sum_of_squares  (the gradient norm's local part, folded into its all-gather: the peers
#                        name the failing rank), train_mlp with --clip-norm, 3 ranks
#   store.gather         train_gpt (UnitRunner schedule with prefetching), 2 ranks
#   store.gather         train_mlp with --shard-group-size 2 (hybrid sharding), 4 ranks
# Setup failures on one rank (agreed before any training collective; rank 0 names the rank):
#   trainer.init         the parameter initialisation, train_mlp, 3 ranks
#   trainer.state        the optimizer and EMA state allocation, train_gpt, 2 ranks
# Usage: fault_abort_test.sh TRAIN_MLP TRAIN_GPT GPT_DATA MPI_RUN
set -uo pipefail
train_mlp="$1"; train_gpt="$2"; gpt_data="$3"; mpirun_sh="$4"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "fault_abort_test: FAIL: $*" >&2; exit 1; }

# run NAME FAULT RANKS BINARY ARGS...: the job must exit non-zero within 60 s, leaving no rank.
run() {
  local name="$1" fault="$2" np="$3" bin="$4"; shift 4
  local marker=$((700000 + RANDOM))
  echo "== $name: SHARDEMA_INJECT_FAULT=$fault, $np ranks"
  SHARDEMA_INJECT_FAULT="$fault" "$mpirun_sh" "$np" "$bin" "$@" --seed "$marker" \
    --collective-timeout 600 --log-every 0 >"$tmp/$name.out" 2>"$tmp/$name.err" &
  local job=$! rc=""
  for _ in $(seq 600); do
    if ! kill -0 "$job" 2>/dev/null; then wait "$job"; rc=$?; break; fi
    sleep 0.1
  done
  local left
  left=$(ps -eo pid=,args= | awk -v m="--seed $marker " '$0 ~ m && !/awk/ { print $1 }')
  if [ -z "$rc" ]; then
    kill -9 "$job" $left 2>/dev/null
    fail "$name: the job did not exit within 60 s: $(tail -5 "$tmp/$name.err")"
  fi
  [ "$rc" != 0 ] || fail "$name: the job exited 0"
  [ -z "$left" ] || { kill -9 $left 2>/dev/null; fail "$name: rank processes left: $left"; }
}

expect() {  # NAME PATTERN: the job's stderr matches PATTERN
  grep -Eq "$2" "$tmp/$1.err" || fail "$1: no line matching '$2' in: $(tail -8 "$tmp/$1.err")"
}

mlp=(--layers 6,9,3 --batch 12 --steps 40)
run gather store.gather@1#7 3 "$train_mlp" "${mlp[@]}"
expect gather 'rank 1/3\] E .*gather of unit .layers\.[01].: injected fault at store\.gather on rank 1'
expect gather 'rank 0/3\] E .*rank 1 of 3 failed and left the job: gather of unit .layers\.[01].: injected'
expect gather 'rank 2/3\] E .*rank 1 of 3 failed and left the job: gather of unit .layers\.[01].: injected'

# The same with the progress thread (--comm-thread) and units of 128 KiB and more: the peers
# sleep in Work::Wait while the thread moves the gathers, and still hear the failure.
run gather_thread store.gather@1#7 3 "$train_mlp" --layers 64,512,3 --batch 12 --steps 40 \
  --comm-thread
expect gather_thread 'rank 1/3\] E .*gather of unit .layers\.[01].: injected fault at store\.gather on rank 1'
expect gather_thread 'rank [02]/3\] E .*rank 1 of 3 failed and left the job: gather of unit .layers\.[01].: injected'

run grads store.unit_grads@2#4 3 "$train_mlp" "${mlp[@]}"
expect grads 'rank 2/3\] E .*gradient buffer of unit .layers\.[01].: injected fault at store\.unit_grads on rank 2'
expect grads 'rank [01]/3\] E .*rank 2 of 3 failed and left the job: gradient buffer of unit'

run clip clip.sum_of_squares@1#3 3 "$train_mlp" "${mlp[@]}" --clip-norm 1
expect clip 'rank 1/3\] E .*global gradient norm: injected fault at clip\.sum_of_squares on rank 1'
expect clip 'rank [02]/3\] E .*global gradient norm: rank 1 failed computing its sum of squares'

run gpt store.gather@0#9 2 "$train_gpt" --data "$gpt_data" --n-layer 2 --n-head 2 --n-embd 16 \
  --block-size 8 --batch 4 --steps 40
expect gpt "rank 0/2\] E .*gather of unit 'transformer\.[a-z_.0-9]+': injected fault at store\.gather on rank 0"
expect gpt "rank 1/2\] E .*rank 0 of 2 failed and left the job: gather of unit 'transformer\."

# Hybrid sharding, 2 shard groups of 2: a rank of the second group fails in a gather; its group
# peer hears it on the shard group, the first group's ranks on their replica groups (a failure is
# announced on every communicator of the rank), and every rank names world rank 3.
run hybrid store.gather@3#7 4 "$train_mlp" "${mlp[@]}" --shard-group-size 2
expect hybrid 'rank 3/4\] E .*injected fault at store\.gather on rank 3'
for r in 0 1 2; do
  expect hybrid "rank $r/4\] E .*failed and left the job: .*world rank 3: gather of unit"
done

run init trainer.init@1 3 "$train_mlp" "${mlp[@]}"
expect init 'rank 0/3\] E .*parameter init: rank 1 of 3: injected fault at trainer\.init on rank 1'

run state trainer.state@0 2 "$train_gpt" --data "$gpt_data" --n-layer 2 --n-head 2 --n-embd 16 \
  --block-size 8 --batch 4 --steps 40
expect state 'rank 0/2\] E .*optimizer and EMA state: rank 0 of 2: injected fault at trainer\.state on rank 0'
echo "fault_abort_test: OK"
