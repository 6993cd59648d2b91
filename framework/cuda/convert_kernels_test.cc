// Device conversions against the host functions of framework/dtype.h, bit for bit.
#include "framework/cuda/convert_kernels.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "framework/device.h"
#include "framework/dtype.h"

namespace shardema {
namespace {

#if SHARDEMA_WITH_CUDA

class ConvertKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
    auto s = CreateStream(dev_);
    ASSERT_TRUE(s.ok()) << s.status();
    stream_ = *s;
  }
  void TearDown() override {
    if (stream_.native != nullptr) DestroyStream(stream_).IgnoreError();
  }

  // Converts host `src` (n elements of `from`) on the device, with the device pointers offset by
  // `offset` elements (offset 1 makes them misaligned and takes the scalar path), and returns the
  // raw bytes of the result.
  std::vector<uint8_t> OnDevice(const void* src, DType from, DType to, size_t n,
                                size_t offset = 0) {
    const size_t sb = DTypeSize(from), db = DTypeSize(to);
    auto dsrc = Buffer::Allocate((n + offset) * sb, dev_);
    auto ddst = Buffer::Allocate((n + offset) * db, dev_);
    EXPECT_TRUE(dsrc.ok() && ddst.ok());
    uint8_t* s = dsrc->as<uint8_t>() + offset * sb;
    uint8_t* d = ddst->as<uint8_t>() + offset * db;
    EXPECT_TRUE(CopyBytes(s, dev_, src, Device::Cpu(), n * sb, stream_).ok());
    Status st = LaunchConvert(s, from, d, to, n, stream_.native);
    EXPECT_TRUE(st.ok()) << st;
    std::vector<uint8_t> out(n * db);
    EXPECT_TRUE(CopyBytes(out.data(), Device::Cpu(), d, dev_, n * db, stream_).ok());
    EXPECT_TRUE(SynchronizeStream(stream_).ok());
    return out;
  }

  // Host reference with framework/dtype.h's ConvertBuffer.
  static std::vector<uint8_t> OnHost(const void* src, DType from, DType to, size_t n) {
    std::vector<uint8_t> out(n * DTypeSize(to));
    ConvertBuffer(src, from, out.data(), to, n);
    return out;
  }

  void ExpectSame(const void* src, DType from, DType to, size_t n) {
    const std::vector<uint8_t> want = OnHost(src, from, to, n);
    for (size_t offset : {size_t(0), size_t(1)}) {
      const std::vector<uint8_t> got = OnDevice(src, from, to, n, offset);
      ASSERT_EQ(got.size(), want.size());
      const size_t db = DTypeSize(to);
      for (size_t i = 0; i < n; ++i) {
        if (std::memcmp(&got[i * db], &want[i * db], db) != 0) {
          uint32_t in = 0, g = 0, w = 0;
          std::memcpy(&in, static_cast<const uint8_t*>(src) + i * DTypeSize(from), DTypeSize(from));
          std::memcpy(&g, &got[i * db], db);
          std::memcpy(&w, &want[i * db], db);
          FAIL() << DTypeName(from) << "->" << DTypeName(to) << " element " << i << " of " << n
                 << " (offset " << offset << "): input bits 0x" << std::hex << in << " device 0x"
                 << g << " host 0x" << w;
        }
      }
    }
  }

  const Device dev_ = Device::Cuda(0);
  Stream stream_;
};

std::vector<uint16_t> AllPatterns16() {
  std::vector<uint16_t> v(65536);
  for (uint32_t i = 0; i < 65536; ++i) v[i] = uint16_t(i);
  return v;
}

// f32 inputs that exercise rounding: every 16-bit upper half with random, tie (0x8000) and
// near-tie low halves, every f16-relevant exponent with random mantissas, and random bits.
std::vector<float> HardF32Inputs() {
  std::mt19937 rng(12345);
  std::vector<float> v;
  for (uint32_t hi = 0; hi < 65536; ++hi) {
    for (uint32_t lo : {uint32_t(rng() & 0xffff), 0x8000u, 0x7fffu, 0x8001u, 0u}) {
      v.push_back(F32FromBits((hi << 16) | lo));
    }
  }
  for (uint32_t exp = 96; exp < 160; ++exp) {  // f16 denormals .. overflow
    for (int k = 0; k < 512; ++k) {
      uint32_t man = rng() & 0x7fffffu;
      if (k < 8) man = (man & ~0x1fffu) | 0x1000u;  // f16 ties
      v.push_back(F32FromBits((uint32_t(rng() & 1) << 31) | (exp << 23) | man));
    }
  }
  for (int k = 0; k < 200000; ++k) v.push_back(F32FromBits(uint32_t(rng())));
  v.push_back(65504.f);
  v.push_back(65520.f);
  v.push_back(-65519.99f);
  return v;
}

TEST_F(ConvertKernelsTest, SixteenBitToF32AllPatterns) {
  const std::vector<uint16_t> p = AllPatterns16();
  ExpectSame(p.data(), DType::kBF16, DType::kF32, p.size());
  ExpectSame(p.data(), DType::kF16, DType::kF32, p.size());
}

TEST_F(ConvertKernelsTest, F32ToSixteenBitMatchesHostRounding) {
  const std::vector<float> f = HardF32Inputs();
  ExpectSame(f.data(), DType::kF32, DType::kBF16, f.size());
  ExpectSame(f.data(), DType::kF32, DType::kF16, f.size());
}

TEST_F(ConvertKernelsTest, BetweenSixteenBitTypesAndCopies) {
  const std::vector<uint16_t> p = AllPatterns16();
  ExpectSame(p.data(), DType::kBF16, DType::kF16, p.size());
  ExpectSame(p.data(), DType::kF16, DType::kBF16, p.size());
  ExpectSame(p.data(), DType::kBF16, DType::kBF16, p.size());
}

TEST_F(ConvertKernelsTest, OddSizesExerciseTheTail) {
  std::mt19937 rng(7);
  for (size_t n :
       {size_t(1), size_t(7), size_t(8), size_t(9), size_t(15), size_t(4096 * 256 * 8 + 5)}) {
    std::vector<float> f(n);
    for (float& x : f) x = std::uniform_real_distribution<float>(-1e5f, 1e5f)(rng);
    ExpectSame(f.data(), DType::kF32, DType::kBF16, n);
    ExpectSame(f.data(), DType::kF32, DType::kF16, n);
  }
}

TEST_F(ConvertKernelsTest, ArgumentErrors) {
  auto buf = Buffer::Allocate(64, dev_);
  ASSERT_TRUE(buf.ok());
  EXPECT_TRUE(LaunchConvert(nullptr, DType::kF32, nullptr, DType::kBF16, 0, stream_.native).ok());
  EXPECT_EQ(
      LaunchConvert(nullptr, DType::kF32, buf->data(), DType::kBF16, 4, stream_.native).code(),
      StatusCode::kInvalidArgument);
  // f32 -> bf16 over overlapping ranges would race.
  EXPECT_EQ(LaunchConvert(buf->data(), DType::kF32, buf->as<uint8_t>() + 8, DType::kBF16, 8,
                          stream_.native)
                .code(),
            StatusCode::kInvalidArgument);
  // Same pointer, same type: nothing to do.
  EXPECT_TRUE(
      LaunchConvert(buf->data(), DType::kF16, buf->data(), DType::kF16, 8, stream_.native).ok());
}

#else

TEST(ConvertKernelsTest, SkippedWithoutCuda) {
  GTEST_SKIP() << "built without --config=cuda: the conversion kernels are not compiled";
}

#endif

}  // namespace
}  // namespace shardema
