// GpuOpTimes: the per-name sums and the table (no GPU needed); on a GPU, device copies timed as
// named ops, a flush that replaces the totals, and the errors ScopedGpuOp cannot return.
#include "framework/cuda/gpu_op_times.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "framework/device.h"

namespace shardema {
namespace {

TEST(GpuOpTimesTest, SumsPerNameLargestFirstAndFormats) {
  const std::vector<GpuOpTotal> t =
      SumOpTimes({{"gemm", 2.0}, {"attention", 5.0}, {"gemm", 4.0}, {"ln", 1.0}});
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].name, "gemm");
  EXPECT_DOUBLE_EQ(t[0].ms, 6.0);
  EXPECT_EQ(t[0].count, 2);
  EXPECT_EQ(t[1].name, "attention");
  EXPECT_EQ(t[2].name, "ln");
  const std::string table = FormatOpTimes(t, 20.0);
  EXPECT_NE(table.find("gemm"), std::string::npos) << table;
  EXPECT_NE(table.find("30.0%"), std::string::npos) << table;  // 6 of 20 ms
  EXPECT_NE(table.find("other"), std::string::npos) << table;
  EXPECT_NE(table.find("40.0%"), std::string::npos) << table;  // 20 - 12 ms
  EXPECT_EQ(FormatOpTimes(t, 0).find("other"), std::string::npos);
}

TEST(GpuOpTimesTest, CreateNeedsACudaStream) {
  EXPECT_EQ(GpuOpTimes::Create(Stream{Device::Cpu()}).status().code(),
            StatusCode::kInvalidArgument);
  if (CudaDeviceCount() > 0) return;
  EXPECT_EQ(GpuOpTimes::Create(Stream{Device::Cuda(0)}).status().code(), StatusCode::kUnavailable);
}

TEST(GpuOpTimesTest, TimesNamedOpsOnTheDevice) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  const Device dev = Device::Cuda(0);
  StatusOr<Stream> s = CreateStream(dev);
  ASSERT_TRUE(s.ok()) << s.status();
  const size_t bytes = size_t(64) << 20;
  StatusOr<Buffer> a = Buffer::Allocate(bytes, dev), b = Buffer::Allocate(bytes, dev);
  ASSERT_TRUE(a.ok() && b.ok());
  auto times = GpuOpTimes::Create(*s);
  ASSERT_TRUE(times.ok()) << times.status();
  GpuOpTimes* t = times->get();
  auto copy = [&]() { ASSERT_TRUE(CopyBytes(b->data(), dev, a->data(), dev, bytes, *s).ok()); };
  copy();  // untimed: the buffers' first touch is no part of the ordering below
  {
    ScopedGpuOp op(t, "one copy");
    copy();
    op.Next("two copies");
    copy();
  }
  {
    ScopedGpuOp op(t, "two copies");
    copy();
  }
  {
    ScopedGpuOp op(nullptr, "ignored");
    copy();
  }
  ASSERT_TRUE(t->Flush().ok());
  ASSERT_EQ(t->Totals().size(), 2u);
  EXPECT_EQ(t->Totals()[0].name, "two copies");
  EXPECT_EQ(t->Totals()[0].count, 2);
  EXPECT_GT(t->Totals()[1].ms, 0.0);
  // The next flush replaces the totals; a flush with nothing recorded keeps them.
  {
    ScopedGpuOp op(t, "again");
    copy();
  }
  ASSERT_TRUE(t->Flush().ok());
  ASSERT_EQ(t->Totals().size(), 1u);
  EXPECT_EQ(t->Totals()[0].name, "again");
  ASSERT_TRUE(t->Flush().ok());
  EXPECT_EQ(t->Totals().size(), 1u);
  // Nesting and a lone End are reported by the next Flush; the one after is clean.
  t->Begin("outer");
  t->Begin("inner");
  t->End();
  t->End();
  const Status nested = t->Flush();
  EXPECT_EQ(nested.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(nested.message().find("'inner' begins inside op 'outer'"), std::string::npos) << nested;
  EXPECT_TRUE(t->Flush().ok());
  times->reset();
  ASSERT_TRUE(DestroyStream(*s).ok());
}

}  // namespace
}  // namespace shardema
