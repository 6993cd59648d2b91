// Compiled once per ISA (nn/isa_kernels.h): SHARDEMA_ISA_NS names the namespace.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>

#include "nn/isa_kernels.h"

namespace shardema::nn::SHARDEMA_ISA_NS {
namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kGeluCubic = 0.044715f;
// Elements per chunk below which splitting is not worth a thread.
constexpr int64_t kGrain = 1 << 14;

using ArrC = Eigen::Map<const Eigen::ArrayXf>;
using Arr = Eigen::Map<Eigen::ArrayXf>;

// Calls fn(begin, length, scratch) over [i0, i1) in cache-sized blocks, with one scratch array
// (the tanh values) reused across blocks.
template <typename Fn>
void ForEachBlock(int64_t i0, int64_t i1, Fn fn) {
  constexpr int64_t kBlock = 4096;
  Eigen::ArrayXf scratch;
  for (int64_t b0 = i0; b0 < i1; b0 += kBlock) fn(b0, std::min(kBlock, i1 - b0), scratch);
}

}  // namespace

void ActivationForward(const CpuContext& ctx, Activation act, const float* z, float* a, int64_t n,
                       float* tanh_out) {
  ctx.ParallelFor(n, kGrain, [&](int64_t i0, int64_t i1) {
    switch (act) {
      case Activation::kRelu:
        for (int64_t i = i0; i < i1; ++i) a[i] = z[i] > 0.f ? z[i] : 0.f;
        break;
      case Activation::kGelu:
        for (int64_t i = i0; i < i1; ++i) {
          double v = z[i];
          a[i] = float(0.5 * v * (1.0 + std::erf(v * kInvSqrt2)));
        }
        break;
      case Activation::kGeluTanh:
        ForEachBlock(i0, i1, [&](int64_t b0, int64_t len, Eigen::ArrayXf& scratch) {
          ArrC x(z + b0, len);
          auto gelu = [&](auto&& t) {
            t = (kSqrt2OverPi * x * (1.f + kGeluCubic * x * x)).tanh();
            Arr(a + b0, len) = 0.5f * x * (1.f + t);
          };
          if (tanh_out != nullptr) {
            gelu(Arr(tanh_out + b0, len));  // the tanh goes straight to where it is kept
          } else {
            gelu(scratch);
          }
        });
        break;
    }
  });
}

void ActivationBackward(const CpuContext& ctx, Activation act, const float* z, const float* da,
                        float* dz, int64_t n, const float* tanh_in) {
  ctx.ParallelFor(n, kGrain, [&](int64_t i0, int64_t i1) {
    switch (act) {
      case Activation::kRelu:
        for (int64_t i = i0; i < i1; ++i) dz[i] = z[i] > 0.f ? da[i] : 0.f;
        break;
      case Activation::kGelu:
        for (int64_t i = i0; i < i1; ++i) {
          double v = z[i];
          double cdf = 0.5 * (1.0 + std::erf(v * kInvSqrt2));
          double pdf = kInvSqrt2Pi * std::exp(-0.5 * v * v);
          dz[i] = float(da[i] * (cdf + v * pdf));
        }
        break;
      case Activation::kGeluTanh:
        ForEachBlock(i0, i1, [&](int64_t b0, int64_t len, Eigen::ArrayXf& scratch) {
          ArrC x(z + b0, len);
          auto grad = [&](const auto& t) {
            Arr(dz + b0, len) =
                ArrC(da + b0, len) * (0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kSqrt2OverPi *
                                                             (1.f + 3.f * kGeluCubic * x * x));
          };
          if (tanh_in != nullptr) {
            grad(ArrC(tanh_in + b0, len));
          } else {
            scratch = (kSqrt2OverPi * x * (1.f + kGeluCubic * x * x)).tanh();
            grad(scratch);
          }
        });
        break;
    }
  });
}

}  // namespace shardema::nn::SHARDEMA_ISA_NS
