#!/usr/bin/env bash
# tools/demo.sh [--mlp] [OUT_DIR]: shardema's main job, end to end, on a fresh machine.
#
# The main job (default) trains the GPT, `examples/train_gpt`, on a real text:
#   1. tools/setup.sh installs what is missing;
#   2. bazel build //examples:train_gpt //tools:ckpt;
#   3. trains a 254,592-parameter nanoGPT-shaped transformer (2 blocks, width 96, context 64,
#      byte vocabulary) on the GPL-3 text of Debian's base-files
#      (/usr/share/common-licenses/GPL-3, evaluated on GPL-2) on 2 ranks (mpirun), AdamW with a
#      cosine schedule, three sharded EMA slots (--ema 0.99,0.999 and the power-function slot
#      --ema-sigma-rel 0.05) and asynchronous checkpoints every 100 steps, and kills the job
#      (kill -9 of mpirun and of every rank by pid, waiting until none is left) once the
#      checkpoint of a mid step (>= 300 of 600) is committed;
#   4. resumes once on 3 ranks (the checkpoint is resharded 2 -> 3 while loading) to the end;
#   5. picks the EMA slot with the lowest final eval loss (metrics.jsonl) and exports it to
#      safetensors with `ckpt export`;
#   6. runs `ckpt inspect` and `ckpt verify` on the final checkpoint;
#   7. prints the final eval losses of the live weights and of every EMA slot;
#   8. prints the text the live weights and each EMA slot generate (train_gpt --sample: the same
#      seeded draws for each; bytes that are not printable ASCII are shown as '.');
#   9. plots the eval losses (live and each EMA) and the train loss against the step with gnuplot;
#  10. when python3 has the safetensors package, loads the export with it and lists the tensors.
#
# --mlp runs the smaller example instead, the same path with `examples/train_mlp`: a
# 1.25M-parameter MLP on the synthetic teacher task, 4 ranks killed after the step-160
# checkpoint, resumed on 3, two EMA slots (--ema 0.95,0.99); 9 stages: no samples (stage 8
# above), so the plot and the safetensors load are stages 8 and 9.
#
# Everything goes to OUT_DIR (default: demo_out/ in the repository, demo_out/mlp/ with --mlp;
# its ckpt/ is replaced):
#   ckpt/                  checkpoints (--ckpt-dir) and ckpt/metrics.jsonl
#   train_<W>ranks.log     the killed run;  train_<W'>ranks.log  the resumed run
#   model_<slot>.safetensors   the exported EMA slot
#   samples.txt            (GPT) the generated texts, as train_gpt printed them
#   losses.png             the loss curves;  train_loss.dat, eval_loss.dat  their data
# Exits non-zero, naming the stage, when any stage fails. SHARDEMA_BAZEL_ROOT, when set, is
# passed to bazel as --output_user_root (as in tools/test.sh).
set -uo pipefail
export LC_ALL=C

usage() { echo "usage: tools/demo.sh [--mlp] [OUT_DIR]" >&2; exit 2; }
MODEL=gpt
OUT_ARG=""
for a in "$@"; do
  case "$a" in
    --mlp) MODEL=mlp ;;
    --gpt) MODEL=gpt ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "demo: unknown option '$a'" >&2; usage ;;
    *) [ -z "$OUT_ARG" ] || usage; OUT_ARG="$a" ;;
  esac
done

REPO="$(cd "$(dirname "$0")/.." && pwd)"
cd "$REPO" || exit 1
if [ "$MODEL" = gpt ]; then OUT="${OUT_ARG:-$REPO/demo_out}"; else OUT="${OUT_ARG:-$REPO/demo_out/mlp}"; fi
mkdir -p "$OUT" || { echo "demo: cannot create the output folder '$OUT'" >&2; exit 1; }
OUT="$(cd "$OUT" && pwd)"
CKPT="$OUT/ckpt"

if [ "$MODEL" = gpt ]; then
  # 2 blocks, width 96, 4 heads, context 64, byte vocabulary (256, tied lm_head): 254,592
  # parameters. The global batch (24) divides by both world sizes (2 and 3).
  TARGET=//examples:train_gpt
  BIN_NAME=examples/train_gpt
  DATA=/usr/share/common-licenses/GPL-3       # base-files: on every Debian machine
  EVAL_DATA=/usr/share/common-licenses/GPL-2
  W1=2
  W2=3
  STEPS=600
  KILL_AT=300  # kill the 2-rank job once a checkpoint of this step or later is committed
  SAVE_EVERY=100
  TRAIN_ARGS=(--data "$DATA" --eval-data "$EVAL_DATA" --n-layer 2 --n-head 4 --n-embd 96
              --block-size 64 --batch 24 --steps "$STEPS" --lr 3e-3 --lr-schedule cosine
              --warmup-steps 30 --min-lr 3e-4 --seed 1
              --ema 0.99,0.999 --ema-sigma-rel 0.05 --eval-every 100 --eval-batch 64
              --log-every 50 --sample 300 --temperature 0.8
              --ckpt-dir "$CKPT" --save-every "$SAVE_EVERY" --async-save --keep 2)
  LOSS_NAME="cross-entropy per byte"
  STAGES=10
else
  # 256 -> 1024 -> 768 -> 256 -> 16, 1,251,344 parameters, on the synthetic teacher task.
  # The global batch (48) divides by both world sizes (4 and 3).
  TARGET=//examples:train_mlp
  BIN_NAME=examples/train_mlp
  LAYERS=256,1024,768,256,16
  W1=4
  W2=3
  STEPS=320
  KILL_AT=160  # kill the 4-rank job once a checkpoint of this step or later is committed
  SAVE_EVERY=40
  TRAIN_ARGS=(--layers "$LAYERS" --batch 48 --lr 2e-3 --steps "$STEPS" --seed 1
              --ema 0.95,0.99 --eval-every 20 --log-every 20
              --ckpt-dir "$CKPT" --save-every "$SAVE_EVERY" --async-save --keep 2)
  LOSS_NAME="mse"
  STAGES=9
fi
LOG1="$OUT/train_${W1}ranks.log"
LOG2="$OUT/train_${W2}ranks.log"

STAGE="start"
STAGE_NO=0
started=$(date +%s)
stage() { STAGE_NO=$((STAGE_NO + 1)); STAGE="$STAGE_NO/$STAGES $1"; echo; echo "== $STAGE"; }
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

# The stdout of rank 0 in an mpirun --tag-output log, without the tags.
rank0_stdout() { grep -a '^\[[0-9]*,0\]<stdout>:' "$1" | sed 's/^\[[0-9]*,0\]<stdout>://'; }

echo "demo: the $MODEL job (tools/demo.sh${OUT_ARG:+ $OUT_ARG}$([ "$MODEL" = mlp ] && echo ' --mlp')); outputs in $OUT"

###############################################################################################
stage "setup: tools/setup.sh"
tools/setup.sh || fail "tools/setup.sh failed (see above)"
if [ "$MODEL" = gpt ]; then
  for f in "$DATA" "$EVAL_DATA"; do
    [ -s "$f" ] || fail "no text $f (Debian's base-files package ships it: apt-get install --reinstall base-files)"
  done
fi

###############################################################################################
stage "build: bazel build $TARGET //tools:ckpt"
BAZEL=(bazel)
[ -n "${SHARDEMA_BAZEL_ROOT:-}" ] && BAZEL=(bazel "--output_user_root=$SHARDEMA_BAZEL_ROOT")
"${BAZEL[@]}" build "$TARGET" //tools:ckpt || fail "the build failed (see above)"
BIN="$("${BAZEL[@]}" info bazel-bin 2>/dev/null)" || fail "bazel info bazel-bin failed"
TRAIN="$BIN/$BIN_NAME"
CKPT_TOOL="$BIN/tools/ckpt"
[ -x "$TRAIN" ] && [ -x "$CKPT_TOOL" ] || fail "no $TRAIN or $CKPT_TOOL after the build"
if [ "$MODEL" = mlp ]; then
  params=0
  prev=""
  for d in ${LAYERS//,/ }; do
    [ -n "$prev" ] && params=$((params + prev * d + d))
    prev=$d
  done
  MODEL_DESC="MLP ${LAYERS//,/-} ($params parameters)"
  echo "model: Linear layers $LAYERS, $params parameters"
else
  echo "model: GPT, 2 blocks, 4 heads, width 96, context 64, byte vocabulary (lm_head tied to wte)"
  echo "data:  $DATA ($(wc -c < "$DATA") bytes) for training, $EVAL_DATA ($(wc -c < "$EVAL_DATA") bytes) for evaluation"
fi

###############################################################################################
stage "train on $W1 ranks (async checkpoints every $SAVE_EVERY steps); kill -9 once step >= $KILL_AT is committed"
rm -rf "$CKPT" "$OUT"/model_*.safetensors "$OUT"/samples.txt "$OUT"/losses.png
# setsid: mpirun gets a session of its own (its ranks may still leave it: see the kill below).
setsid tests/mpi_run.sh "$W1" "$TRAIN" "${TRAIN_ARGS[@]}" > "$LOG1" 2>&1 < /dev/null &
job=$!
deadline=$(( $(date +%s) + 300 ))
while [ "$(latest_step)" -lt "$KILL_AT" ]; do
  if ! kill -0 "$job" 2>/dev/null; then
    wait "$job"
    fail "the $W1-rank run ended (exit code $?) before a checkpoint of step >= $KILL_AT was committed; last lines of $LOG1:
$(tail -15 "$LOG1")"
  fi
  if [ "$(date +%s)" -gt "$deadline" ]; then
    kill -9 -- "-$job" $(descendants "$job") $(demo_pids) 2>/dev/null
    fail "no checkpoint of step >= $KILL_AT after 300 s; see $LOG1"
  fi
  sleep 0.2
done
committed="$(latest_step)"
# Under OpenMPI 4.1 every rank runs in a process group of its own, so killing mpirun's group is not
# enough: collect the whole job (mpirun's descendants, and every process whose command line names
# this checkpoint folder), kill each by pid, and wait until none is left before resuming (the
# resumed run would otherwise meet the old ranks still saving, or their --ckpt-dir lock).
# (stderr off in the block: bash's own "Killed" notice of the background job.)
job_pids="$(echo $(descendants "$job") $(demo_pids) | tr ' ' '\n' | sort -nu | tr '\n' ' ')"
{
  kill -9 -- "-$job"
  kill -9 $job_pids
  deadline=$(( $(date +%s) + 60 ))
  while :; do
    left="$(alive $job_pids $(demo_pids))"
    [ -z "$left" ] && break
    [ "$(date +%s)" -gt "$deadline" ] && break
    kill -9 $left
    sleep 0.2
  done
  [ -z "$left" ] && wait "$job"
} 2>/dev/null
[ -z "$left" ] || fail "processes of the killed job are still running after 60 s: $left"
last_logged="$(grep -aoE 'step [0-9]+/'"$STEPS" "$LOG1" | tail -1 | grep -oE '[0-9]+' | head -1)"
echo "$(grep -aoE '[0-9]+ parameters in [0-9]+ units over [0-9]+ rank.*' "$LOG1" | head -1)"
echo "killed the $W1-rank job (kill -9 of pids ${job_pids% }) after the checkpoint of step $committed was committed"
echo "(the $W1-rank run had logged up to step ${last_logged:-none}; the resume redoes every step after $committed)"
echo "checkpoint root now: $(ls -A "$CKPT" | tr '\n' ' ')"
[ "$committed" -lt "$STEPS" ] || fail "the run reached the last step before it was killed"
if [ "$MODEL" = gpt ]; then
  params="$(grep -aoE 'train_gpt: [0-9]+ parameters' "$LOG1" | head -1 | grep -oE '[0-9]+')"
  [ -n "$params" ] || fail "no 'train_gpt: N parameters' line in $LOG1"
  MODEL_DESC="GPT 2x96, context 64 ($params parameters) on GPL-3"
fi

###############################################################################################
stage "resume on $W2 ranks (the $W1-rank checkpoint is resharded while loading)"
tests/mpi_run.sh "$W2" "$TRAIN" "${TRAIN_ARGS[@]}" --resume > "$LOG2" 2>&1 < /dev/null \
  || fail "the resumed $W2-rank run failed (exit code $?); last lines of $LOG2:
$(tail -15 "$LOG2")"
resume_line="$(grep -a -m1 'resumed from' "$LOG2")"
[ -n "$resume_line" ] || fail "no 'resumed from' line in $LOG2"
echo "${resume_line#*] }"
grep -q 'resharded' <<<"$resume_line" || fail "the resume did not reshard: $resume_line"
final_step="$(latest_step)"
[ "$final_step" = "$STEPS" ] || fail "the latest checkpoint is step $final_step, expected $STEPS"
# What rank 0 printed, up to the samples (stage 'samples' shows those).
rank0_stdout "$LOG2" | sed '/^---- sample/,$d'

###############################################################################################
stage "export the best EMA slot with ckpt export"
METRICS="$CKPT/metrics.jsonl"
[ -s "$METRICS" ] || fail "no $METRICS"
# Eval lines: {"step":S,"eval":{"live":z,"ema_0.99":x,...}} -> "S,"live":z,"ema_0.99":x,...".
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
stage "ckpt inspect and ckpt verify of the final checkpoint"
"$CKPT_TOOL" inspect "$CKPT" || fail "ckpt inspect failed (exit code $?)"
echo
"$CKPT_TOOL" verify --all "$CKPT" || fail "ckpt verify failed (exit code $?)"

###############################################################################################
stage "final eval losses (step $eval_step, from $METRICS)"
# live first, then the EMA slots in the order metrics.jsonl lists them.
order=()
for i in "${!names[@]}"; do [ "${names[$i]}" = live ] && order+=("$i"); done
for i in "${!names[@]}"; do [ "${names[$i]}" = live ] || order+=("$i"); done
printf '  %-12s %s\n' "weights" "eval loss ($LOSS_NAME)"
for i in "${order[@]}"; do
  note=""
  [ "${names[$i]}" = "$best" ] && note="<- best EMA, exported to $(basename "$EXPORT")"
  v="$(printf '%.6g' "${values[$i]}")"
  if [ -n "$note" ]; then printf '  %-12s %-12s %s\n' "${names[$i]}" "$v" "$note"; else printf '  %-12s %s\n' "${names[$i]}" "$v"; fi
done

###############################################################################################
if [ "$MODEL" = gpt ]; then
  stage "samples from the live weights and each EMA slot (train_gpt --sample 300 --temperature 0.8)"
  rank0_stdout "$LOG2" | sed -n '/^---- sample/,$p' | sed '/^checkpoint: /,$d' > "$OUT/samples.txt"
  grep -q '^---- sample (live) ----' "$OUT/samples.txt" || fail "no '---- sample (live) ----' in the output of the resumed run ($LOG2)"
  for n in "${names[@]}"; do
    grep -qF -- "---- sample ($n) ----" "$OUT/samples.txt" || fail "no sample of '$n' in the output of the resumed run ($LOG2)"
  done
  # The weights' own bytes: anything but printable ASCII, tab and newline shown as '.'.
  tr -c '[:print:]\t\n' '.' < "$OUT/samples.txt"
fi

###############################################################################################
stage "loss curves with gnuplot"
command -v gnuplot >/dev/null || fail "gnuplot is not installed (tools/setup.sh installs gnuplot-nox)"
grep '"loss"' "$METRICS" | sed -E 's/.*"step":([0-9]+).*"loss":([^,}]*).*/\1 \2/' > "$OUT/train_loss.dat"
[ -s "$OUT/train_loss.dat" ] || fail "no train loss lines in $METRICS"
{
  echo "# step ${names[*]}"
  while IFS=',' read -r step rest; do
    echo "$step $(sed -E 's/"[^"]*"://g; s/,/ /g' <<<"$rest")"
  done <<<"$eval_lines"
} > "$OUT/eval_loss.dat"
resumed_at="$(grep -oE 'at step [0-9]+' <<<"$resume_line" | grep -oE '[0-9]+')"
[ -n "$resumed_at" ] || fail "no 'at step N' in the resume line: $resume_line"
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
set multiplot layout 2,1 title "shardema demo: $MODEL_DESC; $W1 ranks, kill -9 after the step-$committed checkpoint, resumed on $W2 ranks"
set grid
set logscale y
set xlabel 'optimizer step'
set xrange [0:$STEPS]
set arrow 1 from $resumed_at, graph 0 to $resumed_at, graph 1 nohead dt 2 lc rgb 'gray40'
set label 1 'resumed on $W2 ranks' at $resumed_at, graph 0.92 offset 0.5,0 tc rgb 'gray30'
set ylabel 'eval loss ($LOSS_NAME)'
set title 'eval loss: live weights vs sharded EMA slots'
plot $plot_eval
set ylabel 'train loss ($LOSS_NAME)'
set title 'train loss (global batch mean)'
plot '$OUT/train_loss.dat' using 1:2 with lines lw 1.5 lc rgb '#1f77b4' title 'train loss'
unset multiplot
EOF
[ -s "$OUT/losses.png" ] || fail "gnuplot wrote no $OUT/losses.png: $(cat "$OUT/gnuplot.log")"
echo "wrote $OUT/losses.png"

###############################################################################################
stage "load the export with python safetensors (optional)"
PY="${SHARDEMA_PYTHON:-python3}"
if command -v "$PY" >/dev/null 2>&1 && "$PY" -c "import safetensors, numpy" 2>/dev/null; then
  "$PY" - "$EXPORT" <<'EOF' || fail "python safetensors could not load the export"
import re, sys
from safetensors import safe_open
# One line per tensor, the blocks' tensors folded into one line per name (h.* and a count).
with safe_open(sys.argv[1], framework="numpy") as f:
    meta = f.metadata() or {}
    print("metadata:", ", ".join(f"{k}={v}" for k, v in sorted(meta.items())))
    names = sorted(f.keys())
    rows, total = {}, 0
    for name in names:
        t = f.get_tensor(name)
        total += t.size
        key = (re.sub(r"\.h\.[0-9]+\.", ".h.*.", name), str(list(t.shape)), str(t.dtype))
        rows[key] = rows.get(key, 0) + 1
    for (name, shape, dtype), n in rows.items():
        print(f"  {name:36s} {shape:12s} {dtype}" + (f"  (x{n})" if n > 1 else ""))
    tied = "lm_head.weight" in names and "transformer.wte.weight" in names
    print(f"  {len(names)} tensors, {total} values"
          + (" (lm_head.weight is the tied copy of transformer.wte.weight)" if tied else ""))
EOF
else
  echo "skipped: $PY with the safetensors and numpy packages is not available"
fi

echo
echo "demo: final eval loss ($LOSS_NAME) at step $eval_step after the kill on $W1 ranks and the resume on $W2:"
for i in "${order[@]}"; do
  printf '  %-12s %s%s\n' "${names[$i]}" "$(printf '%.6g' "${values[$i]}")" \
    "$([ "${names[$i]}" = "$best" ] && echo "   <- best EMA, exported")"
done
echo "demo: OK in $(( $(date +%s) - started )) s; outputs in $OUT:"
if [ "$MODEL" = gpt ]; then
  echo "  losses.png, model_$best.safetensors, samples.txt, ckpt/ (checkpoints, metrics.jsonl), $(basename "$LOG1"), $(basename "$LOG2")"
else
  echo "  losses.png, model_$best.safetensors, ckpt/ (checkpoints, metrics.jsonl), $(basename "$LOG1"), $(basename "$LOG2")"
fi
