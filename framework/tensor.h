// TensorView: a non-owning view of a dense, row-major tensor (pointer, shape, dtype, device).
//
// Views never own or free memory; whoever made the buffer keeps it alive while views exist.
// Threading: a view is a value; concurrent writes through views of the same memory are the
// caller's to order.
#ifndef SHARDEMA_FRAMEWORK_TENSOR_H_
#define SHARDEMA_FRAMEWORK_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "framework/device.h"
#include "framework/dtype.h"
#include "framework/status.h"

namespace shardema {

using Shape = std::vector<int64_t>;

// Product of the dims (1 for a scalar shape {}); dims must be >= 0.
int64_t NumElements(const Shape& shape);
// "[3, 4]".
std::string ShapeToString(const Shape& shape);

struct TensorView {
  void* data = nullptr;
  Shape shape;
  DType dtype = DType::kF32;
  Device device;

  int64_t numel() const { return NumElements(shape); }
  size_t nbytes() const { return size_t(numel()) * DTypeSize(dtype); }
  template <typename T> T* as() const { return static_cast<T*>(data); }
  // "f32[3, 4]@cpu".
  std::string ToString() const;
};

// Checks that `t` has exactly `shape` and `dtype`; the error names `what`, the expected and the
// found shape/dtype.
Status CheckTensor(const TensorView& t, const Shape& shape, DType dtype, const std::string& what);

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_TENSOR_H_
