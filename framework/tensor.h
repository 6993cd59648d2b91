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

// Product of the dims (1 for a scalar shape {}), computed without overflow: -1 when a dim is
// negative or the product does not fit in int64 (a shape from untrusted input is checked with
// CheckedNumElements first).
int64_t NumElements(const Shape& shape);
// The same product, or kInvalidArgument naming `what` and the shape for a negative dim or a
// product beyond int64.
StatusOr<int64_t> CheckedNumElements(const Shape& shape, const std::string& what);
// NumElements(shape) * DTypeSize(dtype) in bytes; kInvalidArgument as above, or when the byte
// count does not fit in int64.
StatusOr<int64_t> CheckedNumBytes(const Shape& shape, DType dtype, const std::string& what);
// "[3, 4]".
std::string ShapeToString(const Shape& shape);

struct TensorView {
  void* data = nullptr;
  Shape shape;
  DType dtype = DType::kF32;
  Device device;

  int64_t numel() const { return NumElements(shape); }
  // numel() * itemsize; 0 for an invalid shape (numel() < 0), SIZE_MAX when the product does not
  // fit (an allocation of it fails instead of being short). CheckTensor refuses both.
  size_t nbytes() const;
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
  // "f32[3, 4]@cpu".
  std::string ToString() const;
};

// Checks that `t` has exactly `shape` and `dtype`, a valid shape (CheckedNumBytes) and data for a
// non-empty shape; the error names `what`, the expected and the found shape/dtype.
Status CheckTensor(const TensorView& t, const Shape& shape, DType dtype, const std::string& what);

}  // namespace shardema

#endif  // SHARDEMA_FRAMEWORK_TENSOR_H_
