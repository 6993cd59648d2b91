#include "bench/roofline.h"

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "framework/self_communicator.h"

namespace shardema {
namespace bench {
namespace {

TEST(RecordingCommunicatorTest, RecordsEveryCollectiveAndForwardsIt) {
  SelfCommunicator self;
  RecordingCommunicator rec(&self);
  EXPECT_EQ(rec.world_size(), 1);
  EXPECT_EQ(rec.backend_name(), "self");
  std::vector<float> a = {1.f, 2.f, 3.f}, b(3, 0.f);
  CollectiveOptions avg;
  avg.op = ReduceOp::kAvg;
  avg.overwrite_send = true;
  ASSERT_TRUE(rec.AllGather(a.data(), b.data(), 3, DType::kF32).ok());
  EXPECT_EQ(b, a);  // forwarded: the inner communicator did the copy
  ASSERT_TRUE(rec.ReduceScatter(a.data(), b.data(), 2, DType::kF32, avg).ok());
  ASSERT_TRUE(rec.AllReduce(a.data(), b.data(), 1, DType::kBF16).ok());
  CollectiveOptions root;
  ASSERT_TRUE(rec.Broadcast(a.data(), 12, DType::kU8, root).ok());
  ASSERT_TRUE(rec.Barrier().ok());  // not a recorded collective
  const std::vector<RecordedCall>& c = rec.calls();
  ASSERT_EQ(c.size(), 4u);
  EXPECT_EQ(c[0].kind, CollectiveKind::kAllGather);
  EXPECT_EQ(c[0].count, 3u);
  EXPECT_EQ(c[1].kind, CollectiveKind::kReduceScatter);
  EXPECT_EQ(c[1].count, 2u);
  EXPECT_EQ(c[1].op, ReduceOp::kAvg);
  EXPECT_TRUE(c[1].overwrite_send);
  EXPECT_FALSE(c[0].overwrite_send);
  EXPECT_EQ(c[2].kind, CollectiveKind::kAllReduce);
  EXPECT_EQ(c[2].dtype, DType::kBF16);
  EXPECT_EQ(c[3].kind, CollectiveKind::kBroadcast);
  EXPECT_EQ(c[3].count, 12u);
  EXPECT_EQ(c[3].dtype, DType::kU8);
  EXPECT_STREQ(CollectiveName(c[3].kind), "broadcast");
  rec.Clear();
  EXPECT_TRUE(rec.calls().empty());
}

TEST(CollectiveReplayTest, IssuesTheRecordedCallsInOrder) {
  SelfCommunicator self;
  RecordingCommunicator rec(&self);
  std::vector<float> a(100, 1.f), b(100, 0.f);
  ASSERT_TRUE(rec.AllGather(a.data(), b.data(), 100, DType::kF32).ok());
  ASSERT_TRUE(rec.ReduceScatter(a.data(), b.data(), 50, DType::kF32).ok());
  ASSERT_TRUE(rec.AllReduce(a.data(), b.data(), 1, DType::kF32).ok());
  // Replayed through another recorder: the same calls come out, in the same order.
  RecordingCommunicator again(&self);
  StatusOr<CollectiveReplay> r = CollectiveReplay::Make(&again, rec.calls());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->size(), 3u);
  ASSERT_TRUE(r->Run().ok());
  ASSERT_TRUE(r->Run().ok());
  ASSERT_EQ(again.calls().size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(again.calls()[i].kind, rec.calls()[i % 3].kind) << i;
    EXPECT_EQ(again.calls()[i].count, rec.calls()[i % 3].count) << i;
  }
  // A call the inner communicator refuses fails the replay with its error.
  RecordedCall bad;
  bad.kind = CollectiveKind::kAllReduce;
  bad.count = 4;
  bad.dtype = DType::kU8;  // SelfCommunicator reduces floating types only
  StatusOr<CollectiveReplay> refused = CollectiveReplay::Make(&self, {bad});
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->Run().code(), StatusCode::kInvalidArgument);
}

TEST(OptimizerPartTest, EachRunIsOneAdamWStepWithItsEmas) {
  StatusOr<OptimizerPart> p = OptimizerPart::Make(1000, 2, 1);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(p->Run().ok());
  // AdamW's first step moves every weight by about lr (the update is sign(g) * lr), plus decay;
  // the EMA slots (starting at 0) take (1 - beta) of the new weight.
  const float m1 = p->master()[999];
  EXPECT_NEAR(m1, 0.1f * (1 - 1e-3f * 0.01f) - 1e-3f, 1e-6f);
  EXPECT_NEAR(p->ema(0)[0], 1e-3f * m1, 1e-8f);
  EXPECT_NEAR(p->ema(1)[0], 1e-4f * m1, 1e-9f);
  ASSERT_TRUE(p->Run().ok());
  EXPECT_LT(p->master()[0], m1);  // the second step moves on
}

TEST(RooflinePartsTest, BoundOverlapsCommunicationSerialAddsIt) {
  RooflineParts p;
  p.compute_ms = 40;
  p.comm_ms = 25;
  p.optim_ms = 10;
  EXPECT_DOUBLE_EQ(p.bound_ms(), 50);
  EXPECT_DOUBLE_EQ(p.serial_ms(), 75);
  p.comm_ms = 60;
  EXPECT_DOUBLE_EQ(p.bound_ms(), 70);
}

TEST(TimePartsTest, TimesEachPartMedianAndWritesTheJsonLine) {
  SelfCommunicator self;
  int calls[3] = {0, 0, 0};
  auto spin = [](double ms) {
    const auto end =
        std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(ms);
    while (std::chrono::steady_clock::now() < end) {}
  };
  StatusOr<RooflineParts> p = TimeParts(
      &self,
      [&] {
        ++calls[0];
        spin(4);
        return Status::Ok();
      },
      [&] {
        ++calls[1];
        return Status::Ok();
      },
      [&] {
        ++calls[2];
        spin(2);
        return Status::Ok();
      },
      3);
  ASSERT_TRUE(p.ok()) << p.status();
  for (int c : calls) EXPECT_EQ(c, 4);  // one warm-up and three timed runs each
  EXPECT_GE(p->compute_ms, 4.0);
  EXPECT_GE(p->optim_ms, 2.0);
  EXPECT_LT(p->comm_ms, p->compute_ms);
  const std::string j = RooflineJson(2, *p, "v3");
  EXPECT_NE(j.find("\"world\": 2"), std::string::npos) << j;
  EXPECT_NE(j.find("\"cpu_isa\": \"v3\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"bound_ms\""), std::string::npos) << j;
  // A failing part is the result.
  StatusOr<RooflineParts> failed = TimeParts(
      &self, [] { return Status::Ok(); }, [] { return Internal("boom"); },
      [] { return Status::Ok(); }, 1);
  EXPECT_EQ(failed.status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace bench
}  // namespace shardema
