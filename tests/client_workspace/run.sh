#!/usr/bin/env bash
# Builds and runs this client workspace the way a user's project uses shardema (README, "Depending
# on shardema from another Bazel workspace"); tools/test.sh runs it as one test.
#   0. README's WORKSPACE, .bazelrc and main.cc blocks (same section) must be this directory's
#      files (check_readme_blocks.py).
#   1. bazel build (from this directory: its own WORKSPACE, .bazelrc and output base) of
#      client_train (train_mlp's model under @shardema//train:trainer_main, main.cc) and of the
#      README's C++ blocks (section "Using the library in your own training loop", extracted at
#      build time by extract_readme_cpp.sh); prints the build's wall time.
#   2. client_train and the in-tree bazel-bin/examples/train_mlp at 1 and 2 ranks with the same
#      flags: their step losses and final eval tables must be identical (same code, same flags).
#   3. README's complete loop at 2 ranks to step 100, resumed at 1 rank to step 200, then the
#      in-tree `ckpt export` of its EMA slot ema_0.999; README's UnitRunner step at 2 ranks.
# Ends with "summary: client_step_ms=... intree_step_ms=... ratio=..." (each binary's median of
# three alternating 2-rank runs' median step times from --bench-json; ratio = client / in-tree; a
# warning above 1.5, never a failure)
# and "client_workspace: PASSED" or "client_workspace: FAILED (...)"; exits 1 on any failure.
# $SHARDEMA_BAZEL_ROOT, as for tools/test.sh, is bazel's --output_user_root for both workspaces.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
BAZEL=(bazel)
[ -n "${SHARDEMA_BAZEL_ROOT:-}" ] && BAZEL=(bazel "--output_user_root=$SHARDEMA_BAZEL_ROOT")
# mpirun as a user runs it, with tests/mpi_run.sh's settings for this machine (root, more ranks
# than cores, shared memory without cross-memory attach) and a time limit, but without its
# --tag-output: that splits a long stdout line (the --bench-json one) into tagged 1 KiB pieces.
# Only rank 0 writes stdout.
MPIRUN_ARGS=(--oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && MPIRUN_ARGS=(--allow-run-as-root "${MPIRUN_ARGS[@]}")
export OMPI_MCA_btl="${OMPI_MCA_btl:-self,vader,tcp}"
export OMPI_MCA_btl_vader_single_copy_mechanism="${OMPI_MCA_btl_vader_single_copy_mechanism:-none}"
export OMPI_MCA_btl_tcp_if_include="${OMPI_MCA_btl_tcp_if_include:-lo}"
export OMPI_MCA_oob_tcp_if_include="${OMPI_MCA_oob_tcp_if_include:-lo}"
mpi_run() {  # NP BINARY ARGS...
  local np="$1"
  shift
  timeout --kill-after=10 "${MPI_TIMEOUT:-300}" mpirun "${MPIRUN_ARGS[@]}" -np "$np" "$@"
}
FLAGS=(--layers 256,1024,1024,256 --batch 64 --steps 30 --bench-json --bench-warmup 5)
tmp="$(mktemp -d /tmp/shardema-client.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT

fail() {
  echo "client_workspace: FAILED ($*)"
  exit 1
}

# --- 0. README's copies of this workspace's files ---------------------------------------------
python3 "$here/check_readme_blocks.py" "$root/README.md" "$here" ||
  fail "README's blocks differ from tests/client_workspace's files"

# --- 1. build ---------------------------------------------------------------------------------
cd "$here"
state=warm
[ -e "$here/bazel-out" ] || state="cold: first build of this workspace"
t0=$EPOCHREALTIME
"${BAZEL[@]}" build //:client_train //:readme_loop //:readme_unit_runner //:your_model ||
  fail "bazel build in tests/client_workspace"
build_s=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
echo "client build: ${build_s} s (${state})"
client_bin="$("${BAZEL[@]}" info bazel-bin 2>/dev/null)" || fail "bazel info in tests/client_workspace"

cd "$root"
"${BAZEL[@]}" build //examples:train_mlp //tools:ckpt || fail "in-tree bazel build"
intree_bin="$("${BAZEL[@]}" info bazel-bin 2>/dev/null)" || fail "in-tree bazel info"
cd "$tmp"

# --- 2. client_train against the in-tree train_mlp ---------------------------------------------
# NAME NP BINARY: runs it, keeps rank 0's stdout (NAME.out) and the step lines (NAME.steps).
run_mlp() {
  local name="$1" np="$2" bin="$3"
  echo "== $name: mpirun -np $np $(basename "$bin") ${FLAGS[*]}"
  mpi_run "$np" "$bin" "${FLAGS[@]}" >"$name.out" 2>"$name.log" || {
    tail -20 "$name.log"
    fail "$name exited non-zero"
  }
  # Rank 0's "step 5/30 loss 0.13 lr 0.001 grad_norm 0.09 17.8 ms ...": all but the timings.
  sed -n 's/^\[rank 0\/.*\] \(step [0-9]*\/[0-9]* loss .* grad_norm [^ ]*\) .*/\1/p' \
    "$name.log" >"$name.steps"
  grep -v '^{' "$name.out"
}

# The median step time (ms) of a run's --bench-json line.
step_ms() {
  python3 -c 'import json, sys
print("%.3f" % [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]["step_ms"])' "$1"
}

for np in 1 2; do
  run_mlp "intree_np$np" "$np" "$intree_bin/examples/train_mlp"
  run_mlp "client_np$np" "$np" "$client_bin/client_train"
  grep -q '^final eval' "client_np$np.out" || fail "client_train at $np ranks printed no final eval"
  [ "$(wc -l <"client_np$np.steps")" = 30 ] ||
    fail "client_train at $np ranks logged $(wc -l <"client_np$np.steps") steps, expected 30"
  diff <(grep -v '^{' "intree_np$np.out") <(grep -v '^{' "client_np$np.out") ||
    fail "final eval losses differ between client_train and in-tree train_mlp at $np ranks"
  diff "intree_np$np.steps" "client_np$np.steps" ||
    fail "step losses differ between client_train and in-tree train_mlp at $np ranks"
  echo "client_train = train_mlp at $np ranks: same step losses and final eval"
done
# Timing: the machine's load drifts between runs, so two more pairs of 2-rank runs, alternating,
# and the median of each binary's three medians.
client_runs=("$(step_ms client_np2.out)") || fail "no --bench-json line from client_train"
intree_runs=("$(step_ms intree_np2.out)") || fail "no --bench-json line from train_mlp"
for k in 1 2; do
  run_mlp "intree_t$k" 2 "$intree_bin/examples/train_mlp" >/dev/null
  run_mlp "client_t$k" 2 "$client_bin/client_train" >/dev/null
  intree_runs+=("$(step_ms "intree_t$k.out")")
  client_runs+=("$(step_ms "client_t$k.out")")
done
median() { printf '%s\n' "$@" | sort -g | sed -n "$((($# + 1) / 2))p"; }
client_ms=$(median "${client_runs[@]}")
intree_ms=$(median "${intree_runs[@]}")
echo "step ms (2 ranks, three runs each): client ${client_runs[*]}, in-tree ${intree_runs[*]}"
ratio=$(awk -v a="$client_ms" -v b="$intree_ms" 'BEGIN { printf "%.3f", a / b }')
if awk -v r="$ratio" 'BEGIN { exit !(r > 1.5) }'; then
  echo "warning: client_train's median step is ${ratio}x the in-tree train_mlp's (a loaded" \
    "machine, or build flags differing from the repository's .bazelrc)"
fi

# --- 3. README's C++ blocks ----------------------------------------------------------------------
echo "== README loop: 2 ranks to step 100, resumed at 1 rank to step 200"
mpi_run 2 "$client_bin/readme_loop" "$tmp/readme_run" 100 || fail "README loop at 2 ranks"
[ "$(cat "$tmp/readme_run/latest" 2>/dev/null)" = step_00000100 ] ||
  fail "README loop: latest is '$(cat "$tmp/readme_run/latest" 2>/dev/null)', expected step_00000100"
mpi_run 1 "$client_bin/readme_loop" "$tmp/readme_run" 200 || fail "README loop resumed at 1 rank"
[ "$(cat "$tmp/readme_run/latest" 2>/dev/null)" = step_00000200 ] ||
  fail "README loop resumed: latest is '$(cat "$tmp/readme_run/latest" 2>/dev/null)', expected step_00000200"
"$intree_bin/tools/ckpt" export "$tmp/readme_run" --slot ema_0.999 --no-progress \
  -o "$tmp/readme_ema.safetensors" || fail "ckpt export of the README loop's ema_0.999"
[ -s "$tmp/readme_ema.safetensors" ] || fail "ckpt export wrote no file"
echo "== README UnitRunner step: 2 ranks"
mpi_run 2 "$client_bin/readme_unit_runner" || fail "README UnitRunner step at 2 ranks"

echo "== docs/your_model.md: 2 ranks to step 40, resumed resharded on 3 to step 60"
mpi_run 2 "$client_bin/your_model" --batch 12 --steps 40 --lr 0.05 --ema 0.99 --log-every 0 \
  --ckpt-dir "$tmp/tiny" >"$tmp/tiny2.out" 2>"$tmp/tiny2.log" || {
  tail -20 "$tmp/tiny2.log"
  fail "docs/your_model.md's program at 2 ranks"
}
mpi_run 3 "$client_bin/your_model" --batch 12 --steps 60 --lr 0.05 --ema 0.99 --log-every 0 \
  --ckpt-dir "$tmp/tiny" --resume >"$tmp/tiny3.out" 2>"$tmp/tiny3.log" || {
  tail -20 "$tmp/tiny3.log"
  fail "docs/your_model.md's program resumed at 3 ranks"
}
grep -q "resharded" "$tmp/tiny3.log" || fail "docs/your_model.md's resume did not reshard"
grep -q "^ema_0.99 " "$tmp/tiny3.out" || fail "docs/your_model.md's program printed no EMA eval"

echo "summary: client_step_ms=$client_ms intree_step_ms=$intree_ms ratio=$ratio ranks=2" \
  "client_build_s=$build_s"
echo "client_workspace: PASSED"
