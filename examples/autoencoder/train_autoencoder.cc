// train_autoencoder: a tied-weight autoencoder written only against shardema's public API
// (train/model.h, train/trainer_main.h, fsdp/unit_runner.h, nn/), trained on the Wisconsin
// breast-cancer measurements that Debian's python3-sklearn ships (569 rows of 30 features; every
// column standardised to mean 0, standard deviation 1 over the rows).
//
// Model: h = relu(x W^T + b_enc), x_hat = h W + b_dec: W [H, D] is used twice, so the one store
// unit "ae" = {enc.weight [H, D], enc.bias [H], dec_bias [D]} has the schedule encoder (use 0),
// decoder (use 1); loss: mean squared reconstruction error over the rows and features. The
// PyTorch twin (load_in_torch.py): enc = nn.Linear(D, H), dec_bias = nn.Parameter(zeros(D)),
// forward(x) = relu(enc(x)) @ enc.weight + dec_bias.
#include <CLI/CLI.hpp>
#include <cmath>
#include <fstream>
#include <sstream>

#include "checkpoint/collective_bytes.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "train/init_file.h"
#include "train/memory_estimate.h"
#include "train/trainer_main.h"
#include "train/unit_compute.h"

namespace ae {
using namespace shardema;  // NOLINT: a user's binary

struct Config : TrainConfig {
  std::string data = "/usr/lib/python3/dist-packages/sklearn/datasets/data/breast_cancer.csv";
  int64_t features = 30, hidden = 8;
};

// ---- data: scikit-learn's CSV ("N,D,class names..." then N rows of D values and a label) ----
StatusOr<std::vector<float>> ReadStandardised(const std::string& path, int64_t d, int64_t* n) {
  std::ifstream in(path);
  if (!in) return NotFound("--data '", path, "' cannot be read (tools/setup.sh installs it)");
  std::string line;
  std::vector<double> v;
  int64_t rows = 0;
  for (int64_t row = -1; std::getline(in, line); ++row) {
    std::istringstream cells(line);
    std::string cell;
    std::vector<double> vals;
    while (std::getline(cells, cell, ',')) vals.push_back(std::strtod(cell.c_str(), nullptr));
    if (row < 0) {
      rows = int64_t(vals.size() >= 2 ? vals[0] : 0);
      if (vals.size() < 2 || int64_t(vals[1]) != d) {
        return InvalidArgument("--data '", path, "': header '", line, "' does not give N,", d,
                               " (--features ", d, ")");
      }
    } else if (int64_t(vals.size()) != d + 1) {
      return InvalidArgument("--data '", path, "' line ", row + 2, ": ", vals.size(),
                             " values, expected ", d + 1);
    } else {
      v.insert(v.end(), vals.begin(), vals.end() - 1);
    }
  }
  if (rows < 1 || int64_t(v.size()) != rows * d)
    return InvalidArgument("--data '", path, "': ", v.size() / d, " rows, header says ", rows);
  std::vector<float> x(v.size());
  for (int64_t j = 0; j < d; ++j) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < rows; ++i) mean += v[i * d + j] / double(rows);
    for (int64_t i = 0; i < rows; ++i) var += std::pow(v[i * d + j] - mean, 2) / double(rows);
    for (int64_t i = 0; i < rows; ++i) x[i * d + j] = float((v[i * d + j] - mean) / std::sqrt(var));
  }
  *n = rows;
  return x;
}

// Step s takes rows (s*B + j) mod N; evaluation takes every row.
class Rows final : public TrainData {
 public:
  Rows(std::string source, std::vector<float> x, int64_t n, int64_t d)
      : source_(std::move(source)), x_(std::move(x)), n_(n), d_(d) {}
  std::string source() const override { return source_; }
  int64_t size() const override { return n_; }
  void FillTrain(int64_t step, int64_t batch, RowSpan span, Batch* out) override {
    Fill(span, ((step % n_) * (batch % n_)) % n_, out);
  }
  int64_t EvalRows() const override { return n_; }
  void FillEval(RowSpan span, Batch* out) const override { Fill(span, 0, out); }
  nlohmann::json Progress(int64_t step, int64_t batch) const override {
    return {{"next_row", ((step % n_) * (batch % n_)) % n_}};
  }

 private:
  void Fill(RowSpan span, int64_t first, Batch* out) const {
    out->rows = span.size();
    out->x.resize(size_t(span.size() * d_));
    for (int64_t j = span.begin; j < span.end; ++j) {
      const float* row = x_.data() + ((first + j) % n_) * d_;
      std::copy(row, row + d_, out->x.begin() + (j - span.begin) * d_);
    }
  }
  std::string source_;
  std::vector<float> x_;
  int64_t n_, d_;
};

// ---- compute: the two uses of unit "ae" (train/unit_compute.h runs the UnitRunner) ----
class Compute final : public UnitCompute {
 public:
  Compute(UnitRunner runner, int64_t d, int64_t h, int threads)
      : UnitCompute(std::move(runner)), d_(d), h_(h), ctx_(threads) {}

 private:
  Status Forward(const UnitCall& c, const Batch& b, const std::vector<TensorView>& p) override {
    ASSIGN_OR_RETURN(const float* w, ParamF32(c, p, "enc.weight"));
    if (c.use == 0) {  // h = relu(x W^T + b_enc)
      ASSIGN_OR_RETURN(const float* bias, ParamF32(c, p, "enc.bias"));
      z_.resize(size_t(b.rows * h_));
      a_.resize(z_.size());
      nn::LinearForward(ctx_, b.x.data(), w, bias, b.rows, d_, h_, z_.data());
      nn::ActivationForward(ctx_, nn::Activation::kRelu, z_.data(), a_.data(), int64_t(z_.size()));
      return Status::Ok();
    }
    ASSIGN_OR_RETURN(const float* bias, ParamF32(c, p, "dec_bias"));  // x_hat = h W + b_dec
    y_.resize(size_t(b.rows * d_));
    nn::LinearForwardUntransposed(ctx_, a_.data(), w, bias, b.rows, h_, d_, y_.data());
    return Status::Ok();
  }
  StatusOr<double> Loss(const Batch& b) override {  // mean over rows and features
    dy_.resize(y_.size());
    if (b.rows == 0) return 0.0;
    return nn::MseLoss(ctx_, y_.data(), b.x.data(), b.rows * d_, double(b.rows * d_), dy_.data());
  }
  Status Backward(const UnitCall& c, const Batch& b, const std::vector<TensorView>& p,
                  const std::vector<TensorView>& g) override {
    ASSIGN_OR_RETURN(const float* w, ParamF32(c, p, "enc.weight"));
    ASSIGN_OR_RETURN(float* dw, ParamF32(c, g, "enc.weight"));
    if (c.use == 1) {  // the decoder (the first backward use): dh = dy W^T
      ASSIGN_OR_RETURN(float* dc, ParamF32(c, g, "dec_bias"));
      dh_.resize(z_.size());
      nn::LinearBackwardUntransposed(ctx_, a_.data(), w, dy_.data(), b.rows, h_, d_, dw, dc,
                                     dh_.data(), c.accumulate);
      return Status::Ok();
    }
    ASSIGN_OR_RETURN(float* db, ParamF32(c, g, "enc.bias"));
    nn::ActivationBackward(ctx_, nn::Activation::kRelu, z_.data(), dh_.data(), dh_.data(),
                           int64_t(z_.size()));
    nn::LinearBackward(ctx_, b.x.data(), w, dh_.data(), b.rows, d_, h_, dw, db, nullptr,
                       c.accumulate);
    return Status::Ok();
  }
  StatusOr<double> EvalLossSum(const Batch& b) override {  // per-row means, summed
    if (b.rows == 0) return 0.0;
    dy_.resize(y_.size());
    return nn::MseLoss(ctx_, y_.data(), b.x.data(), b.rows * d_, double(d_), dy_.data());
  }
  int64_t d_, h_;
  nn::CpuContext ctx_;
  std::vector<float> z_, a_, y_, dy_, dh_;
};

// ---- the model as the trainer sees it ----
class Model final : public TrainModel {
 public:
  explicit Model(const ae::Config& c) : c_(c) {}
  std::string name() const override { return "train_autoencoder"; }
  std::vector<UnitSpec> Units() const override {
    return {{"ae",
             {{"enc.weight", {c_.hidden, c_.features}},
              {"enc.bias", {c_.hidden}},
              {"dec_bias", {c_.features}}}}};
  }
  StatusOr<ModelMemory> Memory() const override {
    ModelMemory m;
    m.size_flags = "--features / --hidden";
    ASSIGN_OR_RETURN(int64_t unit, MulAdd(c_.hidden, c_.features + 1, c_.features, m.size_flags));
    m.unit_numels = {unit};
    m.activation_values_per_row = 2 * c_.features + 3 * c_.hidden;
    m.data_bytes = FileBytes(c_.data);
    return m;
  }
  StatusOr<std::unique_ptr<TrainData>> LoadData(Communicator* comm) override {
    int64_t n = 0;
    StatusOr<std::vector<float>> x = ReadStandardised(c_.data, c_.features, &n);
    RETURN_IF_ERROR(AgreeOnStatus(comm, x.status(), "--data"));
    return std::unique_ptr<TrainData>(new Rows(c_.data, std::move(x).value(), n, c_.features));
  }
  Status Init(ShardedParameterStore* store, uint64_t seed) override {  // nn.Linear's defaults
    return store->InitFromFunction([&](const ParamLayout& p, float* out) {
      const double bound = p.name == "dec_bias" ? 0.0 : LinearInitBound(c_.features);
      InitUniform(out, p.numel, bound, seed, p.name);
      return Status::Ok();
    });
  }
  StatusOr<std::unique_ptr<ModelCompute>> Build(const ModelContext& ctx) override {
    if (ctx.store->device().is_cuda())
      return InvalidArgument("--device cuda: train_autoencoder computes on the CPU only");
    ASSIGN_OR_RETURN(UnitRunner runner, UnitRunner::Create(ctx.store, {{0, 0}, {}}));
    return std::unique_ptr<ModelCompute>(
        new Compute(std::move(runner), c_.features, c_.hidden, ctx.compute_threads));
  }
  nlohmann::json Hparams() const override { return Record(); }
  nlohmann::json Config() const override { return Record(); }
  nlohmann::json Record() const {
    return {{"model", "tied_autoencoder"},
            {"features", c_.features},
            {"hidden", c_.hidden},
            {"data", c_.data}};
  }

 private:
  const ae::Config c_;
};

}  // namespace ae

int main(int argc, char** argv) {
  ae::Config config;
  shardema::TrainerBinary binary;
  binary.flags.program = "train_autoencoder";
  binary.flags.description = "Trains a tied-weight autoencoder (examples/autoencoder).";
  binary.flags.add = [&config](CLI::App& app, shardema::TrainConfig&) {
    app.add_option("--data", config.data, "scikit-learn CSV of N rows")->capture_default_str();
    app.add_option("--features", config.features, "D")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_option("--hidden", config.hidden, "H")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
  };
  binary.config = &config;
  binary.make_model = [&config] { return std::make_unique<ae::Model>(config); };
  return shardema::TrainerMain(argc, argv, binary);
}
