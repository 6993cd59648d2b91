#include "framework/tensor.h"

#include <sstream>

namespace shardema {

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
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
  if (t.data == nullptr && t.numel() > 0) return InvalidArgument(what, ": null data pointer");
  return Status::Ok();
}

}  // namespace shardema
