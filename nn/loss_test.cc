// Losses: gradients against finite differences, known values, errors, thread invariance.
#include "nn/loss.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "nn/grad_check.h"

namespace shardema::nn {
namespace {

using testing::ExpectGradient;
using testing::Uniform;

TEST(LossTest, CrossEntropyGradientMatchesFiniteDifferences) {
  CpuContext ctx;
  const int64_t rows = 5, classes = 7;
  auto y = Uniform(size_t(rows * classes), 21, -2.f, 2.f);
  std::vector<int64_t> t = {0, 6, 3, 3, 1};
  std::vector<float> dy(y.size());
  ASSERT_TRUE(CrossEntropyLoss(ctx, y.data(), t.data(), rows, classes, 4.0, dy.data()).ok());
  auto loss = [&] {
    return *CrossEntropyLoss(ctx, y.data(), t.data(), rows, classes, 4.0, nullptr);
  };
  ExpectGradient(loss, &y, dy, 1e-2f, 1e-4, 1e-3, "dlogits");
}

TEST(LossTest, MseGradientMatchesFiniteDifferences) {
  CpuContext ctx;
  auto y = Uniform(12, 22), t = Uniform(12, 23);
  std::vector<float> dy(12);
  ASSERT_TRUE(MseLoss(ctx, y.data(), t.data(), 12, 12.0, dy.data()).ok());
  auto loss = [&] { return *MseLoss(ctx, y.data(), t.data(), 12, 12.0, nullptr); };
  ExpectGradient(loss, &y, dy, 1e-2f, 1e-4, 1e-3, "dy");
}

TEST(LossTest, KnownValuesAndErrors) {
  CpuContext ctx;
  // Logits [0, 0] with target 1: log 2; normalised by 2 rows of which this is one.
  float y[2] = {0.f, 0.f}, dy[2];
  int64_t target = 1;
  StatusOr<double> l = CrossEntropyLoss(ctx, y, &target, 1, 2, 2.0, dy);
  ASSERT_TRUE(l.ok());
  EXPECT_NEAR(*l, std::log(2.0) / 2, 1e-12);
  EXPECT_NEAR(dy[0], 0.25, 1e-7);
  EXPECT_NEAR(dy[1], -0.25, 1e-7);
  int64_t bad = 2;
  StatusOr<double> e = CrossEntropyLoss(ctx, y, &bad, 1, 2, 1.0, dy);
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("label 2 of row 0"), std::string::npos) << e.status();
  EXPECT_EQ(CrossEntropyLoss(ctx, y, &target, 1, 2, 0.0, dy).status().code(),
            StatusCode::kInvalidArgument);
  float t[2] = {1.f, 2.f};
  EXPECT_NEAR(*MseLoss(ctx, y, t, 2, 2.0, dy), 2.5, 1e-12);
  EXPECT_FLOAT_EQ(dy[1], -2.f);
  EXPECT_FALSE(MseLoss(ctx, y, t, 2, -1.0, dy).ok());
}

TEST(LossTest, CrossEntropySameBitsAtEveryThreadCount) {
  const int64_t rows = 301, classes = 256;
  auto y = Uniform(size_t(rows * classes), 24, -5.f, 5.f);
  std::vector<int64_t> t(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) t[size_t(r)] = (r * 37) % classes;
  std::vector<float> d1(y.size()), d4(y.size());
  CpuContext one(1), four(4);
  const double l1 =
      *CrossEntropyLoss(one, y.data(), t.data(), rows, classes, double(rows), d1.data());
  const double l4 =
      *CrossEntropyLoss(four, y.data(), t.data(), rows, classes, double(rows), d4.data());
  EXPECT_EQ(l1, l4);
  EXPECT_EQ(d1, d4);
}

}  // namespace
}  // namespace shardema::nn
