#include "examples/gpt_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "checkpoint/safetensors.h"
#include "framework/glob.h"
#include "framework/rng.h"
#include "nn/activation.h"
#include "nn/attention.h"
#include "nn/embedding.h"
#include "nn/layernorm.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/precision.h"
#include "train/init_file.h"

namespace shardema::examples {
namespace {

using namespace gpt_layout;  // BlockParam, kLayerNormEps
const char* const kWte = "transformer.wte.weight";
const char* const kLmHead = "lm_head.weight";

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Status GptShape::Check() const {
  if (n_layer < 1 || n_head < 1 || n_embd < 1 || block_size < 1 || vocab < 1) {
    return InvalidArgument("--n-layer ", n_layer, ", --n-head ", n_head, ", --n-embd ", n_embd,
                           " and --block-size ", block_size, " must be >= 1");
  }
  if (n_embd % n_head != 0) {
    return InvalidArgument("--n-embd ", n_embd, " is not divisible by --n-head ", n_head);
  }
  return Status::Ok();
}

std::vector<UnitSpec> GptUnits(const GptShape& s) {
  const int64_t C = s.n_embd;
  std::vector<UnitSpec> units;
  units.push_back({"transformer.embed",
                   {{kWte, {s.padded_vocab(), C}}, {"transformer.wpe.weight", {s.block_size, C}}}});
  for (int64_t i = 0; i < s.n_layer; ++i) {
    const std::string h = "transformer.h." + std::to_string(i);
    units.push_back({h,
                     {{h + ".ln_1.weight", {C}},
                      {h + ".ln_1.bias", {C}},
                      {h + ".attn.c_attn.weight", {3 * C, C}},
                      {h + ".attn.c_attn.bias", {3 * C}},
                      {h + ".attn.c_proj.weight", {C, C}},
                      {h + ".attn.c_proj.bias", {C}},
                      {h + ".ln_2.weight", {C}},
                      {h + ".ln_2.bias", {C}},
                      {h + ".mlp.c_fc.weight", {4 * C, C}},
                      {h + ".mlp.c_fc.bias", {4 * C}},
                      {h + ".mlp.c_proj.weight", {C, 4 * C}},
                      {h + ".mlp.c_proj.bias", {C}}}});
  }
  units.push_back(
      {"transformer.ln_f", {{"transformer.ln_f.weight", {C}}, {"transformer.ln_f.bias", {C}}}});
  return units;
}

UnitSchedule GptSchedule(const GptShape& s, bool recompute) {
  UnitSchedule sched = SequentialSchedule(size_t(s.n_layer) + 2);
  sched.units.push_back(0);  // lm_head: the tied wte
  if (recompute) {
    sched.recompute.assign(sched.units.size(), false);
    for (int64_t i = 1; i <= s.n_layer; ++i) sched.recompute[size_t(i)] = true;
  }
  return sched;
}

std::map<std::string, std::string> GptTiedNames() { return {{kLmHead, kWte}}; }

nlohmann::json GptMetaSections(const GptShape& s) {
  nlohmann::json m = {{"export_layouts", {{"hf", {{"transpose", GptHfTransposedGlobs()}}}}}};
  if (s.padded_vocab() != s.vocab) m["export_rows"] = {{kWte, s.vocab}};
  return m;
}

Status InitGptFromSeed(ShardedParameterStore* store, const GptShape& s, uint64_t seed) {
  const double proj_std = 0.02 / std::sqrt(2.0 * double(s.n_layer));
  return store->InitFromFunction([&](const ParamLayout& p, float* out) -> Status {
    const std::string& n = p.name;
    const bool layernorm = n.find(".ln_") != std::string::npos;
    if (EndsWith(n, ".bias") || (layernorm && EndsWith(n, ".weight"))) {
      std::fill(out, out + p.numel, EndsWith(n, ".bias") ? 0.f : 1.f);
      return Status::Ok();
    }
    const double sd = EndsWith(n, ".c_proj.weight") ? proj_std : 0.02;
    SeededRng rng(seed, n);
    for (int64_t i = 0; i < p.numel; ++i) out[i] = float(sd * double(rng.Normal()));
    return Status::Ok();
  });
}

std::vector<std::string> GptHfTransposedGlobs() {
  return {"*.attn.c_attn.weight", "*.attn.c_proj.weight", "*.mlp.c_fc.weight",
          "*.mlp.c_proj.weight"};
}

namespace {

bool IsHfConv1D(const std::string& name) {
  for (const std::string& g : GptHfTransposedGlobs()) {
    if (GlobMatch(g, name)) return true;
  }
  return false;
}

}  // namespace

Status InitGptFromFile(ShardedParameterStore* store, const GptShape& s, const std::string& path) {
  StatusOr<std::unique_ptr<SafetensorsSet>> opened = SafetensorsSet::Open(path);
  if (!opened.ok()) return opened.status().WithContext("--init");
  const SafetensorsSet& f = **opened;
  const int64_t C = s.n_embd;
  const SafetensorsTensor* attn0 = f.Find("transformer.h.0.attn.c_attn.weight");
  const bool hf = attn0 != nullptr && attn0->shape == Shape{C, 3 * C};
  const SafetensorsTensor* wte0 = f.Find(kWte);
  const bool real_rows =
      wte0 != nullptr && s.padded_vocab() != s.vocab && wte0->shape == Shape{s.vocab, C};
  InitFileRules rules;
  rules.optional = {kLmHead};
  if (hf) {
    for (int64_t i = 0; i < s.n_layer; ++i) {
      const std::string h = "transformer.h." + std::to_string(i) + ".attn.";
      rules.ignored.insert({h + "bias", h + "masked_bias"});
    }
  }
  rules.file_shape = [&](const ParamLayout& p) -> Shape {
    if (hf && p.shape.size() == 2 && IsHfConv1D(p.name)) return {p.shape[1], p.shape[0]};
    if (real_rows && p.name == kWte) return {s.vocab, C};
    return p.shape;
  };
  RETURN_IF_ERROR(CheckInitFile(f, store->layout(), rules,
                                "--n-layer/--n-head/--n-embd/--block-size/--vocab-size"));
  if (const SafetensorsTensor* head = f.Find(kLmHead)) {
    const SafetensorsTensor* wte = f.Find(kWte);
    if (head->shape != wte->shape) {
      return InvalidArgument("--init '", path, "': lm_head.weight has shape ",
                             ShapeToString(head->shape), ", transformer.wte.weight ",
                             ShapeToString(wte->shape), " (they are tied)");
    }
    const int64_t n = NumElements(wte->shape);
    std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
    RETURN_IF_ERROR(f.ReadTensor(kWte, DType::kF32, a.data(), n));
    RETURN_IF_ERROR(f.ReadTensor(kLmHead, DType::kF32, b.data(), n));
    for (int64_t i = 0; i < n; ++i) {
      if (a[size_t(i)] != b[size_t(i)]) {
        return InvalidArgument("--init '", path, "': lm_head.weight differs from ",
                               "transformer.wte.weight at element ", i, " (", b[size_t(i)], " vs ",
                               a[size_t(i)], "); they are tied and must be equal");
      }
    }
  }
  return store->InitFromFunction([&](const ParamLayout& p, float* out) -> Status {
    if (hf && p.shape.size() == 2 && IsHfConv1D(p.name)) {  // [in, out] -> [out, in]
      const int64_t rows = p.shape[0], cols = p.shape[1];
      std::vector<float> t(size_t(p.numel));
      RETURN_IF_ERROR(f.ReadTensor(p.name, DType::kF32, t.data(), p.numel));
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = t[size_t(c * rows + r)];
      }
      return Status::Ok();
    }
    if (real_rows && p.name == kWte) {  // the padding rows start at 0
      RETURN_IF_ERROR(f.ReadTensor(p.name, DType::kF32, out, s.vocab * C));
      std::fill(out + s.vocab * C, out + p.numel, 0.f);
      return Status::Ok();
    }
    return f.ReadTensor(p.name, DType::kF32, out, p.numel);
  });
}

// ---- GptModel ----

StatusOr<std::unique_ptr<GptModel>> GptModel::Create(ShardedParameterStore* store,
                                                     const GptShape& shape, int compute_threads,
                                                     bool recompute) {
  RETURN_IF_ERROR(shape.Check());
  if (store == nullptr) return InvalidArgument("GptModel: null store");
  if (store->num_units() != size_t(shape.n_layer) + 2) {
    return InvalidArgument("GptModel: the store has ", store->num_units(), " units, expected ",
                           shape.n_layer + 2, " for --n-layer ", shape.n_layer);
  }
  ASSIGN_OR_RETURN(UnitRunner runner, UnitRunner::Create(store, GptSchedule(shape, recompute)));
  return std::unique_ptr<GptModel>(
      new GptModel(store, shape, compute_threads, recompute, std::move(runner)));
}

GptModel::GptModel(ShardedParameterStore* store, const GptShape& shape, int compute_threads,
                   bool recompute, UnitRunner runner)
    : GptLm(shape),
      store_(store),
      ctx_(compute_threads),
      recompute_(recompute),
      runner_(std::move(runner)) {
  xs_.resize(size_t(shape_.n_layer) + 3);
  if (!recompute_) acts_.resize(size_t(shape_.n_layer));
  attention_impl_ = "cpu";
}

Status SplitGptBatch(const Batch& batch, const GptShape& shape, GptTokens* out) {
  const int64_t rows = batch.rows;
  const int64_t seq = rows > 0 ? int64_t(batch.tokens.size()) / rows - 1 : 0;
  if (rows > 0 &&
      (seq < 1 || seq > shape.block_size || int64_t(batch.tokens.size()) != rows * (seq + 1))) {
    return InvalidArgument("GPT batch: ", batch.tokens.size(), " tokens for ", rows,
                           " sequences: expected rows * (t + 1) with 1 <= t <= --block-size ",
                           shape.block_size);
  }
  out->rows = rows;
  out->seq = seq;
  out->n = rows * seq;
  out->ids.resize(size_t(out->n));
  out->targets.resize(size_t(out->n));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t* row = batch.tokens.data() + r * (seq + 1);
    std::copy(row, row + seq, out->ids.begin() + r * seq);
    std::copy(row + 1, row + seq + 1, out->targets.begin() + r * seq);
  }
  RETURN_IF_ERROR(nn::CheckIds(out->ids.data(), out->n, shape.vocab));
  return nn::CheckIds(out->targets.data(), out->n, shape.vocab);
}

Status GptModel::SetBatch(const Batch& batch) {
  RETURN_IF_ERROR(SplitGptBatch(batch, shape_, &tok_));
  rows_ = tok_.rows;
  seq_ = tok_.seq;
  n_ = tok_.n;
  return Status::Ok();
}

std::vector<const float*> GptModel::Params(const std::vector<TensorView>& views) {
  if (widened_.size() < views.size()) widened_.resize(views.size());
  std::vector<const float*> p(views.size());
  for (size_t i = 0; i < views.size(); ++i) {
    p[i] = nn::AsF32(views[i].data, views[i].dtype, views[i].numel(), &widened_[i]);
  }
  return p;
}

Status GptModel::BlockForward(size_t block, const float* const* p, const float* x, BlockActs* a,
                              float* y) {
  (void)block;
  const int64_t C = shape_.n_embd, n = n_;
  const nn::AttentionShape as{rows_, seq_, C, shape_.n_head};
  a->ln1.resize(size_t(n * C));
  a->mean1.resize(size_t(n));
  a->rstd1.resize(size_t(n));
  nn::LayerNormForward(ctx_, x, p[kLn1W], p[kLn1B], n, C, kLayerNormEps, a->ln1.data(),
                       a->mean1.data(), a->rstd1.data());
  a->qkv.resize(size_t(n * 3 * C));
  nn::LinearForward(ctx_, a->ln1.data(), p[kAttnW], p[kAttnB], n, C, 3 * C, a->qkv.data());
  a->att.resize(size_t(as.att_numel()));
  a->atty.resize(size_t(n * C));
  RETURN_IF_ERROR(nn::AttentionForward(ctx_, as, a->qkv.data(), a->atty.data(), a->att.data()));
  a->x1.resize(size_t(n * C));
  nn::LinearForwardResidual(ctx_, a->atty.data(), p[kAProjW], p[kAProjB], x, n, C, C,
                            a->x1.data());  // x1 = x + c_proj(attn)
  a->ln2.resize(size_t(n * C));
  a->mean2.resize(size_t(n));
  a->rstd2.resize(size_t(n));
  nn::LayerNormForward(ctx_, a->x1.data(), p[kLn2W], p[kLn2B], n, C, kLayerNormEps, a->ln2.data(),
                       a->mean2.data(), a->rstd2.data());
  a->h.resize(size_t(n * 4 * C));
  a->g.resize(size_t(n * 4 * C));
  a->tanh.resize(size_t(n * 4 * C));
  nn::LinearForward(ctx_, a->ln2.data(), p[kFcW], p[kFcB], n, C, 4 * C, a->h.data());
  nn::GeluTanhForwardSaving(ctx_, a->h.data(), a->g.data(), a->tanh.data(), n * 4 * C);
  nn::LinearForwardResidual(ctx_, a->g.data(), p[kMProjW], p[kMProjB], a->x1.data(), n, 4 * C, C,
                            y);  // y = x1 + c_proj(gelu(c_fc(ln_2(x1))))
  return Status::Ok();
}

// dy_ holds dL/d(block output); on return dL/d(block input).
Status GptModel::BlockBackward(size_t block, const float* const* p, float* const* g,
                               bool accumulate, const float* x, const BlockActs& a) {
  (void)block;
  const int64_t C = shape_.n_embd, n = n_;
  const nn::AttentionShape as{rows_, seq_, C, shape_.n_head};
  dbig_.resize(size_t(n * 4 * C));
  dtmp_.resize(size_t(n * C));
  dqkv_.resize(size_t(n * 3 * C));
  // MLP branch: y = x1 + c_proj(gelu(c_fc(ln_2(x1)))).
  nn::LinearBackward(ctx_, a.g.data(), p[kMProjW], dy_.data(), n, 4 * C, C, g[kMProjW], g[kMProjB],
                     dbig_.data(), accumulate);
  nn::GeluTanhBackwardSaved(ctx_, a.h.data(), a.tanh.data(), dbig_.data(), dbig_.data(), n * 4 * C);
  nn::LinearBackward(ctx_, a.ln2.data(), p[kFcW], dbig_.data(), n, C, 4 * C, g[kFcW], g[kFcB],
                     dtmp_.data(), accumulate);
  nn::LayerNormBackward(ctx_, a.x1.data(), p[kLn2W], a.mean2.data(), a.rstd2.data(), dtmp_.data(),
                        n, C, dy_.data(), g[kLn2W], g[kLn2B], accumulate,
                        /*add_dx=*/true);  // dy_ += the branch's: dL/dx1
  // Attention branch: x1 = x + c_proj(attn(c_attn(ln_1(x)))).
  nn::LinearBackward(ctx_, a.atty.data(), p[kAProjW], dy_.data(), n, C, C, g[kAProjW], g[kAProjB],
                     dtmp_.data(), accumulate);
  RETURN_IF_ERROR(
      nn::AttentionBackward(ctx_, as, a.qkv.data(), a.att.data(), dtmp_.data(), dqkv_.data()));
  nn::LinearBackward(ctx_, a.ln1.data(), p[kAttnW], dqkv_.data(), n, C, 3 * C, g[kAttnW], g[kAttnB],
                     dtmp_.data(), accumulate);
  nn::LayerNormBackward(ctx_, x, p[kLn1W], a.mean1.data(), a.rstd1.data(), dtmp_.data(), n, C,
                        dy_.data(), g[kLn1W], g[kLn1B], accumulate,
                        /*add_dx=*/true);  // dy_ += the branch's: dL/dx
  return Status::Ok();
}

Status GptModel::ForwardUse(const UnitCall& call, const std::vector<TensorView>& views) {
  if (n_ == 0) return Status::Ok();  // a rank without rows still takes part in the gathers
  const int64_t L = shape_.n_layer, C = shape_.n_embd, V = shape_.padded_vocab(), n = n_;
  const size_t use = call.use;
  std::vector<const float*> p = Params(views);
  if (use == 0) {  // token + position embeddings
    xs_[1].resize(size_t(n * C));
    RETURN_IF_ERROR(nn::EmbeddingForward(ctx_, tok_.ids.data(), n, p[0], V, C, xs_[1].data()));
    nn::PositionEmbeddingForward(ctx_, p[1], rows_, seq_, C, xs_[1].data(), /*accumulate=*/true);
  } else if (use <= size_t(L)) {
    const size_t b = use - 1;
    // Recomputed blocks share one set of activations: the forward's is overwritten by the next
    // block, the recomputation's lives until this block's backward.
    BlockActs* a = recompute_ ? &scratch_acts_ : &acts_[b];
    xs_[use + 1].resize(size_t(n * C));
    RETURN_IF_ERROR(BlockForward(b, p.data(), xs_[use].data(), a, xs_[use + 1].data()));
  } else if (use == size_t(L) + 1) {  // ln_f
    std::vector<float>& y = xs_[size_t(L) + 2];
    y.resize(size_t(n * C));
    lnf_mean_.resize(size_t(n));
    lnf_rstd_.resize(size_t(n));
    nn::LayerNormForward(ctx_, xs_[use].data(), p[0], p[1], n, C, kLayerNormEps, y.data(),
                         lnf_mean_.data(), lnf_rstd_.data());
  } else {  // lm_head, tied to wte
    logits_.resize(size_t(n * V));
    nn::LinearForward(ctx_, xs_[size_t(L) + 2].data(), p[0], nullptr, n, C, V, logits_.data());
    const int64_t pad = V - shape_.vocab;  // masked out of the softmax (GptShape::padded_vocab)
    for (int64_t r = 0; pad > 0 && r < n; ++r) {
      std::memset(logits_.data() + r * V + shape_.vocab, kMaskedLogitByte, size_t(pad) * 4);
    }
  }
  return Status::Ok();
}

Status GptModel::BackwardUse(const UnitCall& call, const std::vector<TensorView>& views,
                             const std::vector<TensorView>& grads) {
  if (n_ == 0) return Status::Ok();
  const int64_t L = shape_.n_layer, C = shape_.n_embd, V = shape_.padded_vocab(), n = n_;
  const size_t use = call.use;
  std::vector<const float*> p = Params(views);
  std::vector<float*> g(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].dtype != DType::kF32) {
      return Internal("GptModel: gradient buffers must be f32, found ", DTypeName(grads[i].dtype));
    }
    g[i] = grads[i].as<float>();
  }
  if (use == size_t(L) + 2) {  // lm_head: seeds dy_ from the loss gradient
    dy_.resize(size_t(n * C));
    nn::LinearBackward(ctx_, xs_[size_t(L) + 2].data(), p[0], dlogits_.data(), n, C, V, g[0],
                       nullptr, dy_.data(), call.accumulate);
  } else if (use == size_t(L) + 1) {
    dtmp_.resize(size_t(n * C));
    nn::LayerNormBackward(ctx_, xs_[use].data(), p[0], lnf_mean_.data(), lnf_rstd_.data(),
                          dy_.data(), n, C, dtmp_.data(), g[0], g[1], call.accumulate);
    std::swap(dy_, dtmp_);
  } else if (use >= 1) {
    const size_t b = use - 1;
    RETURN_IF_ERROR(BlockBackward(b, p.data(), g.data(), call.accumulate, xs_[use].data(),
                                  recompute_ ? scratch_acts_ : acts_[b]));
  } else {
    RETURN_IF_ERROR(
        nn::EmbeddingBackward(ctx_, tok_.ids.data(), n, dy_.data(), V, C, g[0], call.accumulate));
    nn::PositionEmbeddingBackward(ctx_, dy_.data(), rows_, seq_, C, g[1], call.accumulate);
  }
  return Status::Ok();
}

StatusOr<double> GptModel::ForwardBackward(const Batch& batch) {
  RETURN_IF_ERROR(SetBatch(batch));
  double loss = 0;
  UnitCallbacks cb = Callbacks();
  cb.loss = [&](int64_t) -> Status {
    if (n_ == 0) return Status::Ok();
    dlogits_.resize(logits_.size());
    ASSIGN_OR_RETURN(loss,
                     nn::CrossEntropyLoss(ctx_, logits_.data(), tok_.targets.data(), n_,
                                          shape_.padded_vocab(), double(n_), dlogits_.data()));
    return Status::Ok();
  };
  RETURN_IF_ERROR(runner_.ForwardBackward(cb));
  return loss;
}

StatusOr<double> GptModel::LossSum(const Batch& batch) {
  RETURN_IF_ERROR(SetBatch(batch));
  RETURN_IF_ERROR(runner_.Forward(Callbacks()));
  if (n_ == 0) return 0.0;
  // Normaliser t: each row's mean over its targets, summed over rows.
  return nn::CrossEntropyLoss(ctx_, logits_.data(), tok_.targets.data(), n_, shape_.padded_vocab(),
                              double(seq_), nullptr);
}

StatusOr<const float*> GptModel::LastLogits(const Batch& batch) {
  RETURN_IF_ERROR(SetBatch(batch));
  if (n_ == 0) return InvalidArgument("LastLogits: an empty batch");
  RETURN_IF_ERROR(runner_.Forward(Callbacks()));
  return logits_.data() + (n_ - 1) * shape_.padded_vocab();
}

StatusOr<std::vector<int64_t>> GptLm::Sample(std::vector<int64_t> prompt, int64_t n,
                                             double temperature, uint64_t seed,
                                             const std::string& stream) {
  if (prompt.empty()) return InvalidArgument("Sample: empty prompt");
  SeededRng rng(seed, stream);
  std::vector<int64_t> out;
  Batch b;
  const int64_t V = shape_.vocab;
  std::vector<double> prob(static_cast<size_t>(V));
  for (int64_t k = 0; k < n; ++k) {
    const int64_t t = std::min<int64_t>(int64_t(prompt.size()), shape_.block_size);
    b.rows = 1;
    b.tokens.assign(prompt.end() - t, prompt.end());
    b.tokens.push_back(0);  // a target, unused
    ASSIGN_OR_RETURN(const float* last, LastLogits(b));
    int64_t next = int64_t(std::max_element(last, last + V) - last);
    if (temperature > 0) {
      const double mx = double(last[next]);
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) {
        prob[size_t(v)] = std::exp((double(last[v]) - mx) / temperature);
        sum += prob[size_t(v)];
      }
      double u = rng.Uniform01() * sum;
      next = V - 1;
      for (int64_t v = 0; v < V; ++v) {
        u -= prob[size_t(v)];
        if (u < 0) {
          next = v;
          break;
        }
      }
    }
    out.push_back(next);
    prompt.push_back(next);
  }
  return out;
}

}  // namespace shardema::examples
