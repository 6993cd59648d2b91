#include "examples/mlp_math.h"

#include "nn/cpu_context.h"
#include "nn/loss.h"

namespace shardema::mlp {

StatusOr<Activation> ParseActivation(const std::string& s) {
  if (s == "relu") return Activation::kRelu;
  if (s == "gelu") return Activation::kGelu;
  return InvalidArgument("--activation: unknown activation '", s, "' (expected relu or gelu)");
}

StatusOr<Loss> ParseLoss(const std::string& s) {
  if (s == "mse") return Loss::kMse;
  if (s == "cross_entropy") return Loss::kCrossEntropy;
  return InvalidArgument("--loss: unknown loss '", s, "' (expected mse or cross_entropy)");
}

StatusOr<double> LossForward(Loss loss, const float* y, const float* targets, const int64_t* labels,
                             int64_t rows, int64_t out, int64_t global_rows, float* dy) {
  const nn::CpuContext serial;
  if (loss == Loss::kMse) {
    return nn::MseLoss(serial, y, targets, rows * out, double(global_rows) * double(out), dy);
  }
  return nn::CrossEntropyLoss(serial, y, labels, rows, out, double(global_rows), dy);
}

}  // namespace shardema::mlp
