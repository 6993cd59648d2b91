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

}  // namespace
}  // namespace shardema
