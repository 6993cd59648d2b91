// StepLoss on the host path at 1-3 ranks: the step's loss is the mean over the ranks of each
// rank's f32-rounded mean over its micro-batches (the trainer's definition), known at once; calls
// out of order and bad set-ups are refused. The device path runs in the GPU trainer test
// (examples/cuda/trainer_cuda_test.cc: CUDA losses equal to the CPU's, 0 host waits on quiet
// steps).
#include "train/step_loss.h"

#include <gtest/gtest.h>

#include "tests/test_world.h"

namespace shardema {
namespace {

using ::shardema::testing::World;

TEST(StepLossTest, HostLossIsTheMeanOverMicroBatchesThenRanks) {
  auto loss = StepLoss::Create(nullptr, World(), nullptr, Stream{});
  ASSERT_TRUE(loss.ok()) << loss.status();
  const int world = World()->world_size(), rank = World()->rank();
  auto micro_loss = [](int r, int64_t m) { return 1.0 / 3.0 + r + 0.25 * double(m); };
  for (int64_t accum : {1, 3, 2}) {
    for (int64_t m = 0; m < accum; ++m) {
      ASSERT_TRUE((*loss)->Add(micro_loss(rank, m), m, accum).ok());
    }
    StatusOr<std::optional<double>> got = (*loss)->Finish(accum);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(got->has_value());
    double want = 0;
    for (int r = 0; r < world; ++r) {
      double sum = 0;
      for (int64_t m = 0; m < accum; ++m) sum += micro_loss(r, m);
      want += double(float(sum / double(accum)));
    }
    want /= world;
    EXPECT_NEAR(**got, want, 1e-6 * want) << "grad_accum " << accum;
  }
  EXPECT_EQ((*loss)->unread(), 0);
  EXPECT_EQ((*loss)->ReadOldest(false).status().code(), StatusCode::kFailedPrecondition);
}

TEST(StepLossTest, OutOfOrderCallsAndBadSetUpsAreRefused) {
  auto loss = StepLoss::Create(nullptr, World(), nullptr, Stream{});
  ASSERT_TRUE(loss.ok());
  EXPECT_EQ((*loss)->Add(1.0, 1, 2).code(), StatusCode::kFailedPrecondition);  // micro 0 first
  EXPECT_EQ((*loss)->Add(1.0, 0, 0).code(), StatusCode::kFailedPrecondition);  // of 0
  ASSERT_TRUE((*loss)->Add(1.0, 0, 2).ok());
  Status early = (*loss)->Finish(2).status();  // one of two micro-batches
  EXPECT_EQ(early.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(early.message().find("1 of 2"), std::string::npos) << early;

  EXPECT_EQ(StepLoss::Create(nullptr, nullptr, nullptr, Stream{}).status().code(),
            StatusCode::kInvalidArgument);
  const double device_loss = 0;  // only its address matters here
  EXPECT_EQ(StepLoss::Create(&device_loss, World(), nullptr, Stream{}).status().code(),
            StatusCode::kInvalidArgument);  // a device loss on a CPU stream
  EXPECT_EQ(StepLoss::Create(&device_loss, World(), nullptr, Stream{Device::Cuda(0), nullptr})
                .status()
                .code(),
            StatusCode::kInvalidArgument);  // without a device communicator
}

}  // namespace
}  // namespace shardema
