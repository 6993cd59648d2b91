#include "nn/precision.h"

namespace shardema::nn {

const float* AsF32(const void* data, DType t, int64_t n, std::vector<float>* scratch) {
  if (t == DType::kF32) return static_cast<const float*>(data);
  scratch->resize(size_t(n));
  ConvertBuffer(data, t, scratch->data(), DType::kF32, size_t(n));
  return scratch->data();
}

}  // namespace shardema::nn
