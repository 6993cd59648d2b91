// Test helpers: random buffers and finite-difference checks of analytic gradients.
//
// A layer's backward is checked through the scalar L = sum_i out[i] * r[i] for a fixed random r
// (so dL/dout = r, fed to the backward as dout): each parameter/input element x_j is moved by
// +-h and (L(x + h e_j) - L(x - h e_j)) / 2h, evaluated with the f32 forward and summed in
// double, must match the analytic dL/dx_j within atol + rtol * |fd|.
#ifndef SHARDEMA_NN_GRAD_CHECK_H_
#define SHARDEMA_NN_GRAD_CHECK_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace shardema::nn::testing {

// n uniform values in [lo, hi) from a seeded generator.
std::vector<float> Uniform(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f);

// sum_i out[i] * r[i] in double.
double Dot(const std::vector<float>& out, const std::vector<float>& r);

// Compares `analytic` with central differences of `loss` over every element of *x (restored
// afterwards); reports failures through gtest (at most 10 per call), naming `what` and the index.
void ExpectGradient(const std::function<double()>& loss, std::vector<float>* x,
                    const std::vector<float>& analytic, float h, double atol, double rtol,
                    const std::string& what);

// Largest |got - want| / max(|want|, floor) (infinity for a NaN).
double MaxRelError(const std::vector<float>& got, const std::vector<float>& want, double floor);
// gelu_tanh in f32 against a double evaluation of the same formula. Both directions compute
// 1 + tanh(u) and 1 - tanh(u)^2 (u = sqrt(2/pi) (x + 0.044715 x^3)), which cancel where |x| is
// large, so an f32 implementation with a tanh good to a few ulp is only accurate relative to the
// terms it adds: the bounds are 8 eps (|a| + |x|) for a and
// 16 eps (1 + |x| (1 + 3 * 0.044715 x^2)) |da| + 4 eps |dz| for dz (eps = 2^-23). Returns the
// largest error / bound over both outputs (<= 1 passes; infinity for a NaN).
double GeluTanhErrorRatio(const std::vector<float>& z, const std::vector<float>& da,
                          const std::vector<float>& a, const std::vector<float>& dz);

}  // namespace shardema::nn::testing

#endif  // SHARDEMA_NN_GRAD_CHECK_H_
