#include "examples/mlp_train.h"

#include <CLI/CLI.hpp>

#include "checkpoint/collective_bytes.h"
#include "examples/cuda/mlp_model_cuda.h"
#include "examples/mlp_model.h"
#include "framework/logging.h"
#include "train/memory_estimate.h"

namespace shardema::examples {
namespace {

const char* kDescription =
    "Trains a multilayer perceptron with the sharded parameter store (FSDP-style), AdamW/SGD and\n"
    "sharded EMA slots. Run as: mpirun -np W train_mlp --layers 6,9,7,3 ...\n"
    "Without --data the task is synthetic: --synthetic-rows inputs x ~ N(0, 1) (seeded) and\n"
    "targets from a random teacher MLP of the same --layers and --activation (weights\n"
    "U(-sqrt(3/in), sqrt(3/in)), biases U(-0.1, 0.1)); mse regresses its outputs, cross_entropy\n"
    "predicts their argmax. Without --init, parameters are drawn like torch.nn.Linear\n"
    "(U(-1/sqrt(in), 1/sqrt(in))) from an RNG seeded by (--seed, parameter name), so any world\n"
    "size starts from the same weights. Step s uses rows (s*B + j) mod N, j < B; rank r of W\n"
    "takes j in [r*B/W, (r+1)*B/W) (per micro-batch with --grad-accum).\n"
    "EMA slots: --ema D,... (constant decay d by default, --ema-schedule warmup|power_warmup),\n"
    "--ema-sigma-rel S,... (EDM2 power function, slots ema_pf_S), --ema-half-life H,... (slots\n"
    "ema_hl_H, H in optimizer steps), and --ema-spec NAME:key=val,... for any EmaConfig field\n"
    "(kind, decay, inv_gamma, power, min_decay, update_after_step, gamma, sigma_rel,\n"
    "half_life_steps, rampup, start_step, interval, correct_interval, offload, buffer_rules).\n"
    "Exit codes: 0 ok, 2 invalid argument, 3 not found, 4 data loss (corrupt file), 1 other.";

// The raw strings CLI11 collects, converted by the finish step.
struct RawMlpFlags {
  std::string layers, activation = "relu", loss = "mse";
};

Status FinishMlp(const RawMlpFlags& raw, MlpConfig& c) {
  if (raw.layers.empty()) return InvalidArgument("--layers is required (e.g. --layers 784,256,10)");
  ASSIGN_OR_RETURN(c.layers, ParseIntList("--layers", raw.layers));
  if (c.layers.size() < 2) {
    return InvalidArgument("--layers ", raw.layers, ": need at least two sizes (input and output)");
  }
  for (int64_t d : c.layers) {
    if (d <= 0) return InvalidArgument("--layers ", raw.layers, ": size ", d, " is not positive");
  }
  ASSIGN_OR_RETURN(c.activation, mlp::ParseActivation(raw.activation));
  ASSIGN_OR_RETURN(c.loss, mlp::ParseLoss(raw.loss));
  if (c.loss == mlp::Loss::kCrossEntropy && c.layers.back() < 2) {
    return InvalidArgument("--loss cross_entropy needs at least 2 classes, --layers ends with ",
                           c.layers.back());
  }
  if (c.synthetic_rows < 1) return InvalidArgument("--synthetic-rows ", c.synthetic_rows, " < 1");
  return Status::Ok();
}

// The rows of a Dataset: step s uses rows (s*B + j) mod N (examples/dataset.h).
class MlpData final : public TrainData {
 public:
  MlpData(Dataset data, Dataset eval) : data_(std::move(data)), eval_(std::move(eval)) {}
  std::string source() const override { return data_.source; }
  int64_t size() const override { return data_.rows; }
  void FillTrain(int64_t step, int64_t batch, RowSpan span, Batch* out) override {
    FillStepBatch(data_, step, batch, span, out);
  }
  int64_t EvalRows() const override { return Eval().rows; }
  void FillEval(RowSpan span, Batch* out) const override { FillRowBatch(Eval(), span, out); }
  nlohmann::json Progress(int64_t step, int64_t batch) const override {
    return {{"next_row", BatchRow(step, batch, 0, data_.rows)}};
  }

 private:
  const Dataset& Eval() const { return eval_.rows > 0 ? eval_ : data_; }
  Dataset data_;
  Dataset eval_;  // empty (rows 0) when the training rows are used
};

class MlpTrainModel final : public TrainModel {
 public:
  explicit MlpTrainModel(const MlpConfig& c) : c_(c) {}
  std::string name() const override { return "train_mlp"; }
  std::vector<UnitSpec> Units() const override { return MlpUnits(c_.layers); }

  StatusOr<ModelMemory> Memory() const override {
    ModelMemory m;
    m.size_flags = "--layers";
    if (c_.layers.size() < 2) {
      return InvalidArgument("--layers: need at least two sizes, found ", c_.layers.size());
    }
    for (size_t i = 0; i + 1 < c_.layers.size(); ++i) {
      const int64_t in = c_.layers[i], out = c_.layers[i + 1];
      if (in <= 0 || out <= 0) return InvalidArgument("--layers: sizes must be > 0");
      ASSIGN_OR_RETURN(int64_t unit, MulAdd(in, out, out, m.size_flags));
      m.unit_numels.push_back(unit);
    }
    for (int64_t d : c_.layers) {
      ASSIGN_OR_RETURN(m.activation_values_per_row,
                       MulAdd(1, m.activation_values_per_row, d, m.size_flags));
    }
    if (c_.data.empty()) {
      ASSIGN_OR_RETURN(int64_t row_bytes,
                       MulAdd(c_.layers.front() + c_.layers.back(), 4, 0, m.size_flags));
      ASSIGN_OR_RETURN(m.data_bytes, MulAdd(c_.synthetic_rows, row_bytes, 0, "--synthetic-rows"));
    } else {
      m.data_bytes = FileBytes(c_.data);
    }
    return m;
  }

  StatusOr<std::unique_ptr<TrainData>> LoadData(Communicator* comm) override {
    DataOptions dopt;
    dopt.allow_nonfinite = c_.allow_nonfinite_data;
    const int64_t in = c_.layers.front(), out = c_.layers.back();
    StatusOr<Dataset> d = c_.data.empty()
                              ? StatusOr<Dataset>(MakeSyntheticDataset(
                                    c_.seed, c_.layers, c_.activation, c_.loss, c_.synthetic_rows))
                              : LoadDataset(c_.data, c_.loss, in, out, dopt);
    RETURN_IF_ERROR(AgreeOnStatus(comm, d.status(), "--data"));
    Dataset eval;
    if (!c_.eval_data.empty()) {
      StatusOr<Dataset> e = LoadDataset(c_.eval_data, c_.loss, in, out, dopt);
      RETURN_IF_ERROR(AgreeOnStatus(comm, e.status(), "--eval-data"));
      eval = std::move(e).value();
    }
    for (const Dataset* ds : {&*d, &eval}) {
      if (comm->rank() == 0 && ds->nonfinite_rows_skipped > 0) {
        LOG_WARNING << "--allow-nonfinite-data: skipped " << ds->nonfinite_rows_skipped << " of "
                    << ds->rows + ds->nonfinite_rows_skipped << " rows of '" << ds->source
                    << "' holding NaN/Inf (first: row " << ds->first_nonfinite_row << "); "
                    << ds->rows << " rows left";
      }
    }
    return std::unique_ptr<TrainData>(new MlpData(std::move(d).value(), std::move(eval)));
  }

  Status Init(ShardedParameterStore* store, uint64_t seed) override {
    return InitMlpFromSeed(store, c_.layers, seed);
  }
  Status InitFromFile(ShardedParameterStore* store, const std::string& path) override {
    return InitMlpFromFile(store, path);
  }

  StatusOr<std::unique_ptr<ModelCompute>> Build(const ModelContext& ctx) override {
    if (ctx.store->device().is_cuda()) {
      ASSIGN_OR_RETURN(
          std::unique_ptr<MlpModelCuda> m,
          MlpModelCuda::Create(ctx.store, c_.layers, c_.activation, c_.loss, ctx.allow_tf32));
      return std::unique_ptr<ModelCompute>(std::move(m));
    }
    return std::unique_ptr<ModelCompute>(
        new MlpModel(ctx.store, c_.layers, c_.activation, c_.loss, ctx.compute_threads));
  }

  nlohmann::json Hparams() const override {
    const nlohmann::json all = Config();
    nlohmann::json h;
    for (const char* k : {"layers", "activation", "loss", "data", "synthetic_rows"}) h[k] = all[k];
    return h;
  }
  nlohmann::json Config() const override {
    return {{"layers", c_.layers},
            {"activation", c_.activation == mlp::Activation::kRelu ? "relu" : "gelu"},
            {"loss", c_.loss == mlp::Loss::kMse ? "mse" : "cross_entropy"},
            {"synthetic_rows", c_.synthetic_rows},
            {"data", c_.data},
            {"eval_data", c_.eval_data},
            {"allow_nonfinite_data", c_.allow_nonfinite_data}};
  }
  nlohmann::json BenchJson() const override { return {{"layers", c_.layers}}; }

 private:
  const MlpConfig c_;
};

}  // namespace

ModelFlags MlpFlags(MlpConfig* c) {
  auto raw = std::make_shared<RawMlpFlags>();
  ModelFlags f;
  f.program = "train_mlp";
  f.description = kDescription;
  f.add = [c, raw](CLI::App& app, TrainConfig&) {
    app.add_option("--layers", raw->layers,
                   "Sizes D0,D1,...,DL: Linear(D0->D1), act, ..., Linear(->DL)");
    app.add_option("--activation", raw->activation, "relu | gelu (exact erf)")
        ->capture_default_str();
    app.add_option("--loss", raw->loss, "mse | cross_entropy (means over the global batch)")
        ->capture_default_str();
    app.add_option("--data", c->data,
                   "safetensors with x F32 [N, D0], y F32 [N, DL] (mse) or I64/I32 [N]");
    app.add_option("--eval-data", c->eval_data,
                   "safetensors like --data for evaluation (default: training rows)");
    app.add_flag("--allow-nonfinite-data", c->allow_nonfinite_data,
                 "skip --data/--eval-data rows holding NaN/Inf (logged count); default: refuse "
                 "such data (exit 2)");
    app.add_option("--synthetic-rows", c->synthetic_rows, "rows of the synthetic task")
        ->capture_default_str();
  };
  f.finish = [c, raw] { return FinishMlp(*raw, *c); };
  return f;
}

StatusOr<ParsedMlpArgs> ParseMlpConfig(const std::vector<std::string>& args) {
  return ParseConfig(args, MlpFlags);
}

std::unique_ptr<TrainModel> MakeMlpModel(const MlpConfig& config) {
  return std::make_unique<MlpTrainModel>(config);
}

StatusOr<std::unique_ptr<Trainer>> CreateTrainer(const MlpConfig& config, Communicator* comm,
                                                 Communicator* device_comm) {
  return Trainer::Create(config, MakeMlpModel(config), comm, device_comm);
}

TrainerBinary MlpBinary(MlpConfig* config) { return BinaryOf(config, MlpFlags, MakeMlpModel); }

}  // namespace shardema::examples
