#!/usr/bin/env bash
# gpt_autocast_parity: issue #31 item 3's acceptance check. train_gpt --precision bf16 (on the
# GPU: PyTorch-autocast-like bf16 GEMMs, examples/CUDA_MODELS.md "Precision") against PyTorch
# torch.autocast(dtype=torch.bfloat16) on the same model, tokens and optimizer: the per-step
# training losses of both within a stated tolerance over --steps (>= 50) steps; and, so that a
# gross bug cannot hide in that tolerance, train_gpt --precision fp32 against PyTorch without
# autocast (TF32 off on both sides) within a much tighter one.
#
#   bench/gpt_autocast_parity.sh [--train-gpt PATH] [--peer PATH] [--device cuda|cpu]
#       [--n-layer 4] [--n-head 4] [--n-embd 128] [--block-size 128] [--vocab-size 512]
#       [--batch 8] [--steps 60] [--lr 3e-3] [--warmup-steps 5] [--min-lr 3e-4]
#       [--tol-bf16 2e-2] [--tol-f32 1e-3] [--ours-flags ""] [--ours-timeout 60]
#       [--torch-timeout 90] [--json FILE] [--build TEXT]
#   (tools/gpu_session.sh's gpt_bench stage runs it from its package: tools/gpu_check.sh's
#   gpt_autocast_parity check, on the GPU with the defaults.)
#
# --train-gpt: a build of //examples:train_gpt (default bazel-bin/examples/train_gpt of the
# repository above this script, built, with --config=cuda for --device cuda, when missing).
# --peer: default bench/peer/torch_gpt_parity.py beside this script (it imports
# examples/testdata/gpt_torch.py and safetensors_io.py and bench/peer/gpt_flops.py by their
# paths), run by $PYTHON (default python3), which must import torch and numpy: without them
# the script exits 3 (nothing compared). --device cpu: the dry run without a GPU (a CPU
# train_gpt, torch on the CPU; see "The CPU dry run" below). --ours-flags: extra train_gpt
# flags for both of its runs (e.g. "--compute-threads 2" on the CPU). --json FILE: also write
# the results file (name, date, card, driver, commit, build, command, summary, every loss).
#
# The run (the defaults: a small GPT that runs in seconds on a GPU):
#   tokens: a deterministic uint16 .bin of (B x S + 1) x T + 1 tokens (every step reads fresh
#     ones) from a seeded Markov chain over 96 "words" of 3 to 8 tokens in [1, V) (so the loss
#     falls well below ln V within the steps and the curves have a shape to compare; the first
#     token is 0, so the file never reads as an llm.c shard), and a T + 1 token eval file (ours
#     evaluates once at the end; untimed, unused);
#   init: the PyTorch twin's nanoGPT init (torch.manual_seed(0) on the CPU), its padded
#     vocabulary's rows 0, saved as safetensors by the peer (our --init reads PyTorch's names and
#     shapes, lm_head.weight equal to wte) before any training;
#   ours: train_gpt --device D --precision fp32, then bf16, at one rank, --init that file,
#     --data-order sequential (step s's sequence j starts at ((s*B + j)*T) mod (N - T)), AdamW
#     betas 0.9,0.95, eps 1e-8, weight decay 0.1 on the >= 2-D parameters, --clip-norm 1,
#     --lr-schedule cosine from --lr to --min-lr after --warmup-steps of linear warmup, no EMA;
#     the per-step losses from --metrics (metrics.jsonl: one line per step);
#   torch: the peer, the same steps from the same state, reading the same sequences, with
#     torch.optim.AdamW of the same hyperparameters and groups, clip_grad_norm_, the LR of
#     optim/lr_schedule.h set per step; fp32 (TF32 off), then under
#     torch.autocast(D, dtype=torch.bfloat16) (the logits taken as f32 for the loss).
# Compared: per step |ours - torch| / |torch| of the training loss, the max over the steps.
#
# The tolerances. f32 (--tol-f32, 1e-3): both sides do the same arithmetic in f32 and differ
# only in summation order (different GEMM kernels, our fused attention and cross-entropy); the
# CPU golden (examples/gpt_trainer_test.cc) asks for 2e-5 over 12 steps, and the CPU dry run
# below is at f32 rounding (gpt_autocast_parity_test asks for < 1e-5 over 50 steps). 1e-3
# leaves the GPU's kernels and 60 steps of Adam room to amplify such differences and still
# catches a replication error (init, data order, LR, decay groups, clipping): e.g. train_gpt
# without weight decay fails it, though it passes the bf16 tolerance (gpt_autocast_parity_test
# checks that on the CPU).
# bf16 (--tol-bf16, 2e-2): both sides round every GEMM operand to bf16 (8 significant bits: a
# relative rounding of up to 2^-9 = 0.2% per operand) with f32 accumulation, and both round the
# GEMM outputs autocast keeps in bf16 (qkv, the attention output, the MLP activations, the
# logits; CUDA_MODELS.md), but in different kernels and not at quite the same places: ours keeps
# c_proj's outputs f32 (their residual add is fused) where autocast rounds them first, and ours
# gathers every weight as bf16 (the embeddings, biases and LayerNorm parameters too, then used
# in f32 arithmetic) where autocast reads the f32 masters outside the GEMMs. Per step that
# should be a few 1e-3 of the loss; over the steps the two trajectories drift apart by the same
# order (bf16 training noise), so the curves should agree to about 1e-2 where both are right. 2e-2 (the tolerance of
# examples/cuda/trainer_cuda_test.cc's GPU-vs-CPU bf16 comparison) leaves room for that and
# still fails a bf16 path that drops, misplaces or double-counts a term of the model (a wrong
# product moves the loss by far more), which the f32 run, taking other kernels, cannot see.
# Also required: the bf16 run of ours differs from its f32 run (the flag took effect), and the
# f32 curves learn (the last loss below 0.8 x the first: a flat curve compares nothing).
#
# The CPU dry run (--device cpu): the same plumbing with a CPU train_gpt and torch on the CPU.
# Its f32 comparison is the real check of the replication (init, data order, optimizer, LR,
# clipping) and must pass at the same --tol-f32. Its bf16 comparison does not mirror the GPU: on
# the CPU our --precision bf16 rounds the weights only (the activations stay f32: the CPU
# GptModel widens the bf16 weights), while torch's CPU autocast rounds both operands and the
# outputs; it is compared and gated at --tol-bf16 all the same.
#
# Prints each side's commands, the per-step table every 10 steps, and ends with one line
#   summary: max_rel_diff_bf16=... max_rel_diff_f32=... worst_step_bf16=... worst_step_f32=...
#     ours_bf16_vs_f32=... loss_first=... loss_last_f32=... loss_last_bf16=... tol_bf16=...
#     tol_f32=... steps=... device=... pass=0|1
# Exit: 0 on pass, 1 on a failed comparison or a failed run, 2 for bad arguments, 3 when
# $PYTHON cannot import torch and numpy (nothing compared).
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
gpt_driver=gpt_autocast_parity  # sets root: the source tree, or peer/ in a gpu_check package
# shellcheck source=bench/gpt_driver_lib.sh
. "$here/gpt_driver_lib.sh"

train="" peer="$here/peer/torch_gpt_parity.py" device=cuda n_layer=4 n_head=4 n_embd=128
block=128 vocab=512 batch=8 steps=60 lr=3e-3 warmup=5 min_lr=3e-4 tol_bf16=2e-2 tol_f32=1e-3
ours_flags="" ours_timeout=60 torch_timeout=90 json="" build=""
command_line="$0 $*"
gpt_parse_flags "train-gpt:train peer device n-layer n-head n-embd block-size:block
  vocab-size:vocab batch steps lr warmup-steps:warmup min-lr tol-bf16 tol-f32 ours-flags
  ours-timeout torch-timeout json build" "$@"
gpt_require positive n_layer n_head n_embd block vocab batch steps ours_timeout torch_timeout
[[ "$warmup" =~ ^[0-9]+$ ]] || die "--warmup-steps '$warmup': an integer >= 0"
[ "$warmup" -lt "$steps" ] || die "--warmup-steps $warmup: fewer than --steps $steps"
gpt_require number lr min_lr tol_bf16 tol_f32
[ "$vocab" -ge 16 ] || die "--vocab-size $vocab: at least 16 (the words' tokens)"
gpt_check_shape
gpt_find_tools
if ! "$python" -c 'import torch, numpy' > /dev/null 2>&1; then
  echo "gpt_autocast_parity: $python cannot import torch and numpy: nothing compared" >&2
  exit 3
fi
gpt_work_dir

# The tokens (see the header).
gpt_tokens markov "$steps" 1

gpt_card
echo "# gpt_autocast_parity: GPT n_layer $n_layer n_head $n_head n_embd $n_embd block $block" \
  "vocab $vocab, batch $batch x $block tokens, $steps steps of AdamW (lr $lr cosine to $min_lr" \
  "after $warmup warm-up), device $device (${card:-no nvidia-smi})"

# The peer first: it writes the initial model both sides start from.
peer_args=(--data "$work/tokens.bin" --init-out "$work/init.safetensors" --device "$device"
  --n-layer "$n_layer" --n-head "$n_head" --n-embd "$n_embd" --block-size "$block"
  --vocab-size "$vocab" --batch "$batch" --steps "$steps" --lr "$lr" --lr-schedule cosine
  --warmup-steps "$warmup" --min-lr "$min_lr" --betas "0.9,0.95" --eps 1e-8 --weight-decay 0.1
  --clip-norm 1 --precisions "fp32,bf16" --seed 0)
echo "# torch: $python $peer ${peer_args[*]}"
gpt_run torch "$torch_timeout" '^{' "$python" "$peer" "${peer_args[@]}"
if [ "$rc" != 0 ] || [ ! -s "$work/torch.json" ] || [ ! -s "$work/init.safetensors" ]; then
  gpt_failed "torch failed" "$rc" "$torch_timeout" torch
  echo "summary: max_rel_diff_bf16=na max_rel_diff_f32=na steps=$steps device=$device pass=0"
  exit 1
fi

# Ours: fp32, then bf16.
read -r -a extra <<< "$ours_flags"  # --ours-flags: a list of flags
ours_ok=1
ours_cmds=()
for prec in fp32 bf16; do
  cmd=("$train" --device "$device" --precision "$prec" --n-layer "$n_layer" --n-head "$n_head"
    --n-embd "$n_embd" --block-size "$block" --vocab-size "$vocab" --data "$work/tokens.bin"
    --eval-data "$work/eval.bin" --eval-batch 1 --data-order sequential --batch "$batch"
    --steps "$steps" --init "$work/init.safetensors" --optim adamw --lr "$lr"
    --lr-schedule cosine --warmup-steps "$warmup" --min-lr "$min_lr" --betas "0.9,0.95"
    --eps 1e-8 --weight-decay 0.1 --clip-norm 1 --log-every 0
    --metrics "$work/ours_$prec.jsonl" "${extra[@]}")
  echo "# ours: ${cmd[*]}"
  ours_cmds+=("${cmd[*]}")
  gpt_run "ours_$prec" "$ours_timeout" '^{' "${cmd[@]}"
  if [ "$rc" != 0 ] || [ ! -s "$work/ours_$prec.jsonl" ]; then
    gpt_failed "ours --precision $prec failed" "$rc" "$ours_timeout" "ours_$prec"
    ours_ok=0
  fi
done
if [ "$ours_ok" = 0 ]; then
  echo "summary: max_rel_diff_bf16=na max_rel_diff_f32=na steps=$steps device=$device pass=0"
  exit 1
fi

# The comparison, the summary line and the results file.
gpt_commit
TOL="$tol_bf16 $tol_f32" STEPS="$steps" DEVICE="$device" CARD="${card:-}" DRIVER="${driver:-}" \
COMMAND="$command_line" COMMIT="$commit" DIRTY="$dirty" BUILD="$build" \
OURS_CMDS="$(printf '%s\n' "${ours_cmds[@]}")" \
  "$tool_python" - "$work" "$json" <<'PY'
import datetime, json, os, socket, sys
work, out = sys.argv[1], sys.argv[2]
tol_bf16, tol_f32 = map(float, os.environ["TOL"].split())
S = int(os.environ["STEPS"])

def ours_losses(prec):
    by_step = {}
    with open(os.path.join(work, "ours_%s.jsonl" % prec)) as f:
        for line in f:
            try:
                j = json.loads(line)
            except ValueError:
                continue
            if "loss" in j:
                by_step[int(j["step"])] = float(j["loss"])
    return [by_step.get(s) for s in range(1, S + 1)]

with open(os.path.join(work, "torch.json")) as f:
    torch_ = json.loads(f.read())
ours = {p: ours_losses(p) for p in ("fp32", "bf16")}
theirs = {p: torch_["losses"][p] for p in ("fp32", "bf16")}
problems = []
for side, d in (("ours", ours), ("torch", theirs)):
    for p, l in d.items():
        if len(l) != S or any(v is None for v in l):
            problems.append("%s %s: %d of %d step losses" % (side, p, sum(v is not None for v in l), S))

def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)

def worst(a, b):  # (max relative difference, its 1-based step)
    return max((rel(x, y), s + 1) for s, (x, y) in enumerate(zip(a, b)))

if problems:
    for p in problems:
        print("# " + p)
    print("summary: max_rel_diff_bf16=na max_rel_diff_f32=na steps=%d device=%s pass=0"
          % (S, os.environ["DEVICE"]))
    sys.exit(1)
d16, s16 = worst(ours["bf16"], theirs["bf16"])
d32, s32 = worst(ours["fp32"], theirs["fp32"])
self16, _ = worst(ours["bf16"], ours["fp32"])
learned = theirs["fp32"][-1] < 0.8 * theirs["fp32"][0] and ours["fp32"][-1] < 0.8 * ours["fp32"][0]
checks = {"bf16 within tol_bf16": d16 <= tol_bf16, "f32 within tol_f32": d32 <= tol_f32,
          "ours bf16 differs from ours f32": self16 > 0, "the f32 curves learn": learned}
ok = all(checks.values())
print("%5s %12s %12s %9s %12s %12s %9s" % ("step", "ours_f32", "torch_f32", "rel", "ours_bf16",
                                          "torch_bf16", "rel"))
for s in range(S):
    if s % 10 == 0 or s == S - 1:
        print("%5d %12.6f %12.6f %9.2e %12.6f %12.6f %9.2e" % (
            s + 1, ours["fp32"][s], theirs["fp32"][s], rel(ours["fp32"][s], theirs["fp32"][s]),
            ours["bf16"][s], theirs["bf16"][s], rel(ours["bf16"][s], theirs["bf16"][s])))
for k, v in checks.items():
    print("# %s: %s" % (k, "yes" if v else "NO"))
s = {"max_rel_diff_bf16": "%.3e" % d16, "max_rel_diff_f32": "%.3e" % d32,
     "worst_step_bf16": s16, "worst_step_f32": s32, "ours_bf16_vs_f32": "%.3e" % self16,
     "loss_first": "%.5f" % theirs["fp32"][0], "loss_last_f32": "%.5f" % theirs["fp32"][-1],
     "loss_last_bf16": "%.5f" % theirs["bf16"][-1], "tol_bf16": "%g" % tol_bf16,
     "tol_f32": "%g" % tol_f32, "steps": S,
     "device": (torch_.get("device_name") or os.environ["DEVICE"]).replace(" ", "_"),
     "pass": int(ok)}
if out:
    doc = {"name": "gpt_autocast_parity",
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "card": os.environ["CARD"] or "none", "driver": os.environ["DRIVER"] or "none",
           "host": socket.gethostname(), "commit": os.environ["COMMIT"],
           "dirty": bool(os.environ["DIRTY"]), "build": os.environ["BUILD"],
           "command": os.environ["COMMAND"], "ours_commands": os.environ["OURS_CMDS"].split("\n"),
           "summary": {k: (v if isinstance(v, int) or k in ("device",) else
                           float(v)) for k, v in s.items()},
           "checks": checks, "torch": {k: v for k, v in torch_.items() if k != "losses"},
           "losses": {"ours_fp32": ours["fp32"], "torch_fp32": theirs["fp32"],
                      "ours_bf16": ours["bf16"], "torch_bf16": theirs["bf16"]}}
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")
    print("# results: %s" % out)
print("summary: " + " ".join("%s=%s" % kv for kv in s.items()))
sys.exit(0 if ok else 1)
PY
