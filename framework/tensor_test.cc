#include "framework/tensor.h"

#include <gtest/gtest.h>

namespace shardema {
namespace {

TEST(TensorTest, ShapesAndViews) {
  EXPECT_EQ(NumElements({}), 1);
  EXPECT_EQ(NumElements({3, 0, 2}), 0);
  EXPECT_EQ(ShapeToString({3, 4}), "[3, 4]");
  float data[12] = {};
  TensorView v{data, {3, 4}, DType::kBF16, Device::Cpu()};
  EXPECT_EQ(v.numel(), 12);
  EXPECT_EQ(v.nbytes(), 24u);
  EXPECT_EQ(v.ToString(), "bf16[3, 4]@cpu");
  EXPECT_TRUE(CheckTensor(v, {3, 4}, DType::kBF16, "w").ok());
  Status s = CheckTensor(v, {4, 3}, DType::kF32, "layers.0.weight");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "layers.0.weight: expected f32[4, 3], found bf16[3, 4]");
  TensorView null{nullptr, {2}, DType::kF32, Device::Cpu()};
  EXPECT_FALSE(CheckTensor(null, {2}, DType::kF32, "x").ok());
}

TEST(TensorTest, OverflowingShapesAreRefusedWithoutUndefinedBehaviour) {
  const int64_t big = int64_t(1) << 32;
  EXPECT_EQ(NumElements({big, big}), -1);  // 2^64: was a signed-overflow wrap to 0
  EXPECT_EQ(NumElements({big, big, 0}), 0);
  EXPECT_EQ(NumElements({3, -1}), -1);
  EXPECT_EQ(NumElements({int64_t(1) << 31, int64_t(1) << 31}), int64_t(1) << 62);
  Status s = CheckedNumElements({big, big}, "tensor 'w'").status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(
      s.message(),
      "tensor 'w': shape [4294967296, 4294967296] has more elements than int64 holds (2^63 - 1)");
  EXPECT_EQ(CheckedNumElements({2, -3}, "x").status().message(),
            "x: negative dim in shape [2, -3]");
  EXPECT_EQ(CheckedNumElements({2, 3}, "x").value(), 6);
  EXPECT_EQ(CheckedNumBytes({2, 3}, DType::kBF16, "x").value(), 12);
  EXPECT_FALSE(CheckedNumBytes({int64_t(1) << 62}, DType::kF32, "x").ok());  // 2^64 bytes
  float one = 0;
  TensorView huge{&one, {big, big}, DType::kF32, Device::Cpu()};
  EXPECT_EQ(huge.numel(), -1);
  EXPECT_EQ(huge.nbytes(), 0u);
  EXPECT_EQ(CheckTensor(huge, huge.shape, DType::kF32, "h").code(), StatusCode::kInvalidArgument);
  TensorView wide{&one, {int64_t(1) << 62}, DType::kF32, Device::Cpu()};
  EXPECT_EQ(wide.nbytes(), SIZE_MAX);
}

}  // namespace
}  // namespace shardema
