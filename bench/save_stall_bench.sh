#!/usr/bin/env bash
# save_stall_bench: what a checkpoint save costs the real trainer, synchronous vs asynchronous.
#
#   bazel run //bench:save_stall_bench -- [--layers 1024,2048,2048,1024] [--batch 64] [--world 2]
#       [--steps 40] [--save-every 4] [--repeats 3]
#   (or bench/save_stall_bench.sh TRAIN_MLP SAVE_FLOOR [flags] outside Bazel)
#
# Runs train_mlp (AdamW, 2 EMA slots, the same seed) under plain mpirun (not tests/mpi_run.sh,
# which turns off OpenMPI's shared-memory single copy) in six modes, alternately, --repeats times:
#   none    --ckpt-dir with only the final save (every mode makes that one)
#   sync    + --save-every K (blocking saves)
#   async   + --save-every K --async-save (background writer; the trainer Polls every step)
#   inplace + --async-snapshot in-place (the writer writes straight from the state, no snapshot
#             copy; the optimizer step waits until the rank file is written)
#   floor   as none, with one bench/save_floor process per rank beside it: every K+1 steps (of
#           the repeat's none run) each writes a rank file of the rank's state bytes, checksums
#           and direct writes straight from memory, fsync: the data work ANY save must do, with
#           no copy, collective or commit, so the least an asynchronous save can cost here
#   copy    the same through a snapshot copy (save_floor --copy): the async writer's data work
# and takes each mode's median whole-run wall time. Per mid-run save (S = saves in the run):
#   sync_cost_s  = (sync - none) / S      the steps a sync save blocks
#   async_cost_s = (async - none) / S     the step-time increase an async save causes (snapshot,
#                                         writer CPU taken from the ranks, agreement, commit)
# and the same from rank 0's training loop alone (train_mlp --bench-json "loop_ms": every step with
# its saves and Polls, without process start, setup, final evaluation and final save, whose
# run-to-run spread hides costs of a few ms): loop_ms_save = the median over repeats of (mode's
# loop - the same repeat's none loop) / S (paired: the machine's speed drifts by +-10 % between
# repeats, more than a save costs; runs of one repeat are seconds apart), and
# async_loop_ratio = async's / sync's, the goal figure (<= 0.10: an async save costs the training
# steps at most a tenth of what a sync save does);
# the same cost measured inside each run (in-run, free of the drift between runs): train_mlp
# --bench-json's "steps_ms" (rank 0's time of every step), and for each mid-run save at step s
# with K = --save-every, h = K/2: step_cost = sum over steps s+1..s+h of (step time - the median
# of steps s+h+1..s+K-1), the median over the run's saves; the no-save run gets the same figure
# at the same steps (the control: ~0). A mode's in-run cost per save = its step_cost - none's +
# its block_ms (below), and async_inrun_ratio = async's / sync's (it misses only what a save
# costs more than h steps after it; the per-step logs show the cost gone by s+3); floor and copy
# get the same figure at the steps their passes began (bench_pass_starts: train_mlp
# --bench-json's "steps_start_unix_ms" against the passes' start times), minus none's, and
# floor_inrun_ratio = floor's / sync's: an async save's in-run ratio cannot go below it here;
# and, less distorted by the load of a shared machine, two more figures per mid-run save:
#   block_ms = (mode's "save" phase - none's) / S: the time the training thread of rank 0 spent
#              inside the save calls (train_mlp --profile: SaveAsync, WaitSnapshot, Poll, commit),
#              i.e. the stall itself, without the CPU a writer thread takes from the ranks;
#   cpu_ms   = (mode's run_cpu_ms - none's) / S: the CPU the save costs in core-ms, run_cpu_ms
#              being train_mlp --bench-json's process CPU time of the run summed over the ranks
#              (the writer thread's included). A save hides when block_ms is small and a core is
#              free for its cpu_ms. Ranks run with OMPI_MCA_mpi_yield_when_idle=1 (unless set), as in
# step_bench, and --bind-to none: mpirun binds each of up to 2 ranks to one core by default, and
# the writer thread then shares its rank's core with the training (1 rank, 48 steps, a save every
# 12, Zen 5: median step 31.8 ms without saves, 54-61 ms with async saves when bound, 31.9 ms
# unbound; train_mlp warns when it is bound to one core with --async-save). Ends with
# `summary: async_loop_ratio=... inplace_loop_ratio=... (goal <= 0.10) async_cost_ratio=<async_cost_s
# / sync_cost_s> ... async_block_ratio=... sync_cpu_ms=... async_cpu_ms=... inplace_cpu_ms=...
# async_inrun_ratio=... inplace_inrun_ratio=... sync_inrun_ms=... ... none_step_cost_ms=...
# floor_inrun_ratio=... copy_inrun_ratio=... floor_inrun_ms=... copy_inrun_ms=...
# none_rss_mib=... sync_rss_mib=... async_rss_mib=... inplace_rss_mib=...` (the *_rss_mib: peak
# RSS of the largest rank, the median over repeats: the memory each mode costs).
# bench/record.sh save_stall_bench -- bazel-bin/bench/save_stall_bench ... keeps a results file.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${BUILD_WORKSPACE_DIRECTORY:-$(cd "$here/.." && pwd)}"  # the source tree (`bazel run` too)
# shellcheck source=bench/bench_lib.sh
. "$root/bench/bench_lib.sh"

train="${1:?usage: save_stall_bench.sh TRAIN_MLP SAVE_FLOOR [flags]}"
floor_bin="${2:?usage: save_stall_bench.sh TRAIN_MLP SAVE_FLOOR [flags]}"
shift 2
layers=1024,2048,2048,1024
batch=64
world=2
steps=40
save_every=4
repeats=3
while [ $# -gt 0 ]; do
  case "$1" in
    --layers) layers="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --world) world="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --save-every) save_every="$2"; shift 2 ;;
    --repeats) repeats="$2"; shift 2 ;;
    *) echo "save_stall_bench: unknown flag $1" >&2; exit 2 ;;
  esac
done
if [ "$save_every" -lt 1 ] || [ "$steps" -le "$save_every" ]; then
  echo "save_stall_bench: need 1 <= --save-every < --steps" >&2
  exit 2
fi
saves=$(( (steps - 1) / save_every ))  # mid-run saves (the final one is common to every mode)
work="$(mktemp -d "${TMPDIR:-/tmp}/save_stall_bench.XXXXXX")"
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1

# floor/copy: starts one save_floor per rank, passes every K+1 steps of this repeat's none run
# (none runs first: its JSON line in none.json, its wall time the last of `none`), over that
# run's wall time; appends their PIDs to the caller's `floors`.
start_floors() {  # mode
  local line bytes period passes start r copy=()
  [ "$1" = copy ] && copy=(--copy)
  line="$(cat "$work/none.json")"
  bytes="$(bench_field "$line" state_bytes_per_rank)"
  period="$(awk -v m="$(bench_field "$line" step_ms)" -v k="$save_every" 'BEGIN{print m*(k+1)}')"
  passes="$(awk -v w="${none[-1]}" -v p="$period" 'BEGIN{print int(w*1000/p)+2}')"
  start=$(($(date +%s%3N) + 100))
  rm -rf "$work/floor" && mkdir -p "$work/floor"
  for r in $(seq 0 $((world - 1))); do
    "$floor_bin" --bytes "$bytes" --dir "$work/floor" --start-unix-ms "$start" --period-ms "$period" \
      --passes "$passes" "${copy[@]}" >"$work/floor/r$r.json" \
      2>"$work/floor/r$r.err" &
    floors+=($!)
  done
}

run() {  # mode -> "wall_seconds run_cpu_ms save_phase_ms loop_ms step_cost_ms peak_rss_mib"
  local mode="$1" extra=() floors=()
  case "$mode" in
    sync) extra=(--save-every "$save_every") ;;
    async) extra=(--save-every "$save_every" --async-save) ;;
    inplace) extra=(--save-every "$save_every" --async-save --async-snapshot in-place) ;;
    floor|copy) start_floors "$mode" ;;
  esac
  rm -rf "$work/ckpt"
  local t0 t1
  t0="$(date +%s.%N)"
  OMPI_MCA_mpi_yield_when_idle="${OMPI_MCA_mpi_yield_when_idle:-1}" \
    mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$world" "$train" --layers "$layers" \
    --batch "$batch" --optim adamw --ema 0.999,0.9999 --steps "$steps" --log-every 0 \
    --bench-json --profile --ckpt-dir "$work/ckpt" --keep 2 "${extra[@]}" >"$work/log" 2>&1 \
    || { echo "save_stall_bench: train_mlp ($mode) failed:" >&2; tail -20 "$work/log" >&2; exit 1; }
  t1="$(date +%s.%N)"
  local p
  for p in "${floors[@]}"; do
    wait "$p" || { echo "save_floor failed:" >&2; cat "$work"/floor/*.err >&2; exit 1; }
  done
  # Rank 0's output (mpirun's rank tags stripped): the JSON line and the profile's "save" row.
  local out line
  out="$(sed 's/^\[[0-9,]*\]<stdout>://' "$work/log")"
  line="$({ grep '^{' <<<"$out" || echo '{}'; } | tail -1)"
  [ "$mode" = none ] && echo "$line" >"$work/none.json"  # start_floors' schedule
  local at=()  # the steps the floor passes began at (default: the saves' steps)
  [ ${#floors[@]} -gt 0 ] && at=("$(bench_pass_starts "$save_every" "$work"/floor/r*.json <<<"$line")")
  # A missing figure ("na", "") reads 0, but a missing step cost stays "na" (medians skip it).
  awk -v a="$t0" -v b="$t1" -v c="$(bench_field "$line" run_cpu_ms)" \
    -v d="$(awk '$1 == "save" {print $2}' <<<"$out" | tail -1)" \
    -v e="$(bench_field "$line" loop_ms)" -v f="$(bench_save_step_cost "$save_every" "${at[@]}" <<<"$line")" \
    -v g="$(bench_field_max "$line" peak_rss_mib)" \
    'function z(x) { return x == "na" || x == "" ? 0 : x }
     BEGIN { printf "%.3f %.1f %.1f %.1f %s %.1f", b-a, z(c), z(d), z(e),
             (f == "na" || f == "" ? "na" : sprintf("%.2f", f)), z(g) }'
}

echo "# save_stall_bench: MLP $layers, batch $batch, $world ranks, $steps steps, save every $save_every ($saves mid-run saves), $repeats repeats, $(nproc --all) cores"
none=() sync=() async=() inplace=() none_cpu=() sync_cpu=() async_cpu=() inplace_cpu=()
none_blk=() sync_blk=() async_blk=() inplace_blk=() none_loop=() sync_loop=() async_loop=()
inplace_loop=() none_stc=() sync_stc=() async_stc=() inplace_stc=() floor_stc=() copy_stc=()
none_rss=() sync_rss=() async_rss=() inplace_rss=() floor_rss=() copy_rss=()
for _ in $(seq "$repeats"); do
  for mode in none sync async inplace floor copy; do
    figures="$(run "$mode")" || exit 1
    read -r wall cpu blk loop stc rss <<<"$figures"
    eval "$mode+=($wall) ${mode}_cpu+=($cpu) ${mode}_blk+=($blk) ${mode}_loop+=($loop)"
    eval "${mode}_stc+=($stc) ${mode}_rss+=($rss)"
  done
done
echo "#   runs (s): none ${none[*]} | sync ${sync[*]} | async ${async[*]} | inplace ${inplace[*]}"
echo "#   run CPU (ms, all ranks): none ${none_cpu[*]} | sync ${sync_cpu[*]} | async ${async_cpu[*]} | inplace ${inplace_cpu[*]}"
echo "#   save phase (ms, rank 0): none ${none_blk[*]} | sync ${sync_blk[*]} | async ${async_blk[*]} | inplace ${inplace_blk[*]}"
echo "#   training loop (ms, rank 0): none ${none_loop[*]} | sync ${sync_loop[*]} | async ${async_loop[*]} | inplace ${inplace_loop[*]}"
echo "#   in-run step cost (ms per save, rank 0): none ${none_stc[*]} | sync ${sync_stc[*]} | async ${async_stc[*]} | inplace ${inplace_stc[*]} | floor ${floor_stc[*]} | copy ${copy_stc[*]}"
echo "#   peak RSS (MiB, the largest rank): none ${none_rss[*]} | sync ${sync_rss[*]} | async ${async_rss[*]} | inplace ${inplace_rss[*]}"
echo "#   load: $(uptime | sed 's/.*load/load/')"
n="$(bench_median "${none[@]}")"
s="$(bench_median "${sync[@]}")"
a="$(bench_median "${async[@]}")"
nc="$(bench_median "${none_cpu[@]}")"
sc="$(bench_median "${sync_cpu[@]}")"
ac="$(bench_median "${async_cpu[@]}")"
nb="$(bench_median "${none_blk[@]}")"
sb="$(bench_median "${sync_blk[@]}")"
ab="$(bench_median "${async_blk[@]}")"
# The loop figures pair each mode's run with the no-save run of the same repeat (run a few
# seconds apart, so the machine's drift between repeats cancels): the median over repeats of
# (mode's loop - none's loop).
paired() {  # mode_array_name -> median over repeats of (mode's loop - none's loop)
  local -n xs="$1"
  local d=() i
  for i in "${!xs[@]}"; do d+=("$(awk -v a="${xs[$i]}" -v b="${none_loop[$i]}" 'BEGIN{print a-b}')"); done
  bench_median "${d[@]}"
}
sl="$(paired sync_loop)"
al="$(paired async_loop)"
i="$(bench_median "${inplace[@]}")"
ic="$(bench_median "${inplace_cpu[@]}")"
ib="$(bench_median "${inplace_blk[@]}")"
il="$(paired inplace_loop)"
nst="$(bench_median "${none_stc[@]}")"
sst="$(bench_median "${sync_stc[@]}")"
ast="$(bench_median "${async_stc[@]}")"
ist="$(bench_median "${inplace_stc[@]}")"
fst="$(bench_median "${floor_stc[@]}")"
cst="$(bench_median "${copy_stc[@]}")"
# Peak RSS per rank (the largest rank's), the median over repeats: what a mode costs in memory.
nr="$(bench_median "${none_rss[@]}")"
sr="$(bench_median "${sync_rss[@]}")"
ar="$(bench_median "${async_rss[@]}")"
ir="$(bench_median "${inplace_rss[@]}")"
awk -v n="$n" -v s="$s" -v a="$a" -v k="$saves" -v nc="$nc" -v scpu="$sc" -v acpu="$ac" \
    -v nb="$nb" -v sblk="$sb" -v ablk="$ab" -v sl="$sl" -v al="$al" \
    -v i="$i" -v icpu="$ic" -v iblk="$ib" -v il="$il" \
    -v nst="$nst" -v sst="$sst" -v ast="$ast" -v ist="$ist" -v fst="$fst" -v cst="$cst" \
    -v nr="$nr" -v sr="$sr" -v ar="$ar" -v ir="$ir" 'BEGIN {
  sc = (s - n) / k; ac = (a - n) / k; ic = (i - n) / k;
  slm = sl / k; alm = al / k; ilm = il / k;
  scm = (scpu - nc) / k; acm = (acpu - nc) / k; icm = (icpu - nc) / k;
  sbm = (sblk - nb) / k; abm = (ablk - nb) / k; ibm = (iblk - nb) / k;
  s_in = sst - nst + sbm; a_in = ast - nst + abm; i_in = ist - nst + ibm;
  # floor, copy: no save calls, nothing blocked; "na" when no pass began inside the loop.
  f_in = fst == "na" ? "na" : sprintf("%.1f", fst - nst);
  c_in = cst == "na" ? "na" : sprintf("%.1f", cst - nst);
  f_r = fst == "na" || s_in <= 0 ? "na" : sprintf("%.3f", f_in / s_in);
  c_r = cst == "na" || s_in <= 0 ? "na" : sprintf("%.3f", c_in / s_in);
  printf "%8s %10s %14s %14s %14s %16s %12s\n", "mode", "wall_s", "per_save_s", "loop_ms_save", "block_ms", "cpu_ms_per_save", "inrun_ms";
  printf "%8s %10.3f %14s %14s %14s %16s %12.1f\n", "none", n, "-", "-", "-", "-", nst;
  printf "%8s %10.3f %14.4f %14.1f %14.1f %16.1f %12.1f\n", "sync", s, sc, slm, sbm, scm, s_in;
  printf "%8s %10.3f %14.4f %14.1f %14.1f %16.1f %12.1f\n", "async", a, ac, alm, abm, acm, a_in;
  printf "%8s %10.3f %14.4f %14.1f %14.1f %16.1f %12.1f\n", "inplace", i, ic, ilm, ibm, icm, i_in;
  printf "%8s %10s %14s %14s %14s %16s %12s\n", "floor", "-", "-", "-", "-", "-", f_in;
  printf "%8s %10s %14s %14s %14s %16s %12s\n", "copy", "-", "-", "-", "-", "-", c_in;
  printf "summary: async_loop_ratio=%.3f inplace_loop_ratio=%.3f async_cost_ratio=%.3f inplace_cost_ratio=%.3f sync_cost_s=%.4f async_cost_s=%.4f none_s=%.3f sync_loop_ms=%.1f async_loop_ms=%.1f inplace_loop_ms=%.1f async_block_ratio=%.3f sync_block_ms=%.1f async_block_ms=%.1f inplace_block_ms=%.1f sync_cpu_ms=%.1f async_cpu_ms=%.1f inplace_cpu_ms=%.1f async_inrun_ratio=%.3f inplace_inrun_ratio=%.3f sync_inrun_ms=%.1f async_inrun_ms=%.1f inplace_inrun_ms=%.1f none_step_cost_ms=%.1f floor_inrun_ratio=%s copy_inrun_ratio=%s floor_inrun_ms=%s copy_inrun_ms=%s none_rss_mib=%.1f sync_rss_mib=%.1f async_rss_mib=%.1f inplace_rss_mib=%.1f\n",
         (slm > 0 ? alm / slm : 0), (slm > 0 ? ilm / slm : 0), (sc > 0 ? ac / sc : 0), (sc > 0 ? ic / sc : 0), sc, ac, n, slm, alm, ilm, (sbm > 0 ? abm / sbm : 0), sbm, abm, ibm, scm, acm, icm, (s_in > 0 ? a_in / s_in : 0), (s_in > 0 ? i_in / s_in : 0), s_in, a_in, i_in, nst, f_r, c_r, f_in, c_in, nr, sr, ar, ir }'
