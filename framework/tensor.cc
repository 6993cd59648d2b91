#include "framework/tensor.h"

#include <cstdint>
#include <sstream>

#include "framework/checked_math.h"

namespace shardema {

int64_t NumElements(const Shape& shape) {
  bool overflow = false;
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d == 0) return 0;  // a zero dim makes any product 0, even one that overflows first
    if (!overflow && !CheckedMul<int64_t>(n, d, &n)) overflow = true;
  }
  return overflow ? -1 : n;
}

StatusOr<int64_t> CheckedNumElements(const Shape& shape, const std::string& what) {
  for (int64_t d : shape) {
    if (d < 0) return InvalidArgument(what, ": negative dim in shape ", ShapeToString(shape));
  }
  const int64_t n = NumElements(shape);
  if (n < 0) {
    return InvalidArgument(what, ": shape ", ShapeToString(shape),
                           " has more elements than int64 holds (2^63 - 1)");
  }
  return n;
}

StatusOr<int64_t> CheckedNumBytes(const Shape& shape, DType dtype, const std::string& what) {
  ASSIGN_OR_RETURN(int64_t n, CheckedNumElements(shape, what));
  int64_t bytes = 0;
  if (!CheckedMul<int64_t>(n, int64_t(DTypeSize(dtype)), &bytes)) {
    return InvalidArgument(what, ": ", DTypeName(dtype), ShapeToString(shape), " is ", n,
                           " elements, more bytes than int64 holds");
  }
  return bytes;
}

size_t TensorView::nbytes() const {
  const int64_t n = numel();
  if (n < 0) return 0;
  size_t bytes = 0;
  if (!CheckedMul<size_t>(size_t(n), DTypeSize(dtype), &bytes)) return SIZE_MAX;
  return bytes;
}

std::string ShapeToString(const Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

std::string TensorView::ToString() const {
  return std::string(DTypeName(dtype)) + ShapeToString(shape) + "@" + device.ToString();
}

Status CheckTensor(const TensorView& t, const Shape& shape, DType dtype, const std::string& what) {
  if (t.shape != shape || t.dtype != dtype) {
    return InvalidArgument(what, ": expected ", DTypeName(dtype), ShapeToString(shape), ", found ",
                           DTypeName(t.dtype), ShapeToString(t.shape));
  }
  RETURN_IF_ERROR(CheckedNumBytes(t.shape, t.dtype, what).status());
  if (t.data == nullptr && t.numel() > 0) return InvalidArgument(what, ": null data pointer");
  return Status::Ok();
}

}  // namespace shardema
