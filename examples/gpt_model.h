// GptModel: the nanoGPT-shaped transformer of train_gpt on the CPU, run through the sharded store
// by a UnitRunner (fsdp/unit_runner.h), with the layers of nn/.
//
// Parameters (PyTorch names and shapes of nanoGPT's GPT with bias; Vp = padded_vocab(), T = block
// size, C = n_embd, L = n_layer): transformer.wte.weight [Vp, C], transformer.wpe.weight [T, C];
// per block i transformer.h.{i}.ln_1.{weight,bias} [C], .attn.c_attn.{weight [3C, C], bias [3C]},
// .attn.c_proj.{weight [C, C], bias [C]}, .ln_2.{weight,bias} [C], .mlp.c_fc.{weight [4C, C],
// bias [4C]}, .mlp.c_proj.{weight [C, 4C], bias [C]}; transformer.ln_f.{weight,bias} [C];
// lm_head.weight TIED to transformer.wte.weight (one parameter in the store; GptTiedNames() lists
// the alias for exports).
// Store units: "transformer.embed" = {wte, wpe}, "transformer.h.{i}" (the block, parameters in
// the order above), "transformer.ln_f". Runner schedule (uses): embed, h.0 .. h.(L-1), ln_f,
// embed again (the lm_head: logits = y wte^T): the tied gradient sums both uses before its one
// reduce-scatter per micro-batch.
// Math (nanoGPT's forward, no dropout): x = wte[idx] + wpe[0..t-1]; per block (pre-LN)
//   x = x + c_proj(attn(c_attn(ln_1(x)))),  x = x + mlp.c_proj(gelu_tanh(mlp.c_fc(ln_2(x))))
// with LayerNorm eps 1e-5, causal attention as nn/attention.h (q, k, v = the three C-wide chunks
// of c_attn's output, heads = consecutive C/n_head columns, scale 1/sqrt(C/n_head)); logits =
// ln_f(x) wte^T (padding columns masked); the loss is the mean cross-entropy over the LOCAL
// targets (the store averages over ranks and micro-batches). Batches: Batch::tokens [rows, t+1]
// (examples/gpt_data.h), inputs the first t of each row, targets the last t; 1 <= t <= T.
// Precision: gathered bf16/f16 parameters are widened to f32 (nn/precision.h); activations and
// gradients are f32. Recompute: every block's activations are dropped after its forward and
// recomputed in the backward (UnitRunner); the gradients are bit-identical.
//
// Errors: kInvalidArgument for a bad shape (C not divisible by n_head, a sequence longer than T,
// a token outside the vocabulary); store/communicator errors with the use and unit named.
// Threading: one thread (the store's); the layers use `compute_threads` (nn/cpu_context.h).
// Memory: per micro-batch, with n = rows * t tokens, about n * (20 C + 4 V) floats plus
// rows * n_head * t^2 per block for the attention probabilities (only one block's with recompute).
#ifndef SHARDEMA_EXAMPLES_GPT_MODEL_H_
#define SHARDEMA_EXAMPLES_GPT_MODEL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "examples/dataset.h"
#include "framework/cuda/gpu_op_times.h"
#include "framework/status.h"
#include "fsdp/store.h"
#include "fsdp/unit_runner.h"
#include "nn/cpu_context.h"
#include "train/model.h"

namespace shardema::examples {

struct GptShape {
  int64_t n_layer = 2;
  int64_t n_head = 2;
  int64_t n_embd = 32;
  int64_t block_size = 16;  // T
  int64_t vocab = 256;      // V (--vocab-size; the byte vocabulary by default)

  // Vp: the rows of wte and the width of the logits, V rounded up to a multiple of 64 (as nanoGPT
  // pads GPT-2's 50257 to 50304, for the GEMMs). The logits of the padding columns are set to
  // kMaskedLogit before the softmax (GptModelCuda's loss kernel leaves them out of it instead),
  // so they take no probability mass and get no gradient; the
  // padding rows of wte are never read by the embedding and exports strip them
  // (GptMetaSections).
  int64_t padded_vocab() const { return (vocab + 63) / 64 * 64; }

  // kInvalidArgument naming the flag for non-positive sizes or n_embd % n_head != 0.
  Status Check() const;
};

std::vector<UnitSpec> GptUnits(const GptShape& s);
// What the CPU and CUDA models share about a block unit: its parameter indices in GptUnits'
// order and nanoGPT's LayerNorm epsilon (every block and ln_f).
namespace gpt_layout {
enum BlockParam {
  kLn1W,
  kLn1B,
  kAttnW,
  kAttnB,
  kAProjW,
  kAProjB,
  kLn2W,
  kLn2B,
  kFcW,
  kFcB,
  kMProjW,
  kMProjB,
  kBlockParams
};
constexpr float kLayerNormEps = 1e-5f;
// The value of a padding logit: the float whose four bytes are 0xF7 (-1.0045e34, so a memset
// writes it on either device); exp(kMaskedLogit - max) is exactly 0 in float and double.
constexpr unsigned char kMaskedLogitByte = 0xF7;
}  // namespace gpt_layout
// The schedule of unit uses (see above).
UnitSchedule GptSchedule(const GptShape& s, bool recompute);
// {"lm_head.weight": "transformer.wte.weight"}.
std::map<std::string, std::string> GptTiedNames();
// train_gpt's checkpoint meta sections for exports (checkpoint/export.h): "export_layouts"
// {"hf": {"transpose": GptHfTransposedGlobs()}} (`ckpt export --layout hf` writes Hugging Face's
// GPT2LMHeadModel layout), and for a padded vocabulary (Vp > V) "export_rows"
// {"transformer.wte.weight": V}, so exports write the V real rows.
nlohmann::json GptMetaSections(const GptShape& s);

// nanoGPT's init: weights of Linear and Embedding ~ N(0, 0.02), the two c_proj weights of each
// block ~ N(0, 0.02 / sqrt(2 n_layer)), biases 0, LayerNorm weight 1 and bias 0; each parameter
// drawn from SeededRng(seed, name) (framework/rng.h): independent of the world size.
Status InitGptFromSeed(ShardedParameterStore* store, const GptShape& s, uint64_t seed);

// --init: every store parameter by name (F32/BF16/F16, exact shape); lm_head.weight optional and,
// when present, equal to transformer.wte.weight element for element. wte (and lm_head) may hold
// the V real rows only (an export's): the padding rows start at 0. Hugging Face's
// GPT2LMHeadModel layout is read too: recognised by c_attn.weight of shape [C, 3C], its Conv1D
// weights (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) are stored [in, out], the transpose
// of ours, and its causal-mask buffers (attn.bias, attn.masked_bias) are ignored. Errors list
// every problem: kInvalidArgument (missing tensor, wrong shape or dtype, unknown tensor, lm_head
// differing from wte with the first differing index), kDataLoss for a corrupt file.
Status InitGptFromFile(ShardedParameterStore* store, const GptShape& s, const std::string& path);
// The names of the four Conv1D weights of the Hugging Face layout (per block), as globs
// ("*.attn.c_attn.weight", ...): the parameters an export in that layout transposes.
std::vector<std::string> GptHfTransposedGlobs();

// The inputs and targets of a GPT batch: Batch::tokens [rows, t+1] split into ids (the first t
// of each row) and targets (the last t), n = rows * t.
struct GptTokens {
  int64_t rows = 0, seq = 0, n = 0;
  std::vector<int64_t> ids, targets;
};
// kInvalidArgument for a token count that is not rows * (t + 1) with 1 <= t <= T, or a token
// outside the vocabulary.
Status SplitGptBatch(const Batch& batch, const GptShape& shape, GptTokens* out);

// What a GPT language model (GptModel on the CPU, GptModelCuda on a GPU) shares: its shape and
// sampling on top of a forward that yields the last position's logits.
class GptLm : public ModelCompute {
 public:
  const GptShape& shape() const { return shape_; }
  // Generates `n` tokens after `prompt` (collective: every rank runs the same forwards and draws
  // the same tokens). Each token: one forward over the last <= T tokens, then a draw from
  // softmax(logits / temperature) of the last position with SeededRng(seed, stream) (temperature
  // 0: the argmax).
  StatusOr<std::vector<int64_t>> Sample(std::vector<int64_t> prompt, int64_t n, double temperature,
                                        uint64_t seed, const std::string& stream);
  // What ran the attention of the last training micro-batch ("cpu" on the CPU; on the GPU
  // CudaAttention::Implementation's answer), "none" before the first.
  const std::string& attention_implementation() const { return attention_impl_; }
  // --profile on a GPU: the device time per op of the last training micro-batch
  // (framework/cuda/gpu_op_times.h; waits for it); empty where there is none (the CPU).
  virtual StatusOr<std::vector<GpuOpTotal>> OpTotals() { return std::vector<GpuOpTotal>(); }
  // On a GPU: the cuBLASLt matmuls queued so far by epilogue name (nn/cuda/cublas_gemm.h
  // GemmEpilogueName), which show whether the fused bias / GELU epilogues ran or their fallback
  // kernels did; empty on the CPU.
  virtual std::vector<std::pair<std::string, int64_t>> LtMatmuls() const { return {}; }

 protected:
  explicit GptLm(const GptShape& shape) : shape_(shape) {}
  // Collective. Forward of `batch` (rows >= 1); the f32 logits of the last position of its last
  // row (the V real ones first), in host memory valid until the next call.
  virtual StatusOr<const float*> LastLogits(const Batch& batch) = 0;

  GptShape shape_;
  std::string attention_impl_ = "none";
};

class GptModel final : public GptLm, private UnitModule {
 public:
  // `store` must hold GptUnits(shape). Errors: kInvalidArgument for a bad shape or schedule.
  static StatusOr<std::unique_ptr<GptModel>> Create(ShardedParameterStore* store,
                                                    const GptShape& shape, int compute_threads,
                                                    bool recompute);

  // One micro-batch (collective); returns the mean cross-entropy over the local targets.
  StatusOr<double> ForwardBackward(const Batch& batch) override;
  // Forward only: the sum over the rows of each row's mean cross-entropy (collective).
  StatusOr<double> LossSum(const Batch& batch) override;
  void SetPhaseTimes(PhaseTimes* times) override { runner_.set_phase_times(times); }

 private:
  struct BlockActs {
    // tanh: the GELU's tanh(u), kept for its backward.
    std::vector<float> ln1, mean1, rstd1, qkv, att, atty, x1, ln2, mean2, rstd2, h, g, tanh;
  };
  GptModel(ShardedParameterStore* store, const GptShape& shape, int compute_threads, bool recompute,
           UnitRunner runner);
  Status SetBatch(const Batch& batch);
  StatusOr<const float*> LastLogits(const Batch& batch) override;
  Status ForwardUse(const UnitCall& call, const std::vector<TensorView>& views) override;
  Status BackwardUse(const UnitCall& call, const std::vector<TensorView>& views,
                     const std::vector<TensorView>& grads) override;
  Status BlockForward(size_t block, const float* const* p, const float* x, BlockActs* a, float* y);
  Status BlockBackward(size_t block, const float* const* p, float* const* g, bool accumulate,
                       const float* x, const BlockActs& a);
  // f32 pointers to a use's parameters (widened when the compute dtype is not f32).
  std::vector<const float*> Params(const std::vector<TensorView>& views);

  ShardedParameterStore* store_;
  nn::CpuContext ctx_;
  bool recompute_;
  UnitRunner runner_;
  GptTokens tok_;
  int64_t rows_ = 0, seq_ = 0, n_ = 0;  // tok_'s sizes
  // xs_[i]: input of use i (i >= 1; the residual stream), xs_[L+2]: ln_f output.
  std::vector<std::vector<float>> xs_;
  std::vector<BlockActs> acts_;  // per block (empty with recompute)
  BlockActs scratch_acts_;       // with recompute: the one block's activations in use
  std::vector<float> lnf_mean_, lnf_rstd_, logits_, dlogits_;
  std::vector<float> dy_, dtmp_, dbig_, dqkv_;  // backward scratch
  std::vector<std::vector<float>> widened_;
};

}  // namespace shardema::examples

#endif  // SHARDEMA_EXAMPLES_GPT_MODEL_H_
