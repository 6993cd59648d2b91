#!/usr/bin/env bash
# tools/demo.sh [OUT_DIR]: shardema's main job, end to end, on a fresh machine.
#
#   1. tools/setup.sh installs what is missing;
#   2. bazel build //examples:train_mlp //tools:ckpt;
#   3. trains a 1.25M-parameter MLP on 4 ranks (mpirun) with two sharded EMA slots and
#      asynchronous checkpoints, and kills the job (kill -9 of mpirun and of every rank by pid,
#      waiting until none is left) once a
#      checkpoint at a mid step is committed;
#   4. resumes once on 3 ranks (the checkpoint is resharded 4 -> 3 while loading) to the end;
#   5. picks the EMA slot with the lowest final eval loss (metrics.jsonl) and exports it to
#      safetensors with `ckpt export`;
#   6. runs `ckpt inspect` and `ckpt verify` on the final checkpoint;
#   7. prints the final eval losses of the live weights and of every EMA slot;
#   8. plots the eval losses (live and each EMA) and the train loss against the step with gnuplot;
#   9. when python3 has the safetensors package, loads the export with it and lists the tensors.
#
# Everything goes to OUT_DIR (default: demo_out/ in the repository; its ckpt/ is replaced):
#   ckpt/                  checkpoints (--ckpt-dir) and ckpt/metrics.jsonl
#   train_4ranks.log       the killed 4-rank run;  train_3ranks.log  the resumed run
#   model_<slot>.safetensors   the exported EMA slot
#   losses.png             the loss curves;  train_loss.dat, eval_loss.dat  their data
# Exits non-zero, naming the stage, when any stage fails. SHARDEMA_BAZEL_ROOT, when set, is
# passed to bazel as --output_user_root (as in tools/test.sh).
set -uo pipefail
export LC_ALL=C

REPO="$(cd "$(dirname "$0")/.." && pwd)"
cd "$REPO"
OUT="${1:-$REPO/demo_out}"
mkdir -p "$OUT" || { echo "demo: cannot create the output folder '$OUT'" >&2; exit 1; }
OUT="$(cd "$OUT" && pwd)"
CKPT="$OUT/ckpt"

# The job: 256 -> 1024 -> 768 -> 256 -> 16, 1,251,344 parameters, on the synthetic teacher task.
# The global batch (48) divides by both world sizes (4 and 3).
LAYERS=256,1024,768,256,16
STEPS=320
KILL_AT=160  # kill the 4-rank job once a checkpoint of this step or later is committed
TRAIN_ARGS=(--layers "$LAYERS" --batch 48 --lr 2e-3 --steps "$STEPS" --seed 1
            --ema 0.95,0.99 --eval-every 20 --log-every 20
            --ckpt-dir "$CKPT" --save-every 40 --async-save --keep 2)

STAGE="start"
started=$(date +%s)
stage() { STAGE="$1"; echo; echo "== $1"; }
fail() { echo "demo: FAILED in stage '$STAGE': $*" >&2; exit 1; }

# The step the root's `latest` names (-1 when there is none yet).
latest_step() {
  local name
  name="$(tr -d '[:space:]' 2>/dev/null < "$CKPT/latest")" || { echo -1; return; }
  case "$name" in
    step_[0-9]*) echo $((10#${name#step_})) ;;
    *) echo -1 ;;
  esac
}

# PID and all its descendants (by the parent pid, field 4 of /proc/PID/stat).
descendants() {
  local all=" $1 " changed=1 d p ppid
  while [ "$changed" = 1 ]; do
    changed=0
    for d in /proc/[0-9]*; do
      p="${d#/proc/}"
      case "$all" in *" $p "*) continue ;; esac
      ppid="$(sed -E 's/^.*\) [A-Za-z] ([0-9]+) .*/\1/' "$d/stat" 2>/dev/null)" || continue
      case "$all" in *" $ppid "*) all="$all$p "; changed=1 ;; esac
    done
  done
  echo $all
}

# The given pids that still run (exist and are not zombies).
alive() {
  local p state
  for p in "$@"; do
    state="$(sed -E 's/^.*\) ([A-Za-z]) .*/\1/' "/proc/$p/stat" 2>/dev/null)" || continue
    [ -n "$state" ] && [ "$state" != Z ] && echo "$p"
  done
}

# Pids of processes whose command line mentions the checkpoint folder (this demo's ranks).
demo_pids() {
  local d
  for d in /proc/[0-9]*; do
    if tr '\0' ' ' 2>/dev/null < "$d/cmdline" | grep -qF -- "--ckpt-dir $CKPT "; then
      echo "${d#/proc/}"
    fi
  done
}

###############################################################################################
stage "1/9 setup: tools/setup.sh"
tools/setup.sh || fail "tools/setup.sh failed (see above)"

###############################################################################################
stage "2/9 build: bazel build //examples:train_mlp //tools:ckpt"
BAZEL=(bazel)
[ -n "${SHARDEMA_BAZEL_ROOT:-}" ] && BAZEL=(bazel "--output_user_root=$SHARDEMA_BAZEL_ROOT")
"${BAZEL[@]}" build //examples:train_mlp //tools:ckpt || fail "the build failed (see above)"
BIN="$("${BAZEL[@]}" info bazel-bin 2>/dev/null)" || fail "bazel info bazel-bin failed"
TRAIN="$BIN/examples/train_mlp"
CKPT_TOOL="$BIN/tools/ckpt"
[ -x "$TRAIN" ] && [ -x "$CKPT_TOOL" ] || fail "no $TRAIN or $CKPT_TOOL after the build"
params=0
prev=""
for d in ${LAYERS//,/ }; do
  [ -n "$prev" ] && params=$((params + prev * d + d))
  prev=$d
done
echo "model: Linear layers $LAYERS, $params parameters"

###############################################################################################
stage "3/9 train on 4 ranks (async checkpoints every 40 steps); kill -9 once step >= $KILL_AT is committed"
rm -rf "$CKPT" "$OUT"/model_*.safetensors
# setsid: mpirun gets a session of its own (its ranks may still leave it: see the kill below).
setsid tests/mpi_run.sh 4 "$TRAIN" "${TRAIN_ARGS[@]}" > "$OUT/train_4ranks.log" 2>&1 < /dev/null &
job=$!
deadline=$(( $(date +%s) + 300 ))
while [ "$(latest_step)" -lt "$KILL_AT" ]; do
  if ! kill -0 "$job" 2>/dev/null; then
    wait "$job"
    fail "the 4-rank run ended (exit code $?) before a checkpoint of step >= $KILL_AT was committed; last lines of $OUT/train_4ranks.log:
$(tail -15 "$OUT/train_4ranks.log")"
  fi
  if [ "$(date +%s)" -gt "$deadline" ]; then
    kill -9 -- "-$job" 2>/dev/null
    fail "no checkpoint of step >= $KILL_AT after 300 s; see $OUT/train_4ranks.log"
  fi
  sleep 0.2
done
committed="$(latest_step)"
# Under OpenMPI 4.1 every rank runs in a process group of its own, so killing mpirun's group is not
# enough: collect the whole job (mpirun's descendants, and every process whose command line names
# this checkpoint folder), kill each by pid, and wait until none is left before resuming (the
# resumed run would otherwise meet the old ranks still saving, or their --ckpt-dir lock).
job_pids="$(descendants "$job") $(demo_pids)"
kill -9 -- "-$job" 2>/dev/null
kill -9 $job_pids 2>/dev/null
deadline=$(( $(date +%s) + 60 ))
while :; do
  left="$(alive $job_pids $(demo_pids))"
  [ -z "$left" ] && break
  [ "$(date +%s)" -gt "$deadline" ] && fail "processes of the killed job are still running after 60 s: $left"
  kill -9 $left 2>/dev/null
  sleep 0.2
done
wait "$job" 2>/dev/null
last_logged="$(grep -oE 'step [0-9]+/'"$STEPS" "$OUT/train_4ranks.log" | tail -1 | grep -oE '[0-9]+' | head -1)"
echo "killed the 4-rank job (kill -9 of pids $(echo $job_pids | tr -s ' ')) after the checkpoint of step $committed was committed"
echo "(the 4-rank run had logged up to step ${last_logged:-none}; the resume redoes every step after $committed)"
echo "checkpoint root now: $(ls -A "$CKPT" | tr '\n' ' ')"
[ "$committed" -lt "$STEPS" ] || fail "the run reached the last step before it was killed"

###############################################################################################
stage "4/9 resume on 3 ranks (the 4-rank checkpoint is resharded while loading)"
tests/mpi_run.sh 3 "$TRAIN" "${TRAIN_ARGS[@]}" --resume > "$OUT/train_3ranks.log" 2>&1 \
  || fail "the resumed 3-rank run failed (exit code $?); last lines of $OUT/train_3ranks.log:
$(tail -15 "$OUT/train_3ranks.log")"
resume_line="$(grep -m1 'resumed from' "$OUT/train_3ranks.log")"
[ -n "$resume_line" ] || fail "no 'resumed from' line in $OUT/train_3ranks.log"
echo "${resume_line#*] }"
grep -q 'resharded' <<<"$resume_line" || fail "the resume did not reshard: $resume_line"
final_step="$(latest_step)"
[ "$final_step" = "$STEPS" ] || fail "the latest checkpoint is step $final_step, expected $STEPS"
grep -E '<stdout>' "$OUT/train_3ranks.log" | sed 's/^\[[0-9,]*\]<stdout>://'

###############################################################################################
stage "5/9 export the best EMA slot with ckpt export"
METRICS="$CKPT/metrics.jsonl"
[ -s "$METRICS" ] || fail "no $METRICS"
# Eval lines: {"step":S,"eval":{"ema_0.95":x,"ema_0.99":y,"live":z}} -> "S x y z" and the names.
eval_lines="$(grep '"eval"' "$METRICS" | sed -E 's/.*"step":([0-9]+).*"eval":\{([^}]*)\}.*/\1,\2/')"
[ -n "$eval_lines" ] || fail "no eval lines in $METRICS"
last_eval="$(tail -1 <<<"$eval_lines")"
eval_step="${last_eval%%,*}"
[ "$eval_step" = "$STEPS" ] || fail "the last evaluation in $METRICS is at step $eval_step, expected $STEPS"
names=()
values=()
IFS=',' read -r -a pairs <<<"${last_eval#*,}"
for kv in "${pairs[@]}"; do
  k="${kv%%:*}"; k="${k//\"/}"
  names+=("$k")
  values+=("${kv#*:}")
done
best=""
best_loss=""
for i in "${!names[@]}"; do
  case "${names[$i]}" in ema*) ;; *) continue ;; esac
  if [ -z "$best" ] || awk -v a="${values[$i]}" -v b="$best_loss" 'BEGIN { exit !(a + 0 < b + 0) }'; then
    best="${names[$i]}"
    best_loss="${values[$i]}"
  fi
done
[ -n "$best" ] || fail "no EMA slot in the last evaluation of $METRICS: $last_eval"
EXPORT="$OUT/model_$best.safetensors"
echo "best EMA slot: $best (final eval loss $best_loss)"
"$CKPT_TOOL" export "$CKPT" --slot "$best" --dtype f32 -o "$EXPORT" || fail "ckpt export failed (exit code $?)"

###############################################################################################
stage "6/9 ckpt inspect and ckpt verify of the final checkpoint"
"$CKPT_TOOL" inspect "$CKPT" || fail "ckpt inspect failed (exit code $?)"
echo
"$CKPT_TOOL" verify --all "$CKPT" || fail "ckpt verify failed (exit code $?)"

###############################################################################################
stage "7/9 final eval losses (step $eval_step, from $METRICS)"
# live first, then the EMA slots in the order metrics.jsonl lists them.
order=()
for i in "${!names[@]}"; do [ "${names[$i]}" = live ] && order+=("$i"); done
for i in "${!names[@]}"; do [ "${names[$i]}" = live ] || order+=("$i"); done
printf '  %-10s %s\n' "weights" "eval loss"
for i in "${order[@]}"; do
  note=""
  [ "${names[$i]}" = "$best" ] && note="<- best EMA, exported to $(basename "$EXPORT")"
  v="$(printf '%.6g' "${values[$i]}")"
  if [ -n "$note" ]; then printf '  %-10s %-12s %s\n' "${names[$i]}" "$v" "$note"; else printf '  %-10s %s\n' "${names[$i]}" "$v"; fi
done

###############################################################################################
stage "8/9 loss curves with gnuplot"
command -v gnuplot >/dev/null || fail "gnuplot is not installed (tools/setup.sh installs gnuplot-nox)"
grep '"loss"' "$METRICS" | sed -E 's/.*"step":([0-9]+).*"loss":([^,}]*).*/\1 \2/' > "$OUT/train_loss.dat"
{
  echo "# step ${names[*]}"
  while IFS=',' read -r step rest; do
    echo "$step $(sed -E 's/"[^"]*"://g; s/,/ /g' <<<"$rest")"
  done <<<"$eval_lines"
} > "$OUT/eval_loss.dat"
resumed_at="$(grep -oE 'at step [0-9]+' <<<"$resume_line" | grep -oE '[0-9]+')"
terminal="png size 1000,800"
gnuplot -e "set terminal" 2>&1 | grep -q pngcairo && terminal="pngcairo size 1000,800 font ',10'"
plot_eval=""
for i in "${!names[@]}"; do
  title="${names[$i]}"
  [ "$title" = "live" ] && title="live weights"
  [ "${names[$i]}" = "$best" ] && title="$title (best EMA)"
  plot_eval+="${plot_eval:+, }'$OUT/eval_loss.dat' using 1:$((i + 2)) with linespoints pt 7 ps 0.6 lw 2 title '${title//_/\\_}'"
done
gnuplot > "$OUT/gnuplot.log" 2>&1 <<EOF || fail "gnuplot failed: $(cat "$OUT/gnuplot.log")"
set terminal $terminal
set output '$OUT/losses.png'
set multiplot layout 2,1 title "shardema demo: MLP ${LAYERS//,/-} ($params parameters); 4 ranks, kill -9 after the step-$committed checkpoint, resumed on 3 ranks"
set grid
set logscale y
set xlabel 'optimizer step'
set xrange [0:$STEPS]
set arrow 1 from $resumed_at, graph 0 to $resumed_at, graph 1 nohead dt 2 lc rgb 'gray40'
set label 1 'resumed on 3 ranks' at $resumed_at, graph 0.92 offset 0.5,0 tc rgb 'gray30'
set ylabel 'eval loss (mse)'
set title 'eval loss: live weights vs sharded EMA slots'
plot $plot_eval
set ylabel 'train loss (mse)'
set title 'train loss (global batch mean)'
plot '$OUT/train_loss.dat' using 1:2 with lines lw 1.5 lc rgb '#1f77b4' title 'train loss'
unset multiplot
EOF
[ -s "$OUT/losses.png" ] || fail "gnuplot wrote no $OUT/losses.png: $(cat "$OUT/gnuplot.log")"
echo "wrote $OUT/losses.png"

###############################################################################################
stage "9/9 load the export with python safetensors (optional)"
PY="${SHARDEMA_PYTHON:-python3}"
if command -v "$PY" >/dev/null 2>&1 && "$PY" -c "import safetensors, numpy" 2>/dev/null; then
  "$PY" - "$EXPORT" <<'EOF' || fail "python safetensors could not load the export"
import sys
from safetensors import safe_open
with safe_open(sys.argv[1], framework="numpy") as f:
    meta = f.metadata()
    print("metadata:", ", ".join(f"{k}={v}" for k, v in sorted(meta.items())))
    total = 0
    for name in sorted(f.keys()):
        t = f.get_tensor(name)
        total += t.size
        print(f"  {name:18s} {str(list(t.shape)):14s} {t.dtype}")
    print(f"  {total} parameters")
EOF
else
  echo "skipped: $PY with the safetensors and numpy packages is not available"
fi

echo
echo "demo: OK in $(( $(date +%s) - started )) s; outputs in $OUT:"
echo "  losses.png, model_$best.safetensors, ckpt/ (checkpoints, metrics.jsonl), train_4ranks.log, train_3ranks.log"
