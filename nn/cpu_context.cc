#include "nn/cpu_context.h"

#define EIGEN_USE_THREADS
#include <algorithm>
#include <unsupported/Eigen/CXX11/ThreadPool>

namespace shardema::nn {

struct CpuContext::Pool {
  explicit Pool(int n) : pool(n) {}
  Eigen::ThreadPool pool;
};

CpuContext::CpuContext(int threads) : threads_(std::max(threads, 1)) {
  if (threads_ > 1) pool_ = std::make_unique<Pool>(threads_ - 1);
}

CpuContext::~CpuContext() = default;

void CpuContext::ParallelForRaw(int64_t count, int64_t grain, ChunkFn chunk, void* arg) const {
  auto fn = [chunk, arg](int64_t begin, int64_t end) { chunk(arg, begin, end); };
  if (count <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t chunks = std::min<int64_t>(threads_, std::max<int64_t>(count / grain, 1));
  if (chunks <= 1 || pool_ == nullptr) {
    fn(0, count);
    return;
  }
  // Chunk j covers [j * count / chunks, (j + 1) * count / chunks): fixed for (count, chunks).
  Eigen::Barrier done(static_cast<unsigned>(chunks - 1));
  for (int64_t j = 1; j < chunks; ++j) {
    const int64_t begin = j * count / chunks, end = (j + 1) * count / chunks;
    pool_->pool.Schedule([&fn, &done, begin, end] {
      fn(begin, end);
      done.Notify();
    });
  }
  fn(0, count / chunks);
  done.Wait();
}

}  // namespace shardema::nn
