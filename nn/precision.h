// The precision convention of the nn/ layers (what `--precision` changes), and the one helper the
// CPU side needs for it.
//
// The sharded store hands a gathered unit's parameters over in the compute dtype (f32, bf16 or
// f16); gradients are written in f32; activations are always f32 buffers; all arithmetic
// (accumulation, softmax, normalisation, losses) is f32 or wider.
//   CPU (Eigen): the parameters are widened exactly to f32 (AsF32 below) and every GEMM runs on
//     f32 operands: a bf16 run computes with the bf16-rounded weights and f32 activations.
//   CUDA (nn/cuda): GEMM operands are in the compute dtype: the gathered weights as they are, the
//     activation operand (x, dy, attention's q/k/v/probabilities/gradients) rounded to the compute
//     dtype (ties to even, framework/dtype.h) just before the GEMM; cuBLAS accumulates in f32 and
//     writes f32 (nn/cuda/linear.h). Element-wise kernels read bf16/f16 parameters (LayerNorm
//     weight/bias, biases, embedding tables) widened to f32. A model may instead widen the
//     weights and keep f32 operands (the CPU's rule): GptModelCuda does at f16 (no loss scaling),
//     and takes the 16-bit operands at bf16 (PyTorch autocast); MlpModelCuda keeps dz f32 at f16.
// So f32 runs agree across devices to f32 rounding, and bf16/f16 runs to the operand rounding.
#ifndef SHARDEMA_NN_PRECISION_H_
#define SHARDEMA_NN_PRECISION_H_

#include <cstdint>
#include <vector>

#include "framework/dtype.h"

namespace shardema::nn {

// `data` (n elements of dtype t) as f32: `data` itself for f32, else widened (exactly) into
// *scratch, which is resized, and scratch->data() returned. Thread-safe for distinct scratch.
const float* AsF32(const void* data, DType t, int64_t n, std::vector<float>* scratch);

}  // namespace shardema::nn

#endif  // SHARDEMA_NN_PRECISION_H_
