#include "examples/gpt_train.h"

#include <CLI/CLI.hpp>

#include "checkpoint/collective_bytes.h"
#include "examples/cuda/gpt_model_cuda.h"
#include "train/memory_estimate.h"

namespace shardema::examples {
namespace {

const char* kDescription =
    "Trains a nanoGPT-shaped transformer (PyTorch parameter names, lm_head tied to wte) with the\n"
    "sharded parameter store, AdamW/SGD and sharded EMA slots. --vocab-size V (default 256, the\n"
    "bytes) is padded to a multiple of 64 (GPT-2's 50257 -> 50304) for the GEMMs; the padding\n"
    "logits are masked out of the softmax and exports keep wte's V real rows.\n"
    "Run as: mpirun -np W train_gpt --data input.txt --n-layer 4 --n-head 4 --n-embd 128 ...\n"
    "--data: the raw bytes of a file are the tokens, or a .safetensors with tokens\n"
    "(U8/U16/I32/I64 [N]), or a .bin token file (nanoGPT's uint16 train.bin, or an llm.c shard:\n"
    "a 256-int32 header, then uint16), memory-mapped; a pattern with * or ? reads its .bin files\n"
    "in name order as one stream (llm.c's shards). Step s uses --batch B sequences of --block-size "
    "T tokens; rank r of W\n"
    "takes sequences j in [r*B/W, (r+1)*B/W) (per micro-batch with --grad-accum). --data-order\n"
    "sequential: sequence j starts at ((s*B + j)*T) mod (N - T); shuffled: a seeded permutation,\n"
    "per epoch, of the windows k*T (the same at every world size). Without --init, nanoGPT's\n"
    "init (N(0, 0.02), c_proj weights N(0, 0.02/sqrt(2*n_layer)), biases 0, LayerNorm 1/0) from\n"
    "an RNG seeded by (--seed, parameter name). Weight decay applies to >= 2-D parameters only.\n"
    "EMA flags as train_mlp (--ema, --ema-sigma-rel, --ema-half-life, --ema-spec,\n"
    "--ema-snapshot-every).\n"
    "Exit codes: 0 ok, 2 invalid argument, 3 not found, 4 data loss (corrupt file), 1 other.";

Status FinishGpt(const std::string& data_order, const std::string& attention, GptConfig& c) {
  if (c.n_layer < 1 || c.n_head < 1 || c.n_embd < 1 || c.block_size < 1) {
    return InvalidArgument("--n-layer ", c.n_layer, ", --n-head ", c.n_head, ", --n-embd ",
                           c.n_embd, " and --block-size ", c.block_size, " must be >= 1");
  }
  if (c.n_embd % c.n_head != 0) {
    return InvalidArgument("--n-embd ", c.n_embd, " is not divisible by --n-head ", c.n_head);
  }
  if (c.vocab_size < 1 || c.vocab_size > (int64_t(1) << 31) - 64) {
    return InvalidArgument("--vocab-size ", c.vocab_size, " is outside [1, 2^31 - 64]");
  }
  if (c.data.empty())
    return InvalidArgument(
        "--data is required (a text file, .safetensors with tokens, or .bin token files)");
  ASSIGN_OR_RETURN(c.data_order, ParseDataOrder(data_order));
  StatusOr<nn::AttentionBackend> backend = nn::ParseAttentionBackend(attention);
  if (!backend.ok()) return InvalidArgument("--attention: ", backend.status().message());
  c.attention = *backend;
  if (c.sample < 0) return InvalidArgument("--sample ", c.sample, " < 0");
  RETURN_IF_ERROR(RequireFinite("--temperature", c.temperature, true));
  return Status::Ok();
}

// Token sequences: step s's sequence j starts at SequenceOrder::Start(s, j) (examples/gpt_data.h);
// evaluation takes the non-overlapping windows of the eval tokens.
class GptData final : public TrainData {
 public:
  GptData(const GptConfig& c, TokenData tokens, TokenData eval)
      : c_(c),
        tokens_(std::move(tokens)),
        eval_(std::move(eval)),
        order_(c.data_order, c.seed, tokens_.size(), c.block_size, c.batch) {}
  std::string source() const override { return tokens_.source; }
  int64_t size() const override { return tokens_.size(); }
  const char* size_unit() const override { return "tokens"; }
  void FillTrain(int64_t step, int64_t, RowSpan span, Batch* out) override {
    FillStepSequences(tokens_, &order_, step, span, c_.block_size, out);
  }
  int64_t EvalRows() const override { return NumWindows(Eval().size(), c_.block_size); }
  void FillEval(RowSpan span, Batch* out) const override {
    FillWindowSequences(Eval(), span, c_.block_size, out);
  }
  nlohmann::json Progress(int64_t step, int64_t batch) const override {
    // rows = the token count; the order is a pure function of (seed, step, j).
    return {{"next_row", BatchRow(step, batch, 0, tokens_.size())},
            {"order", DataOrderName(c_.data_order)},
            {"next_sequence", step * batch}};
  }

 private:
  const TokenData& Eval() const { return eval_.size() > 0 ? eval_ : tokens_; }
  const GptConfig& c_;
  TokenData tokens_, eval_;  // eval_ empty: the training tokens
  SequenceOrder order_;
};

class GptTrainModel final : public TrainModel {
 public:
  explicit GptTrainModel(const GptConfig& c) : c_(c) {}
  std::string name() const override { return "train_gpt"; }
  std::vector<UnitSpec> Units() const override { return GptUnits(c_.Shape()); }
  // nanoGPT's grouping: no weight decay for parameters with fewer than two dimensions (biases and
  // LayerNorm weights). Checked against the shapes in Build.
  std::vector<ParamGroupRule> ParamGroups() const override {
    std::vector<ParamGroupRule> rules(2);
    rules[0].pattern = "*.bias";
    rules[1].pattern = "*.ln_*.weight";
    for (ParamGroupRule& r : rules) r.weight_decay = 0.0;
    return rules;
  }
  std::map<std::string, std::string> TiedNames() const override { return GptTiedNames(); }
  nlohmann::json MetaSections() const override {
    nlohmann::json m = TrainModel::MetaSections();
    m.update(GptMetaSections(c_.Shape()));
    return m;
  }

  // Units wte V*C, wpe T*C, ln_f 2C and n_layer blocks of 12C^2 + 13C; per token of a micro-batch
  // every block's ln_1, qkv, attention probabilities, attention output, c_proj, ln_2, c_fc, gelu
  // and its tanh, mlp c_proj (20 C + n_head T) plus the logits V. Evaluation runs in
  // training-sized micro-batches.
  StatusOr<ModelMemory> Memory() const override {
    ModelMemory m;
    m.size_flags = "--n-embd / --n-layer";
    const std::string flag = "--n-embd / --n-layer / --block-size";
    const int64_t C = c_.n_embd, T = c_.block_size, V = c_.Shape().padded_vocab();
    if (C <= 0 || T <= 0 || c_.n_layer <= 0 || c_.n_head <= 0 || C % c_.n_head != 0) {
      return InvalidArgument("GPT shape: --n-layer ", c_.n_layer, " --n-head ", c_.n_head,
                             " --n-embd ", C, " --block-size ", T,
                             " (all > 0, n_embd must divide by n_head)");
    }
    ASSIGN_OR_RETURN(int64_t c2, MulAdd(C, C, 0, flag));
    ASSIGN_OR_RETURN(int64_t block, MulAdd(c2, 12, 13 * C, flag));
    m.unit_numels = {V * C, T * C, 2 * C};
    for (int64_t i = 0; i < c_.n_layer; ++i) m.unit_numels.push_back(block);
    ASSIGN_OR_RETURN(int64_t per_token, MulAdd(c_.n_head, T, 20 * C, flag));
    ASSIGN_OR_RETURN(per_token, MulAdd(per_token, c_.n_layer, V, flag));
    ASSIGN_OR_RETURN(m.activation_values_per_row, MulAdd(per_token, T, 0, flag));
    m.eval_in_train_batches = true;
    m.data_bytes = FileBytes(c_.data);
    return m;
  }

  StatusOr<std::unique_ptr<TrainData>> LoadData(Communicator* comm) override {
    const int64_t vocab = c_.vocab_size;
    StatusOr<TokenData> d = LoadTokens(c_.data, vocab, c_.block_size);
    RETURN_IF_ERROR(AgreeOnStatus(comm, d.status(), "--data"));
    TokenData eval;
    if (!c_.eval_data.empty()) {
      StatusOr<TokenData> e = LoadTokens(c_.eval_data, vocab, c_.block_size);
      RETURN_IF_ERROR(AgreeOnStatus(comm, e.status(), "--eval-data"));
      eval = std::move(e).value();
    }
    return std::unique_ptr<TrainData>(new GptData(c_, std::move(d).value(), std::move(eval)));
  }

  Status Init(ShardedParameterStore* store, uint64_t seed) override {
    return InitGptFromSeed(store, c_.Shape(), seed);
  }
  Status InitFromFile(ShardedParameterStore* store, const std::string& path) override {
    return InitGptFromFile(store, c_.Shape(), path);
  }

  StatusOr<std::unique_ptr<ModelCompute>> Build(const ModelContext& ctx) override {
    RETURN_IF_ERROR(CheckDecayGroups(ctx));
    std::unique_ptr<GptLm> lm;
    if (ctx.store->device().is_cuda()) {
      ASSIGN_OR_RETURN(lm, GptModelCuda::Create(ctx.store, c_.Shape(), c_.recompute, ctx.allow_tf32,
                                                c_.attention));
    } else if (c_.attention != nn::AttentionBackend::kAuto) {
      return InvalidArgument("--attention ", nn::AttentionBackendName(c_.attention),
                             " applies to --device cuda; the CPU has one attention");
    } else {
      ASSIGN_OR_RETURN(lm,
                       GptModel::Create(ctx.store, c_.Shape(), ctx.compute_threads, c_.recompute));
    }
    lm_ = lm.get();
    return std::unique_ptr<ModelCompute>(std::move(lm));
  }

  nlohmann::json Hparams() const override {
    const nlohmann::json all = Config();
    nlohmann::json h;
    for (const char* k : {"model", "n_layer", "n_head", "n_embd", "block_size", "vocab_size",
                          "data", "data_order"}) {
      if (all.contains(k)) h[k] = all[k];
    }
    return h;
  }
  nlohmann::json Config() const override {
    nlohmann::json cfg = {{"model", "gpt"},
                          {"n_layer", c_.n_layer},
                          {"n_head", c_.n_head},
                          {"n_embd", c_.n_embd},
                          {"block_size", c_.block_size},
                          {"data_order", DataOrderName(c_.data_order)},
                          {"sample", c_.sample},
                          {"temperature", c_.temperature},
                          {"recompute", c_.recompute},
                          {"compute_threads", c_.compute_threads},
                          {"data", c_.data},
                          {"eval_data", c_.eval_data}};
    // The byte vocabulary (the default) is left out: checkpoints from before --vocab-size match.
    if (c_.vocab_size != GptShape().vocab) cfg["vocab_size"] = c_.vocab_size;
    return cfg;
  }
  nlohmann::json BenchJson() const override {
    return {{"n_layer", c_.n_layer},
            {"n_head", c_.n_head},
            {"n_embd", c_.n_embd},
            {"block_size", c_.block_size},
            {"attention", lm_ != nullptr ? lm_->attention_implementation() : "none"},
            {"gpu_ops", OpTotalsJson()},
            {"lt_matmuls", LtMatmulsJson()}};
  }
  std::string ProfileReport() const override {
    StatusOr<std::vector<GpuOpTotal>> t = OpTotals();
    if (!t.ok()) return "GPU ops: " + t.status().ToString() + "\n";
    if (t->empty()) return std::string();
    double sum = 0;
    for (const GpuOpTotal& o : *t) sum += o.ms;
    return "GPU ops of the last training micro-batch (device ms from CUDA events; " +
           std::to_string(sum) + " ms in all):\n" + FormatOpTimes(*t, 0);
  }

  StatusOr<std::vector<GpuOpTotal>> OpTotals() const {
    if (lm_ == nullptr) return std::vector<GpuOpTotal>();
    return lm_->OpTotals();
  }
  // {"bias": n, ...}: the GPU model's cuBLASLt matmuls by epilogue ({} on the CPU).
  nlohmann::json LtMatmulsJson() const {
    nlohmann::json o = nlohmann::json::object();
    if (lm_ == nullptr) return o;
    for (const auto& [name, n] : lm_->LtMatmuls()) o[name] = n;
    return o;
  }
  // [{"name", "ms", "count"}, ...] of OpTotals, largest first ([] on the CPU or without --profile;
  // {"error": ...} when they cannot be read).
  nlohmann::json OpTotalsJson() const {
    StatusOr<std::vector<GpuOpTotal>> t = OpTotals();
    if (!t.ok()) return {{"error", t.status().ToString()}};
    nlohmann::json a = nlohmann::json::array();
    for (const GpuOpTotal& o : *t)
      a.push_back({{"name", o.name}, {"ms", o.ms}, {"count", o.count}});
    return a;
  }

  // --sample tokens generated with the prompt "\n" (token 10), --temperature and the stream
  // "sample" of --seed (the same for every weights): the text of a byte vocabulary, else the token
  // ids separated by spaces.
  bool samples() const override { return c_.sample > 0; }
  StatusOr<std::string> Sample() override {
    ASSIGN_OR_RETURN(std::vector<int64_t> toks,
                     lm_->Sample({int64_t('\n')}, c_.sample, c_.temperature, c_.seed, "sample"));
    std::string text;
    for (int64_t t : toks) {
      if (c_.vocab_size <= 256) {
        text.push_back(char(t));
      } else {
        text += (text.empty() ? "" : " ") + std::to_string(t);
      }
    }
    return text;
  }

 private:
  // The groups decay exactly the >= 2-D parameters (with a non-zero --weight-decay).
  Status CheckDecayGroups(const ModelContext& ctx) const {
    if (c_.weight_decay == 0) return Status::Ok();
    const Optimizer& opt = *ctx.optimizer;
    for (const UnitLayout& u : ctx.store->layout().units()) {
      for (const ParamLayout& p : u.params) {
        const bool decays = opt.group_hyper(opt.GroupOf(p.name)).weight_decay != 0;
        if (decays != (p.shape.size() >= 2)) {
          return Internal("weight decay grouping: parameter '", p.name, "' of shape ",
                          ShapeToString(p.shape), (decays ? " decays" : " does not decay"));
        }
      }
    }
    return Status::Ok();
  }

  const GptConfig c_;
  GptLm* lm_ = nullptr;  // the compute Build made (owned by the trainer)
};

}  // namespace

GptConfig::GptConfig() {
  weight_decay = 0.1;
  clip_norm = 1.0;
  beta2 = 0.95;
}

GptShape GptConfig::Shape() const {
  GptShape s;
  s.n_layer = n_layer;
  s.n_head = n_head;
  s.n_embd = n_embd;
  s.block_size = block_size;
  s.vocab = vocab_size;
  return s;
}

ModelFlags GptFlags(GptConfig* c) {
  auto data_order = std::make_shared<std::string>("shuffled");
  auto attention = std::make_shared<std::string>("auto");
  ModelFlags f;
  f.program = "train_gpt";
  f.description = kDescription;
  f.add = [c, data_order, attention](CLI::App& app, TrainConfig&) {
    app.add_option("--n-layer", c->n_layer, "transformer blocks")->capture_default_str();
    app.add_option("--n-head", c->n_head, "attention heads (divide --n-embd)")
        ->capture_default_str();
    app.add_option("--n-embd", c->n_embd, "model width C")->capture_default_str();
    app.add_option("--block-size", c->block_size, "sequence length T")->capture_default_str();
    app.add_option("--vocab-size", c->vocab_size,
                   "vocabulary V (tokens in [0, V)); padded to a multiple of 64")
        ->capture_default_str();
    app.add_option("--data", c->data,
                   "text file (bytes are tokens), .safetensors with tokens [N], or .bin token "
                   "files (nanoGPT / llm.c; a * or ? pattern for several)");
    app.add_option("--eval-data", c->eval_data,
                   "like --data, for evaluation (default: training tokens)");
    app.add_option("--data-order", *data_order, "shuffled | sequential")->capture_default_str();
    app.add_option("--sample", c->sample, "bytes to generate at the end from live and EMA weights")
        ->capture_default_str();
    app.add_option("--temperature", c->temperature, "sampling temperature (0: argmax)")
        ->capture_default_str();
    app.add_flag("--recompute", c->recompute, "recompute each block's activations in the backward");
    app.add_option("--attention", *attention,
                   "GPU attention: auto (cuDNN with bf16 where it runs, else ours) | cudnn | own")
        ->capture_default_str();
  };
  f.finish = [c, data_order, attention] { return FinishGpt(*data_order, *attention, *c); };
  return f;
}

StatusOr<ParsedGptArgs> ParseGptConfig(const std::vector<std::string>& args) {
  return ParseConfig(args, GptFlags);
}

std::unique_ptr<TrainModel> MakeGptModel(const GptConfig& config) {
  return std::make_unique<GptTrainModel>(config);
}

StatusOr<std::unique_ptr<Trainer>> CreateTrainer(const GptConfig& config, Communicator* comm,
                                                 Communicator* device_comm) {
  return Trainer::Create(config, MakeGptModel(config), comm, device_comm);
}

TrainerBinary GptBinary(GptConfig* config) { return BinaryOf(config, GptFlags, MakeGptModel); }

}  // namespace shardema::examples
