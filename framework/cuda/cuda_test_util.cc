#include "framework/cuda/cuda_test_util.h"

#include <chrono>
#include <cmath>
#include <sstream>
#include <thread>
#include <utility>

#if SHARDEMA_WITH_CUDA
#include <cuda_runtime.h>

#include "framework/cuda_error.h"
#endif

namespace shardema {
namespace cuda_test {

void CudaTest::SetUp() {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device visible";
  StatusOr<OwnedStream> s = OwnedStream::Create(dev_);
  ASSERT_TRUE(s.ok()) << s.status();
  stream_ = std::move(s).value();
}

void CudaTest::TearDown() { EXPECT_TRUE(stream_.Reset().ok()); }

namespace {
struct GateState {
  std::shared_ptr<std::atomic<bool>> open;
  double max_seconds;
};
}  // namespace

Status StreamGate::Close(Stream stream, double max_seconds) {
#if SHARDEMA_WITH_CUDA
  Open();
  open_ = std::make_shared<std::atomic<bool>>(false);
  auto* state = new GateState{open_, max_seconds};
  auto wait = [](void* p) {
    std::unique_ptr<GateState> g(static_cast<GateState*>(p));
    const auto end =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(g->max_seconds);
    while (!g->open->load() && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  };
  RETURN_IF_ERROR(SetCurrentDevice(stream.device));
  cudaError_t e = cudaLaunchHostFunc(static_cast<cudaStream_t>(stream.native), wait, state);
  if (e != cudaSuccess) {
    delete state;
    return CudaStatus(e, "cudaLaunchHostFunc (stream gate)");
  }
  return Status::Ok();
#else
  (void)stream;
  (void)max_seconds;
  return Unavailable("StreamGate: built without --config=cuda");
#endif
}

void StreamGate::Open() {
  if (open_ != nullptr) open_->store(true);
  open_.reset();
}

std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::string CompareBits(const std::string& what, const std::vector<float>& got,
                        const std::vector<float>& want) {
  if (got.size() != want.size()) {
    return what + ": size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  }
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool same = std::memcmp(&got[i], &want[i], sizeof(float)) == 0 ||
                      (std::isnan(got[i]) && std::isnan(want[i]));
    if (!same && bad++ == 0) first = i;
  }
  if (bad == 0) return "";
  std::ostringstream os;
  os.precision(9);
  os << what << ": " << bad << " of " << got.size() << " elements differ; first at " << first
     << ": device " << got[first] << " expected " << want[first];
  return os.str();
}

std::string CompareBits16(const std::string& what, const std::vector<uint16_t>& got,
                          const std::vector<uint16_t>& want) {
  if (got.size() != want.size()) {
    return what + ": size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  }
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i] && bad++ == 0) first = i;
  }
  if (bad == 0) return "";
  std::ostringstream os;
  os << what << ": " << bad << " of " << got.size() << " elements differ; first at " << first
     << ": device 0x" << std::hex << got[first] << " expected 0x" << want[first];
  return os.str();
}

}  // namespace cuda_test
}  // namespace shardema
