"""The GPT benchmark's arithmetic (bench/gpu_gpt_bench.sh, bench/peer/torch_gpt_gpu.py): the
training FLOPs of train_gpt's model per token, the data-sheet bf16 peaks of the cards, and MFU.
Only the Python standard library, so that the driver can use it without torch:

  python3 bench/peer/gpt_flops.py --n-layer 12 --n-head 12 --n-embd 768 --block-size 1024 \
      --vocab-size 50257 --batch 8 --step-ms 100 [--device-name "NVIDIA H200"] [--gemm-tflops 780]

prints one JSON line: flops_per_token, flops_per_step, tflops (achieved), peak_tflops,
peak_source, mfu_peak (achieved / data-sheet peak, "na" for a card not in the table),
mfu_gemm (achieved / the measured large GEMM, "na" without one), tokens_per_s.

The FLOP count (the convention of PaLM's and nanoGPT's MFU: matrix products only, attention
scores over the full T x T square) derived for this model (examples/gpt_model.h, the PyTorch
twin examples/testdata/gpt_torch.py), L blocks of width C, context T, padded vocabulary Vp:

  A product of an [n, k] by a [k, m] matrix is 2*n*k*m FLOPs (a multiply and an add each).
  Forward, per token (n = 1 row of the batch*T rows):
    per block: c_attn C x 3C, attn.c_proj C x C, c_fc C x 4C, mlp.c_proj 4C x C
               -> 2 * (3 + 1 + 4 + 4) C^2 = 2 * 12 C^2;
    lm_head (tied to wte) C x Vp -> 2 * C * Vp;
    so 2 * N with N = 12 L C^2 + Vp C, the weights that enter products (biases, LayerNorm,
    wpe and wte's lookup enter none);
    attention per block: q k^T, each token's query against T keys over all heads: 2 T C;
    att @ v: 2 T C; so 4 T C per block, 4 L T C in all (the full square: both sides compute
    the masked half too, as the twin and our materialised attention do).
  Backward: each product's gradient with respect to its input and to its weight is a product
    of the same size, so twice the forward: 4 N + 8 L T C.
  Training, per token: 6 N + 12 L T C. GEMMs of the optimizer, the EMA, the softmax, GELU,
  LayerNorm, the loss and the embedding backward are not counted (they are not matrix products).
For GPT-2 small (L 12, C 768, T 1024, Vp 50304): N = 123,568,128 weights in products,
6 N = 741.4M and 12 L T C = 113.2M: 854.7M FLOPs per token, 7.00 TFLOP per step of 8 x 1024.
"""
import argparse
import json
import sys

# Dense bf16 tensor-core peaks, TFLOP/s, as the vendor's data sheets give them (half the
# "with sparsity" figure); keyed by a substring of the device name (nvidia-smi's and
# torch.cuda.get_device_name's), the first match wins, so the more specific names come first.
# Data-sheet figures, not measurements: the measured GEMM (mfu_gemm) is the reachable ceiling.
DATASHEET_BF16_DENSE_TFLOPS = [
    ("H100 PCIe", 756.5, "H100 PCIe data sheet, dense bf16"),
    ("H100", 989.4, "H100 SXM data sheet, dense bf16"),
    ("H200", 989.4, "H200 SXM data sheet, dense bf16 (H100 SXM's)"),
    ("A100", 312.0, "A100 data sheet, dense bf16"),
]


def padded_vocab(vocab):
    """train_gpt's padding (examples/gpt_model.h GptShape::padded_vocab): a multiple of 64."""
    return (vocab + 63) // 64 * 64


def matmul_weights(n_layer, n_embd, vocab):
    """N above: the weights that enter matrix products (the tied lm_head once)."""
    return 12 * n_layer * n_embd * n_embd + padded_vocab(vocab) * n_embd


def train_flops_per_token(n_layer, n_embd, block_size, vocab):
    """6 N + 12 L T C (derivation in this module's docstring)."""
    return 6 * matmul_weights(n_layer, n_embd, vocab) + 12 * n_layer * block_size * n_embd


def datasheet_peak(device_name):
    """(TFLOP/s, source) of the first table entry whose key is in DEVICE_NAME, else None."""
    for key, tflops, source in DATASHEET_BF16_DENSE_TFLOPS:
        if key in (device_name or ""):
            return tflops, source
    return None


def figures(n_layer, n_embd, block_size, vocab, batch, step_ms, device_name="",
            gemm_tflops=None):
    """The MFU figures of one step time (ms) of BATCH sequences of BLOCK_SIZE tokens."""
    per_token = train_flops_per_token(n_layer, n_embd, block_size, vocab)
    per_step = per_token * batch * block_size
    out = {"flops_per_token": per_token, "flops_per_step": per_step,
           "tflops": "na", "tokens_per_s": "na", "peak_tflops": "na", "peak_source": "na",
           "mfu_peak": "na", "mfu_gemm": "na"}
    peak = datasheet_peak(device_name)
    if peak:
        out["peak_tflops"], out["peak_source"] = peak
    if not step_ms or step_ms <= 0:
        return out
    achieved = per_step / (step_ms * 1e-3) / 1e12
    out["tflops"] = round(achieved, 3)
    out["tokens_per_s"] = round(batch * block_size / (step_ms * 1e-3), 1)
    if peak:
        out["mfu_peak"] = round(achieved / peak[0], 4)
    if gemm_tflops and gemm_tflops > 0:
        out["mfu_gemm"] = round(achieved / gemm_tflops, 4)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n-layer", type=int, default=12)
    p.add_argument("--n-head", type=int, default=12)  # no FLOP depends on it
    p.add_argument("--n-embd", type=int, default=768)
    p.add_argument("--block-size", type=int, default=1024)
    p.add_argument("--vocab-size", type=int, default=50257)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--step-ms", type=float, default=0.0)
    p.add_argument("--device-name", default="")
    p.add_argument("--gemm-tflops", type=float, default=0.0)
    a = p.parse_args()
    json.dump(figures(a.n_layer, a.n_embd, a.block_size, a.vocab_size, a.batch, a.step_ms,
                      a.device_name, a.gemm_tflops), sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
