#!/usr/bin/env bash
# gpu_gpt_bench: one training step of the GPT-2 small shape on one GPU, through shardema's
# train_gpt --device cuda (one rank, the sharded store, fused AdamW + 2 EMA slots) and through
# PyTorch eager with bf16 autocast (bench/peer/torch_gpt_gpu.py: the same model, batch and
# tokens; fused AdamW, 2 EMA copies by torch._foreach_lerp_), in the same run, with the MFU of
# each against the card's data-sheet dense bf16 peak and against a measured large bf16 GEMM.
#
#   bench/gpu_gpt_bench.sh [--train-gpt PATH] [--peer PATH] [--device cuda|cpu] [--batch 8|auto]
#       [--max-batch 64] [--probe-timeout 45]
#       [--steps 5] [--warmup 2] [--n-layer 12] [--n-head 12] [--n-embd 768] [--block-size 1024]
#       [--vocab-size 50257] [--ema 0.999,0.9999] [--ours-flags "--precision bf16 --allow-tf32"]
#       [--attention naive|sdpa] [--torch-dtype bf16|fp32] [--gemm-size 8192]
#       [--compile-timeout 0] [--ours-timeout 150] [--torch-timeout 120] [--json FILE]
#       [--build TEXT]
#   (tools/gpu_session.sh's gpt_bench stage runs it from its package: tools/gpu_check.sh's
#   gpu_gpt_bench check.)
#
# --train-gpt: a CUDA build of //examples:train_gpt (default bazel-bin/examples/train_gpt of
# the repository above this script, built with --config=cuda when missing). --peer: default
# bench/peer/torch_gpt_gpu.py beside this script, run by $PYTHON (default python3); when that
# cannot import torch the torch figures read "na". --batch: sequences of --block-size tokens per
# step, the same for both sides (default 8: 8192 tokens per step); auto (--device cuda): the
# largest power of two up to --max-batch at which PyTorch eager trains on the card (the peer's
# --probe-batch, ended after --probe-timeout s; 8 when torch cannot run it): the summary's
# batch_source says which (flag, probe or default). --steps timed steps after
# --warmup. --ours-flags: extra train_gpt flags (default --precision bf16 --allow-tf32, the
# match of the peer's autocast: bf16 GEMM operands where train_gpt's CUDA model takes them, else
# the bf16 weights widened to f32 and the f32 GEMMs on TF32 tensor cores; with --device cpu
# the default is ""; "" for plain f32; the summary's ours_flags). --attention: the peer's
# (sdpa, the default: F.scaled_dot_product_attention, PyTorch's fused attention, as ours (cuDNN
# where train_gpt finds it, else its own fused kernels: the summary's ours_attention, from its
# --bench-json); naive: the twin's materialised T x T probabilities). --torch-dtype: the peer's
# autocast (default bf16; fp32 for the CPU dry run). --gemm-size: the square bf16 GEMM the peer
# times (0: none). --compile-timeout S > 0 also runs the peer with torch.compile, ended after S
# seconds (compile included): its step time is torch_compile_ms, else "unavailable" (offline
# machines, old torch). --device cpu: the plumbing's dry run without a GPU (a CPU train_gpt, the
# peer on the CPU; use a tiny shape). --json FILE: also write the results file (name, date,
# card, driver, machine, commit, build, command, summary, and each side's JSON line).
# --build: the package's build line (gpu_session's BUILD_INFO) for the results file.
# --ours-timeout: ours' timed run; its profiled run gets at most 45 s, and at most what is left
# of --ours-timeout + 20 s after the timed run (the two together end within that).
#
# Tokens: a generated file of (B x (warmup + steps) + 1) x T + 1 random uint16 tokens in
# [0, --vocab-size) (a nanoGPT-style .bin), read by both in train_gpt's --data-order sequential:
# step s's sequence j starts at ((s*B + j)*T) mod (N - T), so each step has fresh tokens and both
# sides the same ones. Ours evaluates once after the run (untimed) on a T + 1 token file.
# Ours: train_gpt --bench-json (step time by CUDA events, the median over the timed steps;
# peak_device_used_mib: the device memory in use at each step's end, cudaMemGetInfo), then a
# second, short run with --profile (one timed step after the warmup: the device time of each op
# of its last step from CUDA events around it, in the results' ours_profile.gpu_ops and printed;
# it costs one host wait per step, so its step time, ours_profiled_ms, is kept apart). Torch: the
# same events and reading (torch.cuda.mem_get_info), plus torch.cuda.max_memory_allocated /
# max_memory_reserved. The FLOP count per token is 6 N + 12 L T C (N: the weights in matrix
# products; derived in bench/peer/gpt_flops.py, with the table of data-sheet peaks).
# Prints both sides' figures and ends with one line
#   summary: ours_ms=... torch_ms=... ratio=... ours_tokens_per_s=... torch_tokens_per_s=...
#     mfu_ours=... mfu_torch=... mfu_gemm_ours=... mfu_gemm_torch=... gemm_tflops=...
#     peak_tflops=... ours_device_mib=... torch_device_mib=... ours_allocated_mib=...
#     torch_allocated_mib=...
#     torch_reserved_mib=... torch_compile_ms=... compile=... batch=... batch_source=...
#     block_size=...
#     n_layer=... n_embd=... vocab_padded=... steps=... warmup=... ours_attention=...
#     torch_attention=... device=... ours_flags=... ours_profiled_ms=... ours_ops_ms=...
#     ours_top_ops=NAME:MS,... ours_lt_matmuls=EPILOGUE:N,...
#     (--ours-flags, commas for spaces; ours_profiled_ms: the profiled run's step; ours_ops_ms:
#     the device time of ours' ops in it, ours_top_ops: the three largest; the printed op table
#     adds each matrix-product op's TFLOP/s; ours_lt_matmuls: ours' cuBLASLt matmuls by epilogue,
#     whether the fused bias / GELU epilogues ran, "none" when none did)
# (ratio: tokens/s ours / torch = torch_ms / ours_ms; mfu_*: against the data-sheet peak,
# mfu_gemm_*: against gemm_tflops; *_allocated_mib: the allocators' peaks (ours: our Buffers,
# DevicePeakBytes; torch: max_memory_allocated); *_device_mib: device memory in use, the CUDA
# context included, read the same way on both sides; "na" for what did not run).
# Exit: 0 when ours ran (and the peer, where torch imports), 1 otherwise, 2 for bad arguments.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
gpt_driver=gpu_gpt_bench  # sets root: the source tree, or peer/ in a gpu_check package
# shellcheck source=bench/gpt_driver_lib.sh
. "$here/gpt_driver_lib.sh"

train="" peer="$root/bench/peer/torch_gpt_gpu.py" device=cuda batch=8 steps=5 warmup=2
n_layer=12 n_head=12 n_embd=768 block=1024 vocab=50257 ema=0.999,0.9999
ours_flags=default attention=sdpa torch_dtype="" gemm=8192 compile_timeout=0
ours_timeout=150 torch_timeout=120 json="" build="" max_batch=64 probe_timeout=45
command_line="$0 $*"
gpt_parse_flags "train-gpt:train peer device batch steps warmup n-layer n-head n-embd
  block-size:block vocab-size:vocab ema ours-flags attention torch-dtype gemm-size:gemm
  compile-timeout ours-timeout torch-timeout json build max-batch probe-timeout" "$@"
batch_source=flag
if [ "$batch" = auto ]; then
  batch_source=probe
  batch=8  # checked below as a number; replaced by the probe's answer
fi
gpt_require positive batch steps n_layer n_head n_embd block vocab ours_timeout torch_timeout
gpt_require positive max_batch probe_timeout
gpt_require count warmup gemm compile_timeout
gpt_check_shape
[ "$batch_source" = flag ] || [ "$device" = cuda ] ||
  die "--batch auto probes PyTorch's GPU memory: --device cuda"
case "$attention" in naive | sdpa) ;; *) die "--attention '$attention': naive or sdpa" ;; esac
if [ "$ours_flags" = default ]; then  # --allow-tf32 is for CUDA only
  ours_flags="--precision bf16 --allow-tf32"
  [ "$device" = cpu ] && ours_flags=""
fi
[ -n "$torch_dtype" ] || { [ "$device" = cuda ] && torch_dtype=bf16 || torch_dtype=fp32; }
case "$torch_dtype" in bf16 | fp32) ;; *) die "--torch-dtype '$torch_dtype': bf16 or fp32" ;; esac
[[ "$ema" =~ ^[0-9.]+(,[0-9.]+)*$ ]] || die "--ema '$ema': decays d1,d2,..."
gpt_find_tools
flops_py="$(dirname "$peer")/gpt_flops.py"
[ -f "$flops_py" ] || die "no gpt_flops.py beside the peer ($flops_py)"
gpt_work_dir

# --batch auto: the largest power of two <= --max-batch at which the peer trains.
if [ "$batch_source" = probe ]; then
  probe=()
  if "$python" -c 'import torch' > /dev/null 2>&1; then
    gpt_run probe "$probe_timeout" '^{"probe_batch"' "$python" "$peer" --probe-batch "$max_batch" \
      --device "$device" --n-layer "$n_layer" --n-head "$n_head" --n-embd "$n_embd" \
      --block-size "$block" --vocab-size "$vocab" --ema "$ema" --dtype "${torch_dtype:-bf16}" \
      --attention "$attention"
    read -r -a probe <<< "$(sed -n 's/^{"probe_batch": \([0-9]*\),.*/\1/p' "$work/probe.json")"
  fi
  if [ "${probe[0]:-0}" -ge 1 ] 2>/dev/null; then
    batch="${probe[0]}"
    echo "# batch auto: $batch ($(sed 's/^{"probe_batch": [0-9]*, "tried": //; s/}$//' "$work/probe.json"))"
  else
    batch_source=default
    echo "# batch auto: the probe gave no batch (exit ${rc:-none}); batch $batch"
    [ -s "$work/probe.log" ] && tail -3 "$work/probe.log" | sed 's/^/#   /'
  fi
fi

# The tokens (see the header).
gpt_tokens random $((warmup + steps)) 0

gpt_card
echo "# gpu_gpt_bench: GPT n_layer $n_layer n_head $n_head n_embd $n_embd block $block vocab" \
  "$vocab, batch $batch x $block tokens, AdamW + EMA $ema, $steps timed steps after $warmup," \
  "device $device (${card:-no nvidia-smi})"

# Ours.
read -r -a extra <<< "$ours_flags"  # --ours-flags: a list of flags
ours_cmd=("$train" --device "$device" --n-layer "$n_layer" --n-head "$n_head" --n-embd "$n_embd"
  --block-size "$block" --vocab-size "$vocab" --data "$work/tokens.bin"
  --eval-data "$work/eval.bin" --eval-batch 1 --data-order sequential --batch "$batch"
  --steps $((warmup + steps)) --bench-warmup "$warmup" --bench-json --log-every 0
  --lr 6e-4 --ema "$ema" "${extra[@]}")
echo "# ours: ${ours_cmd[*]}"
ours_start=$SECONDS
gpt_run ours "$ours_timeout" '^{.*"step_ms"' "${ours_cmd[@]}"
if [ "$rc" != 0 ] || [ ! -s "$work/ours.json" ]; then
  gpt_failed "ours failed" "$rc" "$ours_timeout" ours
  : > "$work/ours.json"
fi
# Ours' op table: the same run with --profile, one timed step (the last flag wins).
ours_profile_cmd=("${ours_cmd[@]}" --steps $((warmup + 1)) --profile)
echo "# ours, profiled: ${ours_profile_cmd[*]}"
# At most 45 s (three steps: start-up dominates), and the timed run and it within
# --ours-timeout + 20 s (gpu_check's limits for the benchmark count them as one).
profile_timeout=$((ours_timeout + 20 - (SECONDS - ours_start)))
[ "$profile_timeout" -le 45 ] || profile_timeout=45
[ "$profile_timeout" -le "$ours_timeout" ] || profile_timeout=$ours_timeout
[ "$profile_timeout" -ge 1 ] || profile_timeout=1  # timeout 0 would mean no limit
gpt_run ours_profile "$profile_timeout" '^{.*"step_ms"' "${ours_profile_cmd[@]}"
if [ "$rc" != 0 ] || [ ! -s "$work/ours_profile.json" ]; then
  gpt_failed "ours, profiled, failed (no op table)" "$rc" "$profile_timeout" ours_profile
  : > "$work/ours_profile.json"
fi

# The peer: eager, then (--compile-timeout) torch.compile.
peer_args=(--data "$work/tokens.bin" --device "$device" --n-layer "$n_layer" --n-head "$n_head"
  --n-embd "$n_embd" --block-size "$block" --vocab-size "$vocab" --batch "$batch"
  --steps "$steps" --warmup "$warmup" --ema "$ema" --dtype "$torch_dtype"
  --attention "$attention")
torch_ok=1 compile=not_tried
: > "$work/torch.json"
: > "$work/compile.json"
if ! "$python" -c 'import torch' > /dev/null 2>&1; then
  torch_ok=0
  echo "# torch: $python cannot import torch; its figures read na"
else
  echo "# torch: $python $peer ${peer_args[*]} --gemm-size $gemm"
  gpt_run torch "$torch_timeout" '^{' "$python" "$peer" "${peer_args[@]}" --gemm-size "$gemm"
  if [ "$rc" != 0 ] || [ ! -s "$work/torch.json" ]; then
    gpt_failed "torch failed" "$rc" "$torch_timeout" torch
    : > "$work/torch.json"
  fi
  if [ "$compile_timeout" -gt 0 ]; then
    echo "# torch.compile: the same, --compile, within ${compile_timeout} s"
    gpt_run compile "$compile_timeout" '^{' "$python" "$peer" "${peer_args[@]}" --compile \
      --gemm-size 0
    if [ "$rc" = 0 ] && [ -s "$work/compile.json" ]; then
      compile=ok
    else
      compile=unavailable
      gpt_failed "torch.compile unavailable" "$rc" "$compile_timeout" compile 3
      : > "$work/compile.json"
    fi
  fi
fi

# The figures, the summary line and the results file.
gpt_commit
if ! SHAPE="$n_layer $n_head $n_embd $block $vocab $batch $steps $warmup" CARD="${card:-}" \
BATCH_SOURCE="$batch_source" \
DRIVER="${driver:-}" DEVICE="$device" ATTENTION="$attention" COMPILE="$compile" \
OURS_FLAGS="$ours_flags" COMMAND="$command_line" COMMIT="$commit" DIRTY="$dirty" BUILD="$build" \
OURS_CMD="${ours_cmd[*]}" \
  "$tool_python" - "$work" "$flops_py" "$json" <<'PY'; then
import datetime, importlib.util, json, os, re, socket, sys
work, flops_py, out = sys.argv[1], sys.argv[2], sys.argv[3]
spec = importlib.util.spec_from_file_location("gpt_flops", flops_py)
gf = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gf)
L, H, C, T, V, B, S, W = map(int, os.environ["SHAPE"].split())

def load(name):
    try:
        with open(os.path.join(work, name)) as f:
            return json.loads(f.read().strip() or "null")
    except (OSError, ValueError):
        return None

ours, torch_, comp = load("ours.json"), load("torch.json"), load("compile.json")
prof = load("ours_profile.json")
name = (torch_ or {}).get("device_name") or os.environ["CARD"] or os.environ["DEVICE"]
gemm = (torch_ or {}).get("gemm_tflops")
gemm = gemm if isinstance(gemm, (int, float)) else None
def num(d, k):
    v = (d or {}).get(k)
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
def peak(v):
    return max(v) if isinstance(v, list) and v else (v if isinstance(v, (int, float)) else None)
ours_ms, torch_ms = num(ours, "step_ms"), num(torch_, "step_ms")
fo = gf.figures(L, C, T, V, B, ours_ms, name, gemm)
ft = gf.figures(L, C, T, V, B, torch_ms, name, gemm)
def f(v, nd=4):
    if v is None or v == "na":
        return "na"
    return ("%.*f" % (nd, v)).rstrip("0").rstrip(".") if isinstance(v, float) else str(v)
s = {
    "ours_ms": f(ours_ms), "torch_ms": f(torch_ms),
    "ratio": f(torch_ms / ours_ms) if ours_ms and torch_ms else "na",
    "ours_tokens_per_s": f(fo["tokens_per_s"], 1), "torch_tokens_per_s": f(ft["tokens_per_s"], 1),
    "mfu_ours": f(fo["mfu_peak"]), "mfu_torch": f(ft["mfu_peak"]),
    "mfu_gemm_ours": f(fo["mfu_gemm"]), "mfu_gemm_torch": f(ft["mfu_gemm"]),
    "gemm_tflops": f(gemm, 2), "peak_tflops": f(fo["peak_tflops"], 1),
    "ours_device_mib": f(peak((ours or {}).get("peak_device_used_mib")), 1),
    "torch_device_mib": f(num(torch_, "peak_device_used_mib"), 1),
    "ours_allocated_mib": f(peak((ours or {}).get("peak_device_allocated_mib")), 1),
    "torch_allocated_mib": f(num(torch_, "max_memory_allocated_mib"), 1),
    "torch_reserved_mib": f(num(torch_, "max_memory_reserved_mib"), 1),
    "torch_compile_ms": f(num(comp, "step_ms")) if comp else os.environ["COMPILE"],
    "compile": os.environ["COMPILE"],
    "batch": B, "batch_source": os.environ["BATCH_SOURCE"], "block_size": T, "n_layer": L, "n_embd": C, "vocab_padded": gf.padded_vocab(V),
    "steps": S, "warmup": W,
    "ours_attention": str((ours or {}).get("attention", "na")).replace(" ", "_"),
    "torch_attention": os.environ["ATTENTION"],
    "device": name.replace(" ", "_"),
    "ours_flags": ",".join(os.environ["OURS_FLAGS"].split()) or "none",
}
s["ours_profiled_ms"] = f(num(prof, "step_ms"))
ops = [o for o in ((prof or {}).get("gpu_ops") or []) if isinstance(o, dict) and "ms" in o]
s["ours_ops_ms"] = f(sum(o["ms"] for o in ops), 3) if ops else "na"
s["ours_top_ops"] = ",".join("%s:%s" % (o["name"].replace(" ", "_"), f(o["ms"], 2))
                             for o in ops[:3]) or "na"
lt = (ours or {}).get("lt_matmuls") or {}
s["ours_lt_matmuls"] = ",".join("%s:%d" % (k, v) for k, v in sorted(lt.items()) if v) or "none"
print("%-6s %10s %12s %8s %8s %11s %s" % ("side", "step_ms", "tokens/s", "TFLOP/s", "mfu",
                                         "mfu_gemm", "device MiB (allocated, reserved)"))
print("%-6s %10s %12s %8s %8s %11s %s (%s)" % ("ours", s["ours_ms"], s["ours_tokens_per_s"],
      f(fo["tflops"], 1), s["mfu_ours"], s["mfu_gemm_ours"], s["ours_device_mib"],
      s["ours_allocated_mib"]))
print("%-6s %10s %12s %8s %8s %11s %s (%s, %s)" % ("torch", s["torch_ms"],
      s["torch_tokens_per_s"], f(ft["tflops"], 1), s["mfu_torch"], s["mfu_gemm_torch"],
      s["torch_device_mib"], s["torch_allocated_mib"], s["torch_reserved_mib"]))
# FLOPs of one use of each matrix-product op (N = B T tokens; a backward GEMM op is two GEMMs;
# causal attention counts the lower half: 2 B T^2 C forward, 2.5 times that backward).
N, Vp = B * T, gf.padded_vocab(V)
op_flops = {"fwd gemm qkv": 6 * N * C * C, "fwd gemm attn proj": 2 * N * C * C,
            "fwd gemm fc+gelu": 8 * N * C * C, "fwd gemm mlp proj": 8 * N * C * C,
            "fwd gemm lm_head": 2 * N * C * Vp, "fwd attention": 2 * B * T * T * C}
for k in list(op_flops):
    op_flops["bwd" + k[3:]] = op_flops[k] * (2.5 if k.endswith("attention") else 2)
op_flops["bwd gemm mlp proj+dgelu"] = op_flops.pop("bwd gemm mlp proj")
op_flops["bwd gemm fc"] = op_flops.pop("bwd gemm fc+gelu")
if ops:
    print("# ours, device time per op of the profiled step (CUDA events; other = its step - ops):")
    for o in ops:
        fl = op_flops.get(o["name"])
        rate = " %7.1f TFLOP/s" % (fl * o["count"] / (o["ms"] * 1e-3) / 1e12) if fl and o["ms"] else ""
        print("#   %-26s %4d x %9.3f ms%s" % (o["name"], o["count"], o["ms"], rate))
    prof_ms = num(prof, "step_ms")
    if prof_ms:
        print("#   %-26s        %9.3f ms" % ("other", prof_ms - sum(o["ms"] for o in ops)))
print("# %s FLOPs per token (6 N + 12 L T C), peak %s TFLOP/s (%s), GEMM %s TFLOP/s; "
      "torch.compile: %s; ratio = tokens/s ours / torch" % (fo["flops_per_token"],
      s["peak_tflops"], fo["peak_source"], s["gemm_tflops"], s["torch_compile_ms"]))
line = "summary: " + " ".join("%s=%s" % kv for kv in s.items())
if out:
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "")
    doc = {"name": "gpu_gpt_bench",
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "card": os.environ["CARD"] or "none", "driver": os.environ["DRIVER"] or "none",
           "machine": {"cpu": cpu, "cores": os.cpu_count(), "host": socket.gethostname()},
           "commit": os.environ["COMMIT"], "dirty": bool(os.environ["DIRTY"]),
           "build": os.environ["BUILD"], "command": os.environ["COMMAND"],
           "ours_command": os.environ["OURS_CMD"], "summary": {},
           "ours": ours, "ours_profile": prof, "torch": torch_, "torch_compile": comp}
    doc["summary"] = {k: (int(v) if re.fullmatch(r"-?\d+", str(v)) else
                          float(v) if re.fullmatch(r"-?[0-9.]+(e-?\d+)?", str(v)) else v)
                      for k, v in s.items()}
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")
    print("# results: %s" % out)
print(line)
PY
  exit 1
fi
[ -s "$work/ours.json" ] || exit 1
[ "$torch_ok" = 0 ] || [ -s "$work/torch.json" ] || exit 1
exit 0
