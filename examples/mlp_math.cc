#include "examples/mlp_math.h"

#include <Eigen/Core>
#include <cmath>

namespace shardema::mlp {
namespace {
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapC = Eigen::Map<const RowMat>;
using Map = Eigen::Map<RowMat>;
constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
}  // namespace

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

void LinearForward(const float* x, const float* w, const float* b, int64_t rows, int64_t in,
                   int64_t out, float* z) {
  Map Z(z, rows, out);
  Z.noalias() = MapC(x, rows, in) * MapC(w, out, in).transpose();
  Z.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(b, out);
}

void LinearBackward(const float* x, const float* w, const float* dz, int64_t rows, int64_t in,
                    int64_t out, float* dw, float* db, float* dx) {
  MapC DZ(dz, rows, out);
  Map(dw, out, in).noalias() = DZ.transpose() * MapC(x, rows, in);
  Eigen::Map<Eigen::RowVectorXf>(db, out) = DZ.colwise().sum();
  if (dx != nullptr) Map(dx, rows, in).noalias() = DZ * MapC(w, out, in);
}

void ActivationForward(Activation act, const float* z, float* a, int64_t n) {
  if (act == Activation::kRelu) {
    for (int64_t i = 0; i < n; ++i) a[i] = z[i] > 0.f ? z[i] : 0.f;
  } else {
    for (int64_t i = 0; i < n; ++i) {
      double v = z[i];
      a[i] = float(0.5 * v * (1.0 + std::erf(v * kInvSqrt2)));
    }
  }
}

void ActivationBackward(Activation act, const float* z, const float* da, float* dz, int64_t n) {
  if (act == Activation::kRelu) {
    for (int64_t i = 0; i < n; ++i) dz[i] = z[i] > 0.f ? da[i] : 0.f;
  } else {
    for (int64_t i = 0; i < n; ++i) {
      double v = z[i];
      double cdf = 0.5 * (1.0 + std::erf(v * kInvSqrt2));
      double pdf = kInvSqrt2Pi * std::exp(-0.5 * v * v);
      dz[i] = float(da[i] * (cdf + v * pdf));
    }
  }
}

StatusOr<double> LossForward(Loss loss, const float* y, const float* targets, const int64_t* labels,
                             int64_t rows, int64_t out, int64_t global_rows, float* dy) {
  double total = 0;
  if (loss == Loss::kMse) {
    const double norm = double(global_rows) * double(out);
    for (int64_t i = 0; i < rows * out; ++i) {
      double d = double(y[i]) - double(targets[i]);
      total += d * d;
      dy[i] = float(2.0 * d / norm);
    }
    return total / norm;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = y + r * out;
    int64_t label = labels[r];
    if (label < 0 || label >= out) {
      return InvalidArgument("cross_entropy: label ", label, " of row ", r, " is outside [0, ", out, ")");
    }
    double mx = row[0];
    for (int64_t c = 1; c < out; ++c) mx = std::max(mx, double(row[c]));
    double sum = 0;
    for (int64_t c = 0; c < out; ++c) sum += std::exp(double(row[c]) - mx);
    double lse = mx + std::log(sum);
    total += lse - double(row[label]);
    for (int64_t c = 0; c < out; ++c) {
      double p = std::exp(double(row[c]) - lse);
      dy[r * out + c] = float((p - (c == label ? 1.0 : 0.0)) / double(global_rows));
    }
  }
  return total / double(global_rows);
}

}  // namespace shardema::mlp
